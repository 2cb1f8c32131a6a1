"""Shared ops of the layers: initializer, float32 LayerNorm, activations."""

import functools

import keras
import tensorflow as tf


class ConfigArgs:
  """Mixin of a layer whose config is its constructor arguments named in
  `CONFIG_ARGS`, which `keep_args(locals())` stores as attributes."""
  CONFIG_ARGS = ()

  def keep_args(self, args):
    for name in self.CONFIG_ARGS:
      setattr(self, name, args[name])

  def get_config(self):
    return {**super().get_config(),
            **{name: getattr(self, name) for name in self.CONFIG_ARGS}}

  # The arguments whose AlbertConfig field has another name.
  _CONFIG_FIELDS = {"dropout_rate": "hidden_dropout_prob",
                    "attention_dropout_rate": "attention_probs_dropout_prob"}

  @classmethod
  def from_albert_config(cls, config, **kwargs):
    """The layer of an AlbertConfig: CONFIG_ARGS from its fields."""
    return cls(**{name: getattr(config, cls._CONFIG_FIELDS.get(name, name))
                  for name in cls.CONFIG_ARGS}, **kwargs)


def truncated_normal(stddev):
  return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(norm, x):
  """`norm` (a built LayerNormalization) applied to x; returns x's dtype.

  Statistics and normalization in float32, rounded to x's dtype once (the
  float32 layer itself, on bfloat16 x, adds two full-size casts). The
  gradient is the closed form (`_normalize_last_axis`): 0.60 ms against
  0.83 ms for TF's derivative of keras.ops.layer_normalization, forward and
  backward of a [2048, 128] float32 input on CPU, where LayerNorm is a
  fifth of a small model's step (benchmarks/README.md, "Pretraining on a
  CPU"); values agree to float32 rounding (tests/test_modeling_ops.py).
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


def residual_layer_norm(norm, rows, dense, x, fused):
  """LayerNorm(rows + dense(x)) of a post-LN sub-layer, on [n, width] rows
  (`dense`: a built Dense without activation, on x [n, in]).

  With `fused` (training, or a bfloat16 model) the bias add, the residual
  add and the LayerNorm run as one XLA loop each way, in float32, around
  the MatMul (`_fused_residual_norm`): on CPU these element-wise ops are a
  fifth of a small model's step (benchmarks/README.md, "Pretraining on a
  CPU"). Otherwise the ops a float32 export is converted from. Both agree
  to rounding (tests/test_modeling_ops.py).
  """
  if not fused:
    return layer_norm(norm, rows + dense_rows(dense, x))
  with tf.name_scope(norm.name):
    return _fused_residual_norm(float(norm.epsilon))(
        rows, tf.matmul(x, tf.cast(dense.kernel, x.dtype)),
        tf.convert_to_tensor(dense.bias), tf.convert_to_tensor(norm.gamma),
        tf.convert_to_tensor(norm.beta))


@functools.lru_cache(maxsize=None)
def _fused_residual_norm(epsilon):
  """y = LayerNorm(rows + out + bias) over the last axis of [n, width],
  forward and closed-form backward (`_normalize_last_axis`) as one XLA
  computation each; the bias's gradient is the sum of the sum's."""

  @tf.function(jit_compile=True, autograph=False)
  def forward(rows, out, bias, gamma, beta):
    total = (tf.cast(rows, tf.float32) + tf.cast(out, tf.float32)
             + tf.cast(bias, tf.float32))
    centered = total - tf.reduce_mean(total, axis=-1, keepdims=True)
    inv = tf.math.rsqrt(
        tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    xhat = centered * inv
    return tf.cast(xhat * gamma + beta, rows.dtype), xhat, inv

  @tf.function(jit_compile=True, autograph=False)
  def backward(dy, xhat, inv, gamma, rows, bias):
    # rows and bias give the gradients' dtypes (a Dense's bias reads as
    # bfloat16 in a bfloat16 layer: its gradient is rounded here, once).
    dyf = tf.cast(dy, tf.float32)
    g = dyf * gamma
    dtotal = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                    - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
    return (tf.cast(dtotal, rows.dtype),
            tf.cast(tf.reduce_sum(dtotal, axis=0), bias.dtype),
            tf.reduce_sum(dyf * xhat, axis=0), tf.reduce_sum(dyf, axis=0))

  @tf.custom_gradient
  def normalize(rows, out, bias, gamma, beta):
    y, xhat, inv = forward(rows, out, bias, gamma, beta)

    def grad(dy):
      drows, dbias, dgamma, dbeta = backward(dy, xhat, inv, gamma, rows, bias)
      return drows, tf.cast(drows, out.dtype), dbias, dgamma, dbeta

    return y, grad

  return normalize


def softmax_cross_entropy(labels, logits):
  """Per-row cross entropy of float32 logits [..., V] against int labels [...],
  as tf.nn.sparse_softmax_cross_entropy_with_logits, with its gradient
  softmax(logits) - one_hot(labels) formed from a tf.nn.softmax.

  On CPU TF's fused sparse cross entropy is slow over a large vocabulary:
  with the MLM head's [320, 8000] logits it took 5.8 ms for a forward and
  backward pass (with the accuracy's argmax), against 2.8 ms here (oneDNN's
  softmax), a tenth of the demo model's training step (benchmarks/README.md,
  "Pretraining on a CPU"). The softmax is the only exp over [..., V]: the
  log-sum-exp is max(logits) - log(max(probs)), exact since the largest
  probability is at least 1/V, and the gradient subtracts 1 at the labels
  in place of a one-hot [..., V] tensor. Labels must be in [0, V).
  """
  vocab = logits.shape[-1]
  labels = tf.convert_to_tensor(labels)

  # labels is an input, not captured by `grad`: a captured tensor is not fed
  # to the gradient when the step runs in a replica's branch (tf.distribute
  # over logical CPUs failed with "You must feed a value for placeholder").
  @tf.custom_gradient
  def cross_entropy(logits, labels):
    rows = tf.reshape(logits, [-1, vocab])
    flat_labels = tf.reshape(labels, [-1])
    probs = tf.nn.softmax(rows)
    picked = tf.gather(rows, flat_labels, batch_dims=1)
    log_sum_exp = (tf.reduce_max(rows, axis=-1)
                   - tf.math.log(tf.reduce_max(probs, axis=-1)))
    loss = tf.reshape(log_sum_exp - picked, tf.shape(labels))

    def grad(dloss):
      dloss = tf.reshape(dloss, [-1])
      at_labels = tf.stack([tf.range(tf.size(flat_labels)), flat_labels], 1)
      drows = tf.tensor_scatter_nd_sub(dloss[:, tf.newaxis] * probs,
                                       at_labels, dloss)
      return tf.reshape(drows, tf.shape(logits)), None

    return loss, grad

  return cross_entropy(logits, labels)


def dense_rows(dense, x):
  """A built Keras Dense (no activation) on rows x [n, in]: MatMul, BiasAdd,
  the weights cast to x's dtype (as Keras autocasts them).

  On [batch, seq, width] a Dense runs tf.tensordot, a dozen shape ops
  around each MatMul; on rows the albert_tiny classifier graph has 420 ops
  instead of 528, and its serving_default is 1-5% faster at batch 1
  (benchmarks/README.md, "Serving latency").
  """
  if dense.activation is not keras.activations.linear:
    raise ValueError(f"dense_rows runs no activation; {dense.name} has "
                     f"{dense.activation.__name__}")
  y = tf.matmul(x, tf.cast(dense.kernel, x.dtype))
  if dense.bias is not None:
    y = tf.nn.bias_add(y, tf.cast(dense.bias, x.dtype))
  return y


def gelu_erf(x):
  """The exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as BERT's "gelu".

  Written with erf, not as tf.nn.gelu(approximate=False) writes it (with
  erfc): ONNX has Erf (opset 9 on) and no Erfc, so tf2onnx leaves an Erfc
  node that ONNX Runtime refuses to load. The two differ only where
  1 + erf(x / sqrt 2) rounds near 0 (x < about -5), where the product is
  below 1e-6 in absolute value either way.
  """
  return 0.5 * x * (1.0 + keras.ops.erf(x * 0.7071067811865476))


def get_activation(name):
  """Activation by original config name; "gelu" is the tanh approximation."""
  if name in ("gelu", "gelu_new"):
    return lambda x: keras.activations.gelu(x, approximate=True)
  if name in ("gelu_exact", "gelu_python"):
    return gelu_erf
  if name in ("relu", "tanh", "linear"):
    return keras.activations.get(name)
  raise ValueError(f"Unknown hidden_act {name!r}")
