"""`python -m <module> ...` for the tests, without paying start-up each time.

Every command-line test pays Python + TensorFlow + Keras start-up (several
seconds of CPU for `import tensorflow, keras`; the figure is in
benchmarks/README.md, "Test-suite time") before the first line of ours runs.
A zygote process imports them once and forks one child per command
(copy-on-write), which runs the module as `python -m` would: its own argv,
working directory, environment, stdout and stderr, exit code, thread joins
and atexit handlers. The zygote runs no TensorFlow op, so the child starts
with no TF thread pools and builds its own, as a fresh process would.
Forking a process that has threads is safe only for threads that hold no
lock at the fork: after the imports the zygote has OpenBLAS's idle pool
thread (it registers fork handlers) and one idle TensorFlow thread, and
`serve` stops if more appear. What a fork does not reproduce: Python's
finalisation and C++ static destructors at exit (the child leaves with
os._exit); a test about how a process ends must use `subprocess`.

Written by hand: multiprocessing's "forkserver" start method has the same
idea, but runs Python functions, not modules with their own flags and exit
codes.

Only modules that import TensorFlow themselves when loaded are forked
(`albert_tf.*`, but for `TF_FREE`): for them a TF already imported changes
nothing. The others (data prep, the demo, benchmarks) start as fresh
interpreters, so that they run as they would for a user, without TF. So does
a command whose environment sets what a fresh interpreter decides at import
time (an environment variable TF or oneDNN reads when loaded, another
PYTHONPATH) gets a fresh interpreter. Tests that must signal the process
themselves use `subprocess` directly.
"""

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Read by TensorFlow, oneDNN or Python when they load: a command that sets
# one differently from the zygote's environment gets a fresh interpreter.
IMPORT_TIME_ENV = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL",
                   "TF_XLA_FLAGS", "XLA_FLAGS", "TF_USE_LEGACY_KERAS",
                   "KERAS_BACKEND", "KERAS_HOME", "PYTHONPATH",
                   "OMP_NUM_THREADS", "PYTHONHASHSEED", "PYTHONIOENCODING",
                   "PYTHONUTF8", "PYTHONWARNINGS", "LANG", "LC_ALL", "TMPDIR")
# Threads after the imports (main, OpenBLAS's pool, one of TensorFlow's).
ZYGOTE_THREADS = 3


# albert_tf modules that import TensorFlow only in main, if at all.
TF_FREE = ("albert_tf.params",)


def _zygote_env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


# ------------------------------------------------------------ zygote side
def _child(request):
  """Runs one module in the forked child; never returns."""
  code = 1
  try:
    # Output first, so that every later failure is seen by the test.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
      out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
      os.dup2(out, fd)
      os.close(out)
    os.setpgid(0, 0)  # the test can kill the command and what it spawned
    _die_with_parent()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import runpy  # pylint: disable=g-import-not-at-top
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = request["cwd"]  # what `python -m` puts first
    try:
      runpy.run_module(request["module"], run_name="__main__",
                       alter_sys=True)
      code = 0
    except SystemExit as e:
      if e.code is None:
        code = 0
      elif isinstance(e.code, int):
        code = e.code
      else:
        print(e.code, file=sys.stderr)
        code = 1
  except KeyboardInterrupt:
    code = -signal.SIGINT
  except BaseException:  # pylint: disable=broad-except
    import traceback  # pylint: disable=g-import-not-at-top
    traceback.print_exc()
  finally:
    try:
      # What the interpreter does at exit: join non-daemon threads (and
      # concurrent.futures' workers), then the atexit handlers.
      threading._shutdown()  # pylint: disable=protected-access
      atexit._run_exitfuncs()  # pylint: disable=protected-access
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(code)  # pylint: disable=protected-access


def _die_with_parent():
  """SIGKILL when the zygote dies (Linux prctl PR_SET_PDEATHSIG): a test
  run stopped with Ctrl-C leaves no command running in its own group."""
  import ctypes  # pylint: disable=g-import-not-at-top
  libc = ctypes.CDLL(None, use_errno=True)
  libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def serve():
  """The zygote: one JSON request per stdin line, replies pid then rc."""
  import absl.flags  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import numpy  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import tensorflow  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import keras  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  # Nothing that registers ops or flags (tensorflow_text, our modules): a
  # command that forgets to import what it needs must fail here too.
  threads = len(os.listdir("/proc/self/task"))
  if threads > ZYGOTE_THREADS:
    sys.exit(f"the zygote has {threads} threads after its imports, "
             f"expected {ZYGOTE_THREADS}: forking it is no longer known safe")
  replies = sys.stdout
  for line in sys.stdin:
    request = json.loads(line)
    replies.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      _child(request)
    replies.write(json.dumps({"pid": pid}) + "\n")
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) +
                  "\n")
    replies.flush()


# ------------------------------------------------------------ test side
class ZygoteError(RuntimeError):
  """The zygote stopped answering; it is discarded."""


class _Zygote:

  def __init__(self):
    self.env = _zygote_env()
    self.log = tempfile.NamedTemporaryFile(prefix="zygote-", suffix=".log")
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cli_runner"], cwd=ROOT, env=self.env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        text=True)

  def fits(self, env):
    return all(env.get(k) == self.env.get(k) for k in IMPORT_TIME_ENV)

  def _reply(self, key):
    line = self.proc.stdout.readline()
    if not line:
      self.log.seek(0)
      raise ZygoteError("the test zygote died: " + self.log.read().decode(
          errors="replace")[-2000:])
    return json.loads(line)[key]

  def run(self, module, args, cwd, env, timeout):
    with tempfile.TemporaryDirectory() as tmp:
      out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
      pid = None
      fired = []
      timer = threading.Timer(timeout, lambda: (fired.append(pid),
                                                _kill_group(pid)))
      try:
        self.proc.stdin.write(json.dumps({
            "module": module, "args": list(args), "cwd": str(cwd),
            "env": env, "stdout": out, "stderr": err}) + "\n")
        self.proc.stdin.flush()
        pid = self._reply("pid")
        timer.start()
        rc = self._reply("rc")
      except BaseException:
        if pid is not None:
          _kill_group(pid)
        raise
      finally:
        timer.cancel()
      stdout, stderr = (_read(out), _read(err))
    if fired and rc == -signal.SIGKILL:
      raise subprocess.TimeoutExpired([module, *args], timeout, stdout, stderr)
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args],
                                       rc, stdout, stderr)

  def close(self):
    try:
      self.proc.stdin.close()
      self.proc.wait(timeout=30)
    except Exception:  # pylint: disable=broad-except
      self.proc.kill()
    self.log.close()


def _read(path):
  """A child's output file ('' if it died before opening it)."""
  if not os.path.exists(path):
    return ""
  with open(path, encoding="utf-8", errors="replace") as f:
    return f.read()


def _kill_group(pid):
  try:
    os.killpg(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass


_idle = queue.SimpleQueue()
_all = []
_lock = threading.Lock()


@atexit.register
def _close_all():
  for zygote in _all:
    zygote.close()


def run_module(argv, cwd=ROOT, env=None, timeout=600, fresh=False):
  """subprocess.run([python, "-m", *argv], capture_output=True, text=True),
  forked from a zygote; `argv` starts with the module name. fresh: a new
  interpreter whatever the module."""
  env = dict(_zygote_env() if env is None else env)
  if (fresh or not argv[0].startswith("albert_tf.") or argv[0] in TF_FREE
      or any(env.get(k) != _zygote_env().get(k) for k in IMPORT_TIME_ENV)):
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
  try:
    zygote = _idle.get_nowait()
  except queue.Empty:
    zygote = None
  if zygote is None or not zygote.fits(env):  # os.environ changed since
    if zygote is not None:
      _discard(zygote)
    zygote = _Zygote()
    with _lock:
      _all.append(zygote)
  try:
    result = zygote.run(argv[0], argv[1:], cwd, env, timeout)
  except BaseException:
    _discard(zygote)  # never reused after an error
    raise
  _idle.put(zygote)
  return result


def close_idle(keep=1):
  """Closes idle zygotes beyond `keep` (after a burst of parallel commands;
  each holds TF and Keras in memory)."""
  idle = []
  while True:
    try:
      idle.append(_idle.get_nowait())
    except queue.Empty:
      break
  for zygote in idle[keep:]:
    _discard(zygote)
  for zygote in idle[:keep]:
    _idle.put(zygote)


def _discard(zygote):
  with _lock:
    if zygote in _all:
      _all.remove(zygote)
  zygote.close()


if __name__ == "__main__":
  serve()
