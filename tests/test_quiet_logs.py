"""A command on a CPU-only machine prints its own lines, not TensorFlow's.

train_vocab, create_pretraining_data, run_pretraining and run_classifier
(slow tier), and export_saved_model, export_tflite and export_onnx of a
tiny fine-tuned classifier, as fresh processes: stderr holds no C++ start-up line (CUDA stub, cuInit,
oneDNN, "All log messages before absl::InitializeLog()") and no INFO line
from TensorFlow's Python (the SavedModel builder's "Assets written to",
"Writing fingerprint", the saver's "Sharding callback duration", signature
names); `--verbose` keeps them. A predict-only fine-tuning run prints no training
cadence (iterations_per_loop against the checkpoint interval), which a
training run with the same flags does.
"""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from albert_tf import run_classifier
from tests import cli_runner
from tests.fixtures_data import write_tiny_sentiment
from tests.fixtures_data import write_tiny_vocab_and_config

REPO = pathlib.Path(__file__).resolve().parents[1]
CHARS = "好差很不是的电影"
# TF's runtime lines: glog's prefix (C++) or absl's (Python) naming a file
# of TensorFlow, and the lines printed before absl is initialised.
_TF_LINE = re.compile(
    r"(^[IWEF]\d{4} [\d:.]+\s+\d+ (\S+\.cc|signature_serialization\.py|"
    r"functional_saver\.py|builder_impl\.py|fingerprinting_utils\.py):\d+\])"
    r"|All log messages before absl::InitializeLog|cuInit|oneDNN")


def _run(argv, cwd):
  env = dict(os.environ, PYTHONPATH=str(REPO))
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a user's shell has it
  return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)


# Three exports, each now checked in its runtime (about 36 s): slow tier.
@pytest.mark.slow
def test_export_and_tflite_print_no_tensorflow_lines(tmp_path):
  write_tiny_sentiment(tmp_path, CHARS)
  run_classifier.run(task_name="sentiment", data_dir=str(tmp_path),
                     output_dir=str(tmp_path / "clf"),
                     vocab_file=str(tmp_path / "vocab.txt"),
                     albert_config_file=str(tmp_path / "config.json"),
                     max_seq_length=8, train_batch_size=8, train_step=1,
                     # The dev split recorded: the exports check on it
                     # (without one they warn that they check on made-up
                     # text, a line of their own, not TF's).
                     do_train=True, do_eval=True, baseline=False)
  export = _run(["albert_tf.export_saved_model", "--checkpoint=clf",
                 "--export_dir=export"], tmp_path)
  tflite = _run(["albert_tf.export_tflite", "--saved_model=export/1",
                 "--output=clf.tflite"], tmp_path)
  onnx = _run(["albert_tf.export_onnx", "--saved_model=export/1",
               "--output=clf.onnx", "--quantize=dynamic"], tmp_path)
  for proc in (export, tflite, onnx):
    assert proc.returncode == 0, proc.stderr[-3000:]
    noise = [l for l in proc.stderr.splitlines() if _TF_LINE.search(l)]
    assert noise == [], noise[:5]
  # tf2onnx's and the ONNX quantizer's INFO lines ("Using opset", a line
  # per quantized tensor) and the quantizer's pre-processing advice: none.
  assert onnx.stderr == "", onnx.stderr[-3000:]
  assert export.stdout.splitlines()[-1] == (
      "Exported the recorded task to export/1")
  # --verbose keeps TensorFlow's lines (the check above can fail).
  loud = _run(["albert_tf.export_tflite", "--saved_model=export/1",
               "--output=clf2.tflite", "--verbose"], tmp_path)
  assert loud.returncode == 0, loud.stderr[-3000:]
  assert [l for l in loud.stderr.splitlines() if _TF_LINE.search(l)]


def test_a_predict_only_run_prints_no_training_cadence(tmp_path):
  write_tiny_vocab_and_config(tmp_path, CHARS)
  rows = [f"{i % 2}\t{'好' if i % 2 else '差'}很不是" for i in range(8)]
  for split in ("train", "dev", "test"):
    (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                           encoding="utf-8")
  flags = ["--task_name=sentiment", f"--data_dir={tmp_path}",
           f"--vocab_file={tmp_path / 'vocab.txt'}",
           f"--albert_config_file={tmp_path / 'config.json'}",
           "--max_seq_length=8", "--train_batch_size=4",
           "--iterations_per_loop=10", "--nobaseline"]
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
  cadence = ("2 steps per call (--iterations_per_loop=10): a call must end "
             "at every checkpoint and at the last step, which are 2 steps "
             "apart in this run")
  train = cli_runner.run_module(
      ["albert_tf.run_classifier", *flags, f"--output_dir={tmp_path / 'clf'}",
       "--do_train", "--train_step=2"], cwd=tmp_path, env=env)
  assert train.returncode == 0, train.stderr[-3000:]
  assert cadence in train.stderr
  predict = cli_runner.run_module(
      ["albert_tf.run_classifier", *flags, f"--output_dir={tmp_path / 'p'}",
       f"--init_checkpoint={tmp_path / 'clf'}", "--nodo_train",
       "--do_predict"], cwd=tmp_path, env=env)
  assert predict.returncode == 0, predict.stderr[-3000:]
  assert (tmp_path / "p" / "test_results.tsv").exists()
  assert "iterations_per_loop" not in predict.stderr


def _tf_lines(stderr):
  return [l for l in stderr.splitlines() if _TF_LINE.search(l)]


@pytest.mark.slow
def test_every_training_and_data_command_prints_no_tensorflow_lines(tmp_path):
  """train_vocab, create_pretraining_data, run_pretraining and
  run_classifier as a user runs them (fresh processes, no
  TF_CPP_MIN_LOG_LEVEL): no CUDA, oneDNN or other TF runtime line."""
  from tests.pretraining_fixtures import tiny_argv  # pylint: disable=g-import-not-at-top
  (tmp_path / "pre").mkdir()
  corpus = tmp_path / "corpus.txt"
  rng = np.random.default_rng(0)
  pool = [chr(0x4E00 + i) for i in range(300)]
  corpus.write_text("".join(
      "".join(rng.choice(pool, 12)) + "。\n" + "".join(rng.choice(pool, 9))
      + "。\n\n" for _ in range(80)), encoding="utf-8")
  runs = {
      "train_vocab": ["data_prep.train_vocab", f"--input={corpus}",
                      "--model_prefix=vocab/spm", "--vocab_size=306"],
      "create_pretraining_data": [
          "data_prep.create_pretraining_data", f"--input_file={corpus}",
          "--output_dir=records", "--spm_model_file=vocab/spm.model",
          "--max_seq_length=16", "--max_predictions_per_seq=2",
          "--dupe_factor=1", "--num_shards=1"],
      "run_pretraining": ["albert_tf.run_pretraining",
                          *tiny_argv(tmp_path / "pre")],
  }
  for name, argv in runs.items():
    proc = _run(argv, tmp_path)
    assert proc.returncode == 0, (name, proc.stderr[-3000:])
    assert _tf_lines(proc.stderr) == [], (name, _tf_lines(proc.stderr)[:5])
  write_tiny_vocab_and_config(tmp_path, CHARS)
  rows = [f"{i % 2}\t{'好' if i % 2 else '差'}很不是" for i in range(8)]
  for split in ("train", "dev"):
    (tmp_path / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                           encoding="utf-8")
  proc = _run(["albert_tf.run_classifier", "--task_name=sentiment",
               f"--data_dir={tmp_path}", "--vocab_file=vocab.txt",
               "--albert_config_file=config.json", "--max_seq_length=8",
               "--train_batch_size=4", "--train_step=2", "--do_train",
               "--output_dir=clf"], tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert _tf_lines(proc.stderr) == [], _tf_lines(proc.stderr)[:5]


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_the_lite_interpreter_deprecation_warning_is_quiet_but_verbose():
  """TF's converter builds a tf.lite.Interpreter to calibrate int8, which
  warns that it is deprecated: a quiet command drops that warning (TF's
  own text, as TF issues it), a --verbose one (no quieting) keeps it."""
  issue = ("import warnings\n"
           "from tensorflow.lite.python import interpreter\n"
           "warnings.warn(interpreter._INTERPRETER_DELETION_WARNING)\n")
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
  runs = {}
  for quiet in (True, False):
    code = ("from albert_tf.core import quiet_logs\n"
            "quiet_logs.import_tensorflow_quietly()\n" if quiet else "")
    runs[quiet] = subprocess.run(
        [sys.executable, "-c", code + issue], env=env, capture_output=True,
        text=True, timeout=300, check=False)
    assert runs[quiet].returncode == 0, runs[quiet].stderr[-2000:]
  assert "tf.lite.Interpreter is deprecated" not in runs[True].stderr
  assert "tf.lite.Interpreter is deprecated" in runs[False].stderr
