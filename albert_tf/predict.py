r"""Predict a file with a fine-tuned model; score it when it holds labels.

    python -m albert_tf.predict --model=demo_output/classifier \
        --input_file=demo_output/corpus/sentiment/test.tsv --columns=label,text \
        --output_file=predictions.tsv

--model is any folder `albert_tf.load` reads with a task head: a
run_classifier / run_ner / run_squad / run_race (albert-finetune)
output_dir, an export_saved_model export, or an export_onnx .onnx /
export_tflite .tflite file (ONNX Runtime / LiteRT). --input_file is
  * a TSV whose first line names the columns (or --columns names them; a
    first line equal to them is read as the header, --header/--noheader
    say it outright),
  * JSON lines (a .jsonl / .json / .ndjson file): one object per line,
  * plain text (any other extension), one text per line, for single-text
    models (a classifier of one text, a tagger),
in UTF-8 (a BOM dropped); blank and whitespace-only lines are skipped and
counted. The input is checked, and its first row read, before the output
is opened; an output that is the input is refused.
Each input of the model (`Predictor.inputs`: text, text_b, question,
context, article, question, options) is read from the column or key of its
own name, or the one --input_columns=NAME=COLUMN gives. A multiple-choice
model's options are a JSON list (in a TSV column too), or one column per
option (--options_columns=A,B,C,D).

--output_file (.jsonl/.json: JSON lines, else TSV) has one row per input:
its "line" in --input_file, the inputs, the row's gold label ("gold") when
it has one, and the prediction (`Task.decode_outputs`: a classifier's
label + probabilities, a tagger's entities, span QA's answer + start + end
+ score). It is written whole or not at all.

Gold values (--label_column; by default where the family's `Task.scorer`
looks: "label", span QA's "answers"/"answer", a tagger's "tags") are
scored by it (`albert_tf.tasks.scoring`: accuracy, macro-F1 and the
confusion matrix beside the majority class; exact match / F1; entity
F1); rows without gold are counted, not scored.

With --task=<dataset> --data_dir=DIR (a registered dataset whose family
reads its files: CLUE's afqmc, tnews, ..., FewCLUE's bustm_0; docs/clue.md)
the benchmark's own files are read instead (`Task.read_dataset`, ids
kept), its labelled splits scored beside the majority class and TF-IDF +
LR fitted on its train file; --output_file (optional) gets every row with
its split and id, --submission_file the benchmark's submission file.

The file is read and predicted --batch_size rows at a time, with a progress
line every --progress_interval_secs. Rows the model cuts to its length
(`Task.truncated_inputs`) are counted and the first named, as fine-tuning
counts its own.
"""

import dataclasses
import itertools
import os
import time
from typing import List, Optional

from albert_tf.core import settings
from albert_tf.data.rows import (
    FORMATS, GOLD, JSON_EXTENSIONS, Lines, PredictError, RowReader, RowWriter,
    check_files, input_format, read_rows)

# TensorFlow (albert_tf.inference, through albert_tf.load) is imported by
# `run`, not here: --help and a flag mistake answer before TF loads.


@dataclasses.dataclass
class PredictArgs:
  """The command line; the fields are the flags."""
  model: str = settings.field(
      None, "A fine-tuned output_dir (run_classifier, run_ner, run_squad, "
      "run_race, albert-finetune), an export_saved_model export, or an "
      "export_onnx .onnx / export_tflite .tflite file.",
      required=True)
  input_file: Optional[str] = settings.field(
      None, "TSV (a header line, or --columns), JSON lines (.jsonl/.json) or "
      "plain text (one text per line); or --task and --data_dir.")
  output_file: Optional[str] = settings.field(
      None, "Where the predictions go: JSON lines for .jsonl/.json, else TSV "
      "(needed with --input_file).")
  task: Optional[str] = settings.field(
      None, "A registered dataset (afqmc, tnews, bustm_0, ...: "
      "docs/clue.md) whose own files in --data_dir are read, as "
      "albert-finetune --task reads them, instead of --input_file.")
  data_dir: Optional[str] = settings.field(
      None, "The folder of --task's files (its train file fits the "
      "baselines).")
  submission_file: Optional[str] = settings.field(
      None, "With --task: write the benchmark's submission file here (a "
      "folder: under the dataset's own name, e.g. afqmc_predict.json).",
      group="output")
  input_format: str = settings.field(
      "auto", "How --input_file is read (auto: by extension: .tsv TSV, "
      ".jsonl/.json/.ndjson JSON lines, else plain text).", choices=FORMATS)
  columns: Optional[List[str]] = settings.field(
      None, "The names of a TSV's columns, in order, when it has no header "
      "line (default: its first line names them).")
  header: Optional[bool] = settings.field(
      None, "Whether a TSV's first line names its columns (default: "
      "without --columns it does; with --columns only when it equals them).")
  input_columns: Optional[List[str]] = settings.field(
      None, "NAME=COLUMN pairs: the column (JSON key) each model input is "
      "read from, e.g. text=review,text_b=answer (default: the column of "
      "the input's own name).")
  options_columns: Optional[List[str]] = settings.field(
      None, "Multiple choice: one column per option, in order (default: the "
      "'options' column, a JSON list).")
  label_column: Optional[str] = settings.field(
      None, "The gold labels' column or key (default: 'label' when there is "
      "one; span QA also 'answers'/'answer', a tagger 'tags').")
  batch_size: int = settings.field(64, "Rows predicted at a time.",
                                   lower_bound=1, group="runtime")
  progress_interval_secs: float = settings.field(
      5.0, "Seconds between progress lines (rows done, rows/s).",
      lower_bound=0.0)


# ------------------------------------------------------------------ run
def run(args: PredictArgs, log=print):
  """Predicts args.input_file into args.output_file; prints and returns
  {"rows": n, "metrics": the family's `Task.scorer` metrics (empty without
  gold), "blank",
  "cut", "unlabelled": counts of lines}. The input is checked, and its
  first row read, before the output is opened. With args.task: `run_task`."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import inference
  from albert_tf.core.file_io import atomic_writer
  from albert_tf.serving.predictor import predict_batches
  if args.task or args.data_dir:
    from albert_tf import predict_dataset  # pylint: disable=g-import-not-at-top
    return predict_dataset.run_task(args, log)
  for flag in ("input_file", "output_file"):
    if not getattr(args, flag):
      raise PredictError(f"--{flag} is needed (or --task=<dataset> "
                         "--data_dir=DIR: a benchmark's own files)")
  fmt = input_format(args.input_file, args.input_format)
  check_files(args.input_file, args.output_file)
  predictor = inference.load_with_head(args.model, PredictError)
  if fmt == "text" and len(predictor.inputs) != 1:
    raise PredictError(
        f"--input_file={args.input_file}: plain text (one text per line) "
        f"feeds a single-text model; the {predictor.kind} model takes "
        f"{', '.join(predictor.inputs)} (give a TSV or JSON lines file)")
  reader = RowReader(predictor, args.input_file, args.input_columns,
                     args.options_columns, args.label_column,
                     same_columns=fmt == "tsv")
  seen = {}
  rows = read_rows(args.input_file, fmt, args.columns, args.header, seen)
  first = next(rows, None)
  if first is None:
    raise PredictError(
        f"--input_file={args.input_file} holds no rows (empty, blank lines"
        f"{' or a header' if fmt == 'tsv' else ''} only): --output_file="
        f"{args.output_file} not written")
  first_values = reader(*first)
  # TSV output: one header, so a "gold" column wherever a row may have one.
  gold_column = fmt == "jsonl" or any(c in first[1]
                                      for c in reader.gold_columns)
  scorer = reader.scorer
  cut, unlabelled = Lines(args.input_file), Lines(args.input_file)
  jsonl = os.path.splitext(args.output_file)[1].lower() in JSON_EXTENSIONS
  start = time.monotonic()
  done = 0
  read = itertools.chain([(first[0], *first_values)], (
      (number, *reader(number, row)) for number, row in rows))
  with atomic_writer(args.output_file) as f:
    writer = RowWriter(f, jsonl)
    for number, values, gold, prediction, is_cut in predict_batches(
        predictor, read, args.batch_size, args.progress_interval_secs):
      scorer.add(values, gold, prediction, f"{args.input_file}:{number}")
      if is_cut:
        cut.add(number)
      if gold is None:
        unlabelled.add(number)
      row = {"line": number, **values}
      if gold is not None or (gold_column and not jsonl):
        row[GOLD] = "" if gold is None else gold
      row.update(scorer.fields(prediction))
      writer.write(row)
      done += 1
  elapsed = time.monotonic() - start
  log(f"{done} rows predicted by the {predictor.kind} model in "
      f"{elapsed:.1f}s ({done / max(elapsed, 1e-9):.1f} rows/s) -> "
      f"{args.output_file} (its \"line\" column: the input line of each)")
  for line in _notes(args, fmt, seen, cut, predictor.max_seq_length, done):
    log(line)
  if writer.note():
    log(writer.note())
  scores = scorer.metrics()
  for line in scorer.lines(scores):
    log(line)
  if scores and unlabelled.count:
    log(f"{unlabelled.count} of {done} rows have no gold label and are not "
        f"scored ({unlabelled})")
  return {"rows": done, "metrics": scores, "blank": seen["blank"].count,
          "cut": cut.count, "unlabelled": unlabelled.count}


def _notes(args, fmt, seen, cut, max_seq_length, done):
  """What reading skipped or cut, one line each."""
  blank = seen["blank"]
  if blank.count:
    yield (f"{blank.count} blank or whitespace-only line(s) skipped "
           f"({blank})")
  if fmt == "tsv" and args.columns and args.header is None:
    yield (f"{args.input_file}:{seen['header']} equals --columns: read as "
           "the header line, not predicted (--noheader predicts it)"
           if "header" in seen else
           f"--columns: {args.input_file} read as having no header line "
           "(--header skips one)")
  if cut.count:
    yield (f"{cut.count} of {done} rows cut to the model's max_seq_length="
           f"{max_seq_length}: their ends are not read (first at {cut})")


def main(argv):
  del argv
  run(settings.from_flags(PredictArgs))


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(PredictArgs)
  cli_errors.run_main(main)
