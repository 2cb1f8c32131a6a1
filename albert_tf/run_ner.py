r"""Fine-tune ALBERT on token tagging (NER): People's Daily 1998 or any CoNLL file.

    python -m data_prep.corpora --corpus=peoples_daily_ner \
        --output_dir=demo_output/corpus/ner
    python -m albert_tf.run_ner --task_name=peoples_daily_ner \
        --data_dir=demo_output/corpus/ner --output_dir=demo_output/ner \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --doc_stride=64 --train_batch_size=32 \
        --learning_rate=1e-4 --num_train_epochs=3 \
        --do_train --do_eval --do_predict

data_dir holds train.txt, dev.txt and test.txt in CoNLL layout (token and
tag per line, blank line between sentences; test.txt may have no tags).
`--task_name=conll` reads any such files: BIO, IOB1, BIOES/IOBES or BMES
(detected, or --tag_scheme), character or word tokens. The recipe is
run_classifier's: read and window the splits (tasks/tagging.py), then the
one trainer under any --distribution_strategy, a checkpoint and a dev eval
every epoch (or --eval_every_steps), the best checkpoint by dev entity F1
kept apart; then eval/predict with the best. Killed, the same command
resumes at the last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       tags, scheme, max_seq_length, tokenizer (for export)
  eval_results.json      entity_precision/recall/f1 (+ per type) of the dev
                         split with the best checkpoint (of the test split
                         when only --do_predict runs); test_* too when
                         test.txt has tags
  test_predictions.txt   token \t gold \t predicted (no gold column when
                         test.txt has no tags), in test.txt's order and
                         scheme, a blank line between sentences
  test_results.json      the test split's metrics (when it has tags)
"""

import dataclasses
import json
import os
from typing import Optional

from albert_tf import settings
from albert_tf.data.conll import TASK_NAMES
from albert_tf.training import options
from albert_tf.training.options import FinetuneOptions

# TensorFlow and what imports it (finetuning, resolution, runtime, tasks)
# are imported by the functions that run, not here: --help and a flag
# mistake answer before TF loads.


@dataclasses.dataclass
class NerOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      None, "peoples_daily_ner (data_prep.corpora's BIO files) or conll (any "
      "CoNLL files).", choices=TASK_NAMES, required=True)
  data_dir: str = settings.field(
      None, "Directory with train.txt, dev.txt and test.txt in CoNLL layout.",
      required=True)
  doc_stride: Optional[int] = settings.field(
      None, "Pieces between the starts of the windows of a sentence longer "
      "than max_seq_length - 2 (default: half a window).")
  tag_scheme: Optional[str] = settings.field(
      None, "BIO (IOB2), IOB1, BIOES (IOBES) or BMES (default: detected from "
      "the files).")
  strict_tags: bool = settings.field(
      False, "Stop at the first gold tag that does not continue or close an "
      "entity in its scheme (an I-PER after O, an M-PER or E-PER at the "
      "sentence start, an entity BIOES leaves open), naming file:line. "
      "Without it such tags are read as conlleval and seqeval read them (an "
      "inside tag that continues no entity starts one), counted, and named "
      "in one warning per file.")


def run(**kwargs):
  """Runs NER fine-tuning/eval/predict; kwargs are `NerOptions` fields.

  Returns a dict: "eval" (best dev metrics), "test" (test metrics when
  labelled), "best_step", "num_train_steps", "train_wall_s", "data" (split
  stats), "output_dir".
  """
  from albert_tf.data import conll  # pylint: disable=g-import-not-at-top
  from albert_tf.training import finetuning, runtime  # pylint: disable=g-import-not-at-top
  o = NerOptions(**kwargs)
  finetuning.check_options(o)
  if o.task_name not in TASK_NAMES:
    raise ValueError(f"--task_name must be one of {', '.join(TASK_NAMES)}, "
                     f"got {o.task_name!r}")
  conll.canonical_scheme(o.tag_scheme)  # a bad name fails here
  with runtime.dtype_policy(o.mixed_precision):
    return _run(o)


def _run(o: NerOptions):
  # pylint: disable=g-import-not-at-top
  from albert_tf import tasks
  from albert_tf.training import finetuning, resolution
  strategy = finetuning.strategy(o)
  info = finetuning.recorded_info(o)
  tagger_info = info if info and info.task == "tagging" else None
  max_seq_length = o.max_seq_length or (info and info.max_seq_length) or 128
  o = dataclasses.replace(
      o, max_seq_length=max_seq_length,
      doc_stride=o.doc_stride or (
          tagger_info and tagger_info.task_config.get("doc_stride")) or
      max(1, (max_seq_length - 2) // 2),
      do_lower_case=(o.do_lower_case if o.do_lower_case is not None
                     else info.do_lower_case if info else None))
  config, tokenizer = finetuning.resolve_model(o)
  resolution.check_seq_length(o.max_seq_length, config)
  task = tasks.TASKS["tagging"](
      o.task_name, tokenizer, o.data_dir, o.max_seq_length, o.doc_stride,
      label_list=tagger_info.label_list if tagger_info else None,
      tag_scheme=o.tag_scheme, eval_batch_size=o.eval_batch_size,
      classifier_dropout=o.classifier_dropout, seed=o.seed,
      max_train_examples=o.max_train_examples,
      max_eval_examples=o.max_eval_examples, strict_tags=o.strict_tags,
      max_predict_examples=o.max_predict_examples)
  # The splits are read first: the train split's tags are the model's.
  data_stats = _validate_splits(o, task)
  return finetuning.train_and_evaluate(
      o, task, config, strategy,
      f"tagging:{o.task_name}:{','.join(task.label_list)}", data_stats,
      lambda trainer, chief, best_step: _evaluate_and_predict(
          o, task, trainer, chief, best_step))


def _validate_splits(o: NerOptions, task):
  """Reads every split the run needs (DataError names file:line)."""
  from albert_tf.data import conll  # pylint: disable=g-import-not-at-top
  stats = {}
  for split, wanted, needs_tags in (("train", o.do_train, True),
                                    ("dev", o.do_eval, True),
                                    ("test", o.do_predict, False)):
    if not wanted:
      continue
    data, _, stats[split] = task.load_split(split)
    if needs_tags and not data.has_tags:
      raise conll.DataError(f"{data.file}: the {split} split needs tags")
  return stats


def _evaluate_and_predict(o: NerOptions, task, trainer, chief, best_step):
  result, eval_results = {}, {}
  out_dir = o.output_dir if chief else trainer.ckpt_dir
  if o.do_eval:
    best = trainer.best() if o.do_train else None
    result["eval"] = best["metrics"] if best else trainer.evaluate()
    eval_results = {k: v for k, v in result["eval"].items()
                    if k != "global_step"}
    eval_results["split"] = "dev"
  if o.do_predict:
    task.eval_batch_size = o.predict_batch_size or o.eval_batch_size
    test = task.predict(trainer.model, out_dir)
    if test:
      result["test"] = test
      if not o.do_eval:
        eval_results = dict(test, split="test")
      eval_results.update({f"test_{k}": v for k, v in test.items()})
      if chief:
        with open(os.path.join(o.output_dir, "test_results.json"), "w",
                  encoding="utf-8") as f:
          json.dump(test, f, indent=2)
  if eval_results and chief:
    eval_results["best_step"] = best_step
    with open(os.path.join(o.output_dir, "eval_results.json"), "w",
              encoding="utf-8") as f:
      json.dump(eval_results, f, indent=2)
  return result


main = options.main_for(NerOptions, run)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(NerOptions)
  cli_errors.run_main(main)
