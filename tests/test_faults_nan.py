"""Fault injection for non-finite values: one row per fault.

A training loss that turns NaN or inf stops the run with one line (the
step, the loss, the learning rate) and leaves the last finite checkpoint as
the latest; weights that are not finite are never saved, and every command
that reads weights (export_saved_model, export_tflite, fill_mask,
convert_checkpoint, a resumed or initialised training run) refuses them,
naming the variable. The rows are listed in docs/faults.md.
"""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import convert_checkpoint
from albert_tf import export_saved_model
from albert_tf import export_tflite
from albert_tf import fill_mask
from albert_tf import run_classifier
from albert_tf import run_pretraining as rp
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.training import callbacks
from albert_tf.training import checkpoints
from albert_tf.training import export as export_lib
from tests import test_convert_checkpoint as tcc
from tests.fixtures_data import fault_rows
from tests.pretraining_fixtures import tiny_argv
from tests.test_faults import _one_line_error, _options
from tests.test_faults import data  # noqa: F401  pylint: disable=unused-import

NOT_SAVED = ("stopped without saving this step; {} (a lower "
             "--learning_rate?)")


def _errors(stderr):
  return [l for l in stderr.splitlines() if l.startswith("error:")]


def _ckpt_steps(directory):
  return sorted(int(p.name[len("ckpt-"):-len(".index")])
                for p in directory.glob("ckpt-*.index"))


def _all_finite(prefix):
  reader = tf.train.load_checkpoint(str(prefix))
  values = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()]
  floats = [v for v in values if np.issubdtype(np.asarray(v).dtype,
                                               np.floating)]
  return len(floats) > 10 and all(np.isfinite(v).all() for v in floats)


def _poison(variable, nan=3, inf=1):
  """The first `nan` values of a variable NaN, the next `inf` ones inf."""
  value = np.array(variable.numpy())
  flat = value.reshape(-1)
  flat[:nan] = np.nan
  flat[nan:nan + inf] = np.inf
  variable.assign(value)
  return int(flat.size)


def _nan_checkpoint(data, directory, model_class):
  """A checkpoint of a tiny model with one poisoned variable (as a run
  without these checks left them); (prefix, variable path, its size)."""
  config = AlbertConfig.from_json_file(data / "config.json")
  model = model_class(config)  # built on construction
  variable, = [v for v in model.variables
               if v.path == "embeddings/word_embeddings/embeddings"]
  size = _poison(variable)
  prefix = checkpoints.save_weights(model, str(directory / "ckpt-1"), config)
  return prefix, variable.path, size


# ------------------------------------------------------------ the rows
def pretraining_learning_rate_1e9(data, tmp, monkeypatch):
  # --iterations_per_loop=3: the NaN shows in the loss logged after the
  # first call; the first checkpoint would have been at step 3. (LAMB's
  # trust ratio keeps each step at lr times the weights' norm: at 1e6 the
  # loss stayed finite for 5 steps.)
  argv = tiny_argv(tmp, "--learning_rate=1e9", "--do_eval")
  code, stderr = _one_line_error(lambda: rp.run(rp.params_from_argv(argv)))
  # Warmup ends at step 2: lr = 1e9 * (1 - 2/6) for step 3.
  assert code == 1 and _errors(stderr) == [
      "error: training loss is nan at step 3 (learning rate 6.66667e+08; steps "
      "1-3 ran as one --iterations_per_loop call): " +
      NOT_SAVED.format("no checkpoint was written")], stderr
  out = tmp / "out"
  assert _ckpt_steps(out) == [] and not (out / "checkpoint").exists()
  assert not (out / "eval_results.json").exists()
  assert not (out / "eval_results.txt").exists()


def pretraining_nan_after_finite_checkpoints(data, tmp, monkeypatch):
  argv = tiny_argv(tmp, "--learning_rate=1e6", "--iterations_per_loop=1",
                   "--save_checkpoints_steps=1")
  code, stderr = _one_line_error(lambda: rp.run(rp.params_from_argv(argv)))
  out = tmp / "out"
  errors = _errors(stderr)
  assert code == 1 and len(errors) == 1, stderr
  # Which check fires first depends on the CPU's rounding: the loss of step
  # 4 is NaN (AVX-512 EPYC), or step 3's update leaves NaN weights behind a
  # finite loss (AVX2-only EPYC). Either way the steps before it are kept.
  bad = int(errors[0].split(" step ", 1)[1].split(" ", 1)[0])
  kept = bad - 1
  lr = f"(learning rate {1e6 * (1 - kept / 6):g})"  # warmup ends at step 2
  tail = NOT_SAVED.format(f"the last finite checkpoint, {out}/ckpt-{kept}, "
                          "is kept")
  loss_nan = errors[0] == (
      f"error: training loss is nan at step {bad} {lr}: {tail}")
  weights_nan = errors[0].startswith(
      f"error: after step {bad} {lr}: the weights are not finite: "
      "embeddings/") and errors[0].endswith(tail)
  assert kept >= 2 and (loss_nan or weights_nan), stderr
  assert _ckpt_steps(out) == list(range(1, bad))
  assert tf.train.latest_checkpoint(str(out)) == str(out / f"ckpt-{kept}")
  assert _all_finite(out / f"ckpt-{kept}")
  # A NaN loss is not logged; a finite loss before NaN weights is.
  assert [json.loads(l)["step"] for l in
          (out / "train_log.jsonl").read_text().splitlines()] == list(
              range(1, bad if loss_nan else bad + 1))


def finetuning_learning_rate_1e6(data, tmp, monkeypatch):
  out = tmp / "out"
  code, stderr = _one_line_error(lambda: run_classifier.run(**_options(
      data, out, learning_rate=1e6, train_step=12)))
  # Warmup 10% of 12 steps = 1: lr = 1e6 * (1 - 2/12) for step 3 (the
  # 0-based step 2).
  assert code == 1 and _errors(stderr) == [
      "error: training loss is nan at step 3 (learning rate 833333): " +
      NOT_SAVED.format(f"the last finite checkpoint, {out}/ckpt-2, is kept")
  ], stderr
  assert _ckpt_steps(out) == [2] and _all_finite(out / "ckpt-2")
  assert not (out / "eval_results.json").exists()
  # The step-0 eval (the untrained head) is never kept as the best.
  best = json.loads((out / "best" / "best.json").read_text())
  assert (best["step"], best["checkpoint"]) == (2, "ckpt-2")
  assert [json.loads(l)["global_step"] for l in
          (out / "eval_log.jsonl").read_text().splitlines()] == [0, 2]


def weights_not_finite_at_a_save(data, tmp, monkeypatch):
  # A finite loss, then an update that leaves a weight NaN: the save at the
  # end of the interval is refused (the check before every save).
  model = keras.Sequential([keras.Input([2]), keras.layers.Dense(
      1, name="dense")])
  model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                       str(tmp), max_to_keep=5)

  class PoisonAtStep4(keras.callbacks.Callback):

    def on_train_batch_end(self, batch, logs=None):
      if int(self.model.optimizer.iterations.numpy()) == 4:
        self.model.layers[0].kernel.assign([[math.nan], [0.0]])
  x, y = np.ones([8, 2], np.float32), np.zeros([8, 1], np.float32)
  with pytest.raises(checkpoints.NonFiniteError) as error:
    model.fit(x, y, batch_size=2, steps_per_epoch=2, epochs=2, verbose=0,
              callbacks=[
                  callbacks.StopOnNonFiniteLoss(lambda step: 0.5, manager),
                  PoisonAtStep4(),
                  callbacks.CheckpointSaver(manager,
                                            schedule=lambda step: 0.5)])
  assert str(error.value) == (
      "after step 4 (learning rate 0.5): the weights are not finite: "
      "sequential/dense/kernel has 1 NaN and 0 inf of its 2 values: " +
      NOT_SAVED.format(f"the last finite checkpoint, {tmp}/ckpt-2, is kept"))
  assert _ckpt_steps(tmp) == [2]


def init_checkpoint_not_finite(data, tmp, monkeypatch):
  prefix, name, size = _nan_checkpoint(data, tmp / "init", AlbertPretrainer)
  with pytest.raises(checkpoints.NonFiniteError) as error:
    run_classifier.run(**_options(data, tmp / "out", init_checkpoint=prefix))
  assert str(error.value) == (
      f"--init_checkpoint={prefix}: the weights are not finite: {name} has "
      f"3 NaN and 1 inf of its {size} values")
  assert _ckpt_steps(tmp / "out") == []
  assert not (tmp / "out" / "best").exists()


def export_of_a_nan_checkpoint(data, tmp, monkeypatch):
  prefix, name, size = _nan_checkpoint(data, tmp / "ckpt", AlbertEncoder)
  with pytest.raises(checkpoints.NonFiniteError) as error:
    export_saved_model.export(prefix, str(tmp / "sm"), model="encoder",
                              vocab_file=str(data / "vocab.txt"),
                              max_seq_length=8)
  assert str(error.value) == (
      f"--checkpoint={prefix}: the weights are not finite: {name} has 3 NaN "
      f"and 1 inf of its {size} values")
  assert name == "embeddings/word_embeddings/embeddings"
  assert not (tmp / "sm").exists() or os.listdir(tmp / "sm") == []


def tflite_of_a_nan_saved_model(data, tmp, monkeypatch):
  # A SavedModel with NaN weights, as an export without this check wrote.
  prefix, name, size = _nan_checkpoint(data, tmp / "ckpt", AlbertEncoder)
  # The export's check is the library's (training/export.py, which the
  # command calls): switched off here.
  monkeypatch.setattr(export_lib, "check_finite", lambda *a: None)
  path = export_saved_model.export(prefix, str(tmp / "sm"), model="encoder",
                                   vocab_file=str(data / "vocab.txt"),
                                   max_seq_length=8)
  output = tmp / "tflite" / "model.tflite"
  with pytest.raises(checkpoints.NonFiniteError) as error:
    export_tflite.convert(path, str(output), quantize="none")
  assert str(error.value) == (
      f"--saved_model={path}: the weights are not finite: {name} has 3 NaN "
      f"and 1 inf of its {size} values")
  assert not output.parent.exists() or os.listdir(output.parent) == []


def fill_mask_of_a_nan_checkpoint(data, tmp, monkeypatch):
  prefix, name, size = _nan_checkpoint(data, tmp / "ckpt", AlbertPretrainer)
  with pytest.raises(checkpoints.NonFiniteError) as error:
    fill_mask.load(prefix, vocab_file=str(data / "vocab.txt"))
  assert str(error.value) == (
      f"--checkpoint={prefix}: the weights are not finite: {name} has 3 NaN "
      f"and 1 inf of its {size} values")


def convert_of_a_nan_checkpoint(data, tmp, monkeypatch):
  cfg = tcc.tiny_config(layers=1)
  w, blocks = tcc.random_weights(cfg, np.random.default_rng(0))
  names = tcc.google_names(w, blocks)
  bias = "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/" \
         "dense/bias"
  names[bias] = names[bias].copy()
  names[bias][[0, 5]] = np.nan
  source = tcc.write_tf1_checkpoint(names, str(tmp / "model.ckpt"),
                                    with_slots=False)
  cfg.to_json_file(tmp / "albert_config.json")
  with pytest.raises(checkpoints.NonFiniteError) as error:
    convert_checkpoint.convert("original", source, str(tmp / "out"),
                               str(tmp / "albert_config.json"),
                               log=lambda m: 0)
  # Named as the converted model names it (the variable it was assigned to).
  assert str(error.value) == (
      f"--checkpoint={source}: the weights are not finite: "
      "group_0_inner_group_0/ffn_1/intermediate_dense/bias has 2 NaN and 0 "
      f"inf of its {tcc.I} values")
  assert not (tmp / "out").exists()


FAULTS = [pretraining_learning_rate_1e9,
          pretraining_nan_after_finite_checkpoints,
          finetuning_learning_rate_1e6, weights_not_finite_at_a_save,
          init_checkpoint_not_finite, export_of_a_nan_checkpoint,
          tflite_of_a_nan_saved_model, fill_mask_of_a_nan_checkpoint,
          convert_of_a_nan_checkpoint]


# The row that trains to finite checkpoints and then to NaN: `make
# test-slow` (tests/fixtures_data.fault_rows).
SLOW_ROWS = {
    "pretraining_nan_after_finite_checkpoints",
}


@pytest.mark.parametrize("fault", fault_rows(FAULTS, SLOW_ROWS))
def test_fault(fault, data, tmp_path, monkeypatch):
  fault(data, tmp_path, monkeypatch)
