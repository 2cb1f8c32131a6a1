"""Trainable assemblies: `AlbertPretrainer` (MLM + SOP), `AlbertClassifier`
and `AlbertTagger` (one label per token).

Both wrap an `AlbertEncoder` (attribute `.encoder`) and return dicts named as
in the original ALBERT. `AlbertPretrainer` carries its own train/test steps,
so `model.fit(dataset)` works on batches of pretraining features straight
from the TFRecords (see `albert_tf.core.features`).
"""

import keras
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import (AlbertEncoder, encoder_inputs,
                                        model_config, model_kwargs)
from albert_tf.modeling.heads import ClassificationHead, MaskedLMHead, SentenceOrderHead
from albert_tf.modeling.ops import softmax_cross_entropy

PRETRAINER_INPUTS = F.ENCODER_INPUTS + (F.MASKED_LM_POSITIONS,)


def pretraining_losses(outputs, features, sentence_order_weight=1.0):
  """MLM and SOP losses and accuracies of one batch, as the original computes them.

  Args:
    outputs: dict with `mlm_logits` [b, P, V] and `sop_logits` [b, 2].
    features: dict with `masked_lm_ids` [b, P], `masked_lm_weights` [b, P]
      and `next_sentence_labels` [b, 1] (or [b]).
    sentence_order_weight: the sentence loss's weight in `loss`; 0 trains
      MLM alone (the paper's Table 5 "none"), 1 is the original.
  Returns:
    dict of float32 scalars: loss (= masked_lm_loss + sentence_order_weight
    * sentence_order_loss), masked_lm_loss (weight-averaged over real
    predictions), sentence_order_loss, the two accuracies, and the weight
    sums `masked_lm_count` and `sentence_order_count`.
  """
  ids = tf.cast(features[F.MASKED_LM_IDS], tf.int32)
  weights = tf.cast(features[F.MASKED_LM_WEIGHTS], tf.float32)
  labels = tf.reshape(tf.cast(features[F.NEXT_SENTENCE_LABELS], tf.int32),
                      [-1])
  mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
  sop_logits = tf.cast(outputs["sop_logits"], tf.float32)

  per_token = softmax_cross_entropy(ids, mlm_logits)
  weight_sum = tf.reduce_sum(weights)
  # The original adds 1e-5 to the denominator so an all-padding batch is 0.
  mlm_loss = tf.reduce_sum(per_token * weights) / (weight_sum + 1e-5)
  mlm_hits = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32),
                              ids), tf.float32)
  mlm_acc = tf.math.divide_no_nan(tf.reduce_sum(mlm_hits * weights),
                                  weight_sum)

  # Means over the examples, 0 for a replica's empty batch (an eval's
  # last batches under tf.distribute), which then counts for nothing.
  sop_count = tf.cast(tf.size(labels), tf.float32)
  sop_loss = tf.math.divide_no_nan(tf.reduce_sum(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels, sop_logits)),
                                   sop_count)
  sop_acc = tf.math.divide_no_nan(tf.reduce_sum(tf.cast(
      tf.equal(tf.argmax(sop_logits, -1, output_type=tf.int32), labels),
      tf.float32)), sop_count)
  return {"loss": mlm_loss + sentence_order_weight * sop_loss,
          "masked_lm_loss": mlm_loss,
          "sentence_order_loss": sop_loss, "masked_lm_accuracy": mlm_acc,
          "sentence_order_accuracy": sop_acc, "masked_lm_count": weight_sum,
          "sentence_order_count": sop_count}


def minimize(model, compute_losses):
  """One optimizer step of a model that computes its own losses.

  compute_losses() returns a dict of float32 scalars with "loss" (the batch
  mean on this replica); returns that dict. Under tf.distribute gradients
  are summed over replicas, so the loss is divided by their number first.
  """
  with tf.GradientTape() as tape:
    losses = compute_losses()
    loss = losses["loss"] / tf.distribute.get_strategy().num_replicas_in_sync
    if hasattr(model.optimizer, "scale_loss"):  # float16 loss scaling
      loss = model.optimizer.scale_loss(loss)
  grads = tape.gradient(loss, model.trainable_variables)
  model.optimizer.apply(grads, model.trainable_variables)
  return losses


def split_batch(inputs, count):
  """The batch {name: [b, ...]} as `count` consecutive parts (dicts of
  slices along the batch axis, sizes differing by one at most)."""
  size = tf.shape(next(iter(inputs.values())))[0]
  cuts = [size * i // count for i in range(count + 1)]
  return [{k: v[start:end] for k, v in inputs.items()}
          for start, end in zip(cuts, cuts[1:])]


def concat_parts(parts, names):
  """The parts' outputs `names` put back together along the batch axis."""
  return {k: tf.concat([part[k] for part in parts], 0) for k in names}


class MicroBatched:
  """A model that runs each batch as `micro_batches` parts, their outputs
  put back together in order (float rounding apart, the whole batch's): on
  a CPU TF runs the parts' independent passes side by side."""

  #: Set by the task (--micro_batches); a model built for export keeps 1.
  micro_batches = 1

  def call(self, inputs, training=None, mask=None):
    if self.micro_batches <= 1:
      return super().call(inputs, training=training, mask=mask)
    parts = [super(MicroBatched, self).call(part, training=training)
             for part in split_batch(inputs, self.micro_batches)]
    return concat_parts(parts, parts[0].keys())


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertPretrainer(keras.Model):
  """Encoder + masked-LM head + sentence-order head.

  Inputs: the encoder inputs plus `masked_lm_positions` int32 [batch, P].
  Outputs: `sequence_output`, `pooled_output`, `mlm_logits` [batch, P, V]
  (float32) and `sop_logits` [batch, 2] (float32).
  `fit`/`evaluate` take batches of TFRecord features and report loss,
  masked_lm_loss, masked_lm_accuracy, sentence_order_loss and
  sentence_order_accuracy; `sentence_order_weight` weighs the sentence loss
  in the loss trained on (0: MLM only, the sentence head stays untrained).
  """

  def __init__(self, config: AlbertConfig, dtype=None,
               sentence_order_weight=1.0, **kwargs):
    if isinstance(config, dict):
      config = AlbertConfig.from_dict(config)
    # === Layers ===
    encoder = AlbertEncoder(config, dtype=dtype, name="encoder")
    masked_lm_head = MaskedLMHead(
        encoder.embedding.word_embeddings, hidden_act=config.hidden_act,
        initializer_range=config.initializer_range,
        layer_norm_eps=config.layer_norm_eps,
        output_projection=(encoder.embedding.projection
                           if config.embedding_layout == "brightmart" else None),
        dtype=dtype, name="predictions")
    sentence_order_head = SentenceOrderHead(
        initializer_range=config.initializer_range, dtype=dtype,
        name="sentence_order")

    # === Functional model ===
    inputs = encoder_inputs()
    inputs[F.MASKED_LM_POSITIONS] = keras.Input(
        shape=(None,), dtype="int32", name=F.MASKED_LM_POSITIONS)
    enc = encoder({k: inputs[k] for k in F.ENCODER_INPUTS})
    outputs = dict(enc)
    outputs[F.MLM_LOGITS] = masked_lm_head(enc[F.SEQUENCE_OUTPUT],
                                           inputs[F.MASKED_LM_POSITIONS])
    outputs[F.SOP_LOGITS] = sentence_order_head(enc[F.POOLED_OUTPUT])
    super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

    # === Config ===
    self.config = config
    self.encoder = encoder
    self.masked_lm_head = masked_lm_head
    self.sentence_order_head = sentence_order_head
    self.sentence_order_weight = float(sentence_order_weight)
    self._trackers = {
        name: keras.metrics.Mean(name=name)
        for name in ("loss", "masked_lm_loss", "masked_lm_accuracy",
                     "sentence_order_loss", "sentence_order_accuracy")}

  @property
  def checkpoint_items(self):
    """{checkpoint object name: trackable} (`training.checkpoints`)."""
    return {"encoder": self.encoder, "masked_lm_head": self.masked_lm_head,
            "sentence_order_head": self.sentence_order_head}

  @property
  def metrics(self):
    return list(self._trackers.values())

  # Training and eval steps run the batch as this many parts, put back
  # together before the loss (training.micro_batches; set by the task).
  micro_batches = 1

  def _batch_outputs(self, inputs, training):
    if self.micro_batches <= 1:
      return self(inputs, training=training)
    parts = [self(part, training=training)
             for part in split_batch(inputs, self.micro_batches)]
    return concat_parts(parts, (F.MLM_LOGITS, F.SOP_LOGITS))

  def _step_losses(self, data, training):
    inputs = {k: tf.cast(data[k], tf.int32) for k in PRETRAINER_INPUTS}
    outputs = self._batch_outputs(inputs, training)
    return pretraining_losses(outputs, data, self.sentence_order_weight)

  def _update_trackers(self, losses):
    # Weighted by what each figure averages over (masked tokens, examples),
    # so a partial last eval batch counts for what it holds and a step that
    # sees no data (Keras may run one at the end of a finite dataset) for 0.
    for name, tracker in self._trackers.items():
      weight = losses["masked_lm_count" if name.startswith("masked_lm")
                     else "sentence_order_count"]
      tracker.update_state(losses[name], sample_weight=weight)
    return {name: t.result() for name, t in self._trackers.items()}

  def train_step(self, data):
    return self._update_trackers(
        minimize(self, lambda: self._step_losses(data, training=True)))

  def test_step(self, data):
    return self._update_trackers(self._step_losses(data, training=False))

  def get_config(self):
    return model_config(self, sentence_order_weight=self.sentence_order_weight)

  @classmethod
  def from_config(cls, config):
    return cls(**model_kwargs(config))


class _EncoderHead(MicroBatched, keras.Model):
  """Encoder + dropout + dense (`ClassificationHead`) on one encoder output.

  Output dict: `logits`, float32. A subclass names the output its head
  reads, the head's layer name (its attribute and checkpoint name: that plus
  "_head") and its size argument.
  """
  _READS, _HEAD, _SIZE = F.POOLED_OUTPUT, "classifier", "num_labels"

  def __init__(self, config, size, classifier_dropout, dtype, **kwargs):
    if isinstance(config, dict):
      config = AlbertConfig.from_dict(config)
    encoder = AlbertEncoder(config, dtype=dtype, name="encoder")
    head = ClassificationHead(
        size, dropout_rate=classifier_dropout,
        initializer_range=config.initializer_range, dtype=dtype,
        name=self._HEAD)
    inputs = encoder_inputs()
    outputs = {F.LOGITS: head(encoder(inputs)[self._READS])}
    super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
    self.config = config
    setattr(self, self._SIZE, size)
    self.classifier_dropout = classifier_dropout
    self.encoder = encoder
    setattr(self, f"{self._HEAD}_head", head)

  @property
  def checkpoint_items(self):
    """{checkpoint object name: trackable} (`training.checkpoints`)."""
    name = f"{self._HEAD}_head"
    return {"encoder": self.encoder, name: getattr(self, name)}

  def get_config(self):
    return model_config(self, **{self._SIZE: getattr(self, self._SIZE)},
                        classifier_dropout=self.classifier_dropout)

  @classmethod
  def from_config(cls, config):
    return cls(**model_kwargs(config))


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(_EncoderHead):
  """Encoder + dropout + dense on pooled_output.

  Output dict: `logits` [batch, num_labels] float32; num_labels=1 means
  regression (e.g. STS-B) and the single logit is the prediction.
  """

  def __init__(self, config: AlbertConfig, num_labels, classifier_dropout=0.1,
               dtype=None, **kwargs):
    if num_labels < 1:
      raise ValueError(f"num_labels must be >= 1, got {num_labels}")
    super().__init__(config, num_labels, classifier_dropout, dtype, **kwargs)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTagger(_EncoderHead):
  """Encoder + dropout + dense on every token of sequence_output.

  Output dict: `logits` [batch, seq, num_tags] float32 (token tagging: NER).
  """
  _READS, _HEAD, _SIZE = F.SEQUENCE_OUTPUT, "tagger", "num_tags"

  def __init__(self, config: AlbertConfig, num_tags, classifier_dropout=0.1,
               dtype=None, **kwargs):
    if num_tags < 2:
      raise ValueError(f"num_tags must be >= 2 (O and one entity tag), got "
                       f"{num_tags}")
    super().__init__(config, num_tags, classifier_dropout, dtype, **kwargs)
    # The tags come from sequence_output: the pooler gets no gradient, and
    # frozen it is neither updated nor reported as gradient-less by Keras.
    # Its weights stay in checkpoints, for a classifier built from them.
    self.encoder.pooler.trainable = False
