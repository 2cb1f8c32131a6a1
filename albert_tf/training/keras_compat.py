"""The one module of albert_tf that touches a private Keras or TF name.

One function per internal, each saying why no public API does the job;
tests/test_keras_compat.py fails, naming the attribute, on a Keras or TF
release that removes one.
"""

import keras


def skip_fit_symbolic_build(model: keras.Model):
  """Makes `fit`/`evaluate` of `model` skip Keras's "symbolic build".

  Under any tf.distribute strategy but the default one, Keras (3.15) starts
  fit and evaluate by pulling one batch from the input (an extra start of
  the input pipeline) and all-reducing it across replicas to build the
  model; under MultiWorkerMirrored that all-reduce fails on dict batches
  ("unsupported type <class 'dict'>"). The build has nothing to do for a
  model and optimizer built before fit. No public argument or hook turns it
  off (`fit` calls `Model._maybe_symbolic_build` unconditionally), so the
  instance's method is replaced by one that does nothing.

  Raises:
    RuntimeError: this Keras has no `Model._maybe_symbolic_build`.
  """
  if not callable(getattr(type(model), "_maybe_symbolic_build", None)):
    raise RuntimeError(
        f"Keras {keras.__version__} has no Model._maybe_symbolic_build: "
        "albert_tf.training.keras_compat.skip_fit_symbolic_build (written for "
        "Keras 3.15) must be updated for it")
  model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None  # pylint: disable=protected-access


def reduce_per_replica(values, strategy):
  """Keras's own reduction of a step's per-replica outputs ("auto").

  The trainer's multi-step loop (training.step_loop) must hand `fit`'s
  callbacks the logs Keras's would. Keras exports no public name for it,
  so its module-level function is used rather than a copy that could drift.

  Raises:
    RuntimeError: this Keras has no
      keras.src.backend.tensorflow.trainer.reduce_per_replica.
  """
  from keras.src.backend.tensorflow import trainer  # pylint: disable=g-import-not-at-top
  reduce = getattr(trainer, "reduce_per_replica", None)
  if not callable(reduce):
    raise RuntimeError(
        f"Keras {keras.__version__} has no keras.src.backend.tensorflow."
        "trainer.reduce_per_replica: albert_tf.training.keras_compat."
        "reduce_per_replica (written for Keras 3.15) must be updated for it")
  return reduce(values, strategy, reduction="auto")
