"""TFLite conversion of an albert_tiny_zh-shaped classifier, every quantize mode.

The model has albert_tiny_zh's shape (E 128, H 312, 12 heads, 4 layers,
I 1248) with a 2,000-piece vocabulary instead of 21,128 to keep conversion
fast; weights are random, so outputs are compared with the Keras model, not
with labels. Bounds on the largest |probability difference| over real
Chinese reviews:
  none     1e-4   (float32; XNNPACK reorders sums)
  float16  1e-2   (float16 weights, float32 compute)
  dynamic  5e-2   (int8 weights, activations quantized per call)
  int8     1.5e-1 (int8 activations calibrated on 64 reviews; float fallback
                   for ops without int8 kernels). Measured on the fine-tuned
                   model in benchmarks/deploy.py.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import checkpoints
from albert_tf.data import tokenization
from albert_tf import export_saved_model as export_lib
from albert_tf import export_tflite
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.models import AlbertClassifier
from tests import deploy_fixtures as fx
from tests import numpy_reference

# Four TFLite conversions (about 10 s of CPU each): `make test-slow`.
pytestmark = pytest.mark.slow

MAX_SEQ = 64
BOUNDS = {"none": 1e-4, "float16": 1e-2, "dynamic": 5e-2, "int8": 1.5e-1}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  root = tmp_path_factory.mktemp("tflite")
  spm_file = fx.train_spm(str(root))
  tokenizer = tokenization.load_tokenizer(spm_model_file=spm_file)
  config = AlbertConfig.from_preset("albert_tiny_zh").replace(
      vocab_size=tokenizer.vocab_size)
  model = AlbertClassifier(config, num_labels=2)
  prefix = str(root / "ck" / "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  path = export_lib.export(checkpoint=prefix, export_dir=str(root / "sm"),
                           model="classifier", num_labels=2,
                           spm_model_file=spm_file, max_seq_length=MAX_SEQ)
  reviews = fx.review_texts(400)
  tsv = root / "calibration.tsv"
  tsv.write_text("".join(f"1\t{t}\n" for t in reviews[:64]), "utf-8")
  texts = reviews[-24:] + ["", "长" * 300] + fx.MIXED_TEXTS[:2]
  features = numpy_reference.packed(tokenizer, texts, length=MAX_SEQ)
  keras_probs = tf.nn.softmax(model(features)["logits"]).numpy()
  return {"root": root, "saved_model": path, "tsv": str(tsv),
          "features": features, "keras_probs": keras_probs}


@pytest.mark.parametrize("quantize", list(BOUNDS))
def test_tflite_matches_keras(quantize, exported):
  from ai_edge_litert.interpreter import Interpreter
  output = str(exported["root"] / "out" / f"tiny_{quantize}.tflite")
  info = export_tflite.convert(
      exported["saved_model"], output, quantize,
      representative_data=exported["tsv"], num_calibration_examples=64,
      # Random weights: BOUNDS are this test's; the floors are
      # test_export_fidelity's, on trained models.
      allow_degraded=True)
  assert [(i["name"], i["shape"], i["dtype"]) for i in info["inputs"]] == [
      (n, [1, MAX_SEQ], "int32")
      for n in ("input_ids", "input_mask", "segment_ids")]
  assert {o["name"] for o in info["outputs"]} == {"logits", "probabilities"}
  with open(output + ".json", encoding="utf-8") as f:
    info = json.load(f)
  # The tokenizer beside it is named after the model, and the JSON says so.
  assert info["tokenizer_file"] == f"tiny_{quantize}.spm.model"
  with open(output[:-len(".tflite")] + ".spm.model", "rb") as f, open(
      os.path.join(exported["saved_model"], "assets", "spm.model"), "rb") as g:
    assert f.read() == g.read()
  # What an app must do to text before the model: SentencePiece, lower case.
  assert info["normalization"] == [
      "collapse every run of whitespace (Python str.isspace) to one "
      "space; strip leading/trailing whitespace",
      "replace `` and '' with \"", "Unicode NFKD",
      "drop combining characters (unicodedata.combining != 0)", "lowercase",
      "SentencePiece encode (the model's own normalizer runs inside); a "
      "piece ending in <digit>',' is re-encoded without the ',' and "
      "followed by ','",
      "pack [CLS] a [SEP] (b [SEP]); truncate the longer segment first to "
      "max_seq_length; pad with the pad id; input_mask 1 for real tokens; "
      "segment_ids 0 for a, 1 for b"]

  runner = Interpreter(model_path=output).get_signature_runner(
      "serving_default")
  features = exported["features"]
  probs = np.concatenate([
      runner(**{k: v[i:i + 1] for k, v in features.items()})["probabilities"]
      for i in range(len(features["input_ids"]))])
  assert np.all(np.isfinite(probs))
  diff = np.abs(probs - exported["keras_probs"]).max()
  assert diff <= BOUNDS[quantize], (quantize, diff)
  if quantize == "none":
    _check_the_input_contract(output, features, probs)
  float_model = output.replace(quantize, "none")
  if quantize in ("dynamic", "int8") and os.path.exists(float_model):
    # int8 weights: about a quarter of the float32 file.
    assert os.path.getsize(output) < 0.4 * os.path.getsize(float_model)


def _check_the_input_contract(output, features, probs):
  """serving.tflite_runner: the same outputs, and one line for each input
  the interpreter would misread or fail on without a name."""
  from albert_tf.serving.tflite_runner import TFLiteInputError, TFLiteRunner  # pylint: disable=g-import-not-at-top
  runner = TFLiteRunner(output)
  one = {k: v[:1] for k, v in features.items()}
  np.testing.assert_array_equal(runner(**one)["probabilities"], probs[:1])
  vocab_size = runner.vocab_size
  assert vocab_size == runner.info["vocab_size"] > 0
  cases = [
      ({"input_ids": np.where(np.arange(MAX_SEQ) == 3, -1, one["input_ids"])},
       "input_ids: a negative token id (-1 at position [0, 3])"),
      ({"input_ids": np.where(np.arange(MAX_SEQ) == 5, vocab_size,
                              one["input_ids"])},
       f"input_ids: a token id >= vocab_size={vocab_size} ({vocab_size} at "
       "position [0, 5])"),
      ({"input_mask": one["input_mask"][:, :-1]},
       f"input_mask: shape [1, {MAX_SEQ - 1}], but {output} takes [1, "
       f"{MAX_SEQ}] (one sequence, padded or cut to its max_seq_length="
       f"{MAX_SEQ})"),
      ({"input_ids": features["input_ids"][:2]},
       f"input_ids: shape [2, {MAX_SEQ}], but {output} takes [1, {MAX_SEQ}]"),
      ({"token_type_ids": one["segment_ids"]},
       f"token_type_ids: not an input of {output} (it takes input_ids, "
       "input_mask, segment_ids)")]
  for change, said in cases:
    with pytest.raises(TFLiteInputError) as error:
      runner(**{**one, **change})
    assert str(error.value).startswith(said), str(error.value)
