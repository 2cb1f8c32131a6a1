"""What the fine-tuning CLIs share: options, flags, the trainer settings.

run_classifier (sentences and pairs) and run_ner (token tagging) take the
same training, checkpoint, strategy and precision flags, with the same
meaning; this module defines them once. Each CLI adds its task's flags and
builds its task (`albert_tf.tasks`); the trainer does the rest.
"""

import dataclasses
import json
import os
import shutil
import time
from typing import Callable, Optional

from absl import flags
from absl import logging
import keras

from albert_tf.tasks import record
from albert_tf.training import checkpoints
from albert_tf.training import output_dir
from albert_tf.training import runtime
from albert_tf.training.trainer import Trainer, TrainerSettings


@dataclasses.dataclass
class FinetuneOptions:
  """The flags every fine-tuning CLI has; field names are the flags."""
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


def check_options(o: FinetuneOptions) -> None:
  """Checks that need no file: something to do, positive sizes."""
  if not (o.do_train or o.do_eval or o.do_predict):
    raise ValueError("Nothing to do: set --do_train, --do_eval or --do_predict")
  for name in ("train_batch_size", "eval_batch_size", "log_every_steps",
               "iterations_per_loop", "keep_checkpoint_max"):
    if getattr(o, name) <= 0:
      raise ValueError(f"--{name} must be positive, got {getattr(o, name)}")


def recorded_info(o: FinetuneOptions) -> Optional[record.ModelInfo]:
  """What the model was fine-tuned with (the defaults of --max_seq_length,
  --do_lower_case, labels): beside --init_checkpoint, or in output_dir when
  resuming or evaluating there."""
  info = (record.ModelInfo.read_beside(o.init_checkpoint)
          if o.init_checkpoint else None)
  if info is None and os.path.isdir(o.output_dir):
    info = record.ModelInfo.read_beside(o.output_dir)
  return info


def train_and_evaluate(o: FinetuneOptions, task, config, strategy_,
                       task_fingerprint: str, data_stats: dict,
                       info_file: str, write_run_files: Callable,
                       evaluate_and_predict: Callable) -> dict:
  """The recipe once a CLI has built its task and read its splits.

  Checks output_dir against the run's fingerprint, and only then writes it
  (write_run_files(), unless an eval- or predict-only run finds info_file
  there); trains with the one trainer (resuming), restores the best
  checkpoint by the dev metric, and returns evaluate_and_predict(trainer,
  chief, best_step) merged into {"output_dir", "data", "best_step",
  "train_wall_s", "num_train_steps"}.
  """
  chief = runtime.is_chief(strategy_)
  settings = trainer_settings(o, task)
  fingerprint = output_dir.make_fingerprint(
      task_fingerprint, config, task.tokenizer,
      settings.optimizer_fingerprint() if o.do_train else None,
      o.mixed_precision)
  output_dir.check_output_dir(o.output_dir, fingerprint, o.overwrite)
  result = {"output_dir": o.output_dir, "data": data_stats}

  # Every input is valid: only now is output_dir written.
  # Held until this function returns: no second run writes here meanwhile.
  lock = None
  if chief:
    lock = output_dir.prepare_output_dir(o.output_dir, fingerprint,
                                         o.overwrite)
    # An eval- or predict-only run leaves what training recorded alone.
    if o.do_train or not os.path.exists(os.path.join(o.output_dir,
                                                     info_file)):
      write_run_files()
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
  result.update(evaluate_and_predict(trainer, chief, result["best_step"]))
  logging.info("Results: %s", {k: v for k, v in result.items()
                               if k not in ("data", "eval", "test")})
  trainer.finish()
  del lock  # the run is over: another may write here
  return result


def write_model_files(output_dir: str, config, tokenizer) -> None:
  """albert_config.json and a copy of the tokenizer file in output_dir, so
  that the output_dir alone is an --init_checkpoint or an export source."""
  config.to_json_file(os.path.join(output_dir,
                                   checkpoints.CONFIG_NAME))
  copy = os.path.join(output_dir, os.path.basename(tokenizer.model_file))
  if os.path.abspath(copy) != os.path.abspath(tokenizer.model_file):
    shutil.copyfile(tokenizer.model_file, copy)


def strategy(o: FinetuneOptions):
  """The tf.distribute strategy of the flags (original TPU names too)."""
  return runtime.strategy_from_flags(
      o.distribution_strategy, o.tpu, o.num_gpus, o.use_tpu, o.tpu_name,
      o.tpu_zone, o.gcp_project, o.num_tpu_cores)


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


def define_flags():
  """Defines the shared flags (not task_name and data_dir: each CLI says
  what they mean for it)."""
  f = flags
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
  f.DEFINE_bool("do_train", False, "Fine-tune on the train split.")
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
                list(runtime.STRATEGIES), "tf.distribute strategy; "
                "multi_worker_mirrored reads TF_CONFIG.")
  f.DEFINE_string("tpu", None, "TPU address for --distribution_strategy=tpu.")
  f.DEFINE_integer("num_gpus", 0, "GPUs for mirrored (0 = all visible).")
  f.DEFINE_bool("jit_compile", False, "XLA-compile the train step.")
  f.DEFINE_bool("verbose", False, "Show the traceback of an error.")
  f.DEFINE_integer("predict_batch_size", 0, "Batch for --do_predict "
                   "(original name; 0: --eval_batch_size).")
  f.DEFINE_integer("save_checkpoints_steps", 0, "Original name of "
                   "--eval_every_steps (a checkpoint and an eval every N).")
  runtime.define_original_tpu_flags()
  f.DEFINE_bool("overwrite", False, "Start over in an --output_dir that "
                "holds a run with other settings (deletes its files).")
  f.DEFINE_integer("max_train_examples", 0, "Use the first N train examples.")
  f.DEFINE_integer("max_eval_examples", 0, "Use the first N dev examples.")
  f.DEFINE_integer("seed", 12345, "Random seed.")
  f.DEFINE_string("mixed_precision", "none", "none|bfloat16|float16 (Keras "
                  "policy names accepted).")


def main_for(options_class, run: Callable) -> Callable:
  """The absl main of a fine-tuning CLI: its flags (the option fields) into
  run(**options); the result, without the split stats, printed as JSON."""
  def main(argv):
    del argv
    values = flags.FLAGS
    result = run(**{f.name: values[f.name].value
                    for f in dataclasses.fields(options_class)})
    print(json.dumps({k: v for k, v in result.items() if k != "data"},
                     default=str), flush=True)
  return main
