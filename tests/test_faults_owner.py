"""One owner per output (issue 39 item 4): every command that writes a
folder or file takes the training lock (`file_io.lock_output`) on it.

The test process holds the lock (as a live second writer would); the command
run against the same target stops in one line naming this pid and writes or
removes nothing. A lock left by a pid that is gone is taken over with one
warning. A `.tmp-pid<PID>-*` of a live process survives another export's
cleanup.
"""

import logging
import os
import subprocess
import sys

import pytest

from albert_tf import export_keras_hub
from albert_tf import export_saved_model
from albert_tf import export_tflite
from albert_tf.core import file_io
from albert_tf.core import staging
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.serving import saved_model as saved_model_lib
from albert_tf.training import checkpoints
from data_prep import pipeline
from data_prep import train_vocab
from tests.fixtures_data import tiny_spm_model
from tests.fixtures_data import write_tiny_vocab_and_config
from tests.test_faults import _one_line_error

LINES = ["the quick brown fox jumps over the lazy dog",
         "a cafe in the old town serves tea and bread",
         "people read the morning paper in the park"] * 10


def _tree(root):
  """Every path under root (files and folders), relative."""
  return sorted(os.path.relpath(os.path.join(d, n), root)
                for d, dirs, files in os.walk(root) for n in dirs + files)


def _refused(flag, value):
  return (1, f"error: {flag}={value} is in use by another run (pid "
             f"{os.getpid()}) since ")


def _assert_refused(fn, flag, value):
  code, stderr = _one_line_error(fn)
  expected_code, start = _refused(flag, value)
  assert code == expected_code, stderr
  assert stderr.startswith(start), stderr
  assert stderr.endswith(f": wait for it, or choose another {flag}\n"), stderr
  assert stderr.count("\n") == 1, stderr


def _dead_pid():
  child = subprocess.Popen([sys.executable, "-c", "pass"])
  child.wait()
  assert not file_io.pid_alive(child.pid)
  return child.pid


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  """(encoder checkpoint prefix, vocab.txt, a SavedModel version dir)."""
  root = tmp_path_factory.mktemp("owner")
  directory = write_tiny_vocab_and_config(root, "abcdefghij")
  config = AlbertConfig.from_json_file(directory / "config.json")
  prefix = checkpoints.save_weights(AlbertEncoder(config),
                                    str(directory / "ckpt" / "ckpt-1"), config)
  vocab = str(directory / "vocab.txt")
  version = export_saved_model.export(prefix, str(root / "sm"),
                                      model="encoder", vocab_file=vocab,
                                      max_seq_length=8)
  return prefix, vocab, version


# ------------------------------------------------------------ the rows
def test_export_saved_model_second_writer(tiny, tmp_path):
  prefix, vocab, _ = tiny
  export_dir = tmp_path / "sm"
  export_dir.mkdir()
  (export_dir / ".tmp-1-killed").mkdir()  # a leftover it would remove
  with file_io.lock_output(export_dir, "--export_dir"):
    before = _tree(export_dir)
    _assert_refused(lambda: export_saved_model.export(
        prefix, str(export_dir), model="encoder", vocab_file=vocab,
        max_seq_length=8), "--export_dir", export_dir)
    assert _tree(export_dir) == before
  assert os.listdir(export_dir) == [".tmp-1-killed"]  # the lock is gone


def test_live_owners_temporaries_survive_an_export(tiny, tmp_path, caplog):
  prefix, vocab, _ = tiny
  export_dir = tmp_path / "sm"
  live = subprocess.Popen([sys.executable, "-c",
                           "import time; time.sleep(120)"])
  try:
    alive = export_dir / f".tmp-pid{live.pid}-1-running1"
    dead = export_dir / f".tmp-pid{_dead_pid()}-1-killed01"
    older = export_dir / ".old-1-killed02"  # no pid: older code's
    for folder in (alive, dead, older):
      folder.mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
      export_saved_model.export(prefix, str(export_dir), model="encoder",
                                vocab_file=vocab, max_seq_length=8)
    assert sorted(os.listdir(export_dir)) == [alive.name, "1"]
    assert sorted(r.getMessage() for r in caplog.records
                  if "left by" in r.getMessage()) == sorted([
                      f"Removing {dead}, left by an export that was killed",
                      f"Removing {older}, left by an export that was killed"])
    # And the cleanup alone, as another export into it would run it.
    saved_model_lib.remove_stale_temporaries(str(export_dir))
    assert alive.is_dir()
  finally:
    live.kill()
    live.wait()
  saved_model_lib.remove_stale_temporaries(str(export_dir))
  assert not alive.exists()  # its owner is gone now


def test_export_tflite_second_writer(tiny, tmp_path):
  _, _, version = tiny
  out = tmp_path / "out"
  out.mkdir()
  output = out / "m.tflite"
  stale = out / ".tmp-m.tflite-killed01"  # what a killed export leaves
  stale.mkdir()
  with file_io.lock_output(out, "--output", value=output,
                           lock_file=export_tflite.lock_path(str(output))):
    before = _tree(out)
    _assert_refused(lambda: export_tflite.convert(version, str(output),
                                                  quantize="none"),
                    "--output", output)
    assert _tree(out) == before
  assert os.listdir(out) == [stale.name]


def test_export_keras_hub_second_writer(tmp_path):
  (tmp_path / "spm").mkdir()
  spm_file = tiny_spm_model(tmp_path / "spm", LINES, 40)
  config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16,
                        num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
  prefix = checkpoints.save_weights(AlbertEncoder(config),
                                    str(tmp_path / "ckpt" / "ckpt-1"), config)
  presets = tmp_path / "presets"
  half = presets / ".tmp-keras-hub-p-killed01"
  half.mkdir(parents=True)
  output_dir = presets / "p"
  with file_io.lock_output(presets, "--output_dir", value=output_dir,
                           lock_file=staging.lock_beside(
                               str(output_dir), export_keras_hub.TAG)):
    before = _tree(presets)
    _assert_refused(lambda: export_keras_hub.export(
        prefix, str(output_dir), spm_model_file=spm_file,
        log=lambda m: None), "--output_dir", output_dir)
    assert _tree(presets) == before
  assert os.listdir(presets) == [half.name]


def test_train_vocab_second_writer_and_a_stale_lock(tmp_path, caplog):
  corpus = tmp_path / "a.txt"
  corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
  vocab = tmp_path / "vocab"
  vocab.mkdir()
  prefix = vocab / "spm"
  stale = vocab / ".tmp-spm-killed01"
  stale.mkdir()

  def train():
    return train_vocab.train_sentencepiece(
        str(corpus), str(prefix), vocab_size=40, character_coverage=1.0,
        hard_vocab_limit=False)
  with file_io.lock_output(vocab, "--model_prefix", value=prefix,
                           lock_file=f"{prefix}.lock"):
    before = _tree(vocab)
    _assert_refused(train, "--model_prefix", prefix)
    assert _tree(vocab) == before
  # A lock of a process that is gone (killed): taken over, one warning.
  pid = _dead_pid()
  (vocab / "spm.lock").write_text(f"{pid} 2026-01-01 00:00:00")
  with caplog.at_level(logging.WARNING):
    train()
  assert [r.getMessage() for r in caplog.records
          if "taking over" in r.getMessage()] == [
              f"--model_prefix={prefix}: taking over the lock of process "
              f"{pid} (started 2026-01-01 00:00:00), which is gone "
              f"({prefix}.lock)"]
  assert sorted(os.listdir(vocab)) == ["spm.model", "spm.vocab"]


def test_create_pretraining_data_second_writer(tmp_path):
  (tmp_path / "spm").mkdir()
  spm_file = tiny_spm_model(tmp_path / "spm", LINES, 40)
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n".join(LINES) + "\n", encoding="utf-8")
  out = tmp_path / "records"
  out.mkdir()
  partial = out / ".tmp-0123abcd-pretrain-00000-of-00001.tfrecord"
  partial.write_bytes(b"live")  # a live run's shard being written
  with file_io.lock_output(out, "--output_dir"):
    before = _tree(out)
    _assert_refused(lambda: pipeline.run_pipeline(
        str(corpus), str(out), spm_model_file=spm_file, dupe_factor=1,
        num_shards=1, overwrite=True), "--output_dir", out)
    assert _tree(out) == before
    assert partial.read_bytes() == b"live"


def test_convert_checkpoint_second_writer(tmp_path):
  """A live conversion's dot-folder beside --output_dir is its own: a second
  conversion to the same folder stops before removing or writing anything."""
  from albert_tf import convert_checkpoint  # pylint: disable=g-import-not-at-top
  from tests.test_faults_tokenizer import tf1_source  # pylint: disable=g-import-not-at-top
  prefix, config = tf1_source(tmp_path / "albert_tiny")
  parent = tmp_path / "converted"
  parent.mkdir()
  live = parent / ".tmp-convert-tiny-live0001"
  live.mkdir()  # the first conversion's, being written
  output_dir = parent / "tiny"
  with file_io.lock_output(parent, "--output_dir", value=output_dir,
                           lock_file=staging.lock_beside(
                               str(output_dir), "convert-")):
    before = _tree(parent)
    _assert_refused(lambda: convert_checkpoint.convert(
        "brightmart", prefix, str(output_dir), config, log=lambda m: None),
                    "--output_dir", output_dir)
    assert _tree(parent) == before
  # Once the first has ended, the same command converts (a dot-folder
  # still there is then a killed run's, and removed); the lock is gone.
  convert_checkpoint.convert("brightmart", prefix, str(output_dir), config,
                             log=lambda m: None)
  assert os.listdir(parent) == ["tiny"]


def test_training_lock_is_the_same(tmp_path, caplog):
  """The training output_dir's lock: the same file and wording; a lock of
  a dead pid taken over with one warning (the file stays, emptied)."""
  from albert_tf.training import output_dir  # pylint: disable=g-import-not-at-top
  from albert_tf.training.runtime import RunConfigError  # pylint: disable=g-import-not-at-top
  with file_io.lock_output(tmp_path, "--output_dir"):
    with pytest.raises(RunConfigError, match=(
        rf"^--output_dir={tmp_path} is in use by another run \(pid "
        rf"{os.getpid()}\) since .*: wait for it, or choose another "
        r"--output_dir$")):
      output_dir.lock_output_dir(str(tmp_path))
  pid = _dead_pid()
  (tmp_path / output_dir.LOCK_FILE).write_text(str(pid))  # older format
  with caplog.at_level(logging.WARNING):
    lock = output_dir.lock_output_dir(str(tmp_path))
  assert [r.getMessage() for r in caplog.records
          if "taking over" in r.getMessage()] == [
              f"--output_dir={tmp_path}: taking over the lock of process "
              f"{pid}, which is gone ({tmp_path / output_dir.LOCK_FILE})"]
  lock.close()
  assert (tmp_path / output_dir.LOCK_FILE).read_text() == ""
