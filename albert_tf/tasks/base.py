"""What a task declares; the trainer (`albert_tf.trainer`) does the rest.

The shape of Model Garden's `official/core/base_task.py`, kept small: a task
builds its model from an AlbertConfig, its tf.data inputs, its loss and
metrics, writes its predictions and names its export outputs. Strategy,
checkpoints, resume, logs and the best-checkpoint bookkeeping are the
trainer's, written once for every task.
"""

from typing import Callable, Dict, Optional

import keras
import tensorflow as tf


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

  def export_outputs(self, outputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """What the export signatures return, from the model's outputs."""
    raise NotImplementedError

  def guard_input_errors(self, fn: Callable):
    """Runs fn (a fit/evaluate call); may turn input errors into clear ones."""
    return fn()
