"""The original ALBERT optimizers: warmup + polynomial decay, LAMB or AdamW.

    schedule = WarmupPolynomialDecay(0.00176, num_train_steps=125000,
                                     num_warmup_steps=3125)
    optimizer = create_optimizer("lamb", schedule)

`lamb` and `adamw` are google-research/albert's LAMBOptimizer and
AdamWeightDecayOptimizer (`lamb_optimizer.py`, `optimization.py`) as Keras 3
optimizers. Per variable w with gradient g (after clipping all gradients to
global norm 1.0), moments m, v, and lr the schedule at the 0-based step:

    m <- b1 m + (1 - b1) g        v <- b2 v + (1 - b2) g^2   (no bias correction)
    u <- m / (sqrt(v) + eps)
    u <- u + weight_decay_rate * w          unless w is excluded
    adamw: w <- w - lr u
    lamb:  w <- w - r lr u,  r = |w| / |u| if both > 0 else 1;  r = 1 if excluded

A variable is excluded (from the decay, and from LAMB's layer adaptation)
when its Keras path matches "LayerNorm", "layer_norm" or "bias", the
original's regexes: the model names its variables as the TF1 checkpoint
did (embeddings/LayerNorm/gamma, .../query_bias). Without bias correction
the first steps are about 3x larger per unit of gradient than Adam's, which
is why the original recipes pair these rules with a warmup.

`keras_lamb` and `keras_adamw` are `keras.optimizers.Lamb` / `AdamW` with
the same hyperparameters: bias-corrected moments, decoupled decay
w -= lr * wd * w outside the trust ratio, the ratio applied to LayerNorm
and bias variables too. Older runs used them under the names lamb/adamw
(output_dir.py tells such runs apart).
"""

import re
from typing import List, Optional, Sequence

import keras
from keras import ops
import tensorflow as tf

from albert_tf.core.options import OPTIMIZERS

BETA_1 = 0.9
BETA_2 = 0.999
EPSILON = 1e-6
WEIGHT_DECAY = 0.01
GLOBAL_CLIPNORM = 1.0
# The original's exclude_from_weight_decay (run_pretraining, run_classifier).
EXCLUDE_PATTERNS = ("LayerNorm", "layer_norm", "bias")
# Which update rule an --optimizer name means (recorded in the fingerprint).
ORIGINAL_RULE = "google-research/albert"
KERAS_RULE = "keras"


def update_rule(name: str) -> str:
  return KERAS_RULE if name.startswith("keras_") else ORIGINAL_RULE


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


class _OriginalRule(keras.optimizers.Optimizer):
  """The step both original optimizers share (see the module docstring).

  `weight_decay_rate` is not Keras's `weight_decay` on purpose: the base
  class would apply that one as a separate decoupled step.
  """

  adapt_layers = False  # LAMB's trust ratio

  def __init__(self, learning_rate=0.001, weight_decay_rate=WEIGHT_DECAY,
               beta_1=BETA_1, beta_2=BETA_2, epsilon=EPSILON,
               exclude_from_weight_decay: Sequence[str] = EXCLUDE_PATTERNS,
               exclude_from_layer_adaptation: Optional[Sequence[str]] = None,
               global_clipnorm=GLOBAL_CLIPNORM, name=None, **kwargs):
    super().__init__(learning_rate=learning_rate,
                     global_clipnorm=global_clipnorm, name=name, **kwargs)
    self.weight_decay_rate = float(weight_decay_rate)
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_patterns = tuple(exclude_from_weight_decay or ())
    # As the original: the decay's list unless one is given.
    self.exclude_adaptation_patterns = tuple(
        exclude_from_layer_adaptation or self.exclude_patterns)
    self._excluded_keys = set()

  def exclude_from_weight_decay(self, var_list=None, var_names=None):
    """Adds variables (by object) or name patterns to the exclusions from
    decay and layer adaptation alike; before `build`."""
    if self.built:
      raise ValueError("exclude_from_weight_decay() must be called before "
                       "the optimizer is built")
    self._excluded_keys.update(self._var_key(v) for v in var_list or ())
    self.exclude_patterns += tuple(var_names or ())
    self.exclude_adaptation_patterns += tuple(var_names or ())

  def _clip_gradients(self, grads):
    # Each replica's gradients, before the sum: only made dense here (they
    # are clipped in _all_reduce_sum_gradients). An embedding's IndexedSlices
    # would be squared per token before repeated rows add up, in the norm
    # and the moments; the rule is defined on the dense gradient (the
    # original's TPU runs, one-hot embeddings), and every row is updated.
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
            for g in grads]

  def _all_reduce_sum_gradients(self, grads_and_vars):
    # The global norm of the whole batch's gradient, as on one device: the
    # same update on any number of replicas. (Keras clips each replica's
    # share before the sum; the original's TPU runs clipped each core's
    # gradient before the cross-core mean, so they depended on the count.)
    pairs = list(super()._all_reduce_sum_gradients(grads_and_vars))
    if not self.global_clipnorm or not pairs:
      return pairs
    grads, _ = tf.clip_by_global_norm([g for g, _ in pairs],
                                      self.global_clipnorm)
    return list(zip(grads, [v for _, v in pairs]))

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    # Decided once per variable, from its Keras path (update_step may see
    # the backend variable, which has no path).
    def excluded(patterns):
      return {self._var_key(v) for v in var_list
              if self._var_key(v) in self._excluded_keys
              or any(re.search(p, v.path) for p in patterns)}
    self._no_decay = excluded(self.exclude_patterns)
    self._no_adaptation = excluded(self.exclude_adaptation_patterns)
    # The TF1 checkpoints' slot names.
    self._m, self._v = self.add_optimizer_variables(
        var_list, ["adam_m", "adam_v"])

  def update_step(self, gradient, variable, learning_rate):
    lr = ops.cast(learning_rate, variable.dtype)
    g = ops.cast(gradient, variable.dtype)
    index = self._get_variable_index(variable)
    m, v = self._m[index], self._v[index]
    self.assign(m, ops.add(ops.multiply(m, self.beta_1),
                           ops.multiply(g, 1.0 - self.beta_1)))
    self.assign(v, ops.add(ops.multiply(v, self.beta_2),
                           ops.multiply(ops.square(g), 1.0 - self.beta_2)))
    update = ops.divide(m, ops.add(ops.sqrt(v), self.epsilon))
    # Decided per variable when the step is traced (a Python bool).
    key = self._var_key(variable)
    if self.weight_decay_rate and key not in self._no_decay:
      update = ops.add(update, ops.multiply(variable, self.weight_decay_rate))
    if self.adapt_layers and key not in self._no_adaptation:
      w_norm = ops.sqrt(ops.sum(ops.square(variable)))
      u_norm = ops.sqrt(ops.sum(ops.square(update)))
      ratio = ops.where(ops.logical_and(w_norm > 0, u_norm > 0),
                        ops.divide(w_norm, ops.maximum(u_norm, 1e-30)), 1.0)
      update = ops.multiply(update, ratio)
    self.assign_sub(variable, ops.multiply(lr, update))

  def get_config(self):
    config = super().get_config()
    config.update({
        "weight_decay_rate": self.weight_decay_rate, "beta_1": self.beta_1,
        "beta_2": self.beta_2, "epsilon": self.epsilon,
        "exclude_from_weight_decay": list(self.exclude_patterns),
        "exclude_from_layer_adaptation": list(
            self.exclude_adaptation_patterns)})
    return config


@keras.saving.register_keras_serializable(package="albert_tf")
class AdamWeightDecay(_OriginalRule):
  """google-research/albert's AdamWeightDecayOptimizer (module docstring)."""

  def __init__(self, learning_rate=0.001, name="adam_weight_decay", **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="albert_tf")
class Lamb(_OriginalRule):
  """google-research/albert's LAMBOptimizer (module docstring)."""

  adapt_layers = True

  def __init__(self, learning_rate=0.001, name="lamb", **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)


def create_optimizer(name, learning_rate, weight_decay=WEIGHT_DECAY,
                     global_clipnorm=GLOBAL_CLIPNORM):
  """The --optimizer of that name with the original hyperparameters
  (keras_lamb / keras_adamw: call `exclude_layer_norm_and_bias` before
  they are built)."""
  if name in ("lamb", "adamw"):
    cls = Lamb if name == "lamb" else AdamWeightDecay
    return cls(learning_rate=learning_rate, weight_decay_rate=weight_decay,
               global_clipnorm=global_clipnorm)
  kwargs = dict(learning_rate=learning_rate, beta_1=BETA_1, beta_2=BETA_2,
                epsilon=EPSILON, weight_decay=weight_decay,
                global_clipnorm=global_clipnorm)
  if name == "keras_lamb":
    return keras.optimizers.Lamb(**kwargs)
  if name == "keras_adamw":
    return keras.optimizers.AdamW(**kwargs)
  raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, "
                   f"got {name!r}")


def weight_decay_exclusions(model: keras.Model) -> List[keras.Variable]:
  """The variables that get no weight decay, as the original's exclude list
  ["LayerNorm", "layer_norm", "bias"]: every variable of a LayerNorm layer
  and every variable whose name contains "bias"."""
  excluded = {}
  # Every layer the model holds, at any depth (the checkpoint object graph:
  # Keras has no public recursive listing of sublayers); a LayerNorm is
  # keras.layers.LayerNormalization or any project LayerNorm class.
  for layer in tf.train.TrackableView(model).descendants():
    if isinstance(layer, keras.layers.Layer) and any(
        "layernorm" in cls.__name__.lower().replace("_", "")
        for cls in type(layer).__mro__):
      for v in layer.trainable_weights:
        excluded[id(v)] = v
  for v in model.trainable_weights:
    if "bias" in v.name or "layer_norm" in v.path or "LayerNorm" in v.path:
      excluded[id(v)] = v
  return list(excluded.values())


def exclude_layer_norm_and_bias(optimizer, model: keras.Model):
  """Configures `optimizer` (before it is built) to skip weight decay (and
  LAMB's layer adaptation) on every LayerNorm and bias variable of model."""
  exclusions = weight_decay_exclusions(model)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
  inner.exclude_from_weight_decay(var_list=exclusions)
  return exclusions
