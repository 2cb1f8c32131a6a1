"""Which Beam runner a data prep run uses, with which options, and how its
progress is followed.

Beam's pipeline options are accepted by their Beam names (--runner,
--direct_num_workers, Dataflow's --project, ...), so the same command runs on
Dask, Dataflow, Flink or Spark; any other unknown flag is an error. Without
--runner the pipeline runs locally on the DirectRunner's batch engine, with
worker processes when --direct_num_workers > 1 (see choose_runner).
"""

import argparse
import os
import re
import sys

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions

from albert_tf.core import errors
from data_prep import beam_compat
from data_prep import progress as progress_lib

# --runner values that mean Beam's local DirectRunner (create_runner's
# spellings); choose_runner runs them without the PrismRunner attempt.
_DIRECT_RUNNER_NAMES = ("directrunner", "direct")
# Runners Beam ships whose short name its create_runner does not know.
_RUNNER_CLASS_PATHS = {
    "daskrunner": "apache_beam.runners.dask.dask_runner.DaskRunner",
}


ClusterError = errors.ClusterError  # what a run's callers catch


def beam_option_parser():
  """The parser PipelineOptions parses with: every PipelineOptions subclass's
  options, so an option of any installed runner or IO (Dataflow, Flink,
  Spark, S3, ...) is known by its Beam name. A bad value raises
  argparse.ArgumentError instead of exiting.
  """
  parsers = []
  PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
  parser = parsers[0]
  parser.exit_on_error = False
  # None = not given, so that choose_runner can tell a default from a choice.
  parser.set_defaults(runner=None, direct_running_mode=None,
                      direct_num_workers=None)
  return parser


def beam_option_names():
  """Names of Beam's pipeline options, without the leading "--"."""
  return beam_compat.option_names(beam_option_parser())


def _named_runner(pipeline_args):
  """The --runner value among pipeline_args, or None."""
  parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
  parser.add_argument("--runner")
  known, _ = parser.parse_known_args(list(pipeline_args))
  return known.runner


def parse_pipeline_args(pipeline_args):
  """(argparse namespace, arguments that are no Beam pipeline option).

  The --runner named is loaded first: a runner's own options (the
  DaskRunner's --dask_client_address, ...) are known once its module is
  imported.

  Raises:
    ValueError: one line naming the option, for a bad value of a Beam option
      or a runner that cannot be loaded.
  """
  runner_name = _named_runner(pipeline_args)
  if runner_name and runner_name.lower() not in _DIRECT_RUNNER_NAMES:
    _create_runner(runner_name)
  try:
    return beam_option_parser().parse_known_args(list(pipeline_args))
  except argparse.ArgumentError as e:
    match = re.match(r"argument ([^:]+): (.*)$", str(e))
    if match:
      raise ValueError(errors.error_line(
          match.group(2), match.group(1), "a Beam pipeline option")) from e
    raise ValueError(errors.error_line(
        str(e), hint="Beam pipeline options")) from e


def _direct_batch_runner(options, progress_request_secs=None):
  # What Beam's DirectRunner runs a batch pipeline on once the PrismRunner
  # is out of the way: the FnApiRunner, given the options the same way;
  # progress_request_secs: how often it asks workers for their counters so
  # far (data_prep.progress).
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.portable_runner import JobServiceHandle
  encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
  return fn_runner.FnApiRunner(
      provision_info=fn_runner.ExtendedProvisionInfo(
          beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)),
      progress_request_frequency=progress_request_secs)


def choose_runner(pipeline_args, progress_request_secs=None,
                  parallel_elements=None, no_worker_timeout_secs=60):
  """(PipelineOptions, runner object or None, one line saying what was picked).

  No --runner: the DirectRunner. Beam's DirectRunner first tries the
  PrismRunner, which downloads its binary from GitHub on first use (offline:
  a failed download, then a fallback), so a DirectRunner run goes straight to
  the engine the DirectRunner uses for batch pipelines (FnApiRunner);
  --runner=PrismRunner or SwitchingDirectRunner still get Beam's choice.
  --direct_num_workers above 1 (or 0: one per core) without
  --direct_running_mode: multi_processing, because Beam's default in_memory
  mode runs every worker in this one process. Options given win.
  progress_request_secs: how often the DirectRunner asks its workers for
  their counters so far (None: never). parallel_elements: how many elements
  the pipeline's Create spreads over the workers (its read ranges); the
  DaskRunner cuts them into partitions of 128 by default, so a run of about
  64 ranges would be one task on one worker: without --dask_npartitions or
  --dask_partition_size it gets two partitions per worker thread of the
  cluster (more cost more than they balance: benchmarks/README.md), at most
  one per element. --dask_client_address is checked first, within
  --dask_connection_timeout seconds (10 unless given; the runner's client
  gets it too): a scheduler that does not answer, or has no worker, is a
  ClusterError. The DaskRunner is data_prep.dask_cluster's: a run whose
  scheduler goes away, or whose cluster has had no worker for
  no_worker_timeout_secs, ends in one line.

  Raises:
    ValueError: an argument that is no Beam pipeline option, or a bad value.
    ClusterError: the Dask scheduler named does not answer, or has no worker.
  """
  known, unknown = parse_pipeline_args(pipeline_args)
  if unknown:
    raise ValueError(errors.describe_unknown_argument(
        unknown[0], beam_option_names()))
  args, picked = list(pipeline_args), []
  if known.runner is None:
    picked.append("--runner=DirectRunner")
  runner_name = known.runner or "DirectRunner"
  direct = (runner_name.lower() in _DIRECT_RUNNER_NAMES
            and not known.streaming)  # Streaming needs Beam's own choice.
  workers = known.direct_num_workers
  if workers == 0:
    workers = os.cpu_count() or 1
  if direct and known.direct_running_mode is None and (workers or 1) > 1:
    picked.append("--direct_running_mode=multi_processing")
  dask = _RUNNER_CLASS_PATHS.get(runner_name.lower(), runner_name).endswith(
      "DaskRunner")
  if dask:
    _create_runner(runner_name)  # (Its options exist once it is loaded.)
    from data_prep import dask_cluster  # pylint: disable=g-import-not-at-top
    timeout = known.timeout
    if any(a.startswith("--dask_connection_timeout") for a in args) and (
        not isinstance(timeout, int) or timeout < 1):
      raise ValueError(errors.error_line(
          "must be a whole number of seconds, at least 1",
          "--dask_connection_timeout", "e.g. --dask_connection_timeout=30"))
    if not isinstance(timeout, int):  # Not given.
      timeout = dask_cluster.CONNECTION_TIMEOUT_SECS
      picked.append(f"--dask_connection_timeout={timeout}")
    # No address: the runner starts a LocalCluster of this machine's cores.
    threads = (dask_cluster.check_scheduler(known.address, timeout)
               if known.address else os.cpu_count() or 1)
    if (parallel_elements and known.npartitions is None
        and known.partition_size is None):
      picked.append(
          f"--dask_npartitions={min(parallel_elements, 2 * threads)}")
  # Each worker's INFO lines (channels, handlers, options: some 40 per
  # worker) reach this process's log; --verbose keeps them.
  quiet = ([] if "--verbose" in sys.argv or any(
      a.startswith("--default_sdk_harness_log_level") for a in args)
           else ["--default_sdk_harness_log_level=WARNING"])
  options = PipelineOptions(args + picked + quiet)
  if direct:
    runner = _direct_batch_runner(options, progress_request_secs)
    direct_options = options.view_as(DirectOptions)
    what = (f"DirectRunner (batch engine FnApiRunner, PrismRunner not tried), "
            f"direct_running_mode={direct_options.direct_running_mode}, "
            f"direct_num_workers={direct_options.direct_num_workers}")
  elif dask:
    from data_prep import dask_cluster  # pylint: disable=g-import-not-at-top
    runner = dask_cluster.WatchedDaskRunner(no_worker_timeout_secs)
    what = (f"{runner_name} (its scheduler and workers watched: "
            f"--no_worker_timeout_secs={no_worker_timeout_secs:g})")
  else:
    runner, what = _create_runner(runner_name), runner_name
  description = f"Beam runner: {what}" + (
      f" (picked here: {' '.join(picked)}; give them to choose)" if picked
      else " (as given)")
  return options, runner, description


def _create_runner(name):
  # Now rather than when the pipeline starts: a misspelt runner or a
  # runner whose extras are missing fails before the output is created.
  from apache_beam.runners import runner as runner_lib
  try:
    return runner_lib.create_runner(
        _RUNNER_CLASS_PATHS.get(name.lower(), name))
  except ImportError as e:
    raise ValueError(errors.error_line(
        f"runner {name!r} cannot be loaded ({type(e).__name__}: {e})",
        "--runner", "install its packages: pip install 'albert_tf[data]' "
        "brings the DaskRunner's (dask[distributed]); other runners need "
        "their apache-beam extra")) from e
  except ValueError as e:
    raise ValueError(errors.error_line(
        f"unknown runner {name!r}", "--runner",
        "e.g. DirectRunner, PrismRunner, DataflowRunner, FlinkRunner, "
        "SparkRunner, DaskRunner, or a PipelineRunner class path")) from e


def pipeline_progress(runner, pipeline_options, total_input_bytes,
                      interval_secs):
  """The PipelineProgress of a run: live counts from the DirectRunner's
  worker processes or threads; elsewhere, a line saying where they are."""
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  mode = pipeline_options.view_as(DirectOptions).direct_running_mode
  direct = isinstance(runner, fn_runner.FnApiRunner)
  live = direct and mode != "in_memory"
  if live:
    note = ""
  elif direct:
    note = ("direct_running_mode=in_memory gives its counts at the end; "
            "--direct_num_workers=2 runs worker processes, which report them "
            "as they go")
  else:
    note = "the runner's own UI shows the counters as they go"
  return progress_lib.PipelineProgress(
      progress_lib.NAMESPACE, total_input_bytes, interval_secs, live, note)


def make_workers_find_this_package():
  """Puts this checkout on PYTHONPATH and sys.path, for the workers."""
  # Multi-process and portable workers import data_prep/albert_tf by name;
  # they inherit the environment, not the launcher's sys.path.
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
  if root not in paths:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root] + paths))
  if root not in sys.path:
    sys.path.insert(0, root)
