"""Files written whole or not at all: a temporary file renamed into place.

    with atomic_writer("out/test_results.tsv") as f:
      f.write(...)

A kill or a full disk midway leaves the previous file (or none) and a
`<path>.tmp`, never a cut file under the real name.
"""

import contextlib
import os


@contextlib.contextmanager
def atomic_writer(path, mode: str = "w"):
  """Yields a file open on `<path>.tmp` (text modes in UTF-8); on a clean
  exit it is flushed, synced and renamed to path; on an error removed.
  An OSError (a full disk: ENOSPC at the write, the sync or the close) is
  raised again naming path (`naming`), whatever file name it had."""
  path = os.fspath(path)
  tmp = path + ".tmp"
  encoding = None if "b" in mode else "utf-8"
  try:
    with open(tmp, mode, encoding=encoding) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.exists(tmp):
      os.remove(tmp)
    # Not another file's error (one the caller read inside the block).
    if isinstance(e, OSError) and e.filename in (None, path, tmp):
      raise naming(e, path) from e
    raise


def naming(error: OSError, path, flag: str = "") -> OSError:
  """error as one line that names the file it could not write:
  `[Errno 28] No space left on device: cannot write PATH (nothing there
  was replaced)`, as the exports say it. The errno (and so the subclass:
  PermissionError, ...) is kept; `flag` ("--output_dir=") goes before the
  path. An error that already says "cannot write" is returned as it is."""
  if "cannot write" in str(error):
    return error
  cause = error.strerror or str(error) or type(error).__name__
  text = (f"{cause}: cannot write {flag}{os.fspath(path)} (nothing there "
          "was replaced)")
  return OSError(error.errno, text) if error.errno else OSError(text)


def write_eval_results(directory, results: dict, text_copy: bool = False
                       ) -> None:
  """The one writer of eval_results.json (every command's, one schema: the
  metric names as the task reports them, test_* for the test split,
  best_step / global_step): atomic, keys sorted. text_copy: also the
  original scripts' eval_results.txt ("key = value" lines), atomic too."""
  import json  # pylint: disable=g-import-not-at-top
  directory = os.fspath(directory)
  with atomic_writer(os.path.join(directory, "eval_results.json")) as f:
    json.dump(results, f, indent=2, sort_keys=True)
  if text_copy:
    with atomic_writer(os.path.join(directory, "eval_results.txt")) as f:
      for key in sorted(results):
        f.write(f"{key} = {results[key]}\n")
