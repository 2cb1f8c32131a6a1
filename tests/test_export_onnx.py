"""export_onnx: serving_default of every family in ONNX Runtime, the shared
block's weights stored and quantized once, load().predict on the .onnx.

References are independent of the code under test: NumPy for the initializer
sharing, the Keras model (test_family_serving's fixtures and readers) for
parity, and the labels of a held-out split for the int8 model.

Measured (AMD EPYC with avx512_bf16, 2 cores shared): float32 ONNX Runtime
vs serving_default at most 9.5e-7 (tagger logits, scale 1); the 6-layer
H 256 classifier's .onnx 3.67 MB for 3.45 MB of parameters (1.06x; a copy of
the block per layer would be ~5x), int8 initializers 0.86 MB; the trained
4-layer classifier: float32 and int8 100% accuracy on the 300 held-out
texts, the same label on 300/300, probabilities within 1e-4.

The size check compares with the model's parameters, not with the
SavedModel's variables/ folder, which stores every variable twice.
"""

import dataclasses
import logging
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from albert_tf import export_onnx
from tests.numpy_reference import assert_close_to_scale

FLOAT_REL = 1e-4


# ---------------------------------------------------------------- quick tier
def _duplicated_graph(w, v):
  """y = ((x @ W) @ W') @ V with W and W' equal arrays under two names."""
  x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 16])
  y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
  nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]),
           helper.make_node("MatMul", ["h1", "w2"], ["h2"]),
           helper.make_node("MatMul", ["h2", "v"], ["y"])]
  inits = [numpy_helper.from_array(w, "w1"), numpy_helper.from_array(w, "w2"),
           numpy_helper.from_array(v, "v")]
  graph = helper.make_graph(nodes, "g", [x], [y], inits)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_share_initializers_keeps_one_copy_and_the_outputs(tmp_path):
  rng = np.random.default_rng(0)
  w = rng.normal(size=[16, 16]).astype(np.float32)
  v = rng.normal(size=[16, 16]).astype(np.float32)
  model = _duplicated_graph(w, v)
  counts = export_onnx.share_initializers(model)
  assert counts["initializers_before"] == 3
  assert counts["initializers_after"] == 2
  assert sorted(t.name for t in model.graph.initializer) == ["v", "w1"]
  assert [list(n.input) for n in model.graph.node] == [
      ["x", "w1"], ["h1", "w1"], ["h2", "v"]]
  path = str(tmp_path / "m.onnx")
  onnx.save_model(model, path)
  x = rng.normal(size=[3, 16]).astype(np.float32)
  got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
      None, {"x": x})[0]
  np.testing.assert_allclose(got, x @ w @ w @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kwargs, message", [
    ({"quantize": "int4"}, r"--quantize must be one of \('none', 'dynamic'\)"),
    ({"output": "m.tflite"}, r"--output=m.tflite: end it in .onnx"),
])
def test_bad_flags_fail_in_one_line(tmp_path, kwargs, message):
  args = {"saved_model": str(tmp_path), "output": str(tmp_path / "m.onnx"),
          "quantize": "none", **kwargs}
  with pytest.raises(export_onnx.OnnxExportError, match=message) as e:
    export_onnx.convert(**args)
  assert "\n" not in str(e.value)
  assert not os.path.exists(tmp_path / "m.onnx")


def test_a_folder_without_a_saved_model_fails_in_one_line(tmp_path):
  with pytest.raises(export_onnx.OnnxExportError,
                     match=f"--saved_model={tmp_path}: no saved_model.pb"):
    export_onnx.convert(str(tmp_path), str(tmp_path / "m.onnx"))


def test_load_without_onnxruntime_names_the_extra(tmp_path, monkeypatch):
  import sys  # pylint: disable=import-outside-toplevel
  import albert_tf  # pylint: disable=import-outside-toplevel
  from albert_tf import inference  # pylint: disable=import-outside-toplevel
  (tmp_path / "m.onnx").write_bytes(b"")
  (tmp_path / "m.json").write_text("{}", encoding="utf-8")
  monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
  with pytest.raises(inference.LoadError) as e:
    albert_tf.load(str(tmp_path / "m.onnx"))
  assert str(e.value) == (
      f"{tmp_path / 'm.onnx'}: serving an .onnx needs onnxruntime: pip "
      "install 'albert_tf[onnx]'")


def test_load_of_an_onnx_without_its_json_says_so(tmp_path):
  import albert_tf  # pylint: disable=import-outside-toplevel
  from albert_tf import inference  # pylint: disable=import-outside-toplevel
  (tmp_path / "m.onnx").write_bytes(b"")
  with pytest.raises(inference.LoadError,
                     match=r"m\.onnx\.json does not exist \(load reads "
                     r"\.onnx"):
    albert_tf.load(str(tmp_path / "m.onnx"))


# ----------------------------------------------------------------- slow tier
def _families():
  from tests import test_family_serving  # pylint: disable=import-outside-toplevel
  return test_family_serving


@pytest.fixture(scope="module", params=["classification", "regression",
                                        "tagging", "span_qa",
                                        "multiple_choice"])
def family_onnx(request, tmp_path_factory):
  fs = _families()
  from albert_tf import export_saved_model as export_lib  # pylint: disable=import-outside-toplevel
  family = request.param
  root = tmp_path_factory.mktemp(family)
  model, tokenizer, record = fs._make(root / "out", family)
  features, outputs, expected = fs._reference(family, model, tokenizer,
                                              record)
  version = export_lib.export(checkpoint=str(root / "out"),
                              export_dir=str(root / "saved"))
  path = str(root / f"{family}.onnx")
  info = export_onnx.convert(version, path)
  return {"family": family, "path": path, "info": info, "model": model,
          "features": features, "outputs": outputs, "expected": expected}


def _run(path, features):
  session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
  names = [o.name for o in session.get_outputs()]
  return dict(zip(names, session.run(None, features)))


@pytest.mark.slow
def test_every_family_matches_keras_at_any_batch_and_length(family_onnx):
  fs = _families()
  got = _run(family_onnx["path"], family_onnx["features"])
  for name, expected in family_onnx["outputs"].items():
    assert_close_to_scale(got[name], expected, rel=FLOAT_REL)
  # Another batch and a shorter length: the Keras model on the same ids.
  short = {k: v[:2, ..., :10] for k, v in family_onnx["features"].items()}
  got = _run(family_onnx["path"], short)
  reference = fs._keras(family_onnx["model"], short, [
      n for n in family_onnx["outputs"] if n != "probabilities"])
  if "probabilities" in family_onnx["outputs"]:
    logits = reference["logits"].astype(np.float64)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    reference["probabilities"] = e / e.sum(-1, keepdims=True)
  for name, expected in reference.items():
    assert got[name].shape == expected.shape
    assert_close_to_scale(got[name], expected, rel=FLOAT_REL)
  info = family_onnx["info"]
  for name in ("", ".json", ".README.md"):  # m.onnx, m.onnx.json, ...
    assert os.path.isfile(family_onnx["path"] + name)
  assert os.path.isfile(os.path.join(os.path.dirname(family_onnx["path"]),
                                     info["tokenizer_file"]))
  # Ids the model would read wrongly are refused, naming the input.
  from albert_tf.serving.onnx_runner import OnnxInputError, OnnxRunner  # pylint: disable=import-outside-toplevel
  runner = OnnxRunner(family_onnx["path"])
  bad = {k: v.copy() for k, v in family_onnx["features"].items()}
  bad["input_ids"].reshape(-1)[3] = runner.vocab_size
  with pytest.raises(OnnxInputError, match=(
      f"input_ids: a token id >= vocab_size={runner.vocab_size}")):
    runner(**bad)
  with open(family_onnx["path"] + ".README.md", encoding="utf-8") as f:
    card = f.read()
  name = os.path.basename(family_onnx["path"])
  assert f"albert_tf.load({name!r}).predict(" in card
  assert f"ONNX (`{name}`, opset 17, quantize=none" in card
  assert "TF Serving" not in card
  assert not [n for n in os.listdir(os.path.dirname(family_onnx["path"]))
              if n.startswith(".tmp-")]


@pytest.mark.slow
def test_load_predicts_every_family_as_its_keras_model(family_onnx):
  import albert_tf  # pylint: disable=import-outside-toplevel
  fs = _families()
  family = family_onnx["family"]
  predictor = albert_tf.load(family_onnx["path"])
  assert predictor.kind == family
  fs._assert_results(predictor.predict(*fs._inputs(family)),
                     family_onnx["expected"], FLOAT_REL)


@pytest.mark.slow
def test_load_predicts_a_squad_v2_onnx_and_tflite_as_its_keras_model(
    tmp_path):
  """A version_2_with_negative model's answers and null odds from its .onnx
  and float .tflite: span_decode.decode_v2 of the Keras model's beams."""
  import albert_tf  # pylint: disable=import-outside-toplevel
  from albert_tf import export_saved_model as export_lib  # pylint: disable=import-outside-toplevel
  from albert_tf import export_tflite  # pylint: disable=import-outside-toplevel
  fs = _families()
  record = fs.RECORDS["span_qa"]
  record = dataclasses.replace(record, task_config={
      **record.task_config, "version_2_with_negative": True})
  model, tokenizer, record = fs._make(tmp_path / "out", "span_qa", record)
  expected = fs._reference("span_qa", model, tokenizer, record)[2]
  assert {"no_answer_score"} < set(expected[0])
  version = export_lib.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  export_onnx.convert(version, str(tmp_path / "m.onnx"))
  export_tflite.convert(version, str(tmp_path / "m.tflite"), "none")
  for path in ("m.onnx", "m.tflite"):
    got = albert_tf.load(str(tmp_path / path)).predict(fs.QUESTIONS,
                                                       fs.CONTEXTS)
    fs._assert_results(got, expected, FLOAT_REL)


H, FFN, E = 128, 512, 16


def _deep_classifier(root, layers, hidden=H, ffn=FFN):
  """A classification model (3 labels) of `layers` layers sharing one
  block of hidden x ffn."""
  # pylint: disable=import-outside-toplevel
  from albert_tf.tasks import registry
  from albert_tf.core.config import AlbertConfig
  from albert_tf.data.tokenization import load_tokenizer
  from albert_tf.core.record import tokenizer_fields
  from albert_tf.training import checkpoints
  fs = _families()
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
           sorted(set(fs.CHARS)) + fs.WORDS + list(".,?_"))
  root.mkdir(parents=True, exist_ok=True)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=E,
                        hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=ffn,
                        max_position_embeddings=64, initializer_range=0.05,
                        hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
  tokenizer = load_tokenizer(vocab_file=str(root / "vocab.txt"))
  record = dataclasses.replace(fs.RECORDS["classification"], text_pair=False,
                               **tokenizer_fields(tokenizer))
  model = registry.family("classification").task.export_model(config, record)
  return model, tokenizer, record, config, checkpoints


def _sentiment_split(rng, n):
  """Texts of 3-12 neutral characters with 1-3 cue characters; label 0
  when the cues are mostly 差, 2 when mostly 好, 1 when only 的."""
  neutral = list("张明李华在北京上海说去了是他我们今天山水风火云雨林石花月")
  texts, labels = [], []
  for _ in range(n):
    label = int(rng.integers(3))
    cue = "差好的"[[0, 2, 1].index(label)] if label != 1 else "的"
    chars = list(rng.choice(neutral, int(rng.integers(3, 13))))
    for _ in range(int(rng.integers(1, 4))):
      chars.insert(int(rng.integers(len(chars) + 1)), cue)
    texts.append("".join(chars))
    labels.append(label)
  return texts, np.array(labels)


def _variable_files_bytes(saved_model):
  folder = os.path.join(saved_model, "variables")
  return sum(os.path.getsize(os.path.join(folder, f))
             for f in os.listdir(folder) if f.startswith("variables.data"))


@pytest.mark.slow
def test_sharing_keeps_the_file_near_the_variables_and_int8_quantizes_once(
    tmp_path):
  from albert_tf import export_saved_model as export_lib  # pylint: disable=import-outside-toplevel
  layers, hidden, ffn = 6, 256, 1024
  model, _, record, config, checkpoints = _deep_classifier(
      tmp_path / "out", layers, hidden, ffn)
  checkpoints.save_weights(model, str(tmp_path / "out" / "ckpt-1"), config)
  record.write_beside(str(tmp_path / "out"))
  version = export_lib.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  # The model's float32 weights, each shared one once (Keras counts a layer
  # called L times once). The SavedModel's variables/ holds them twice
  # (under `variables/` and `_all_variables/`): 2.0x, checked here so the
  # reference below is known.
  parameters = 4 * model.count_params()
  assert 1.95 * parameters < _variable_files_bytes(version) < 2.05 * parameters
  path = str(tmp_path / "m.onnx")
  export_onnx.convert(version, path)
  # One block of 4 * 256 * 256 + 2 * 256 * 1024 floats is 3.1 MB; a copy
  # per layer would add 15.7 MB. The rest is the graph (~0.2 MB of names).
  size = os.path.getsize(path)
  print(f"parameters {parameters} B, .onnx {size} B")
  assert 0.9 * parameters < size < 1.1 * parameters
  stored = sum(numpy_helper.to_array(t).nbytes
               for t in onnx.load(path).graph.initializer)
  assert stored < 1.05 * parameters
  quantized_path = str(tmp_path / "q.onnx")
  # Random weights (sizes are checked here, not the floors).
  export_onnx.convert(version, quantized_path, "dynamic", allow_degraded=True)
  quantized = onnx.load(quantized_path)
  int8_stored = sum(numpy_helper.to_array(t).nbytes
                    for t in quantized.graph.initializer)
  print(f"int8 .onnx {os.path.getsize(quantized_path)} B, initializers "
        f"{int8_stored} B (float32: {stored} B)")
  assert int8_stored < 0.3 * stored
  weights = {t.name: tuple(t.dims) for t in quantized.graph.initializer
             if t.name.endswith("_quantized")}
  # The word and token-type tables (Gather), the embedding projection,
  # Q|K|V fused, the attention output, the FFN's two, the pooler, the
  # classifier: each once, though the block's four run in each layer.
  H, FFN = hidden, ffn  # pylint: disable=invalid-name
  assert sorted(weights.values()) == sorted([
      (config.vocab_size, E), (2, E), (E, H), (H, 3 * H), (H, H),
      (H, FFN), (FFN, H), (H, H), (H, 3)])
  uses = {}
  for node in quantized.graph.node:
    for name in node.input:
      if name in weights:
        uses.setdefault(weights[name], []).append(node.op_type)
  assert uses[(H, 3 * H)] == uses[(H, FFN)] == uses[(FFN, H)] == (
      ["MatMulInteger"] * layers)
  # The attention output in every layer, and the pooler.
  assert uses[(H, H)] == ["MatMulInteger"] * (layers + 1)


@pytest.mark.slow
def test_int8_keeps_the_labels_of_a_trained_classifier(tmp_path):
  """A 4-layer classifier fine-tuned to 100% train accuracy on a cue-word
  task: dynamic-range int8 gives the float32 .onnx's label on >= 95% of a
  held-out split of 300 and its probabilities within 0.1."""
  # pylint: disable=import-outside-toplevel
  import tensorflow as tf
  import albert_tf
  from albert_tf import export_saved_model as export_lib
  tf.keras.utils.set_random_seed(0)
  model, tokenizer, record, config, checkpoints = _deep_classifier(
      tmp_path / "out", 4)
  rng = np.random.default_rng(7)
  train_texts, train_labels = _sentiment_split(rng, 600)
  test_texts, test_labels = _sentiment_split(rng, 300)
  task = _families().registry.family("classification").task
  features = task.encode_inputs(record, tokenizer, record.max_seq_length,
                                {"text": train_texts})
  optimizer = tf.keras.optimizers.Adam(5e-4)

  @tf.function
  def step(batch, labels):
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)["logits"]
      loss = tf.reduce_mean(
          tf.keras.losses.sparse_categorical_crossentropy(
              labels, logits, from_logits=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  # Until the train split is learnt, whatever the CPU's rounding makes of
  # the first epochs: the test is about int8 keeping a learnt model's labels.
  for epoch in range(30):
    order = np.random.default_rng(epoch).permutation(len(train_texts))
    for start in range(0, len(order), 32):
      idx = order[start:start + 32]
      step({k: tf.constant(v[idx]) for k, v in features.items()},
           tf.constant(train_labels[idx]))
    logits = model({k: tf.constant(v) for k, v in features.items()})["logits"]
    if np.mean(np.argmax(logits, -1) == train_labels) >= 0.99:
      break
  print(f"train split learnt after {epoch + 1} epochs")
  checkpoints.save_weights(model, str(tmp_path / "out" / "ckpt-1"), config)
  record.write_beside(str(tmp_path / "out"))
  version = export_lib.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  results = {}
  for mode in ("none", "dynamic"):
    path = str(tmp_path / f"{mode}.onnx")
    export_onnx.convert(version, path, mode)
    results[mode] = albert_tf.load(path).predict(test_texts)
  names = record.label_list
  float_labels = np.array([names.index(r["label"]) for r in results["none"]])
  int8_labels = np.array([names.index(r["label"])
                          for r in results["dynamic"]])
  float_accuracy = float(np.mean(float_labels == test_labels))
  agreement = float(np.mean(float_labels == int8_labels))
  probs = {m: np.array([[r["probabilities"][n] for n in names]
                        for r in results[m]]) for m in results}
  worst = float(np.max(np.abs(probs["dynamic"] - probs["none"])))
  print(f"float32 accuracy {float_accuracy:.3f}, int8 accuracy "
        f"{np.mean(int8_labels == test_labels):.3f}, same label "
        f"{agreement:.3f}, largest probability change {worst:.4f}")
  assert float_accuracy >= 0.9  # it learnt the task: agreement means something
  assert agreement >= 0.95
  assert worst <= 0.1


@pytest.mark.slow
def test_pretrainer_serving_default_matches_keras(tmp_path, caplog):
  """The pretrainer's ids + masked_lm_positions signature, 3 layers; the
  scratch folder a killed export left beside --output is removed, and the
  warning names export_onnx."""
  # pylint: disable=import-outside-toplevel
  from albert_tf import export_saved_model as export_lib
  from albert_tf.core.config import AlbertConfig
  from albert_tf.modeling.models import AlbertPretrainer
  from albert_tf.training import checkpoints
  fs = _families()
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(fs.CHARS)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", "utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=32, num_hidden_layers=3,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, initializer_range=0.2)
  model = AlbertPretrainer(config)
  rng = np.random.default_rng(3)
  features = {"input_ids": rng.integers(5, len(vocab), [3, 12]).astype(
                  np.int32),
              "input_mask": np.ones([3, 12], np.int32),
              "segment_ids": np.zeros([3, 12], np.int32),
              "masked_lm_positions": np.array([[1, 4], [2, 3], [5, 0]],
                                              np.int32)}
  features["input_mask"][2, 8:] = 0
  expected = {k: np.asarray(v, np.float32) for k, v in model(
      features, training=False).items()}
  checkpoints.save_weights(model, str(tmp_path / "ckpt-1"), config)
  version = export_lib.export(checkpoint=str(tmp_path / "ckpt-1"),
                              export_dir=str(tmp_path / "saved"),
                              model="pretrainer", max_seq_length=32,
                              vocab_file=str(tmp_path / "vocab.txt"))
  path = str(tmp_path / "mlm.onnx")
  stale = tmp_path / ".tmp-mlm.onnx-killed01"
  stale.mkdir()
  (stale / "model.onnx").write_bytes(b"\0" * 100)
  with caplog.at_level(logging.WARNING):
    info = export_onnx.convert(version, path)
  assert [r.getMessage() for r in caplog.records if "left by" in
          r.getMessage()] == [
              f"Removing {stale}, left by an export_onnx that was killed"]
  assert not stale.exists()
  assert [i["name"] for i in info["inputs"]] == [
      "input_ids", "input_mask", "segment_ids", "masked_lm_positions"]
  got = _run(path, features)
  compared = sorted(set(got) & set(expected))
  assert "mlm_logits" in compared
  for name in compared:
    assert_close_to_scale(got[name], expected[name], rel=FLOAT_REL)
  # load() serves it for its ids (the runner), not predict(): one line
  # naming the family and what its Task would need.
  import albert_tf
  from albert_tf import inference
  with pytest.raises(inference.LoadError) as e:
    albert_tf.load(path).predict(["甲乙"])
  assert str(e.value).startswith(
      f"{path}: predict() on an .onnx or .tflite cannot decode this "
      "pretraining model's outputs (its Task neither decodes_serving_default "
      "nor has an ids_decoder for them)"), e.value


@pytest.mark.slow
def test_share_initializers_undoes_the_per_layer_copies_of_tf2onnx(
    tmp_path, monkeypatch):
  """With tf2onnx's own merge of duplicated nodes off, the converted 6-layer
  graph holds a copy of the shared block per layer (measured: 15.2 MB of
  initializers for 3.45 MB of parameters); share_initializers brings it
  back to one copy, and the outputs stay the Keras model's."""
  # pylint: disable=import-outside-toplevel
  import tf2onnx.optimizer
  from albert_tf import export_saved_model as export_lib
  original = tf2onnx.optimizer.optimize_graph
  monkeypatch.setattr(
      tf2onnx.optimizer, "optimize_graph",
      lambda graph, catch_errors, optimizers=None: original(
          graph, catch_errors, optimizers={
              k: v for k, v in tf2onnx.optimizer._get_optimizers().items()  # pylint: disable=protected-access
              if k != "merge_duplication"}))
  layers = 6
  model, tokenizer, record, config, checkpoints = _deep_classifier(
      tmp_path / "out", layers, 256, 1024)
  checkpoints.save_weights(model, str(tmp_path / "out" / "ckpt-1"), config)
  record.write_beside(str(tmp_path / "out"))
  version = export_lib.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  converted = export_onnx.convert_serving_default(
      export_onnx.load_saved_model(version))
  stored = lambda m: sum(numpy_helper.to_array(t).nbytes
                         for t in m.graph.initializer)
  parameters = 4 * model.count_params()
  assert stored(converted) > 3 * parameters  # the copies are there
  export_onnx.share_initializers(converted)
  assert stored(converted) < 1.05 * parameters
  path = str(tmp_path / "shared.onnx")
  onnx.save_model(converted, path)
  task = _families().registry.family("classification").task
  features = task.encode_inputs(record, tokenizer, record.max_seq_length,
                                {"text": _families().TEXTS})
  got = _run(path, features)
  expected = _families()._keras(model, features, ["logits"])["logits"]
  assert_close_to_scale(got["logits"], expected, rel=FLOAT_REL)
