"""What a task declares; the trainer (`albert_tf.training.trainer`) does the rest.

The shape of Model Garden's `official/core/base_task.py`, kept small: a task
builds its model from an AlbertConfig, its tf.data inputs, its loss and
metrics, writes its predictions and names its export outputs. Strategy,
checkpoints, resume, logs and the best-checkpoint bookkeeping are the
trainer's, written once for every task.
"""

import math
from typing import Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F


class Task:
  """Base class of the task families registered in `albert_tf.tasks`."""

  #: Registry name (`albert_tf.tasks.TASKS`).
  name: str = ""
  #: The dev metric (higher is better) that picks the best checkpoint.
  best_metric: Optional[str] = None

  def build_model(self, config) -> keras.Model:
    """The Keras model of this task (random weights; the trainer restores)."""
    raise NotImplementedError

  def build_losses(self):
    """The `compile(loss=)` argument; None when the model's own train_step
    computes it."""
    return None

  def build_metrics(self):
    """The `compile(metrics=)` argument (training-time metrics)."""
    return None

  def build_inputs(self, split: str, strategy: tf.distribute.Strategy,
                   global_batch_size: int, start_step: int = 0,
                   num_steps: int = 0):
    """A distributed dataset of `split` ("train") from `start_step`.

    Training batches must be a function of the step, so that a resumed run
    continues with the data an uninterrupted one would have seen (or, for
    streams too large to index, new data).
    """
    raise NotImplementedError

  def evaluate(self, model: keras.Model,
               strategy: tf.distribute.Strategy) -> Dict[str, float]:
    """Dev metrics of `model` (including `best_metric`)."""
    raise NotImplementedError

  def predict(self, model: keras.Model, output_dir: str) -> Dict[str, float]:
    """Writes test predictions into output_dir; returns test metrics when the
    test split is labelled (else {})."""
    return {}

  @staticmethod
  def export_outputs(outputs: Dict[str, tf.Tensor],
                     num_labels: Optional[int] = None) -> Dict[str, tf.Tensor]:
    """What the export signatures return, from the model's outputs.

    Static: export_saved_model calls it through the registry with what the
    trained model recorded (its number of labels), without data.
    """
    raise NotImplementedError

  def guard_input_errors(self, fn: Callable):
    """Runs fn (a fit/evaluate call); may turn input errors into clear ones."""
    return fn()


def step_indexed_inputs(columns: Dict[str, tf.Tensor],
                        labels: Dict[str, tf.Tensor],
                        strategy: tf.distribute.Strategy,
                        global_batch_size: int, start_step: int,
                        num_steps: int, seed: int):
  """Training batches of in-memory examples as a pure function of the step.

  Epoch e is permutation(seed, e) of the n examples, and step s takes
  examples [s*B, (s+1)*B) of that endless stream, so a resumed run trains on
  exactly the batches an uninterrupted one would have. Only the epochs that
  steps [start_step, num_steps) reach are drawn. Under tf.distribute each
  input pipeline takes its slice of every global batch, and its replicas
  consecutive per-replica batches.

  Args:
    columns: model inputs, each [n, ...].
    labels: the `fit` targets by output name, each [n, ...].
  """
  n = int(next(iter(columns.values())).shape[0])
  first_epoch = start_step * global_batch_size // n
  last_epoch = math.ceil(num_steps * global_batch_size / n)
  order = np.concatenate([
      np.random.default_rng([seed, e]).permutation(n)
      for e in range(first_epoch, last_epoch)])
  offset = first_epoch * n
  order = order[start_step * global_batch_size - offset:
                num_steps * global_batch_size - offset].reshape(
                    [-1, global_batch_size]).astype(np.int32)

  def dataset_fn(context: tf.distribute.InputContext):
    per_replica = context.get_per_replica_batch_size(global_batch_size)
    per_pipeline = global_batch_size // context.num_input_pipelines
    first = context.input_pipeline_id * per_pipeline
    mine = order[:, first:first + per_pipeline].reshape([-1])
    ds = tf.data.Dataset.from_tensor_slices(mine).batch(
        per_replica, drop_remainder=True)
    ds = ds.map(lambda idx: ({k: tf.gather(v, idx) for k, v in columns.items()},
                             {k: tf.gather(v, idx) for k, v in labels.items()}))
    return ds.prefetch(tf.data.AUTOTUNE)

  return strategy.distribute_datasets_from_function(dataset_fn)


def batched_logits(model: keras.Model):
  """fn(features, batch_size) -> the model's float32 `logits` as numpy, in
  order, every row once.

  Runs outside the strategy: each worker holds every weight, and a partial
  last batch needs no padding that way.
  """
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in F.ENCODER_INPUTS}
  forward = tf.function(lambda batch: model(batch, training=False)[F.LOGITS],
                        input_signature=[spec], autograph=False)

  def run(features, batch_size):
    n = len(features[F.INPUT_IDS])
    outputs = [forward({k: features[k][i:i + batch_size] for k in spec})
               .numpy() for i in range(0, n, batch_size)]
    # No rows: an empty array the caller reshapes to its logits' shape.
    return (np.concatenate(outputs).astype(np.float32) if outputs else
            np.zeros([0], np.float32))

  return run
