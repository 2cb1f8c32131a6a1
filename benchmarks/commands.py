"""Runs `python -m` commands for the demo's stages and the benchmarks' runs.

`run_module` streams a command's progress lines to the console (library
chatter only to its log) and raises StageError with the command's own
one-line error; `run_side_by_side` runs several at once, one TF thread
each. demo/run_demo.py and benchmarks/paper_ablations.py both run their
commands through here.
"""

import concurrent.futures
import os
import re
import subprocess
import sys


class StageError(RuntimeError):
  """A command that failed: its module, exit code and own error line."""


def _start(cmd, env):
  """The command, its stdout and stderr merged into proc.stdout
  (tests/test_demo_chain.py swaps this for one that forks albert_tf
  commands)."""
  return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=env, text=True, bufsize=1)


def run_module(module, *args, log=None, threads=0, label="", started=None):
  """Runs `python -m module args...`, streaming its output; raises on failure.

  threads > 0: TensorFlow's op thread pools get that many threads (for
  commands run side by side, `run_side_by_side`). label: put before each
  console line of the command. started: a list the process is appended to
  (for stopping it from another thread).
  """
  cmd = [sys.executable, "-m", module, *[str(a) for a in args]]
  prefix = f"[{label}] " if label else ""
  print(f"    {prefix}$ " + " ".join(cmd[1:]), flush=True)
  env = dict(os.environ, PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="2")
  if threads:
    env.update(TF_NUM_INTRAOP_THREADS=str(threads),
               TF_NUM_INTEROP_THREADS=str(threads))
  if log:
    os.makedirs(os.path.dirname(log), exist_ok=True)
  error = None  # the command's own one-line `error: ...`, if it printed one
  with open(log, "a") if log else open(os.devnull, "w") as log_file:
    proc = _start(cmd, env)
    if started is not None:
      started.append(proc)
    for line in proc.stdout:
      log_file.write(line)
      if line.startswith("error: "):
        error = line[len("error: "):].strip()
      if _worth_showing(line):
        sys.stdout.write("      " + prefix + line)
        sys.stdout.flush()
    proc.wait()
  if proc.returncode:
    raise StageError(f"`python -m {module}` failed with exit code "
                     f"{proc.returncode}" + (f": {error}" if error else "")
                     + (f"; full output in {log}" if log else ""))


def run_side_by_side(*commands):
  """Runs `run_module` commands (module, args, log) all at once.

  A stage's runs that do not read each other's output (the pretrained and
  the random-init fine-tune, a baseline) go side by side, one TF thread
  each: on 2 cores nothing waits for the slowest of a pair, and what a run
  spends in one thread (imports, tracing, reading data, a CRF) overlaps
  the others' work. Console lines carry the run's name (its --output_dir,
  else its module). The first failure stops the other runs and is raised.
  """
  started = []
  with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
    futures = [pool.submit(run_module, module, *args, log=log, threads=1,
                           label=_run_label(module, args), started=started)
               for module, args, log in commands]
    concurrent.futures.wait(
        futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    failed = [f for f in futures if f.done() and f.exception()]
    # Until every run has ended: one may start after the failure.
    while failed and not all(f.done() for f in futures):
      for proc in list(started):
        if proc.poll() is None:
          proc.terminate()
      concurrent.futures.wait(futures, timeout=1)
  if failed:
    raise failed[0].exception()


def _run_label(module, args):
  for arg in args:
    if str(arg).startswith("--output_dir="):
      return os.path.basename(os.path.normpath(str(arg).split("=", 1)[1]))
  return module.rsplit(".", 1)[-1]


_LOG_PREFIX = re.compile(r"^\s*([IWE]\d{4} |INFO:|WARNING:absl|DEBUG:)")


def _worth_showing(line):
  """Progress and results on the console; library chatter only in the log."""
  noise = ("WARNING: All log messages", "cuda", "absl::InitializeLog",
           "rebuild TensorFlow", "oneDNN", "local_job_service", "sdk_worker",
           "apitools not found", "prism binary",
           # Beam's DirectRunner workers at start-up.
           "semi_persistent_directory", "Discarding unparseable args")
  return (line.strip() and not _LOG_PREFIX.match(line)
          and not any(n in line for n in noise))
