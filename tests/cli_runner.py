"""`python -m <module> ...` for the tests, without paying start-up each time.

Every command-line test pays Python + TensorFlow + Keras start-up (about
4.5 s of CPU on the 2-core test machines) before the first line of ours
runs; the suite runs about a hundred such commands. A zygote process imports
them once and forks one child per command (copy-on-write), which runs the
module as `python -m` would: its own argv, working directory, environment,
stdout and stderr, exit code and atexit handlers. The zygote runs no
TensorFlow op, so the child starts with no TF thread pools and builds its
own, as a fresh process would.

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
themselves, and the README's Quick start (a newcomer's exact path), use
`subprocess` directly.
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
                   "TF_XLA_FLAGS", "XLA_FLAGS",
                   "KERAS_BACKEND", "PYTHONPATH", "OMP_NUM_THREADS",
                   "PYTHONHASHSEED")


# albert_tf modules that import TensorFlow only in main, if at all.
TF_FREE = ("albert_tf.params",)


def _zygote_env():
  return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


# ------------------------------------------------------------ zygote side
def _child(request):
  """Runs one module in the forked child; never returns."""
  code = 1
  try:
    os.setpgid(0, 0)  # the test can kill the command and what it spawned
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
      out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
      os.dup2(out, fd)
      os.close(out)
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
  except BaseException:  # pylint: disable=broad-except
    import traceback  # pylint: disable=g-import-not-at-top
    traceback.print_exc()
  finally:
    try:
      atexit._run_exitfuncs()  # pylint: disable=protected-access
      sys.stdout.flush()
      sys.stderr.flush()
    finally:
      os._exit(code)  # pylint: disable=protected-access


def serve():
  """The zygote: one JSON request per stdin line, replies pid then rc."""
  import absl.flags  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import numpy  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import tensorflow  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  import keras  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  # Nothing that registers ops or flags (tensorflow_text, our modules): a
  # command that forgets to import what it needs must fail here too.
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
class _Zygote:

  def __init__(self):
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cli_runner"], cwd=ROOT,
        env=_zygote_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)

  def run(self, module, args, cwd, env, timeout):
    with tempfile.TemporaryDirectory() as tmp:
      out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
      self.proc.stdin.write(json.dumps({
          "module": module, "args": list(args), "cwd": str(cwd), "env": env,
          "stdout": out, "stderr": err}) + "\n")
      self.proc.stdin.flush()
      pid = json.loads(self.proc.stdout.readline())["pid"]
      fired = []
      timer = threading.Timer(timeout, lambda: (fired.append(pid),
                                                _kill_group(pid)))
      timer.start()
      try:
        reply = self.proc.stdout.readline()
      finally:
        timer.cancel()
      if not reply:
        raise RuntimeError("the test zygote died")
      rc = json.loads(reply)["rc"]
      with open(out, encoding="utf-8", errors="replace") as f:
        stdout = f.read()
      with open(err, encoding="utf-8", errors="replace") as f:
        stderr = f.read()
    if fired:
      raise subprocess.TimeoutExpired([module, *args], timeout, stdout, stderr)
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args],
                                       rc, stdout, stderr)

  def close(self):
    self.proc.stdin.close()
    self.proc.wait(timeout=30)


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
    try:
      zygote.close()
    except Exception:  # pylint: disable=broad-except
      zygote.proc.kill()


def run_module(argv, cwd=ROOT, env=None, timeout=600):
  """subprocess.run([python, "-m", *argv], capture_output=True, text=True),
  forked from a zygote; `argv` starts with the module name."""
  env = dict(_zygote_env() if env is None else env)
  base = _zygote_env()
  if (not argv[0].startswith("albert_tf.") or argv[0] in TF_FREE
      or any(env.get(k) != base.get(k) for k in IMPORT_TIME_ENV)):
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)
  try:
    zygote = _idle.get_nowait()
  except queue.Empty:
    zygote = _Zygote()
    with _lock:
      _all.append(zygote)
  try:
    return zygote.run(argv[0], argv[1:], cwd, env, timeout)
  finally:
    _idle.put(zygote)


if __name__ == "__main__":
  serve()
