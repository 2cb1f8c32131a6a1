"""The original scripts' flag names reach the run settings.

In-process, at the level of the options and settings functions: the TPU
flags (--use_tpu, --tpu_name, --tpu_zone, --gcp_project, --num_tpu_cores)
of run_pretraining, run_classifier and run_ner become the arguments of the
TPU strategy, and fine-tuning's --predict_batch_size,
--save_checkpoints_steps and --keep_checkpoint_max reach the trainer and the
predict step. No TPU exists here: `runtime.make_strategy` is replaced by
a recorder that stops the run, so nothing connects and nothing is written.
"""

import types

import pytest

from albert_tf.training import finetuning
from albert_tf import run_classifier
from albert_tf.training import runtime
from albert_tf import run_ner
from albert_tf import run_pretraining as rp

TPU_FLAGS = {"use_tpu": True, "tpu_name": "x", "tpu_zone": "z",
             "gcp_project": "p", "num_tpu_cores": 8}
TPU_STRATEGY = {"name": "tpu", "tpu": "x", "tpu_zone": "z",
                "gcp_project": "p"}


class _StrategyMade(Exception):
  """Raised by the recorder instead of connecting to a TPU."""


@pytest.fixture
def strategy_calls(monkeypatch):
  """The arguments of every make_strategy call; the call stops the run."""
  calls = []

  def record(name, tpu=None, num_gpus=0, tpu_zone=None, gcp_project=None,
             worker_timeout_secs=None):
    del num_gpus, worker_timeout_secs
    calls.append({"name": name, "tpu": tpu, "tpu_zone": tpu_zone,
                  "gcp_project": gcp_project})
    raise _StrategyMade()

  monkeypatch.setattr(runtime, "make_strategy", record)
  return calls


def _ignored_cores_logged(messages):
  return [m for m in messages if "--num_tpu_cores=8 is ignored" in m]


# ------------------------------------------------------------ TPU flags
def test_pretraining_tpu_flags_map_to_the_tpu_strategy(
    tmp_path, strategy_calls, absl_log):
  p = rp.params_from_argv(
      ["--preset=albert_tiny_zh", f"--input_file={tmp_path}/*.tfrecord",
       f"--output_dir={tmp_path}/out"]
      + [f"--{k}" if v is True else f"--{k}={v}"
         for k, v in TPU_FLAGS.items()])
  with pytest.raises(_StrategyMade):
    rp.run(p)
  assert strategy_calls == [TPU_STRATEGY]
  assert len(_ignored_cores_logged(absl_log)) == 1
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module", [run_classifier, run_ner],
                         ids=["run_classifier", "run_ner"])
def test_finetuning_tpu_flags_map_to_the_tpu_strategy(
    module, tmp_path, strategy_calls, absl_log):
  task_name = "sentiment" if module is run_classifier else "peoples_daily_ner"
  with pytest.raises(_StrategyMade):
    module.run(task_name=task_name, data_dir=str(tmp_path),
               output_dir=str(tmp_path / "out"), preset="albert_tiny_zh",
               do_train=True, **TPU_FLAGS)
  assert strategy_calls == [TPU_STRATEGY]
  assert len(_ignored_cores_logged(absl_log)) == 1
  assert not (tmp_path / "out").exists()


def test_tpu_flag_names_fold_into_the_new_ones(strategy_calls):
  # --distribution_strategy=tpu --tpu=a: the TF2 names win over --tpu_name.
  with pytest.raises(_StrategyMade):
    runtime.strategy_from_flags("tpu", tpu="a", tpu_name="b")
  assert [(c["name"], c["tpu"]) for c in strategy_calls] == [("tpu", "a")]
  with pytest.raises(runtime.RunConfigError, match="--use_tpu.*mirrored"):
    runtime.strategy_from_flags("mirrored", use_tpu=True)


# ------------------------------------------------------------ fine-tuning
def _options(**kwargs):
  return run_classifier.ClassifierOptions(
      task_name="sentiment", data_dir="data", output_dir="out", do_train=True,
      do_eval=True, **kwargs)


def test_save_checkpoints_steps_and_keep_checkpoint_max_reach_the_trainer():
  task = types.SimpleNamespace(steps_per_epoch=lambda batch: 50)
  settings = finetuning.trainer_settings(
      _options(train_step=40, save_checkpoints_steps=8,
               keep_checkpoint_max=3), task)
  assert (settings.num_train_steps, settings.checkpoint_steps,
          settings.keep_checkpoint_max) == (40, 8, 3)
  # --save_checkpoints_steps is the original name of --eval_every_steps.
  same = finetuning.trainer_settings(
      _options(train_step=40, eval_every_steps=8, save_checkpoints_steps=8),
      task)
  assert same.checkpoint_steps == 8
  with pytest.raises(ValueError, match="save_checkpoints_steps=8.*"
                     "eval_every_steps=5"):
    finetuning.trainer_settings(
        _options(train_step=40, eval_every_steps=5, save_checkpoints_steps=8),
        task)
  # Unset: one checkpoint (and eval) per epoch.
  assert finetuning.trainer_settings(_options(train_step=40),
                                     task).checkpoint_steps == 50


class _PredictRecorder:
  """A task whose predict records the batch size it was called with."""
  eval_batch_size = 64

  def __init__(self):
    self.predict_batch_sizes = []

  def predict(self, model, output_dir):
    del model, output_dir
    self.predict_batch_sizes.append(self.eval_batch_size)
    return {}


@pytest.mark.parametrize("module", [run_classifier, run_ner],
                         ids=["run_classifier", "run_ner"])
def test_predict_batch_size_is_the_batch_of_do_predict(module):
  options_class = (run_classifier.ClassifierOptions
                   if module is run_classifier else run_ner.NerOptions)
  trainer = types.SimpleNamespace(model=None, ckpt_dir="ckpt")
  sizes = []
  for predict_batch_size in (16, 0):  # 0: --eval_batch_size
    task = _PredictRecorder()
    options = options_class(task_name="t", data_dir="d", output_dir="o",
                            do_train=False, do_eval=False, do_predict=True,
                            eval_batch_size=32,
                            predict_batch_size=predict_batch_size)
    # The one writer of every family (run_* are aliases of finetune).
    from albert_tf.training import finetuning  # pylint: disable=g-import-not-at-top
    finetuning.evaluate_and_predict(options, task, trainer, chief=False,
                                    best_step=0)
    sizes += task.predict_batch_sizes
  assert sizes == [16, 32]
