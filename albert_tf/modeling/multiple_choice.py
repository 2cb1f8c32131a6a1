"""Multiple choice (RACE): one encoder pass per choice, a softmax over choices.

As the original run_race: each choice is `[CLS] article [SEP] question+option
[SEP]`; dense(1) over its pooled output gives one score per choice, and the
loss is softmax cross-entropy over the choices of a question.

    model = AlbertMultipleChoice(config, num_choices=4)
    logits = model({"input_ids": ids, ...})["logits"]  # ids [b, 4, L]

A choice whose input_mask is all zero is padding (a question with fewer
options than num_choices: C3's 2-4, CHID's 7-10): its logit is
PADDED_CHOICE_LOGIT, so the softmax gives it no probability and the loss
no gradient through it.
"""

import keras
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.heads import ClassificationHead
from albert_tf.modeling.models import MicroBatched, model_config, model_kwargs

# The logit of a padded choice (float32 logits: exp of it is 0).
PADDED_CHOICE_LOGIT = -1e9


@keras.saving.register_keras_serializable(package="albert_tf")
class ChoicesToRows(keras.layers.Layer):
  """[b, C, L] -> [b * C, L]: each choice one row for the encoder."""

  def call(self, x):
    return tf.reshape(x, [-1, tf.shape(x)[-1]])

  def compute_output_shape(self, input_shape):
    return (None, input_shape[-1])


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultipleChoice(MicroBatched, keras.Model):
  """Encoder + dropout + dense(1) on the pooled output of every choice.

  Inputs: the encoder inputs with a choice axis, int32 [b, C, L].
  Output dict: `logits` [b, C] float32 (softmax over C: the choice
  probabilities); a choice with an all-zero input_mask (padding) has
  PADDED_CHOICE_LOGIT.
  """

  def __init__(self, config: AlbertConfig, num_choices=4,
               classifier_dropout=0.1, dtype=None, **kwargs):
    if isinstance(config, dict):
      config = AlbertConfig.from_dict(config)
    if num_choices < 2:
      raise ValueError(f"num_choices must be >= 2, got {num_choices}")
    # === Layers ===
    encoder = AlbertEncoder(config, dtype=dtype, name="encoder")
    to_rows = ChoicesToRows(name="choices_to_rows")
    choice_head = ClassificationHead(
        1, dropout_rate=classifier_dropout,
        initializer_range=config.initializer_range, dtype=dtype,
        name="choice")
    # === Functional model ===
    inputs = {name: keras.Input(shape=(num_choices, None), dtype="int32",
                                name=name) for name in F.ENCODER_INPUTS}
    pooled = encoder({k: to_rows(v) for k, v in inputs.items()})[
        F.POOLED_OUTPUT]
    logits = keras.ops.reshape(choice_head(pooled), (-1, num_choices))
    real = keras.ops.any(keras.ops.not_equal(inputs[F.INPUT_MASK], 0),
                         axis=-1)
    logits = keras.ops.where(real, logits, PADDED_CHOICE_LOGIT)
    super().__init__(inputs=inputs, outputs={F.LOGITS: logits}, dtype=dtype,
                     **kwargs)
    # === Config ===
    self.config = config
    self.num_choices = num_choices
    self.classifier_dropout = classifier_dropout
    self.encoder = encoder
    self.choice_head = choice_head

  @property
  def checkpoint_items(self):
    """{checkpoint object name: trackable} (`training.checkpoints`)."""
    return {"encoder": self.encoder, "choice_head": self.choice_head}

  def get_config(self):
    return model_config(self, num_choices=self.num_choices,
                        classifier_dropout=self.classifier_dropout)

  @classmethod
  def from_config(cls, config):
    return cls(**model_kwargs(config))
