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


@pytest.mark.parametrize("jit, steps, strategy, fails", [
    (True, 2, "mirrored", True),
    (True, 1, "mirrored", False),
    (False, 2, "mirrored", False),
    (True, 2, "default", False),
])
def test_jit_compile_with_several_steps_under_mirrored_is_one_line(
    jit, steps, strategy, fails):
  # pylint: disable=import-outside-toplevel
  from albert_tf.training import step_loop
  from albert_tf.training.runtime import RunConfigError
  scope = (tf.distribute.MirroredStrategy(["/cpu:0"]) if strategy ==
           "mirrored" else tf.distribute.get_strategy())
  with scope.scope():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit,
                  steps_per_execution=steps)
    if not fails:
      step_loop.install(model)
      return
    with pytest.raises(RunConfigError) as e:
      step_loop.install(model)
  assert str(e.value) == (
      "--jit_compile with MirroredStrategy and --iterations_per_loop=2: "
      "Keras 3 runs XLA steps there in a loop whose collective keys cannot "
      "be fed (keras-team/keras#19246); leave --jit_compile out, or set "
      "--iterations_per_loop=1")
