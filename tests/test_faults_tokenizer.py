"""The tokenizer travels with converted weights (issue 39 item 5).

convert_checkpoint copies the tokenizer a source ships (keras-hub's
assets/tokenizer/vocabulary.spm; HF spiece.model beside the weights; a TF1
release's vocab.txt or *.model in the checkpoint's folder) into --output_dir
and records its sha256 in conversion_report.json. Fine-tuning from that
folder uses it when no tokenizer flag is given and refuses another one in
one line, before anything is written. A source without a tokenizer is said
once, in one warning line. Tiny sources written by each test.
"""

import hashlib
import json
import logging

import numpy as np
import pytest

from albert_tf import convert_checkpoint as cc
from albert_tf import run_classifier
from albert_tf.training import resolution
from albert_tf.training.runtime import RunConfigError
from tests.fixtures_data import tiny_spm_model
from tests.test_convert_checkpoint import (google_names, hf_config_json,
                                           hf_state_dict, random_weights,
                                           tiny_config, write_tf1_checkpoint)
from tests.test_faults import _options
from tests.test_faults import data  # noqa: F401  pylint: disable=unused-import

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The tokenizers here have fewer pieces (22, about 40) than the tiny
# configs' 50 rows: convert_checkpoint refuses that unless told the
# vocabulary was padded (tests/test_faults_convert_round4.py).
PADDED = True
LINES = ["the cat sat on the mat", "a dog ran in the park",
         "it rained all day long", "prices rose and fell again"] * 20


def sha(path):
  return hashlib.sha256(path.read_bytes()).hexdigest()


def tf1_source(directory, seed=1):
  """A tiny TF1 ALBERT release: model.ckpt-best.* and albert_config.json."""
  directory.mkdir()
  cfg = tiny_config()
  w, blocks = random_weights(cfg, np.random.default_rng(seed))
  prefix = write_tf1_checkpoint(google_names(w, blocks),
                                str(directory / "model.ckpt-best"))
  cfg.to_json_file(directory / "albert_config.json")
  return prefix, str(directory / "albert_config.json")


def other_vocab(tmp):
  """A WordPiece vocab of the fine-tuning data's size, other pieces."""
  path = tmp / "other_vocab.txt"
  path.write_text("\n".join(SPECIAL + list("甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未"))
                  + "\n", encoding="utf-8")
  return path


def test_tf1_vocab_travels_and_fine_tuning_refuses_another(data, tmp_path):  # noqa: F811  pylint: disable=redefined-outer-name
  source = tmp_path / "albert_tiny"
  prefix, config = tf1_source(source)
  (source / "vocab.txt").write_bytes((data / "vocab.txt").read_bytes())
  converted = tmp_path / "converted"
  report = cc.convert("brightmart", prefix, str(converted), config,
                      log=lambda m: 0, allow_padded_vocab=PADDED)
  assert report["tokenizer_sha256"] == sha(data / "vocab.txt")
  assert (report["tokenizer_file"], report["tokenizer_kind"]) == (
      "vocab.txt", "wordpiece")
  assert (converted / "vocab.txt").read_bytes() == (
      data / "vocab.txt").read_bytes()
  on_disk = json.loads((converted / "conversion_report.json").read_text())
  assert on_disk["tokenizer_sha256"] == sha(data / "vocab.txt")

  # Another tokenizer: one line naming both and the fix, nothing written.
  other = other_vocab(tmp_path)
  out = tmp_path / "finetuned"
  with pytest.raises(RunConfigError) as error:
    run_classifier.run(**_options(data, out, albert_config_file=None,
                                  init_checkpoint=str(converted),
                                  vocab_file=str(other)))
  own = f"{converted}/vocab.txt"
  assert str(error.value) == (
      f"--vocab_file={other} (sha256 {sha(other)[:12]}…) is not the "
      f"tokenizer --init_checkpoint={converted} was converted with ({own}, "
      f"sha256 {sha(data / 'vocab.txt')[:12]}…): leave out --vocab_file to "
      f"use it, or pass --vocab_file={own}")
  assert "\n" not in str(error.value)
  assert not out.exists()

  # The same tokenizer, given by its own path: accepted.
  resolution.resolve_model(init_checkpoint=str(converted),
                           vocab_file=str(data / "vocab.txt"))
  # No tokenizer flag: the copied one, and fine-tuning runs.
  result = run_classifier.run(**_options(
      data, out, albert_config_file=None, init_checkpoint=str(converted),
      vocab_file=None, train_step=2, eval_every_steps=2))
  assert result["num_train_steps"] == 2
  fingerprint = json.loads((out / "run_fingerprint.json").read_text())
  assert fingerprint["tokenizer_sha256"] == sha(data / "vocab.txt")


def test_huggingface_spiece_model_travels(tmp_path):
  spm = tiny_spm_model(tmp_path, LINES, 40)
  cfg = tiny_config()
  w, blocks = random_weights(cfg, np.random.default_rng(3))
  hf_dir = tmp_path / "albert-tiny-hf"
  hf_dir.mkdir()
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  safetensors.numpy.save_file(hf_state_dict(w, blocks),
                              str(hf_dir / "model.safetensors"))
  (hf_dir / "config.json").write_text(json.dumps(hf_config_json(cfg)))
  (hf_dir / "spiece.model").write_bytes(open(spm, "rb").read())
  converted = tmp_path / "converted"
  report = cc.convert("huggingface", str(hf_dir), str(converted),
                      log=lambda m: 0, allow_padded_vocab=PADDED)
  assert report["tokenizer_sha256"] == sha(hf_dir / "spiece.model")
  assert report["spm_model_file"] == str(converted / "spiece.model")
  assert sha(converted / "spiece.model") == sha(hf_dir / "spiece.model")
  # Given again (as spm_model_file) or left out: that tokenizer.
  _, tokenizer = resolution.resolve_model(
      init_checkpoint=str(converted), spm_model_file=spm)
  _, default = resolution.resolve_model(init_checkpoint=str(converted))
  assert default.model_file == str(converted / "spiece.model")
  # A WordPiece vocab instead: refused, the spm flag named as the fix.
  other = other_vocab(tmp_path)
  with pytest.raises(RunConfigError, match=(
      r"--vocab_file=.*other_vocab.txt \(sha256 .*\) is not the tokenizer "
      r".*: leave out --vocab_file to use it, or pass --spm_model_file=.*"
      r"converted/spiece.model$")):
    resolution.resolve_model(init_checkpoint=str(converted),
                             vocab_file=str(other))
  assert tokenizer.vocab_size <= cfg.vocab_size


def test_keras_hub_vocabulary_spm_travels(tmp_path):
  import keras_hub  # pylint: disable=g-import-not-at-top
  spm = tiny_spm_model(tmp_path, LINES, 40)
  backbone = keras_hub.models.AlbertBackbone(
      vocabulary_size=50, num_layers=1, num_heads=2, num_groups=1,
      num_inner_repetitions=1, embedding_dim=8, hidden_dim=16,
      intermediate_dim=32, max_sequence_length=32)
  preset = tmp_path / "albert_tiny_kh"
  backbone.save_to_preset(str(preset))
  (preset / "assets" / "tokenizer").mkdir(parents=True)
  (preset / "assets" / "tokenizer" / "vocabulary.spm").write_bytes(
      open(spm, "rb").read())
  converted = tmp_path / "converted"
  report = cc.convert("keras_hub", str(preset), str(converted),
                      log=lambda m: 0, allow_padded_vocab=PADDED)
  assert report["tokenizer_sha256"] == sha(
      preset / "assets" / "tokenizer" / "vocabulary.spm")
  assert sha(converted / "vocabulary.spm") == report["tokenizer_sha256"]
  with pytest.raises(RunConfigError, match="was converted with"):
    resolution.resolve_model(init_checkpoint=str(converted),
                             vocab_file=str(other_vocab(tmp_path)))
  resolution.resolve_model(init_checkpoint=str(converted),
                           spm_model_file=spm)


def test_source_without_tokenizer_warns_once(tmp_path, caplog):
  prefix, config = tf1_source(tmp_path / "albert_tiny")
  converted = tmp_path / "converted"
  with caplog.at_level(logging.WARNING, logger="absl"):
    report = cc.convert("original", prefix, str(converted), config,
                        log=lambda m: 0)
  said = [r.getMessage() for r in caplog.records
          if "tokenizer" in r.getMessage()]
  assert len(said) == 1 and "\n" not in said[0], said
  assert said[0].startswith(f"--checkpoint={prefix} ships no tokenizer")
  assert "cannot check" in said[0]
  assert report["tokenizer_sha256"] is None
  assert sorted(p.name for p in converted.iterdir()
                if not p.name.startswith("ckpt-")) == [
                    "albert_config.json", "checkpoint",
                    "conversion_report.json"]
  # Nothing recorded, nothing to check: any tokenizer of a fitting size.
  resolution.resolve_model(init_checkpoint=str(converted),
                           vocab_file=str(other_vocab(tmp_path)))
