r"""Fine-tune ALBERT on multiple-choice reading comprehension: RACE.

    python -m albert_tf.run_race --data_dir=data/RACE --output_dir=out/race \
        --init_checkpoint=albert_base --spm_model_file=albert_base/spm.model \
        --do_train --do_eval

data_dir is RACE's own tree, RACE/{train,dev,test}/{middle,high}/*.txt (one
JSON article per file), the directory holding RACE/, or the same tree with
the original's merged all.txt per level directory (`albert_tf.data.race`).
Each question's four options become `[CLS] article [SEP] question+option
[SEP]` (a "_" in the question is replaced by the option); dense(1) over each
pooled output and a softmax over the four pick the answer. The original's
defaults: max_seq_length 512, max_qa_length 128, learning_rate 1e-5, 12000
steps with 1000 of warmup, batch 32. The recipe is run_classifier's (one
trainer, resume, the best checkpoint by dev accuracy). Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       max_qa_length, tokenizer (for export)
  eval_results.json      accuracy, accuracy_middle, accuracy_high (dev, with
                         the best checkpoint); test_* when test has answers
  test_predictions.tsv   id, level, predicted letter, prob_A..prob_D
"""

import dataclasses
from typing import Optional

from absl import logging

from albert_tf import settings
from albert_tf.data.race import TASK_NAMES
from albert_tf.training import options
from albert_tf.training.options import FinetuneOptions

# TensorFlow and what imports it (finetuning, resolution, runtime, tasks)
# are imported by the functions that run, not here: --help and a flag
# mistake answer before TF loads.


@dataclasses.dataclass
class RaceOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field("race", "race (RACE's layout).",
                                  choices=TASK_NAMES)
  data_dir: str = settings.field(
      None, "RACE/ (train, dev, test, each with middle/ and high/), or the "
      "directory that holds it.", required=True)
  max_seq_length: Optional[int] = settings.field(
      None, "Tokens per choice incl. [CLS]/[SEP]; the article is cut from "
      "its end (default: as the model was fine-tuned, else 512).")
  max_qa_length: int = settings.field(
      128, "Question+option pieces kept (its last ones, as the original).",
      lower_bound=1)
  learning_rate: float = settings.field(1e-5, "Peak AdamW learning rate.")
  train_step: int = settings.field(12000, "Training steps; 0: epochs.")
  warmup_step: int = settings.field(
      1000, "Warmup steps; -1: --warmup_proportion of training.")
  eval_batch_size: int = settings.field(8, "Eval/predict batch size "
                                        "(questions, 4 sequences each).")


def run(**kwargs):
  """Runs RACE fine-tuning/eval/predict; kwargs are `RaceOptions` fields.

  Returns a dict: "eval" (best dev metrics), "test" (test metrics when
  labelled), "best_step", "num_train_steps", "train_wall_s", "data" (split
  stats), "output_dir".
  """
  from albert_tf.training import finetuning, runtime  # pylint: disable=g-import-not-at-top
  o = RaceOptions(**kwargs)
  finetuning.check_options(o)
  with runtime.dtype_policy(o.mixed_precision):
    return _run(o)


def _run(o: RaceOptions):
  # pylint: disable=g-import-not-at-top
  from albert_tf import tasks
  from albert_tf.data import race
  from albert_tf.training import finetuning, resolution
  strategy = finetuning.strategy(o)
  info = finetuning.recorded_info(o)
  o = dataclasses.replace(
      o, max_seq_length=o.max_seq_length or (info and info.max_seq_length)
      or 512, do_lower_case=(o.do_lower_case if o.do_lower_case is not None
                             else info.do_lower_case if info else None))
  if o.max_qa_length > o.max_seq_length - 4:
    raise ValueError(f"--max_qa_length={o.max_qa_length} leaves no room "
                     f"for the article in --max_seq_length={o.max_seq_length}")
  config, tokenizer = finetuning.resolve_model(o)
  resolution.check_seq_length(o.max_seq_length, config)
  task = tasks.TASKS["multiple_choice"](
      o.task_name, tokenizer, o.data_dir, o.max_seq_length, o.max_qa_length,
      o.eval_batch_size, o.classifier_dropout, o.seed, o.max_train_examples,
      o.max_eval_examples, o.max_predict_examples)
  stats = {}
  for split, wanted, needs_labels in (("train", o.do_train, True),
                                      ("dev", o.do_eval, True),
                                      ("test", o.do_predict, False)):
    if not wanted:  # every split read before anything is written
      continue
    stats[split] = task.load_split(split)[2]
    if needs_labels and not task.has_labels(split):
      raise race.RaceError(f"{stats[split]['source']}: the {split} split "
                           "needs answers")
  if o.do_train and not o.init_checkpoint:
    logging.warning(
        "Training RACE from random initial weights (no --init_checkpoint): "
        "expect accuracy near chance (0.25); give a pretrained checkpoint")
  return finetuning.train_and_evaluate(
      o, task, config, strategy, f"multiple_choice:{o.task_name}", stats,
      lambda trainer, chief, best_step: finetuning.evaluate_and_predict(
          o, task, trainer, chief, best_step))


main = options.main_for(RaceOptions, run)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(RaceOptions)
  cli_errors.run_main(main)
