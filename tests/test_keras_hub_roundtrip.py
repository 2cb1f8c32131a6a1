"""albert_tf -> keras-hub preset -> albert_tf: same outputs, same token ids.

keras-hub's own AlbertBackbone.from_preset / AlbertTokenizer.from_preset are
the independent readers of what export_keras_hub writes; convert_checkpoint
--source=keras_hub reads it back.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import checkpoints
from albert_tf.converters import keras_hub_interop
from albert_tf.data import tokenization
from albert_tf import convert_checkpoint as cc
from albert_tf import export_keras_hub
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from tests.fixtures_data import tiny_spm_model
from tests.numpy_reference import assert_close_to_scale

keras_hub = pytest.importorskip("keras_hub")

CORPUS = [
    "the quick brown fox jumps over the lazy dog.",
    "a cafe in the old town serves tea and bread.",
    "people read the morning paper in 1998 and 2000.",
    "今天天气很好，我们去公园散步。",
    "人民日报发表新年献词，迈向充满希望的新世纪。",
    "经济增长和社会发展都取得了新的成就。",
] * 20
LOWERCASE_TEXTS = ["the lazy dog reads the paper.", "a quick fox in the town",
                   "今天我们去公园。", "新世纪的经济发展 and tea"]


@pytest.fixture(scope="module")
def spm_file(tmp_path_factory):
  return tiny_spm_model(tmp_path_factory.mktemp("spm"), CORPUS, 120)


@pytest.fixture(scope="module")
def tokenizer(spm_file):
  return tokenization.load_tokenizer(spm_model_file=spm_file)


def _config(vocab_size, **changes):
  # Two groups of two inner blocks: keras-hub's num_groups and
  # num_inner_repetitions must line up with ours.
  return AlbertConfig(vocab_size=vocab_size, embedding_size=8, hidden_size=16,
                      num_hidden_layers=4, num_hidden_groups=2,
                      inner_group_num=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32,
                      **changes)


def _random_encoder(config, seed=3):
  encoder = AlbertEncoder(config)
  rng = np.random.default_rng(seed)
  for w in encoder.weights:  # non-trivial LayerNorm and bias values
    w.assign(rng.normal(0, 0.3, w.shape).astype(np.float32)
             + (1 if "gamma" in w.path else 0))
  return encoder


def _features(tokenizer, texts, length=20):
  rows = [[tokenizer.cls_id] + tokenizer.encode(t)[:length - 2]
          + [tokenizer.sep_id] for t in texts]
  ids = np.full([len(rows), length], tokenizer.pad_id, np.int32)
  segments = np.zeros_like(ids)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
    segments[i, len(row) // 2:len(row)] = 1
  return {"input_ids": ids, "input_mask": (np.arange(length) < np.array(
      [len(r) for r in rows])[:, None]).astype(np.int32),
          "segment_ids": segments}


def _hub_ids(hub_tokenizer, texts):
  # Eager keras-hub preprocessing layers hand back Python lists.
  ids = hub_tokenizer(tf.constant(texts))
  return ids.to_list() if hasattr(ids, "to_list") else [list(r) for r in ids]


def _assert_same_outputs(got, expected, mask):
  # keras-hub masks padded keys only, so padded query rows differ by
  # design: compare real positions, and the pooled output.
  real = mask[..., None].astype(bool)
  assert_close_to_scale(np.where(real, got["sequence_output"], 0),
                        np.where(real, expected["sequence_output"], 0),
                        rel=1e-5)
  assert_close_to_scale(got["pooled_output"], expected["pooled_output"],
                        rel=1e-5)


@pytest.fixture(scope="module")
def exported(tokenizer, spm_file, tmp_path_factory):
  """(encoder, its checkpoint prefix, the preset folder)."""
  directory = tmp_path_factory.mktemp("kh")
  config = _config(tokenizer.vocab_size)
  encoder = _random_encoder(config)
  prefix = checkpoints.save_weights(encoder, str(directory / "ckpt" / "ckpt-1"),
                                    config)
  preset = str(directory / "preset")
  export_keras_hub.export(prefix, preset, spm_model_file=spm_file,
                          log=lambda m: None)
  return encoder, prefix, preset


def test_preset_files_and_config(exported, tokenizer):
  encoder, _, preset = exported
  names = {os.path.relpath(os.path.join(d, f), preset)
           for d, _, files in os.walk(preset) for f in files}
  assert {"config.json", "model.weights.h5", "tokenizer.json",
          "assets/tokenizer/vocabulary.spm"} <= names
  with open(os.path.join(preset, "config.json"), encoding="utf-8") as f:
    saved = json.load(f)["config"]
  assert saved["vocabulary_size"] == tokenizer.vocab_size
  assert (saved["num_groups"], saved["num_inner_repetitions"]) == (2, 2)
  assert keras_hub_interop.config_from_keras_hub(
      keras_hub.models.AlbertBackbone.from_preset(preset)) == encoder.config


def test_backbone_from_preset_gives_the_same_outputs(exported, tokenizer):
  encoder, _, preset = exported
  backbone = keras_hub.models.AlbertBackbone.from_preset(preset)
  inputs = _features(tokenizer, LOWERCASE_TEXTS)
  ours = {k: np.asarray(v) for k, v in encoder(inputs).items()}
  theirs = backbone(keras_hub_interop.keras_hub_inputs(inputs))
  theirs = {k: np.asarray(v) for k, v in theirs.items()}
  assert np.max(np.abs(ours["sequence_output"])) > 0.5  # not a trivial match
  _assert_same_outputs(theirs, ours, inputs["input_mask"])


def test_preset_converts_back_to_the_same_model(exported, tokenizer, tmp_path):
  encoder, _, preset = exported
  out_dir = str(tmp_path / "back")
  report = cc.convert("keras_hub", preset, out_dir, log=lambda m: None)
  assert report["heads"] == [] and not report["missing"]
  config = checkpoints.config_beside(out_dir)
  assert config == encoder.config
  back = AlbertEncoder(config)
  checkpoints.restore_weights(out_dir, back)
  # Same variables bit for bit, so the same outputs everywhere (padding too).
  for mine, theirs in zip(encoder.weights, back.weights):
    np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs),
                                  err_msg=mine.path)
  inputs = _features(tokenizer, LOWERCASE_TEXTS)
  expected, got = encoder(inputs), back(inputs)
  for name in ("sequence_output", "pooled_output"):
    assert_close_to_scale(np.asarray(got[name]), np.asarray(expected[name]),
                          rel=1e-5)


def test_tokenizer_from_preset_matches_on_lowercase_text(exported, tokenizer):
  hub_tokenizer = keras_hub.models.AlbertTokenizer.from_preset(exported[2])
  got = _hub_ids(hub_tokenizer, LOWERCASE_TEXTS)
  assert got == [tokenizer.encode(t) for t in LOWERCASE_TEXTS]
  assert hub_tokenizer.mask_token_id == tokenizer.mask_id
  assert hub_tokenizer.cls_token_id == tokenizer.cls_id


def test_tokenizer_from_preset_skips_lowercasing_and_accent_strip(
    exported, tokenizer):
  """The documented difference: keras-hub runs SentencePiece only."""
  hub_tokenizer = keras_hub.models.AlbertTokenizer.from_preset(exported[2])
  mixed = ["The Quick Brown Fox", "A Café In The Old Town"]
  raw = _hub_ids(hub_tokenizer, mixed)
  ours = [tokenizer.encode(t) for t in mixed]
  # The vocabulary was trained on lowercased text: keras-hub maps the capital
  # letters (and the accented é) to <unk>, albert_tf does not.
  for text, theirs, mine in zip(mixed, raw, ours):
    assert theirs != mine, text
    assert tokenizer.unk_id in theirs and tokenizer.unk_id not in mine, text
  # albert_tf's normalisation first makes them agree.
  normalized = [tokenizer.normalize(t) for t in mixed]
  assert normalized == ["the quick brown fox", "a cafe in the old town"]
  assert _hub_ids(hub_tokenizer, normalized) == ours


def test_export_refuses_what_keras_hub_cannot_express(tokenizer, spm_file,
                                                      tmp_path):
  for changes, word in [({"embedding_layout": "brightmart"}, "brightmart"),
                        ({"hidden_act": "relu"}, "hidden_act"),
                        ({"layer_norm_eps": 1e-6}, "layer_norm_eps")]:
    config = _config(tokenizer.vocab_size, **changes)
    with pytest.raises(ValueError, match=word):
      keras_hub_interop.backbone_kwargs(config)
    # Through the CLI function: one line naming the config file, nothing
    # written (the checkpoint is not even read: a folder with the config).
    ckpt = tmp_path / f"ckpt_{word}"
    ckpt.mkdir()
    config.to_json_file(str(ckpt / checkpoints.CONFIG_NAME))
    out = tmp_path / f"out_{word}"
    with pytest.raises(ValueError, match=f"albert_config.json.*{word}") as e:
      export_keras_hub.export(str(ckpt), str(out), spm_model_file=spm_file)
    assert "\n" not in str(e.value)
    assert not out.exists()
  bert = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16,
                      hidden_size=16, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=32,
                      share="none")
  with pytest.raises(ValueError, match="share='none'"):
    keras_hub_interop.backbone_kwargs(bert)


def test_export_refuses_wordpiece_and_a_nonempty_output_dir(exported,
                                                            spm_file,
                                                            tmp_path):
  import shutil
  from albert_tf.core.record import CLASSIFIER_CONFIG, ModelInfo
  _, prefix, _ = exported
  # A checkpoint whose recorded tokenizer is a WordPiece vocab.txt.
  ckpt = tmp_path / "wordpiece_ckpt"
  shutil.copytree(os.path.dirname(prefix), ckpt)
  (ckpt / "vocab.txt").write_text(
      "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                + list("abcdefg")) + "\n", encoding="utf-8")
  ModelInfo(tokenizer_file="vocab.txt", tokenizer_kind="wordpiece").write(
      str(ckpt / CLASSIFIER_CONFIG))
  with pytest.raises(ValueError, match="WordPiece.*--spm_model_file"):
    export_keras_hub.export(str(ckpt), str(tmp_path / "wp"))
  assert not (tmp_path / "wp").exists()

  taken = tmp_path / "taken"
  taken.mkdir()
  (taken / "keep.txt").write_text("mine")
  with pytest.raises(ValueError, match="--output_dir=.*not empty"):
    export_keras_hub.export(prefix, str(taken), spm_model_file=spm_file)
  assert os.listdir(taken) == ["keep.txt"]
  export_keras_hub.export(prefix, str(taken), spm_model_file=spm_file,
                          overwrite=True, log=lambda m: None)
  assert "keep.txt" not in os.listdir(taken)
  assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


# ------------------------------------------------------ preset handles
def test_convert_names_what_is_neither_a_folder_nor_a_handle(tmp_path):
  with pytest.raises(FileNotFoundError,
                     match="no_such_preset.*neither a local keras-hub preset "
                     "directory nor a preset handle") as e:
    cc.convert("keras_hub", "no_such_preset", str(tmp_path / "out"),
               log=lambda m: None)
  assert "\n" not in str(e.value)
  assert not (tmp_path / "out").exists()


def test_convert_reports_an_unreachable_handle_in_one_line(monkeypatch,
                                                           tmp_path):
  """What a built-in handle gives offline (kagglehub raises requests'
  ConnectionError with a nested multi-line reason)."""
  import requests
  asked = []

  def offline(preset, **kwargs):
    asked.append(preset)
    raise requests.exceptions.ConnectionError(
        "HTTPSConnectionPool(host='api.kaggle.com', port=443): Max retries "
        "exceeded with url: /v1/models\n(Caused by NameResolutionError("
        "'Failed to resolve'))")

  monkeypatch.setattr(keras_hub.models.AlbertBackbone, "from_preset", offline)
  with pytest.raises(cc.ConversionError) as e:
    cc.convert("keras_hub", "albert_base_en_uncased", str(tmp_path / "out"),
               log=lambda m: None)
  assert asked == ["albert_base_en_uncased"]
  message = str(e.value)
  assert "\n" not in message
  assert message.startswith("--checkpoint=albert_base_en_uncased: could not "
                            "fetch the keras-hub preset (ConnectionError: "
                            "cannot connect to api.kaggle.com)")
  assert not (tmp_path / "out").exists()


def test_convert_names_a_folder_that_is_no_preset(tmp_path):
  folder = tmp_path / "not_a_preset"
  folder.mkdir()
  (folder / "readme.txt").write_text("hello")
  with pytest.raises(cc.ConversionError,
                     match="not_a_preset is not a keras-hub AlbertBackbone "
                     "preset directory .*config.json") as e:
    cc.convert("keras_hub", str(folder), str(tmp_path / "out"),
               log=lambda m: None)
  assert "\n" not in str(e.value)


# ------------------------------------------------- a fine-tuned classifier
@pytest.fixture(scope="module")
def classifier_preset(tokenizer, spm_file, tmp_path_factory):
  """(our classifier, the keras-hub task preset export_keras_hub wrote of
  its output folder, what it logged)."""
  from albert_tf.modeling.models import AlbertClassifier  # pylint: disable=g-import-not-at-top
  from albert_tf.core.record import ModelInfo, tokenizer_fields  # pylint: disable=g-import-not-at-top
  directory = tmp_path_factory.mktemp("kh_cls")
  config = _config(tokenizer.vocab_size)
  model = AlbertClassifier(config, num_labels=3, classifier_dropout=0.0)
  model(_features(tokenizer, LOWERCASE_TEXTS[:1]))
  rng = np.random.default_rng(5)
  for w in model.weights:
    w.assign(rng.normal(0, 0.3, w.shape).astype(np.float32)
             + (1 if "gamma" in w.path else 0))
  out = directory / "clf"
  checkpoints.save_weights(model, str(out / "ckpt-7"), config)
  ModelInfo(task="classification", task_name="tsv", num_labels=3,
            label_list=["neg", "neu", "pos"], max_seq_length=20,
            **tokenizer_fields(tokenizer)).write_beside(str(out))
  lines = []
  preset = str(directory / "preset")
  export_keras_hub.export(str(out), preset, spm_model_file=spm_file,
                          log=lines.append)
  return model, preset, lines


def test_fine_tuned_classifier_is_a_keras_hub_task_preset(classifier_preset,
                                                          tokenizer):
  """AlbertTextClassifier.from_preset(dir).predict(texts), keras-hub's own
  tokenizer and packer included, gives our classifier's probabilities."""
  model, preset, lines = classifier_preset
  assert lines[0].startswith("Exported ") and "AlbertTextClassifier" in (
      lines[0]) and "sequence_length=20" in lines[0]
  assert lines[1] == ("  its outputs are the logits of the labels 0=neg, "
                      "1=neu, 2=pos")
  task = keras_hub.models.AlbertTextClassifier.from_preset(preset)
  logits = np.asarray(task.predict(LOWERCASE_TEXTS, verbose=0))
  from tests import numpy_reference  # pylint: disable=g-import-not-at-top
  inputs = numpy_reference.packed(tokenizer, LOWERCASE_TEXTS, length=20)
  ours = np.asarray(model(inputs, training=False)["logits"])
  theirs, expected = (tf.nn.softmax(x).numpy() for x in (logits, ours))
  # Random weights of scale 0.3: not a near-uniform, trivially equal output.
  assert np.max(expected) - np.min(expected) > 0.2
  np.testing.assert_allclose(theirs, expected, atol=1e-5)


def test_tagger_preset_says_keras_hub_has_no_task_for_it(tokenizer, spm_file,
                                                         tmp_path):
  from albert_tf.core.record import ModelInfo, tokenizer_fields  # pylint: disable=g-import-not-at-top
  config = _config(tokenizer.vocab_size)
  out = tmp_path / "ner"
  checkpoints.save_weights(_random_encoder(config), str(out / "ckpt-1"),
                           config)
  ModelInfo(task="tagging", task_name="conll", num_labels=3,
            label_list=["O", "B-PER", "I-PER"], max_seq_length=20,
            **tokenizer_fields(tokenizer)).write_beside(str(out))
  lines = []
  export_keras_hub.export(str(out), str(tmp_path / "preset"),
                          spm_model_file=spm_file, log=lines.append)
  assert lines[1] == ("  note: keras-hub has no task model for the tagging "
                      "family: the preset holds the encoder only, without "
                      "the task's head")
  assert not os.path.exists(tmp_path / "preset" / "task.json")
