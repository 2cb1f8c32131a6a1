r"""Fine-tune ALBERT on span question answering: SQuAD v1.1/v2.0, CMRC 2018, DRCD.

    python -m albert_tf.run_squad --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --output_dir=out/squad \
        --init_checkpoint=albert_base --spm_model_file=albert_base/spm.model \
        --do_train --do_predict
    # v2.0: --version_2_with_negative; CMRC 2018 / DRCD: --task_name=cmrc2018

The files are the official SQuAD JSON (CMRC 2018 and DRCD use the same
layout). The original's flags and defaults: max_seq_length 384, doc_stride
128 (the step between the starts of a context's windows, not HF's overlap),
max_query_length 64, n_best_size 20, max_answer_length 30, start_n_top and
end_n_top 5 (v2), learning_rate 5e-5, warmup_proportion 0.1, 3 epochs. The
recipe is run_classifier's: read and window the files (tasks/span_qa.py),
the one trainer under any --distribution_strategy, a checkpoint and a dev
eval every epoch (or --eval_every_steps) when --do_eval, the best by dev F1
kept apart; then eval/predict with the best. Killed, the same command
resumes at the last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       version 2 or not, windows, tokenizer (for export)
  predictions.json       {question id: answer text} for every question of
                         --predict_file ("" = no answer, v2)
  nbest_predictions.json the n best answers per question, with scores
  null_odds.json         v2: the no-answer score per question
  eval_results.json      the official metrics of --predict_file when it has
                         answers (SQuAD v1.1: exact_match, f1; v2.0: exact,
                         f1, HasAns_*, NoAns_*, best_* and the threshold
                         behind predictions.json; CMRC 2018: f1,
                         exact_match), with the best checkpoint
"""

import dataclasses
import os
from typing import Optional

from absl import logging

from albert_tf import settings
from albert_tf.data.squad_metrics import TASK_NAMES
from albert_tf.training import options
from albert_tf.training.options import FinetuneOptions

# TensorFlow and what imports it (finetuning, resolution, runtime, tasks)
# are imported by the functions that run, not here: --help and a flag
# mistake answer before TF loads.

# --data_dir's files when --train_file / --predict_file are not given.
TRAIN_JSON, DEV_JSON = "train.json", "dev.json"
# The original run_squad's defaults (a fine-tuned model's own come first).
MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64


@dataclasses.dataclass
class SquadOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      "squad", "squad (the official SQuAD evaluation), cmrc2018 or drcd "
      "(CMRC 2018's: character F1 over mixed segmentation, EM without "
      "punctuation).", choices=TASK_NAMES)
  data_dir: Optional[str] = settings.field(
      None, f"Directory with {TRAIN_JSON} and {DEV_JSON}, for "
      "--train_file and --predict_file when they are not given.")
  train_file: Optional[str] = settings.field(
      None, "SQuAD JSON for training.")
  predict_file: Optional[str] = settings.field(
      None, "SQuAD JSON to predict (and to evaluate when it has answers).")
  version_2_with_negative: bool = settings.field(
      False, "SQuAD 2.0: questions may have no answer (is_impossible); the "
      "v2 head with its answer-class logit.")
  doc_stride: Optional[int] = settings.field(
      None, "Pieces between the starts of a context's windows (the step "
      "between window starts as in the original, not HF's overlap; "
      f"default: as the model was fine-tuned, else {DOC_STRIDE}).",
      lower_bound=1)
  max_query_length: Optional[int] = settings.field(
      None, "Question pieces kept; longer questions are cut and counted "
      f"(default: as the model was fine-tuned, else {MAX_QUERY_LENGTH}).",
      lower_bound=1)
  # How the predictions are read from the logits.
  n_best_size: int = settings.field(
      20, "Answers kept per question in nbest_predictions.json.",
      lower_bound=1, group="output")
  max_answer_length: int = settings.field(
      30, "Longest answer, in pieces.", lower_bound=1, group="output")
  start_n_top: int = settings.field(5, "v2: start beams.", lower_bound=1,
                                    group="output")
  end_n_top: int = settings.field(5, "v2: end beams per start.",
                                  lower_bound=1, group="output")


def run(**kwargs):
  """Runs span-QA fine-tuning/eval/predict; kwargs are `SquadOptions`
  fields.

  Returns a dict: "eval" (the predict file's metrics with the best
  checkpoint), "test" (the same from --do_predict), "best_step",
  "num_train_steps", "train_wall_s", "data" (file stats), "output_dir".
  """
  from albert_tf.training import finetuning, runtime  # pylint: disable=g-import-not-at-top
  o = SquadOptions(**kwargs)
  finetuning.check_options(o)
  with runtime.dtype_policy(o.mixed_precision):
    return _run(o)


def _files(o: SquadOptions):
  def pick(given, name):
    if given or not o.data_dir:
      return given
    return os.path.join(o.data_dir, name)
  return pick(o.train_file, TRAIN_JSON), pick(o.predict_file, DEV_JSON)


def _run(o: SquadOptions):
  # pylint: disable=g-import-not-at-top
  from albert_tf import tasks
  from albert_tf.data import squad
  from albert_tf.training import finetuning, resolution
  strategy = finetuning.strategy(o)
  info = finetuning.recorded_info(o)
  mine = info if info and info.task == "span_qa" else None
  train_file, predict_file = _files(o)
  if o.do_train and not train_file:
    raise squad.SquadError("--do_train needs --train_file (or --data_dir "
                           f"with {TRAIN_JSON})")
  if (o.do_eval or o.do_predict) and not predict_file:
    raise squad.SquadError("--do_eval and --do_predict need --predict_file "
                           f"(or --data_dir with {DEV_JSON})")
  if mine and bool(mine.task_config.get("version_2_with_negative")) != (
      o.version_2_with_negative):
    recorded = str(bool(mine.task_config.get("version_2_with_negative")))
    raise squad.SquadError(
        f"--init_checkpoint={o.init_checkpoint} was fine-tuned with "
        f"--version_2_with_negative={recorded.lower()} (another head); give "
        "the same value")
  own = mine.task_config if mine else {}
  o = dataclasses.replace(
      o, max_seq_length=o.max_seq_length or (info and info.max_seq_length)
      or MAX_SEQ_LENGTH,
      doc_stride=o.doc_stride or own.get("doc_stride") or DOC_STRIDE,
      max_query_length=(o.max_query_length or own.get("max_query_length")
                        or MAX_QUERY_LENGTH),
      do_lower_case=(o.do_lower_case if o.do_lower_case is not None
                     else info.do_lower_case if info else None))
  config, tokenizer = finetuning.resolve_model(o)
  resolution.check_seq_length(o.max_seq_length, config)
  if o.max_seq_length < o.max_query_length + 3 + 1:
    raise ValueError(f"--max_seq_length={o.max_seq_length} leaves no room "
                     f"for context after --max_query_length="
                     f"{o.max_query_length} and [CLS], [SEP], [SEP]")
  task = tasks.TASKS["span_qa"](
      o.task_name, tokenizer, train_file, predict_file, o.max_seq_length,
      o.doc_stride, o.max_query_length, o.version_2_with_negative,
      o.n_best_size, o.max_answer_length, o.start_n_top, o.end_n_top,
      o.eval_batch_size, o.classifier_dropout, o.seed, o.max_train_examples,
      o.max_eval_examples, o.max_predict_examples)
  stats = {}
  # Every split the run needs, each with its own example limit, read
  # before anything is written.
  for split, wanted in (("train", o.do_train), ("dev", o.do_eval),
                        ("test", o.do_predict)):
    if wanted:
      stats[split] = task.stats(split)
  if o.do_eval and not task.has_answers("dev"):
    raise squad.SquadError(f"{predict_file}: --do_eval needs answers in the "
                           "predict file")
  if o.do_train and not o.init_checkpoint:
    logging.warning(
        "Training span QA from random initial weights (no "
        "--init_checkpoint): the scores will be far below ALBERT's; give a "
        "pretrained checkpoint (convert_checkpoint) to fine-tune it")
  return finetuning.train_and_evaluate(
      o, task, config, strategy,
      f"span_qa:{o.task_name}:v{2 if o.version_2_with_negative else 1}",
      stats, lambda trainer, chief, best_step: finetuning.evaluate_and_predict(
          o, task, trainer, chief, best_step))


main = options.main_for(SquadOptions, run)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(SquadOptions)
  cli_errors.run_main(main)
