"""What the fine-tuning CLIs share: options, flags, the trainer settings.

Every fine-tuning CLI takes the training, checkpoint, strategy and
precision flags of `options.FinetuneOptions` (defined without TF, so flags
parse before TF loads), builds its task (`albert_tf.tasks`), and hands it
to the trainer through `train_and_evaluate`.
"""

import os
import shutil
import time
from typing import Callable, Optional

from absl import logging
import keras
import tensorflow as tf

from albert_tf.core import file_io
from albert_tf.core import record
from albert_tf.tasks import registry
from albert_tf.training import checkpoints
from albert_tf.training import plots
from albert_tf.training import fast_path
from albert_tf.training import output_dir
from albert_tf.training import resolution
from albert_tf.training import runtime
from albert_tf.core.options import FinetuneOptions
from albert_tf.training.trainer import Trainer, TrainerSettings


def check_options(o: FinetuneOptions) -> None:
  """Checks that need no file, before anything is read or written (0 keeps
  its meaning for counts: every epoch, all examples)."""
  if not (o.do_train or o.do_eval or o.do_predict):
    raise ValueError("Nothing to do: set --do_train, --do_eval or --do_predict")
  for name in ("train_batch_size", "eval_batch_size", "log_every_steps",
               "iterations_per_loop", "keep_checkpoint_max", "learning_rate"):
    if not getattr(o, name) > 0:
      raise ValueError(f"--{name} must be positive, got {getattr(o, name)}")
  for name in ("train_step", "eval_every_steps", "save_checkpoints_steps",
               "max_train_examples", "max_eval_examples",
               "max_predict_examples", "predict_batch_size", "weight_decay"):
    if getattr(o, name) < 0:
      raise ValueError(f"--{name} must be 0 or more, got {getattr(o, name)}")
  if o.do_train and not o.train_step and not o.num_train_epochs > 0:
    raise ValueError(f"--num_train_epochs must be positive (or give "
                     f"--train_step), got {o.num_train_epochs}")
  if o.warmup_step < -1:
    raise ValueError(f"--warmup_step must be -1 (--warmup_proportion of "
                     f"training) or 0 or more, got {o.warmup_step}")
  if not 0 <= o.warmup_proportion <= 1:
    raise ValueError(f"--warmup_proportion must be in [0, 1], got "
                     f"{o.warmup_proportion}")
  if not 0 <= o.classifier_dropout < 1:
    raise ValueError(f"--classifier_dropout must be in [0, 1), got "
                     f"{o.classifier_dropout}")
  fast_path.check(o.mixed_precision, o.length_buckets, o.micro_batches)


def check_test_split(o: FinetuneOptions, data_stats: dict) -> None:
  """--do_predict on a test split of no examples is refused before anything
  is written: predicting nothing would replace the predictions in
  output_dir with an empty file."""
  test = (data_stats or {}).get("test") or {}
  count = next((test[k] for k in ("examples", "questions", "sentences")
                if k in test), None)
  if not o.do_predict or count != 0:
    return
  where = test.get("file") or test.get("source") or "the test split"
  header = " (its header only)" if test.get("header_lines") else ""
  raise ValueError(
      f"--do_predict: {where} holds no examples{header}: nothing to "
      f"predict, so the predictions in --output_dir={o.output_dir} are left "
      "as they are; fix the test file, or leave out --do_predict")


def recorded_info(o: FinetuneOptions) -> Optional[record.ModelInfo]:
  """What the model was fine-tuned with (the defaults of --max_seq_length,
  --do_lower_case, labels): the task record beside --init_checkpoint, or in
  output_dir when resuming or evaluating there."""
  info = (registry.read_record(o.init_checkpoint) if o.init_checkpoint
          else None)
  if info is None and os.path.isdir(o.output_dir):
    info = registry.read_record(o.output_dir)
  return info


def resolve_model(o: FinetuneOptions):
  """(config, tokenizer) of a fine-tuning run (`resolution.resolve_model`)
  from --init_checkpoint; or, for a run that trains nothing and names no
  model, from the --output_dir it evaluates or predicts with."""
  checkpoint, flag = o.init_checkpoint, "--init_checkpoint"
  if (not o.do_train and not (o.preset or o.albert_config_file or
                              o.init_checkpoint) and
      tf.io.gfile.exists(os.path.join(o.output_dir, checkpoints.CONFIG_NAME))):
    checkpoint, flag = o.output_dir, "--output_dir"
  return resolution.resolve_model(
      o.preset, o.albert_config_file, checkpoint, o.spm_model_file,
      o.vocab_file, o.do_lower_case, checkpoint_flag=flag)


def train_and_evaluate(o: FinetuneOptions, task, config, strategy_,
                       task_fingerprint: str, data_stats: dict,
                       evaluate_and_predict: Callable) -> dict:
  """The recipe once a CLI has built its task and read its splits: checks
  output_dir, then writes it; trains (resuming), restores the best
  checkpoint by the dev metric, and returns evaluate_and_predict(trainer,
  chief, best_step) merged into {"output_dir", "data", "best_step",
  "train_wall_s", "num_train_steps"}.
  """
  chief = runtime.is_chief(strategy_)
  settings = trainer_settings(o, task)
  optimizer = settings.optimizer_fingerprint() if o.do_train else None
  if optimizer and o.warmup_step < 0:
    # The warmup as given (a share of the steps), not the step count it
    # comes to: raising --train_step alone continues the run.
    optimizer = dict(optimizer, num_warmup_steps=None,
                     warmup_proportion=o.warmup_proportion)
  fingerprint = output_dir.make_fingerprint(
      task_fingerprint, config, task.tokenizer, optimizer,
      o.mixed_precision, o.train_batch_size,
      # What else changes the model a resumed run continues.
      {"max_seq_length": o.max_seq_length,
       "classifier_dropout": o.classifier_dropout,
       "label_list": list(task.record().label_list)})
  output_dir.check_output_dir(o.output_dir, fingerprint, o.overwrite)
  result = {"output_dir": o.output_dir, "data": data_stats}

  # Every input is valid: only now is output_dir written.
  # Held until this function returns: no second run writes here meanwhile.
  lock = None
  try:
    if chief:
      lock = output_dir.prepare_output_dir(
          o.output_dir, fingerprint, o.overwrite,
          keep=(task.tokenizer.model_file, o.albert_config_file))
      # An eval- or predict-only run leaves what training recorded alone.
      if o.do_train or registry.read_record(o.output_dir) is None:
        # What it reads, each split's file and size (not the step count: a
        # rerun with more steps continues the same model and record).
        keep = ("file", "source", "examples", "questions", "sentences")
        write_run_files(o.output_dir, config, task, training={
            "data_dir": getattr(o, "data_dir", None),
            "data": {split: {k: v for k, v in (stats or {}).items()
                             if k in keep}
                     for split, stats in (data_stats or {}).items()}})
    keras.utils.set_random_seed(o.seed)
    trainer = Trainer(task, config, settings, strategy_)
    trainer.restore(o.init_checkpoint, training=o.do_train)
    start = time.time()
    if o.do_train:
      trainer.train()
      result["train_wall_s"] = round(time.time() - start, 2)
      result["num_train_steps"] = settings.num_train_steps
    # Eval and predict with the best checkpoint by the dev metric, if kept.
    best_step = trainer.restore_best()
    result["best_step"] = trainer.step if best_step is None else best_step
    # The step-0 eval is never kept as the best, but a run whose training
    # never improved on it should say so.
    step0 = trainer.evaluated.get(0, {}).get(task.best_metric)
    best = trainer.best()
    if trainer.step > 0 and step0 is not None and (
        best is None or not best["metrics"][task.best_metric] > step0):
      logging.warning(checkpoints.NEVER_BEAT_STEP_0, o.output_dir)
      result["never_beat_step_0"] = True
    result.update(evaluate_and_predict(trainer, chief, result["best_step"]))
    logging.info("Results: %s", {k: v for k, v in result.items()
                                 if k not in ("data", "eval", "test")})
    trainer.finish()
  finally:
    if lock is not None:  # over, or failed: another run may write here
      lock.close()
  return result


def write_run_files(output_dir: str, config, task,
                    training: Optional[dict] = None) -> None:
  """albert_config.json, a copy of the tokenizer and task_record.json in
  output_dir: the output_dir alone is an --init_checkpoint or an export
  source."""
  config.to_json_file(os.path.join(output_dir,
                                   checkpoints.CONFIG_NAME))
  tokenizer = task.tokenizer
  copy = os.path.join(output_dir, os.path.basename(tokenizer.model_file))
  if os.path.abspath(copy) != os.path.abspath(tokenizer.model_file):
    shutil.copyfile(tokenizer.model_file, copy)
  info = task.record()
  if training is not None:
    info.training = training
  if info.task_module is None:  # how export and load find the family
    info.task_module = registry.module_source(type(task).__module__)
  info.write_beside(output_dir)


def trainer_settings(o: FinetuneOptions, task) -> TrainerSettings:
  """Steps, checkpoint interval and optimizer from the flags."""
  steps = 0
  if o.do_train:
    per_epoch = task.steps_per_epoch(o.train_batch_size)
    steps = o.train_step or max(1, int(round(per_epoch * o.num_train_epochs)))
  if o.eval_every_steps and o.save_checkpoints_steps and (
      o.eval_every_steps != o.save_checkpoints_steps):
    raise ValueError(f"--save_checkpoints_steps={o.save_checkpoints_steps} "
                     f"and --eval_every_steps={o.eval_every_steps}: one "
                     "interval serves both here; give one of them")
  interval = (o.eval_every_steps or o.save_checkpoints_steps or
              (per_epoch if o.do_train else 1))
  warmup = (o.warmup_step if o.warmup_step >= 0 else
            int(o.warmup_proportion * steps))
  if o.do_train and warmup > steps:
    logging.warning("--warmup_step=%d is past the last step (%d): the "
                    "learning rate warms up over all %d steps", warmup,
                    steps, steps)
    warmup = steps
  return TrainerSettings(
      output_dir=o.output_dir, num_train_steps=max(steps, 1),
      train_batch_size=o.train_batch_size, checkpoint_steps=interval,
      keep_checkpoint_max=o.keep_checkpoint_max,
      # An eval- or predict-only run has no training cadence to fit (nor
      # to warn about).
      iterations_per_loop=o.iterations_per_loop if o.do_train else 1,
      log_steps=o.log_every_steps,
      eval_at_checkpoints=o.do_eval, jit_compile=o.jit_compile,
      seq_length=o.max_seq_length, optimizer=o.optimizer,
      learning_rate=o.learning_rate,
      num_warmup_steps=warmup,
      weight_decay=o.weight_decay, steps_flag="train_step")


def evaluate_and_predict(o: FinetuneOptions, task, trainer, chief: bool,
                         best_step: int) -> dict:
  """Dev metrics, test predictions (+ metrics) and eval_results.json.

  eval_results.json holds the best checkpoint's dev metrics (an eval-only
  run evaluates anew), test_* for a labelled test split, and best_step.
  Returns {"eval": ..., "test": ...} (what there is).
  """
  result = {}
  # eval_results.json describes the model of best_step. A run replaces the
  # keys it computes (dev ones with --do_eval, test_* with --do_predict)
  # and keeps the earlier run's others while they describe the same model
  # (a predict-only run, or a --do_train run that trained nothing, keeps the
  # dev metrics); what it drops, it names (`_say_dropped`).
  path = os.path.join(o.output_dir, "eval_results.json")
  try:  # {} when missing or unreadable: it is rewritten whole
    with tf.io.gfile.GFile(path, "rb") as f:
      earlier = file_io.parse_json(f.read(), path)
  except (tf.errors.NotFoundError, ValueError):
    earlier = {}
  eval_results = {}
  if earlier.get("best_step", best_step) == best_step:
    eval_results = {k: v for k, v in earlier.items()
                    if not (o.do_eval and not k.startswith("test_"))}
  if o.do_eval:
    best = trainer.best() if o.do_train else None
    result["eval"] = best["metrics"] if best else trainer.evaluate()
    eval_results.update({k: v for k, v in result["eval"].items()
                         if k != "global_step"})
    eval_results["best_step"] = best_step
    if chief:  # before predicting: a failing predict loses no dev result
      file_io.write_eval_results(o.output_dir, eval_results)
  if o.do_predict:
    task.eval_batch_size = o.predict_batch_size or o.eval_batch_size
    test = task.predict(trainer.model, o.output_dir if chief else
                        trainer.ckpt_dir)
    eval_results = {k: v for k, v in eval_results.items()
                    if not k.startswith("test_")}
    if test:
      result["test"] = test
      eval_results.update({f"test_{k}": v for k, v in test.items()})
  if getattr(o, "baseline", False):
    _add_baselines(o, task, result, eval_results)
  if eval_results and chief:
    eval_results["best_step"] = best_step
    file_io.write_eval_results(o.output_dir, eval_results)
  if chief:
    _say_dropped(o, earlier, eval_results, best_step)
  if chief and o.plots and o.do_train:
    plots.finetune_curves(o.output_dir, task.best_metric, eval_results)
  return result


def _say_dropped(o: FinetuneOptions, earlier: dict, now: dict,
                 best_step: int) -> None:
  """A warning naming the keys of the earlier eval_results.json that this
  run's leaves out, and why."""
  dropped = sorted(k for k in earlier if k not in now)
  if earlier.get("best_step", best_step) != best_step:
    groups = [(dropped, f"they describe the model of step "
               f"{earlier['best_step']}, and this run's is step {best_step}"
               + ("" if o.do_eval else " (--do_eval scores it)"))]
  else:
    groups = [([k for k in dropped if k.startswith("test_")],
               "they scored other test predictions than this run's, whose "
               "test split has no labels"),
              ([k for k in dropped if not k.startswith("test_")],
               "this run's eval does not compute them")]
  for keys, why in groups:
    if keys:
      shown = ", ".join(keys[:4]) + (f" and {len(keys) - 4} more"
                                     if len(keys) > 4 else "")
      logging.warning("%s: %s left out of the earlier results: %s",
                      os.path.join(o.output_dir, "eval_results.json"), shown,
                      why)


def _add_baselines(o: FinetuneOptions, task, result: dict,
                   eval_results: dict) -> None:
  """The family's baselines of the evaluated splits in eval_results
  (`baseline_<name>_<metric>`, `test_baseline_...`) and result, and one
  line per split saying where the model stands."""
  splits = [s for s, wanted in (("dev", "eval" in result),
                                ("test", "test" in result)) if wanted]
  scores = task.baselines(splits) if splits else {}
  for split, by_name in scores.items():
    prefix = "" if split == "dev" else "test_"
    model = result["eval" if split == "dev" else "test"]
    for name, metrics in by_name.items():
      for key, value in metrics.items():
        if key != "num_examples":
          eval_results[f"{prefix}baseline_{name}_{key}"] = value
    result.setdefault("baselines", {})[split] = by_name
    metric = task.best_metric
    if metric not in model:
      continue
    best = max(m[metric] for m in by_name.values())
    # The metric under its own name where the family's best_metric is an
    # alias of one (classification's eval_metric: accuracy, or CoLA's mcc).
    label = next((k for k in ("mcc", "accuracy", "f1") if k != metric and
                  model.get(k) == model[metric]), metric)
    shown = ", ".join(f"{name} {m[metric]:.3f}" for name, m in
                      by_name.items())
    logging.log(logging.WARNING if model[metric] < best else logging.INFO,
                "%s %s %.3f (%s)%s", split, label, model[metric], shown,
                ": below the baseline" if model[metric] < best else "")
