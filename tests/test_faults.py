"""Fault injection for training, fine-tuning data and export: one row per fault.

Each row makes one fault happen and asserts what the user must see: an
error naming the file or flag, a fallback with a warning, a clean-up with a
log line, or files that a server running as another user can read. The
data-prep and pretraining-input faults are rows of tests/test_faults_data.py.
"""

import contextlib
import gc
import io
import json
import logging
import os
import re
import stat

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import classifier_data as cd
from albert_tf.core import cli_errors
from albert_tf.data import record_checks
from albert_tf import run_pretraining as rp
from albert_tf import export_saved_model
from albert_tf import run_classifier
from albert_tf.training import resolution
from albert_tf.core.config import AlbertConfig
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.data.tokenization import load_tokenizer
from tests.fixtures_data import fault_rows, write_tiny_vocab_and_config
from tests.pretraining_fixtures import tiny_argv

CHARS = "好差很不是的电影书手机质量服务一般"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults")
  write_tiny_vocab_and_config(root, CHARS)
  rng = np.random.default_rng(0)
  for split, n in (("train", 32), ("dev", 16), ("test", 8)):
    rows = [f"{i % 2}\t{''.join(rng.choice(list(CHARS), 6))}"
            for i in range(n)]
    (root / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                       encoding="utf-8")
  return root


def _options(data, output_dir, **kw):
  options = dict(task_name="sentiment", data_dir=str(data),
                 output_dir=str(output_dir),
                 vocab_file=str(data / "vocab.txt"),
                 albert_config_file=str(data / "config.json"),
                 max_seq_length=16, train_batch_size=8, eval_batch_size=16,
                 learning_rate=0.01, classifier_dropout=0.0, train_step=4,
                 eval_every_steps=2, log_every_steps=1, iterations_per_loop=1,
                 do_train=True, do_eval=True)
  options.update(kw)
  return options


def _jsonl(path):
  return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


# ------------------------------------------------------------ the rows
def truncated_latest_checkpoint(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out))
  data_file = next(out.glob("ckpt-4.data-*"))
  data_file.write_bytes(data_file.read_bytes()[:100])  # cut short
  with caplog.at_level(logging.WARNING):
    result = run_classifier.run(**_options(data, out, train_step=6))
  assert result["num_train_steps"] == 6
  warned = [r.getMessage() for r in caplog.records if "unreadable" in
            r.getMessage()]
  assert warned and "ckpt-4" in warned[0] and "falling back" in warned[0]
  # Resumed from step 2: steps 3..6 trained again, each logged once.
  assert [r["step"] for r in _jsonl(out / "train_log.jsonl")] == [1, 2, 3, 4,
                                                                  5, 6]


def eval_only_without_a_checkpoint(data, tmp, caplog):
  # Through the command line's error wrapper (cli_errors.run_main's): exit
  # code 1 and one line on stderr.
  code, stderr = _one_line_error(lambda: run_classifier.run(
      **_options(data, tmp / "typo", do_train=False)))
  errors = [l for l in stderr.splitlines() if l.startswith("error:")]
  assert code == 1 and len(errors) == 1, stderr
  assert re.search(r"holds no checkpoint.*mistyped", errors[0]), errors
  assert not (tmp / "typo" / "eval_results.json").exists()


def train_steps_at_or_below_the_checkpoint(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out))
  logged = (out / "train_log.jsonl").read_text()
  for steps in (4, 2):  # equal to the checkpoint's step, then below it
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      run_classifier.run(**_options(data, out, train_step=steps))
    said = [r.getMessage() for r in caplog.records
            if "Nothing to train" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], said
    # The fine-tuning commands' flag (--num_train_steps is pretraining's).
    assert f"is at step 4, --train_step={steps} (raise it" in said[0]
  assert (out / "train_log.jsonl").read_text() == logged  # not a step more


def tokenizer_larger_than_the_vocabulary(data, tmp, caplog):
  # A checkpoint of the fixture's 22-piece vocabulary, fine-tuned with a
  # vocab file of 30: ids 22..29 would have no embedding.
  tf.train.Checkpoint().write(str(tmp / "ckpt" / "ckpt-1"))
  AlbertConfig.from_json_file(data / "config.json").to_json_file(
      tmp / "ckpt" / "albert_config.json")
  vocab = (data / "vocab.txt").read_text(encoding="utf-8").split()
  (tmp / "big_vocab.txt").write_text(
      "\n".join(vocab + list("甲乙丙丁戊己庚辛")) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"big_vocab\.txt has 30 tokens but "
                     r"the model config has vocab_size=22"):
    resolution.resolve_model(init_checkpoint=str(tmp / "ckpt" / "ckpt-1"),
                             vocab_file=str(tmp / "big_vocab.txt"))


def stale_temporary_checkpoint(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out, train_step=2))
  stale = out / "ckpt-3_temp"
  stale.mkdir()
  (stale / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
  with caplog.at_level(logging.WARNING):
    run_classifier.run(**_options(data, out, train_step=4))
  assert not stale.exists()
  assert any("ckpt-3_temp" in r.getMessage() for r in caplog.records)


def log_lines_after_the_checkpoint(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out))
  # As if killed after logging steps 3 and 4 but before saving ckpt-4.
  for path in out.glob("ckpt-4.*"):
    path.unlink()
  state = (out / "checkpoint").read_text().replace("ckpt-4", "ckpt-2")
  (out / "checkpoint").write_text(state)
  run_classifier.run(**_options(data, out))
  assert [r["step"] for r in _jsonl(out / "train_log.jsonl")] == [1, 2, 3, 4]
  assert [r["global_step"] for r in _jsonl(out / "eval_log.jsonl")] == [0, 2,
                                                                       4]


def extra_tab_in_a_line(data, tmp, caplog):
  (tmp / "train.tsv").write_text("1\t好\n0\t差\tmore text\n", encoding="utf-8")
  with pytest.raises(cd.DataError, match=r"train.tsv:2: line has 3 "
                     r"tab-separated fields where task sentiment has 2"):
    cd.read_examples(cd.get_task("sentiment"), str(tmp), "train")


def extra_tab_on_the_first_line(data, tmp, caplog):
  # Line 1 is no reference: the task's columns are, else most lines.
  (tmp / "train.tsv").write_text("1\t好\tmore text\n0\t差\n1\t很好\n",
                                 encoding="utf-8")
  with pytest.raises(cd.DataError, match=r"train.tsv:1: line has 3 "
                     r"tab-separated fields where task sentiment has 2"):
    cd.read_examples(cd.get_task("sentiment"), str(tmp), "train")
  tsv = cd.get_task("tsv", text_a_column="1", label_column="0",
                    label_list=["0", "1"])
  with pytest.raises(cd.DataError, match=r"train.tsv:1: line has 3 "
                     r"tab-separated fields where most lines of the file "
                     r"have 2"):
    cd.read_examples(tsv, str(tmp), "train")
  # What loses nothing still loads: every line ending in a tab, and a headed
  # file whose lines lack only a trailing column that no field is read from.
  (tmp / "train.tsv").write_text("1\t好\t\n0\t差\t\n", encoding="utf-8")
  assert [e.text_a for e in cd.read_examples(
      cd.get_task("sentiment"), str(tmp), "train")[0]] == ["好", "差"]
  (tmp / "train.tsv").write_text("label\ttext\tnote\n1\t好\tx\n0\t差\n",
                                 encoding="utf-8")
  headed = cd.get_task("tsv", text_a_column="text", label_column="label",
                       label_list=["0", "1"], has_header=True)
  assert [e.label for e in cd.read_examples(headed, str(tmp), "train")[0]
          ] == ["1", "0"]


def too_long_text(data, tmp, caplog):
  # Lines 2 and 4 of 4 hold more than max_seq_length=8 tokens.
  (tmp / "train.tsv").write_text("1\t好\n0\t" + "差" * 9 + "\n1\t很好\n0\t"
                                 + "不" * 12 + "\n", encoding="utf-8")
  task = ClassificationTask(cd.get_task("sentiment"),
                            load_tokenizer(vocab_file=str(data / "vocab.txt")),
                            str(tmp), max_seq_length=8)
  with caplog.at_level(logging.INFO):
    stats = task.load_split("train")[2]
  assert (stats["truncated"], stats["tokens_removed"]) == (2, 3 + 6)
  lines = [r for r in caplog.records if "truncated to" in r.getMessage()]
  assert len(lines) == 1 and lines[0].levelno == logging.WARNING
  assert ("2 truncated to max_seq_length=8 (9 tokens removed; the first at "
          f"{tmp / 'train.tsv'}:2, {tmp / 'train.tsv'}:4)"
          in lines[0].getMessage())


def non_utf8_line(data, tmp, caplog):
  (tmp / "train.tsv").write_bytes("1\t好\n".encode() + b"0\t\xb2\xee\n")
  with pytest.raises(cd.DataError, match=r"train.tsv:2: not UTF-8 text"):
    cd.read_examples(cd.get_task("sentiment"), str(tmp), "train")


def utf8_bom_and_crlf_are_fine(data, tmp, caplog):
  (tmp / "train.tsv").write_bytes(b"\xef\xbb\xbflabel\ttext\r\n1\t\xe5\xa5\xbd"
                                  b"\r\n")
  spec = cd.get_task("tsv", text_a_column="text", label_column="label",
                     label_list=["0", "1"])
  examples, _ = cd.read_examples(spec, str(tmp), "train")
  assert [(e.text_a, e.label) for e in examples] == [("好", "1")]


def one_class_label_list(data, tmp, caplog):
  with pytest.raises(ValueError, match="at least two classes"):
    cd.get_task("tsv", text_a_column="0", label_column="1",
                label_list=["pos"])
  (tmp / "train.tsv").write_text("text\tlabel\n好\tpos\n很好\tpos\n",
                                 encoding="utf-8")
  with pytest.raises(cd.DataError, match="every example has the label 'pos'"):
    run_classifier.run(**_options(
        data, tmp / "out", task_name="tsv", data_dir=str(tmp),
        text_a_column="text", label_column="label", do_eval=False))


def seq_length_over_position_embeddings(data, tmp, caplog):
  with pytest.raises(ValueError, match=r"--max_seq_length=64 must be in "
                     r"\[3, the config's max_position_embeddings=32\]"):
    run_classifier.run(**_options(data, tmp / "out", max_seq_length=64))
  assert not (tmp / "out").exists()


def export_is_world_readable_and_cleans_up(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out, max_seq_length=12))
  export_dir = tmp / "sm"
  stale = export_dir / ".tmp-1-killed"
  stale.mkdir(parents=True)
  with caplog.at_level(logging.WARNING):
    path = export_saved_model.export(str(out), str(export_dir),
                                     model="classifier")
  assert not stale.exists()
  assert [r.getMessage() for r in caplog.records
          if r.levelno == logging.WARNING and str(stale) in r.getMessage()
          ] == [f"Removing {stale}, left by an export that was killed"]
  # The length stored with the classifier, not a default of 128.
  info = json.loads((tmp / "sm" / "1" / "assets.extra" /
                     "albert_export.json").read_text())
  assert info["max_seq_length"] == 12
  modes = {p: stat.S_IMODE(os.stat(os.path.join(d, p)).st_mode)
           for d, dirs, files in os.walk(path) for p in dirs + files}
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
  assert set(modes.values()) <= {0o755, 0o644} and modes


def token_ids_outside_the_vocabulary(data, tmp, caplog):
  # Records of a larger vocabulary than the model's (another tokenizer).
  (tmp / "pre").mkdir()
  argv = tiny_argv(tmp / "pre", "--vocab_size=10")
  with pytest.raises(record_checks.InputFileError,
                     match=r"token ids outside the model's vocabulary "
                     r"\(vocab_size=10\) in .*part-0\.tfrecord \(largest id "
                     r"\d+\).*another tokenizer"):
    rp.run(rp.params_from_argv(argv))


def _one_line_error(fn):
  """(exit code, stderr) of fn() under the command lines' error wrapper."""
  stderr = io.StringIO()
  with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit_:
    cli_errors.one_line_errors(lambda argv: fn())([])
  code = exit_.value.code
  # The error's frames (a reference cycle) hold the run's output_dir lock,
  # which a real command line drops on exit.
  del exit_
  gc.collect()
  return code, stderr.getvalue()


def disk_full_while_saving(data, tmp, caplog):
  out = tmp / "out"
  save = tf.train.CheckpointManager.save
  calls = []

  def save_until_the_disk_is_full(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # as TF does: a partial <prefix>_temp, then ENOSPC
      partial = out / f"ckpt-{kwargs['checkpoint_number']}_temp"
      partial.mkdir()
      (partial / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
      raise OSError(28, "No space left on device")
    return save(self, *args, **kwargs)
  tf.train.CheckpointManager.save = save_until_the_disk_is_full
  try:
    code, stderr = _one_line_error(
        lambda: run_classifier.run(**_options(data, out)))
  finally:
    tf.train.CheckpointManager.save = save
  errors = [l for l in stderr.splitlines() if l.startswith("error:")]
  assert code == 1 and errors == ["error: [Errno 28] No space left on "
                                  "device"], stderr
  # Room again: the same command removes the partial save and resumes from
  # the checkpoint that was saved.
  with caplog.at_level(logging.WARNING):
    result = run_classifier.run(**_options(data, out))
  assert not (out / "ckpt-4_temp").exists()
  assert any("ckpt-4_temp" in r.getMessage() for r in caplog.records)
  assert result["num_train_steps"] == 4
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-4")
  assert [r["global_step"] for r in _jsonl(out / "eval_log.jsonl")] == [0, 2,
                                                                       4]


def concurrent_runs_into_one_output_dir(data, tmp, caplog):
  import time  # pylint: disable=g-import-not-at-top
  from tests import cli_runner  # pylint: disable=g-import-not-at-top
  out = tmp / "out"
  options = _options(data, out, train_step=100000, eval_every_steps=1000,
                     warmup_step=1)
  argv = [f"--{k}={v}" if not isinstance(v, bool) else
          (f"--{k}" if v else f"--no{k}") for k, v in options.items()]
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  first = cli_runner.start_module(  # forked from the test zygote
      ["albert_tf.run_classifier", *argv], cwd=repo,
      env=dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="2"))
  try:
    deadline = time.time() + 120
    while not (out / "run_fingerprint.json").exists():
      assert first.poll() is None, first.communicate()[1][-2000:]
      assert time.time() < deadline
      time.sleep(0.05)
    with pytest.raises(ValueError, match=rf"is in use by another run \(pid "
                       rf"{first.pid}\)"):
      run_classifier.run(**dict(options, train_step=4))
  finally:
    first.kill()
    first.wait()
  # Killed, its lock is gone: the next run proceeds (and resumes).
  result = run_classifier.run(**_options(data, out, train_step=2,
                                         eval_every_steps=2, warmup_step=1))
  assert result["num_train_steps"] == 2


def unparsable_record_later_in_a_shard(data, tmp, caplog):
  (tmp / "pre").mkdir()
  argv = tiny_argv(tmp / "pre", "--shuffle_buffer_size=0")
  shard = tmp / "pre" / "data" / "part-1.tfrecord"
  records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
  with tf.io.TFRecordWriter(str(shard)) as writer:  # sound frames
    for i, record in enumerate(records):  # record 1: in the first batch
      writer.write(b"not an Example" if i == 1 else record)
  with pytest.raises(record_checks.InputFileError,
                     match=r"part-1\.tfrecord: 1 of 32 records skipped"):
    rp.run(rp.params_from_argv(argv))


def eval_only_keeps_the_recorded_settings(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out, max_seq_length=12))
  recorded = (out / "task_record.json").read_bytes()
  options = _options(data, out, do_train=False, do_predict=True)
  del options["max_seq_length"]  # as a user who does not repeat it
  run_classifier.run(**options)  # at the recorded length (default: 128)
  assert (out / "task_record.json").read_bytes() == recorded
  assert json.loads(recorded)["max_seq_length"] == 12
  # Evaluated at another length: what training recorded stays.
  run_classifier.run(**dict(options, max_seq_length=16))
  assert (out / "task_record.json").read_bytes() == recorded


FAULTS = [truncated_latest_checkpoint, eval_only_without_a_checkpoint,
          train_steps_at_or_below_the_checkpoint,
          tokenizer_larger_than_the_vocabulary, stale_temporary_checkpoint,
          log_lines_after_the_checkpoint, extra_tab_in_a_line,
          extra_tab_on_the_first_line, too_long_text,
          non_utf8_line,
          utf8_bom_and_crlf_are_fine, one_class_label_list,
          seq_length_over_position_embeddings,
          export_is_world_readable_and_cleans_up,
          token_ids_outside_the_vocabulary, disk_full_while_saving,
          concurrent_runs_into_one_output_dir,
          unparsable_record_later_in_a_shard,
          eval_only_keeps_the_recorded_settings]


# Rows that run more than one training command, or train and then export
# (resume, refuse and rerun, two runs at once): `make test-slow`
# (tests/fixtures_data.fault_rows).
SLOW_ROWS = {
    "truncated_latest_checkpoint",
    "stale_temporary_checkpoint",
    "log_lines_after_the_checkpoint",
    "export_is_world_readable_and_cleans_up",
    "disk_full_while_saving",
    "concurrent_runs_into_one_output_dir",
}


@pytest.mark.parametrize("fault", fault_rows(FAULTS, SLOW_ROWS))
def test_fault(fault, data, tmp_path, caplog):
  fault(data, tmp_path, caplog)
