"""Files written whole or not at all: a temporary file renamed into place.

    with atomic_writer("out/test_results.tsv") as f:
      f.write(...)

A kill or a full disk midway leaves the previous file (or none) and a
`<path>.tmp`, never a cut file under the real name. A folder (or a set of
files) is written so too, in a dot-folder beside it under its lock:

    with claimed(out, "--output_dir", "an export"), staged(out) as stage:
      ...  # write in stage.path
      stage.swap_in()
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
  """tmp opened for writing, emptied, under an exclusive flock (a killed
  owner's lock is gone with it); OSError(EBUSY) naming path when another
  process holds it."""
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
  """open_file() under an exclusive flock, opened again until the file held
  is still the one at path (its owner may rename or remove it between our
  open and our flock); busy(file) raises when another process holds it."""
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
  """error as one line that names the file it could not write:
  `[Errno 28] No space left on device: cannot write PATH (nothing there
  was replaced)`, as the exports say it (replaced: the names already moved
  in, said instead). The errno (and so the subclass: PermissionError, ...)
  is kept; `flag` ("--output_dir=") goes before the path. An error that
  already says "cannot write" is returned as it is."""
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
  """(pid or None, started or "") of a lock file's text: `PID STARTED`
  (an older lock holds the pid alone)."""
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
  """Makes `flag`=`value` one writer's for as long as the lock is held.

  The lock is an flock on `lock_file` (default `directory/.run.lock`),
  stamped `PID STARTED`. A second writer raises `error` in one line naming
  the owner's pid; a lock left by a process that is gone is taken over
  with one warning. Returns an `OutputLock` (keep it referenced), or None
  for a remote file system, where no lock is taken. remove: delete the
  lock file on release (else it is emptied and left).
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


def owner_tag() -> str:
  """`pid<PID>-`, this process's: a temporary named `.tmp-pid<PID>-…`
  (`staged(..., tag=owner_tag())`) is kept by `temporary_owner_alive`
  while this process runs."""
  return f"pid{os.getpid()}-"


def temporary_owner_alive(name: str) -> bool:
  """Whether the process that named a temporary `.tmp-pid<PID>-…` (or
  `.old-pid<PID>-…`) still runs. A name without a pid (older code) has no
  known owner: False."""
  import re  # pylint: disable=g-import-not-at-top
  match = re.match(r"\.(?:tmp|old)-pid(\d+)-", name)
  if not match:
    return False
  pid = int(match.group(1))
  return pid == os.getpid() or pid_alive(pid)


# ------------------------------------------ a target written beside it
# A folder or files written whole: in a dot-folder beside the target
# (`staged`), under the target's lock (`claimed`), then moved into place;
# what a killed writer left is removed at the next start (`remove_killed`).


def _beside(target, tag):
  """(the folder holding target, TAG + target's name)."""
  target = os.path.normpath(os.path.abspath(os.fspath(target)))
  return os.path.dirname(target), tag + os.path.basename(target)


def lock_beside(target, tag: str = "") -> str:
  """target's lock file: `.TAGNAME.lock` beside it (target itself is
  renamed into place as a whole)."""
  folder, name = _beside(target, tag)
  return os.path.join(folder, f".{name}.lock")


def remove_killed(folder, stale, who: str, target=None) -> None:
  """Removes, logged, the names in folder for which stale(name) is true:
  what a killed writer (`who`: "an export") left. A `.old-` folder holding
  `previous` (a target `Stage.swap_in` swapped out in the instant before
  the new one went in) is renamed back to target when target is missing."""
  import logging  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  log = logging.getLogger("absl")
  for name in sorted(os.listdir(folder)):
    if not stale(name):
      continue
    path = os.path.join(folder, name)
    previous = os.path.join(path, "previous")
    if (target and name.startswith(".old-") and os.path.isdir(previous)
        and not os.path.exists(target)):
      log.warning("Restoring %s from %s, left by %s that was killed while "
                  "replacing it", target, path, who)
      os.rename(previous, target)
    else:
      log.warning("Removing %s, left by %s that was killed", path, who)
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    else:
      os.remove(path)


@contextlib.contextmanager
def claimed(target, flag: str, who: str, tag: str = "", lock_file=None,
            error=ValueError):
  """Makes `flag`=target this process's while the block writes it.

  Takes its lock (`lock_output`: a second writer gets `error` in one
  line) on lock_file (default `lock_beside`), then removes what a killed
  writer of it (`who`) left beside it: `.tmp-TAGNAME-` and `.old-TAGNAME-`
  with mkdtemp's 8 characters, no other target's (`remove_killed`). The
  folder holding target is made for the lock and removed again at the end
  when it is still empty (the write failed). An OSError taking the lock
  names `flag`=target (`naming`).
  """
  import re  # pylint: disable=g-import-not-at-top
  folder, name = _beside(target, tag)
  created, lock = not os.path.isdir(folder), None
  try:
    try:
      lock = lock_output(folder, flag, value=target, error=error,
                         lock_file=lock_file or lock_beside(target, tag))
      ours = re.compile(rf"\.(?:tmp|old)-{re.escape(name)}-[a-z0-9_]{{8}}$")
      remove_killed(folder, ours.match, who, target)
    except OSError as e:
      _raise_naming(e, target, f"{flag}=")
    yield lock
  finally:
    if lock is not None:
      lock.release()
    if created:
      with contextlib.suppress(OSError):
        os.rmdir(folder)  # only if empty


class Stage:
  """The folder a target is written in (`staged`), then moved into place:
  as a whole (`swap_in`) or file by file (`move`)."""

  def __init__(self, path, target, old_prefix):
    self.path, self.target, self._old_prefix = path, target, old_prefix
    self.replaced = []  # the names `move` has put in place

  def move(self, names, folder) -> None:
    """The stage's files `names` renamed into folder, in this order."""
    for name in names:
      os.replace(os.path.join(self.path, name), os.path.join(folder, name))
      self.replaced.append(name)

  def swap_in(self) -> None:
    """The stage renamed to target (0755: mkdtemp makes 0700). A target
    already there is first moved to `.old-TAGNAME-XXXXXXXX/previous`
    beside it, put back if the rename fails, and removed after; a kill in
    between leaves it there for the next `claimed` to put back."""
    import shutil  # pylint: disable=g-import-not-at-top
    import tempfile  # pylint: disable=g-import-not-at-top
    os.chmod(self.path, 0o755)
    if not os.path.exists(self.target):
      os.rename(self.path, self.target)
      return
    old = tempfile.mkdtemp(prefix=self._old_prefix,
                           dir=os.path.dirname(self.path))
    previous = os.path.join(old, "previous")
    os.rename(self.target, previous)
    try:
      os.rename(self.path, self.target)
    except OSError:
      os.rename(previous, self.target)
      os.rmdir(old)
      raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged(target, what=None, tag: str = ""):
  """Yields a `Stage`: a new folder `.tmp-TAGNAME-XXXXXXXX` beside target
  to write it in, under a lock the caller holds (`claimed`, or the lock of
  the folder holding target). The folder is removed at the
  end whatever happened; an OSError is raised again as one line naming
  `what` (default: target) and what the stage had moved in (`naming`)."""
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  folder, name = _beside(target, tag)
  stage = None
  try:
    stage = Stage(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=folder),
                  os.fspath(target), f".old-{name}-")
    yield stage
  except OSError as e:
    _raise_naming(e, what or target, replaced=stage.replaced if stage else ())
  finally:
    if stage is not None:
      shutil.rmtree(stage.path, ignore_errors=True)
