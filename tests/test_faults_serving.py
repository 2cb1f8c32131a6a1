"""Serving inputs (issue 39 item 10): what a caller sends that the model
would misread is one line naming it (docs/faults.md, "Serving inputs").

  - An input longer than the position table: an InvalidArgumentError
    naming max_position_embeddings from every family's serving_default
    (`serving.saved_model.checked_ids`), and a TFLiteInputError from
    TFLite's pre-check (`serving.tflite_runner`). A segment id outside
    [0, type_vocab_size): an InvalidArgumentError naming it.
  - load().predict / .encode: an item that is no str (None, a number,
    bytes) or holds an unpaired surrogate: a LoadError naming the argument
    and the item's index.
  - fill-mask never proposes [CLS], [SEP], [MASK], [PAD], [UNK], <pad> or
    <unk>, in Python (`training.export.fill_mask`) and in serve_fill_mask.

Tiny random-weight models (tests/test_family_serving.py's checkpoints);
valid inputs give what they gave before.
"""

import dataclasses
import json
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

import albert_tf
from albert_tf import export_saved_model as export_lib
from albert_tf.core import features as F
from albert_tf import inference
from albert_tf.tasks import registry
from albert_tf.core.config import AlbertConfig
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.core.record import ModelInfo
from albert_tf.serving import fill_mask_graph
from albert_tf.serving import tflite_runner
from albert_tf.training import checkpoints
from albert_tf.training import export as export_training
from tests import numpy_reference
from tests import test_family_serving as fam

POSITIONS = 64  # test_family_serving's max_position_embeddings
SAID_LONG = (f"input_ids: longer than max_position_embeddings={POSITIONS}, "
             "the rows of the position table")


def _ids(tokenizer, shape):
  """Valid int32 features of `shape` ([batch, (choices,) length])."""
  rng = np.random.default_rng(0)
  ids = rng.integers(5, tokenizer.vocab_size, size=shape).astype(np.int32)
  return {F.INPUT_IDS: ids, F.INPUT_MASK: np.ones(shape, np.int32),
          F.SEGMENT_IDS: np.zeros(shape, np.int32)}


# --------------------------------------------------- the position table
@pytest.mark.parametrize("family", fam.FAMILIES + ["pretraining", "encoder"])
def test_serving_default_refuses_inputs_longer_than_the_position_table(
    family, tmp_path):
  if family in fam.FAMILIES:
    model, tokenizer, record = fam._make(tmp_path, family)  # pylint: disable=protected-access
    signatures = registry.family(family).task.export_signatures(
        model, record, tokenizer, record.max_seq_length, None)
  else:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(fam.CHARS)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", "utf-8")
    tokenizer = load_tokenizer(vocab_file=str(tmp_path / "vocab.txt"))
    config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                          hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=16,
                          max_position_embeddings=POSITIONS)
    if family == "pretraining":
      model = AlbertPretrainer(config)
      record = ModelInfo(task="pretraining", text_pair=True, task_config={
          "max_seq_length": 16, "max_predictions_per_seq": 2})
      signatures = registry.family(family).task.export_signatures(
          model, record, tokenizer, 16, None)
    else:
      from albert_tf.modeling.encoder import AlbertEncoder  # pylint: disable=g-import-not-at-top
      model = AlbertEncoder(config)
      signatures = export_lib.encoder_signatures(model, tokenizer, 16, False)
  signature = signatures["serving_default"]
  serve = lambda **f: signature(*[f[s.name] for s in  # pylint: disable=unnecessary-lambda-assignment
                                  signature.input_signature])
  middle = [2, 4] if family == "multiple_choice" else [2]

  def features(length):
    f = {k: tf.constant(v) for k, v in
         _ids(tokenizer, middle + [length]).items()}
    if family == "pretraining":
      f[F.MASKED_LM_POSITIONS] = tf.constant([[1, 3], [2, 0]])
    return f

  # The longest input the table holds: what the Keras model gives.
  full = features(POSITIONS)
  got = serve(**full)
  expected = model(full, training=False)
  for name in got:
    if name in expected:
      np.testing.assert_allclose(got[name].numpy(),
                                 np.asarray(expected[name], np.float32),
                                 rtol=1e-5, atol=1e-5)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape(SAID_LONG)):
    serve(**features(POSITIONS + 1))
  # A segment id outside the token-type table (type_vocab_size=2).
  for bad, said in ((2, "segment_ids: a segment id >= type_vocab_size=2"),
                    (-1, "segment_ids: a negative segment id")):
    f = features(8)
    f[F.SEGMENT_IDS] = tf.tensor_scatter_nd_update(
        f[F.SEGMENT_IDS], [[0] * (len(middle) + 1)], [bad])
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(said)):
      serve(**f)


def test_the_check_survives_export_and_tflite_takes_it_from_its_json(
    tmp_path, monkeypatch):
  _, tokenizer, _ = fam._make(tmp_path / "out", "regression")  # pylint: disable=protected-access
  version = export_lib.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  serve = tf.saved_model.load(version).signatures["serving_default"]
  assert serve(**{k: tf.constant(v) for k, v in _ids(
      tokenizer, [1, POSITIONS]).items()})["logits"].shape == (1, 1)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape(SAID_LONG)):
    serve(**{k: tf.constant(v) for k, v in _ids(
        tokenizer, [1, POSITIONS + 1]).items()})

  # export_tflite writes the limit beside vocab_size (the conversion itself
  # is test_family_serving's; here only what the runner reads of the .json).
  from albert_tf import export_tflite  # pylint: disable=g-import-not-at-top
  target = str(tmp_path / "regression.tflite")
  monkeypatch.setattr(export_tflite, "_convert_in",
                      lambda *a, **k: b"not a flatbuffer")
  monkeypatch.setattr(export_tflite, "describe_io", lambda path: {
      "inputs": [{"name": n, "shape": [1, 16], "dtype": "int32"}
                 for n in F.ENCODER_INPUTS], "outputs": []})
  # Nothing runs that flatbuffer: its check is left out here.
  monkeypatch.setattr(export_tflite.verify, "check",
                      lambda *a, **k: {"verdict": "not run", "degraded": False})
  info = export_tflite.convert(version, target, "none")
  assert info["max_position_embeddings"] == POSITIONS
  with open(target + ".json", encoding="utf-8") as f:
    assert json.load(f)["max_position_embeddings"] == POSITIONS


class _FakeInterpreter:
  """ai_edge_litert's Interpreter as far as TFLiteRunner uses it."""
  calls = []

  def __init__(self, model_path, num_threads=None):
    del model_path, num_threads

  def get_signature_runner(self, name):
    del name
    return lambda **f: _FakeInterpreter.calls.append(f) or {"logits": 0}


def _runner(tmp_path, monkeypatch, **info):
  import ai_edge_litert.interpreter  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ai_edge_litert.interpreter, "Interpreter",
                      _FakeInterpreter)
  (tmp_path / "m.json").write_text(json.dumps({
      "inputs": [{"name": n, "shape": [1, 16], "dtype": "int32"}
                 for n in F.ENCODER_INPUTS], "vocab_size": 50, **info}))
  _FakeInterpreter.calls = []
  return tflite_runner.TFLiteRunner(str(tmp_path / "m.tflite"))


def test_tflite_runner_refuses_inputs_longer_than_the_position_table(
    tmp_path, monkeypatch):
  runner = _runner(tmp_path, monkeypatch, max_position_embeddings=24)
  ones = lambda n: np.ones([1, n], np.int32)  # pylint: disable=unnecessary-lambda-assignment
  with pytest.raises(tflite_runner.TFLiteInputError) as error:
    runner(input_ids=ones(30), input_mask=ones(30), segment_ids=ones(30))
  assert str(error.value) == (
      "input_ids: 30 positions, longer than max_position_embeddings=24 (the "
      f"model's position table; {tmp_path}/m.tflite takes [1, 16])")
  assert not _FakeInterpreter.calls
  # Within the table: the shape check (and a valid input runs) as before.
  with pytest.raises(tflite_runner.TFLiteInputError,
                     match=r"input_ids: shape \[1, 20\], but"):
    runner(input_ids=ones(20), input_mask=ones(20), segment_ids=ones(20))
  assert runner(input_ids=ones(16), input_mask=ones(16),
                segment_ids=ones(16)) == {"logits": 0}
  assert len(_FakeInterpreter.calls) == 1
  # A .json of before (no limit in it): its fixed shape still refuses.
  old = _runner(tmp_path, monkeypatch)
  with pytest.raises(tflite_runner.TFLiteInputError,
                     match=r"input_ids: shape \[1, 30\], but"):
    old(input_ids=ones(30), input_mask=ones(30), segment_ids=ones(30))


# --------------------------------------------------- predict / encode
BAD_ITEMS = [
    (None, "texts[1] is None (NoneType), not a string"),
    (3, "texts[1] is 3 (int), not a string"),
    (2.5, "texts[1] is 2.5 (float), not a string"),
    (b"\xe5\xa5\xbd", "texts[1] is bytes, not a string (decode it first: "
     "b'\\xe5\\xa5\\xbd')"),
    ("好\ud800的", "texts[1] holds an unpaired surrogate '\\ud800' at "
     "character 1 (not text UTF-8 can encode)"),
]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_serving_cls")
  fam._make(root, "classification")  # pylint: disable=protected-access
  return albert_tf.load(str(root))


@pytest.mark.parametrize("bad,said", BAD_ITEMS)
def test_predict_and_encode_name_the_item_that_is_no_text(classifier, bad,
                                                          said):
  texts = ["很好", bad, "差"]
  # Named as serve_text's inputs (text, text_b), as predict's other errors.
  for call in (lambda: classifier.predict(texts, fam.TEXTS_B[:3]),
               lambda: classifier.encode(texts)):
    with pytest.raises(inference.LoadError) as error:
      call()
    assert str(error.value) == said.replace("texts[1]", "text[1]")
  with pytest.raises(inference.LoadError) as error:
    classifier.predict(fam.TEXTS_B[:3], texts)
  assert str(error.value) == said.replace("texts[1]", "text_b[1]")


def test_valid_texts_predict_as_before(classifier):
  texts, texts_b = fam.TEXTS, fam.TEXTS_B
  got = classifier.predict(texts, texts_b)
  # numpy strings and tuples are texts too; the results do not change.
  assert classifier.predict(np.array(texts), tuple(texts_b)) == got
  assert classifier.predict(list(zip(texts, texts_b))) == got
  encoded = classifier.encode(texts, texts_b)
  assert encoded["input_ids"].shape == (len(texts), 16)


def test_multiple_choice_options_name_the_question_and_option(tmp_path):
  fam._make(tmp_path, "multiple_choice")  # pylint: disable=protected-access
  predictor = albert_tf.load(str(tmp_path))
  options = [list(o) for o in fam.OPTIONS]
  options[2][1] = None
  with pytest.raises(inference.LoadError) as error:
    predictor.encode(fam.ARTICLES, fam.MC_QUESTIONS, options)
  assert str(error.value) == (
      "options[2][1] is None (NoneType), not a string")


# --------------------------------------------------- fill-mask candidates
@pytest.fixture(scope="module")
def pretrainer(tmp_path_factory):
  """A random pretrainer whose MLM bias makes every special piece more
  probable than any word."""
  root = tmp_path_factory.mktemp("faults_serving_mlm")
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<pad>"] +
           list(fam.CHARS))
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", "utf-8")
  tokenizer = load_tokenizer(vocab_file=str(root / "vocab.txt"))
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=16,
                        max_position_embeddings=POSITIONS)
  model = AlbertPretrainer(config)
  model(dict(_ids(tokenizer, [1, 4]),
             masked_lm_positions=np.zeros([1, 1], np.int32)))
  bias = [w for w in model.weights if w.path.endswith("output_bias")]
  assert len(bias) == 1
  bias[0].assign(np.where(np.arange(len(vocab)) < 6, 20.0, 0.0))
  checkpoints.save_weights(model, str(root / "ckpt-1"), config)
  return {"root": root, "model": model, "tokenizer": tokenizer}


FILL_TEXTS = ["很[MASK]的今天", "[MASK]明在北[MASK]"]


def _reference_fills(model, tokenizer, texts, top_k):
  """(ids, probabilities) per mask: numpy's top k of the softmax over every
  id, special ids left out."""
  out = []
  for text in texts:
    ids = numpy_reference.masked_ids(tokenizer, text)
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    logits = np.asarray(model({
        F.INPUT_IDS: np.array([ids], np.int32),
        F.INPUT_MASK: np.ones([1, len(ids)], np.int32),
        F.SEGMENT_IDS: np.zeros([1, len(ids)], np.int32),
        F.MASKED_LM_POSITIONS: np.array([positions], np.int32)},
                                training=False)["mlm_logits"][0], np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    masks = []
    for p in probs:
      order = [i for i in np.argsort(-p, kind="stable") if i >= 6][:top_k]
      masks.append((order, p[order]))
    out.append(masks)
  return out


def test_fill_mask_never_proposes_a_special_piece(pretrainer):
  model, tokenizer = pretrainer["model"], pretrainer["tokenizer"]
  assert fill_mask_graph.special_ids(tokenizer) == [0, 1, 2, 3, 4, 5]
  expected = _reference_fills(model, tokenizer, FILL_TEXTS, 3)
  got = export_training.fill_mask(model, tokenizer, FILL_TEXTS, top_k=3)
  for masks, want in zip(got, expected):
    assert len(masks) == len(want)
    for mask, (ids, probs) in zip(masks, want):
      assert [i for _, i, _ in mask] == list(ids)
      assert [p for p, _, _ in mask] == tokenizer.convert_ids_to_tokens(
          list(ids))
      # The model's probabilities (a softmax over every id), not
      # renormalised: the specials hold nearly all of it.
      np.testing.assert_allclose([q for _, _, q in mask], probs, rtol=1e-4,
                                 atol=1e-9)
  # The SavedModel's serve_fill_mask (the same function, in memory).
  serve = fill_mask_graph.serve_fill_mask_signature(model, tokenizer, 16)
  out = serve(tf.constant(FILL_TEXTS), tf.constant(3))
  for row, want in enumerate(expected):
    for m, (ids, probs) in enumerate(want):
      assert out["top_k_ids"][row, m].numpy().tolist() == list(ids)
      np.testing.assert_allclose(out["top_k_probabilities"][row, m].numpy(),
                                 probs, rtol=1e-4, atol=1e-9)
  # load().predict (the Python path) and more than the words there are:
  # only words.
  predictor = albert_tf.load(str(pretrainer["root"]),
                             vocab_file=str(pretrainer["root"] / "vocab.txt"))
  many = predictor.predict(["[MASK]"], top_k=tokenizer.vocab_size)
  assert sorted(d["id"] for d in many[0][0]) == list(
      range(6, tokenizer.vocab_size))
  # And its texts are checked as every predict's.
  for bad, said in BAD_ITEMS:
    with pytest.raises(inference.LoadError) as error:
      predictor.predict(["很[MASK]", bad])
    assert str(error.value) == said
