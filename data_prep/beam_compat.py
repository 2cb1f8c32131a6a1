"""The Apache Beam (and argparse) internals data prep needs: the only place
that reads a private name, each with why no public API does the job.

tests/test_beam_compat.py checks every name used here on the installed Beam,
so an upgrade that removes one fails there, naming it, instead of in the
middle of a pipeline run.
"""

import contextlib

# (module, attribute) pairs this module reads; the test checks each exists.
REQUIRED = (
    ("apache_beam.io.tfrecordio", "_TFRecordUtil"),
    ("apache_beam.runners.portability.fn_api_runner.fn_runner",
     "ProgressRequester"),
    ("apache_beam.runners.dask.dask_runner", "DaskOptions._extract_bag_kwargs"),
)


def option_names(parser):
  """Every option string of an argparse parser, without the leading "-"s.

  argparse has no public listing of its options, and Beam's option names
  differ from their PipelineOptions keys (`--experiment` sets
  "experiments", `--no_save_main_session` clears "save_main_session"), so
  the names a user may type come from the parser's actions.
  """
  return {option.lstrip("-") for action in parser._actions  # pylint: disable=protected-access
          for option in action.option_strings}


def dask_bag_kwargs(dask_options):
  """The dask.bag arguments among the DaskRunner's options (npartitions,
  partition_size), taken out of dask_options, which then hold only the
  Client's.

  data_prep.dask_cluster.WatchedDaskRunner does what Beam's
  DaskRunner.run_pipeline does, but creates the client under a bound
  (dask.distributed bounds no handshake); the split of the options is
  Beam's private DaskOptions._extract_bag_kwargs, with no public name.
  """
  from apache_beam.runners.dask.dask_runner import DaskOptions  # pylint: disable=g-import-not-at-top
  return DaskOptions._extract_bag_kwargs(dask_options)  # pylint: disable=protected-access


def write_tfrecord(f, record):
  """Writes one record with TFRecord framing (length, CRC-32C masks) to f.

  Beam's only public TFRecord writer is the WriteToTFRecord transform, which
  deals records to shards in arrival order; data prep writes each shard
  itself (data_prep.transforms.WriteShardFn) and reuses Beam's framing code
  and its fast CRC-32C.
  """
  from apache_beam.io.tfrecordio import _TFRecordUtil  # pylint: disable=g-import-not-at-top
  _TFRecordUtil.write_record(f, record)


@contextlib.contextmanager
def progress_answers(on_answer):
  """Calls on_answer(instruction_id, answer) with the FnApiRunner's progress
  answers (ProcessBundleProgressResponse) while the context is open.

  The FnApiRunner asks a running bundle for its counters every
  progress_request_frequency seconds through ProgressRequester, which takes
  a callback, but the runner passes none and has no public hook for one: the
  module-level name the runner builds it by is swapped for a subclass that
  passes one, and restored on exit (so two overlapping runs in one process
  must not both use this).
  """
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=g-import-not-at-top
  original = fn_runner.ProgressRequester

  class ReportingRequester(original):

    def __init__(self, worker_handler, instruction_id, frequency,
                 callback=None):
      def report(answer):
        on_answer(instruction_id, answer)
        if callback is not None:
          callback(answer)
      super().__init__(worker_handler, instruction_id, frequency, report)

  fn_runner.ProgressRequester = ReportingRequester
  try:
    yield
  finally:
    fn_runner.ProgressRequester = original
