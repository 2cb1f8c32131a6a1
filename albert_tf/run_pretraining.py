r"""Pretrain ALBERT (masked LM + sentence order) from TFRecord shards.

    python -m albert_tf.run_pretraining --flagfile=configs/pretrain_albert_tiny_zh_demo.flags

`run` is the recipe: strategy, config, the records checked, output_dir
checked then claimed, the pretraining task, and the one trainer
(`training.trainer`), which resumes from --output_dir's latest checkpoint
(else --init_checkpoint's weights), fits one checkpoint interval per Keras
"epoch", and with --do_eval writes eval_results.json/.txt. Written to
--output_dir: ckpt-<step>.* (`training.checkpoints`' layout),
albert_config.json, task_record.json, train/ and eval/ events,
train_log.jsonl and eval_log.jsonl. The input pipeline is not checkpointed
(nor was the original's): a resumed run offsets its shuffle seed by the
step, so it does not replay the batches it trained on.
"""

import dataclasses
import os
import time
from typing import Dict, Optional, Sequence

from absl import app
from absl import flags
from absl import logging

import albert_tf  # noqa: F401  (sets KERAS_BACKEND before keras is imported)

from albert_tf.core import file_io
from albert_tf.core import settings
from albert_tf.core import options

# --train_budget_minutes counts from here (the imports above take well
# under a second; TensorFlow loads later, inside the budget).
STARTED = time.time()

# TensorFlow, Keras and what imports them are imported by the functions
# that run, not here: --help and a flag mistake answer before TF loads.
PretrainingOptions = options.PretrainingOptions  # the flags
Params = PretrainingOptions  # its older name


def params_from_argv(argv: Sequence[str]) -> Params:
  """Params of command-line args (--flagfile too): `run(params_from_argv(
  [...]))` behaves as the command line, without a subprocess."""
  fv = flags.FlagValues()
  settings.define_flags(Params, fv)
  fv(["run_pretraining"] + list(argv))
  return settings.from_flags(Params, fv)


# ------------------------------------------------------------ the recipe
def _check_params(p: Params):
  if not (p.do_train or p.do_eval):
    raise ValueError("At least one of --do_train or --do_eval must be set")
  if not p.output_dir:
    raise ValueError("--output_dir is required")
  if p.do_train and not p.input_file:
    raise ValueError("--do_train needs --input_file (--do_train is on by "
                     "default, as in the original; --nodo_train --do_eval "
                     "only evaluates)")
  if p.do_eval and not (p.eval_input_file or p.input_file):
    raise ValueError("--do_eval needs --eval_input_file or --input_file")
  for name in ("train_batch_size", "eval_batch_size", "num_train_steps",
               "save_checkpoints_steps", "iterations_per_loop", "log_steps",
               "keep_checkpoint_max", "max_eval_steps"):
    if getattr(p, name) <= 0:
      raise ValueError(f"--{name} must be positive, got {getattr(p, name)}")
  if p.train_budget_minutes:
    from albert_tf.training import budget  # pylint: disable=g-import-not-at-top
    budget.check_budget(p.train_budget_minutes, p.budget_warmup_fraction)
    if p.do_train:
      logging.info("--train_budget_minutes=%g: the plan made after the first "
                   "steps replaces --num_train_steps=%d and "
                   "--num_warmup_steps=%d", p.train_budget_minutes,
                   p.num_train_steps, p.num_warmup_steps)
  from albert_tf.training import fast_path  # pylint: disable=g-import-not-at-top
  fast_path.check(p.mixed_precision, p.length_buckets, p.micro_batches)


def _resolve_auto(p: Params) -> Params:
  from albert_tf.training import fast_path  # pylint: disable=g-import-not-at-top
  p = fast_path.resolve_options(p)
  fast_path.say_length_buckets(p.length_buckets, p.max_seq_length)
  return p


def trainer_settings(p: Params, started: float = 0.0):
  """The trainer.TrainerSettings of the flags; `started`: the time.time()
  --train_budget_minutes counts from."""
  from albert_tf.training.trainer import TrainerSettings  # pylint: disable=g-import-not-at-top
  return TrainerSettings(
      budget_minutes=p.train_budget_minutes,
      budget_warmup_fraction=p.budget_warmup_fraction,
      started=started or time.time(), final_eval=p.do_eval,
      output_dir=p.output_dir, num_train_steps=p.num_train_steps,
      train_batch_size=p.train_batch_size,
      checkpoint_steps=p.save_checkpoints_steps,
      keep_checkpoint_max=p.keep_checkpoint_max,
      iterations_per_loop=p.iterations_per_loop, log_steps=p.log_steps,
      eval_at_checkpoints=p.do_eval and p.eval_every_checkpoint,
      jit_compile=p.jit_compile, seq_length=p.max_seq_length,
      optimizer=p.optimizer, learning_rate=p.learning_rate,
      num_warmup_steps=p.num_warmup_steps, poly_power=p.poly_power)


def _with_mfu(settings, p: Params, config, train_files):
  """settings with the logs' tokens/s and MFU: a record's mean real tokens,
  their FLOPs and this machine's matmul peak (measured now, a second)."""
  from albert_tf.training import throughput  # pylint: disable=g-import-not-at-top
  length, sampled = throughput.mean_length(train_files, p.max_seq_length,
                                           p.max_predictions_per_seq)
  flops = throughput.pretraining_flops(config, length,
                                       p.max_predictions_per_seq)
  dtype = {"bfloat16": "bfloat16", "float16": "float16"}.get(
      p.mixed_precision, "float32")
  peak = throughput.matmul_peak(dtype, repeats=3,
                                parallel=int(p.micro_batches))
  logging.info("tokens/s and MFU in the logs count real tokens: %.1f of %d "
               "per record (the first %d records), %.3g GFLOP of matmuls per "
               "example (forward and backward), over a %s matmul peak of "
               "%.0f GFLOP/s measured on this machine", length,
               p.max_seq_length, sampled, flops / 1e9, dtype, peak / 1e9)
  return dataclasses.replace(settings, seq_length=length,
                             flops_per_example=flops, peak_flops=peak)


def run(p: Params, started: Optional[float] = None) -> Dict[str, float]:
  """Trains and/or evaluates as the flags say; returns {"global_step"} and,
  with --do_eval, the eval metrics. `started`: the time.time() a
  --train_budget_minutes counts from (default: now)."""
  started = started or time.time()
  _check_params(p)
  p = _resolve_auto(p)
  from albert_tf.training import runtime  # pylint: disable=g-import-not-at-top
  with runtime.dtype_policy(p.mixed_precision):
    return _run(p, started)


def _run(p: Params, started: float) -> Dict[str, float]:
  """The recipe (module doc); nothing is written before every check."""
  # pylint: disable=g-import-not-at-top
  import keras
  import tensorflow as tf
  from albert_tf.tasks import registry
  from albert_tf.data import corrupt_records
  from albert_tf.data import input_timeout
  from albert_tf.training import output_dir
  from albert_tf.training import resolution
  from albert_tf.training import runtime
  from albert_tf.training.callbacks import write_scalars
  from albert_tf.training.trainer import Trainer
  strategy = runtime.strategy_from_flags(
      p.distribution_strategy, p.tpu, p.num_gpus, p.use_tpu, p.tpu_name,
      p.tpu_zone, p.gcp_project, p.num_tpu_cores, p.worker_timeout_secs)
  chief = runtime.is_chief(strategy)
  config, tokenizer = resolution.resolve_model(
      p.preset, p.albert_config_file, init_checkpoint=p.init_checkpoint,
      spm_model_file=p.spm_model_file, vocab_size=p.vocab_size,
      require_tokenizer=False)
  resolution.check_seq_length(p.max_seq_length, config)
  train_files, eval_files, skipped_report = input_timeout.with_input_timeout(
      lambda progress: _read_inputs(p, progress), p.input_timeout_secs)
  settings = trainer_settings(p, started)
  if p.do_train and chief:
    settings = _with_mfu(settings, p, config, train_files)
  fingerprint = output_dir.make_fingerprint(
      "pretraining", config, tokenizer,
      settings.optimizer_fingerprint() if p.do_train else None,
      p.mixed_precision, p.train_batch_size)
  # Another loss is another model (None: not training, or an older run).
  fingerprint["sentence_order_loss_weight"] = (
      p.sentence_order_loss_weight if p.do_train else None)
  output_dir.check_output_dir(p.output_dir, fingerprint, p.overwrite)

  # Everything is checked: only now is output_dir written.
  lock = None  # held until this function returns
  try:
    if chief:
      lock = output_dir.prepare_output_dir(
          p.output_dir, fingerprint, p.overwrite,
          keep=(p.albert_config_file, p.spm_model_file))
      config.to_json_file(os.path.join(p.output_dir, "albert_config.json"))
      if skipped_report is not None:
        logging.info("--skip_corrupt_records: the skipped records per file are "
                     "in %s", corrupt_records.write_skipped_records(
                         p.output_dir, skipped_report))
        # Also beside the curves, where a run is looked at.
        write_scalars(tf.summary.create_file_writer(
            os.path.join(p.output_dir, "train")), 0,
                      {"skipped_records": skipped_report["skipped"]})
    keras.utils.set_random_seed(p.seed)
    task = registry.family("pretraining").task(
        train_files, eval_files, p.max_seq_length, p.max_predictions_per_seq,
        eval_batch_size=p.eval_batch_size, max_eval_steps=p.max_eval_steps,
        seed=p.seed, shuffle_buffer_size=p.shuffle_buffer_size,
        skip_corrupt_records=p.skip_corrupt_records,
        sentence_order_weight=p.sentence_order_loss_weight,
        length_buckets=p.length_buckets,
        micro_batches=int(p.micro_batches))
    if chief:
      task.record().write_beside(p.output_dir)  # task_record.json
    trainer = Trainer(task, config, settings, strategy)
    trainer.restore(p.init_checkpoint, training=p.do_train)
    if p.do_train:
      trainer.train()
    results = {"global_step": trainer.step}
    if p.do_eval:
      # An eval of this very checkpoint made while this command trained:
      # reuse it. Without --do_train, evaluate: the logged evals may be of
      # other held-out files.
      results = (p.do_train and settings.eval_at_checkpoints and
                 trainer.evaluated.get(trainer.step)) or trainer.evaluate()
      if chief:
        file_io.write_eval_results(p.output_dir, results, text_copy=True)
      logging.info("%s", _against_baselines(results))
    if p.do_train and p.train_budget_minutes:
      deadline = trainer.deadline
      last = ("" if deadline is None or deadline.ended is None else
              " (the last save and eval took %.1f s, %.1f s were kept for "
              "them)" % (time.time() - deadline.ended,
                         deadline.reserve_seconds))
      logging.info("--train_budget_minutes=%g: at step %d of the plan's %d; "
                   "this command took %.2f minutes%s", p.train_budget_minutes,
                   trainer.step, trainer.settings.num_train_steps,
                   (time.time() - started) / 60, last)
    trainer.finish()
  finally:
    if lock is not None:  # over, or failed: another run may write here
      lock.close()
  return results


def _against_baselines(results) -> str:
  """The eval's figures beside their baselines (an older eval has none)."""
  def beside(key, what):
    base = results.get(f"{key}_baseline")
    return f" ({what}: {base:.3f})" if base is not None else ""
  return (f"Held-out at step {results['global_step']}: masked LM accuracy "
          f"{results['masked_lm_accuracy']:.3f}"
          + beside("masked_lm_accuracy",
                   "always the piece most often masked in training")
          + f", loss {results['masked_lm_loss']:.3f}"
          + beside("masked_lm_loss", "the training pieces' unigram "
                   "distribution")
          + f"; sentence order {results['sentence_order_accuracy']:.3f}"
          + beside("sentence_order_accuracy", "the more frequent training "
                   "label"))


def _read_inputs(p: Params, progress):
  """(train_files, eval_files, skipped-records report or None), checked
  before anything is written: data prep's _SUCCESS and manifest, every
  file's first record, records to train on, the corrupt ones to skip, and
  the first batch; progress(what) names the read that may block."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.data import corrupt_records
  from albert_tf.data import record_checks
  from albert_tf.training import output_dir
  progress(f"the input files ({p.input_file or p.eval_input_file})")
  eval_flag = "--eval_input_file" if p.eval_input_file else "--input_file"
  train_files = record_checks.expand_input_files(p.input_file) if (
      p.do_train) else []
  eval_files = record_checks.expand_input_files(
      p.eval_input_file or p.input_file) if p.do_eval else []
  for files, flag in ((train_files, "--input_file"), (eval_files, eval_flag)):
    output_dir.check_inputs_outside(
        p.output_dir, flag, p.eval_input_file if flag == "--eval_input_file"
        else p.input_file, files)
  # Eval on the train files: checked, and warned about, once.
  for files, flag in dict.fromkeys(((tuple(train_files), "--input_file"),
                                    (tuple(eval_files), eval_flag))):
    record_checks.check_records_dirs(
        files, p.max_seq_length, p.max_predictions_per_seq,
        spm_model_file=p.spm_model_file,
        allow_incomplete=p.allow_incomplete_input, flag=flag)
  all_files = list(dict.fromkeys(train_files + eval_files))
  non_empty = record_checks.check_shards(
      all_files, p.max_seq_length, p.max_predictions_per_seq,
      skip_corrupt_records=p.skip_corrupt_records, on_file=progress)
  record_checks.require_records(train_files, non_empty, "--input_file")
  record_checks.require_records(eval_files, non_empty, eval_flag)
  skipped_report = None
  if p.skip_corrupt_records:
    skipped_report = corrupt_records.check_corrupt_fraction(
        corrupt_records.count_corrupt_records(
            all_files, p.max_seq_length, p.max_predictions_per_seq,
            on_file=progress),
        p.max_corrupt_fraction, train_files)
  if train_files:
    progress(f"the first training batch of --input_file={p.input_file}")
    record_checks.first_batch(
        train_files, p.train_batch_size, max_seq_length=p.max_seq_length,
        max_predictions_per_seq=p.max_predictions_per_seq, seed=p.seed,
        shuffle_buffer_size=p.shuffle_buffer_size,
        skip_corrupt_records=p.skip_corrupt_records)
  return train_files, eval_files, skipped_report


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  run(settings.from_flags(Params), started=STARTED)


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(Params)
  cli_errors.run_main(main)
