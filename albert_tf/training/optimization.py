"""The original ALBERT optimizer: warmup + polynomial decay, LAMB or AdamW.

    schedule = WarmupPolynomialDecay(0.00176, num_train_steps=125000,
                                     num_warmup_steps=3125)
    optimizer = create_optimizer("lamb", schedule)
    exclude_layer_norm_and_bias(optimizer, model)   # before optimizer.build

Facts kept from google-research/albert `optimization.py`: learning rate
lr(t) = init_lr * t / W for t < W, else init_lr * (1 - t / N) ** power with
t the 0-based step (the decay runs from step 0, the warmup overrides its
first W steps); beta_1 0.9, beta_2 0.999, epsilon 1e-6, weight decay 0.01
except on LayerNorm and bias variables, gradients clipped to global norm 1.0.

Differences of the Keras optimizers from the TF1 code, kept on purpose
(they are what `keras.optimizers.Lamb/AdamW` do): moments are
bias-corrected, and the decoupled weight decay w -= lr * wd * w is applied
before the Adam/LAMB update rather than folded into the LAMB trust ratio.
"""

from typing import List

import keras
import tensorflow as tf

from albert_tf.training.options import OPTIMIZERS

BETA_1 = 0.9
BETA_2 = 0.999
EPSILON = 1e-6
WEIGHT_DECAY = 0.01
GLOBAL_CLIPNORM = 1.0


@keras.saving.register_keras_serializable(package="albert_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup to `initial_learning_rate`, then polynomial decay to 0.

  `__call__(step)` takes the 0-based optimizer step and returns a float32
  scalar; steps past num_train_steps give end_learning_rate.
  """

  def __init__(self, initial_learning_rate, num_train_steps,
               num_warmup_steps=0, power=1.0, end_learning_rate=0.0):
    if num_train_steps <= 0:
      raise ValueError(f"num_train_steps must be positive, got "
                       f"{num_train_steps}")
    if num_warmup_steps < 0:
      raise ValueError(f"num_warmup_steps must be >= 0, got "
                       f"{num_warmup_steps}")
    self.initial_learning_rate = float(initial_learning_rate)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)
    self.power = float(power)
    self.end_learning_rate = float(end_learning_rate)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    progress = tf.minimum(step, self.num_train_steps) / self.num_train_steps
    decayed = ((self.initial_learning_rate - self.end_learning_rate) *
               tf.pow(1.0 - progress, self.power) + self.end_learning_rate)
    if not self.num_warmup_steps:
      return decayed
    warmup = self.initial_learning_rate * step / self.num_warmup_steps
    return tf.where(step < self.num_warmup_steps, warmup, decayed)

  def get_config(self):
    return {"initial_learning_rate": self.initial_learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "power": self.power,
            "end_learning_rate": self.end_learning_rate}


def create_optimizer(name, learning_rate, weight_decay=WEIGHT_DECAY,
                     global_clipnorm=GLOBAL_CLIPNORM):
  """`keras.optimizers.Lamb` or `AdamW` with the original hyperparameters."""
  kwargs = dict(learning_rate=learning_rate, beta_1=BETA_1, beta_2=BETA_2,
                epsilon=EPSILON, weight_decay=weight_decay,
                global_clipnorm=global_clipnorm)
  if name == "lamb":
    return keras.optimizers.Lamb(**kwargs)
  if name == "adamw":
    return keras.optimizers.AdamW(**kwargs)
  raise ValueError(f"--optimizer must be one of {OPTIMIZERS}, got {name!r}")


def _is_layer_norm(layer) -> bool:
  # Matches keras.layers.LayerNormalization and any project LayerNorm class.
  return any("layernorm" in cls.__name__.lower().replace("_", "")
             for cls in type(layer).__mro__)


def weight_decay_exclusions(model: keras.Model) -> List[keras.Variable]:
  """The variables that get no weight decay: LayerNorm weights and biases.

  As the original's exclude list ["LayerNorm", "layer_norm", "bias"]: every
  variable of a LayerNorm layer (gamma, beta) and every variable whose name
  contains "bias" (Dense biases, the MLM output bias).
  """
  excluded = {}
  # Every layer the model holds, at any depth (the checkpoint object graph:
  # Keras has no public recursive listing of sublayers).
  for layer in tf.train.TrackableView(model).descendants():
    if isinstance(layer, keras.layers.Layer) and _is_layer_norm(layer):
      for v in layer.trainable_weights:
        excluded[id(v)] = v
  for v in model.trainable_weights:
    if "bias" in v.name or "layer_norm" in v.path or "LayerNorm" in v.path:
      excluded[id(v)] = v
  return list(excluded.values())


def exclude_layer_norm_and_bias(optimizer, model: keras.Model):
  """Configures `optimizer` (before it is built) to skip weight decay there."""
  exclusions = weight_decay_exclusions(model)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
  inner.exclude_from_weight_decay(var_list=exclusions)
  return exclusions
