"""The post-LayerNorm Transformer block of the original ALBERT modeling.py.

    x = LayerNorm(x + Dropout(SelfAttention(x)))        # sub-layer "attention_1"
    x = LayerNorm_1(x + Dropout(FFN(x)))                # sub-layer "ffn_1"

The two sub-layers are separate Keras layers so that the encoder can share
either one across layers (the paper's Table 4 ablation) or both (ALBERT).

Under a mixed precision policy the residual stream between the sub-layers
stays in the compute dtype (bfloat16). LayerNorm statistics and the softmax
run in float32, with one cast in and one cast out each; the other casts are
of the weights, once per call or per pass (`layer_norm` and `SelfAttention`
say which casts they avoid).
"""

import contextlib
import math
import threading

import keras
import tensorflow as tf

from albert_tf.modeling.ops import (ConfigArgs, dense_rows, get_activation,
                                    layer_norm, residual_layer_norm,
                                    truncated_normal)

# Masked attention logits get this bias, as in the original code.
MASK_BIAS = -10000.0


# GELU (tanh form) of x + bias, with a fused gradient: neither Keras nor TF
# fuses GELU's backward pass on CPU (about ten full-size elementwise kernels,
# and one more pass for the bias). Forward and backward each run as one XLA
# loop, bias add included, several times faster on CPU (benchmarks/README.md,
# "Training step"); bfloat16 is computed on in float32 inside the loop, as
# XLA's CPU bfloat16 arithmetic is about half as fast ("bfloat16 graph").
_GELU_C = math.sqrt(2.0 / math.pi)


@tf.function(jit_compile=True, autograph=False)
def _gelu_tanh_forward(x, bias):
  y = tf.cast(x, tf.float32) + tf.cast(bias, tf.float32)
  return tf.cast(0.5 * y * (1.0 + tf.tanh(_GELU_C * (y + 0.044715 * y * y * y))),
                 x.dtype)


@tf.function(jit_compile=True, autograph=False)
def _gelu_tanh_backward(x, bias, dy):
  y = tf.cast(x, tf.float32) + tf.cast(bias, tf.float32)
  g = tf.cast(dy, tf.float32)
  t = tf.tanh(_GELU_C * (y + 0.044715 * y * y * y))
  dx = g * (0.5 * (1.0 + t) + 0.5 * y * (1.0 - t * t) * _GELU_C *
            (1.0 + 3.0 * 0.044715 * y * y))
  rows = list(range(len(dx.shape) - 1))
  return tf.cast(dx, dy.dtype), tf.cast(tf.reduce_sum(dx, axis=rows),
                                        bias.dtype)


@tf.custom_gradient
def fused_gelu_tanh(x, bias):
  """GELU(x + bias), tanh approximation, one XLA loop each way (see the
  note above); bias [width] is added along x's last axis."""
  return (_gelu_tanh_forward(x, bias),
          lambda dy: _gelu_tanh_backward(x, bias, dy))


def attention_bias(input_mask, dtype=tf.float32):
  """[batch, seq] 1/0 mask -> additive bias [batch, 1, 1, seq] of `dtype`."""
  mask = tf.cast(input_mask, dtype)[:, tf.newaxis, tf.newaxis, :]
  return (1.0 - mask) * MASK_BIAS


@keras.saving.register_keras_serializable(package="albert_tf")
class AttentionBias(keras.layers.Layer):
  """Computes the padding bias once per forward pass, shared by every layer.

  The bias comes out in the compute dtype, the dtype the layers take it in:
  a float32 bias would be cast by each of them.
  """

  def call(self, input_mask):
    return attention_bias(input_mask, self.compute_dtype)

  def compute_output_shape(self, input_shape):
    return (input_shape[0], 1, 1, input_shape[1])


@keras.saving.register_keras_serializable(package="albert_tf")
class SelfAttention(ConfigArgs, keras.layers.Layer):
  """Multi-head self-attention + output dense + dropout + residual + LayerNorm.

  Query, key and value keep separate [H, H] kernels (the checkpoint layout)
  but run as one fused [H, 3H] matmul, faster on CPU than three small ones
  (most for the narrow albert_tiny); under mixed precision the kernels are
  concatenated in float32 and cast once. Within `one_fused_qkv()` (one
  forward pass of `AlbertEncoder`) the fused kernel is built once for every
  layer sharing this sub-layer: Grappler cannot merge the L concatenations,
  10% of a 13-token albert_tiny request (`benchmarks.serving_ops`).

  While training, and in a bfloat16 model, the output bias, residual and
  LayerNorm run as one XLA loop each way (`ops.residual_layer_norm`).
  """

  fused_ops = True  # tests turn it off to compare
  CONFIG_ARGS = ("hidden_size", "num_attention_heads", "dropout_rate",
                 "attention_dropout_rate", "initializer_range",
                 "layer_norm_eps")

  def __init__(self, hidden_size, num_attention_heads, dropout_rate=0.0,
               attention_dropout_rate=0.0, initializer_range=0.02,
               layer_norm_eps=1e-12, **kwargs):
    super().__init__(**kwargs)
    if hidden_size % num_attention_heads:
      raise ValueError(f"hidden_size {hidden_size} is not divisible by "
                       f"num_attention_heads {num_attention_heads}")
    self.keep_args(locals())
    self.head_size = hidden_size // num_attention_heads
    self.output_dense = keras.layers.Dense(
        hidden_size, kernel_initializer=truncated_normal(initializer_range),
        dtype=self.dtype_policy, name="output_dense")
    self.attention_dropout = keras.layers.Dropout(attention_dropout_rate)
    self.output_dropout = keras.layers.Dropout(dropout_rate)
    self.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_eps, dtype="float32", name="LayerNorm")
    # Per thread: MirroredStrategy runs each replica's pass in its own.
    self._pass = threading.local()

  @contextlib.contextmanager
  def one_fused_qkv(self):
    """Calls within build the fused kernel once (per graph and dtype)."""
    outer = getattr(self._pass, "memo", None)
    self._pass.memo = {}
    try:
      yield
    finally:
      self._pass.memo = outer

  def build(self, input_shape=None):
    h = self.hidden_size
    init = truncated_normal(self.initializer_range)
    for part in ("query", "key", "value"):
      setattr(self, f"{part}_kernel",
              self.add_weight(name=f"{part}_kernel", shape=(h, h),
                              initializer=init, autocast=False))
      setattr(self, f"{part}_bias",
              self.add_weight(name=f"{part}_bias", shape=(h,),
                              initializer="zeros", autocast=False))
    self.output_dense.build((None, None, h))
    self.layer_norm.build((None, None, h))
    self.built = True

  def call(self, x, bias, training=False):
    dtype = self.compute_dtype
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    n, d = self.num_attention_heads, self.head_size
    memo = getattr(self._pass, "memo", None)
    if memo is None:
      memo = {}
    key = (dtype, None if tf.executing_eagerly() else
           id(tf.compat.v1.get_default_graph()))
    if key not in memo:
      memo[key] = (tf.cast(tf.concat([self.query_kernel, self.key_kernel,
                                      self.value_kernel], axis=1), dtype),
                   tf.cast(tf.concat([self.query_bias, self.key_bias,
                                      self.value_bias], 0), dtype))
    kernel, qkv_bias = memo[key]
    rows = tf.reshape(x, [-1, self.hidden_size])  # [b*s, h]
    qkv = tf.nn.bias_add(tf.matmul(rows, kernel), qkv_bias)
    # [b*s, 3h] -> [3, b, n, s, d]
    qkv = tf.transpose(tf.reshape(qkv, [batch, seq, 3, n, d]), [2, 0, 3, 1, 4])
    # unstack, not qkv[0], qkv[1], qkv[2]: the gradient of three slices is
    # three zero-padded full-size tensors summed (StridedSliceGrad + AddN),
    # that of unstack a single stack.
    q, k, v = tf.unstack(qkv, num=3, axis=0)
    q = q * tf.constant(1.0 / math.sqrt(d), dtype)
    scores = tf.matmul(q, k, transpose_b=True)  # [b, n, s, s]
    # The bias comes in the compute dtype. Adding it before the cast to
    # float32 loses nothing: it is 0 where a position counts, and a padded
    # position gets -1e4 either way (its exp underflows to 0).
    probs = tf.nn.softmax(tf.cast(scores + bias, tf.float32), axis=-1)
    probs = self.attention_dropout(tf.cast(probs, dtype), training=training)
    context = tf.matmul(probs, v)  # [b, n, s, d]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]),
                         [-1, self.hidden_size])
    if self.output_dropout.rate and training:  # v1 configs: dropout 0.1
      out = rows + self.output_dropout(dense_rows(self.output_dense, context),
                                       training=training)
      normed = layer_norm(self.layer_norm, out)
    else:
      normed = residual_layer_norm(
          self.layer_norm, rows, self.output_dense, context,
          fused=self.fused_ops and (training or dtype != tf.float32))
    return tf.reshape(normed, [batch, seq, self.hidden_size])

  def compute_output_shape(self, input_shape):
    return input_shape


@keras.saving.register_keras_serializable(package="albert_tf")
class FeedForward(ConfigArgs, keras.layers.Layer):
  """Dense H->I with activation, dense I->H, dropout, residual, LayerNorm_1."""

  fused_ops = True  # see __init__; tests turn it off to compare
  CONFIG_ARGS = ("hidden_size", "intermediate_size", "hidden_act",
                 "dropout_rate", "initializer_range", "layer_norm_eps")

  def __init__(self, hidden_size, intermediate_size, hidden_act="gelu",
               dropout_rate=0.0, initializer_range=0.02, layer_norm_eps=1e-12,
               **kwargs):
    super().__init__(**kwargs)
    self.keep_args(locals())
    init = truncated_normal(initializer_range)
    self.activation = get_activation(hidden_act)
    # While training, and under mixed precision, the tanh GELU (with its
    # bias) and the residual LayerNorm run fused (fused_gelu_tanh,
    # ops.residual_layer_norm); float32 inference keeps Keras's ops, which
    # keras-hub, the reference tests and the TFLite and ONNX converters see.
    self.gelu_tanh = hidden_act in ("gelu", "gelu_new")
    self.intermediate_dense = keras.layers.Dense(
        intermediate_size,
        kernel_initializer=init, dtype=self.dtype_policy,
        name="intermediate_dense")
    self.output_dense = keras.layers.Dense(
        hidden_size, kernel_initializer=init, dtype=self.dtype_policy,
        name="output_dense")
    self.dropout = keras.layers.Dropout(dropout_rate)
    self.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_eps, dtype="float32", name="LayerNorm_1")

  def build(self, input_shape=None):
    self.intermediate_dense.build((None, None, self.hidden_size))
    self.output_dense.build((None, None, self.intermediate_size))
    self.layer_norm.build((None, None, self.hidden_size))
    self.built = True

  def call(self, x, training=False):
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    rows = tf.reshape(x, [-1, self.hidden_size])  # [b*s, h] (`dense_rows`)
    fuse = self.fused_ops and (training or rows.dtype != tf.float32)
    if fuse and self.gelu_tanh:
      dense = self.intermediate_dense
      hidden = fused_gelu_tanh(tf.matmul(rows, tf.cast(dense.kernel, rows.dtype)),
                               tf.convert_to_tensor(dense.bias))
    else:
      hidden = self.activation(dense_rows(self.intermediate_dense, rows))
    if self.dropout.rate and training:
      out = self.dropout(dense_rows(self.output_dense, hidden),
                         training=training)
      normed = layer_norm(self.layer_norm, rows + out)
    else:
      normed = residual_layer_norm(self.layer_norm, rows, self.output_dense,
                                   hidden, fused=fuse)
    return tf.reshape(normed, [batch, seq, self.hidden_size])

  def compute_output_shape(self, input_shape):
    return input_shape


@keras.saving.register_keras_serializable(package="albert_tf")
class TransformerEncoderBlock(ConfigArgs, keras.layers.Layer):
  """One post-LN Transformer layer: `attention_1` then `ffn_1`.

  Call with `(x [batch, seq, H], bias [batch, 1, 1, seq])`. `attention` and
  `ffn` may be existing sub-layers, to share them with other blocks.
  """
  CONFIG_ARGS = ("hidden_size", "num_attention_heads", "intermediate_size",
                 "hidden_act", "dropout_rate", "attention_dropout_rate",
                 "initializer_range", "layer_norm_eps")

  def __init__(self, hidden_size, num_attention_heads, intermediate_size,
               hidden_act="gelu", dropout_rate=0.0, attention_dropout_rate=0.0,
               initializer_range=0.02, layer_norm_eps=1e-12, attention=None,
               ffn=None, **kwargs):
    super().__init__(**kwargs)
    self.keep_args(locals())
    self.attention = attention or SelfAttention(
        hidden_size, num_attention_heads, dropout_rate,
        attention_dropout_rate, initializer_range, layer_norm_eps,
        dtype=self.dtype_policy, name="attention_1")
    self.ffn = ffn or FeedForward(
        hidden_size, intermediate_size, hidden_act, dropout_rate,
        initializer_range, layer_norm_eps, dtype=self.dtype_policy,
        name="ffn_1")

  def build(self, input_shape=None):
    if not self.attention.built:
      self.attention.build(input_shape)
    if not self.ffn.built:
      self.ffn.build(input_shape)
    self.built = True

  def call(self, x, bias, training=False):
    x = self.attention(x, bias, training=training)
    return self.ffn(x, training=training)

  def compute_output_shape(self, x_shape, bias_shape):
    return x_shape
