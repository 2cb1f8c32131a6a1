"""albert_tf.training.keras_compat: the private Keras names it relies on exist,
and its overrides still do what the trainer needs from them."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import keras_compat


def test_keras_model_has_maybe_symbolic_build_with_the_overridden_signature():
  method = getattr(keras.Model, "_maybe_symbolic_build", None)
  assert callable(method), (
      f"Keras {keras.__version__} has no keras.Model._maybe_symbolic_build: "
      "update albert_tf/training/keras_compat.py skip_fit_symbolic_build")
  params = list(inspect.signature(method).parameters)
  assert params == ["self", "iterator", "data_batch"], (
      f"keras.Model._maybe_symbolic_build{inspect.signature(method)} changed: "
      "update the replacement in keras_compat.skip_fit_symbolic_build")


def test_skip_fit_symbolic_build_names_the_missing_attribute():
  with pytest.raises(RuntimeError, match=r"has no Model\._maybe_symbolic_build: "
                     r"albert_tf\.training\.keras_compat\.skip_fit_symbolic_build"):
    keras_compat.skip_fit_symbolic_build(object())


def test_fit_under_mirrored_with_the_build_skipped_trains_on_batch_one():
  """One SGD step from w=0 at learning rate 1 on batches [x=1, y=k], k=1..4:
  loss (w*x - y)^2 gives w = 2*y of the batch trained on (y=1: the first)."""
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with strategy.scope():
    model = keras.Sequential([keras.Input((1,)),
                              keras.layers.Dense(1, use_bias=False,
                                                 kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    model.optimizer.build(model.trainable_variables)
    keras_compat.skip_fit_symbolic_build(model)
  y = np.arange(1, 5, dtype=np.float32)[:, None]
  dataset = strategy.distribute_datasets_from_function(
      lambda _: tf.data.Dataset.from_tensor_slices((np.ones_like(y), y)).batch(1))
  model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0, shuffle=False)
  assert float(model.layers[0].kernel.numpy()[0, 0]) == 2.0


def test_reduce_per_replica_is_keras_mean_over_replicas():
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  out = keras_compat.reduce_per_replica({"loss": tf.constant(2.5)}, strategy)
  assert float(out["loss"]) == 2.5
