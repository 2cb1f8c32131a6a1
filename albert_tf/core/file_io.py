"""Files written whole or not at all: a temporary file renamed into place.

    with atomic_writer("out/test_results.tsv") as f:
      f.write(...)

A kill or a full disk midway leaves the previous file (or none) and a
`<path>.tmp`, never a cut file under the real name. A folder (or a set of
files) is written so too: `albert_tf.core.staging`.
"""

import contextlib
import os


@contextlib.contextmanager
def atomic_writer(path, mode: str = "w"):
  """Yields a file open on `<path>.tmp` (text modes in UTF-8); on a clean
  exit it is flushed, synced and renamed to path; on an error removed.
  An OSError (a full disk: ENOSPC at the write, the sync or the close) is
  raised again naming path (`naming`), whatever file name it had. The
  temporary is flock'ed until it is renamed: a second writer of the same
  path meanwhile gets one OSError (EBUSY) naming path.
  """
  path = os.fspath(path)
  tmp = path + ".tmp"
  f = _locked_temporary(path, tmp, mode)
  renamed = False
  try:
    with f:
      yield f
      f.flush()
      os.fsync(f.fileno())
      os.replace(tmp, path)  # still locked: no other writer opens it now
      renamed = True
    sync_directory(path)
  except BaseException as e:
    if not renamed and os.path.exists(tmp):  # after the rename: another's
      os.remove(tmp)
    # Not another file's error (one the caller read inside the block).
    if isinstance(e, OSError) and e.filename in (None, path, tmp):
      raise naming(e, path) from e
    raise


def _locked_temporary(path, tmp, mode):
  """tmp opened, flock'ed and emptied; OSError(EBUSY) when it is held."""
  import errno  # pylint: disable=g-import-not-at-top

  def open_tmp():
    try:
      # No O_TRUNC: the file may be another writer's until we hold it.
      fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o666)
    except OSError as e:
      raise naming(e, path) from e
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")

  def busy(f):
    f.close()
    raise OSError(errno.EBUSY, f"{path} is being written by another "
                  f"process (its temporary {tmp} is locked): cannot write "
                  f"{path} now; wait for that process to end, or write "
                  "another file") from None
  f = _flocked(tmp, open_tmp, busy)
  f.truncate(0)
  return f


def _flocked(path, open_file, busy):
  """open_file() under an exclusive flock; reopened while the file held is
  no longer the one at path (renamed or removed between open and flock)."""
  import fcntl  # pylint: disable=g-import-not-at-top
  while True:
    f = open_file()
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      busy(f)
    try:
      same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
      same = False
    if same:
      return f
    f.close()


def parse_json(data, path, expect=dict):
  """The JSON value in `data` (bytes or text read from path), of type
  `expect` (None: any). A ValueError naming path and the place in it when
  it is not UTF-8 JSON, or not an `expect` (a cut or damaged copy)."""
  import json  # pylint: disable=g-import-not-at-top
  try:
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    value = json.loads(text)
  except UnicodeDecodeError as e:
    raise ValueError(f"{path} is not UTF-8 text (byte {e.object[e.start]:#x} "
                     f"at offset {e.start}): a damaged copy?") from None
  except json.JSONDecodeError as e:
    what = e.msg[:-len(" at")] if e.msg.endswith(" at") else e.msg
    raise ValueError(f"{path} is not valid JSON ({what} at line {e.lineno} "
                     f"column {e.colno}): a cut or damaged copy?") from None
  if expect is not None and not isinstance(value, expect):
    raise ValueError(f"{path} holds a JSON {type(value).__name__}, not "
                     f"the {expect.__name__} expected: a damaged copy?")
  return value


def sync_directory(path) -> None:
  """After a rename into place: the folder holding path synced, so that a
  power loss keeps the new name (a local file system; best effort)."""
  path = os.fspath(path)
  if "://" in path:
    return
  with contextlib.suppress(OSError):
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def synced_rename(tmp, path) -> None:
  """tmp (written through tf.io.gfile, so possibly remote) renamed to path;
  locally, its data and the new name synced first and after."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tmp, path = os.fspath(tmp), os.fspath(path)
  if "://" not in tmp:
    with open(tmp, "rb+") as f:
      os.fsync(f.fileno())
  tf.io.gfile.rename(tmp, path, overwrite=True)
  sync_directory(path)


def naming(error: OSError, path, flag: str = "", replaced=()) -> OSError:
  """error as one line naming the file: `No space left on device: cannot
  write FLAGPATH (nothing there was replaced)` (or the names `replaced`).
  The errno (so the subclass) is kept; one that says "cannot write" is
  returned as it is."""
  if "cannot write" in str(error):
    return error
  cause = error.strerror or str(error) or type(error).__name__
  kept = (f"replaced {', '.join(replaced)}; the rest left as it was"
          if replaced else "nothing there was replaced")
  text = f"{cause}: cannot write {flag}{os.fspath(path)} ({kept})"
  return OSError(error.errno, text) if error.errno else OSError(text)


def _raise_naming(error, path, flag="", replaced=()):
  named = naming(error, path, flag, replaced)
  if named is error:
    raise error
  raise named from error


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


# ------------------------------------------------------------ one owner
LOCK_FILE = ".run.lock"


def pid_alive(pid: int) -> bool:
  """Whether process pid exists (on this machine)."""
  if pid <= 0:
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # another user's: alive
    return True
  return True


def _owner(text: str):
  """(pid or None, started) of `PID STARTED` (older locks: the pid alone)."""
  pid, _, started = text.strip().partition(" ")
  return (int(pid) if pid.isdigit() else None), started.strip()


class OutputLock:
  """An exclusive, pid-stamped lock (`lock_output`); `release()` or `with`
  ends it (so does the process's death, SIGKILL included)."""

  def __init__(self, handle, path, remove):
    self._handle, self.path, self._remove = handle, path, remove

  def close(self):
    self.release()

  def release(self):
    handle, self._handle = self._handle, None
    if handle is None or handle.closed:
      return
    try:
      if self._remove:
        os.remove(self.path)
      else:
        handle.seek(0)
        handle.truncate()
        handle.flush()
    except OSError:
      pass
    handle.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.release()

  def __del__(self):
    self.release()


def lock_output(directory, flag: str, value=None, lock_file=None,
                error=ValueError, remove: bool = True):
  """Makes `flag`=`value` one writer's while the returned `OutputLock` is
  held (keep it referenced; None on a remote file system: no lock).

  An flock on `lock_file` (default `directory/.run.lock`), stamped `PID
  STARTED`: a second writer raises `error` naming the owner's pid; a dead
  owner's lock is taken over with a warning. remove: delete the lock file
  on release (else it is emptied).
  """
  import logging  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  directory = os.fspath(directory)
  value = directory if value is None else value
  if "://" in directory:
    return None
  path = os.fspath(lock_file) if lock_file else os.path.join(directory,
                                                             LOCK_FILE)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

  def busy(handle):
    handle.seek(0)
    pid, started = _owner(handle.read())
    handle.close()
    since = f" since {started}" if started else ""
    raise error(
        f"{flag}={value} is in use by another run (pid "
        f"{pid if pid is not None else 'unknown'}){since}: wait for it, "
        f"or choose another {flag}") from None
  handle = _flocked(path, lambda: open(path, "a+", encoding="utf-8"), busy)
  handle.seek(0)
  pid, started = _owner(handle.read())
  if pid is not None and pid != os.getpid() and not pid_alive(pid):
    logging.getLogger("absl").warning(
        "%s=%s: taking over the lock of process %d%s, which is gone (%s)",
        flag, value, pid, f" (started {started})" if started else "", path)
  handle.seek(0)
  handle.truncate()
  handle.write(f"{os.getpid()} "
               f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())}")
  handle.flush()
  return OutputLock(handle, path, remove)
