"""Checks every model and every task family must pass, written once.

The shape of keras-hub's `TestCase.run_backbone_test` / `run_task_test`:
a test names a model (a build function, inputs, which outputs have a
sequence axis, which are promised float32) and calls the `run_*` helpers
here; each helper asserts numbers against a reference that does not go
through the code it checks (a second model, a reload, NumPy).

  run_config_round_trip      get_config -> from_config: same config, same
                             variables, same outputs with the weights copied
  run_saving_test            .keras save + load: the same outputs
  run_checkpoint_test        make_checkpoint -> restore_weights into a model
                             of other weights: every variable, every part
  run_mixed_precision_test   mixed_bfloat16: output dtypes, values within a
                             bf16 tolerance, LayerNorm in float32
  run_variable_sequence_test seq 8 vs the same text padded to 16
  run_task_test              a task's compiled loss/metrics on one batch vs
                             NumPy from the model's own outputs
"""

import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.training import checkpoints
from tests.numpy_reference import assert_close_to_scale


def randomize_weights(model, seed):
  """Every variable drawn anew (LayerNorm gammas around 1).

  Initial biases and betas are zeros, so two fresh models agree on them and
  a restore that skipped them would go unnoticed; random values make every
  variable count in a comparison.
  """
  rng = np.random.default_rng(seed)
  for v in model.weights:
    v.assign(rng.normal(0, 0.2, v.shape).astype(v.dtype) +
             (1.0 if v.path.endswith("gamma") else 0.0))


def weights_by_path(model):
  """{variable path: numpy value}; asserts the paths are unique."""
  values = {v.path: v.numpy() for v in model.weights}
  assert len(values) == len(model.weights), sorted(
      v.path for v in model.weights)
  return values


def copy_weights(source, target):
  """Assigns source's variables to target's of the same path."""
  values = weights_by_path(source)
  assert sorted(values) == sorted(v.path for v in target.weights)
  for v in target.weights:
    v.assign(values[v.path])


def encoder_batch(vocab_size, batch=2, seq=8, seed=0):
  """int32 encoder inputs [batch, seq]: row 0 all real, the others padded
  after 5 tokens; two segments."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1:, 5:] = 0
  ids[mask == 0] = 0
  segments = np.zeros_like(ids)
  segments[:, seq // 2:] = 1
  segments[mask == 0] = 0
  return {F.INPUT_IDS: ids, F.INPUT_MASK: mask, F.SEGMENT_IDS: segments}


def pad_batch(inputs, seq, vocab_size, seed=1):
  """`inputs` padded to `seq` positions. The new positions hold random
  token ids under input_mask 0: only the mask may keep them out."""
  rng = np.random.default_rng(seed)
  padded = {}
  for name, value in inputs.items():
    # The sequence axis is the last ([batch, seq], or [batch, choices, seq]).
    shape = value.shape[:-1] + (seq - value.shape[-1],)
    if name == F.INPUT_IDS:
      fill = rng.integers(5, vocab_size, shape)
    else:
      fill = np.zeros(shape)
    if name == F.MASKED_LM_POSITIONS:  # positions index the text: unchanged
      padded[name] = value
    else:
      padded[name] = np.concatenate([value, fill.astype(value.dtype)], -1)
  return padded


def _outputs(model, inputs):
  return {k: np.asarray(v) for k, v in model(inputs, training=False).items()}


def _assert_outputs_close(actual, expected, rel):
  assert sorted(actual) == sorted(expected)
  for name in expected:
    assert actual[name].shape == expected[name].shape, name
    assert_close_to_scale(actual[name], expected[name], rel=rel)


# ------------------------------------------------------------------ models
def run_config_round_trip(model, inputs):
  """`from_config(get_config())`: same config dict, same variable paths and
  shapes, and with the weights copied by path the same outputs."""
  clone = model.__class__.from_config(model.get_config())
  assert clone.get_config() == model.get_config()
  assert ([(v.path, tuple(v.shape)) for v in clone.weights] ==
          [(v.path, tuple(v.shape)) for v in model.weights])
  copy_weights(model, clone)
  _assert_outputs_close(_outputs(clone, inputs), _outputs(model, inputs),
                        rel=1e-6)


def run_saving_test(model, inputs, directory):
  """`keras.saving.save_model` + `load_model`: the same class, config and
  outputs (to 1e-6 of their magnitude)."""
  path = os.path.join(str(directory), "model.keras")
  keras.saving.save_model(model, path)
  loaded = keras.saving.load_model(path)
  assert type(loaded) is type(model)
  assert loaded.get_config() == model.get_config()
  _assert_outputs_close(_outputs(loaded, inputs), _outputs(model, inputs),
                        rel=1e-6)


def run_checkpoint_test(model, other, directory, expected_parts):
  """`make_checkpoint(model).write` then `restore_weights` into `other`.

  `other` is a model of the same class and config with other random
  weights. After the restore every variable of `other` equals the
  model's, and the parts restored are the model's `checkpoint_items`
  (which are `expected_parts`), none missing.
  """
  assert sorted(model.checkpoint_items) == sorted(expected_parts)
  saved = weights_by_path(model)
  before = weights_by_path(other)
  assert sorted(before) == sorted(saved)
  unchanged = [p for p in saved if np.array_equal(saved[p], before[p])]
  assert not unchanged, f"not re-randomized: {unchanged}"
  prefix = os.path.join(str(directory), "ckpt")
  checkpoints.make_checkpoint(model).write(prefix)
  report = checkpoints.restore_weights(prefix, other)
  assert report["restored"] == sorted(model.checkpoint_items)
  assert report["missing"] == []
  after = weights_by_path(other)
  differ = [p for p in saved if not np.array_equal(saved[p], after[p])]
  assert not differ, f"not restored from {prefix}: {differ}"


def run_mixed_precision_test(build, reference, inputs, float32_outputs,
                             num_layer_norms):
  """The model built under the mixed_bfloat16 global policy, given the
  reference's weights, against the float32 reference.

  Outputs in `float32_outputs` are float32 and the others bfloat16. Each
  value is within 5e-2 * max|reference| + 1e-3 of the reference and the
  mean error within 1.5e-2 * max|reference|: bf16 keeps 8 bits of
  mantissa (2e-3 relative per rounding), and four shared-block layers of
  random weights compound that to about 3% at the worst entry (the pooled
  tanh) and 0.7% on average, while a wrong weight or mask is off by the
  magnitude itself. Every LayerNormalization (`num_layer_norms` of them)
  computes and keeps its variables in float32. The global policy is
  restored.
  """
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("mixed_bfloat16")
  try:
    model = build()
  finally:
    keras.config.set_dtype_policy(previous)
  assert model.dtype_policy.name == "mixed_bfloat16"
  copy_weights(reference, model)
  sublayers = model._flatten_layers()  # pylint: disable=protected-access
  norms = [layer for layer in sublayers
           if isinstance(layer, keras.layers.LayerNormalization)]
  assert len(norms) == num_layer_norms
  for norm in norms:
    assert norm.compute_dtype == "float32", norm.path
    assert [v.dtype for v in norm.weights] == ["float32", "float32"], norm.path
  mixed = model(inputs, training=False)
  expected = _outputs(reference, inputs)
  assert sorted(mixed) == sorted(expected)
  for name, value in mixed.items():
    want = tf.float32 if name in float32_outputs else tf.bfloat16
    assert value.dtype == want, f"{name}: {value.dtype}, expected {want}"
    ref = expected[name]
    scale = float(np.abs(ref).max())
    value = np.asarray(tf.cast(value, tf.float32))
    np.testing.assert_allclose(value, ref, atol=5e-2 * scale + 1e-3, rtol=0,
                               err_msg=name)
    mean_error = float(np.abs(value - ref).mean())
    assert mean_error <= 1.5e-2 * scale, (name, mean_error, scale)


def run_variable_sequence_test(model, inputs, sequence_outputs, seq=16):
  """The same model on `inputs` and on them padded to `seq` positions:
  the outputs in `sequence_outputs` agree on the first positions, the
  others (pooled, logits) entirely, to 1e-5 of their magnitude."""
  short = _outputs(model, inputs)
  padded = _outputs(model, pad_batch(inputs, seq, model.config.vocab_size))
  length = inputs[F.INPUT_IDS].shape[-1]
  assert sorted(padded) == sorted(short)
  for name, value in short.items():
    if name in sequence_outputs:
      assert padded[name].shape[1] == seq, name
      assert_close_to_scale(padded[name][:, :length], value, rel=1e-5)
    else:
      assert_close_to_scale(padded[name], value, rel=1e-5)


# ------------------------------------------------------------------ tasks
def first_batch(distributed_dataset):
  """The first batch of a task's (default-strategy) input, as numpy."""
  batch = next(iter(distributed_dataset))
  return tf.nest.map_structure(np.asarray, batch)


def softmax_cross_entropy(logits, labels):
  """Per-row -log softmax(logits)[label], in float64."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]


def run_task_test(task, config, batch, numpy_metrics, seed=3):
  """A task's model compiled with the task's losses and metrics, as the
  trainer compiles it, evaluated on one batch.

  Args:
    task: an `albert_tf.tasks` Task.
    config: the AlbertConfig its model is built from.
    batch: `(inputs, targets)` for a compiled loss, or the features dict
      for a model with its own test_step (pretraining).
    numpy_metrics: fn(outputs, batch) -> {metric name: expected value},
      computed in NumPy from the model's outputs (dict of numpy arrays) on
      the batch's inputs.
  Returns:
    (the model, the expected metrics).
  """
  model = task.build_model(config)
  randomize_weights(model, seed)
  model.compile(loss=task.build_losses(), metrics=task.build_metrics())
  if isinstance(batch, tuple):
    inputs, targets = batch
  else:
    inputs, targets = batch, None
  model_inputs = {k: inputs[k] for k in (*F.ENCODER_INPUTS,
                                          F.MASKED_LM_POSITIONS)
                  if k in inputs}
  results = model.evaluate(inputs, targets, batch_size=len(
      inputs[F.INPUT_IDS]), verbose=0, return_dict=True)
  expected = numpy_metrics(_outputs(model, model_inputs), batch)
  assert set(expected) <= set(results), sorted(results)
  for name, value in expected.items():
    assert_close_to_scale(results[name], value, rel=1e-5)
  return model, expected
