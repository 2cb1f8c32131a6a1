"""Progress of the data prep pipeline, logged from its Beam counters as it runs.

Beam's local batch engine (the FnApiRunner behind the DirectRunner) commits
counters only when a bundle ends, and it runs a stage as one bundle per
worker, so `result.metrics()` has nothing until the stage is over (and
`run()` returns only at the end). While a bundle runs, though, the runner
asks its worker for progress every `progress_request_frequency` seconds, and
the answer carries the bundle's counters so far. Beam's ProgressRequester
takes a callback for those answers, but the runner passes none;
`PipelineProgress` installs one for the duration of the run
(data_prep.beam_compat.progress_answers). Worker
processes or threads (direct_running_mode multi_processing or
multi_threading) answer while they work; in_memory runs each bundle in the
calling thread, so there the counts come at the end. On other runners the
lines say the run is going on, and the counters are in the runner's own UI.

A line every `interval_secs`: documents read, instances made (and per
second since the last line), records written, and the share of the input
bytes whose byte ranges are read, with an ETA from it. After the run, one
line from the committed counters.
"""

import contextlib
import logging
import threading
import time

from data_prep import beam_compat

_LOGGER = logging.getLogger(__name__)
# The namespace of the pipeline's Beam counters (data_prep.transforms), and
# the names of the counters the lines show.
NAMESPACE = "data_prep"
DOCUMENTS_READ = "documents_read"
INSTANCES = "instances"
RECORDS_WRITTEN = "records_written"
INPUT_BYTES = "input_bytes"


def user_counters(monitoring_infos, namespace):
  """{counter name: value} of the user counters in `namespace`, summed over
  the steps that report them."""
  from apache_beam.metrics import monitoring_infos as infos_lib
  counters = {}
  for info in monitoring_infos:
    if info.urn != infos_lib.USER_COUNTER_URN:
      continue
    info_namespace, name = infos_lib.parse_namespace_and_name(info)
    if info_namespace == namespace:
      counters[name] = (counters.get(name, 0) +
                        infos_lib.extract_counter_value(info))
  return counters


def committed_counters(result, namespace):
  """{counter name: value} of a finished pipeline's counters in `namespace`."""
  from apache_beam.metrics.metric import MetricsFilter
  counters = {}
  query = result.metrics().query(MetricsFilter().with_namespace(namespace))
  for counter in query["counters"]:
    value = counter.committed
    if value is None:  # A runner that keeps attempted values only.
      value = counter.attempted
    name = counter.key.metric.name
    counters[name] = counters.get(name, 0) + value
  return counters


def summary_counts(summary, input_bytes):
  """The counters of the last progress line, from a run's summary.json dict
  and {input path: bytes}: for runners without Beam metrics."""
  return {DOCUMENTS_READ: summary["documents"]["read"],
          INSTANCES: summary["instances"],
          RECORDS_WRITTEN: sum(summary["records_per_shard"].values()),
          INPUT_BYTES: sum(input_bytes.values())}


def progress_request_secs(interval_secs):
  """How often the runner should ask its workers for progress: at least
  twice per line, so that a bundle shorter than a line is seen too."""
  return min(1.0, interval_secs / 2)


def _megabytes(num_bytes):
  return f"{num_bytes / 1e6:,.1f} MB"


def _duration(seconds):
  if seconds < 120:
    return f"{seconds:.0f} s"
  minutes, seconds = divmod(round(seconds), 60)
  if minutes < 120:
    return f"{minutes} min {seconds:02d} s"
  return f"{minutes // 60} h {minutes % 60:02d} min"


class PipelineProgress:
  """Logs the pipeline's counters every interval_secs while a run goes on.

  Use as a context manager around the run; then `log_final(result)`.

  Args:
    namespace: the Beam counter namespace of the pipeline's counters.
    total_input_bytes: bytes of all planned read ranges (the input files).
    interval_secs: seconds between two lines.
    live_from_workers: hook the FnApiRunner's progress answers (see the
      module doc); False on runners whose counters come only at the end.
    not_live_note: what the lines say instead of counts when not live.
    log: where the lines go (a logging function of one string).
    clock: seconds, as time.monotonic (tests pass their own).
  """

  def __init__(self, namespace, total_input_bytes, interval_secs,
               live_from_workers, not_live_note="", log=_LOGGER.info,
               clock=time.monotonic):
    self._namespace = namespace
    self._total_input_bytes = total_input_bytes
    self._interval_secs = interval_secs
    self._live = live_from_workers
    self._not_live_note = not_live_note
    self._log = log
    self._clock = clock
    self._lock = threading.Lock()
    self._per_bundle = {}  # bundle id -> {counter name: largest value seen}
    self._stop = threading.Event()
    self._thread = None
    self._exit_stack = None
    self._start = self._last_time = None
    self._last_instances = 0

  def update(self, bundle_id, counters):
    """Records a bundle's counters so far (from any thread).

    An answer that comes after the bundle ended is empty, and answers may
    arrive out of order: per bundle and counter the largest value is kept,
    so the totals never go down.
    """
    with self._lock:
      kept = self._per_bundle.setdefault(bundle_id, {})
      for name, value in counters.items():
        kept[name] = max(kept.get(name, 0), value)

  def totals(self):
    """{counter name: sum over bundles} of the counts seen so far."""
    with self._lock:
      totals = {}
      for counters in self._per_bundle.values():
        for name, value in counters.items():
          totals[name] = totals.get(name, 0) + value
    return totals

  @staticmethod
  def _counts_text(counters, rate):
    return (f"{counters.get(DOCUMENTS_READ, 0):,} documents read, "
            f"{counters.get(INSTANCES, 0):,} instances ({rate:,.0f}/s), "
            f"{counters.get(RECORDS_WRITTEN, 0):,} records written")

  def line(self):
    """The progress line now."""
    now = self._clock()
    elapsed = now - self._start
    head = f"progress {_duration(elapsed)}: "
    if not self._live:
      return head + "running" + (f" ({self._not_live_note})"
                                 if self._not_live_note else "")
    counters = self.totals()
    instances = counters.get(INSTANCES, 0)
    rate = ((instances - self._last_instances) /
            max(now - self._last_time, 1e-9))
    self._last_instances, self._last_time = instances, now
    read = counters.get(INPUT_BYTES, 0)
    total = self._total_input_bytes
    if read >= total:  # (Planned sizes: read never passes total.)
      where = f"input read ({_megabytes(total)}), grouping and writing shards"
    elif read:
      eta = elapsed * (total - read) / read
      where = (f"input {_megabytes(read)} of {_megabytes(total)} read "
               f"({100 * read / total:.0f}%), ETA {_duration(eta)}")
    else:
      where = f"input 0 of {_megabytes(total)} read, no ETA yet"
    return head + self._counts_text(counters, rate) + "; " + where

  def log_final(self, result, counts_without_metrics=None):
    """Logs the committed counters of the finished run; returns them.

    counts_without_metrics: () -> {counter name: value}, the counts to log
    when the runner has no queryable metrics (e.g. summary_counts).
    """
    elapsed = self._clock() - self._start
    try:
      counters = committed_counters(result, self._namespace)
    except Exception as e:  # pylint: disable=broad-except
      # The run has written its output; a runner without queryable metrics
      # must not fail it.
      if counts_without_metrics is None:
        self._log(f"done in {_duration(elapsed)} (no counters from the "
                  f"runner: {e})")
        return None
      counters = counts_without_metrics()
    rate = counters.get(INSTANCES, 0) / max(elapsed, 1e-9)
    self._log(f"done in {_duration(elapsed)}: "
              + self._counts_text(counters, rate)
              + f"; input {_megabytes(counters.get(INPUT_BYTES, 0))} read")
    return counters

  # ------------------------------------------------------------ the run
  def __enter__(self):
    self._start = self._last_time = self._clock()
    self._stop.clear()
    self._exit_stack = contextlib.ExitStack()
    if self._live:
      self._exit_stack.enter_context(self._answers_from_workers())
    self._thread = threading.Thread(target=self._log_every_interval,
                                    name="data-prep-progress", daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc_info):
    self._stop.set()
    self._thread.join()
    self._exit_stack.close()

  def _log_every_interval(self):
    while not self._stop.wait(self._interval_secs):
      self._log(self.line())

  def _answers_from_workers(self):
    """Routes the FnApiRunner's progress answers to `update` during the run."""
    def on_answer(instruction_id, answer):
      self.update(instruction_id,
                  user_counters(answer.monitoring_infos, self._namespace))
    return beam_compat.progress_answers(on_answer)
