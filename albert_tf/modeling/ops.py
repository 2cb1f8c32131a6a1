"""Shared ops of the layers: initializer, float32 LayerNorm, activations."""

import keras
import tensorflow as tf


def truncated_normal(stddev):
  return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(norm, x):
  """`norm` (a built LayerNormalization) applied to x; returns x's dtype.

  The statistics and the normalization run in float32 whatever x's dtype,
  and the result is rounded to x's dtype once. Calling a float32
  LayerNormalization layer on a bfloat16 x gives the same values but then
  casts them to float32, its compute dtype, and the caller back to bfloat16:
  two full-size casts that change nothing.

  The gradient is the closed form (`_normalize_last_axis`), not TF's
  derivative of keras.ops.layer_normalization's ops: on CPU a training step
  of the demo's model spends a fifth of its op time in LayerNorm, and the
  closed form takes 0.60 ms against 0.83 ms for a forward and backward pass
  of a [2048, 128] float32 input (benchmarks/README.md, "Pretraining on a
  CPU"). Values agree to float32 rounding (tests/test_modeling_ops.py).
  """
  with tf.name_scope(norm.name):  # the layer's name in graphs and profiles
    axis = norm.axis if isinstance(norm.axis, int) else tuple(norm.axis)
    if axis not in (-1, len(x.shape) - 1, (-1,), (len(x.shape) - 1,)):
      return keras.ops.layer_normalization(
          x, norm.gamma, norm.beta, axis=norm.axis, epsilon=norm.epsilon)
    return _normalize_last_axis(x, tf.convert_to_tensor(norm.gamma),
                                tf.convert_to_tensor(norm.beta),
                                float(norm.epsilon))


def _normalize_last_axis(x, gamma, beta, epsilon):
  """LayerNorm over the last axis in float32, with its closed-form gradient:
  for xhat = (x - mean) * inv and g = dy * gamma,
  dx = inv * (g - mean(g) - xhat * mean(g * xhat)),
  dgamma = sum(dy * xhat), dbeta = sum(dy) over all but the last axis."""

  @tf.custom_gradient
  def normalize(x, gamma, beta):
    xf = tf.cast(x, tf.float32)
    centered = xf - tf.reduce_mean(xf, axis=-1, keepdims=True)
    inv = tf.math.rsqrt(
        tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    xhat = centered * inv
    y = tf.cast(xhat * gamma + beta, x.dtype)

    def grad(dy):
      dyf = tf.cast(dy, tf.float32)
      rows = list(range(len(dy.shape) - 1))
      g = dyf * gamma
      dx = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                  - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
      return (tf.cast(dx, x.dtype), tf.reduce_sum(dyf * xhat, axis=rows),
              tf.reduce_sum(dyf, axis=rows))

    return y, grad

  return normalize(x, gamma, beta)


def softmax_cross_entropy(labels, logits):
  """Per-row cross entropy of float32 logits [..., V] against int labels [...],
  as tf.nn.sparse_softmax_cross_entropy_with_logits, with its gradient
  softmax(logits) - one_hot(labels) formed from a tf.nn.softmax.

  On CPU TF's fused sparse cross entropy is slow over a large vocabulary:
  with the MLM head's [320, 8000] logits it took 5.8 ms for a forward and
  backward pass (with the accuracy's argmax), against 2.8 ms here (oneDNN's
  softmax), a tenth of the demo model's training step (benchmarks/README.md,
  "Pretraining on a CPU"). Labels must be in [0, V).
  """
  vocab = logits.shape[-1]
  labels = tf.convert_to_tensor(labels)

  # labels is an input, not captured by `grad`: a captured tensor is not fed
  # to the gradient when the step runs in a replica's branch (tf.distribute
  # over logical CPUs failed with "You must feed a value for placeholder").
  @tf.custom_gradient
  def cross_entropy(logits, labels):
    probs = tf.nn.softmax(logits)
    picked = tf.gather(logits, labels, batch_dims=len(labels.shape))
    loss = tf.reduce_logsumexp(logits, axis=-1) - picked

    def grad(dloss):
      one_hot = tf.one_hot(labels, vocab, dtype=probs.dtype)
      return dloss[..., tf.newaxis] * (probs - one_hot), None

    return loss, grad

  return cross_entropy(logits, labels)


def dense_rows(dense, x):
  """A built Keras Dense (no activation) on rows x [n, in]: MatMul, BiasAdd.

  The Transformer sub-layers work on [batch * seq, width] rows. A Dense on
  a [batch, seq, width] input runs tf.tensordot in Keras's TensorFlow
  backend: about a dozen shape ops (Shape, GatherV2, Prod, Pack, ConcatV2,
  Reshape) around each MatMul and a broadcast AddV2 for the bias. On rows,
  the albert_tiny classifier graph has 420 ops instead of 528, and its
  exported serving_default is 1-5% faster at batch 1 (benchmarks/README.md,
  "Serving latency"; the MatMuls are two thirds of its time there). The
  weights are cast to x's dtype, as Keras autocasts them under mixed
  precision (a no-op in float32).
  """
  if dense.activation is not keras.activations.linear:
    raise ValueError(f"dense_rows runs no activation; {dense.name} has "
                     f"{dense.activation.__name__}")
  y = tf.matmul(x, tf.cast(dense.kernel, x.dtype))
  if dense.bias is not None:
    y = tf.nn.bias_add(y, tf.cast(dense.bias, x.dtype))
  return y


def get_activation(name):
  """Activation by original config name; "gelu" is the tanh approximation."""
  if name in ("gelu", "gelu_new"):
    return lambda x: keras.activations.gelu(x, approximate=True)
  if name in ("gelu_exact", "gelu_python"):
    return lambda x: keras.activations.gelu(x, approximate=False)
  if name in ("relu", "tanh", "linear"):
    return keras.activations.get(name)
  raise ValueError(f"Unknown hidden_act {name!r}")
