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
`serve` stops if more appear. The zygote itself stays single-threaded: it
forks on each request line and reaps its children in one select loop
(woken by SIGCHLD), so one zygote runs any number of commands side by side
(the workers of a multi-worker run, the streams of the docs test).

`start_module` gives a handle like `subprocess.Popen`'s (pid, poll, wait,
send_signal, kill, communicate), for tests that signal the command or run
several at once; `run_module` is `subprocess.run` on top of it. What a fork
does not reproduce: Python's finalisation and C++ static destructors at exit
(the child leaves with os._exit); a test about those must use `subprocess`.

With ALBERT_TEST_COMMAND_LOG=<file> in the tests' environment the zygote
appends one JSON line per finished command (module, test, CPU seconds of
the child, wall seconds): where the suite's time goes, command by command.

Written by hand: multiprocessing's "forkserver" start method has the same
idea, but runs Python functions, not modules with their own flags and exit
codes.

Only modules that import TensorFlow themselves when loaded are forked
(`albert_tf.*`, but for `TF_FREE`, and the tests' own `-c` code): for them
a TF already imported changes nothing. The others (data prep, the demo,
benchmarks) start as fresh interpreters, so that they run as they would for
a user, without TF. So does a command whose environment sets what a fresh
interpreter decides at import time (an environment variable TF or oneDNN
reads when loaded, another PYTHONPATH).
"""

import atexit
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

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
  """Runs one module (or `-c` code) in the forked child; never returns."""
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
    try:
      if request.get("code") is not None:
        sys.argv = ["-c", *request["args"]]
        sys.path[0] = ""  # what `python -c` puts first
        exec(compile(request["code"], "<string>", "exec"),  # pylint: disable=exec-used
             {"__name__": "__main__", "__builtins__": __builtins__})
      else:
        import runpy  # pylint: disable=g-import-not-at-top
        sys.argv = [request["module"], *request["args"]]
        sys.path[0] = request["cwd"]  # what `python -m` puts first
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
  """The zygote: one JSON request per stdin line; replies {id, pid} when it
  forked the child and {pid, rc} when the child ended."""
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

  def reply(message):
    replies.write(json.dumps(message) + "\n")
    replies.flush()

  # SIGCHLD wakes the select through a pipe (no polling): the handler
  # itself does nothing, the loop reaps.
  wake_read, wake_write = os.pipe()
  os.set_blocking(wake_write, False)
  signal.signal(signal.SIGCHLD, lambda *_: None)
  signal.set_wakeup_fd(wake_write)
  stdin, pending, running = sys.stdin.fileno(), b"", 0
  started, log = {}, os.environ.get("ALBERT_TEST_COMMAND_LOG")
  while True:
    ready, _, _ = select.select([stdin, wake_read], [], [])
    if wake_read in ready:
      os.read(wake_read, 1 << 16)
    if stdin in ready:
      chunk = os.read(stdin, 1 << 16)
      if not chunk:
        return  # the tests are done; children die with the zygote
      pending += chunk
      *lines, pending = pending.split(b"\n")
      for line in lines:
        request = json.loads(line)
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
          signal.set_wakeup_fd(-1)
          os.close(wake_read)
          os.close(wake_write)
          signal.signal(signal.SIGCHLD, signal.SIG_DFL)
          _child(request)
        running += 1
        started[pid] = (request["module"] or "-c", request.get("test", "?"),
                        time.time())
        reply({"id": request["id"], "pid": pid})
    while running:
      pid, status, usage = os.wait4(-1, os.WNOHANG)
      if not pid:
        break
      running -= 1
      module, test, start = started.pop(pid, ("?", "?", time.time()))
      if log:  # what each command cost, for finding the slow ones
        with open(log, "a", encoding="utf-8") as f:
          f.write(json.dumps({
              "module": module, "test": test,
              "cpu": round(usage.ru_utime + usage.ru_stime, 2),
              "wall": round(time.time() - start, 2)}) + "\n")
      reply({"pid": pid, "rc": os.waitstatus_to_exitcode(status)})


# ------------------------------------------------------------ test side
class ZygoteError(RuntimeError):
  """The zygote stopped answering."""


class _Zygote:
  """One zygote process and the thread that reads its replies."""

  def __init__(self):
    self.env = _zygote_env()
    self.log = tempfile.NamedTemporaryFile(prefix="zygote-", suffix=".log")
    self.outputs = tempfile.mkdtemp(prefix="zygote-out-")
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cli_runner"], cwd=ROOT, env=self.env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        text=True)
    self._ids = itertools.count()
    self._write = threading.Lock()
    self._replies = threading.Condition()
    self._pids, self._rcs, self._dead = {}, {}, None
    threading.Thread(target=self._read_replies, daemon=True).start()

  def fits(self, env):
    return all(env.get(k) == self.env.get(k) for k in IMPORT_TIME_ENV)

  def _read_replies(self):
    for line in self.proc.stdout:
      message = json.loads(line)
      with self._replies:
        if "rc" in message:
          self._rcs[message["pid"]] = message["rc"]
        else:
          self._pids[message["id"]] = message["pid"]
        self._replies.notify_all()
    try:
      self.log.seek(0)
      said = self.log.read().decode(errors="replace")[-2000:]
    except ValueError:  # its log is closed: this test process is exiting
      said = "(its log closed with this process)"
    with self._replies:
      self._dead = "the test zygote died: " + said
      self._replies.notify_all()

  def start(self, request):
    """Sends one request; returns the child's pid."""
    request = dict(request, id=next(self._ids),
                   test=os.environ.get("PYTEST_CURRENT_TEST", "?"))
    with self._write:
      if self._dead is None:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
    with self._replies:
      self._replies.wait_for(
          lambda: request["id"] in self._pids or self._dead is not None)
      if request["id"] not in self._pids:
        raise ZygoteError(self._dead)
      return self._pids.pop(request["id"])

  def returncode(self, pid, timeout):
    """The child's exit code; None if it still runs after timeout seconds."""
    with self._replies:
      self._replies.wait_for(
          lambda: pid in self._rcs or self._dead is not None, timeout)
      if pid in self._rcs:
        return self._rcs[pid]
      if self._dead is not None:
        raise ZygoteError(self._dead)
      return None

  def close(self):
    try:
      self.proc.stdin.close()
      self.proc.wait(timeout=30)
    except Exception:  # pylint: disable=broad-except
      self.proc.kill()
    self.log.close()
    shutil.rmtree(self.outputs, ignore_errors=True)


_zygotes = []
_lock = threading.Lock()


@atexit.register
def _close_all():
  for zygote in _zygotes:
    zygote.close()


def _zygote_for(env):
  with _lock:
    for zygote in _zygotes:
      if zygote.fits(env):
        return zygote
    zygote = _Zygote()
    _zygotes.append(zygote)
    return zygote


class Command:
  """A forked `python -m` (or `python -c`): subprocess.Popen's pid, poll,
  wait, send_signal, kill and communicate, with text output."""

  def __init__(self, zygote, args, request):
    self.args = args
    self.returncode = None
    self._zygote = zygote
    name = os.path.join(zygote.outputs, str(next(_names)))
    self._out, self._err = name + ".stdout", name + ".stderr"
    self.pid = zygote.start(dict(request, stdout=self._out,
                                 stderr=self._err))

  def poll(self):
    if self.returncode is None:
      self.returncode = self._zygote.returncode(self.pid, 0)
    return self.returncode

  def wait(self, timeout=None):
    if self.returncode is None:
      self.returncode = self._zygote.returncode(self.pid, timeout)
      if self.returncode is None:
        raise subprocess.TimeoutExpired(self.args, timeout)
    return self.returncode

  def send_signal(self, sig):
    if self.poll() is None:
      os.kill(self.pid, sig)

  def kill(self):
    """SIGKILL to the command and what it spawned (its process group)."""
    if self.poll() is None:
      try:
        os.killpg(self.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass

  def output(self):
    """(stdout, stderr) so far; '' for a stream not opened yet."""
    return _read(self._out), _read(self._err)

  def communicate(self, timeout=None):
    """Waits for the command; returns (stdout, stderr) and removes them."""
    self.wait(timeout)
    output = self.output()
    for path in (self._out, self._err):
      if os.path.exists(path):
        os.remove(path)
    return output


_names = itertools.count()


def _read(path):
  if not os.path.exists(path):
    return ""
  with open(path, encoding="utf-8", errors="replace") as f:
    return f.read()


def _forkable(argv, code):
  # `-c` code here is the tests' own, and imports TF first.
  return code is not None or (argv[0].startswith("albert_tf.") and
                              argv[0] not in TF_FREE)


def start_module(argv, cwd=ROOT, env=None, fresh=False, code=None):
  """subprocess.Popen([python, "-m", *argv]) (or [python, "-c", code,
  *argv]) with stdout and stderr captured, forked from a zygote where it
  can be; `argv` starts with the module name unless code is given. fresh: a
  new interpreter whatever the module."""
  env = dict(_zygote_env() if env is None else env)
  command = ([sys.executable, "-c", code, *argv] if code is not None
             else [sys.executable, "-m", *argv])
  if (fresh or not _forkable(argv, code) or
      any(env.get(k) != _zygote_env().get(k) for k in IMPORT_TIME_ENV)):
    return _Fresh(command, cwd, env)
  request = {"cwd": str(cwd), "env": env, "code": code,
             "module": None if code is not None else argv[0],
             "args": list(argv if code is not None else argv[1:])}
  return Command(_zygote_for(env), command, request)


class _Fresh(subprocess.Popen):
  """A fresh interpreter with the same handle as Command."""

  def __init__(self, command, cwd, env):
    super().__init__(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)

  def output(self):
    # Pipes cannot be read without waiting: only after the end.
    return ("", "") if self.poll() is None else self.communicate()


def run_module(argv, cwd=ROOT, env=None, timeout=600, fresh=False):
  """subprocess.run([python, "-m", *argv], capture_output=True, text=True),
  forked from a zygote; `argv` starts with the module name. fresh: a new
  interpreter whatever the module."""
  proc = start_module(argv, cwd=cwd, env=env, fresh=fresh)
  try:
    stdout, stderr = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    proc.kill()
    stdout, stderr = proc.communicate()
    raise subprocess.TimeoutExpired(proc.args, timeout, stdout, stderr)
  except BaseException:
    proc.kill()
    raise
  return subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                     stderr)


if __name__ == "__main__":
  serve()
