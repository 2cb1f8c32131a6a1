"""A dask.distributed cluster of processes on this machine, for tests and
benchmarks of `--runner=DaskRunner`.

  with local_dask.cluster(num_workers=2) as address:
    run_pipeline(..., pipeline_args=["--runner=DaskRunner",
                                     f"--dask_client_address={address}"])

The same commands a user runs (`dask scheduler`, `dask worker`, see
data_prep/README.md), each in its own process group on 127.0.0.1 with a free
port, the workers with one thread each and no nanny. Every process is
stopped on exit, also when the body or the start fails; waits are bounded.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile

# Seconds to wait for the scheduler and the workers to come up.
START_TIMEOUT_SECS = 60


def free_port():
  """A TCP port of 127.0.0.1 that nothing listens on (now)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _stop(procs):
  # The workers first, all at once, while their scheduler still answers
  # (without it a worker's close waits for it); then the scheduler.
  for group in (procs[1:], procs[:1]):
    for proc in group:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    for proc in group:
      try:
        proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def cluster(num_workers, log_dir=None, env=None, port=None):
  """Yields the scheduler's HOST:PORT once num_workers workers joined it.

  log_dir: where the processes' output goes (default: a temporary folder,
  deleted after). env: their environment (default: this one, with this
  checkout on PYTHONPATH so that the workers import data_prep). port: the
  scheduler's (default: a free one), e.g. to start a scheduler again where
  one was killed.

  Raises:
    TimeoutError: the workers did not join within START_TIMEOUT_SECS (the
      processes' logs are named).
  """
  from dask.distributed import Client  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ if env is None else env)
  env["PYTHONPATH"] = os.pathsep.join(
      filter(None, [root, env.get("PYTHONPATH", "")]))
  port = port or free_port()
  address = f"127.0.0.1:{port}"
  dask = [sys.executable, "-m", "dask"]
  commands = [dask + ["scheduler", "--host", "127.0.0.1", "--port", str(port),
                      "--no-dashboard"]]
  commands += [dask + ["worker", f"tcp://{address}", "--nthreads", "1",
                       "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                       "--name", f"worker-{i}"] for i in range(num_workers)]
  with contextlib.ExitStack() as stack:
    if log_dir is None:
      log_dir = stack.enter_context(tempfile.TemporaryDirectory(
          prefix="local_dask_"))
    os.makedirs(log_dir, exist_ok=True)
    procs = []
    stack.callback(_stop, procs)
    for i, command in enumerate(commands):
      name = "scheduler" if i == 0 else f"worker-{i - 1}"
      with open(os.path.join(log_dir, f"{name}.log"), "wb") as log:
        procs.append(subprocess.Popen(command, env=env, stdout=log,
                                      stderr=subprocess.STDOUT,
                                      start_new_session=True))
    try:
      with Client(address, timeout=START_TIMEOUT_SECS) as client:
        client.wait_for_workers(num_workers, timeout=START_TIMEOUT_SECS)
    except (OSError, TimeoutError) as e:
      raise TimeoutError(
          f"the local Dask cluster at {address} did not start with "
          f"{num_workers} workers within {START_TIMEOUT_SECS} s ({e}); see "
          f"the logs in {log_dir}") from e
    yield address
