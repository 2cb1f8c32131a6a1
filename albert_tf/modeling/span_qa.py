"""Span question answering (SQuAD v1.1/v2.0, CMRC 2018, DRCD): heads and model.

Both heads read the encoder's sequence_output of `[CLS] question [SEP]
context [SEP]` windows, as the original run_squad_v1/v2 do:

  * `SpanHead` (v1): dense(2) over every position -> start and end logits
    (the original's cls/squad/output_weights). Its loss is the mean of the
    start and end softmax cross-entropies.
  * `SquadV2Head` (v2, XLNet's head as the original run_squad_v2 builds it):
    start logits dense(1); end logits dense(tanh) over [H_j ; H_start] ->
    LayerNorm -> dense(1), conditioned on the gold start in training and on
    the top `start_n_top` starts at inference (then the top `end_n_top` ends
    of each); an answer-class logit dense(tanh) over [softmax(start)-weighted
    H ; H_CLS] -> dense(1, no bias). Loss = (start CE + end CE) / 2 + 0.5 x
    sigmoid CE(cls_logits, is_impossible).

The positions that cannot hold an answer (question, both [SEP]s, padding:
the original's p_mask) follow from input_mask and segment_ids (`p_mask`), so
the model, its SavedModel and its TFLite file take the encoder inputs only.

    model = AlbertSpanQA(config, version_2_with_negative=True)
    outputs = model({"input_ids": ids, "input_mask": mask,
                     "segment_ids": segments})
"""

import keras
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder, encoder_inputs
from albert_tf.modeling.models import minimize, model_config, model_kwargs
from albert_tf.modeling.models import split_batch
from albert_tf.modeling.ops import layer_norm, truncated_normal

START_LOGITS = "start_logits"
END_LOGITS = "end_logits"
START_TOP_LOG_PROBS = "start_top_log_probs"
START_TOP_INDEX = "start_top_index"
END_TOP_LOG_PROBS = "end_top_log_probs"
END_TOP_INDEX = "end_top_index"
CLS_LOGITS = "cls_logits"
# Training labels (`fit` targets) of the span tasks.
LABELS = (F.START_POSITIONS, F.END_POSITIONS, F.IS_IMPOSSIBLE)
# What the original adds to masked logits (finite, so 0 * it stays 0).
_NEG = -1e30


def head_outputs(v2):
  """The outputs the decoders read: v1's logits or v2's beams."""
  return ((START_TOP_LOG_PROBS, START_TOP_INDEX, END_TOP_LOG_PROBS,
           END_TOP_INDEX, CLS_LOGITS) if v2 else (START_LOGITS, END_LOGITS))


def p_mask(input_mask, segment_ids):
  """1 where a position cannot start or end an answer, else 0; [b, L] float32.

  Context pieces (segment 1, before the window's last real piece, the
  closing [SEP]) and [CLS] (the "no answer" position of v2) are 0; the
  question, both [SEP]s and padding are 1: the original's p_mask.
  """
  real = tf.cast(input_mask, tf.int32)
  length = tf.reduce_sum(real, axis=1, keepdims=True)
  position = tf.range(tf.shape(real)[1])[None, :]
  context = ((tf.cast(segment_ids, tf.int32) == 1) & (real == 1)
             & (position < length - 1))
  return 1.0 - tf.cast(context | (position == 0), tf.float32)


def _masked(logits, mask):
  return logits * (1.0 - mask) + _NEG * mask


@keras.saving.register_keras_serializable(package="albert_tf")
class SpanHead(keras.layers.Layer):
  """Dense H->2 over sequence_output; float32 start and end logits [b, L]."""

  def __init__(self, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.initializer_range = initializer_range
    self.dense = keras.layers.Dense(
        2, kernel_initializer=truncated_normal(initializer_range),
        dtype=self.dtype_policy, name="output")

  def build(self, sequence_output_shape):
    self.dense.build(sequence_output_shape)
    self.built = True

  def call(self, sequence_output):
    logits = tf.cast(self.dense(sequence_output), tf.float32)
    return {START_LOGITS: logits[..., 0], END_LOGITS: logits[..., 1]}

  def get_config(self):
    config = super().get_config()
    config.update(initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="albert_tf")
class SquadV2Head(keras.layers.Layer):
  """The original run_squad_v2 head: start, start-conditioned end, answer class.

  `call(sequence_output [b, L, H], input_mask, segment_ids [b, L])` (which
  give `p_mask`) returns the inference
  outputs: start_logits [b, L] (masked), start_top_log_probs and
  start_top_index [b, start_n_top], end_top_log_probs and end_top_index
  [b, start_n_top * end_n_top] (entry i * end_n_top + j is end j of start
  beam i, the original's layout) and cls_logits [b]. `training_log_probs`
  gives what the loss needs, the end teacher-forced on the gold start.
  """

  def __init__(self, hidden_size, start_n_top=F.START_N_TOP,
               end_n_top=F.END_N_TOP, dropout_rate=0.1, initializer_range=0.02,
               layer_norm_eps=1e-12, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.start_n_top = start_n_top
    self.end_n_top = end_n_top
    self.dropout_rate = dropout_rate
    self.initializer_range = initializer_range
    self.layer_norm_eps = layer_norm_eps

    def dense(units, name, **kw):
      return keras.layers.Dense(
          units, kernel_initializer=truncated_normal(initializer_range),
          dtype=self.dtype_policy, name=name, **kw)
    self.start_dense = dense(1, "start_logits")
    self.end_dense_0 = dense(hidden_size, "end_logits_dense_0",
                             activation="tanh")
    self.end_layer_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_eps, dtype="float32", name="end_logits_LayerNorm")
    self.end_dense_1 = dense(1, "end_logits_dense_1")
    self.answer_dense_0 = dense(hidden_size, "answer_class_dense_0",
                                activation="tanh")
    self.answer_dropout = keras.layers.Dropout(dropout_rate)
    self.answer_dense_1 = dense(1, "answer_class_dense_1", use_bias=False)

  def build(self, sequence_output_shape, input_mask_shape=None,
            segment_ids_shape=None):
    hidden = sequence_output_shape[-1]
    self.start_dense.build((None, None, hidden))
    self.end_dense_0.build((None, None, 2 * hidden))
    self.end_layer_norm.build((None, None, self.hidden_size))
    self.end_dense_1.build((None, None, self.hidden_size))
    self.answer_dense_0.build((None, 2 * hidden))
    self.answer_dense_1.build((None, self.hidden_size))
    self.built = True

  def _start_logits(self, sequence_output, mask):
    logits = tf.cast(self.start_dense(sequence_output)[..., 0], tf.float32)
    return _masked(logits, mask)

  def _end_logits(self, sequence_output, start_features, mask):
    """sequence_output [b, L, H], start_features broadcastable to it ->
    masked float32 end logits [b, L]."""
    start_features = tf.broadcast_to(start_features,
                                     tf.shape(sequence_output))
    x = self.end_dense_0(tf.concat([sequence_output, start_features], -1))
    x = layer_norm(self.end_layer_norm, x)
    return _masked(tf.cast(self.end_dense_1(x)[..., 0], tf.float32), mask)

  def _cls_logits(self, sequence_output, start_logits, training):
    # No dependency on the end, so each window has one answer-class logit.
    start_p = tf.cast(tf.nn.softmax(start_logits, axis=-1),
                      sequence_output.dtype)
    start_feature = tf.einsum("blh,bl->bh", sequence_output, start_p)
    x = self.answer_dense_0(tf.concat([start_feature,
                                       sequence_output[:, 0]], -1))
    x = self.answer_dropout(x, training=training)
    return tf.cast(self.answer_dense_1(x)[..., 0], tf.float32)

  def training_log_probs(self, sequence_output, mask, start_positions,
                         training=True):
    """(start_log_probs [b, L], end_log_probs [b, L], cls_logits [b]), the
    end conditioned on the gold start_positions [b]."""
    start_logits = self._start_logits(sequence_output, mask)
    start_features = tf.gather(sequence_output, start_positions[:, None],
                               batch_dims=1)  # [b, 1, H]
    end_logits = self._end_logits(sequence_output, start_features, mask)
    return (tf.nn.log_softmax(start_logits), tf.nn.log_softmax(end_logits),
            self._cls_logits(sequence_output, start_logits, training))

  def call(self, sequence_output, input_mask, segment_ids, training=False):
    mask = p_mask(input_mask, segment_ids)
    start_logits = self._start_logits(sequence_output, mask)
    start_top_log_probs, start_top_index = tf.math.top_k(
        tf.nn.log_softmax(start_logits), k=self.start_n_top)
    k = self.start_n_top
    # Every position j against each of the k starts: [b, L, k, H] inputs.
    start_features = tf.gather(sequence_output, start_top_index,
                               batch_dims=1)  # [b, k, H]
    tiled = tf.tile(sequence_output[:, :, None, :], [1, 1, k, 1])
    end_logits = self._end_logits(
        tiled, start_features[:, None], mask[:, :, None])  # [b, L, k]
    end_log_probs = tf.nn.log_softmax(end_logits, axis=1)
    end_top_log_probs, end_top_index = tf.math.top_k(
        tf.transpose(end_log_probs, [0, 2, 1]), k=self.end_n_top)
    return {
        START_LOGITS: start_logits,
        START_TOP_LOG_PROBS: start_top_log_probs,
        START_TOP_INDEX: start_top_index,
        END_TOP_LOG_PROBS: tf.reshape(end_top_log_probs,
                                      [-1, k * self.end_n_top]),
        END_TOP_INDEX: tf.reshape(end_top_index, [-1, k * self.end_n_top]),
        CLS_LOGITS: self._cls_logits(sequence_output, start_logits, training),
    }

  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, start_n_top=self.start_n_top,
                  end_n_top=self.end_n_top, dropout_rate=self.dropout_rate,
                  initializer_range=self.initializer_range,
                  layer_norm_eps=self.layer_norm_eps)
    return config


def span_losses(model, inputs, labels, training):
  """The original's losses of one batch: {"loss", "start_loss", "end_loss"}
  (+ "cls_loss" in v2), float32 scalars averaged over the batch."""
  start = tf.reshape(tf.cast(labels[F.START_POSITIONS], tf.int32), [-1])
  end = tf.reshape(tf.cast(labels[F.END_POSITIONS], tf.int32), [-1])
  enc = model.encoder(inputs, training=training)
  sequence_output = enc[F.SEQUENCE_OUTPUT]
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits
  if not model.version_2_with_negative:
    out = model.span_head(sequence_output)
    start_loss = tf.reduce_mean(ce(start, out[START_LOGITS]))
    end_loss = tf.reduce_mean(ce(end, out[END_LOGITS]))
    return {"loss": (start_loss + end_loss) / 2, "start_loss": start_loss,
            "end_loss": end_loss}
  mask = p_mask(inputs[F.INPUT_MASK], inputs[F.SEGMENT_IDS])
  start_lp, end_lp, cls_logits = model.span_head.training_log_probs(
      sequence_output, mask, start, training=training)
  start_loss = -tf.reduce_mean(tf.gather(start_lp, start[:, None],
                                         batch_dims=1))
  end_loss = -tf.reduce_mean(tf.gather(end_lp, end[:, None], batch_dims=1))
  impossible = tf.reshape(tf.cast(labels[F.IS_IMPOSSIBLE], tf.float32), [-1])
  cls_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=impossible, logits=cls_logits))
  return {"loss": (start_loss + end_loss) / 2 + 0.5 * cls_loss,
          "start_loss": start_loss, "end_loss": end_loss, "cls_loss": cls_loss}


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSpanQA(keras.Model):
  """Encoder + `SpanHead` (v1) or `SquadV2Head` (version_2_with_negative).

  Inputs: the encoder inputs of `[CLS] question [SEP] context [SEP]`.
  Outputs: v1 start_logits and end_logits [b, L]; v2 the `SquadV2Head`
  outputs. `fit` takes (inputs, {start_positions, end_positions,
  is_impossible}) and reports the losses of `span_losses`.
  """

  def __init__(self, config: AlbertConfig, version_2_with_negative=False,
               start_n_top=F.START_N_TOP, end_n_top=F.END_N_TOP,
               classifier_dropout=0.1, dtype=None,
               **kwargs):
    if isinstance(config, dict):
      config = AlbertConfig.from_dict(config)
    # === Layers ===
    encoder = AlbertEncoder(config, dtype=dtype, name="encoder")
    if version_2_with_negative:
      span_head = SquadV2Head(
          config.hidden_size, start_n_top, end_n_top,
          dropout_rate=classifier_dropout,
          initializer_range=config.initializer_range,
          layer_norm_eps=config.layer_norm_eps, dtype=dtype, name="squad_v2")
    else:
      span_head = SpanHead(config.initializer_range, dtype=dtype,
                           name="squad")
    # === Functional model ===
    inputs = encoder_inputs()
    sequence_output = encoder(inputs)[F.SEQUENCE_OUTPUT]
    if version_2_with_negative:
      outputs = span_head(sequence_output, inputs[F.INPUT_MASK],
                          inputs[F.SEGMENT_IDS])
    else:
      outputs = span_head(sequence_output)
    super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
    # === Config ===
    self.config = config
    self.version_2_with_negative = version_2_with_negative
    self.start_n_top = start_n_top
    self.end_n_top = end_n_top
    self.classifier_dropout = classifier_dropout
    self.encoder = encoder
    self.span_head = span_head
    # Spans come from sequence_output: the pooler gets no gradient (its
    # weights stay in checkpoints, as the tagger's).
    encoder.pooler.trainable = False
    names = ["loss", "start_loss", "end_loss"] + (
        ["cls_loss"] if version_2_with_negative else [])
    self._trackers = {n: keras.metrics.Mean(name=n) for n in names}

  @property
  def checkpoint_items(self):
    """{checkpoint object name: trackable} (`training.checkpoints`)."""
    return {"encoder": self.encoder, "span_head": self.span_head}

  @property
  def metrics(self):
    return list(self._trackers.values())

  # The training step's batch as this many parts, their losses weighed by
  # their sizes (training.micro_batches; set by the task).
  micro_batches = 1

  def _batch_losses(self, data, training):
    inputs, labels = data
    inputs = {k: tf.cast(inputs[k], tf.int32) for k in F.ENCODER_INPUTS}
    if not training or self.micro_batches <= 1:
      return span_losses(self, inputs, labels, training)
    size = tf.cast(tf.shape(inputs[F.INPUT_IDS])[0], tf.float32)
    total = {}
    for part in split_batch({**inputs, **labels}, self.micro_batches):
      share = tf.cast(tf.shape(part[F.INPUT_IDS])[0], tf.float32) / size
      losses = span_losses(self, {k: part[k] for k in F.ENCODER_INPUTS},
                           {k: part[k] for k in labels}, training)
      for name, value in losses.items():
        total[name] = total.get(name, 0.0) + share * value
    return total

  def _update(self, losses):
    for name, tracker in self._trackers.items():
      tracker.update_state(losses[name])
    return {name: t.result() for name, t in self._trackers.items()}

  def train_step(self, data):
    return self._update(minimize(self, lambda: self._batch_losses(data, True)))

  def test_step(self, data):
    return self._update(self._batch_losses(data, training=False))

  def get_config(self):
    return model_config(
        self, version_2_with_negative=self.version_2_with_negative,
        start_n_top=self.start_n_top, end_n_top=self.end_n_top,
        classifier_dropout=self.classifier_dropout)

  @classmethod
  def from_config(cls, config):
    return cls(**model_kwargs(config))
