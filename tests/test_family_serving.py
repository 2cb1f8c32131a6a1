"""Every family serves raw inputs through its Task: load().predict, the
SavedModel's and TFLite (float and dynamic-range), against the Keras model.

One tiny random-weight checkpoint per family (classification of pairs,
regression, tagging, span QA, multiple choice), with the task_record.json a
fine-tuning run writes beside it. The reference is independent of the
serving code under test: the Python readers (`numpy_reference.packed`,
`tagging_reference`'s encoding and entities, `squad.make_windows` +
`span_decode.decode_v1` / `decode_v2`, `numpy_reference.race_packing`) and
the Keras model's outputs on what they encode.

Tolerances (scaled by the largest magnitude of the reference, at least 1):
load().predict and the SavedModel 1e-5 (the same float32 graph, another
batch layout); TFLite float 1e-4 (XNNPACK reorders sums); TFLite
dynamic-range (int8 weights, activations quantized per call) 0.1 against
the float .tflite (measured: at most 0.052, tagging's logits).
"""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

import albert_tf
from albert_tf import export_saved_model as export_lib
from albert_tf import export_tflite
from albert_tf import inference
from albert_tf.tasks import registry
from albert_tf.core.config import AlbertConfig
from albert_tf.data import race, span_decode, squad
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.modeling import span_qa as span_model
from albert_tf.core.record import ModelInfo, tokenizer_fields
from albert_tf.serving.tflite_runner import TFLiteRunner
from albert_tf.training import checkpoints
from tests import numpy_reference, tagging_reference
from tests.numpy_reference import assert_close_to_scale

CHARS = "张明李华在北京上海说去了很好差的是他我们今天山水风火云雨林石花月"
WORDS = ["the", "fox", "runs", "over", "hill", "river", "what", "who",
         "where", "does", "a", "an", "on", "in", "big", "red", "dog", "cat"]
SERVED_REL = 1e-5
FLOAT_REL = 1e-4
DYNAMIC_REL = 0.1

RECORDS = {
    "classification": ModelInfo(
        task="classification", num_labels=3, label_list=["neg", "mid", "pos"],
        max_seq_length=16, text_pair=True),
    "regression": ModelInfo(task="regression", num_labels=1,
                            max_seq_length=16),
    "tagging": ModelInfo(
        task="tagging", num_labels=5,
        label_list=["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
        max_seq_length=16, task_config={"tag_scheme": "BIO", "doc_stride": 8,
                                        "token_level": "char"}),
    "span_qa": ModelInfo(
        task="span_qa", max_seq_length=24, text_pair=True, task_config={
            "version_2_with_negative": False, "doc_stride": 6,
            "max_query_length": 6, "max_answer_length": 10, "n_best_size": 20,
            "start_n_top": 3, "end_n_top": 3}),
    "multiple_choice": ModelInfo(
        task="multiple_choice", num_labels=4, label_list=list("ABCD"),
        max_seq_length=24, text_pair=True,
        task_config={"max_qa_length": 8, "num_choices": 4}),
}

CONTEXTS = ["the big fox runs over the red hill in the river",
            "a dog and a cat  on the hill", "张明在北京说今天很好"]
QUESTIONS = ["who runs over the hill", "where does the cat", "谁在北京"]
ARTICLES = ["the fox runs over the hill . the dog runs in the river",
            "张明在北京 李华去了上海", ""]
MC_QUESTIONS = ["who runs in the _", "李华去了哪", "what"]
OPTIONS = [["river", "hill", "fox", "dog"], ["北京", "上海", "山", "水"],
           ["a", "an", "the", "red"]]
TEXTS = ["很好的今天", "差", "张明在北京说李华去了上海", "", "the fox 很好"]
TEXTS_B = ["他说很好", "是的", "", "今天", "red dog"]


def _inputs(family):
  """predict()'s positional arguments of each family."""
  return {"classification": (TEXTS, TEXTS_B), "regression": (TEXTS,),
          "tagging": (TEXTS,), "span_qa": (QUESTIONS, CONTEXTS),
          "multiple_choice": (ARTICLES, MC_QUESTIONS, OPTIONS)}[family]


def _make(root, family, record=None):
  """A checkpoint folder of `family` with random weights and its record
  (default: RECORDS'); returns (the Keras model, its tokenizer, its
  record)."""
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(CHARS))
           + WORDS + list(".,?_"))
  root.mkdir(parents=True, exist_ok=True)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  # intermediate_size 64 x hidden 32: weights of 2048 values, which
  # dynamic-range quantization does quantize (it skips under 1024).
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, initializer_range=0.2)
  tokenizer = load_tokenizer(vocab_file=str(root / "vocab.txt"))
  record = dataclasses.replace(record or RECORDS[family],
                               **tokenizer_fields(tokenizer))
  model = registry.family(family).task.export_model(config, record)
  checkpoints.save_weights(model, str(root / "ckpt-1"), config)
  record.write_beside(str(root))
  return model, tokenizer, record


def _keras(model, features, names):
  out = model({k: tf.constant(v) for k, v in features.items()},
              training=False)
  return {n: np.asarray(out[n], np.float32) for n in names}


def _reference(family, model, tokenizer, record):
  """(the encoded inputs, the Keras outputs on them, the expected
  predict() results), from the Python readers."""
  length = record.max_seq_length
  if family in ("classification", "regression"):
    texts_b = TEXTS_B if family == "classification" else [None] * len(TEXTS)
    features = numpy_reference.packed(tokenizer, TEXTS, texts_b, length)
    logits = _keras(model, features, ["logits"])["logits"]
    if family == "regression":
      return features, {"logits": logits}, [{"score": float(x)}
                                            for x in logits[:, 0]]
    probs = tf.nn.softmax(logits).numpy()
    return features, {"logits": logits, "probabilities": probs}, [
        {"label": record.label_list[int(p.argmax())],
         "probabilities": dict(zip(record.label_list, map(float, p)))}
        for p in probs]
  if family == "tagging":
    encoded = [tagging_reference.reference_encode(t, tokenizer, "char",
                                                  length) for t in TEXTS]
    ids = np.asarray([e[1] for e in encoded], np.int32)
    features = {"input_ids": ids,
                "input_mask": (ids != tokenizer.pad_id).astype(np.int32),
                "segment_ids": np.zeros_like(ids)}
    logits = _keras(model, features, ["logits"])["logits"]
    expected = []
    for text, (tokens, _, positions), row in zip(TEXTS, encoded, logits):
      tags = row.argmax(-1)
      entities = tagging_reference.reference_entities(
          text, tokens, [record.label_list[tags[p]] for p in positions])[0]
      expected.append([{"type": t, "start": s, "end": e, "text": x}
                       for t, s, e, x in entities])
    return features, {"logits": logits}, expected
  if family == "span_qa":
    own = record.task_config
    examples = [squad.Example(str(i), q, c, [], False, "")
                for i, (q, c) in enumerate(zip(QUESTIONS, CONTEXTS))]
    windows = squad.make_windows(examples, tokenizer, length,
                                 own["doc_stride"], own["max_query_length"])
    features = {k: windows.features[k]
                for k in ("input_ids", "input_mask", "segment_ids")}
    v2 = own["version_2_with_negative"]
    names = span_model.head_outputs(v2)
    out = _keras(model, features, names)
    got = (span_decode.decode_v2 if v2 else span_decode.decode_v1)(
        *(out[n] for n in names), windows.example_index,
        windows.piece_spans, windows.is_max_context, CONTEXTS,
        [e.qas_id for e in examples], own["n_best_size"],
        own["max_answer_length"])
    a, b = ("start_log_prob", "end_log_prob") if v2 else ("start_logit",
                                                          "end_logit")
    return features, out, [
        {"answer": best["text"], "start": best["start"], "end": best["end"],
         "score": best[a] + best[b],
         **({"no_answer_score": got[2][e.qas_id]} if v2 else {})}
        for e, best in ((e, got[1][e.qas_id][0]) for e in examples)]
  questions = [race.Question(str(i), "", a, q, list(o), None)
               for i, (a, q, o) in enumerate(zip(ARTICLES, MC_QUESTIONS,
                                                 OPTIONS))]
  encoded, _, _ = numpy_reference.race_packing(
      tokenizer, questions, length, record.task_config["max_qa_length"])
  features = {k: encoded[k] for k in ("input_ids", "input_mask",
                                      "segment_ids")}
  logits = _keras(model, features, ["logits"])["logits"]
  probs = tf.nn.softmax(logits).numpy()
  return features, {"logits": logits, "probabilities": probs}, [
      {"label": "ABCD"[int(p.argmax())], "choice": int(p.argmax()),
       "probabilities": [float(x) for x in p]} for p in probs]


def _assert_results(got, expected, rel):
  """predict() results equal, their floats to rel of their scale."""
  def floats(value):
    if isinstance(value, dict):
      return [x for k in sorted(value) for x in floats(value[k])]
    if isinstance(value, list):
      return [x for v in value for x in floats(v)]
    return [value] if isinstance(value, float) else []

  def rest(value):
    if isinstance(value, dict):
      return {k: rest(v) for k, v in value.items()}
    if isinstance(value, list):
      return [rest(v) for v in value]
    return None if isinstance(value, float) else value

  assert rest(got) == rest(expected)
  assert_close_to_scale(floats(got), floats(expected), rel=rel)


FAMILIES = list(RECORDS)


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tmp_path_factory):
  family = request.param
  root = tmp_path_factory.mktemp(family)
  model, tokenizer, record = _make(root / "out", family)
  features, outputs, expected = _reference(family, model, tokenizer, record)
  return {"family": family, "root": root, "out": str(root / "out"),
          "model": model, "features": features, "outputs": outputs,
          "expected": expected}


def test_load_predicts_every_family_as_its_keras_model(family_dir):
  family = family_dir["family"]
  predictor = albert_tf.load(family_dir["out"])
  assert predictor.kind == family
  got = predictor.predict(*_inputs(family))
  _assert_results(got, family_dir["expected"], SERVED_REL)
  # encode is the Python readers' packing.
  encoded = predictor.encode(*_inputs(family))
  for k, v in family_dir["features"].items():
    assert encoded[k].tolist() == v.tolist(), k
  if family == "span_qa":
    for context, r in zip(CONTEXTS, got):
      assert context[r["start"]:r["end"]] == r["answer"] != ""
    # (question, context) pairs, as one list.
    assert predictor.predict(list(zip(QUESTIONS, CONTEXTS))) == got
  if family == "multiple_choice":
    assert [round(sum(r["probabilities"]), 5) for r in got] == [1.0] * 3
    with pytest.raises(inference.LoadError,
                       match="multiple_choice model takes 3 inputs"):
      predictor.predict(ARTICLES, MC_QUESTIONS, OPTIONS, OPTIONS)


def _tflite_outputs(path, features):
  runner = TFLiteRunner(path)
  n = len(features["input_ids"])
  rows = [runner(**{k: v[i:i + 1] for k, v in features.items()})
          for i in range(n)]
  return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}


# Every family's export and TFLite in the slow tier (classification's, 26 s
# of make test's CPU, moved there when make test reached 8 min 5 s on an
# AMD EPYC with avx512_bf16).
@pytest.mark.slow
@pytest.mark.parametrize("family_dir", FAMILIES, indirect=True)
def test_export_and_tflite_of_every_family_match_keras(family_dir):
  family, root = family_dir["family"], family_dir["root"]
  version = export_lib.export(checkpoint=family_dir["out"],
                              export_dir=str(root / "saved"))
  _assert_results(albert_tf.load(version).predict(*_inputs(family)),
                  family_dir["expected"], SERVED_REL)
  features, reference = family_dir["features"], family_dir["outputs"]
  results = {}
  for quantize in ("none", "dynamic"):
    target = str(root / f"{family}_{quantize}.tflite")
    # Random weights: this test bounds the differences itself; the floors
    # are test_export_fidelity's, on trained models.
    info = export_tflite.convert(version, target, quantize,
                                 allow_degraded=True, num_verify_examples=8)
    shape = list(features["input_ids"].shape[1:])
    assert [(i["name"], i["shape"]) for i in info["inputs"]] == [
        (n, [1] + shape) for n in ("input_ids", "input_mask", "segment_ids")]
    results[quantize] = _tflite_outputs(target, features)
  # int8 weights: a smaller file, outputs near the float ones.
  assert os.path.getsize(str(root / f"{family}_dynamic.tflite")) < (
      os.path.getsize(str(root / f"{family}_none.tflite")))
  for name, expected in reference.items():
    assert_close_to_scale(results["none"][name], expected, rel=FLOAT_REL)
    assert_close_to_scale(results["dynamic"][name], results["none"][name],
                          rel=DYNAMIC_REL)
