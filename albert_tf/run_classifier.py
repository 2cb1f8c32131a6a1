r"""Fine-tune ALBERT on sentence(-pair) classification or regression.

    python -m albert_tf.run_classifier --task_name=sentiment \
        --data_dir=demo_output/corpus/sentiment --output_dir=demo_output/cls \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=1e-4 \
        --num_train_epochs=3 --do_train --do_eval --do_predict

Recipe: read + encode the TSV splits (tasks/classification.py), then the
one trainer (albert_tf.training.trainer) under any --distribution_strategy: an
`AlbertClassifier` initialised from --init_checkpoint, AdamW (warmup +
linear decay), a checkpoint and a dev eval every epoch (or every
--eval_every_steps), the best checkpoint by the task's dev metric kept
apart; then predict with the best. Killed, the same command resumes at the
last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint   latest checkpoints (weights, optimizer, step)
  best/                   best weights by the dev metric + best.json
  albert_config.json      the encoder config
  task_record.json        task, labels, max_seq_length (for export)
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
from typing import Optional

from albert_tf import settings
from albert_tf.training import options
from albert_tf.training.options import FinetuneOptions

# TensorFlow and what imports it (finetuning, resolution, runtime, tasks)
# are imported by the functions that run, not here: --help and a flag
# mistake answer before TF loads.


@dataclasses.dataclass
class ClassifierOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      None, "sentiment, lcqmc, cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, "
      "rte or tsv", required=True)
  data_dir: str = settings.field(
      None, "Directory with {train,dev,test} TSVs.", required=True)
  # The generic `tsv` task.
  text_a_column: Optional[str] = settings.field(
      None, "tsv task: text_a column (header name or 0-based index).")
  text_b_column: Optional[str] = settings.field(
      None, "tsv task: text_b column.")
  label_column: Optional[str] = settings.field(
      None, "tsv task: label column.")
  label_list: Optional[str] = settings.field(
      None, "tsv task: comma-separated labels (default: the distinct labels "
      "of the train split).")
  regression: Optional[bool] = settings.field(
      None, "tsv task: the label column holds scores (default: when the "
      "labels are non-integer numbers).")
  has_header: Optional[bool] = settings.field(
      None, "tsv task: first line is a header (default: when a column is "
      "given by name).")


def run(**kwargs):
  """Runs fine-tuning/eval/predict; kwargs are `ClassifierOptions` fields.

  Returns a dict: "eval" (best dev metrics), "test" (test metrics when
  labelled), "best_step", "num_train_steps", "train_wall_s", "data" (split
  stats), "output_dir".
  """
  from albert_tf.training import finetuning, runtime  # pylint: disable=g-import-not-at-top
  o = ClassifierOptions(**kwargs)
  finetuning.check_options(o)
  with runtime.dtype_policy(o.mixed_precision):
    return _run(o)


def _run(o: ClassifierOptions):
  # pylint: disable=g-import-not-at-top
  from albert_tf import tasks
  from albert_tf.tasks.classification import read_spec
  from albert_tf.training import finetuning, resolution
  strategy = finetuning.strategy(o)
  info = finetuning.recorded_info(o)
  o = dataclasses.replace(
      o, max_seq_length=o.max_seq_length or (info and info.max_seq_length)
      or 128, do_lower_case=(o.do_lower_case if o.do_lower_case is not None
                             else info.do_lower_case if info else None))
  spec = read_spec(o.task_name, o.text_a_column, o.text_b_column,
                   o.label_column, o.label_list, o.has_header, o.regression,
                   o.data_dir, info.label_list if info and
                   info.task_name == "tsv" else None)
  config, tokenizer = finetuning.resolve_model(o)
  resolution.check_seq_length(o.max_seq_length, config)
  task = tasks.TASKS["regression" if spec.is_regression else
                     "classification"](
      spec, tokenizer, o.data_dir, o.max_seq_length, o.eval_batch_size,
      o.classifier_dropout, o.seed, o.max_train_examples, o.max_eval_examples,
      o.max_predict_examples)
  return finetuning.train_and_evaluate(
      o, task, config, strategy, f"{task.name}:{spec.name}",
      _validate_splits(o, task),
      lambda trainer, chief, best_step: _evaluate_and_predict(
          o, task, trainer, chief, best_step))


def _evaluate_and_predict(o: ClassifierOptions, task, trainer, chief,
                          best_step):
  """Dev metrics, test predictions (+ metrics) and eval_results.json."""
  from albert_tf.training import finetuning  # pylint: disable=g-import-not-at-top
  result, eval_results = {}, {}
  if o.do_eval:
    # Training evaluated the best checkpoint already; an eval-only run
    # evaluates (the dev file or --max_eval_examples may have changed).
    best = trainer.best() if o.do_train else None
    result["eval"] = best["metrics"] if best else trainer.evaluate()
    eval_results = {f"eval_{k}": v for k, v in result["eval"].items()
                    if k not in ("eval_metric", "global_step")}
    eval_results["best_step"] = best_step
    if chief:  # before predicting: a failing predict loses no dev result
      finetuning.write_eval_results(o.output_dir, eval_results)
  if o.do_predict:
    task.eval_batch_size = o.predict_batch_size or o.eval_batch_size
    test = task.predict(trainer.model, o.output_dir if chief else
                        trainer.ckpt_dir)
    if test:
      result["test"] = test
      eval_results.update({f"test_{k}": v for k, v in test.items()
                           if k != "eval_metric"})
  if eval_results and chief:
    finetuning.write_eval_results(o.output_dir, eval_results)
  return result


def _validate_splits(o: ClassifierOptions, task):
  """Reads every split the run needs (DataError names file:line)."""
  from albert_tf.data.classifier_data import DataError  # pylint: disable=g-import-not-at-top
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


main = options.main_for(ClassifierOptions, run)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(ClassifierOptions)
  cli_errors.run_main(main)
