"""Runs every test file in a pytest process of its own, two at a time:
`make test-slow`'s runner.

Why not xdist's workers: a worker lives for the whole run, and TF never
gives back what each exported model takes (every TFLite conversion and
ONNX export grows the process by about 0.3 GB, and loaded SavedModels keep
their functions in the eager context). The slow tier's workers reached 12 GB
and the kernel's OOM killer took one, and xdist then waited forever for it.
A process per file gives everything back when the file ends; module
fixtures stay shared inside a file, as with `--dist loadfile`.

  python -m tests.by_file -m slow tests     # pytest's own selection flags
  python -m tests.by_file -j 1 -m slow tests/test_tflite.py

Files run in the order pytest collects them (conftest.py's longest first),
but those in conftest.RUN_ALONE run after the others, one at a time.
Each one's summary line is printed as it ends, with all its output when it
fails; the exit code is 1 if any file failed, was killed, or had errors.
"""

import argparse
import collections
import concurrent.futures
import os
import re
import subprocess
import sys
import time

from tests import conftest

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


def collect(selection):
  """Test files in pytest's collection order (`selection`: its arguments)."""
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "--collect-only", "-q",
       "-p", "no:xdist", f"--rootdir={os.getcwd()}", *selection],
      capture_output=True, text=True)
  if out.returncode not in (0, 5):  # 5: nothing collected
    raise SystemExit(f"by_file: collection failed:\n{out.stdout}{out.stderr}")
  files = []
  for line in out.stdout.splitlines():
    path = line.split("::")[0]
    if "::" in line and path not in files:
      if not os.path.isfile(path):  # a file outside the rootdir: "::name"
        raise SystemExit(f"by_file: {line!r} names no file under {os.getcwd()}"
                         "; run from the folder above the tests")
      files.append(path)
  return files


def run(path, options):
  """(return code, output, seconds) of pytest on one file."""
  start = time.monotonic()
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist",
       "-p", "no:cacheprovider", f"--rootdir={os.getcwd()}", *options, path],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  return out.returncode, out.stdout, time.monotonic() - start


def summary(returncode, output):
  """{outcome: count} from pytest's last line, and what went wrong if the
  process ended some other way (a signal, or no summary at all)."""
  lines = output.strip().splitlines()
  counts = collections.Counter()
  for number, outcome in _COUNT.findall(lines[-1] if lines else ""):
    counts["errors" if outcome.startswith("error") else outcome] += int(number)
  if returncode < 0:
    return counts, f"killed by signal {-returncode}"
  if returncode not in (0, 1, 5) or not counts and returncode != 5:
    return counts, f"pytest exited with {returncode}"
  return counts, None


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("-j", "--jobs", type=int, default=2)
  args, selection = parser.parse_known_args(argv)
  options = [a for a in selection if not os.path.exists(a.split("::")[0])]
  files = collect(selection)
  alone = [f for f in files if os.path.basename(f) in conftest.RUN_ALONE]
  shared = [f for f in files if f not in alone]
  total, broken = collections.Counter(), []
  start = time.monotonic()

  def report(path, returncode, output, seconds):
    counts, crash = summary(returncode, output)
    total.update(counts)
    outcome = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{path}: {crash or outcome} ({seconds:.0f} s"
          f"{', alone' if path in alone else ''})", flush=True)
    if crash or counts["failed"] or counts["errors"]:
      broken.append(path)
      print(output, flush=True)

  with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
    futures = {pool.submit(run, path, options): path for path in shared}
    for future in concurrent.futures.as_completed(futures):
      report(futures[future], *future.result())
  for path in alone:
    report(path, *run(path, options))
  outcome = ", ".join(f"{n} {k}" for k, n in sorted(total.items()))
  print(f"{len(files)} files: {outcome} in {time.monotonic() - start:.0f} s"
        + (f"; failed: {' '.join(broken)}" if broken else ""))
  return 1 if broken else 0


if __name__ == "__main__":
  sys.exit(main())
