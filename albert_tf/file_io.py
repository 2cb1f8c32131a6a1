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
  exit it is flushed, synced and renamed to path; on an error removed."""
  path = os.fspath(path)
  tmp = path + ".tmp"
  encoding = None if "b" in mode else "utf-8"
  try:
    with open(tmp, mode, encoding=encoding) as f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
