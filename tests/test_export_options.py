"""export_saved_model's serving options: length buckets, --jit_compile, bf16.

One tiny random classifier (seeded; initializer_range 0.2, so that its
logits are of order 1 and its probabilities far from uniform: a bf16 or
padding error shows) is exported three times: `bucketed` (the default
buckets 16, 32, 48), and for the slow tier `full_jit`
(--length_buckets=none --jit_compile) and `bf16`
(--mixed_precision=bfloat16, default buckets). A random tagger with a
task_record.json is exported once (default buckets). The reference of
"full padding" is the Keras model on the Python tokenizer's features of
max_seq_length, or the in-memory TextTagger without buckets.
"""
# pylint: disable=redefined-outer-name  (module fixtures as arguments)

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

from albert_tf import export_saved_model as export_lib
from albert_tf.modeling.models import AlbertClassifier, AlbertTagger
from albert_tf.serving import saved_model
from albert_tf.serving.tagging_graph import TextTagger
from albert_tf.serving.text_graph import TextEncoder
from albert_tf.core.record import ModelInfo, tokenizer_fields
from albert_tf.training import checkpoints
from tests import deploy_fixtures as fx
from tests.numpy_reference import assert_close_to_scale
from tests.test_export import (  # noqa: F401  pylint: disable=unused-import
    EDGE_TEXTS, LONG_TEXT, MAX_SEQ, _config, _python_features, sp_tokenizer,
    spm_file)

BUCKETS = (16, 32, MAX_SEQ)  # the default for MAX_SEQ=48
# The first six, alone, fall in every bucket with the SentencePiece model
# and with character tokens: empty (2 tokens), short, ~15, ~25 and ~45
# pieces, and over-long (cut at MAX_SEQ); then reviews and mixed scripts.
TEXTS = (["", "好", "这个手机很好用，电池也耐用。", "质量不错" * 5, "质量不错" * 10,
          LONG_TEXT] + fx.review_texts(6)[:6] + EDGE_TEXTS[1:2] +
         EDGE_TEXTS[3:])
LENGTH_CLASSES = 6
# One model computed twice (Keras eager vs a graph, XLA vs not): float32
# rounding of differently ordered sums, relative to the largest |value|.
SAME_MODEL_REL = 1e-5
# bfloat16 keeps 8 significant bits: each rounding is off by up to 2^-9
# (0.2%) of the value. Through the embeddings, 2 layers (a dozen roundings
# each), the pooler and the head that adds up to about 1% of the largest
# |logit| (0.9-1.4% measured on three seeds of this config), bounded at 3%.
# A probability moves by less than the largest logit change (softmax's
# derivatives sum to at most 1/2 per row), so with logits of order 1 the
# probabilities move by < 1e-2 (7e-3 measured at most), bounded at 2e-2;
# a float32 cast or a mask gone wrong moves them by 0.1 or more.
BF16_LOGIT_REL = 3e-2
BF16_PROB_TOL = 2e-2


def _bucket_of(rows):
  return min(b for b in BUCKETS if b >= rows)


def _graph_functions(path):
  """The FunctionDefs of a SavedModel (what `saved_model_cli` reads)."""
  from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-import-not-at-top
  return list(saved_model_utils.get_meta_graph_def(path, "serve")
              .graph_def.library.function)


def _int64_consts(functions):
  return [tf.make_ndarray(n.attr["value"].tensor).tolist()
          for f in functions for n in f.node_def if n.op == "Const" and
          n.attr["dtype"].type == tf.int64.as_datatype_enum]


def _served_calls(functions):
  """{XLA-compiled?} of the ServedModel calls traced into the graph."""
  return [bool(f.attr["_XlaMustCompile"].b) for f in functions
          if "served_call" in f.signature.name]


# ------------------------------------------------------------ flags
def test_length_buckets_and_precision_flags():
  assert export_lib.length_buckets_for(None, 128) == (16, 32, 64, 128)
  assert export_lib.length_buckets_for(None, 100) == (16, 32, 64, 100)
  assert export_lib.length_buckets_for(None, 16) == (16,)
  assert export_lib.length_buckets_for("none", 48) == (48,)
  assert export_lib.length_buckets_for("None", 48) == (48,)
  assert export_lib.length_buckets_for((), 48) == (48,)
  assert export_lib.length_buckets_for("32, 16,48", 48) == (16, 32, 48)
  assert export_lib.length_buckets_for([8], 48) == (8, 48)
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.length_buckets_for("16,x", 48)
  assert str(error.value) == (
      "--length_buckets must be lengths separated by commas (e.g. 16,32,64) "
      "or none, got '16,x'")
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.length_buckets_for("1,16,64", 48)
  assert str(error.value) == (
      "--length_buckets [1, 64]: each must be in [2, --max_seq_length=48] "
      "(texts are cut at max_seq_length, which is always the last bucket)")
  assert export_lib.export_precision("mixed_bfloat16") == "bfloat16"
  assert export_lib.export_precision(None) == "none"
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.export_precision("float16")
  assert str(error.value) == ("--mixed_precision=float16: an export "
                              "computes in none or bfloat16")


# ------------------------------------------------------------ encoder
def test_text_encoder_pads_to_the_bucket(sp_tokenizer):
  full = TextEncoder.from_tokenizer(sp_tokenizer, MAX_SEQ)
  bucketed = TextEncoder.from_tokenizer(sp_tokenizer, MAX_SEQ,
                                        length_buckets=(32, 16))
  assert full.length_buckets == (MAX_SEQ,)
  assert bucketed.length_buckets == BUCKETS
  batches = [([t], None) for t in TEXTS[:LENGTH_CLASSES]] + [
      (TEXTS[:3], None), (TEXTS, None), (TEXTS[2:4], TEXTS[1:3]),
      (TEXTS[:2], [LONG_TEXT, ""]), ([], None)]
  used = set()
  for a, b in batches:
    args = [tf.constant(a, tf.string)] + (
        [tf.constant(b, tf.string)] if b else [])
    want = {k: v.numpy() for k, v in full(*args).items()}
    got = {k: v.numpy() for k, v in bucketed(*args).items()}
    length = _bucket_of(int(want["input_mask"].sum(1).max(initial=0)))
    used.add(length)
    for name in want:
      assert got[name].shape == (len(a), length), (a, name)
      assert got[name].dtype == np.int32
      # The same rows, cut where only padding follows.
      np.testing.assert_array_equal(got[name], want[name][:, :length])
    assert not want["input_mask"][:, length:].any()
  assert used == set(BUCKETS)
  with pytest.raises(ValueError, match=r"length_buckets \[64\] outside"):
    TextEncoder.from_tokenizer(sp_tokenizer, MAX_SEQ, length_buckets=[64])


# ------------------------------------------------------------ exports
@pytest.fixture(scope="module")
def exports(tmp_path_factory, spm_file, sp_tokenizer):
  root = tmp_path_factory.mktemp("options")
  keras.utils.set_random_seed(1)
  config = _config(sp_tokenizer).replace(initializer_range=0.2)
  model = AlbertClassifier(config, 3)
  prefix = str(root / "ck" / "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  common = dict(checkpoint=prefix, model="classifier", num_labels=3,
                spm_model_file=spm_file, max_seq_length=MAX_SEQ,
                text_pair=False)
  path = export_lib.export(export_dir=str(root / "bucketed"), **common)
  return {"model": model, "prefix": prefix, "paths": {"bucketed": path},
          "root": root, "common": common,
          "loaded": {"bucketed": tf.saved_model.load(path)}}


@pytest.fixture(scope="module")
def variants(exports):
  """`exports` with full_jit and bf16 added (XLA compiles at the first call
  of each shape: the tests that use these are in the slow tier)."""
  options = {"full_jit": dict(length_buckets="none", jit_compile=True),
             "bf16": dict(mixed_precision="bfloat16")}
  for name, kwargs in options.items():
    path = export_lib.export(export_dir=str(exports["root"] / name),
                             **exports["common"], **kwargs)
    exports["paths"][name] = path
    exports["loaded"][name] = tf.saved_model.load(path)
  return exports


def _serve_text(exports, name, texts):
  out = exports["loaded"][name].signatures["serve_text"](
      text=tf.constant(texts, tf.string))
  return {k: v.numpy() for k, v in out.items()}


def _keras(exports, features):
  logits = np.asarray(exports["model"](features, training=False)["logits"])
  return {"logits": logits,
          "probabilities": tf.nn.softmax(logits).numpy()}


def _serve_text_equals_full_padding(exports, name, sp_tokenizer):
  """serve_text of export `name`, each text alone (its own bucket) and all
  in one batch (the largest), against the Keras model on full padding."""
  expected = _keras(exports, _python_features(sp_tokenizer, TEXTS))
  assert np.abs(expected["logits"]).max() > 0.5  # not a near-uniform model
  diffs = {}
  alone = [_serve_text(exports, name, [t]) for t in TEXTS]
  batch = _serve_text(exports, name, TEXTS)
  for key in ("logits", "probabilities"):
    got_alone = np.concatenate([o[key] for o in alone])
    for got in (got_alone, batch[key]):
      assert got.dtype == np.float32
      assert_close_to_scale(got, expected[key], rel=SAME_MODEL_REL)
    diffs[key] = float(np.abs(got_alone - expected[key]).max())
  print(f"{name}: max |serve_text - Keras full padding|:", diffs)
  # The buckets are in the bucketed serve_text graph, in no other.
  consts = _int64_consts(_graph_functions(exports["paths"][name]))
  assert (list(BUCKETS) in consts) == (name == "bucketed")


def _metadata(exports, name):
  path = os.path.join(exports["paths"][name], "assets.extra",
                      saved_model.METADATA_FILE)
  with open(path, encoding="utf-8") as f:
    values = json.load(f)
  return {k: values[k] for k in ("length_buckets", "jit_compile",
                                 "mixed_precision", "max_seq_length")}


def test_bucketed_serve_text_equals_full_padding(exports, sp_tokenizer):
  _serve_text_equals_full_padding(exports, "bucketed", sp_tokenizer)
  assert _metadata(exports, "bucketed") == {
      "length_buckets": list(BUCKETS), "jit_compile": False,
      "mixed_precision": "none", "max_seq_length": MAX_SEQ}


@pytest.mark.slow
def test_jit_export_equals_the_plain_one(variants, sp_tokenizer):
  exports = variants
  _serve_text_equals_full_padding(exports, "full_jit", sp_tokenizer)
  assert _metadata(exports, "full_jit") == {
      "length_buckets": [MAX_SEQ], "jit_compile": True,
      "mixed_precision": "none", "max_seq_length": MAX_SEQ}
  calls = {n: _served_calls(_graph_functions(exports["paths"][n]))
           for n in exports["paths"]}
  # The model call of serving_default and of serve_text (each traced once
  # or twice), XLA-compiled; bf16 alone wraps the call without XLA.
  assert len(calls["full_jit"]) >= 2 and all(calls["full_jit"])
  assert len(calls["bf16"]) >= 2 and not any(calls["bf16"])
  assert calls["bucketed"] == []  # the plain export calls the model itself
  short = [t for t in TEXTS if len(sp_tokenizer.encode(t)) <= 10]
  assert len(short) >= 3
  # serving_default takes whatever length it is sent: 48 and 12 here.
  for texts, length in ((TEXTS, MAX_SEQ), (short, 12)):
    features = _python_features(sp_tokenizer, texts, length=length)
    ids = {k: tf.constant(v) for k, v in features.items()}
    expected = _keras(exports, features)
    out = {name: {k: v.numpy() for k, v in exports["loaded"][name]
                  .signatures["serving_default"](**ids).items()}
           for name in ("bucketed", "full_jit")}
    for name in out:
      for key in ("logits", "probabilities"):
        assert_close_to_scale(out[name][key], expected[key],
                              rel=SAME_MODEL_REL)
    diff = np.abs(out["full_jit"]["logits"] - out["bucketed"]["logits"])
    print(f"length {length}: max |XLA - plain| logit {diff.max():.1e}")


@pytest.mark.slow
def test_bf16_export_is_float32_out_and_close(variants):
  exports = variants
  assert _metadata(exports, "bf16")["mixed_precision"] == "bfloat16"
  functions = _graph_functions(exports["paths"]["bf16"])
  bf16 = tf.bfloat16.as_datatype_enum
  matmuls = [n.attr["T"].type == bf16 for f in functions for n in f.node_def
             if n.op in ("MatMul", "BatchMatMulV2")]
  assert matmuls and any(matmuls)
  plain = _graph_functions(exports["paths"]["bucketed"])
  assert not any(n.attr["T"].type == bf16 for f in plain for n in f.node_def)
  reference = _serve_text(exports, "bucketed", TEXTS)
  got = _serve_text(exports, "bf16", TEXTS)
  assert {k: v.dtype for k, v in got.items()} == {
      "logits": np.float32, "probabilities": np.float32}
  diff = float(np.abs(got["probabilities"] - reference["probabilities"]).max())
  scale = float(np.abs(reference["logits"]).max())
  logit_diff = float(np.abs(got["logits"] - reference["logits"]).max())
  print(f"bf16: max |prob diff| {diff:.2e}, max |logit diff| "
        f"{logit_diff:.2e} of max |logit| {scale:.2f}")
  assert 0 < diff <= BF16_PROB_TOL
  assert logit_diff <= BF16_LOGIT_REL * scale


def test_family_without_buckets_refuses_explicit_ones(exports):
  kwargs = dict(exports["common"], model="pretrainer", text_pair=None,
                num_labels=None, export_dir=str(exports["root"] / "pt"))
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.export(length_buckets="16,32", **kwargs)
  assert str(error.value) == (
      "--length_buckets: the pretrainer's serve_text pads to "
      "--max_seq_length; omit --length_buckets or pass "
      "--length_buckets=none")
  assert not os.path.exists(exports["root"] / "pt")


# ------------------------------------------------------------ tagger
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@pytest.fixture(scope="module")
def tagger(tmp_path_factory, spm_file, sp_tokenizer):
  root = tmp_path_factory.mktemp("tagger")
  keras.utils.set_random_seed(1)
  config = _config(sp_tokenizer).replace(initializer_range=0.2)
  model = AlbertTagger(config, len(TAGS))
  prefix = str(root / "ck" / "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  ModelInfo(task="tagging", task_name="conll", num_labels=len(TAGS),
            label_list=TAGS, max_seq_length=MAX_SEQ,
            task_config={"tag_scheme": "BIO", "doc_stride": 16,
                         "token_level": "char"},
            **tokenizer_fields(sp_tokenizer)).write_beside(str(root / "ck"))
  path = export_lib.export(checkpoint=prefix, export_dir=str(root / "sm"),
                           spm_model_file=spm_file)
  return {"model": model, "loaded": tf.saved_model.load(path), "path": path}


def test_tagger_bucketed_equals_full_padding(tagger, sp_tokenizer):
  full = TextTagger.from_tokenizer(sp_tokenizer, MAX_SEQ, "char", TAGS)
  bucketed = TextTagger.from_tokenizer(sp_tokenizer, MAX_SEQ, "char", TAGS,
                                       length_buckets=BUCKETS)

  def tag_ids(features):
    logits = tagger["model"](features, training=False)["logits"]
    return tf.argmax(logits, -1, output_type=tf.int32)

  lengths = set()
  # One text of each length class alone (every bucket), then all at once.
  for texts in [[t] for t in TEXTS[:LENGTH_CLASSES]] + [TEXTS]:
    text = tf.constant(texts, tf.string)
    features = bucketed.encode(text)[0]
    want = full.encode(text)[0]
    rows = int(want["input_mask"].numpy().sum(1).max())
    lengths.add(int(features["input_ids"].shape[1]))
    assert features["input_ids"].shape == (len(texts), _bucket_of(rows))
    expected = {k: v.numpy() for k, v in full(text, tag_ids).items()}
    served = {k: v.numpy() for k, v in tagger["loaded"].signatures[
        "serve_text"](text=text).items()}
    assert sorted(served) == sorted(expected)
    for key, value in expected.items():
      np.testing.assert_array_equal(served[key], value, err_msg=key)
  assert lengths == set(BUCKETS)
  # The comparison holds entities (random weights tag a lot).
  assert int(expected["num_entities"].sum()) > 10
  # ... and it is the bucketed graph that served them.
  assert list(BUCKETS) in _int64_consts(_graph_functions(tagger["path"]))
  with open(os.path.join(tagger["path"], "assets.extra",
                         saved_model.METADATA_FILE), encoding="utf-8") as f:
    assert json.load(f)["length_buckets"] == list(BUCKETS)
