"""SavedModel export: in-graph tokenizer == Python tokenizer, signatures == Keras."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

from albert_tf.training import checkpoints
from albert_tf.data import tokenization
from albert_tf import export_saved_model as export_lib
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.models import AlbertClassifier, AlbertPretrainer
from albert_tf.serving import saved_model
from albert_tf.serving.text_graph import TextEncoder
from tests import deploy_fixtures as fx
from tests import numpy_reference
from tests.numpy_reference import assert_close_to_scale

MAX_SEQ = 48
LONG_TEXT = "很长的评论，" * 400 + "end"
# A NUL: tf.strings.lower(utf-8) stopped there, so serve_text read only
# "paris" of this text (normalization._lower_graph).
EDGE_TEXTS = ["", "   ", LONG_TEXT, "Paris\x00 Museum IS big"] + fx.MIXED_TEXTS


@pytest.fixture(scope="module")
def spm_file(tmp_path_factory):
  return fx.train_spm(str(tmp_path_factory.mktemp("spm")))


@pytest.fixture(scope="module")
def sp_tokenizer(spm_file):
  return tokenization.load_tokenizer(spm_model_file=spm_file)


def _config(tokenizer):
  return AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16,
                      hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64,
                      max_position_embeddings=64)


def _python_features(tokenizer, texts, texts_b=None, length=MAX_SEQ):
  return numpy_reference.packed(tokenizer, texts, texts_b, length)


# ------------------------------------------------------------ tokenizer
def _sp_scores(tokenizer, ids):
  import sentencepiece as spm
  sp = spm.SentencePieceProcessor(model_file=tokenizer.model_file)
  return sum(sp.get_score(i) for i in ids), sp.decode(ids)


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_in_graph_tokenizer_matches_python(kind, spm_file, tmp_path):
  if kind == "sentencepiece":
    tokenizer = tokenization.load_tokenizer(spm_model_file=spm_file)
  else:
    tokenizer = tokenization.load_tokenizer(
        vocab_file=fx.make_wordpiece_vocab(str(tmp_path)))
  texts = (fx.review_texts(1000)[-500:] + fx.article_texts() + EDGE_TEXTS)
  encoder = TextEncoder.from_tokenizer(tokenizer, MAX_SEQ)
  normalized = [t.decode("utf-8") for t in
                encoder.normalize(tf.constant(texts)).numpy()]
  assert normalized == [tokenizer.normalize(t) for t in texts]
  got = encoder.tokenize(tf.constant(texts)).to_list()
  ties = 0
  for text, ids in zip(texts, got):
    expected = tokenizer.encode(text)
    if ids == expected:
      continue
    # The only difference allowed: SentencePiece ties (two segmentations of a
    # run like "。。。。" with the same score; TF Text's bundled library breaks
    # them the other way). Same text, same score.
    assert kind == "sentencepiece", (text, ids, expected)
    assert _sp_scores(tokenizer, ids) == pytest.approx(
        _sp_scores(tokenizer, expected)), text
    ties += 1
  assert ties <= len(texts) // 50
  assert len(got) > 500


def test_packing_matches_the_original_packing(sp_tokenizer):
  texts = fx.review_texts(200)
  a, b = texts[:200] + [""] * 3, texts[200:400] + ["", LONG_TEXT, "x"]
  a[5] = LONG_TEXT  # truncation of a, of b, of both
  a[6] = b[6] = LONG_TEXT
  encoder = TextEncoder.from_tokenizer(sp_tokenizer, MAX_SEQ)
  expected_pair = _python_features(sp_tokenizer, a, b)
  got_pair = encoder(tf.constant(a), tf.constant(b))
  expected_single = _python_features(sp_tokenizer, a)
  got_single = encoder(tf.constant(a))
  for name in expected_pair:
    mismatch_pair = np.any(got_pair[name].numpy() != expected_pair[name], 1)
    mismatch_single = np.any(got_single[name].numpy() != expected_single[name],
                             1)
    # Rows may differ only by a SentencePiece tie (see the test above).
    assert mismatch_pair.sum() <= 3 and mismatch_single.sum() <= 3, name
    assert got_pair[name].dtype == tf.int32
    assert got_pair[name].shape == (len(a), MAX_SEQ)


def test_encode_texts_mixes_pairs_counts_cuts_and_survives_a_seed(
    sp_tokenizer):
  """encode_texts (how fine-tuning and the Python runners encode) against
  the original packing: single texts and pairs mixed in one call, batches
  of 7, the pieces each row lost; then again after
  keras.utils.set_random_seed (as fine-tuning starts), which clears TF's
  kernels and with them the SentencePiece model of the kept encoder."""
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
  texts = fx.review_texts(40) + [LONG_TEXT]
  texts_b = [None if i % 3 else t for i, t in enumerate(reversed(texts))]
  got, removed = text_graph.encode_texts(
      text_graph.shared_encoder(sp_tokenizer, MAX_SEQ), texts, texts_b,
      batch_size=7)
  rows = [numpy_reference.pack_pair(sp_tokenizer, a, b, MAX_SEQ)
          for a, b in zip(texts, texts_b)]
  same = [r[0] == got["input_ids"][i].tolist() for i, r in enumerate(rows)]
  assert same.count(False) <= 1  # a SentencePiece tie, at most
  assert [r[3] for r, s in zip(rows, same) if s] == [
      int(n) for n, s in zip(removed, same) if s]
  assert removed[-1] > 0 and (removed == 0).any()
  keras.utils.set_random_seed(1)
  again, _ = text_graph.encode_texts(
      text_graph.shared_encoder(sp_tokenizer, MAX_SEQ), texts, texts_b)
  np.testing.assert_array_equal(again["input_ids"], got["input_ids"])


# ------------------------------------------------------------ export
KINDS = {"encoder": ("sequence_output", "pooled_output"),
         "classifier": ("logits", "probabilities"),
         "pretrainer": ("sequence_output", "pooled_output", "mlm_logits",
                        "sop_logits")}


def _save_random_checkpoint(kind, config, directory):
  model = {"encoder": lambda: AlbertEncoder(config),
           "classifier": lambda: AlbertClassifier(config, 3),
           "pretrainer": lambda: AlbertPretrainer(config)}[kind]()
  prefix = os.path.join(directory, "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  return model, prefix


def _keras_outputs(model, kind, features, positions=None):
  inputs = dict(features)
  if kind == "pretrainer":
    inputs["masked_lm_positions"] = positions
  out = model(inputs, training=False)
  if kind == "classifier":
    out = dict(out, probabilities=tf.nn.softmax(out["logits"]))
  return {k: np.asarray(out[k]) for k in KINDS[kind]}


# The classifier's in make test; the encoder's and pretrainer's (35 s) in
# the slow tier.
@pytest.mark.parametrize("kind", [
    pytest.param(k, marks=() if k == "classifier" else pytest.mark.slow)
    for k in KINDS])
def test_export_signatures_match_keras(kind, sp_tokenizer, spm_file, tmp_path):
  config = _config(sp_tokenizer)
  model, prefix = _save_random_checkpoint(kind, config, str(tmp_path / "ck"))
  export_dir = str(tmp_path / "saved_models" / kind)
  path = export_lib.export(
      checkpoint=prefix, export_dir=export_dir, model=kind,
      spm_model_file=spm_file, num_labels=3, max_seq_length=MAX_SEQ,
      text_pair=kind != "encoder")
  assert path == os.path.join(export_dir, "1")
  assert sorted(os.listdir(export_dir)) == ["1"]  # no temporary left behind
  assert os.path.exists(os.path.join(path, "assets", "spm.model"))

  loaded = tf.saved_model.load(path)
  assert set(loaded.signatures) == {"serving_default", "serve_text"} | (
      {"serve_fill_mask"} if kind == "pretrainer" else set())
  texts = fx.review_texts(3)[:3] + EDGE_TEXTS
  texts_b = list(reversed(texts))
  pair = kind != "encoder"
  features = _python_features(sp_tokenizer, texts, texts_b if pair else None)
  positions = np.tile(np.array([[1, 2, 5, 0]], np.int32), [len(texts), 1])
  expected = _keras_outputs(model, kind, features, positions)

  ids_inputs = {k: tf.constant(v) for k, v in features.items()}
  text_inputs = {"text": tf.constant(texts)}
  if pair:
    text_inputs["text_b"] = tf.constant(texts_b)
  if kind == "pretrainer":
    ids_inputs["masked_lm_positions"] = tf.constant(positions)
    text_inputs["masked_lm_positions"] = tf.constant(positions)
  by_ids = loaded.signatures["serving_default"](**ids_inputs)
  by_text = loaded.signatures["serve_text"](**text_inputs)
  assert set(by_ids) == set(KINDS[kind]) == set(by_text)
  for name in KINDS[kind]:
    assert_close_to_scale(by_ids[name].numpy(), expected[name], rel=1e-5)
    assert_close_to_scale(by_text[name].numpy(), expected[name], rel=1e-5)
    assert np.all(np.isfinite(by_text[name].numpy()))
  if kind == "pretrainer":
    assert by_ids["mlm_logits"].shape == (len(texts), 4, config.vocab_size)
    assert by_ids["sop_logits"].shape == (len(texts), 2)

  # Malformed ids: an InvalidArgumentError naming the input, never the
  # logits of a wrapped or clipped id.
  serve = loaded.signatures["serving_default"]
  for value, said in ((-1, "input_ids: a negative token id"),
                      (config.vocab_size, "input_ids: a token id >= "
                       f"vocab_size={config.vocab_size}")):
    ids = features["input_ids"].copy()
    ids[0, 1] = value
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(said)):
      serve(**{**ids_inputs, "input_ids": tf.constant(ids)})
  for name in ("input_mask", "segment_ids"):
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
        f"{name}: another shape than input_ids")):
      serve(**{**ids_inputs, name: ids_inputs[name][:, :-1]})

  if kind == "classifier":
    _check_signature_defs(path)
    _check_warmup(path, loaded)


def _check_signature_defs(path):
  # What `saved_model_cli show --dir PATH --all` prints, read in-process with
  # the same library (a subprocess would cost a second TF import).
  from tensorflow.python.tools import saved_model_utils
  meta_graph = saved_model_utils.get_meta_graph_def(path, "serve")
  serving = meta_graph.signature_def["serving_default"]
  assert serving.method_name == "tensorflow/serving/predict"
  assert sorted(serving.inputs) == ["input_ids", "input_mask", "segment_ids"]
  for tensor in serving.inputs.values():
    assert tensor.dtype == tf.int32.as_datatype_enum
    assert [d.size for d in tensor.tensor_shape.dim] == [-1, -1]
  assert sorted(serving.outputs) == ["logits", "probabilities"]
  text = meta_graph.signature_def["serve_text"]
  assert sorted(text.inputs) == ["text", "text_b"]
  assert text.inputs["text"].dtype == tf.string.as_datatype_enum
  # serving_default's function holds core ops only; the TF Text ops sit in
  # serve_text (in the same graph: a TensorFlow without them loads neither;
  # --signatures=serving_default saves it alone, test_saved_model_signatures).
  ops = {node.op for f in meta_graph.graph_def.library.function
         for node in f.node_def
         if "serving_default" in f.signature.name}
  assert not {op for op in ops if "Sentencepiece" in op or "Wordpiece" in op}


def _check_warmup(path, loaded):
  from tensorflow_serving.apis import prediction_log_pb2
  records = list(tf.data.TFRecordDataset(
      os.path.join(path, "assets.extra", "tf_serving_warmup_requests")))
  assert len(records) >= 2
  for record in records:
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    request = log.predict_log.request
    assert request.model_spec.signature_name == "serving_default"
    inputs = {k: tf.constant(tf.make_ndarray(v))
              for k, v in request.inputs.items()}
    assert all(v.dtype == tf.int32 for v in inputs.values())
    out = loaded.signatures["serving_default"](**inputs)
    assert np.all(np.isfinite(out["probabilities"].numpy()))


# ------------------------------------------------------------ refusals
@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_refuses_existing_version_and_overwrites(sp_tokenizer, spm_file,
                                                 tmp_path):
  config = _config(sp_tokenizer)
  _, prefix = _save_random_checkpoint("encoder", config, str(tmp_path / "ck"))
  export_dir = str(tmp_path / "sm")
  kwargs = dict(checkpoint=prefix, export_dir=export_dir, model="encoder",
                spm_model_file=spm_file, max_seq_length=16)
  first = export_lib.export(version=7, **kwargs)
  marker = os.path.join(first, "assets.extra", "marker")
  open(marker, "w").close()
  with pytest.raises(export_lib.ExportError, match="already exists"):
    export_lib.export(version=7, **kwargs)
  assert os.path.exists(marker)  # untouched
  assert saved_model.next_version(export_dir) == 8
  again = export_lib.export(version=7, overwrite=True, **kwargs)
  assert again == first and not os.path.exists(marker)
  assert sorted(os.listdir(export_dir)) == ["7"]


def test_refuses_mismatched_checkpoint(sp_tokenizer, spm_file, tmp_path):
  config = _config(sp_tokenizer)
  _, prefix = _save_random_checkpoint("encoder", config, str(tmp_path / "ck"))
  other = tmp_path / "other_config.json"
  config.replace(hidden_size=48, num_attention_heads=4).to_json_file(str(other))
  with pytest.raises(export_lib.ExportError,
                     match="different config|does not match"):
    export_lib.export(checkpoint=prefix, export_dir=str(tmp_path / "sm"),
                      albert_config_file=str(other), spm_model_file=spm_file,
                      max_seq_length=16)
  # An encoder-only checkpoint is no classifier.
  with pytest.raises(export_lib.ExportError, match="classifier_head"):
    export_lib.export(checkpoint=prefix, export_dir=str(tmp_path / "sm"),
                      model="classifier", num_labels=2,
                      spm_model_file=spm_file, max_seq_length=16)
  assert not os.path.exists(tmp_path / "sm" / "1")
