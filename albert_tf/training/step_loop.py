"""The trainer's steps_per_execution loop: Keras's, runnable under every
tf.distribute strategy (see `install`), and the other Keras gaps of fit
under tf.distribute (`_fit_under_any_strategy`)."""

import tensorflow as tf

from albert_tf.training import keras_compat
from albert_tf.training.runtime import RunConfigError

_COLLECTIVE = (tf.distribute.MirroredStrategy,
               tf.distribute.MultiWorkerMirroredStrategy)


def check_jit_compile(model):
  """One line instead of a placeholder error on the first step: XLA runs in
  Keras's own loop, which fails under mirrored and multi-worker with
  several steps per call (see `install`), and Keras itself turns XLA off
  under tf.distribute when left to choose (jit_compile="auto")."""
  strategy = model.distribute_strategy
  if (model.jit_compile and model.steps_per_execution > 1
      and isinstance(strategy, _COLLECTIVE)):
    raise RunConfigError(
        f"--jit_compile with {type(strategy).__name__} and "
        f"--iterations_per_loop={model.steps_per_execution}: Keras 3 runs XLA "
        "steps there in a loop whose collective keys cannot be fed "
        "(keras-team/keras#19246); leave --jit_compile out, or set "
        "--iterations_per_loop=1")


def _fit_under_any_strategy(model, strategy):
  """Two Keras 3.15 gaps under tf.distribute, closed for `model` (a third,
  steps_per_execution > 1 under collective strategies, is `install`).

  1. fit/evaluate begin with a "symbolic build" that pulls one batch and
     all-reduces it, which fails on dict batches under MultiWorkerMirrored
     (keras_compat says why only a private override turns it off).
  2. Step outputs are reduced across workers with axis=0, which fails on
     scalar metrics: under MultiWorkerMirrored they are handed over as
     [1]-vectors (the reduction returns scalars).
  """
  if not tf.distribute.has_strategy():  # the default strategy (in scope)
    return
  keras_compat.skip_fit_symbolic_build(model)
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    for name in ("train_step", "test_step"):
      step_fn = getattr(model, name)
      setattr(model, name, lambda data, fn=step_fn: tf.nest.map_structure(
          lambda v: tf.reshape(v, [1]), fn(data)))


def install(model):
  """Keras's steps_per_execution loop, rebuilt so that it runs under every
  strategy (Keras 3.15, TF 2.21), and fit's two other gaps closed
  (`_fit_under_any_strategy`). Call it in the strategy's scope, after
  compile.

  Keras's loop calls `strategy.run(train_step)` as a nested tf.function
  inside a tf.cond. Under Mirrored and MultiWorkerMirrored the collectives'
  instance keys are call-time captures, which become placeholders of the
  branch graph that nothing feeds: "You must feed a value for placeholder
  tensor ..." (keras-team/keras#19246). Here the step is traced inline in
  the loop's branches, so TF lifts each capture to the outer tf.function.
  The loop is otherwise Keras's, under every strategy alike. With
  jit_compile (XLA needs the step as a function of its own) or one step
  per call, Keras's own function is kept.
  """
  check_jit_compile(model)
  _fit_under_any_strategy(model, model.distribute_strategy)
  for kind in ("train", "test"):
    keras_make = getattr(model, f"make_{kind}_function")

    def make(force=False, kind=kind, keras_make=keras_make):
      attr = f"{kind}_function"
      if getattr(model, attr) is not None and not force:
        return getattr(model, attr)
      keras_make(force=True)
      if model.steps_per_execution > 1 and not model.jit_compile:
        setattr(model, attr, multi_step_function(
            model, getattr(model, f"{kind}_step"), getattr(model, attr)))
      return getattr(model, attr)

    setattr(model, f"make_{kind}_function", make)


def multi_step_function(model, step_fn, keras_function):
  """`step_fn` up to steps_per_execution times per call (see `install`)."""
  strategy = model.distribute_strategy
  steps = model.steps_per_execution

  def one_step(data):
    return keras_compat.reduce_per_replica(
        strategy.run(step_fn, args=(data,)), strategy)

  @tf.function(autograph=False, reduce_retracing=True)
  def run(iterator):
    first = iterator.get_next_as_optional()
    traced = []  # the outputs' structure, for the branch without data

    def with_data():
      def body(i, outputs):
        batch = iterator.get_next_as_optional()
        return tf.cond(batch.has_value(),
                       lambda: (i + 1, one_step(batch.get_value())),
                       lambda: (tf.constant(steps), outputs))
      _, outputs = tf.while_loop(lambda i, _: i < steps, body,
                                 (tf.constant(1), one_step(first.get_value())))
      traced.append(outputs)
      return tf.constant(True), outputs

    def without_data():
      # tf.cond traces with_data first; its outputs are scalar logs.
      return tf.constant(False), tf.nest.map_structure(
          lambda t: tf.zeros(t.shape, t.dtype), traced[0])

    return tf.cond(first.has_value(), with_data, without_data)

  def function(iterator):
    if not isinstance(iterator, (tf.data.Iterator,
                                 tf.distribute.DistributedIterator)):
      return keras_function(iterator)  # Keras's loop over Python batches
    has_data, outputs = run(iterator)
    if not has_data:
      raise StopIteration
    return outputs

  return function
