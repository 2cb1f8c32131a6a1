"""Fine-tune ALBERT on sentence(-pair) classification or regression.

    python -m albert_tf.run_classifier --task_name=sentiment \
        --data_dir=demo_output/corpus/sentiment --output_dir=demo_output/cls \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=1e-4 \
        --num_train_epochs=3 --do_train --do_eval --do_predict

Recipe: read + encode the TSV splits (tasks/classification.py), then the
one trainer (albert_tf.trainer) under any --distribution_strategy: an
`AlbertClassifier` initialised from --init_checkpoint, AdamW (warmup +
linear decay), a checkpoint and a dev eval every epoch (or every
--eval_every_steps), the best checkpoint by the task's dev metric kept
apart; then predict with the best. Killed, the same command resumes at the
last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint   latest checkpoints (weights, optimizer, step)
  best/                   best weights by the dev metric + best.json
  albert_config.json      the encoder config
  classifier_config.json  task, labels, max_seq_length (for export)
  run_fingerprint.json    config, task, tokenizer hash, optimizer (a rerun
                          with other settings stops; --overwrite starts over)
  <tokenizer file>        a copy of the spm model / vocab.txt
  train/ eval/            TensorBoard events (loss, learning rate, metrics)
  train_log.jsonl         every --log_every_steps: loss, accuracy, lr, speed
  eval_log.jsonl          every eval: dev metrics and global_step
  eval_results.json       dev metrics of the best checkpoint (+ test_*
                          metrics when the test split is labelled)
  test_results.tsv        index, prediction, per-class probabilities
"""

import dataclasses
import json
import os
import shutil
import time
from typing import Optional

from absl import flags
from absl import logging
import keras

from albert_tf import run_config
from albert_tf.classifier_data import DataError
from albert_tf.run_config import ModelInfo
from albert_tf.tasks.classification import ClassificationTask, read_spec
from albert_tf.trainer import Trainer, TrainerSettings


@dataclasses.dataclass
class ClassifierOptions:
  """Everything `run` needs; field names are the command-line flags."""
  task_name: str
  data_dir: str
  output_dir: str
  init_checkpoint: Optional[str] = None
  preset: Optional[str] = None
  albert_config_file: Optional[str] = None
  spm_model_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None  # None: as recorded, else True
  max_seq_length: Optional[int] = None  # None: as recorded, else 128
  train_batch_size: int = 32
  eval_batch_size: int = 64
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  train_step: int = 0            # > 0 overrides num_train_epochs
  warmup_step: int = -1          # -1: 10% of the training steps
  optimizer: str = "adamw"
  weight_decay: float = 0.01
  classifier_dropout: float = 0.1
  do_train: bool = True
  do_eval: bool = True
  do_predict: bool = False
  eval_every_steps: int = 0      # 0: after every epoch; also the checkpoint interval
  keep_checkpoint_max: int = 2
  log_every_steps: int = 20
  iterations_per_loop: int = 10  # steps per tf.function call
  max_train_examples: int = 0    # 0: all (a subset for quick runs)
  max_eval_examples: int = 0
  seed: int = 12345
  mixed_precision: str = "none"  # none|bfloat16|float16 (Keras names too)
  distribution_strategy: str = "default"
  tpu: Optional[str] = None
  num_gpus: int = 0
  jit_compile: bool = False
  overwrite: bool = False
  predict_batch_size: int = 0    # 0: --eval_batch_size
  save_checkpoints_steps: int = 0  # original name of --eval_every_steps
  use_tpu: bool = False
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  num_tpu_cores: Optional[int] = None
  # The generic `tsv` task.
  text_a_column: Optional[str] = None
  text_b_column: Optional[str] = None
  label_column: Optional[str] = None
  label_list: Optional[str] = None  # comma-separated; empty: from train
  regression: Optional[bool] = None  # tsv: scores, not classes
  has_header: Optional[bool] = None


def run(**kwargs):
  """Runs fine-tuning/eval/predict; kwargs are `ClassifierOptions` fields.

  Returns a dict: "eval" (best dev metrics), "test" (test metrics when
  labelled), "best_step", "num_train_steps", "train_wall_s", "data" (split
  stats), "output_dir".
  """
  options = ClassifierOptions(**kwargs)
  if not (options.do_train or options.do_eval or options.do_predict):
    raise ValueError("Nothing to do: set --do_train, --do_eval or --do_predict")
  for name in ("train_batch_size", "eval_batch_size", "log_every_steps",
               "iterations_per_loop", "keep_checkpoint_max"):
    if getattr(options, name) <= 0:
      raise ValueError(f"--{name} must be positive, got "
                       f"{getattr(options, name)}")
  with run_config.dtype_policy(options.mixed_precision):
    return _run(options)


def _run(o: ClassifierOptions):
  strategy = run_config.strategy_from_flags(
      o.distribution_strategy, o.tpu, o.num_gpus, o.use_tpu, o.tpu_name,
      o.tpu_zone, o.gcp_project, o.num_tpu_cores)
  chief = run_config.is_chief(strategy)
  # What the model was fine-tuned with (beside --init_checkpoint, or in
  # output_dir when resuming or evaluating there): the defaults of
  # --max_seq_length and --do_lower_case, and a tsv task's labels.
  info = (run_config.ModelInfo.read_beside(o.init_checkpoint)
          if o.init_checkpoint else None) or (
              run_config.ModelInfo.read_beside(o.output_dir)
              if os.path.isdir(o.output_dir) else None)
  o = dataclasses.replace(
      o, max_seq_length=o.max_seq_length or (info and info.max_seq_length)
      or 128, do_lower_case=(o.do_lower_case if o.do_lower_case is not None
                             else info.do_lower_case if info else None))
  spec = read_spec(o.task_name, o.text_a_column, o.text_b_column,
                   o.label_column, o.label_list, o.has_header, o.regression,
                   o.data_dir, info.label_list if info and
                   info.task_name == "tsv" else None)
  config, tokenizer = run_config.resolve_model(
      o.preset, o.albert_config_file, o.init_checkpoint, o.spm_model_file,
      o.vocab_file, o.do_lower_case)
  run_config.check_seq_length(o.max_seq_length, config)
  task = ClassificationTask(
      spec, tokenizer, o.data_dir, o.max_seq_length, o.eval_batch_size,
      o.classifier_dropout, o.seed, o.max_train_examples, o.max_eval_examples)
  settings = _settings(o, task)
  fingerprint = run_config.make_fingerprint(
      f"{task.name}:{spec.name}", config, tokenizer,
      settings.optimizer_fingerprint() if o.do_train else None,
      o.mixed_precision)
  run_config.check_output_dir(o.output_dir, fingerprint, o.overwrite)
  result = {"output_dir": o.output_dir, "data": _validate_splits(o, task)}

  # Every input is valid: only now is output_dir written.
  # Held until this function returns: no second run writes here meanwhile.
  lock = None
  if chief:
    lock = run_config.prepare_output_dir(o.output_dir, fingerprint,
                                         o.overwrite)
    # An eval- or predict-only run leaves what training recorded alone.
    if o.do_train or not os.path.exists(
        os.path.join(o.output_dir, run_config.CLASSIFIER_CONFIG)):
      _write_run_files(o, task, config)
  keras.utils.set_random_seed(o.seed)
  trainer = Trainer(task, config, settings, strategy)
  trainer.restore(o.init_checkpoint, training=o.do_train)
  start = time.time()
  if o.do_train:
    trainer.train()
    result["train_wall_s"] = round(time.time() - start, 2)
    result["num_train_steps"] = settings.num_train_steps
  # Eval and predict with the best checkpoint by the dev metric, if kept.
  best_step = trainer.restore_best()
  result["best_step"] = trainer.step if best_step is None else best_step
  result.update(_evaluate_and_predict(o, task, trainer, chief,
                                      result["best_step"]))
  logging.info("Results: %s", {k: v for k, v in result.items() if k != "data"})
  trainer.finish()
  del lock  # the run is over: another may write here
  return result


def _evaluate_and_predict(o: ClassifierOptions, task, trainer, chief,
                          best_step):
  """Dev metrics, test predictions (+ metrics) and eval_results.json."""
  result, eval_results = {}, {}
  if o.do_eval:
    # Training evaluated the best checkpoint already; an eval-only run
    # evaluates (the dev file or --max_eval_examples may have changed).
    best = trainer.best() if o.do_train else None
    result["eval"] = best["metrics"] if best else trainer.evaluate()
    eval_results = {f"eval_{k}": v for k, v in result["eval"].items()
                    if k not in ("eval_metric", "global_step")}
    eval_results["best_step"] = best_step
  if o.do_predict:
    task.eval_batch_size = o.predict_batch_size or o.eval_batch_size
    test = task.predict(trainer.model, o.output_dir if chief else
                        trainer.ckpt_dir)
    if test:
      result["test"] = test
      eval_results.update({f"test_{k}": v for k, v in test.items()
                           if k != "eval_metric"})
  if eval_results and chief:
    with open(os.path.join(o.output_dir, "eval_results.json"), "w",
              encoding="utf-8") as f:
      json.dump(eval_results, f, indent=2)
  return result


def _settings(o: ClassifierOptions, task) -> TrainerSettings:
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
  return TrainerSettings(
      output_dir=o.output_dir, num_train_steps=max(steps, 1),
      train_batch_size=o.train_batch_size, checkpoint_steps=interval,
      keep_checkpoint_max=o.keep_checkpoint_max,
      iterations_per_loop=o.iterations_per_loop, log_steps=o.log_every_steps,
      eval_at_checkpoints=o.do_eval, jit_compile=o.jit_compile,
      seq_length=o.max_seq_length, optimizer=o.optimizer,
      learning_rate=o.learning_rate,
      num_warmup_steps=(o.warmup_step if o.warmup_step >= 0 else
                        int(0.1 * steps)),
      weight_decay=o.weight_decay)


def _validate_splits(o: ClassifierOptions, task):
  """Reads every split the run needs (DataError names file:line)."""
  stats = {}
  for split, wanted, needs_labels in (("train", o.do_train, True),
                                      ("dev", o.do_eval, True),
                                      ("test", o.do_predict, False)):
    if not wanted:
      continue
    _, _, stats[split], has_labels = task.load_split(split)
    if needs_labels and not has_labels:
      raise DataError(f"{stats[split]['file']}: the {split} split needs "
                      "labels")
  return stats


def _write_run_files(o: ClassifierOptions, task, config):
  """albert_config.json, the tokenizer copy, classifier_config.json."""
  config.to_json_file(os.path.join(o.output_dir, run_config.checkpoints.CONFIG_NAME))
  tokenizer = task.tokenizer
  copy = os.path.join(o.output_dir, os.path.basename(tokenizer.model_file))
  if os.path.abspath(copy) != os.path.abspath(tokenizer.model_file):
    shutil.copyfile(tokenizer.model_file, copy)
  ModelInfo(task_name=task.spec.name, num_labels=task.spec.num_labels,
            label_list=list(task.spec.label_list or []),
            is_regression=task.spec.is_regression,
            max_seq_length=o.max_seq_length,
            tokenizer_file=os.path.basename(tokenizer.model_file),
            tokenizer_kind=tokenizer.kind,
            do_lower_case=tokenizer.do_lower_case,
            text_pair=task.spec.columns["train"][1] is not None).write(
                os.path.join(o.output_dir, run_config.CLASSIFIER_CONFIG))


# ----------------------------------------------------------------- flags
FLAGS = flags.FLAGS


def define_flags():
  f = flags
  f.DEFINE_string("task_name", None, "sentiment, lcqmc, cola, sst-2, mrpc, "
                  "sts-b, qqp, mnli, qnli, rte or tsv")
  f.DEFINE_string("data_dir", None, "Directory with {train,dev,test} TSVs.")
  f.DEFINE_string("output_dir", None, "Where checkpoints and results go.")
  f.DEFINE_string("init_checkpoint", None, "Checkpoint (file prefix or "
                  "directory) in the project layout; see convert_checkpoint.")
  f.DEFINE_string("preset", None, "Model preset, e.g. albert_tiny_zh.")
  f.DEFINE_string("albert_config_file", None, "albert_config.json.")
  f.DEFINE_string("spm_model_file", None, "SentencePiece model.")
  f.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
  f.DEFINE_bool("do_lower_case", None, "Lowercase input text (default: as "
                "the model was fine-tuned, else true).")
  f.DEFINE_integer("max_seq_length", None, "Tokens per example incl. "
                   "[CLS]/[SEP]; longer inputs are truncated and counted "
                   "(default: as the model was fine-tuned, else 128).")
  f.DEFINE_integer("train_batch_size", 32, "Training batch size.")
  f.DEFINE_integer("eval_batch_size", 64, "Eval/predict batch size.")
  f.DEFINE_float("learning_rate", 5e-5, "Peak AdamW learning rate.")
  f.DEFINE_float("num_train_epochs", 3.0, "Epochs (if --train_step=0).")
  f.DEFINE_integer("train_step", 0, "Training steps; overrides epochs.")
  f.DEFINE_integer("warmup_step", -1, "Warmup steps; -1: 10% of training.")
  f.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
  f.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay.")
  f.DEFINE_float("classifier_dropout", 0.1, "Dropout before the classifier.")
  f.DEFINE_bool("do_train", False, "Fine-tune on train.tsv.")
  f.DEFINE_bool("do_eval", False, "Evaluate on the dev split.")
  f.DEFINE_bool("do_predict", False, "Predict the test split.")
  f.DEFINE_integer("eval_every_steps", 0, "Eval and checkpoint interval; "
                   "0: every epoch.")
  f.DEFINE_integer("keep_checkpoint_max", 2, "Latest checkpoints kept (the "
                   "best one is kept apart, in output_dir/best/).")
  f.DEFINE_integer("log_every_steps", 20, "Log the loss every N steps.")
  f.DEFINE_integer("iterations_per_loop", 10, "Training steps per "
                   "tf.function call (Keras steps_per_execution).")
  f.DEFINE_enum("distribution_strategy", "default",
                list(run_config.STRATEGIES), "tf.distribute strategy; "
                "multi_worker_mirrored reads TF_CONFIG.")
  f.DEFINE_string("tpu", None, "TPU address for --distribution_strategy=tpu.")
  f.DEFINE_integer("num_gpus", 0, "GPUs for mirrored (0 = all visible).")
  f.DEFINE_bool("jit_compile", False, "XLA-compile the train step.")
  f.DEFINE_bool("verbose", False, "Show the traceback of an error.")
  f.DEFINE_integer("predict_batch_size", 0, "Batch for --do_predict "
                   "(original name; 0: --eval_batch_size).")
  f.DEFINE_integer("save_checkpoints_steps", 0, "Original name of "
                   "--eval_every_steps (a checkpoint and an eval every N).")
  run_config.define_original_tpu_flags()
  f.DEFINE_bool("overwrite", False, "Start over in an --output_dir that "
                "holds a run with other settings (deletes its files).")
  f.DEFINE_integer("max_train_examples", 0, "Use the first N train examples.")
  f.DEFINE_integer("max_eval_examples", 0, "Use the first N dev examples.")
  f.DEFINE_integer("seed", 12345, "Random seed.")
  f.DEFINE_string("mixed_precision", "none", "none|bfloat16|float16 (Keras "
                  "policy names accepted).")
  f.DEFINE_string("text_a_column", None, "tsv task: text_a column (header "
                  "name or 0-based index).")
  f.DEFINE_string("text_b_column", None, "tsv task: text_b column.")
  f.DEFINE_string("label_column", None, "tsv task: label column.")
  f.DEFINE_string("label_list", None, "tsv task: comma-separated labels "
                  "(default: the distinct labels of the train split).")
  f.DEFINE_bool("regression", None, "tsv task: the label column holds "
                "scores (default: when the labels are non-integer numbers).")
  f.DEFINE_bool("has_header", None, "tsv task: first line is a header "
                "(default: when a column is given by name).")
  f.mark_flags_as_required(["task_name", "data_dir", "output_dir"])


def main(argv):
  del argv
  names = [f.name for f in dataclasses.fields(ClassifierOptions)]
  result = run(**{name: FLAGS[name].value for name in names})
  print(json.dumps({k: v for k, v in result.items() if k != "data"},
                   default=str), flush=True)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  define_flags()
  cli_errors.run_main(main)
