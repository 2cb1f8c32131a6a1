"""Tests for albert_tf.training.optimization: schedule values, hyperparameters, weight decay."""

import keras
import numpy as np
import pytest

from albert_tf.training import optimization
from albert_tf.config import AlbertConfig
from albert_tf.modeling.models import AlbertPretrainer
from tests.pretraining_fixtures import TINY_CONFIG


def test_warmup_then_linear_decay_values():
  s = optimization.WarmupPolynomialDecay(0.00176, num_train_steps=1000,
                                         num_warmup_steps=100)
  lr = lambda t: float(s(t))
  assert lr(0) == 0.0
  np.testing.assert_allclose(lr(50), 0.00176 * 50 / 100, rtol=1e-6)
  np.testing.assert_allclose(lr(99), 0.00176 * 99 / 100, rtol=1e-6)
  # After warmup the original's decay, computed from step 0: (1 - t/N).
  np.testing.assert_allclose(lr(100), 0.00176 * 0.9, rtol=1e-6)
  np.testing.assert_allclose(lr(550), 0.00176 * 0.45, rtol=1e-6)
  assert lr(1000) == 0.0 and lr(5000) == 0.0


def test_polynomial_power_and_no_warmup():
  s = optimization.WarmupPolynomialDecay(1.0, num_train_steps=10, power=2.0)
  np.testing.assert_allclose([float(s(t)) for t in (0, 5, 10)],
                             [1.0, 0.25, 0.0], atol=1e-7)


def test_schedule_serialises():
  s = optimization.WarmupPolynomialDecay(0.1, 20, 5, power=0.5)
  restored = keras.optimizers.schedules.deserialize(
      keras.optimizers.schedules.serialize(s))
  assert restored.get_config() == s.get_config()
  opt = optimization.create_optimizer("lamb", s)
  clone = keras.optimizers.Lamb.from_config(opt.get_config())
  assert isinstance(clone._learning_rate,  # pylint: disable=protected-access
                    optimization.WarmupPolynomialDecay)
  assert float(clone.learning_rate) == 0.0  # step 0 of the warmup


@pytest.mark.parametrize("name,cls", [("lamb", keras.optimizers.Lamb),
                                      ("adamw", keras.optimizers.AdamW)])
def test_original_hyperparameters(name, cls):
  opt = optimization.create_optimizer(name, 1e-3)
  assert isinstance(opt, cls)
  assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.999, 1e-6)
  assert opt.weight_decay == 0.01 and opt.global_clipnorm == 1.0
  with pytest.raises(ValueError, match="--optimizer"):
    optimization.create_optimizer("sgd", 1e-3)


def test_weight_decay_excludes_layer_norm_and_bias_only():
  model = AlbertPretrainer(AlbertConfig.from_dict(TINY_CONFIG))
  excluded = {v.path for v in optimization.weight_decay_exclusions(model)}
  all_paths = {v.path for v in model.trainable_variables}
  decayed = all_paths - excluded
  assert excluded and decayed
  for path in excluded:
    assert path.endswith(("bias", "gamma", "beta")), path
  for path in decayed:
    assert path.endswith(("kernel", "embeddings")), path
  layer_norms = [p for p in excluded if p.endswith("gamma")]
  # embedding LN + 2 per shared block + the MLM head's LN
  assert len(layer_norms) == 4
  assert any(p.endswith("output_bias") for p in excluded)

  # Behaviour: with zero gradients only the decoupled decay moves weights.
  lr = 0.5
  opt = optimization.create_optimizer("adamw", lr)
  optimization.exclude_layer_norm_and_bias(opt, model)
  variables = model.trainable_variables
  before = [v.numpy().copy() for v in variables]
  opt.apply([np.zeros(v.shape, "float32") for v in variables], variables)
  for v, old in zip(variables, before):
    factor = 1.0 if v.path in excluded else 1.0 - lr * 0.01
    np.testing.assert_allclose(v.numpy(), old * factor, rtol=1e-5,
                               err_msg=v.path)
