"""Pretraining heads: masked LM (tied to the word embeddings) and sentence order.

ALBERT idea 3 lives in `SentenceOrderHead`: a 2-way classifier on the pooled
output that tells whether segments A and B are in their original order
(label 0) or swapped (label 1), instead of BERT's next-sentence prediction.
"""

import keras
import tensorflow as tf

from albert_tf.modeling.ops import (ConfigArgs, get_activation, layer_norm,
                                    truncated_normal)


@keras.saving.register_keras_serializable(package="albert_tf")
class MaskedLMHead(keras.layers.Layer):
  """Dense H->E + activation + LayerNorm, then logits against the word embeddings.

  Call with `(sequence_output [batch, seq, H], masked_lm_positions
  [batch, P] int32)`; returns float32 logits [batch, P, vocab_size]. The
  output matrix is the transposed [V, E] word-embedding matrix of
  `token_embedding` (tied, as in the original); only the bias is the head's
  own (cls/predictions/output_bias).

  brightmart's own albert_zh layout transforms H->H + LayerNorm(H) instead
  and reaches the [V, E] table through the transposed E->H embedding
  projection (word_embeddings_2); pass that projection layer as
  `output_projection` to get this variant (tied too, no weights of its own).
  """

  def __init__(self, token_embedding, hidden_act="gelu",
               initializer_range=0.02, layer_norm_eps=1e-12,
               output_projection=None, **kwargs):
    super().__init__(**kwargs)
    if isinstance(token_embedding, dict):  # from_config of a lone head
      token_embedding = keras.saving.deserialize_keras_object(token_embedding)
    if isinstance(output_projection, dict):
      output_projection = keras.saving.deserialize_keras_object(
          output_projection)
    self.token_embedding = token_embedding
    self.output_projection = output_projection
    self.vocab_size = token_embedding.input_dim
    self.embedding_size = token_embedding.output_dim
    # brightmart's variant transforms at the projection's width H.
    self.transform_size = (output_projection.units if output_projection
                           else self.embedding_size)
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.layer_norm_eps = layer_norm_eps
    self.transform = keras.layers.Dense(
        self.transform_size, activation=get_activation(hidden_act),
        kernel_initializer=truncated_normal(initializer_range),
        dtype=self.dtype_policy, name="transform_dense")
    self.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_eps, dtype="float32", name="transform_LayerNorm")

  def build(self, sequence_output_shape, masked_lm_positions_shape=None):
    hidden = sequence_output_shape[-1]
    if not self.token_embedding.built:
      self.token_embedding.build((None, None))
    if (self.output_projection is not None
        and not self.output_projection.built):
      self.output_projection.build((None, None, self.embedding_size))
    self.transform.build((None, None, hidden))
    self.layer_norm.build((None, None, self.transform_size))
    # Added to the float32 logits as it is: not autocast (to bfloat16 and
    # back, rounded, under mixed precision).
    self.output_bias = self.add_weight(
        name="output_bias", shape=(self.vocab_size,), initializer="zeros",
        autocast=False)
    self.built = True

  def call(self, sequence_output, masked_lm_positions):
    x = tf.gather(sequence_output, masked_lm_positions, batch_dims=1)
    # [b, P, E] (brightmart: H) in the compute dtype, statistics in float32.
    x = layer_norm(self.layer_norm, self.transform(x))
    # The vocabulary projection is the largest matmul of the head; keep it in
    # the compute dtype and only the logits in float32. It runs on the
    # flattened [b*P, E] rows: a 3-D x 2-D tf.matmul broadcasts into a
    # BatchMatMul whose gradient for the [V, E] table is formed per batch row
    # and summed (measured: a third of a tiny training step on CPU).
    dtype = self.compute_dtype
    batch_shape = tf.shape(x)[:-1]
    x = tf.reshape(x, [-1, x.shape[-1]])
    if self.output_projection is not None:  # [., H] x [E, H]^T -> [., E]
      x = tf.matmul(x, tf.cast(self.output_projection.kernel, dtype),
                    transpose_b=True)
    logits = tf.matmul(x, tf.cast(self.token_embedding.embeddings, dtype),
                       transpose_b=True)
    logits = tf.cast(logits, tf.float32) + self.output_bias
    return tf.reshape(logits, tf.concat([batch_shape, [self.vocab_size]], 0))

  def compute_output_shape(self, sequence_output_shape,
                           masked_lm_positions_shape):
    return tuple(masked_lm_positions_shape) + (self.vocab_size,)

  def get_config(self):
    config = super().get_config()
    config.update(
        token_embedding=keras.saving.serialize_keras_object(
            self.token_embedding),
        hidden_act=self.hidden_act, initializer_range=self.initializer_range,
        layer_norm_eps=self.layer_norm_eps,
        output_projection=(keras.saving.serialize_keras_object(
            self.output_projection) if self.output_projection else None))
    return config


@keras.saving.register_keras_serializable(package="albert_tf")
class SentenceOrderHead(ConfigArgs, keras.layers.Layer):
  """Dense H->2 on pooled_output (cls/seq_relationship); float32 logits."""
  CONFIG_ARGS = ("num_classes", "initializer_range")

  def __init__(self, num_classes=2, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.keep_args(locals())
    self.dense = keras.layers.Dense(
        num_classes, kernel_initializer=truncated_normal(initializer_range),
        dtype=self.dtype_policy, name="seq_relationship")

  def build(self, pooled_shape=None):
    self.dense.build(pooled_shape)
    self.built = True

  def call(self, pooled_output):
    return tf.cast(self.dense(pooled_output), tf.float32)

  def compute_output_shape(self, pooled_shape):
    return (pooled_shape[0], self.num_classes)


@keras.saving.register_keras_serializable(package="albert_tf")
class ClassificationHead(ConfigArgs, keras.layers.Layer):
  """Dropout + dense; float32 logits [..., num_labels].

  On pooled_output [batch, hidden] it classifies sequences; on
  sequence_output [batch, seq, hidden] it tags every token.
  """
  CONFIG_ARGS = ("num_labels", "dropout_rate", "initializer_range")

  def __init__(self, num_labels, dropout_rate=0.1, initializer_range=0.02,
               **kwargs):
    super().__init__(**kwargs)
    self.keep_args(locals())
    self.dropout = keras.layers.Dropout(dropout_rate)
    self.dense = keras.layers.Dense(
        num_labels, kernel_initializer=truncated_normal(initializer_range),
        dtype=self.dtype_policy, name="output")

  def build(self, pooled_shape=None):
    self.dense.build(pooled_shape)
    self.built = True

  def call(self, pooled_output, training=False):
    x = self.dropout(pooled_output, training=training)
    return tf.cast(self.dense(x), tf.float32)

  def compute_output_shape(self, input_shape):
    return tuple(input_shape[:-1]) + (self.num_labels,)
