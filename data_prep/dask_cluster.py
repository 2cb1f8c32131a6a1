"""Bounded waits on a Dask cluster, for `--runner=DaskRunner`.

dask.distributed bounds a client's TCP connect but not the handshake after
it (dask/distributed#7698 took the handshake out of the connect timeout),
and its tasks wait for a worker without end: a port that accepts
connections and never speaks, or a cluster whose last worker died, hung a
run with no word. Here every wait has a bound, and its end is one line:

- before anything is written, `check_scheduler` asks the scheduler who it
  is (connect, handshake and one `identity` request, all within
  --dask_connection_timeout seconds, 10 unless given): nothing listening,
  something that does not answer as a scheduler, or a scheduler without a
  worker, is a `ClusterError`;
- the run's own client (created here by `WatchedDaskRunner`, otherwise
  Beam's DaskRunner) gets the same timeout, and its whole start three times
  it (connect, scheduler info and stream start; the handshake has none), on
  the main thread (SIGALRM);
- while the run goes on, `RunWatch` looks at its tasks every POLL_SECS and
  asks the scheduler again (bounded): a scheduler gone (it stops answering,
  or the client's connection ends, which cancels every task) is a
  ClusterError at once; no worker left is one warning, then, after
  --no_worker_timeout_secs without one, a ClusterError, the run's tasks
  cancelled.
"""

import asyncio
import contextlib
import dataclasses
import logging
import re
import signal
import socket
import threading
import time

from apache_beam.runners.dask.dask_runner import DaskOptions
from apache_beam.runners.dask.dask_runner import DaskRunner
from apache_beam.runners.dask.dask_runner import DaskRunnerResult

from albert_tf.core import errors
from albert_tf.core.errors import ClusterError
from data_prep import beam_compat

_LOGGER = logging.getLogger(__name__)

# --dask_connection_timeout's default (distributed's own is 30).
CONNECTION_TIMEOUT_SECS = 10
# Seconds between two looks at a running pipeline's tasks and scheduler.
POLL_SECS = 2.0
# Silent looks in a row (each within --dask_connection_timeout) after which
# a scheduler that accepts connections counts as gone.
SILENT_LOOKS = 3
_ADDRESS = re.compile(r"(?:tcp://)?\[?([^\[\]/]+?)\]?:(\d+)/?")


def _host_port(address):
  match = _ADDRESS.fullmatch(address)
  if not match:
    raise ClusterError(errors.error_line(
        f"{address!r} is no HOST:PORT address", "--dask_client_address",
        "the address `dask scheduler` prints, e.g. tcp://10.0.0.5:8786"))
  return match.group(1), int(match.group(2))


def _start_hint(host, port):
  return (f"start one (`dask scheduler --port {port}`, then `dask worker "
          f"tcp://{host}:{port}` on each machine) or pass the address it "
          "prints")


async def _ask_identity(url, timeout_secs):
  from dask.distributed import connect  # pylint: disable=g-import-not-at-top
  comm = await connect(url, timeout=timeout_secs)
  try:
    await comm.write({"op": "identity", "reply": True})
    return await comm.read()
  finally:
    comm.abort()


class _NoAnswer(Exception):
  """Nothing answered as a scheduler: `refused` (nothing listens) or not;
  `reason` says what happened, in a few words."""

  def __init__(self, reason, refused):
    super().__init__(reason)
    self.reason, self.refused = reason, refused


def _knock(host, port, timeout_secs):
  """Raises _NoAnswer(refused=True) when nothing listens at host:port."""
  try:
    socket.create_connection((host, port), timeout=timeout_secs).close()
  except OSError as e:
    raise _NoAnswer(f"{type(e).__name__}: {e}", refused=True) from None


def _identity(address, timeout_secs, knock_first=True):
  """The scheduler's identity, within about timeout_secs; _NoAnswer else.

  knock_first: a plain TCP connect first, which tells "nothing listens" at
  once (distributed's connect retries that until its timeout), but which
  the scheduler logs ("closed before handshake completed"): the looks of a
  running pipeline knock only after a failure, to say why."""
  host, port = _host_port(address)
  if knock_first:
    _knock(host, port, timeout_secs)
  url = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
  try:
    identity = asyncio.run(asyncio.wait_for(
        _ask_identity(url, timeout_secs), timeout_secs))
  except Exception as e:  # pylint: disable=broad-except
    if not knock_first:
      _knock(host, port, timeout_secs)
    # TimeoutError: connected, no answer; else it spoke, but not as one.
    raise _NoAnswer(
        f"it accepted the connection and said nothing for {timeout_secs:g} s"
        " (--dask_connection_timeout)" if isinstance(e, TimeoutError) else
        f"it answered, but not as one ({type(e).__name__}: {e})",
        refused=False) from None
  if not isinstance(identity, dict) or identity.get("type") != "Scheduler":
    raise _NoAnswer(f"it answered, but not as one: {str(identity)[:80]!r}",
                    refused=False)
  return identity


def scheduler_identity(address, timeout_secs=CONNECTION_TIMEOUT_SECS):
  """The `identity` of the Dask scheduler at address (HOST:PORT or
  tcp://HOST:PORT): a dict with "id", "n_workers", "total_threads", ...
  Within about timeout_secs, a ClusterError naming the address when nothing
  listens there or what listens does not answer as a Dask scheduler.
  """
  try:
    return _identity(address, timeout_secs)
  except _NoAnswer as e:
    host, port = _host_port(address)
    if e.refused:
      raise ClusterError(errors.error_line(
          f"no Dask scheduler answers at {address!r} ({e.reason})",
          "--dask_client_address", _start_hint(host, port))) from None
    raise ClusterError(errors.error_line(
        f"no Dask scheduler answers at {address!r}: {e.reason}",
        "--dask_client_address",
        "is it the port `dask scheduler` prints (tcp://HOST:8786, not the "
        "dashboard's 8787)? A scheduler too busy to answer: raise "
        "--dask_connection_timeout")) from None


def check_scheduler(address, timeout_secs=CONNECTION_TIMEOUT_SECS):
  """Worker threads of the cluster whose scheduler is at address, checked
  before anything is written (the DaskRunner's client would wait forever
  on a port that does not speak, or for a worker).

  Raises:
    ClusterError: one line, within about timeout_secs: nothing answers
      there as a scheduler (scheduler_identity), or it has no worker.
  """
  identity = scheduler_identity(address, timeout_secs)
  if not identity.get("n_workers"):
    host, port = _host_port(address)
    raise ClusterError(errors.error_line(
        f"the Dask scheduler at {address!r} has no worker",
        "--dask_client_address",
        f"start some: `dask worker tcp://{host}:{port} --nthreads 1` on each "
        "machine"))
  return identity["total_threads"]


def connection_timeout(options):
  """--dask_connection_timeout of PipelineOptions, in seconds (the default
  when it was not given)."""
  timeout = options.view_as(DaskOptions).timeout
  return timeout if isinstance(timeout, int) else CONNECTION_TIMEOUT_SECS


@contextlib.contextmanager
def _bounded(seconds, error):
  """Raises `error` in the body after `seconds` (SIGALRM: it also ends a
  wait on a lock, where distributed's synchronous calls wait). Unbounded
  outside the main thread, or when SIGALRM is someone else's."""
  if (threading.current_thread() is not threading.main_thread()
      or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None)):
    yield
    return
  def on_alarm(signum, frame):  # pylint: disable=unused-argument
    raise error
  signal.signal(signal.SIGALRM, on_alarm)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


class RunWatch:
  """Waits for a DaskRunner run's tasks, with the cluster's end bounded.

  Args:
    address: the scheduler's address, for the probes and the lines.
    timeout_secs: bound of each probe of the scheduler.
    no_worker_timeout_secs: how long the cluster may have no worker.
    poll_secs: seconds between two looks.
    clock: seconds, as time.monotonic.
    started: clock() when the run started (default: now).
  """

  def __init__(self, address, timeout_secs, no_worker_timeout_secs,
               poll_secs=POLL_SECS, clock=time.monotonic, started=None):
    self._started = clock() if started is None else started
    self._address = address
    self._timeout_secs = timeout_secs
    self._no_worker_timeout_secs = no_worker_timeout_secs
    self._poll_secs = poll_secs
    self._clock = clock

  def wait(self, client, futures):
    """Returns when every task has finished or failed (the caller gathers
    them, which raises a task's error).

    Raises:
      ClusterError: the scheduler is gone (the tasks are lost), or no
        worker came back within no_worker_timeout_secs (the tasks are
        cancelled); one line naming the address.
    """
    start = self._started
    no_worker_since = None
    silent = 0  # Looks in a row at which the scheduler said nothing.
    while True:
      _wait_futures(futures, self._poll_secs)
      statuses = {f.status for f in futures}
      if statuses <= {"finished", "error"}:
        return
      elapsed = self._clock() - start
      cancelled = [f for f in futures if f.status == "cancelled"]
      if cancelled:
        # The client lost its scheduler: whatever it logs while it tries
        # to reconnect, the line below says first.
        _quiet_reconnect_noise()
      try:
        # After a lost connection, knock first: "nothing listens" at once.
        identity = _identity(self._address, self._timeout_secs,
                             knock_first=bool(cancelled))
        silent = 0
      except _NoAnswer as e:
        # Nothing listens: gone. Listening but silent (frozen, or too busy):
        # gone after SILENT_LOOKS looks of --dask_connection_timeout each.
        silent += 1
        if e.refused or cancelled or silent >= SILENT_LOOKS:
          self._stop(client, futures, cancel=False)
          raise ClusterError(self._gone_line(elapsed, e.reason)) from None
        continue
      if cancelled:
        self._stop(client, futures, cancel=False)
        raise ClusterError(self._dropped_line(elapsed))
      if identity.get("n_workers"):
        no_worker_since = None
        continue
      if no_worker_since is None:
        no_worker_since = self._clock()
        _LOGGER.warning(
            "the Dask scheduler at %r has no worker left, %s into the run: "
            "waiting up to %g s for one (--no_worker_timeout_secs)",
            self._address, _seconds(elapsed), self._no_worker_timeout_secs)
      elif self._clock() - no_worker_since >= self._no_worker_timeout_secs:
        self._stop(client, futures, cancel=True)
        raise ClusterError(self._no_worker_line(elapsed))

  def _stop(self, client, futures, cancel):
    """Cancels the tasks and closes the client where the scheduler still
    answers (bounded). A client that lost its scheduler is left to its
    reconnect loop (--dask_connection_timeout long), which logs "Failed to
    reconnect" at its end, or a CancelledError traceback when the client
    is closed during it (also at exit): the error line says it already, so
    those two are dropped from here on."""
    if not cancel:
      _quiet_reconnect_noise()
      return
    try:
      client.cancel(futures, force=True)
      client.close(timeout=self._timeout_secs)
    except Exception:  # pylint: disable=broad-except
      pass  # Going away anyway; the error line is what counts.

  @staticmethod
  def _rerun_hint(what):
    return (f"{what}, then run the same command again: nothing was marked "
            "done, and the rerun replaces what this run left")

  def _gone_line(self, elapsed, why):
    return errors.error_line(
        f"the Dask scheduler at {self._address!r} is gone, "
        f"{_seconds(elapsed)} into the run ({why}): the run's tasks are lost",
        "--dask_client_address",
        self._rerun_hint("start the scheduler and its workers again"))

  def _dropped_line(self, elapsed):
    return errors.error_line(
        f"the Dask scheduler at {self._address!r} dropped this run's "
        f"connection {_seconds(elapsed)} into it, which cancelled its tasks "
        "(it answers again: restarted?)", "--dask_client_address",
        self._rerun_hint("check the scheduler's log"))

  def _no_worker_line(self, elapsed):
    return errors.error_line(
        f"the last Dask worker of the scheduler at {self._address!r} is "
        f"gone: no worker for {self._no_worker_timeout_secs:g} s "
        f"(--no_worker_timeout_secs), {_seconds(elapsed)} into the run; "
        "its tasks are cancelled", "--dask_client_address",
        self._rerun_hint("start workers: `dask worker tcp://{}:{} "
                         "--nthreads 1` on each machine".format(
                             *_host_port(self._address))))


class _ReconnectNoise(logging.Filter):
  """Drops what a client whose scheduler is gone logs while it tries to
  reconnect: "Failed to reconnect ...", and the CancelledError traceback of
  the reconnect when the client is closed."""

  def filter(self, record):
    if "Failed to reconnect" in record.getMessage():
      return False
    return not (record.exc_info and record.exc_info[0] is not None
                and issubclass(record.exc_info[0], asyncio.CancelledError))


def _quiet_reconnect_noise():
  for name in ("distributed.client", "distributed.utils"):
    logger = logging.getLogger(name)
    if not any(isinstance(f, _ReconnectNoise) for f in logger.filters):
      logger.addFilter(_ReconnectNoise())


def _wait_futures(futures, seconds):
  """Waits up to `seconds` for every future to end (finish, fail or be
  cancelled)."""
  from dask.distributed import wait  # pylint: disable=g-import-not-at-top
  start = time.monotonic()
  try:
    wait(futures, timeout=seconds)
  except TimeoutError:
    pass
  except Exception:  # pylint: disable=broad-except
    # A client that lost its scheduler; the look after this says so.
    time.sleep(max(0.0, seconds - (time.monotonic() - start)))


def _seconds(seconds):
  return f"{seconds:.0f} s"


@dataclasses.dataclass
class _WatchedResult(DaskRunnerResult):
  watch: RunWatch = None

  def wait_until_finish(self, duration=None):
    futures = self.futures
    if not isinstance(futures, (list, tuple)):
      futures = [futures]
    self.watch.wait(self.client, futures)
    return super().wait_until_finish(duration)


class WatchedDaskRunner(DaskRunner):
  """Beam's DaskRunner with a bounded client start and a watched run (see
  the module doc). no_worker_timeout_secs: how long a run waits for a
  worker when the cluster has none left."""

  def __init__(self, no_worker_timeout_secs):
    super().__init__()
    self._no_worker_timeout_secs = no_worker_timeout_secs

  def run_pipeline(self, pipeline, options):
    # Beam's DaskRunner.run_pipeline, but for the client: created here,
    # under a bound (turning the pipeline into dask bags, which takes
    # seconds of local work on a busy machine, is not under it).
    import dask  # pylint: disable=g-import-not-at-top
    from apache_beam.runners.dask.overrides import dask_overrides  # pylint: disable=g-import-not-at-top
    from dask.distributed import Client  # pylint: disable=g-import-not-at-top
    started = time.monotonic()
    dask_options = options.view_as(DaskOptions).get_all_options(
        drop_default=True, current_only=True)
    bag_kwargs = beam_compat.dask_bag_kwargs(dask_options)
    timeout = connection_timeout(options)
    address = dask_options.get("address")
    bound = 3 * timeout
    with _bounded(bound, ClusterError(errors.error_line(
        f"the Dask scheduler at {address!r} did not take this run's "
        f"connection within {bound:g} s (3 x --dask_connection_timeout="
        f"{timeout}), though it answered a moment before",
        "--dask_client_address",
        "is it overloaded? Rerun, or raise --dask_connection_timeout"))):
      client = Client(**dask_options)
    pipeline.replace_all(dask_overrides())
    visitor = self.to_dask_bag_visitor(bag_kwargs)
    pipeline.visit(visitor)
    futures = client.compute(dask.optimize(list(visitor.bags.values())[-1]))
    watch = RunWatch(address or client.scheduler.address, timeout,
                     self._no_worker_timeout_secs, started=started)
    return _WatchedResult(client, futures, watch)
