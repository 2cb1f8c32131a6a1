"""The training commands' settings classes, without TensorFlow.

A command defines its flags from these dataclasses and parses them before
anything else runs, so `--help` and a mistyped flag answer at once instead
of after TF's import (seconds); `finetuning` and `runtime`, which need TF,
are imported by the command only to run. finetuning.FinetuneOptions is
this FinetuneOptions.

The choices of the strategy, precision and optimizer flags are defined
here too (runtime.py and optimization.py, which need TF, import them).
"""

import dataclasses
import json
from typing import Callable, Optional

from albert_tf import settings

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")
PRECISIONS = ("none", "bfloat16", "float16")
# lamb, adamw: google-research/albert's update rules; keras_*: Keras's
# (optimization.py says how they differ).
OPTIMIZERS = ("lamb", "adamw", "keras_lamb", "keras_adamw")


@dataclasses.dataclass
class StrategySettings:
  """The strategy flags of the training commands (a settings base class),
  with the original scripts' TPU flags mapped onto the TPU strategy
  (`runtime.strategy_from_flags`)."""
  distribution_strategy: str = settings.field(
      "default", "tf.distribute strategy; multi_worker_mirrored reads "
      "TF_CONFIG.", choices=STRATEGIES)
  tpu: Optional[str] = settings.field(
      None, "TPU address or name for --distribution_strategy=tpu ('' = "
      "local).")
  num_gpus: int = settings.field(0, "GPUs for mirrored (0 = all visible).")
  use_tpu: bool = settings.field(
      False, "Original name: the same as --distribution_strategy=tpu.")
  tpu_name: Optional[str] = settings.field(None, "Original name of --tpu.")
  tpu_zone: Optional[str] = settings.field(None, "GCE zone of the Cloud TPU.")
  gcp_project: Optional[str] = settings.field(
      None, "GCP project of the Cloud TPU.")
  num_tpu_cores: Optional[int] = settings.field(
      None, "Original flag; ignored: the TPU strategy uses every core of the "
      "TPU.")
  worker_timeout_secs: int = settings.field(
      600, "With --distribution_strategy=multi_worker_mirrored: stop with an "
      "error naming the worker when a TF_CONFIG peer does not accept "
      "connections for this long at start-up (the wait is logged every few "
      "seconds); 0: wait forever.", lower_bound=0, group="distribution")


@dataclasses.dataclass
class FinetuneOptions(StrategySettings):
  """The flags every fine-tuning CLI has; the fields define them.

  task_name and data_dir are redeclared by each CLI, with what they mean
  for it; the strategy and original TPU flags are StrategySettings'.
  None for --do_lower_case and --max_seq_length means: as the model was
  fine-tuned (recorded beside --init_checkpoint), else true and 128.
  """
  task_name: str = settings.field(None, "The task.", required=True)
  data_dir: str = settings.field(None, "The task's data directory.",
                                 required=True)
  output_dir: str = settings.field(None, "Where checkpoints and results go.",
                                   required=True)
  init_checkpoint: Optional[str] = settings.field(
      None, "Checkpoint (file prefix or directory) in the project layout; "
      "see convert_checkpoint.")
  preset: Optional[str] = settings.field(
      None, "Model preset, e.g. albert_tiny_zh.")
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json.")
  spm_model_file: Optional[str] = settings.field(None, "SentencePiece model.")
  vocab_file: Optional[str] = settings.field(None, "WordPiece vocab.txt.")
  do_lower_case: Optional[bool] = settings.field(
      None, "Lowercase input text (default: as the model was fine-tuned, "
      "else true).")
  max_seq_length: Optional[int] = settings.field(
      None, "Tokens per example incl. [CLS]/[SEP]; longer inputs are "
      "truncated and counted (default: as the model was fine-tuned, else "
      "128).")
  train_batch_size: int = settings.field(32, "Training batch size.")
  eval_batch_size: int = settings.field(64, "Eval/predict batch size.")
  learning_rate: float = settings.field(5e-5, "Peak AdamW learning rate.")
  num_train_epochs: float = settings.field(3.0, "Epochs (if --train_step=0).")
  train_step: int = settings.field(0, "Training steps; overrides epochs.")
  warmup_step: int = settings.field(
      -1, "Warmup steps; -1: --warmup_proportion of training.")
  warmup_proportion: float = settings.field(
      0.1, "Fraction of the training steps that warm up the learning rate, "
      "when --warmup_step is -1 (the original run_squad's flag).")
  optimizer: str = settings.field(
      "adamw", "adamw/lamb: the original's AdamWeightDecay/LAMB update rules "
      "(no bias correction); keras_adamw/keras_lamb: Keras's.",
      choices=list(OPTIMIZERS))
  weight_decay: float = settings.field(
      0.01, "Weight decay rate, added to the update (u += rate * w) except "
      "on LayerNorm and bias variables.")
  classifier_dropout: float = settings.field(
      0.1, "Dropout before the classifier.")
  do_train: bool = settings.field(False, "Fine-tune on the train split.")
  do_eval: bool = settings.field(False, "Evaluate on the dev split.")
  do_predict: bool = settings.field(False, "Predict the test split.")
  eval_every_steps: int = settings.field(
      0, "Eval and checkpoint interval; 0: every epoch.")
  keep_checkpoint_max: int = settings.field(
      2, "Latest checkpoints kept (the best one is kept apart, in "
      "output_dir/best/).")
  log_every_steps: int = settings.field(20, "Log the loss every N steps.")
  iterations_per_loop: int = settings.field(
      10, "Training steps per tf.function call (Keras steps_per_execution).")
  max_train_examples: int = settings.field(
      0, "Use the first N train examples.")
  max_eval_examples: int = settings.field(0, "Use the first N dev examples.")
  max_predict_examples: int = settings.field(
      0, "Use the first N test examples (--do_predict): a quick look at a "
      "large test split.")
  seed: int = settings.field(12345, "Random seed.", group="training")
  mixed_precision: str = settings.field(
      "none", f"Compute dtype: auto|{'|'.join(PRECISIONS)} (Keras policy "
      "names accepted); variables, LayerNorm, softmax and losses stay "
      "float32. auto: bfloat16 on a TPU and on a CPU with bf16 units "
      "(amx_bf16 or avx512_bf16), none elsewhere (one log line says which "
      "and why); a resumed run keeps its own.")
  length_buckets: int = settings.field(
      0, "Training batches cut to the smallest of this many widths (up to "
      "--max_seq_length) that holds their longest row, the steps of each "
      "window of 16 taking that window's examples sorted by length, so "
      "that short texts are not padded to --max_seq_length (0: every batch "
      "at --max_seq_length, as the original). Eval and predict are not "
      "cut. Ignored, with a warning, on a TPU.", group="runtime")
  micro_batches: str = settings.field(
      "auto", "Each batch as this many parts with independent forward and "
      "backward passes, run side by side on a CPU's cores (the loss and "
      "gradients of the whole batch). auto: 2 on a CPU-only run of the "
      "default strategy with 2 or more cores and batches of 16 or more, 1 "
      "elsewhere (one log line says which).", group="runtime")
  jit_compile: bool = settings.field(False, "XLA-compile the train step.")
  overwrite: bool = settings.field(
      False, "Start over in an --output_dir that holds a run with other "
      "settings (deletes that run's checkpoints, logs, events and results; "
      "other files there stay).")
  plots: bool = settings.field(
      True, "Write curves.png beside eval_results.json: train loss and the "
      "dev metric against steps, the baselines as lines (needs matplotlib; "
      "without it one line says so).", group="output")
  predict_batch_size: int = settings.field(
      0, "Batch for --do_predict (original name; 0: --eval_batch_size).")
  input_timeout_secs: int = settings.field(
      600, "Stop with an error naming the file when an input file gives no "
      "record for this long, up to the first training batch (a named pipe, "
      "a hung mount); 0: wait forever.", lower_bound=0)
  # Beside --eval_every_steps, whose original name it is.
  save_checkpoints_steps: int = settings.field(
      0, "Original name of --eval_every_steps (a checkpoint and an eval "
      "every N).", group="training")


def main_for(options_class, run: Callable) -> Callable:
  """The absl main of a fine-tuning CLI: its flags (the option fields) into
  run(**options); the result, without the split stats, printed as JSON."""
  def main(argv):
    del argv
    result = run(**dataclasses.asdict(settings.from_flags(options_class)))
    print(json.dumps({k: v for k, v in result.items() if k != "data"},
                     default=str), flush=True)
  return main
