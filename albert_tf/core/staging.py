"""A folder (or a set of files) written whole: in a dot-folder beside the
target (`staged`), under the target's lock (`claimed`), then moved into
place; what a killed writer left is removed at the next start
(`remove_killed`).

    with claimed(out, "--output_dir", "an export"), staged(out) as stage:
      ...  # write in stage.path
      stage.swap_in()
"""

import contextlib
import os

from albert_tf.core import file_io

# pylint: disable=protected-access


def owner_tag() -> str:
  """`pid<PID>-`: a `staged(..., tag=owner_tag())` temporary is this
  process's while it runs (`temporary_owner_alive`)."""
  return f"pid{os.getpid()}-"


def temporary_owner_alive(name: str) -> bool:
  """Whether the process of a `.tmp-pid<PID>-…` or `.old-pid<PID>-…` name
  still runs (False without a pid)."""
  import re  # pylint: disable=g-import-not-at-top
  match = re.match(r"\.(?:tmp|old)-pid(\d+)-", name)
  if not match:
    return False
  pid = int(match.group(1))
  return pid == os.getpid() or file_io.pid_alive(pid)


def _beside(target, tag):
  target = os.path.normpath(os.path.abspath(os.fspath(target)))
  return os.path.dirname(target), tag + os.path.basename(target)


def lock_beside(target, tag: str = "") -> str:
  """target's lock file: `.TAGNAME.lock` beside it."""
  folder, name = _beside(target, tag)
  return os.path.join(folder, f".{name}.lock")


def remove_killed(folder, stale, who: str, target=None) -> None:
  """Removes, logged, what a killed writer (`who`) left: the names for which
  stale(name) holds; a `.old-` folder's `previous` (`Stage.swap_in`) goes
  back to target when target is missing."""
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

  Takes its lock (`lock_output`; default lock_file `lock_beside`), then
  removes what a killed writer (`who`) of this target left beside it
  (`remove_killed`). A folder made for the lock is removed at the end if
  still empty. An OSError taking the lock names `flag`=target.
  """
  import re  # pylint: disable=g-import-not-at-top
  folder, name = _beside(target, tag)
  created, lock = not os.path.isdir(folder), None
  try:
    try:
      lock = file_io.lock_output(folder, flag, value=target, error=error,
                         lock_file=lock_file or lock_beside(target, tag))
      ours = re.compile(rf"\.(?:tmp|old)-{re.escape(name)}-[a-z0-9_]{{8}}$")
      remove_killed(folder, ours.match, who, target)
    except OSError as e:
      file_io._raise_naming(e, target, f"{flag}=")
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
  """Yields a `Stage`: a new folder `.tmp-TAGNAME-XXXXXXXX` beside target,
  under a lock the caller holds (`claimed`), removed at the end. An OSError
  is raised again naming `what` (default: target) and what was moved in."""
  import shutil  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  folder, name = _beside(target, tag)
  stage = None
  try:
    stage = Stage(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=folder),
                  os.fspath(target), f".old-{name}-")
    yield stage
  except OSError as e:
    file_io._raise_naming(e, what or target,
                          replaced=stage.replaced if stage else ())
  finally:
    if stage is not None:
      shutil.rmtree(stage.path, ignore_errors=True)
