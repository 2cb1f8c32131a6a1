"""Shared ops of the layers: initializer, float32 LayerNorm, activations."""

import keras
import tensorflow as tf


def truncated_normal(stddev):
  return keras.initializers.TruncatedNormal(stddev=stddev)


def layer_norm(norm, x):
  """`norm` (a built LayerNormalization) applied to x; returns x's dtype.

  The statistics and the normalization run in float32 whatever x's dtype
  (keras.ops.layer_normalization upcasts bfloat16/float16), and the result
  is rounded to x's dtype once. Calling a float32 LayerNormalization layer on
  a bfloat16 x gives the same values but then casts them to float32, its
  compute dtype, and the caller back to bfloat16: two full-size casts that
  change nothing. In float32 this is exactly the layer's own call.
  """
  with tf.name_scope(norm.name):  # the layer's name in graphs and profiles
    return keras.ops.layer_normalization(x, norm.gamma, norm.beta,
                                         axis=norm.axis, epsilon=norm.epsilon)


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
