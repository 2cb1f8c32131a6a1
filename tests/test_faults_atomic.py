"""Fault injection for the commands' output files: one test per fault.

export_tflite, train_vocab and export_keras_hub write their files under a
dot-name beside the output and rename them into place only when complete:
a full disk (an OSError(28) forced in the middle of the write) leaves the
previous output byte-identical, no leftover, and one line naming the path;
what a killed run leaves is removed at the next start, with a warning.
export_tflite names the tokenizer after the model, so two models exported
into one folder keep their own. The rows are listed in docs/faults.md.
"""

import logging
import os
import pathlib
import re
import shutil
import tempfile

import pytest

from albert_tf.core import cli_errors
from albert_tf import export_keras_hub
from albert_tf import export_saved_model
from albert_tf import export_tflite
from albert_tf.core.config import AlbertConfig
from albert_tf.data import tokenization
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.training import checkpoints
from data_prep import train_vocab
from tests.fixtures_data import tiny_spm_model
from tests.fixtures_data import write_tiny_vocab_and_config
from tests.test_faults import _one_line_error


def _disk_full():
  return OSError(28, "No space left on device")


def _files(folder):
  """{relative path: bytes} of every file under folder."""
  return {os.path.relpath(os.path.join(d, f), folder):
          pathlib.Path(d, f).read_bytes()
          for d, _, names in os.walk(folder) for f in names}


def _warnings(caplog, fragment):
  return [r.getMessage() for r in caplog.records
          if r.levelno == logging.WARNING and fragment in r.getMessage()]


def _fail_halfway(write, suffix):
  """A stand-in for `write(path, data)` that writes half of the data of a
  path ending in suffix and raises ENOSPC, as a disk filling up does."""
  def write_until_the_disk_is_full(path, data):
    if not path.endswith(suffix):
      return write(path, data)
    with open(path, "wb") as f:
      f.write(data[:len(data) // 2])
    raise _disk_full()
  return write_until_the_disk_is_full


# ------------------------------------------------------------ export_tflite
@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
  """Two tiny encoder SavedModels, each with a WordPiece vocab.txt of its
  own: {"a"|"b": (version dir, vocab.txt bytes)}."""
  root = tmp_path_factory.mktemp("sm")
  exported = {}
  for name, chars in (("a", "abcdefghij"), ("b", "klmnopqrstuvw")):
    (root / name).mkdir()
    directory = write_tiny_vocab_and_config(root / name, chars)
    config = AlbertConfig.from_json_file(directory / "config.json")
    prefix = checkpoints.save_weights(AlbertEncoder(config),
                                      str(directory / "ckpt" / "ckpt-1"),
                                      config)
    path = export_saved_model.export(
        prefix, str(directory / "sm"), model="encoder",
        vocab_file=str(directory / "vocab.txt"), max_seq_length=8)
    exported[name] = path, (directory / "vocab.txt").read_bytes()
  return exported


@pytest.mark.slow
def test_tflite_disk_full_keeps_the_previous_model(saved_models, tmp_path,
                                                   monkeypatch):
  out = tmp_path / "out"
  output = str(out / "m.tflite")
  export_tflite.convert(saved_models["a"][0], output, quantize="none")
  previous = _files(out)
  # The model, its tokenizer, its .json and its model card.
  assert sorted(previous) == ["m.tflite", "m.tflite.README.md",
                              "m.tflite.json", "m.vocab.txt"]
  # The system temp dir: the old command's SavedModel copy went there and
  # leaked (15 MB) when it was killed.
  system_tmp = tmp_path / "system_tmp"
  system_tmp.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
  at_the_fault = {}
  write = _fail_halfway(export_tflite.write_synced,  # pylint: disable=protected-access
                        ".tflite")

  def write_and_look(path, data):
    # What a kill just before the .tflite is written would leave behind.
    at_the_fault.update(out=sorted(os.listdir(out)),
                        scratch=sorted(os.listdir(os.path.dirname(path))),
                        system_tmp=os.listdir(system_tmp))
    return write(path, data)
  monkeypatch.setattr(export_tflite, "write_synced", write_and_look)
  code, stderr = _one_line_error(lambda: export_tflite.convert(
      saved_models["b"][0], output, quantize="none"))
  assert (code, stderr) == (1, (
      f"error: [Errno 28] No space left on device: cannot write "
      f"--output={output} (nothing there was replaced)\n"))
  assert _files(out) == previous
  assert sorted(os.listdir(tmp_path)) == ["out", "system_tmp"]
  assert os.listdir(system_tmp) == []
  # Everything it writes is in one dot-folder inside the output folder,
  # the one the next start removes (the next test).
  assert at_the_fault["system_tmp"] == []
  scratch, = [n for n in at_the_fault["out"] if n.startswith(".tmp-")]
  assert re.fullmatch(r"\.tmp-m\.tflite-[a-z0-9_]{8}", scratch), scratch
  assert at_the_fault == {
      # ... beside the output's lock (held while it writes).
      "out": sorted(["m.tflite.README.md", "m.tflite.json", "m.tflite",
                     "m.vocab.txt", scratch, ".m.tflite.lock"]),
      "scratch": ["saved_model"], "system_tmp": []}


@pytest.mark.slow
def test_tflite_leftover_of_a_killed_export_is_removed(saved_models, tmp_path,
                                                       caplog):
  out = tmp_path / "out"
  output = str(out / "m.tflite")
  # As a kill during the conversion leaves it (the test above), and another
  # output's, which is left alone.
  stale = out / ".tmp-m.tflite-killed01"
  (stale / "saved_model").mkdir(parents=True)
  (stale / "saved_model" / "saved_model.pb").write_bytes(b"\0" * 1000)
  other = out / ".tmp-n.tflite-running"
  other.mkdir()
  with caplog.at_level(logging.WARNING):
    export_tflite.convert(saved_models["a"][0], output, quantize="none")
  assert _warnings(caplog, "left by") == [
      f"Removing {stale}, left by an export_tflite that was killed"]
  assert sorted(os.listdir(out)) == [".tmp-n.tflite-running", "m.tflite",
                                     "m.tflite.README.md", "m.tflite.json",
                                     "m.vocab.txt"]


@pytest.mark.slow
def test_two_tflite_exports_into_one_folder_keep_their_tokenizers(
    saved_models, tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out"
  for name in ("a", "b"):
    info = export_tflite.convert(saved_models[name][0],
                                 str(out / f"{name}.tflite"), quantize="none")
    assert info["tokenizer_file"] == f"{name}.vocab.txt"
  assert sorted(os.listdir(out)) == [
      "a.tflite", "a.tflite.README.md", "a.tflite.json", "a.vocab.txt",
      "b.tflite", "b.tflite.README.md", "b.tflite.json", "b.vocab.txt"]
  for name in ("a", "b"):
    assert (out / f"{name}.vocab.txt").read_bytes() == saved_models[name][1]
    info = json.loads((out / f"{name}.tflite.json").read_text(
        encoding="utf-8"))
    assert (info["model_file"], info["tokenizer_file"],
            info["tokenizer_kind"]) == (f"{name}.tflite", f"{name}.vocab.txt",
                                        "wordpiece")
  # Two different vocabularies: a shared vocab.txt would have been b's.
  assert saved_models["a"][1] != saved_models["b"][1]


# ------------------------------------------------------------ train_vocab
LINES_A = ["the quick brown fox jumps over the lazy dog",
           "a cafe in the old town serves tea and bread",
           "people read the morning paper in the park"] * 10
LINES_B = ["rain falls on the green hills of the north",
           "ships sail from the harbour before the storm"] * 10


def _train(tmp_path, name, lines):
  corpus = tmp_path / f"{name}.txt"
  corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return train_vocab.train_sentencepiece(
      str(corpus), str(tmp_path / "vocab" / "spm"), vocab_size=40,
      character_coverage=1.0, hard_vocab_limit=False)


def test_train_vocab_disk_full_keeps_the_previous_model(tmp_path, monkeypatch):
  _train(tmp_path, "a", LINES_A)
  vocab = tmp_path / "vocab"
  previous = _files(vocab)
  assert sorted(previous) == ["spm.model", "spm.vocab"]
  monkeypatch.setattr(train_vocab, "write_synced", _fail_halfway(
      train_vocab.write_synced, ".model"))  # pylint: disable=protected-access
  code, stderr = _one_line_error(lambda: _train(tmp_path, "b", LINES_B))
  prefix = vocab / "spm"
  # The path, not the corpus.
  assert (code, stderr) == (1, (
      f"error: [Errno 28] No space left on device: cannot write "
      f"{prefix}.model and {prefix}.vocab, --model_prefix (nothing there was "
      "replaced)\n"))
  assert _files(vocab) == previous
  assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt", "vocab"]


def test_train_vocab_leftover_of_a_killed_run_is_removed(tmp_path, caplog):
  stale = tmp_path / "vocab" / ".tmp-spm-killed01"
  stale.mkdir(parents=True)
  (stale / "spm.model").write_bytes(b"\n\x05")
  with caplog.at_level(logging.WARNING):
    _train(tmp_path, "a", LINES_A)
  assert _warnings(caplog, "left by") == [
      f"Removing {stale}, left by a train_vocab that was killed"]
  assert sorted(os.listdir(tmp_path / "vocab")) == ["spm.model", "spm.vocab"]


def test_train_vocab_files_are_sentencepieces_own(tmp_path, monkeypatch):
  """Not a fault: the two files it now writes itself hold what SentencePiece
  writes to PREFIX.model / PREFIX.vocab (but for the prefix, which the
  model no longer records)."""
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  train = spm.SentencePieceTrainer.train

  def train_twice(**kwargs):
    sentences = list(kwargs.pop("sentence_iterator"))
    writer = kwargs.pop("model_writer")
    train(sentence_iterator=iter(sentences),
          model_prefix=str(tmp_path / "own"), **kwargs)
    train(sentence_iterator=iter(sentences), model_writer=writer, **kwargs)
  monkeypatch.setattr(spm.SentencePieceTrainer, "train", train_twice)
  model = _train(tmp_path, "a", LINES_A)
  assert (tmp_path / "vocab" / "spm.vocab").read_bytes() == (
      tmp_path / "own.vocab").read_bytes()
  ours, own = (spm.SentencePieceProcessor(model_file=str(f))
               for f in (model, tmp_path / "own.model"))
  assert [(ours.id_to_piece(i), ours.get_score(i))
          for i in range(ours.get_piece_size())] == [
              (own.id_to_piece(i), own.get_score(i))
              for i in range(own.get_piece_size())]
  assert ours.get_piece_size() == 40


# ------------------------------------------------------------ export_keras_hub
@pytest.fixture(scope="module")
def preset(tmp_path_factory):
  """(checkpoint prefix, spm model, a good preset folder to copy)."""
  pytest.importorskip("keras_hub")
  from tests import test_keras_hub_roundtrip as roundtrip  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("kh")
  (root / "spm").mkdir()
  spm_file = tiny_spm_model(root / "spm", roundtrip.CORPUS, 120)
  config = roundtrip._config(tokenization.load_tokenizer(  # pylint: disable=protected-access
      spm_model_file=spm_file).vocab_size)
  prefix = checkpoints.save_weights(roundtrip._random_encoder(config),  # pylint: disable=protected-access
                                    str(root / "ckpt" / "ckpt-1"), config)
  good = str(root / "good")
  export_keras_hub.export(prefix, good, spm_model_file=spm_file,
                          log=lambda m: None)
  return prefix, spm_file, good


def test_keras_hub_disk_full_keeps_the_previous_preset(preset, tmp_path,
                                                       monkeypatch):
  import keras_hub  # pylint: disable=g-import-not-at-top
  prefix, spm_file, good = preset
  output_dir = str(tmp_path / "presets" / "p")
  shutil.copytree(good, output_dir)
  previous = _files(output_dir)
  assert sorted(previous) == ["assets/tokenizer/vocabulary.spm",
                              "config.json", "metadata.json",
                              "model.weights.h5", "tokenizer.json"]

  def save_until_the_disk_is_full(self, preset_dir):
    # The backbone's files are written; the tokenizer's is cut short.
    with open(os.path.join(preset_dir, "tokenizer.json"), "w") as f:
      f.write('{"module": "keras_hub.src.models')
    raise _disk_full()
  monkeypatch.setattr(keras_hub.models.AlbertTokenizer, "save_to_preset",
                      save_until_the_disk_is_full)
  code, stderr = _one_line_error(lambda: export_keras_hub.export(
      prefix, output_dir, spm_model_file=spm_file, overwrite=True,
      log=lambda m: None))
  assert (code, stderr) == (1, (
      f"error: [Errno 28] No space left on device: cannot write "
      f"--output_dir={output_dir} (nothing there was replaced)\n"))
  assert _files(output_dir) == previous
  assert os.listdir(tmp_path / "presets") == ["p"]


def test_keras_hub_leftovers_of_a_killed_export(preset, tmp_path, caplog):
  """Killed while writing (a half preset in `.tmp-`), and killed in the
  instant between swapping the previous preset out and the new one in."""
  prefix, spm_file, good = preset
  presets = tmp_path / "presets"
  half = presets / ".tmp-keras-hub-p-killed01"
  half.mkdir(parents=True)
  (half / "config.json").write_text('{"module": ')
  swapped_out = presets / ".old-keras-hub-p-killed02"
  swapped_out.mkdir()
  shutil.copytree(good, swapped_out / "previous")
  output_dir = str(presets / "p")
  # The next export is refused (not --overwrite): the previous preset is
  # back under its name, as it was.
  with caplog.at_level(logging.WARNING):
    code, stderr = _one_line_error(lambda: export_keras_hub.export(
        prefix, output_dir, spm_model_file=spm_file, log=lambda m: None))
  assert (code, stderr) == (1, (
      f"error: --output_dir={output_dir} is not empty; pass --overwrite to "
      "replace it, or choose another directory\n"))
  assert _warnings(caplog, "left by") == [
      f"Restoring {output_dir} from {swapped_out}, left by an export that "
      "was killed while replacing it",
      f"Removing {half}, left by an export that was killed"]
  assert os.listdir(presets) == ["p"]
  assert _files(output_dir) == _files(good)


# ------------------------------------------------ every command's own files
def _fsync_fails(monkeypatch):
  """Every os.fsync raises ENOSPC: file_io.atomic_writer and write_synced
  sync before the rename, where a full disk shows (some file systems
  report it only at the sync or the close)."""
  def full(fd):
    raise _disk_full()
  monkeypatch.setattr(os, "fsync", full)


def _cannot_write(path):
  return (f"error: [Errno 28] No space left on device: cannot write {path} "
          "(nothing there was replaced)\n")


@pytest.fixture(scope="module")
def classifier_data(tmp_path_factory):
  from tests import test_faults  # pylint: disable=g-import-not-at-top
  return test_faults.data.__wrapped__(tmp_path_factory)


def test_predict_disk_full_keeps_the_earlier_run(classifier_data, tmp_path,
                                                 monkeypatch):
  from albert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  from tests.test_faults import _options  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out"
  run_classifier.run(**_options(classifier_data, out, do_predict=True))
  previous = _files(out)
  assert {"test_results.tsv", "eval_results.json"} <= set(previous)
  _fsync_fails(monkeypatch)
  code, stderr = _one_line_error(lambda: run_classifier.run(**_options(
      classifier_data, out, do_train=False, do_eval=False, do_predict=True)))
  # The first file a predict-only rerun writes.
  assert (code, stderr) == (1, _cannot_write(out / "test_results.tsv"))
  assert _files(out) == previous


def test_task_record_and_config_disk_full_keep_the_previous(tmp_path,
                                                            monkeypatch):
  from albert_tf.core.record import ModelInfo  # pylint: disable=g-import-not-at-top
  record = tmp_path / "task_record.json"
  config = tmp_path / "albert_config.json"
  ModelInfo(task="classification", num_labels=2).write(str(record))
  AlbertConfig(vocab_size=30).to_json_file(config)
  previous = _files(tmp_path)
  _fsync_fails(monkeypatch)
  code, stderr = _one_line_error(lambda: ModelInfo(
      task="classification", num_labels=3).write(str(record)))
  assert (code, stderr) == (1, _cannot_write(record))
  code, stderr = _one_line_error(
      lambda: AlbertConfig(vocab_size=40).to_json_file(config))
  assert (code, stderr) == (1, _cannot_write(config))
  assert _files(tmp_path) == previous


def test_a_full_disk_in_tensorflow_is_no_out_of_memory(monkeypatch):
  """TF reports a full disk (a checkpoint, a GFile) as a
  ResourceExhaustedError, `PATH; No space left on device`: one line naming
  them, not "out of memory" with the batch flags to lower."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # The out-of-memory line leaves at once (os._exit): here, as an exit.
  def exit_now(code):
    raise SystemExit(code)
  monkeypatch.setattr(os, "_exit", exit_now)
  path = "/runs/out/ckpt-3_temp/part-00000-of-00001.data-00000-of-00001"

  full = tf.errors.ResourceExhaustedError(
      None, None, f"{path}.tempstate123; No space left on device")

  def save():
    raise full
  assert _one_line_error(save) == (1, (
      f"error: [Errno 28] No space left on device: cannot write "
      f"{path}.tempstate123\n"))
  assert cli_errors.out_of_memory_line(full) is None


# ------------------------------------------------------ convert_checkpoint
def _tf1_checkpoint(folder, seed):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tests import test_convert_checkpoint as tcc  # pylint: disable=g-import-not-at-top
  folder.mkdir(parents=True, exist_ok=True)
  cfg = tcc.tiny_config()
  w, blocks = tcc.random_weights(cfg, np.random.default_rng(seed))
  prefix = tcc.write_tf1_checkpoint(tcc.google_names(w, blocks),
                                    str(folder / "model.ckpt"))
  cfg.to_json_file(folder / "albert_config.json")
  return prefix, str(folder / "albert_config.json")


def _convert(source, output_dir):
  from albert_tf import convert_checkpoint  # pylint: disable=g-import-not-at-top
  return convert_checkpoint.convert("original", source[0], str(output_dir),
                                    source[1], log=lambda m: None)


def _save_fails(monkeypatch):
  """TF's checkpoint writer on a full disk."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  def save(self, file_prefix, **kwargs):
    raise tf.errors.ResourceExhaustedError(
        None, None, f"{file_prefix}-1_temp/part-00000-of-00001.data-00000-of"
        "-00001.tempstate1; No space left on device")
  monkeypatch.setattr(tf.train.Checkpoint, "save", save)


@pytest.mark.parametrize("where", ["checkpoint", "config"])
def test_convert_disk_full_keeps_the_earlier_conversion(tmp_path, monkeypatch,
                                                        where):
  out = tmp_path / "converted"
  _convert(_tf1_checkpoint(tmp_path / "a", 1), out)
  previous = _files(out)
  assert {"albert_config.json", "conversion_report.json", "checkpoint",
          "ckpt-1.index"} <= set(previous)
  source_b = _tf1_checkpoint(tmp_path / "b", 2)
  with monkeypatch.context() as patch:
    (_save_fails if where == "checkpoint" else _fsync_fails)(patch)
    code, stderr = _one_line_error(lambda: _convert(source_b, out))
  assert (code, stderr) == (1, _cannot_write(f"--output_dir={out}"))
  assert _files(out) == previous
  assert sorted(os.listdir(tmp_path)) == ["a", "b", "converted"]
  # Then converted whole, over the earlier one.
  report = _convert(source_b, out)
  assert report["checkpoint"] == str(out / "ckpt-1")
  assert _files(out) != previous
  assert sorted(os.listdir(tmp_path)) == ["a", "b", "converted"]
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-1")


@pytest.mark.parametrize("where", ["checkpoint", "config"])
def test_convert_disk_full_leaves_no_output(tmp_path, monkeypatch, where):
  source = _tf1_checkpoint(tmp_path / "a", 1)
  out = tmp_path / "new" / "converted"
  (_save_fails if where == "checkpoint" else _fsync_fails)(monkeypatch)
  code, stderr = _one_line_error(lambda: _convert(source, out))
  assert (code, stderr) == (1, _cannot_write(f"--output_dir={out}"))
  # No folder, so no 0-byte albert_config.json, and no dot-folder.
  assert sorted(os.listdir(tmp_path)) == ["a"]


def test_convert_leftover_of_a_killed_conversion_is_removed(tmp_path, caplog):
  stale = tmp_path / ".tmp-convert-converted-killed01"
  stale.mkdir()
  (stale / "ckpt-1.index").write_bytes(b"\0" * 10)
  other = tmp_path / ".tmp-convert-other-running1"
  other.mkdir()
  with caplog.at_level(logging.WARNING):
    _convert(_tf1_checkpoint(tmp_path / "a", 1), tmp_path / "converted")
  assert _warnings(caplog, "left by") == [
      f"Removing {stale}, left by a convert_checkpoint that was killed"]
  assert sorted(os.listdir(tmp_path)) == [".tmp-convert-other-running1", "a",
                                          "converted"]


# ------------------------------------------------------------ data_prep
def test_data_prep_corpora_disk_full_keeps_the_previous_files(tmp_path,
                                                              monkeypatch):
  """data_prep.corpora's text, CoNLL and sizes.json files (cloze's JSON
  and RACE files and fewclue_unlabeled's go through the same writer)."""
  from data_prep import corpora  # pylint: disable=g-import-not-at-top
  text, conll = tmp_path / "train.txt", tmp_path / "train.conll"
  corpora.write_documents([["one sentence.", "two."]], str(text))
  corpora.write_conll([("ab", ["B-PER", "E-PER"])], str(conll))
  previous = _files(tmp_path)
  _fsync_fails(monkeypatch)
  assert _one_line_error(lambda: corpora.write_documents(
      [["another."]], str(text))) == (1, _cannot_write(text))
  assert _one_line_error(lambda: corpora.write_conll(
      [("c", ["O"])], str(conll))) == (1, _cannot_write(conll))
  assert _files(tmp_path) == previous


def test_span_predictions_and_a_trimmed_log_disk_full_keep_the_previous(
    tmp_path, monkeypatch):
  """run_squad's predictions.json / nbest / null_odds, and train_log.jsonl
  as a resumed run trims the steps after its checkpoint."""
  from albert_tf.data import span_decode  # pylint: disable=g-import-not-at-top
  from albert_tf.training import callbacks  # pylint: disable=g-import-not-at-top
  span_decode.write_outputs(str(tmp_path), {"q1": "a"},
                            {"q1": [{"text": "a"}]}, {"q1": 0.5})
  log = tmp_path / "train_log.jsonl"
  log.write_text('{"step": 1}\n{"step": 2}\n', encoding="utf-8")
  previous = _files(tmp_path)
  _fsync_fails(monkeypatch)
  assert _one_line_error(lambda: span_decode.write_outputs(
      str(tmp_path), {"q1": "b"}, {"q1": [{"text": "b"}]}, {"q1": 1.5})) == (
          1, _cannot_write(tmp_path / span_decode.PREDICTIONS_FILE))
  assert _one_line_error(lambda: callbacks.drop_log_lines_after(
      str(log), 1)) == (1, _cannot_write(log))
  assert _files(tmp_path) == previous
