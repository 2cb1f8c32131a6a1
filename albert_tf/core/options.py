"""The training commands' settings classes, without TensorFlow.

A command defines its flags from these dataclasses and parses them before
anything else runs, so `--help` and a mistyped flag answer at once instead
of after TF's import (seconds); `finetuning` and `runtime`, which need TF,
are imported by the command only to run. finetuning.FinetuneOptions and
run_pretraining.Params are FinetuneOptions and PretrainingOptions.

The choices of the strategy, precision and optimizer flags are defined
here too (runtime.py and optimization.py, which need TF, import them).
"""

import dataclasses
from typing import Optional

from albert_tf.core import settings

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")
PRECISIONS = ("none", "bfloat16", "float16")
# lamb, adamw: google-research/albert's update rules; keras_*: Keras's
# (optimization.py says how they differ).
OPTIMIZERS = ("lamb", "adamw", "keras_lamb", "keras_adamw")
# Help of the flags both kinds of training share.
_MICRO_BATCHES = (
    "Each batch as this many parts with independent forward and backward "
    "passes, run side by side on a CPU's cores (the loss and gradients of "
    "the whole batch). auto: 2 on a CPU-only run of the default strategy "
    "with 2 or more cores and batches of 16 or more, 1 elsewhere (one log "
    "line says which).")
_OVERWRITE = (
    "Start over in an --output_dir that holds a run with other settings "
    "(deletes that run's checkpoints, logs, events and results; other files "
    "there stay).")
# {} takes what the precision does beyond the policy (float16's scaling).
_MIXED_PRECISION = (
    f"Compute dtype: auto|{'|'.join(PRECISIONS)} (Keras policy names "
    "accepted); variables, LayerNorm, softmax and losses stay float32.{} "
    "auto: bfloat16 on a TPU and on a CPU with bf16 units (amx_bf16 or "
    "avx512_bf16), none elsewhere (one log line says which and why); a "
    "resumed run keeps its own.")
_INPUT_TIMEOUT = (
    "Stop with an error naming the file when an input file gives no record "
    "for this long, up to the first training batch (a named pipe, a hung "
    "mount); 0: wait forever.")


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
  mixed_precision: str = settings.field("none", _MIXED_PRECISION.format(""))
  length_buckets: int = settings.field(
      0, "Training batches cut to the smallest of this many widths (up to "
      "--max_seq_length) that holds their longest row, the steps of each "
      "window of 16 taking that window's examples sorted by length, so "
      "that short texts are not padded to --max_seq_length (0: every batch "
      "at --max_seq_length, as the original). Eval and predict are not "
      "cut. Ignored, with a warning, on a TPU.", group="runtime")
  micro_batches: str = settings.field("auto", _MICRO_BATCHES, group="runtime")
  jit_compile: bool = settings.field(False, "XLA-compile the train step.")
  overwrite: bool = settings.field(False, _OVERWRITE)
  plots: bool = settings.field(
      True, "Write curves.png beside eval_results.json: train loss and the "
      "dev metric against steps, the baselines as lines (needs matplotlib; "
      "without it one line says so).", group="output")
  predict_batch_size: int = settings.field(
      0, "Batch for --do_predict (original name; 0: --eval_batch_size).")
  input_timeout_secs: int = settings.field(
      600, _INPUT_TIMEOUT, lower_bound=0)
  # Beside --eval_every_steps, whose original name it is.
  save_checkpoints_steps: int = settings.field(
      0, "Original name of --eval_every_steps (a checkpoint and an eval "
      "every N).", group="training")


@dataclasses.dataclass
class PretrainingOptions(StrategySettings):
  """run_pretraining's flags: the original run_pretraining.py's names and
  defaults, then the TF2 ones (the strategy and original TPU flags come
  from StrategySettings)."""
  # --- as in google-research/albert run_pretraining.py
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json of the model to train.")
  preset: Optional[str] = settings.field(
      None, "Instead of --albert_config_file: a preset name of "
      "albert_tf.core.config.PRESETS.")
  vocab_size: int = settings.field(
      0, "If > 0, overrides the config's vocab_size (e.g. a preset's shape "
      "with your own vocabulary).")
  spm_model_file: Optional[str] = settings.field(
      None, "If set (and --vocab_size is not), the config's vocab_size "
      "becomes this SentencePiece model's size.")
  input_file: Optional[str] = settings.field(
      None, "Comma-separated TFRecord globs for training (and for eval "
      "without --eval_input_file).")
  eval_input_file: Optional[str] = settings.field(
      None, "Comma-separated TFRecord globs for --do_eval; default: "
      "--input_file.")
  output_dir: Optional[str] = settings.field(
      None, "Checkpoints, logs and eval results are written here.")
  init_checkpoint: Optional[str] = settings.field(
      None, "Checkpoint (file prefix or directory) to take the initial "
      "weights from; ignored when --output_dir already has a checkpoint.")
  do_train: bool = settings.field(
      True, "Train (true by default, as in the original; --nodo_train "
      "--do_eval evaluates only).")
  do_eval: bool = settings.field(False, "Evaluate on --eval_input_file.")
  train_batch_size: int = settings.field(4096, "Global training batch.")
  eval_batch_size: int = settings.field(64, "Global eval batch.")
  max_seq_length: int = settings.field(512, "Must match the TFRecords.")
  max_predictions_per_seq: int = settings.field(
      20, "Must match the TFRecords.")
  optimizer: str = settings.field(
      "lamb", "lamb/adamw: the original's LAMB/AdamWeightDecay update rules "
      "(no bias correction); keras_lamb/keras_adamw: Keras's.",
      choices=list(OPTIMIZERS))
  learning_rate: float = settings.field(0.00176, "Peak learning rate.")
  poly_power: float = settings.field(1.0, "Power of the polynomial decay.")
  num_train_steps: int = settings.field(125000, "Training steps.")
  num_warmup_steps: int = settings.field(3125, "Linear warmup steps.")
  save_checkpoints_steps: int = settings.field(
      5000, "Checkpoint every this many steps.")
  keep_checkpoint_max: int = settings.field(5, "Checkpoints kept.")
  iterations_per_loop: int = settings.field(
      1000, "Training steps per tf.function call (Keras "
      "steps_per_execution).")
  max_eval_steps: int = settings.field(100, "Eval batches at most.")
  # --- TF2 additions
  mixed_precision: str = settings.field(
      "auto", _MIXED_PRECISION.format(" float16 adds dynamic loss scaling."))
  length_buckets: int = settings.field(
      0, "Training batches grouped by length into this many buckets and "
      "cut to their bucket's width, so that short texts are not padded to "
      "--max_seq_length (0: every batch at --max_seq_length, as the "
      "original). Ignored, with a warning, on a TPU (one static shape); "
      "with --jit_compile each width is compiled once.")
  micro_batches: str = settings.field("auto", _MICRO_BATCHES)
  overwrite: bool = settings.field(False, _OVERWRITE)
  jit_compile: bool = settings.field(False, "XLA-compile the train step.")
  seed: int = settings.field(12345, "Initialisation and shuffling seed.",
                             group="training")
  log_steps: int = settings.field(
      100, "Log metrics every this many steps (rounded up to a multiple of "
      "the steps per call).")
  shuffle_buffer_size: int = settings.field(
      1000, "Record shuffle buffer; 0 reads files in order, round robin.")
  skip_corrupt_records: bool = settings.field(
      False, "Skip unreadable and unparsable records instead of stopping "
      "with an error that names the file. A pass over the files before "
      "training counts them per file: in the log and in "
      "output_dir/skipped_records.json.")
  max_corrupt_fraction: float = settings.field(
      0.001, "With --skip_corrupt_records: stop before training when more "
      "than this share of the records would be skipped.", lower_bound=0.0,
      upper_bound=1.0)
  allow_incomplete_input: bool = settings.field(
      False, "Read a folder in data prep's layout (its shards, summary.json "
      "or .tmp-* files) without its _SUCCESS and manifest.json (a killed "
      "data prep run), and files the manifest does not list or lists with "
      "another size; each is a warning instead of an error. Records with no "
      "data prep file beside them (other tools', e.g. google-research/"
      "albert's create_pretraining_data.py) need no flag: they are read with "
      "a warning.")
  input_timeout_secs: int = settings.field(
      600, _INPUT_TIMEOUT, lower_bound=0)
  sentence_order_loss_weight: float = settings.field(
      1.0, "Weight of the sentence loss (SOP, or NSP on --random_next_"
      "sentence records) in the loss trained on; 0 trains MLM alone (the "
      "paper's Table 5 'none': the sentence head stays untrained and "
      "answers one class whatever the input).", lower_bound=0.0)
  train_budget_minutes: float = settings.field(
      0.0, "Train for this many minutes of wall clock, from the command's "
      "start to the end of its last checkpoint and eval, instead of "
      "--num_train_steps: the first steps (at learning rate 0) are timed, "
      "then the steps, warmup and decay are planned to end at the budget "
      "(one log line says the plan; run_fingerprint.json records it, and a "
      "resumed run keeps it). The start counts too (imports, the input "
      "checks, the model build, the step-0 eval, the timed steps: about a "
      "minute on 2 quiet cores, several on a loaded machine); a budget that "
      "cannot hold them and a call that trains is refused as soon as the "
      "first call is timed, naming one that would. 0: --num_train_steps and "
      "--num_warmup_steps.",
      lower_bound=0.0)
  budget_warmup_fraction: float = settings.field(
      0.1, "With --train_budget_minutes: the share of the planned steps "
      "that warm up, before the linear decay to 0.", lower_bound=0.0,
      upper_bound=0.99)
  eval_every_checkpoint: bool = settings.field(
      False, "With --do_eval, also evaluate at step 0 and at every "
      "checkpoint while training (eval_log.jsonl, TensorBoard eval/); the "
      "best checkpoint by masked_lm_accuracy is kept in output_dir/best/.")

