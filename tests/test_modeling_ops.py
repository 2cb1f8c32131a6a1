"""The closed-form LayerNorm and cross-entropy gradients against TF's own.

`layer_norm` and `softmax_cross_entropy` replace TF's derivative of their
forward ops with a closed form for speed. The references here are other
code: NumPy for the forward values, TF's autodiff of
keras.ops.layer_normalization and tf.nn.sparse_softmax_cross_entropy_with_logits
for the gradients.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling import ops


def _norm(width, epsilon=1e-12, seed=0):
  norm = keras.layers.LayerNormalization(epsilon=epsilon, dtype="float32")
  norm.build((None, width))
  rng = np.random.default_rng(seed)
  norm.gamma.assign(1.0 + 0.3 * rng.standard_normal(width).astype("float32"))
  norm.beta.assign(0.3 * rng.standard_normal(width).astype("float32"))
  return norm


def _grads(fn, x, variables, dy):
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = fn(x)
    loss = tf.reduce_sum(tf.cast(y, tf.float32) * dy)
  return y, tape.gradient(loss, [x] + variables)


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 16)])
def test_layer_norm_matches_numpy_and_keras_gradients(shape):
  norm = _norm(shape[-1])
  rng = np.random.default_rng(1)
  x = tf.constant(3.0 + 2.0 * rng.standard_normal(shape), tf.float32)
  dy = tf.constant(rng.standard_normal(shape), tf.float32)
  variables = [norm.gamma.value, norm.beta.value]

  y, grads = _grads(lambda t: ops.layer_norm(norm, t), x, variables, dy)
  xs = x.numpy().astype(np.float64)
  expect = ((xs - xs.mean(-1, keepdims=True))
            / np.sqrt(xs.var(-1, keepdims=True) + 1e-12)
            * norm.gamma.numpy() + norm.beta.numpy())
  np.testing.assert_allclose(y.numpy(), expect, atol=1e-5, rtol=1e-5)

  def keras_ln(t):
    return keras.ops.layer_normalization(t, variables[0], variables[1],
                                         epsilon=1e-12)
  _, want = _grads(keras_ln, x, variables, dy)
  for got, ref, name in zip(grads, want, ["x", "gamma", "beta"]):
    scale = float(np.max(np.abs(ref.numpy())))
    np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-5 * scale,
                               rtol=0, err_msg=name)


def test_layer_norm_bfloat16_input_keeps_its_dtype_and_float32_statistics():
  norm = _norm(32)
  rng = np.random.default_rng(2)
  x32 = tf.constant(100.0 + rng.standard_normal((4, 32)), tf.float32)
  y = ops.layer_norm(norm, tf.cast(x32, tf.bfloat16))
  assert y.dtype == tf.bfloat16
  # Statistics in bfloat16 would lose the unit spread at a mean of 100
  # (bfloat16's step there is 0.5); in float32 the result is the float32
  # one rounded once.
  ref = ops.layer_norm(norm, tf.cast(tf.cast(x32, tf.bfloat16), tf.float32))
  np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), ref.numpy(),
                             atol=0.02 * float(np.max(np.abs(ref.numpy()))))


def test_layer_norm_on_another_axis_is_keras_own():
  norm = keras.layers.LayerNormalization(axis=0, epsilon=1e-6)
  norm.build((3, 4))
  x = tf.constant(np.arange(12, dtype="float32").reshape(3, 4) ** 1.5)
  np.testing.assert_allclose(ops.layer_norm(norm, x).numpy(),
                             norm(x).numpy(), atol=1e-6)


@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_softmax_cross_entropy_matches_tf_values_and_gradients(shape):
  vocab = 50
  rng = np.random.default_rng(3)
  logits = tf.constant(4.0 * rng.standard_normal(shape + (vocab,)), tf.float32)
  labels = tf.constant(rng.integers(0, vocab, shape), tf.int32)
  weights = tf.constant(rng.standard_normal(shape), tf.float32)

  def run(fn):
    with tf.GradientTape() as tape:
      tape.watch(logits)
      per_row = fn(labels, logits)
      loss = tf.reduce_sum(per_row * weights)
    return per_row, tape.gradient(loss, logits)

  got, got_grad = run(ops.softmax_cross_entropy)
  want, want_grad = run(tf.nn.sparse_softmax_cross_entropy_with_logits)
  x = logits.numpy().astype(np.float64)
  lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
  picked = np.take_along_axis(x, labels.numpy()[..., None], -1)[..., 0]
  np.testing.assert_allclose(got.numpy(), lse - picked, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got_grad.numpy(), want_grad.numpy(), atol=1e-6)


def test_softmax_cross_entropy_is_finite_far_from_the_label():
  logits = tf.constant([[0.0, 200.0, -200.0]])
  loss = ops.softmax_cross_entropy(tf.constant([2]), logits)
  np.testing.assert_allclose(loss.numpy(), [400.0], rtol=1e-6)


def _dense(units, width, seed):
  dense = keras.layers.Dense(units, dtype="float32")
  dense.build((None, width))
  rng = np.random.default_rng(seed)
  dense.kernel.assign(0.2 * rng.standard_normal((width, units)))
  dense.bias.assign(rng.standard_normal(units))
  return dense


def test_fused_residual_layer_norm_matches_keras_ops_and_autodiff():
  """The fused (XLA) bias + residual + LayerNorm against Keras's composite
  ops and TF's autodiff of them: values and every gradient."""
  norm, dense = _norm(16, seed=2), _dense(16, 24, seed=3)
  rng = np.random.default_rng(4)
  rows = tf.constant(rng.standard_normal((10, 16)), tf.float32)
  x = tf.constant(rng.standard_normal((10, 24)), tf.float32)
  dy = tf.constant(rng.standard_normal((10, 16)), tf.float32)
  variables = [dense.kernel.value, dense.bias.value, norm.gamma.value,
               norm.beta.value]

  def run(fn):
    with tf.GradientTape() as tape:
      tape.watch([rows, x])
      y = fn()
      loss = tf.reduce_sum(y * dy)
    return y, tape.gradient(loss, [rows, x] + variables)

  fused, fused_grads = run(lambda: ops.residual_layer_norm(
      norm, rows, dense, x, fused=True))
  ref, ref_grads = run(lambda: keras.ops.layer_normalization(
      rows + keras.ops.matmul(x, variables[0]) + variables[1], variables[2],
      variables[3], epsilon=1e-12))
  np.testing.assert_allclose(fused.numpy(), ref.numpy(), atol=2e-5, rtol=0)
  names = ["rows", "x", "kernel", "bias", "gamma", "beta"]
  for got, want, name in zip(fused_grads, ref_grads, names):
    scale = float(np.max(np.abs(want.numpy())))
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5 * scale,
                               rtol=0, err_msg=name)
  # Unfused, the function is those composite ops.
  plain, _ = run(lambda: ops.residual_layer_norm(norm, rows, dense, x,
                                                 fused=False))
  np.testing.assert_allclose(plain.numpy(), ref.numpy(), atol=2e-5, rtol=0)


def test_fused_residual_layer_norm_on_bfloat16_rounds_once():
  """bfloat16 rows: float32 statistics, a bfloat16 result within one
  bfloat16 rounding of the float32 one, bfloat16 gradients for the rows."""
  norm, dense = _norm(16, seed=5), _dense(16, 16, seed=6)
  rng = np.random.default_rng(7)
  rows32 = tf.constant(rng.standard_normal((8, 16)), tf.float32)
  x32 = tf.constant(rng.standard_normal((8, 16)), tf.float32)
  rows, x = tf.cast(rows32, tf.bfloat16), tf.cast(x32, tf.bfloat16)
  with tf.GradientTape() as tape:
    tape.watch(rows)
    y = ops.residual_layer_norm(norm, rows, dense, x, fused=True)
  drows = tape.gradient(y, rows)
  assert y.dtype == drows.dtype == tf.bfloat16
  # The float32 result from the same bfloat16 MatMul output. The MatMul is
  # TF's, not ours, and its bfloat16 accumulation depends on the CPU: on an
  # AVX2-only AMD EPYC it differs from one rounding of the float32 product
  # by up to 50x the bound below. What is checked is what follows it.
  out = tf.cast(tf.matmul(x, tf.cast(dense.kernel, tf.bfloat16)), tf.float32)
  want = keras.ops.layer_normalization(
      tf.cast(rows, tf.float32) + out + dense.bias.value, norm.gamma.value,
      norm.beta.value, epsilon=1e-12).numpy()
  got = tf.cast(y, tf.float32).numpy()
  np.testing.assert_array_less(np.abs(got - want),
                               2.0 ** -8 * np.maximum(np.abs(want), 1e-2))


def test_exact_gelu_is_written_with_erf_and_matches_the_definition():
  """BERT's "gelu" (gelu_exact here): 0.5 x (1 + erf(x / sqrt 2)) to
  float32 rounding, checked against Python's math.erf in float64, and
  written with Erf, not Erfc (ONNX has no Erfc: an .onnx with one does
  not load in ONNX Runtime)."""
  import math
  x = np.concatenate([np.linspace(-12, 12, 481), [-40.0, 0.0, 40.0]]
                     ).astype(np.float32)
  expected = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2)))
                       for v in x.astype(np.float64)])
  gelu = ops.get_activation("gelu_exact")
  got = gelu(tf.constant(x)).numpy()
  np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)
  graph = tf.function(gelu).get_concrete_function(
      tf.TensorSpec([None], tf.float32)).graph.as_graph_def()
  kinds = {node.op for node in graph.node}
  assert "Erf" in kinds and "Erfc" not in kinds, kinds
