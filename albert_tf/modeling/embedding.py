"""ALBERT idea 1: the factorized embedding (V x E word embeddings + an E x H projection).

BERT embeds every token straight into the hidden width H (V x H parameters).
ALBERT embeds into a small width E (128) and projects to H, so the vocabulary
costs V x E + E x H: for V=30000, H=1024 that is 3.97M instead of 30.7M.
"""

import keras
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.modeling.ops import (ConfigArgs, dense_rows, layer_norm,
                                    truncated_normal)


@keras.saving.register_keras_serializable(package="albert_tf")
class FactorizedEmbedding(ConfigArgs, keras.layers.Layer):
  """Word + position + token-type embeddings of width E, LayerNorm, dropout, E->H.

  Call with `(input_ids, segment_ids)`, int32 [batch, seq]; returns
  [batch, seq, hidden_size]. With `embedding_layout="brightmart"` (brightmart's
  own albert_zh releases) the word embedding is projected first (no bias) and
  position/token-type embeddings of width H are added after the projection.

  Token ids outside [0, vocab_size) raise a ValueError in eager mode. Inside a
  `tf.function` the check is skipped for speed: on CPU the gather then fails
  with InvalidArgumentError, on GPU/TPU out-of-range rows read as zeros.

  Under mixed precision the three embeddings are looked up, summed and
  normalized in float32 and cast to the compute dtype once, after the
  LayerNorm (which needs float32 anyway): casting each lookup to bfloat16
  and the sum back would cost four casts, and as many in the gradient.
  """
  CONFIG_ARGS = ("vocab_size", "embedding_size", "hidden_size",
                 "max_position_embeddings", "type_vocab_size",
                 "initializer_range", "dropout_rate", "layer_norm_eps",
                 "embedding_layout")

  def __init__(self, vocab_size, embedding_size, hidden_size,
               max_position_embeddings=512, type_vocab_size=2,
               initializer_range=0.02, dropout_rate=0.0, layer_norm_eps=1e-12,
               embedding_layout="google", **kwargs):
    super().__init__(**kwargs)
    self.keep_args(locals())
    brightmart = embedding_layout == "brightmart"
    # Width of the position/type embeddings and of the LayerNorm.
    side_width = hidden_size if brightmart else embedding_size
    init = truncated_normal(initializer_range)

    # Lookups in the variable dtype (float32 under mixed precision).
    lookup_dtype = self.dtype_policy.variable_dtype
    self.word_embeddings = keras.layers.Embedding(
        vocab_size, embedding_size, embeddings_initializer=init,
        dtype=lookup_dtype, name="word_embeddings")
    self.token_type_embeddings = keras.layers.Embedding(
        type_vocab_size, side_width, embeddings_initializer=init,
        dtype=lookup_dtype, name="token_type_embeddings")
    self._side_width = side_width
    self.layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_eps, dtype="float32", name="LayerNorm")
    self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)
    # Original name: bert/encoder/embedding_hidden_mapping_in (brightmart:
    # bert/embeddings/word_embeddings_2, a bias-free matrix). As in the
    # original, there is no projection when E == H (the BERT shape).
    self.projection = None
    if embedding_size != hidden_size:
      self.projection = keras.layers.Dense(
          hidden_size, kernel_initializer=init, use_bias=not brightmart,
          dtype=self.dtype_policy, name="embedding_hidden_mapping_in")

  def build(self, input_shape=None):
    # Read in the variable dtype, like the lookups.
    self.position_embeddings = self.add_weight(
        name="position_embeddings",
        shape=(self.max_position_embeddings, self._side_width),
        initializer=truncated_normal(self.initializer_range), autocast=False)
    self.word_embeddings.build((None, None))
    self.token_type_embeddings.build((None, None))
    self.layer_norm.build((None, None, self._side_width))
    if self.projection is not None:
      self.projection.build((None, None, self.embedding_size))
    self.built = True

  def _check_ids(self, input_ids, segment_ids):
    if not tf.executing_eagerly():
      return
    seq_length = int(input_ids.shape[1])
    if seq_length > self.max_position_embeddings:
      raise ValueError(
          f"Sequence length {seq_length} exceeds max_position_embeddings "
          f"({self.max_position_embeddings})")
    for name, ids, limit in ((F.INPUT_IDS, input_ids, self.vocab_size),
                             (F.SEGMENT_IDS, segment_ids,
                              self.type_vocab_size)):
      if tf.size(ids) == 0:
        continue
      low, high = int(tf.reduce_min(ids)), int(tf.reduce_max(ids))
      if low < 0 or high >= limit:
        bad = low if low < 0 else high
        where = tf.where(tf.equal(ids, bad))[0].numpy().tolist()
        raise ValueError(
            f"{name} holds {bad} at [batch, position] {where}, outside "
            f"[0, {limit}) (vocab_size/type_vocab_size of this config)")

  def call(self, input_ids, segment_ids, training=False):
    self._check_ids(input_ids, segment_ids)
    seq_length = tf.shape(input_ids)[1]
    words = self.word_embeddings(input_ids)
    if self.embedding_layout == "brightmart" and self.projection is not None:
      words = tf.cast(self.projection(words), words.dtype)
    positions = self.position_embeddings[:seq_length]
    x = words + positions[tf.newaxis] + self.token_type_embeddings(segment_ids)
    x = tf.cast(layer_norm(self.layer_norm, x), self.compute_dtype)
    x = self.dropout(x, training=training)
    if self.embedding_layout != "brightmart" and self.projection is not None:
      # tf.shape's batch, not -1: a fixed-shape export keeps its static batch.
      x = tf.reshape(dense_rows(self.projection, tf.reshape(
          x, [-1, self.embedding_size])),
                     [tf.shape(input_ids)[0], seq_length, self.hidden_size])
    return x

  def compute_output_shape(self, input_shape):
    return tuple(input_shape) + (self.hidden_size,)
