"""Every model and every task family through the shared checks of
`tests/model_harness.py`: config round trip, .keras saving, checkpoint
round trip of every part, mixed bfloat16, variable sequence length, and
each task's loss against NumPy."""

import dataclasses
import os
from typing import Callable, Tuple

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig
from albert_tf.data import classifier_data
from albert_tf.data import tokenization
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.models import (AlbertClassifier, AlbertPretrainer,
                                       AlbertTagger)
from albert_tf.modeling.multiple_choice import AlbertMultipleChoice
from albert_tf.modeling import span_qa
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.tasks.pretraining import EVAL_KEYS, PretrainingTask
from albert_tf.tasks.tagging import TaggingTask
from tests import model_harness as H
from tests import pretraining_fixtures
from tests.numpy_reference import assert_close_to_scale

# tests/conftest.py's tiny_config, with two groups of blocks (two distinct
# parameter sets for the checkpoint check) and dropout that must stay off
# outside training.
CONFIG = AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16,
                      num_hidden_layers=4, num_hidden_groups=2,
                      num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=32, hidden_dropout_prob=0.1)
SEQ = 8


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  build: Callable[[], keras.Model]
  # The checkpoint parts the model declares (its checkpoint_items).
  parts: Tuple[str, ...]
  # Outputs with a sequence axis (compared on the first positions).
  sequence_outputs: Tuple[str, ...]
  # Outputs the model casts to float32 (docstrings: "float32 logits").
  float32_outputs: Tuple[str, ...]
  # Embedding + 2 per distinct block (attention, ffn) + the MLM head's.
  num_layer_norms: int
  with_positions: bool = False
  # Inputs with a choice axis: [batch, choices, seq].
  num_choices: int = 0


MODELS = {
    "encoder": ModelSpec(
        lambda: AlbertEncoder(CONFIG), ("encoder",),
        (F.SEQUENCE_OUTPUT,), (), 5),
    "pretrainer": ModelSpec(
        lambda: AlbertPretrainer(CONFIG),
        ("encoder", "masked_lm_head", "sentence_order_head"),
        (F.SEQUENCE_OUTPUT,), (F.MLM_LOGITS, F.SOP_LOGITS), 6,
        with_positions=True),
    "classifier": ModelSpec(
        lambda: AlbertClassifier(CONFIG, 3), ("encoder", "classifier_head"),
        (), (F.LOGITS,), 5),
    "regression": ModelSpec(
        lambda: AlbertClassifier(CONFIG, 1), ("encoder", "classifier_head"),
        (), (F.LOGITS,), 5),
    "tagger": ModelSpec(
        lambda: AlbertTagger(CONFIG, 5), ("encoder", "tagger_head"),
        (F.LOGITS,), (F.LOGITS,), 5),
    "span_qa": ModelSpec(
        lambda: span_qa.AlbertSpanQA(CONFIG), ("encoder", "span_head"),
        (span_qa.START_LOGITS, span_qa.END_LOGITS),
        (span_qa.START_LOGITS, span_qa.END_LOGITS), 5),
    "multiple_choice": ModelSpec(
        lambda: AlbertMultipleChoice(CONFIG, 3),
        ("encoder", "choice_head"), (), (F.LOGITS,), 5, num_choices=3),
}


def _inputs(spec):
  inputs = H.encoder_batch(CONFIG.vocab_size, batch=3, seq=SEQ)
  if spec.num_choices:  # each question's choices: the rows, shifted
    inputs = {k: np.stack([np.roll(v, c, axis=0)
                           for c in range(spec.num_choices)], 1)
              for k, v in inputs.items()}
  if spec.with_positions:
    inputs[F.MASKED_LM_POSITIONS] = np.array([[1, 4], [2, 3], [0, 6]],
                                             np.int32)
  return inputs


@pytest.fixture(scope="module", params=sorted(MODELS))
def built(request):
  """(spec, model with random weights, inputs), built once per kind."""
  spec = MODELS[request.param]
  model = spec.build()
  H.randomize_weights(model, seed=1)
  return spec, model, _inputs(spec)


def test_config_round_trip(built):
  _, model, inputs = built
  H.run_config_round_trip(model, inputs)


def test_keras_save_and_load(built, tmp_path):
  _, model, inputs = built
  H.run_saving_test(model, inputs, tmp_path)


def test_checkpoint_round_trip_of_every_part(built, tmp_path):
  spec, model, _ = built
  other = spec.build()
  H.randomize_weights(other, seed=2)
  H.run_checkpoint_test(model, other, tmp_path, spec.parts)


def test_mixed_bfloat16(built):
  spec, model, inputs = built
  H.run_mixed_precision_test(spec.build, model, inputs, spec.float32_outputs,
                             spec.num_layer_norms)


def test_variable_sequence_length(built):
  spec, model, inputs = built
  H.run_variable_sequence_test(model, inputs, spec.sequence_outputs, seq=16)


# ------------------------------------------------------------ SQuAD v2 head
# Its start logits are masked with -1e30 off the context and its beams are
# indices, so the value checks compare the finite float outputs to scale and
# the indices exactly; the rest is the shared harness.
V2_FLOAT = (span_qa.START_TOP_LOG_PROBS, span_qa.END_TOP_LOG_PROBS,
            span_qa.CLS_LOGITS)
V2_INDEX = (span_qa.START_TOP_INDEX, span_qa.END_TOP_INDEX)


def _v2():
  return span_qa.AlbertSpanQA(CONFIG, version_2_with_negative=True,
                              start_n_top=2, end_n_top=2)


@pytest.fixture(scope="module")
def v2_built():
  model = _v2()
  H.randomize_weights(model, seed=1)
  return model, H.encoder_batch(CONFIG.vocab_size, batch=3, seq=SEQ)


def test_span_qa_v2_config_saving_and_checkpoint(v2_built, tmp_path):
  model, inputs = v2_built
  H.run_config_round_trip(model, inputs)
  H.run_saving_test(model, inputs, tmp_path)
  other = _v2()
  H.randomize_weights(other, seed=2)
  H.run_checkpoint_test(model, other, tmp_path, ("encoder", "span_head"))


def test_span_qa_v2_masks_the_question_and_padding(v2_built):
  model, inputs = v2_built
  out = model(inputs, training=False)
  mask = span_qa.p_mask(inputs[F.INPUT_MASK], inputs[F.SEGMENT_IDS]).numpy()
  # Context is segment 1 before the last real piece; [CLS] may answer.
  expected = np.ones_like(mask)
  expected[:, 0] = 0
  expected[0, SEQ // 2:SEQ - 1] = 0
  np.testing.assert_array_equal(mask, expected)
  allowed = [set(np.flatnonzero(row == 0)) for row in mask]
  for index in (out[span_qa.START_TOP_INDEX].numpy(),
                out[span_qa.END_TOP_INDEX].numpy()):
    for row, ok in zip(index, allowed):
      # Beams may only fall where the mask allows, unless fewer positions
      # are allowed than beams (then the top_k fills with masked ones).
      assert len(set(row.tolist()) & ok) == min(len(ok), len(set(row)))


def test_span_qa_v2_variable_sequence_length(v2_built):
  model, inputs = v2_built
  short = model(inputs, training=False)
  padded = model(H.pad_batch(inputs, 16, CONFIG.vocab_size), training=False)
  for name in V2_INDEX:
    np.testing.assert_array_equal(padded[name], short[name], err_msg=name)
  for name in V2_FLOAT:
    assert_close_to_scale(np.asarray(padded[name]), np.asarray(short[name]),
                          rel=1e-5)


def test_span_qa_v2_mixed_bfloat16(v2_built):
  model, inputs = v2_built
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("mixed_bfloat16")
  try:
    mixed = _v2()
  finally:
    keras.config.set_dtype_policy(previous)
  H.copy_weights(model, mixed)
  norms = [layer for layer in mixed._flatten_layers()  # pylint: disable=protected-access
           if isinstance(layer, keras.layers.LayerNormalization)]
  assert len(norms) == 6 and all(n.compute_dtype == "float32" for n in norms)
  got, want = mixed(inputs, training=False), model(inputs, training=False)
  for name in V2_FLOAT:
    assert got[name].dtype == tf.float32, name
  # The answer class reads no beam: within bf16 rounding of float32.
  scale = float(np.abs(want[span_qa.CLS_LOGITS]).max())
  np.testing.assert_allclose(got[span_qa.CLS_LOGITS], want[span_qa.CLS_LOGITS],
                             atol=5e-2 * scale + 1e-3, rtol=0)


class _ClassifierWithAuxHead(AlbertClassifier):
  """A model with a head no central list of part names knows about."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.aux_head = keras.layers.Dense(4, name="aux_head")
    self.aux_head.build((None, self.config.hidden_size))

  @property
  def checkpoint_items(self):
    return {**super().checkpoint_items, "aux_head": self.aux_head}


def test_checkpoint_round_trips_a_head_declared_only_by_a_subclass(tmp_path):
  model = _ClassifierWithAuxHead(CONFIG, 2)
  other = _ClassifierWithAuxHead(CONFIG, 2)
  H.randomize_weights(model, seed=1)
  H.randomize_weights(other, seed=2)
  # A central list of part names would write no aux_head: the restore
  # report and aux_head's variables would both say so.
  H.run_checkpoint_test(model, other, tmp_path,
                        ("encoder", "classifier_head", "aux_head"))
  np.testing.assert_array_equal(other.aux_head.kernel.numpy(),
                                model.aux_head.kernel.numpy())


# ------------------------------------------------------------------ tasks
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  """tests/legacy_v1's 30-token WordPiece vocab plus `##s`, so that
  `films` is two pieces (film ##s) and the tagger ignores the second."""
  legacy = os.path.join(os.path.dirname(__file__), "legacy_v1", "vocab.txt")
  with open(legacy, encoding="utf-8") as f:
    tokens = f.read().split()
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(tokens + ["##s"]) + "\n", encoding="utf-8")
  tok = tokenization.load_tokenizer(vocab_file=str(path))
  assert tok.vocab_size == 31 and tok.vocab_size <= CONFIG.vocab_size
  return tok


TEXTS = ["good movie", "bad film", "the plot is dull", "very fun acting",
         "alice lives in paris", "not a good film"]


def _write(path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _classification_task(tmp_path, tokenizer, regression):
  labels = (["0.5", "4.0", "1.25", "3.0", "2.5", "0.0"] if regression else
            ["pos", "neg", "neg", "pos", "mid", "neg"])
  _write(tmp_path / "train.tsv", ["text\tlabel"] + [
      f"{t}\t{l}" for t, l in zip(TEXTS, labels)])
  spec = classifier_data.make_tsv_task(
      "text", "label", label_list=None if regression else ("neg", "mid",
                                                            "pos"))
  task = ClassificationTask(spec, tokenizer, str(tmp_path), max_seq_length=12)
  assert task.name == ("regression" if regression else "classification")
  return task


def _train_batch(task, batch_size):
  return H.first_batch(task.build_inputs(
      "train", tf.distribute.get_strategy(), batch_size, 0, 1))


def test_classification_task_loss_and_accuracy(tmp_path, tokenizer):
  task = _classification_task(tmp_path, tokenizer, regression=False)
  batch = _train_batch(task, 6)
  labels = batch[1][F.LOGITS]
  assert sorted(labels.tolist()) == [0, 0, 0, 1, 2, 2]

  def expected(outputs, _):
    logits = outputs[F.LOGITS]
    return {"loss": H.softmax_cross_entropy(logits, labels).mean(),
            "accuracy": (logits.argmax(-1) == labels).mean()}

  H.run_task_test(task, CONFIG, batch, expected)


def test_regression_task_loss(tmp_path, tokenizer):
  task = _classification_task(tmp_path, tokenizer, regression=True)
  batch = _train_batch(task, 6)
  scores = batch[1][F.LOGITS]
  assert scores.shape == (6, 1)
  assert sorted(scores[:, 0].tolist()) == [0.0, 0.5, 1.25, 2.5, 3.0, 4.0]

  def expected(outputs, _):
    return {"loss": ((outputs[F.LOGITS].astype(np.float64) - scores) ** 2
                     ).mean()}

  H.run_task_test(task, CONFIG, batch, expected)


def test_tagging_task_loss_ignores_all_but_first_pieces(tmp_path, tokenizer):
  _write(tmp_path / "train.txt", [
      "alice B-PER", "lives O", "in O", "paris B-LOC", "",
      "bob B-PER", "works O", "at O", "london B-LOC", "city I-LOC", "",
      "the O", "films O", "is O", "dull O"])
  task = TaggingTask("conll", tokenizer, str(tmp_path), max_seq_length=10,
                     doc_stride=4)
  assert task.label_list == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
  batch = _train_batch(task, 3)
  labels = batch[1][F.LOGITS]
  # 13 tagged tokens; [CLS], [SEP], padding and `##s` carry IGNORE.
  assert int((labels != -1).sum()) == 13

  def expected(outputs, _):
    real = labels != -1
    return {"loss": H.softmax_cross_entropy(
        outputs[F.LOGITS][real], labels[real]).mean()}

  H.run_task_test(task, CONFIG, batch, expected)


# Keras warns when a finite eval dataset ends: the task's eval input is one.
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_pretraining_task_masked_lm_and_sentence_order_loss(tmp_path):
  records = pretraining_fixtures.write_records(tmp_path / "eval.tfrecord", 4)
  task = PretrainingTask([], [records], pretraining_fixtures.SEQ,
                         pretraining_fixtures.PRED, eval_batch_size=4,
                         max_eval_steps=1)
  batch = H.first_batch(task.build_inputs(
      "eval", tf.distribute.get_strategy(), 4))
  config = CONFIG.replace(vocab_size=pretraining_fixtures.VOCAB)

  def expected(outputs, features):
    ids = features[F.MASKED_LM_IDS]
    weights = features[F.MASKED_LM_WEIGHTS].astype(np.float64)
    labels = features[F.NEXT_SENTENCE_LABELS].reshape([-1])
    mlm = outputs[F.MLM_LOGITS]
    mlm_loss = ((H.softmax_cross_entropy(mlm, ids) * weights).sum() /
                (weights.sum() + 1e-5))
    sop_loss = H.softmax_cross_entropy(outputs[F.SOP_LOGITS], labels).mean()
    return {"loss": mlm_loss + sop_loss, "masked_lm_loss": mlm_loss,
            "sentence_order_loss": sop_loss,
            "masked_lm_accuracy": ((mlm.argmax(-1) == ids) * weights).sum() /
                                  weights.sum(),
            "sentence_order_accuracy": (outputs[F.SOP_LOGITS].argmax(-1) ==
                                        labels).mean()}

  assert batch[F.MASKED_LM_WEIGHTS].sum() == 4 * pretraining_fixtures.PRED
  model, want = H.run_task_test(task, config, batch, expected)
  # The task's own evaluate (what the trainer reports) on the same records.
  got = task.evaluate(model, tf.distribute.get_strategy())
  # The metrics, and beside them their baselines (tests/test_budget.py
  # counts those by hand).
  assert sorted(got) == sorted(EVAL_KEYS + (
      "masked_lm_accuracy_baseline", "masked_lm_loss_baseline",
      "sentence_order_accuracy_baseline"))
  for name in EVAL_KEYS:
    assert_close_to_scale(got[name], want[name], rel=1e-5)
