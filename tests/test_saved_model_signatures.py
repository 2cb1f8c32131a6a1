"""export_saved_model --signatures: serving_default alone runs in stock TF.

One small sentiment classifier, fine-tuned by run_classifier on
test_run_classifier's rows (its task_record.json names the dev file, which
the export's check reads back), is exported twice: with
--signatures=serving_default and with the default (serving_default and
serve_text). The first holds no TF Text op anywhere in its graph, and a
fresh interpreter that never imports tensorflow_text loads it and runs
serving_default, as `saved_model_cli run` does, with the Keras model's
outputs; the second does hold TF Text ops (so the first test could fail),
and that interpreter cannot load it. Bad --signatures values, a family
whose results come from serve_text, and a check that fails are one line
each and leave nothing at the export.

The reference is the restored Keras model (`albert_tf.load(output_dir)
.model`) on the ids of the original packing (`numpy_reference.packed`).
One float32 graph loaded back computes what it computed in memory: within SAME_MODEL_REL of the
largest |value| (measured: 0, the same kernels on the same ids).
"""
# pylint: disable=redefined-outer-name  (module fixtures as arguments)

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf import export_saved_model as export_lib
from albert_tf import run_classifier
from albert_tf.serving import saved_model_check
from tests import cli_runner
from tests import numpy_reference
from tests.numpy_reference import assert_close_to_scale
from tests.test_family_serving import _make
from tests.test_inference import _vocab_and_config
from tests.test_run_classifier import CHARS, base_options, sentiment_rows
from tests.test_run_classifier import write

TEXTS = ["很好的电影", "质量很差", "服务一般不是很好", "手机差"]
SAME_MODEL_REL = 1e-5
# Ops TF Text registers that serve_text's tokenizers use (WordPiece here).
TF_TEXT_OPS = {"NormalizeUTF8", "RegexSplitWithOffsets",
               "FastWordpieceTokenizeWithOffsets", "SentencepieceOp",
               "SentencepieceTokenizeOp"}
STOCK_CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
ids_only, ids_file, both = sys.argv[1:4]
loaded = tf.saved_model.load(ids_only)
with np.load(ids_file) as f:
  out = loaded.signatures["serving_default"](
      **{k: tf.constant(f[k]) for k in f.files})
try:
  tf.saved_model.load(both)
  both_error = None
except Exception as e:  # what a stock TF says of the default export
  both_error = str(e).splitlines()[0]
print("RESULT " + json.dumps({
    "outputs": {k: v.numpy().tolist() for k, v in out.items()},
    "signatures": sorted(loaded.signatures), "both_error": both_error,
    "tensorflow_text_imported": "tensorflow_text" in sys.modules}))
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A fine-tuned sentiment output_dir, its two exports, and the Keras
  model and tokenizer it serves."""
  root = tmp_path_factory.mktemp("signatures")
  _vocab_and_config(root, CHARS + "abcdefghij", 16)
  write(root / "data" / "train.tsv", sentiment_rows(64, 0))
  write(root / "data" / "dev.tsv", sentiment_rows(24, 1))
  out = root / "out"
  run_classifier.run(task_name="sentiment", data_dir=str(root / "data"),
                     output_dir=str(out), train_step=8, do_train=True,
                     do_eval=True, **base_options(root))
  ids_only = export_lib.export(checkpoint=str(out),
                               export_dir=str(root / "ids_only"),
                               signatures="serving_default")
  both = export_lib.export(checkpoint=str(out), export_dir=str(root / "both"))
  predictor = albert_tf.load(str(out))
  return {"root": root, "out": str(out), "ids_only": ids_only, "both": both,
          "model": predictor.model, "tokenizer": predictor.tokenizer,
          "predictor": predictor}


def _features(trained, texts=TEXTS):
  return numpy_reference.packed(trained["tokenizer"], texts, length=16)


def _keras(trained, features):
  logits = np.asarray(trained["model"](
      {k: tf.constant(v) for k, v in features.items()},
      training=False)["logits"], np.float32)
  return {"logits": logits, "probabilities": tf.nn.softmax(logits).numpy()}


def _signature_defs(path):
  """The SignatureDefs `saved_model_cli show --all` lists (not TF's own
  `__saved_model_init_op`)."""
  from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-import-not-at-top
  return {k: v for k, v in saved_model_utils.get_meta_graph_def(
      path, "serve").signature_def.items() if not k.startswith("__")}


def _export_json(path):
  with open(os.path.join(path, "assets.extra", "albert_export.json"),
            encoding="utf-8") as f:
    return json.load(f)


def test_serving_default_alone_holds_core_tf_ops_only(trained):
  path = trained["ids_only"]
  assert set(_signature_defs(path)) == {"serving_default"}
  ops = saved_model_check.graph_op_types(path)
  assert not TF_TEXT_OPS & set(ops)
  assert saved_model_check.ops_outside_core_tf(path) == []
  assert not any(n.startswith(".") for n in os.listdir(
      os.path.dirname(path)))  # no scratch folder left
  meta = _export_json(path)
  assert meta["signatures"] == ["serving_default"]
  assert meta["text_pair"] is False  # the model's, as the default export's
  figures = meta["verification"]
  # Checked by a process that never imported tensorflow_text, on the dev
  # file run_classifier recorded.
  assert figures["runtime_kind"] == "stock"
  assert "never imported tensorflow_text" in figures["runtime"]
  assert figures["signatures"] == ["serving_default"]
  assert figures["examples"] == 24
  assert "dev.tsv" in figures["source"]
  assert figures["max_relative_difference"] <= SAME_MODEL_REL
  assert figures["agreement"] == 1.0 and figures["passed"]
  card = open(os.path.join(path, "README.md"), encoding="utf-8").read()
  assert figures["verdict"] in card
  assert '"signature_name": "serve_text"' not in card  # it has none
  assert "albert_tf.load(" in card and '.predict(["..."])' in card


def test_load_predicts_through_serving_default_alone(trained):
  # albert_tf.load encodes in Python and runs serving_default.
  got = albert_tf.load(trained["ids_only"]).predict(TEXTS)
  assert got == trained["predictor"].predict(TEXTS)


def test_default_export_holds_tf_text_ops(trained):
  """What makes the first test meaningful: serve_text's graph needs TF
  Text's ops, and the check of the export says which."""
  path = trained["both"]
  assert set(_signature_defs(path)) == {"serving_default", "serve_text"}
  outside = saved_model_check.ops_outside_core_tf(path)
  assert {"NormalizeUTF8", "FastWordpieceTokenizeWithOffsets"} <= set(outside)
  assert set(outside) <= TF_TEXT_OPS
  figures = _export_json(path)["verification"]
  assert figures["runtime_kind"] == "in_process"
  assert figures["signatures"] == ["serving_default", "serve_text"]
  assert figures["ops_outside_core_tf"] == outside
  assert figures["max_relative_difference"] <= SAME_MODEL_REL
  assert figures["passed"] and figures["examples"] == 24


@pytest.mark.slow
def test_stock_tensorflow_and_saved_model_cli_run_serving_default(trained,
                                                                  tmp_path):
  features = _features(trained)
  expected = _keras(trained, features)
  np.savez(tmp_path / "ids.npz", **features)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  done = subprocess.run(
      [sys.executable, "-c", STOCK_CHILD, trained["ids_only"],
       str(tmp_path / "ids.npz"), trained["both"]],
      capture_output=True, text=True, env=env, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  result = json.loads(next(l for l in done.stdout.splitlines()
                           if l.startswith("RESULT "))[len("RESULT "):])
  assert result["tensorflow_text_imported"] is False
  assert result["signatures"] == ["serving_default"]
  for name in ("logits", "probabilities"):
    assert_close_to_scale(np.array(result["outputs"][name]), expected[name],
                          rel=SAME_MODEL_REL)
  # The same interpreter cannot load the default export at all.
  assert "Op type not registered" in result["both_error"]

  # saved_model_cli (the venv's), as a user would run it.
  exprs = ";".join(f"{k}={v.tolist()}" for k, v in features.items())
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  done = subprocess.run(
      [cli, "run", "--dir", trained["ids_only"], "--tag_set", "serve",
       "--signature_def", "serving_default", "--input_exprs", exprs],
      capture_output=True, text=True, env=env, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  printed = dict(re.findall(
      r"Result for output key (\w+):\n(\[\[.*?\]\])", done.stdout, re.S))
  assert set(printed) == {"logits", "probabilities"}
  for name, text in printed.items():
    values = np.array([float(x) for x in re.findall(
        r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", text)]).reshape(
            expected[name].shape)
    # numpy prints 8 significant digits.
    assert_close_to_scale(values, expected[name], rel=SAME_MODEL_REL)
  # And the default export is what saved_model_cli cannot run.
  done = subprocess.run(
      [cli, "run", "--dir", trained["both"], "--tag_set", "serve",
       "--signature_def", "serving_default", "--input_exprs", exprs],
      capture_output=True, text=True, env=env, timeout=600, check=False)
  assert "Op type not registered 'NormalizeUTF8'" in done.stderr


# ------------------------------------------------------------ refusals
def _one_line(error):
  text = str(error.value)
  assert "\n" not in text and "--signatures" in text, text
  return text


def test_bad_signatures_are_one_line_and_write_nothing(tmp_path):
  _make(tmp_path / "cls", "classification")
  _make(tmp_path / "tag", "tagging")
  valid = "the classifier's signatures are serving_default,serve_text"
  for value, said in ((",", "--signatures is empty"),
                      ([], "--signatures is empty"),
                      ("serving_default,serve_txt",
                       "--signatures=serving_default,serve_txt: no "
                       "signature serve_txt"),
                      ("serve_text", "--signatures=serve_text: "
                       "serving_default is required")):
    export_dir = tmp_path / "cls_out"
    with pytest.raises(export_lib.ExportError) as error:
      export_lib.export(checkpoint=str(tmp_path / "cls"),
                        export_dir=str(export_dir), signatures=value)
    text = _one_line(error)
    assert text.startswith(said) and valid in text, text
    assert not export_dir.exists()
  # A tagger's entities come from serve_text: it stays.
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.export(checkpoint=str(tmp_path / "tag"),
                      export_dir=str(tmp_path / "tag_out"),
                      signatures=["serving_default"])
  text = _one_line(error)
  assert "the tagger's results come from serve_text" in text
  assert "the tagger's signatures are serving_default,serve_text" in text
  assert not (tmp_path / "tag_out").exists()


def test_command_line_says_one_line(tmp_path):
  _make(tmp_path / "cls", "classification")
  done = cli_runner.run_module(
      ["albert_tf.export_saved_model", f"--checkpoint={tmp_path / 'cls'}",
       f"--export_dir={tmp_path / 'out'}", "--signatures=serve_text"])
  assert done.returncode != 0
  lines = [l for l in done.stderr.splitlines() if l.startswith("error:")]
  assert lines == [
      "error: --signatures=serve_text: serving_default is required (TF "
      "Serving's default signature); the classifier's signatures are "
      "serving_default,serve_text"], done.stderr[-2000:]
  assert not (tmp_path / "out").exists()


def test_a_failed_check_writes_nothing(tmp_path, monkeypatch):
  _make(tmp_path / "cls", "classification")
  # A tolerance no output meets: the check refuses what it loaded back.
  monkeypatch.setattr(saved_model_check, "TOLERANCE", -1.0)
  with pytest.raises(export_lib.ExportError) as error:
    export_lib.export(checkpoint=str(tmp_path / "cls"),
                      export_dir=str(tmp_path / "out"))
  text = str(error.value)
  assert "\n" not in text and "nothing was written" in text, text
  assert "vocabulary pieces, no held-out file" in text  # no dev file recorded
  assert not (tmp_path / "out").exists()
