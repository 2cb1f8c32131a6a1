"""Tests for albert_tf.training.optimization: schedule values, the original
update rules against NumPy ports of their equations, weight decay."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import optimization
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.models import AlbertPretrainer
from tests import numpy_reference as ref
from tests.pretraining_fixtures import TINY_CONFIG


def test_warmup_then_linear_decay_values():
  s = optimization.WarmupPolynomialDecay(0.00176, num_train_steps=1000,
                                         num_warmup_steps=100)
  lr = lambda t: float(s(t))
  assert lr(0) == 0.0
  np.testing.assert_allclose(lr(50), 0.00176 * 50 / 100, rtol=1e-6)
  np.testing.assert_allclose(lr(99), 0.00176 * 99 / 100, rtol=1e-6)
  # After warmup the original's decay, computed from step 0: (1 - t/N).
  np.testing.assert_allclose(lr(100), 0.00176 * 0.9, rtol=1e-6)
  np.testing.assert_allclose(lr(550), 0.00176 * 0.45, rtol=1e-6)
  assert lr(1000) == 0.0 and lr(5000) == 0.0


def test_polynomial_power_and_no_warmup():
  s = optimization.WarmupPolynomialDecay(1.0, num_train_steps=10, power=2.0)
  np.testing.assert_allclose([float(s(t)) for t in (0, 5, 10)],
                             [1.0, 0.25, 0.0], atol=1e-7)


def test_schedule_serialises():
  s = optimization.WarmupPolynomialDecay(0.1, 20, 5, power=0.5)
  restored = keras.optimizers.schedules.deserialize(
      keras.optimizers.schedules.serialize(s))
  assert restored.get_config() == s.get_config()
  opt = optimization.create_optimizer("lamb", s)
  clone = type(opt).from_config(opt.get_config())
  assert clone.get_config() == opt.get_config()
  assert isinstance(clone._learning_rate,  # pylint: disable=protected-access
                    optimization.WarmupPolynomialDecay)
  assert float(clone.learning_rate) == 0.0  # step 0 of the warmup


@pytest.mark.parametrize("name,cls", [
    ("lamb", optimization.Lamb), ("adamw", optimization.AdamWeightDecay),
    ("keras_lamb", keras.optimizers.Lamb),
    ("keras_adamw", keras.optimizers.AdamW)])
def test_original_hyperparameters(name, cls):
  opt = optimization.create_optimizer(name, 1e-3)
  assert isinstance(opt, cls)
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.999, 1e-6)
  assert opt.global_clipnorm == 1.0
  if name.startswith("keras_"):
    assert opt.weight_decay == 0.01
  else:  # inside the update, not Keras's separate decoupled step
    assert opt.weight_decay is None and opt.weight_decay_rate == 0.01
  with pytest.raises(ValueError, match="--optimizer"):
    optimization.create_optimizer("sgd", 1e-3)


def test_weight_decay_excludes_layer_norm_and_bias_only():
  model = AlbertPretrainer(AlbertConfig.from_dict(TINY_CONFIG))
  excluded = {v.path for v in optimization.weight_decay_exclusions(model)}
  all_paths = {v.path for v in model.trainable_variables}
  decayed = all_paths - excluded
  assert excluded and decayed
  for path in excluded:
    assert path.endswith(("bias", "gamma", "beta")), path
  for path in decayed:
    assert path.endswith(("kernel", "embeddings")), path
  layer_norms = [p for p in excluded if p.endswith("gamma")]
  # embedding LN + 2 per shared block + the MLM head's LN
  assert len(layer_norms) == 4
  assert any(p.endswith("output_bias") for p in excluded)

  # Behaviour: with zero gradients only the decoupled decay moves weights.
  lr = 0.5
  opt = optimization.create_optimizer("adamw", lr)
  optimization.exclude_layer_norm_and_bias(opt, model)
  variables = model.trainable_variables
  before = [v.numpy().copy() for v in variables]
  opt.apply([np.zeros(v.shape, "float32") for v in variables], variables)
  for v, old in zip(variables, before):
    factor = 1.0 if v.path in excluded else 1.0 - lr * 0.01
    np.testing.assert_allclose(v.numpy(), old * factor, rtol=1e-5,
                               err_msg=v.path)


# ------------------------------------------------ the original update rules
PEAK_LR, TOTAL, WARMUP, STEPS = 0.05, 40, 5, 20


def _dense_layer_norm_model(dtype):
  """Dense -> LayerNorm -> Dense (zero bias) -> Dense (zero kernel, no
  bias): decayed and excluded variables, zero-initialised ones of both."""
  inputs = keras.Input((5,), dtype=dtype)
  h = keras.layers.Dense(4, name="dense", bias_initializer="random_normal",
                         dtype=dtype)(inputs)
  h = keras.layers.LayerNormalization(
      name="LayerNorm", gamma_initializer="random_normal",
      beta_initializer="random_normal", dtype=dtype)(h)
  h = keras.layers.Dense(3, name="out", dtype=dtype)(h)
  h = keras.layers.Dense(2, name="zero_init", use_bias=False,
                         kernel_initializer="zeros", dtype=dtype)(h)
  return keras.Model(inputs, h)


def _gradients(names, shapes, seed=0):
  """STEPS steps of fixed random gradients, by variable name; every other
  step's global norm is far above the clipping norm 1.0, the others below."""
  rng = np.random.default_rng(seed)
  return [{n: rng.normal(0, 1.0 if t % 2 else 0.02, shapes[n]) for n in names}
          for t in range(STEPS)]


def _run_rule(name, dtype, steps=STEPS, model=None, optimizer=None):
  """(initial, final weights by path, the NumPy port's final weights)."""
  keras.utils.set_random_seed(1)
  model = model or _dense_layer_norm_model(dtype)
  variables = model.trainable_variables
  names = [v.path for v in variables]
  initial = {v.path: v.numpy().astype(np.float64) for v in variables}
  optimizer = optimizer or optimization.create_optimizer(
      name, optimization.WarmupPolynomialDecay(PEAK_LR, TOTAL, WARMUP))
  params, slots = dict(initial), {}
  for t, grads in enumerate(_gradients(names, {n: initial[n].shape
                                               for n in names})[:steps]):
    optimizer.apply([tf.constant(grads[n], dtype) for n in names], variables)
    ref.original_step(params, grads, slots,
                      ref.original_lr(t, PEAK_LR, TOTAL, WARMUP),
                      name.replace("keras_", ""))
  final = {v.path: v.numpy().astype(np.float64) for v in variables}
  return initial, final, params


def _change_error(initial, final, expected):
  """Per variable: |our change - the port's change| / |the port's change|."""
  return {n: np.linalg.norm((final[n] - initial[n]) -
                            (expected[n] - initial[n])) /
          np.linalg.norm(expected[n] - initial[n]) for n in initial}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", ["lamb", "adamw"])
def test_original_rule_matches_the_numpy_port_over_20_steps(name, dtype):
  initial, final, expected = _run_rule(name, dtype)
  assert set(initial) == {
      "dense/kernel", "dense/bias", "LayerNorm/gamma", "LayerNorm/beta",
      "out/kernel", "out/bias", "zero_init/kernel"}
  assert not initial["out/bias"].any() and not initial[
      "zero_init/kernel"].any()
  errors = _change_error(initial, final, expected)
  for path, error in errors.items():
    assert error <= 1e-6, (path, error)
    assert np.linalg.norm(expected[path] - initial[path]) > 0.05, path


@pytest.mark.parametrize("name", ["keras_lamb", "keras_adamw"])
def test_keras_rules_are_not_the_original(name):
  """The comparison above tells the rules apart: Keras's bias correction,
  decoupled decay and adapted LayerNorm/bias steps put every variable 1e4
  times beyond its tolerance (LAMB's trust ratio hides most of the bias
  correction on decayed kernels: about 1% there), some by most of the step."""
  initial, final, expected = _run_rule(name, "float64")
  errors = _change_error(initial, final, expected)
  assert min(errors.values()) > 1e-2, errors
  assert max(errors.values()) > 0.5, errors


def test_lamb_excludes_layer_norm_and_bias_from_decay_and_adaptation():
  """One step from zero moments with gradient g and lr: |u| = 1/(1 + eps/|g|)
  per element for every variable; decayed ones add 0.01 w, adapted ones
  are scaled to |w| (hand-worked, not the port)."""
  model = _dense_layer_norm_model("float64")
  variables = model.trainable_variables
  before = {v.path: v.numpy() for v in variables}
  lr, g = 0.1, 1e-3  # global norm < 1: no clipping
  opt = optimization.create_optimizer("lamb", lr)
  opt.apply([tf.fill(v.shape, tf.constant(g, "float64")) for v in variables],
            variables)
  step_u = 0.1 * g / (np.sqrt(0.001) * g + 1e-6)  # m / (sqrt(v) + eps)
  for v in variables:
    w, delta = before[v.path], before[v.path] - v.numpy()
    if v.path.endswith(("bias", "gamma", "beta")):  # excluded: plain step
      np.testing.assert_allclose(delta, lr * step_u, rtol=1e-7, err_msg=v.path)
    elif not w.any():  # |w| = 0: ratio 1, the decay term is 0
      np.testing.assert_allclose(delta, lr * step_u, rtol=1e-7)
    else:  # decayed, then scaled to lr * |w|
      u = step_u + 0.01 * w
      np.testing.assert_allclose(
          delta, lr * u * np.linalg.norm(w) / np.linalg.norm(u), rtol=1e-7,
          err_msg=v.path)


def test_exclusions_given_by_variable_cover_other_names():
  """A LayerNorm whose name the patterns miss, excluded by object."""
  inputs = keras.Input((3,))
  norm = keras.layers.LayerNormalization(name="norm", gamma_initializer="ones")
  model = keras.Model(inputs, norm(keras.layers.Dense(3, name="d")(inputs)))
  opt = optimization.create_optimizer("adamw", 0.5)
  optimization.exclude_layer_norm_and_bias(opt, model)
  variables = model.trainable_variables
  before = {v.path: v.numpy() for v in variables}
  opt.apply([np.zeros(v.shape, "float32") for v in variables], variables)
  np.testing.assert_array_equal(norm.gamma.numpy(), 1.0)  # not decayed
  np.testing.assert_allclose(model.get_layer("d").kernel.numpy(),
                             before["d/kernel"] * (1 - 0.5 * 0.01), rtol=1e-6)


@pytest.mark.parametrize("name", ["lamb", "adamw"])
def test_loss_scaling_gives_the_same_steps(name):
  """Under float16 loss scaling the optimizer sees the unscaled gradients."""
  scaled = keras.optimizers.LossScaleOptimizer(
      optimization.create_optimizer(
          name, optimization.WarmupPolynomialDecay(PEAK_LR, TOTAL, WARMUP)),
      initial_scale=2.0 ** 10)
  model = _dense_layer_norm_model("float32")
  keras.utils.set_random_seed(1)
  initial = {v.path: v.numpy().astype(np.float64)
             for v in model.trainable_variables}
  variables = model.trainable_variables
  names = [v.path for v in variables]
  params, slots = dict(initial), {}
  for t, grads in enumerate(_gradients(names, {n: initial[n].shape
                                               for n in names})):
    scaled.apply([tf.constant(grads[n] * 2.0 ** 10, "float32")
                  for n in names], variables)
    ref.original_step(params, grads, slots,
                      ref.original_lr(t, PEAK_LR, TOTAL, WARMUP), name)
  final = {v.path: v.numpy().astype(np.float64) for v in variables}
  for path, error in _change_error(initial, final, params).items():
    assert error <= 1e-6, (path, error)


@pytest.mark.parametrize("name", ["lamb", "adamw"])
def test_resumed_from_a_checkpoint_the_trajectory_is_the_same(name, tmp_path):
  """10 steps, save weights + optimizer variables, restore into fresh
  objects, 10 more: bit-exact with 20 steps in one go."""
  _, straight, _ = _run_rule(name, "float32")

  def fresh():
    keras.utils.set_random_seed(1)
    model = _dense_layer_norm_model("float32")
    opt = optimization.create_optimizer(
        name, optimization.WarmupPolynomialDecay(PEAK_LR, TOTAL, WARMUP))
    opt.build(model.trainable_variables)
    ckpt = tf.train.Checkpoint(model=model, optimizer=tf.train.Checkpoint(
        variables=list(opt.variables)))
    return model, opt, ckpt

  model, opt, ckpt = fresh()
  variables = model.trainable_variables
  names = [v.path for v in variables]
  grads = _gradients(names, {v.path: tuple(v.shape) for v in variables})
  for t in range(10):
    opt.apply([tf.constant(grads[t][n], "float32") for n in names], variables)
  prefix = ckpt.write(str(tmp_path / "ckpt"))
  assert [v.name for v in opt.variables if "adam_m" in v.name]

  model, opt, ckpt = fresh()
  ckpt.read(prefix).assert_consumed()
  assert int(opt.iterations.numpy()) == 10
  variables = model.trainable_variables
  for t in range(10, STEPS):
    opt.apply([tf.constant(grads[t][n], "float32") for n in names], variables)
  for v in variables:
    np.testing.assert_array_equal(v.numpy(), straight[v.path], err_msg=v.path)


@pytest.mark.parametrize("name", ["lamb", "adamw"])
def test_embedding_gradients_are_clipped_and_applied_as_dense(name):
  """A lookup's gradient comes as IndexedSlices with a slice per token; the
  rule is defined on the dense gradient (repeated rows summed), for the
  global norm and the moments alike."""
  table = np.random.default_rng(2).normal(0, 1, (6, 3))
  embedding = keras.layers.Embedding(6, 3, name="word_embeddings",
                                     dtype="float64")
  embedding.build()
  embedding.embeddings.assign(table)
  ids = np.array([[1, 1, 1, 4], [1, 2, 4, 1]])
  coefficients = np.random.default_rng(3).normal(0, 1, ids.shape + (3,))
  optimizer = optimization.create_optimizer(name, 0.1)
  params, slots = {"word_embeddings/embeddings": table.copy()}, {}
  for t in range(3):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(embedding(ids) * coefficients * (t + 1))
    grad, = tape.gradient(loss, [embedding.embeddings])
    assert isinstance(grad, tf.IndexedSlices)
    optimizer.apply([grad], [embedding.embeddings])
    dense = np.zeros_like(table)  # d loss / d table: rows summed per id
    np.add.at(dense, ids.reshape(-1), coefficients.reshape(-1, 3) * (t + 1))
    ref.original_step(params, {"word_embeddings/embeddings": dense}, slots,
                      0.1, name)
  np.testing.assert_allclose(embedding.embeddings.numpy(),
                             params["word_embeddings/embeddings"], rtol=1e-6)


_MIRRORED_STEPS = """
import json, numpy as np, tensorflow as tf, keras
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from albert_tf.training import optimization
from tests import numpy_reference as ref
from tests import test_optimization as t
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
errors = {}
for name in ("lamb", "adamw"):
  with strategy.scope():
    keras.utils.set_random_seed(1)
    model = t._dense_layer_norm_model("float32")
    opt = optimization.create_optimizer(name, optimization.WarmupPolynomialDecay(
        t.PEAK_LR, t.TOTAL, t.WARMUP))
    opt.build(model.trainable_variables)
  variables = model.trainable_variables
  names = [v.path for v in variables]
  initial = {v.path: v.numpy().astype(np.float64) for v in variables}
  params, slots = dict(initial), {}

  @tf.function
  def step(grads):
    ctx = tf.distribute.get_replica_context
    # Replica r holds (r + 1) / 3 of the batch's gradient: the all-reduce
    # adds them up to the whole.
    strategy.run(lambda gs: opt.apply(
        [g * tf.cast(ctx().replica_id_in_sync_group + 1, g.dtype) / 3
         for g in gs], variables), args=(grads,))

  for i, grads in enumerate(t._gradients(names, {n: initial[n].shape
                                                 for n in names})):
    step([tf.constant(grads[n], "float32") for n in names])
    ref.original_step(params, grads, slots,
                      ref.original_lr(i, t.PEAK_LR, t.TOTAL, t.WARMUP), name)
  final = {v.path: v.numpy().astype(np.float64) for v in variables}
  errors[name] = {k: float(e) for k, e in t._change_error(
      initial, final, params).items()}
print(json.dumps(errors))
"""


@pytest.mark.slow
def test_under_mirrored_the_whole_batch_gradient_is_clipped():
  """Two replicas holding unequal shares of each step's gradient (whose
  global norm is 50x the clip norm every other step) update as one device
  does: clipped after the all-reduce, not each share before it."""
  import json  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, "-c", _MIRRORED_STEPS], cwd=root, capture_output=True,
      text=True, timeout=300, env=dict(os.environ, PYTHONPATH=root,
                                       TF_CPP_MIN_LOG_LEVEL="2"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  errors = json.loads(proc.stdout.strip().splitlines()[-1])
  for name, per_variable in errors.items():
    assert len(per_variable) == 7
    for path, error in per_variable.items():
      assert error <= 1e-6, (name, path, error)
