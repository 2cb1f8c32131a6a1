"""data_prep.beam_compat: the Beam private names it reads still exist and
still behave; a Beam upgrade that removes one fails here, naming it."""

import importlib
import io
import time

import apache_beam as beam
import pytest

from data_prep import beam_compat
from data_prep import runners


@pytest.mark.parametrize("module, attribute", beam_compat.REQUIRED)
def test_the_beam_names_used_exist(module, attribute):
  owner = importlib.import_module(module)
  for part in attribute.split("."):
    assert hasattr(owner, part), (
        f"{module}.{attribute}: no {part!r} in this Beam "
        f"{beam.__version__}; update data_prep/beam_compat.py")
    owner = getattr(owner, part)


def test_option_names_are_the_strings_a_user_types():
  parser = runners.beam_option_parser()
  assert hasattr(parser, "_actions"), (
      f"Beam's option parser ({type(parser).__name__}) has no _actions; "
      "update data_prep/beam_compat.option_names")
  names = beam_compat.option_names(parser)
  # Option strings of the core, the DirectRunner and Dataflow, also those
  # that are no PipelineOptions key (--experiment sets "experiments",
  # --worker_machine_type "machine_type").
  assert {"runner", "direct_num_workers", "direct_running_mode", "experiment",
          "no_save_main_session", "worker_machine_type", "project",
          "temp_location"} <= names


def test_write_tfrecord_frames_as_tensorflow_does():
  f = io.BytesIO()
  beam_compat.write_tfrecord(f, b"abc")
  beam_compat.write_tfrecord(f, b"")
  # tf.io.TFRecordWriter's bytes for the same two records.
  assert f.getvalue().hex() == (
      "0300000000000000b099490e6162636e57f121"
      "000000000000000029039807d8ea82a2")


class _Slow(beam.DoFn):

  def process(self, element):
    time.sleep(0.3)  # Long enough for several progress requests.
    yield element


def test_progress_answers_reach_the_callback_during_a_run_and_only_then():
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=g-import-not-at-top
  original = fn_runner.ProgressRequester
  answers = []
  with beam_compat.progress_answers(
      lambda bundle, answer: answers.append((bundle, answer))):
    runner = fn_runner.FnApiRunner(progress_request_frequency=0.02)
    with beam.Pipeline(runner=runner) as p:
      _ = p | beam.Create([1]) | beam.ParDo(_Slow())
  assert fn_runner.ProgressRequester is original
  assert answers, ("no progress answer: FnApiRunner no longer builds "
                   "fn_runner.ProgressRequester by its module-level name")
  bundle, answer = answers[0]
  assert isinstance(bundle, str) and bundle
  assert hasattr(answer, "monitoring_infos")
