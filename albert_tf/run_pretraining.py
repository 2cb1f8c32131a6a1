r"""Pretrain ALBERT (masked LM + sentence order) from TFRecord shards.

    python -m albert_tf.run_pretraining --flagfile=configs/pretrain_albert_tiny_zh_demo.flags

The recipe, top to bottom in `run`:
  1. config (--preset or --albert_config_file) and tf.distribute strategy;
  2. model + optimizer built under the strategy's scope;
  3. resume from the latest checkpoint in --output_dir (step, optimizer
     state, so the learning rate continues), else --init_checkpoint weights;
  4. `model.fit` over the TFRecords; one Keras "epoch" is one checkpoint
     interval (--save_checkpoints_steps), so the progress bar shows the
     steps to the next checkpoint; --iterations_per_loop steps run inside
     one tf.function call (steps_per_execution);
  5. --do_eval: eval_results.json / eval_results.txt for the last checkpoint.

Written to --output_dir: ckpt-<step>.* + `checkpoint` (tf.train.CheckpointManager,
layout of `albert_tf.checkpoints`: encoder, masked_lm_head,
sentence_order_head, optimizer, step), albert_config.json, train/ and eval/
TensorBoard events, train_log.jsonl (one JSON object per --log_steps) and
eval_log.jsonl.

Resuming: the same command continues from the latest checkpoint at the same
step and learning rate. The input pipeline is not checkpointed (neither was
the original's); it restarts with its shuffle seed offset by the step so a
resumed run does not replay the batches it already trained on.
"""

import dataclasses
import json
import math
import os
import shutil
import sys
import time
from typing import Dict, List, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

import albert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)
import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from albert_tf import checkpoints
from albert_tf import input_pipeline
from albert_tf import optimization
from albert_tf.config import AlbertConfig, resolve_config
from albert_tf.models import AlbertPretrainer

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")
PRECISIONS = ("none", "bfloat16", "float16")
METRIC_NAMES = ("loss", "masked_lm_loss", "masked_lm_accuracy",
                "sentence_order_loss", "sentence_order_accuracy")
EVAL_KEYS = ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
             "sentence_order_loss")


def define_flags(fv: flags.FlagValues = flags.FLAGS):
  """Defines the flags on `fv`: the original run_pretraining.py names/defaults + TF2 ones."""
  d = dict(flag_values=fv)
  # --- as in google-research/albert run_pretraining.py
  flags.DEFINE_string("albert_config_file", None,
                      "albert_config.json of the model to train.", **d)
  flags.DEFINE_string("preset", None, "Instead of --albert_config_file: a "
                      "preset name of albert_tf.config.PRESETS.", **d)
  flags.DEFINE_integer("vocab_size", 0, "If > 0, overrides the config's "
                       "vocab_size (e.g. a preset's shape with your own "
                       "vocabulary).", **d)
  flags.DEFINE_string("spm_model_file", None, "If set (and --vocab_size is "
                      "not), the config's vocab_size becomes this "
                      "SentencePiece model's size.", **d)
  flags.DEFINE_string("input_file", None, "Comma-separated TFRecord globs "
                      "for training (and for eval without --eval_input_file).",
                      **d)
  flags.DEFINE_string("eval_input_file", None, "Comma-separated TFRecord "
                      "globs for --do_eval; default: --input_file.", **d)
  flags.DEFINE_string("output_dir", None, "Checkpoints, logs and eval "
                      "results are written here.", **d)
  flags.DEFINE_string("init_checkpoint", None, "Checkpoint (file prefix or "
                      "directory) to take the initial weights from; ignored "
                      "when --output_dir already has a checkpoint.", **d)
  flags.DEFINE_bool("do_train", False, "Train.", **d)
  flags.DEFINE_bool("do_eval", False, "Evaluate on --eval_input_file.", **d)
  flags.DEFINE_integer("train_batch_size", 4096, "Global training batch.", **d)
  flags.DEFINE_integer("eval_batch_size", 64, "Global eval batch.", **d)
  flags.DEFINE_integer("max_seq_length", 512, "Must match the TFRecords.", **d)
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Must match the TFRecords.", **d)
  flags.DEFINE_enum("optimizer", "lamb", list(optimization.OPTIMIZERS),
                    "Optimizer.", **d)
  flags.DEFINE_float("learning_rate", 0.00176, "Peak learning rate.", **d)
  flags.DEFINE_float("poly_power", 1.0, "Power of the polynomial decay.", **d)
  flags.DEFINE_integer("num_train_steps", 125000, "Training steps.", **d)
  flags.DEFINE_integer("num_warmup_steps", 3125, "Linear warmup steps.", **d)
  flags.DEFINE_integer("save_checkpoints_steps", 5000,
                       "Checkpoint every this many steps.", **d)
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept.", **d)
  flags.DEFINE_integer("iterations_per_loop", 1000, "Training steps per "
                       "tf.function call (Keras steps_per_execution).", **d)
  flags.DEFINE_integer("max_eval_steps", 100, "Eval batches at most.", **d)
  # --- TF2 additions
  flags.DEFINE_enum("distribution_strategy", "default", list(STRATEGIES),
                    "tf.distribute strategy; multi_worker_mirrored reads "
                    "TF_CONFIG.", **d)
  flags.DEFINE_string("tpu", None, "TPU address or name for "
                      "--distribution_strategy=tpu ('' = local).", **d)
  flags.DEFINE_integer("num_gpus", 0, "GPUs for mirrored (0 = all visible).",
                       **d)
  flags.DEFINE_enum("mixed_precision", "none", list(PRECISIONS),
                    "Compute dtype; variables, LayerNorm, softmax and losses "
                    "stay float32. float16 adds dynamic loss scaling.", **d)
  flags.DEFINE_bool("jit_compile", False, "XLA-compile the train step.", **d)
  flags.DEFINE_integer("seed", 12345, "Initialisation and shuffling seed.", **d)
  flags.DEFINE_integer("log_steps", 100, "Log metrics every this many steps "
                       "(rounded up to a multiple of the steps per call).", **d)
  flags.DEFINE_integer("shuffle_buffer_size", 1000, "Record shuffle buffer; "
                       "0 reads files in order, round robin.", **d)
  flags.DEFINE_bool("skip_corrupt_records", False, "Skip unreadable records "
                    "(counted by a scan of the files before training) instead "
                    "of stopping with an error that names the file.", **d)
  flags.DEFINE_bool("eval_every_checkpoint", False, "With --do_eval, also "
                    "evaluate at step 0 and at every checkpoint while "
                    "training (eval_log.jsonl, TensorBoard eval/).", **d)


define_flags()


def params_from_argv(argv: Sequence[str]):
  """Parses command-line style args (incl. --flagfile) into a params object.

  For tests and scripts: `run(params_from_argv(["--preset=...", ...]))`
  behaves exactly as the command line, without a subprocess.
  """
  fv = flags.FlagValues()
  define_flags(fv)
  fv(["run_pretraining"] + list(argv))
  return Params(**{name: fv[name].value for name in Params.field_names()})


@dataclasses.dataclass
class Params:
  """The flag values `run` reads (same names as the flags)."""
  albert_config_file: Optional[str]
  preset: Optional[str]
  vocab_size: int
  spm_model_file: Optional[str]
  input_file: Optional[str]
  eval_input_file: Optional[str]
  output_dir: Optional[str]
  init_checkpoint: Optional[str]
  do_train: bool
  do_eval: bool
  train_batch_size: int
  eval_batch_size: int
  max_seq_length: int
  max_predictions_per_seq: int
  optimizer: str
  learning_rate: float
  poly_power: float
  num_train_steps: int
  num_warmup_steps: int
  save_checkpoints_steps: int
  keep_checkpoint_max: int
  iterations_per_loop: int
  max_eval_steps: int
  distribution_strategy: str
  tpu: Optional[str]
  num_gpus: int
  mixed_precision: str
  jit_compile: bool
  seed: int
  log_steps: int
  shuffle_buffer_size: int
  skip_corrupt_records: bool
  eval_every_checkpoint: bool

  @classmethod
  def field_names(cls):
    return [f.name for f in dataclasses.fields(cls)]


# ------------------------------------------------------------ strategy
def make_strategy(name: str, tpu: Optional[str] = None, num_gpus: int = 0):
  """The tf.distribute strategy for --distribution_strategy."""
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":
    devices = None
    if num_gpus:
      devices = [f"/gpu:{i}" for i in range(num_gpus)]
    elif not tf.config.list_logical_devices("GPU"):
      devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  if name == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"--distribution_strategy must be one of {STRATEGIES}, "
                   f"got {name!r}")


def spm_vocab_size(spm_model_file: str) -> int:
  import sentencepiece  # pylint: disable=import-outside-toplevel
  if not tf.io.gfile.exists(spm_model_file):
    raise FileNotFoundError(f"--spm_model_file not found: {spm_model_file}")
  return sentencepiece.SentencePieceProcessor(
      model_file=spm_model_file).get_piece_size()


def is_chief(strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or (
      resolver is None or not resolver.task_type):
    return True
  return (resolver.task_type == "chief" or
          (resolver.task_type == "worker" and resolver.task_id == 0 and
           "chief" not in resolver.cluster_spec().as_dict()))


# ------------------------------------------------------------ model
def build_pretrainer(config: AlbertConfig, params: Params,
                     steps_per_execution: int):
  """AlbertPretrainer + optimizer, built (call this under strategy.scope())."""
  model = AlbertPretrainer(config)
  schedule = optimization.WarmupPolynomialDecay(
      params.learning_rate, params.num_train_steps, params.num_warmup_steps,
      power=params.poly_power)
  optimizer = optimization.create_optimizer(params.optimizer, schedule)
  optimization.exclude_layer_norm_and_bias(optimizer, model)
  model.compile(optimizer=optimizer, steps_per_execution=steps_per_execution,
                jit_compile=params.jit_compile)
  # Build the optimizer now so that a checkpoint restore finds its slots.
  model.optimizer.build(model.trainable_variables)
  # Keras 3.15's fit/evaluate start with a "symbolic build" that, under a
  # strategy, pulls one batch and all-reduces it; MultiWorkerMirrored fails on
  # dict batches there. Model and optimizer are built already: skip it.
  model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None  # pylint: disable=protected-access
  if isinstance(tf.distribute.get_strategy(),
                tf.distribute.MultiWorkerMirroredStrategy):
    # Keras 3.15 reduces step outputs across workers with axis=0, which
    # fails on scalars: hand it [1]-vectors (the reduction makes scalars).
    _wrap_step_outputs(model, "train_step")
    _wrap_step_outputs(model, "test_step")
  return model, schedule


def _wrap_step_outputs(model, name):
  step_fn = getattr(model, name)
  setattr(model, name, lambda data: {
      k: tf.reshape(v, [1]) for k, v in step_fn(data).items()})


def make_checkpoint(model: AlbertPretrainer) -> tf.train.Checkpoint:
  """The `albert_tf.checkpoints` layout plus optimizer state and step.

  The optimizer is saved as the list of its own variables (moments, loss
  scale), not as the Keras optimizer object: that object also references
  every model variable, and the checkpoint would then name the weights
  optimizer/_trainable_variables/N instead of encoder/... .
  """
  optimizer_state = tf.__internal__.tracking.AutoTrackable()
  optimizer_state.variables = list(model.optimizer.variables)
  return checkpoints.make_checkpoint(model, optimizer=optimizer_state,
                                     step=model.optimizer.iterations)


# ------------------------------------------------------------ logging
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(
        plugin_name="scalars")).SerializeToString()


def write_scalar(name, value):
  """`tf.summary.scalar` without the tensorboard package (TF 2.21 lacks it)."""
  tf.summary.write(name, tf.constant(value, tf.float32),
                   metadata=_SCALAR_METADATA)


class MetricsLogger(keras.callbacks.Callback):
  """Every `log_steps`: TensorBoard scalars + one line of train_log.jsonl.

  Losses and accuracies are means over the steps since the previous line
  (differences of the model's Mean trackers, which Keras resets each epoch;
  the progress bar keeps showing the epoch means).
  """

  def __init__(self, output_dir, schedule, global_batch_size, seq_length,
               log_steps, write):
    super().__init__()
    self.schedule = schedule
    self.global_batch_size = global_batch_size
    self.seq_length = seq_length
    self.log_steps = log_steps
    self.write = write
    self.jsonl_path = os.path.join(output_dir, "train_log.jsonl")
    self.writer = (tf.summary.create_file_writer(
        os.path.join(output_dir, "train")) if write else None)
    self._last_step = self._last_time = None
    self._last_sums = {}

  def _step(self):
    return int(self.model.optimizer.iterations.numpy())

  def _sums(self):
    """{name: (total, count)} of the Mean trackers (as this worker reads them)."""
    metrics = [m for m in self.model.metrics if m.name in METRIC_NAMES]
    values = tf.stack([tf.cast(v, tf.float32) for m in metrics
                       for v in (m.total, m.count)])
    values = values.numpy().tolist()
    return {m.name: (values[2 * i], values[2 * i + 1])
            for i, m in enumerate(metrics)}

  def _window_means(self):
    means = {}
    for name, (total, count) in self._sums().items():
      last_total, last_count = self._last_sums.get(name, (0.0, 0.0))
      if count < last_count:  # Keras reset the tracker at an epoch start
        last_total, last_count = 0.0, 0.0
      means[name] = ((total - last_total) / (count - last_count)
                     if count > last_count else float("nan"))
      self._last_sums[name] = (total, count)
    return means

  def on_train_begin(self, logs=None):
    self._last_step, self._last_time = self._step(), time.time()

  def on_epoch_begin(self, epoch, logs=None):
    self._last_sums = {}

  def on_train_batch_end(self, batch, logs=None):
    step = self._step()
    if step - self._last_step < self.log_steps:
      return
    now = time.time()
    record = {"step": step, **self._window_means()}
    record["learning_rate"] = float(self.schedule(step - 1))
    record["examples_per_second"] = (
        (step - self._last_step) * self.global_batch_size /
        max(now - self._last_time, 1e-9))
    record["tokens_per_second"] = record["examples_per_second"] * self.seq_length
    record["time"] = now
    self._last_step, self._last_time = step, now
    if not self.write:
      return
    with self.writer.as_default(step=step):
      for key, value in record.items():
        if key not in ("step", "time"):
          write_scalar(key, value)
    self.writer.flush()
    with open(self.jsonl_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")


class CheckpointSaver(keras.callbacks.Callback):
  """Saves at the end of every Keras epoch (= every save_checkpoints_steps)."""

  def __init__(self, manager, on_save=None):
    super().__init__()
    self.manager = manager
    self.on_save = on_save

  def on_epoch_end(self, epoch, logs=None):
    step = int(self.model.optimizer.iterations.numpy())
    if self.manager.latest_checkpoint and self.manager.latest_checkpoint.endswith(
        f"-{step}"):
      return
    path = self.manager.save(checkpoint_number=step)
    logging.info("Saved checkpoint %s", path)
    if self.on_save:
      self.on_save(step)


def write_eval_results(output_dir: str, results: Dict[str, float]):
  """eval_results.json and the original-style eval_results.txt ("key = value")."""
  with open(os.path.join(output_dir, "eval_results.json"), "w",
            encoding="utf-8") as f:
    json.dump(results, f, indent=2, sort_keys=True)
  with open(os.path.join(output_dir, "eval_results.txt"), "w",
            encoding="utf-8") as f:
    for key in sorted(results):
      f.write(f"{key} = {results[key]}\n")


# ------------------------------------------------------------ the recipe
def _segments(start: int, total: int, every: int) -> List[List[int]]:
  """[steps_per_epoch, epochs] chunks from `start` to `total`, cut at checkpoints."""
  segments, step = [], start
  if step % every and step < total:
    first = min(every - step % every, total - step)
    segments.append([first, 1])
    step += first
  if (total - step) // every:
    segments.append([every, (total - step) // every])
    step += every * segments[-1][1]
  if step < total:
    segments.append([total - step, 1])
  return segments


def _check_params(p: Params):
  if not (p.do_train or p.do_eval):
    raise ValueError("At least one of --do_train or --do_eval must be set")
  if not p.output_dir:
    raise ValueError("--output_dir is required")
  if p.do_train and not p.input_file:
    raise ValueError("--do_train needs --input_file")
  if p.do_eval and not (p.eval_input_file or p.input_file):
    raise ValueError("--do_eval needs --eval_input_file or --input_file")
  for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
               "save_checkpoints_steps", "iterations_per_loop", "log_steps",
               "keep_checkpoint_max", "max_eval_steps"):
    if getattr(p, name) <= 0:
      raise ValueError(f"--{name} must be positive, got {getattr(p, name)}")


def _set_precision(mixed_precision: str):
  policy = {"none": "float32", "bfloat16": "mixed_bfloat16",
            "float16": "mixed_float16"}[mixed_precision]
  keras.mixed_precision.set_global_policy(policy)


def run(p: Params) -> Dict[str, float]:
  """Trains and/or evaluates as the flags say; returns the last metrics.

  Returns a dict with `global_step` and, with --do_eval, the eval metrics.
  The global Keras dtype policy is restored on return.
  """
  policy = keras.mixed_precision.global_policy()
  try:
    return _run(p)
  finally:
    keras.mixed_precision.set_global_policy(policy)


def _run(p: Params) -> Dict[str, float]:
  _check_params(p)
  strategy = make_strategy(p.distribution_strategy, p.tpu, p.num_gpus)
  chief = is_chief(strategy)
  config = resolve_config(p.preset, p.albert_config_file)
  vocab_size = p.vocab_size or (
      spm_vocab_size(p.spm_model_file) if p.spm_model_file else 0)
  if vocab_size:
    config = config.replace(vocab_size=vocab_size)
  keras.utils.set_random_seed(p.seed)
  _set_precision(p.mixed_precision)

  # Non-chief multi-worker replicas write their (identical) checkpoints to a
  # scratch directory: every worker must take part in the save.
  output_dir = p.output_dir
  ckpt_dir = output_dir if chief else os.path.join(
      output_dir, f".worker_{strategy.cluster_resolver.task_id}")
  tf.io.gfile.makedirs(ckpt_dir)
  if chief:
    config.to_json_file(os.path.join(output_dir, "albert_config.json"))

  train_files = input_pipeline.expand_input_files(p.input_file) if (
      p.do_train) else []
  eval_files = input_pipeline.expand_input_files(
      p.eval_input_file or p.input_file) if p.do_eval else []
  input_pipeline.check_shards(train_files + eval_files, p.max_seq_length,
                              p.max_predictions_per_seq)
  if p.skip_corrupt_records:
    scan = input_pipeline.scan_tfrecords(train_files + eval_files)
    bad = input_pipeline.describe_corrupt_files(scan)
    if bad:
      logging.warning("--skip_corrupt_records: skipping the rest of %d "
                      "file(s) from their first corrupt record: %s",
                      sum(bool(r.error) for r in scan), bad)

  # Restart step and the fit plan; steps_per_execution must divide every chunk.
  existing = tf.train.latest_checkpoint(ckpt_dir)
  start_hint = int(existing.rsplit("-", 1)[1]) if existing else 0
  segments = _segments(start_hint, p.num_train_steps,
                       p.save_checkpoints_steps) if p.do_train else []
  steps_per_execution = math.gcd(p.iterations_per_loop,
                                 *[s for s, _ in segments])
  if steps_per_execution != p.iterations_per_loop:
    logging.warning("iterations_per_loop=%d does not divide the checkpoint "
                    "intervals %s; using %d steps per call",
                    p.iterations_per_loop, segments, steps_per_execution)

  with strategy.scope():
    model, schedule = build_pretrainer(config, p, steps_per_execution)
    checkpoint = make_checkpoint(model)
  manager = tf.train.CheckpointManager(
      checkpoint, ckpt_dir, max_to_keep=p.keep_checkpoint_max,
      checkpoint_name="ckpt")
  if manager.latest_checkpoint:
    checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
    logging.info("Resumed from %s", manager.latest_checkpoint)
  elif p.init_checkpoint:
    report = checkpoints.restore_weights(p.init_checkpoint, model)
    logging.info("Initialised weights from %s: %s", p.init_checkpoint, report)
  step = int(model.optimizer.iterations.numpy())

  data_kwargs = dict(max_seq_length=p.max_seq_length,
                     max_predictions_per_seq=p.max_predictions_per_seq,
                     skip_corrupt_records=p.skip_corrupt_records)

  def evaluate(at_step):
    # TPUs need static shapes: there the last partial batch is dropped.
    tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    # max_eval_steps limits the data, not `evaluate(steps=)`: Keras runs
    # whole steps_per_execution chunks, so steps=8 with 10 steps per call
    # evaluated 10 batches (and 20 in an eval-only run of the same flags).
    eval_ds = input_pipeline.make_distributed_dataset(
        strategy, eval_files, p.eval_batch_size, is_training=False,
        drop_remainder=tpu, max_batches=p.max_eval_steps or None,
        **data_kwargs)
    results = _guard_corrupt(
        lambda: model.evaluate(eval_ds, verbose=0, return_dict=True),
        eval_files)
    if any(k not in results for k in EVAL_KEYS):
      raise input_pipeline.InputFileError(
          f"--eval_input_file: no eval batch could be formed from "
          f"{len(eval_files)} file(s) ({', '.join(eval_files[:3])}"
          f"{', ...' if len(eval_files) > 3 else ''}): they hold no records"
          + (f", or fewer than --eval_batch_size={p.eval_batch_size} (a TPU "
             "drops a partial batch)" if tpu else ""))
    results = {k: float(results[k]) for k in EVAL_KEYS}
    results["global_step"] = at_step
    if chief:
      with tf.summary.create_file_writer(
          os.path.join(output_dir, "eval")).as_default(step=at_step):
        for key in EVAL_KEYS:
          write_scalar(key, results[key])
      with open(os.path.join(output_dir, "eval_log.jsonl"), "a",
                encoding="utf-8") as f:
        f.write(json.dumps(results) + "\n")
    logging.info("Eval at step %d: %s", at_step, results)
    return results

  periodic_eval = p.do_eval and p.eval_every_checkpoint
  if p.do_train and step < p.num_train_steps:
    if periodic_eval and step == 0:
      evaluate(0)
    log_steps = math.ceil(p.log_steps / steps_per_execution) * steps_per_execution
    callbacks = [
        MetricsLogger(output_dir, schedule, p.train_batch_size,
                      p.max_seq_length, log_steps, write=chief),
        CheckpointSaver(manager, on_save=evaluate if periodic_eval else None),
    ]
    for steps_per_epoch, epochs in _segments(step, p.num_train_steps,
                                             p.save_checkpoints_steps):
      # Offset the shuffle seed by the step: a resumed run reads new batches.
      train_ds = input_pipeline.make_distributed_dataset(
          strategy, train_files, p.train_batch_size, is_training=True,
          seed=p.seed + step, shuffle_buffer_size=p.shuffle_buffer_size,
          **data_kwargs)
      epoch0 = step // p.save_checkpoints_steps
      _guard_corrupt(lambda: model.fit(
          train_ds, initial_epoch=epoch0, epochs=epoch0 + epochs,
          steps_per_epoch=steps_per_epoch, callbacks=callbacks,
          verbose=1 if chief else 0, shuffle=False), train_files)
      step = int(model.optimizer.iterations.numpy())
  results = {"global_step": step}
  if p.do_eval:
    last = manager.latest_checkpoint
    if periodic_eval and last and last.endswith(f"-{step}"):
      results = _last_eval(output_dir) or evaluate(step)
    else:
      results = evaluate(step)
    if chief:
      write_eval_results(output_dir, results)
  if not chief:
    shutil.rmtree(ckpt_dir, ignore_errors=True)
  return results


def _last_eval(output_dir):
  path = os.path.join(output_dir, "eval_log.jsonl")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    lines = [l for l in f if l.strip()]
  return json.loads(lines[-1]) if lines else None


def _guard_corrupt(fn, files):
  """Runs fn; a read error from tf.data is re-raised naming the corrupt file."""
  try:
    return fn()
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    scan = input_pipeline.scan_tfrecords(files)
    bad = input_pipeline.describe_corrupt_files(scan)
    if not bad:
      raise
    raise input_pipeline.InputFileError(
        f"Corrupt TFRecord data: {bad}. Fix or remove the file(s), or pass "
        "--skip_corrupt_records to skip unreadable records.") from e


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  run(Params(**{name: flags.FLAGS[name].value for name in Params.field_names()}))


if __name__ == "__main__":
  app.run(main)
