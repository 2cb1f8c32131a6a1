"""A task family written outside the package trains, resumes, keeps its best
checkpoint and exports, with no line of albert_tf/ changed.

The family here, "toy_parity", says whether token id 7 occurs in a short
sequence. Its model is the ALBERT encoder plus a head of its own, saved
under the checkpoint name "toy_head" that no package code knows: the model
declares it in `checkpoint_items`. It is registered only for the test
(`registry.register_family`, undone after the test). The run is killed (an input error
one step after a checkpoint) and resumed by a fresh trainer; the head must
come back as saved, not re-initialised, as it would if a central list of
checkpoint parts had been left out of date.
"""

import json
import pathlib
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import export_saved_model
from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder, encoder_inputs
from albert_tf.tasks.base import Task
from albert_tf.core.record import ModelInfo
from albert_tf.training import checkpoints
from albert_tf.training.trainer import Trainer, TrainerSettings

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = "toy_parity"
HEAD = "toy_head"
WATCHED_ID = 7
SEQ = 8
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
    f"w{i}" for i in range(15)]  # ids 5..19
CONFIG = AlbertConfig(vocab_size=len(VOCAB), embedding_size=4, hidden_size=8,
                      num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=SEQ)
LABELS = ["absent", "present"]
METRIC = "neg_log_loss"  # changes at every step, unlike a 16-example accuracy


def _examples(n, seed):
  """[CLS] 2-5 word ids [SEP], padded to SEQ; label: WATCHED_ID occurs."""
  rng = np.random.default_rng(seed)
  ids = np.zeros([n, SEQ], np.int32)
  for row in ids:
    words = rng.integers(5, len(VOCAB), size=int(rng.integers(2, 6)))
    row[:len(words) + 2] = [2, *words, 3]
  return ({F.INPUT_IDS: ids, F.INPUT_MASK: (ids > 0).astype(np.int32),
           F.SEGMENT_IDS: np.zeros_like(ids)},
          (ids == WATCHED_ID).any(axis=1).astype(np.int32))


# ------------------------------------------------------------ the family
class ToyModel(keras.Model):
  """Encoder + a dense head on pooled_output; output `logits` [batch, 2]."""

  def __init__(self, config, **kwargs):
    encoder = AlbertEncoder(config, name="encoder")
    head = keras.layers.Dense(2, name="parity")
    inputs = encoder_inputs()
    outputs = {F.LOGITS: head(encoder(inputs)[F.POOLED_OUTPUT])}
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)
    self.encoder = encoder
    self.head = head

  @property
  def checkpoint_items(self):
    return {"encoder": self.encoder, HEAD: self.head}


class ToyTask(Task):
  """Training data indexed by step; `crash_at_step`: the input pipeline
  fails when asked for that step's batch (the kill)."""

  name = NAME
  best_metric = METRIC
  export_name = NAME

  def __init__(self, vocab_file, crash_at_step=None):
    self.vocab_file = vocab_file
    self.crash_at_step = crash_at_step
    self.train = _examples(64, seed=0)
    self.dev = _examples(16, seed=1)

  def build_model(self, config):
    return ToyModel(config)

  def build_losses(self):
    return {F.LOGITS: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)}

  def build_inputs(self, split, strategy, global_batch_size, start_step=0,
                   num_steps=0):
    assert split == "train", split
    features, labels = self.train
    n = len(labels)
    rows = (np.arange(num_steps * global_batch_size) % n).reshape(
        [num_steps, global_batch_size])
    crash = self.crash_at_step

    def batch(step):
      if crash is not None:
        tf.debugging.assert_less(step, tf.constant(crash, tf.int64),
                                 message="killed")
      idx = tf.gather(rows, step)
      return ({k: tf.gather(v, idx) for k, v in features.items()},
              {F.LOGITS: tf.gather(labels, idx)})

    ds = tf.data.Dataset.range(start_step, num_steps).map(batch)
    return strategy.experimental_distribute_dataset(ds)

  def evaluate(self, model, strategy):
    return toy_metrics(model, self.dev)

  def record(self):
    return ModelInfo(task=NAME, task_name="parity7", num_labels=2,
                     label_list=LABELS, max_seq_length=SEQ,
                     tokenizer_file="vocab.txt", tokenizer_kind="wordpiece",
                     task_config={"watched_id": WATCHED_ID})

  @classmethod
  def export_model(cls, config, record):
    return ToyModel(config)

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    specs = [tf.TensorSpec([None, None], tf.int32, name=n)
             for n in F.ENCODER_INPUTS]

    @tf.function(input_signature=specs, autograph=False)
    def serve(input_ids, input_mask, segment_ids):
      logits = model({F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask,
                      F.SEGMENT_IDS: segment_ids}, training=False)[F.LOGITS]
      return {F.LOGITS: logits,
              "present": tf.argmax(logits, -1, output_type=tf.int32)}

    return {"serving_default": serve}


def toy_metrics(model, data):
  features, labels = data
  logits = model(features, training=False)[F.LOGITS].numpy().astype(
      np.float64)
  log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
  return {"accuracy": float((logits.argmax(-1) == labels).mean()),
          METRIC: float(log_probs[np.arange(len(labels)), labels].mean())}


# ------------------------------------------------------------ the test
def _trainer(task, out):
  settings = TrainerSettings(
      output_dir=str(out), num_train_steps=6, train_batch_size=8,
      checkpoint_steps=2, iterations_per_loop=1, log_steps=1,
      eval_at_checkpoints=True, optimizer="adamw", learning_rate=0.01)
  return Trainer(task, CONFIG, settings, tf.distribute.get_strategy())


def _head_weights(model):
  return [v.numpy() for v in model.head.weights]


def _jsonl(path):
  return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def test_a_task_family_outside_the_package(tmp_path, monkeypatch):
  # Registered as a family file outside the package would be.
  monkeypatch.setitem(registry._FAMILIES, NAME, registry.Family(  # pylint: disable=protected-access
      NAME, ToyTask, module=__name__))
  out = tmp_path / "out"
  out.mkdir()
  vocab = out / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  # What a fine-tuning command writes beside its checkpoints.
  CONFIG.to_json_file(str(out / checkpoints.CONFIG_NAME))
  ToyTask(str(vocab)).record().write_beside(str(out))

  # Train; the input pipeline fails at step 6's batch: the run is past its
  # last checkpoint, step 4's.
  keras.utils.set_random_seed(1)
  first = _trainer(ToyTask(str(vocab), crash_at_step=5), out)
  assert first.restore() == 0
  with pytest.raises(tf.errors.InvalidArgumentError, match="killed"):
    first.train()
  assert first.step > 4
  assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-4")
  saved = tf.train.load_checkpoint(str(out / "ckpt-4"))
  head_keys = sorted(k for k in saved.get_variable_to_shape_map()
                     if k.startswith(HEAD + "/") and "OPTIMIZER" not in k)
  assert len(head_keys) == 2, head_keys  # kernel and bias
  saved_head = sorted((saved.get_tensor(k) for k in head_keys),
                      key=lambda a: a.ndim, reverse=True)  # kernel first
  del first

  # A fresh trainer (another process would do the same) resumes at step 4
  # with the head as saved.
  keras.utils.set_random_seed(2)
  second = _trainer(ToyTask(str(vocab)), out)
  fresh = _head_weights(second.model)
  assert not np.array_equal(fresh[0], saved_head[0])  # the check can fail
  assert second.restore() == 4
  for got, want in zip(_head_weights(second.model), saved_head):
    np.testing.assert_array_equal(got, want)
  second.train()
  assert second.step == 6
  assert int(tf.train.load_checkpoint(str(out / "ckpt-6")).get_tensor(
      "step/.ATTRIBUTES/VARIABLE_VALUE")) == 6

  # The best checkpoint: the logged step with the highest dev metric, and
  # its weights give that value again.
  logged = {r["global_step"]: r for r in _jsonl(out / "eval_log.jsonl")}
  assert sorted(logged) == [0, 2, 4, 6]
  best = json.loads((out / checkpoints.BEST_DIR /
                     checkpoints.BEST_FILE).read_text())
  best_step = max(sorted(logged), key=lambda s: logged[s][METRIC])
  assert best["step"] == best_step
  assert best[METRIC] == logged[best_step][METRIC]
  best_model = ToyModel(CONFIG)
  tf.train.Checkpoint(**best_model.checkpoint_items).read(
      str(out / checkpoints.BEST_DIR / best["checkpoint"])).expect_partial()
  assert toy_metrics(best_model, ToyTask(str(vocab)).dev)[METRIC] == (
      pytest.approx(best[METRIC], abs=1e-6))

  # Export by the record; served outputs equal the Keras model's.
  version = export_saved_model.export(str(out), str(tmp_path / "export"))
  info = json.loads((pathlib.Path(version) / "assets.extra" /
                     "albert_export.json").read_text())
  assert (info["task"], info["model"], info["label_list"],
          info["watched_id"]) == (NAME, NAME, LABELS, WATCHED_ID)
  assert info["checkpoint"] == str(out / checkpoints.BEST_DIR /
                                   best["checkpoint"])
  ids = np.array([[2, 7, 5, 3, 0, 0, 0, 0], [2, 9, 10, 11, 12, 3, 0, 0],
                  [2, 18, 17, 7, 6, 5, 3, 0]], np.int32)
  features = {F.INPUT_IDS: ids, F.INPUT_MASK: (ids > 0).astype(np.int32),
              F.SEGMENT_IDS: np.zeros_like(ids)}
  served = tf.saved_model.load(version).signatures["serving_default"](
      **{k: tf.constant(v) for k, v in features.items()})
  want = best_model(features, training=False)[F.LOGITS].numpy()
  np.testing.assert_allclose(served[F.LOGITS].numpy(), want, atol=1e-5,
                             rtol=0)
  np.testing.assert_array_equal(served["present"].numpy(), want.argmax(-1))


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_names_made_up_at_run_time(tmp_path, monkeypatch):
  """The package learns a family and its checkpoint parts only when it runs:
  a family and head named here by a random suffix, which no file of the
  package can hold, checkpoint, resume and export. Unregistered, the same
  output_dir does not export: the family is found by the registration."""
  suffix = uuid.uuid4().hex[:12]
  family_name, head_name = f"family_{suffix}", f"head_{suffix}"

  class Model(ToyModel):

    @property
    def checkpoint_items(self):
      return {"encoder": self.encoder, head_name: self.head}

  class Family(ToyTask):
    name = export_name = family_name

    def build_model(self, config):
      return Model(config)

    def record(self):
      return ModelInfo(task=family_name, task_name="parity7", num_labels=2,
                       label_list=LABELS, max_seq_length=SEQ,
                       tokenizer_file="vocab.txt", tokenizer_kind="wordpiece")

    @classmethod
    def export_model(cls, config, record):
      return Model(config)

  out = tmp_path / "out"
  out.mkdir()
  vocab = out / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  CONFIG.to_json_file(str(out / checkpoints.CONFIG_NAME))
  Family(str(vocab)).record().write_beside(str(out))
  keras.utils.set_random_seed(1)
  first = _trainer(Family(str(vocab)), out)
  first.train()
  assert first.step == 6

  # The head is saved under the name made up above: its kernel and bias.
  saved = tf.train.load_checkpoint(str(out / "ckpt-6"))
  head_keys = sorted(k for k in saved.get_variable_to_shape_map()
                     if k.startswith(head_name + "/") and "OPTIMIZER" not in k)
  assert len(head_keys) == 2, head_keys
  assert sorted(saved.get_variable_to_shape_map()[k] for k in head_keys) == [
      [2], [8, 2]]  # bias [2], kernel [hidden 8, 2]
  saved_head = sorted((saved.get_tensor(k) for k in head_keys),
                      key=lambda a: a.ndim, reverse=True)  # kernel first
  for got, want in zip(_head_weights(first.model), saved_head):
    np.testing.assert_array_equal(got, want)

  # A fresh trainer restores it by that name.
  keras.utils.set_random_seed(2)
  second = _trainer(Family(str(vocab)), out)
  assert not np.array_equal(_head_weights(second.model)[0], saved_head[0])
  assert second.restore() == 6
  for got, want in zip(_head_weights(second.model), saved_head):
    np.testing.assert_array_equal(got, want)

  # Export: refused while the family is unknown, served once registered.
  with pytest.raises(export_saved_model.ExportError, match=family_name):
    export_saved_model.export(str(out), str(tmp_path / "refused"))
  assert not (tmp_path / "refused").exists()
  monkeypatch.setitem(registry._FAMILIES, family_name, registry.Family(  # pylint: disable=protected-access
      family_name, Family, module=__name__))
  version = export_saved_model.export(str(out), str(tmp_path / "export"))
  info = json.loads((pathlib.Path(version) / "assets.extra" /
                     "albert_export.json").read_text())
  assert (info["task"], info["model"]) == (family_name, family_name)
  best = json.loads((out / checkpoints.BEST_DIR /
                     checkpoints.BEST_FILE).read_text())
  best_model = Model(CONFIG)
  tf.train.Checkpoint(**best_model.checkpoint_items).read(
      str(out / checkpoints.BEST_DIR / best["checkpoint"])).expect_partial()
  ids = np.array([[2, 7, 5, 3, 0, 0, 0, 0], [2, 9, 10, 11, 12, 3, 0, 0]],
                 np.int32)
  features = {F.INPUT_IDS: ids, F.INPUT_MASK: (ids > 0).astype(np.int32),
              F.SEGMENT_IDS: np.zeros_like(ids)}
  served = tf.saved_model.load(version).signatures["serving_default"](
      **{k: tf.constant(v) for k, v in features.items()})
  want = best_model(features, training=False)[F.LOGITS].numpy()
  np.testing.assert_allclose(served[F.LOGITS].numpy(), want, atol=1e-5,
                             rtol=0)
