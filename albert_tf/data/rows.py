"""Rows of a TSV, JSON lines or text file as a model's inputs and gold,
and albert-predict's output rows (`RowWriter`).

albert-predict reads its --input_file with these, and export_tflite and
export_onnx their --verify_data: `read_rows` yields each row (UTF-8, blank
lines skipped and counted), `RowReader` turns it into the inputs of the
model (`Predictor.inputs`) and its gold value, looked for where the
family's `Task.scorer` says.
"""

import json
import os

from albert_tf.data import classifier_data

FORMATS = ("auto", "tsv", "jsonl", "text")
JSON_EXTENSIONS = (".jsonl", ".json", ".ndjson")
OPTIONS = "options"
GOLD = "gold"  # the gold label's column in albert-predict's output


class PredictError(ValueError):
  """Input albert-predict cannot read: one line naming file:line."""


def input_format(path, given="auto"):
  """The format of path: given, or by its extension."""
  if given != "auto":
    return given
  ext = os.path.splitext(path)[1].lower()
  return ("jsonl" if ext in JSON_EXTENSIONS else "tsv" if ext == ".tsv"
          else "text")


class Lines:
  """A count of lines and the numbers of the first few."""

  def __init__(self, path):
    self.path, self.count, self.first = path, 0, []

  def add(self, number):
    self.count += 1
    if len(self.first) < 3:
      self.first.append(number)

  def __str__(self):
    more = self.count - len(self.first)
    return ", ".join(f"{self.path}:{n}" for n in self.first) + (
        f" and {more} more" if more else "")


def check_files(input_file, output_file=None):
  """PredictError unless input_file is a file and output_file (a file or
  none yet) is another one, its temporary (`atomic_writer`) too."""
  if os.path.isdir(input_file):
    raise PredictError(f"--input_file={input_file} is a directory, not a "
                       "file (give one TSV, JSON lines or text file)")
  if not os.path.exists(input_file):
    raise PredictError(f"--input_file={input_file} does not exist")
  # Not a regular file: a pipe (/dev/stdin, <(cmd)), read as it streams.
  if output_file is None:
    return
  if os.path.isdir(output_file):
    raise PredictError(f"--output_file={output_file} is a directory (name "
                       "the file the predictions go to)")
  real = os.path.realpath(input_file)
  for name in (output_file, output_file + ".tmp"):
    if os.path.realpath(name) == real or (
        os.path.exists(name) and os.path.samefile(name, input_file)):
      what = "is" if name == output_file else f"is written as {name}, which is"
      raise PredictError(
          f"--output_file={output_file} {what} --input_file={input_file} "
          f"({real}): the predictions would replace the input; name another "
          "output file")


def read_rows(path, fmt="auto", columns=None, header=None, seen=None):
  """(line number, {column: value}) of each row of path, one at a time.

  UTF-8 (`classifier_data.text_lines`: a BOM dropped, as fine-tuning reads);
  a blank or whitespace-only line is no row. TSV values are strings, the
  columns --columns or the first line: `header` (TSV) says whether the
  first line names them; None: without --columns, or when it equals them.
  JSON lines: one object per line. Plain text: {"text": line}. `seen` (a
  dict) gets "blank" (`Lines`) and "header" (its line number, if any).
  """
  fmt = input_format(path, fmt)
  check_files(path)
  if header is not None and fmt != "tsv":
    raise PredictError(f"--{'' if header else 'no'}header: --input_file="
                       f"{path} is read as {fmt}, not TSV")
  if header is False and not columns:
    raise PredictError("--noheader: name the TSV's columns with --columns")
  seen = {} if seen is None else seen
  blank = seen.setdefault("blank", Lines(path))
  names = list(columns) if columns else None
  first = True
  try:
    for number, line in classifier_data.text_lines(path):
      if not line.strip():
        blank.add(number)
        continue
      if fmt == "text":
        yield number, {"text": line}
        continue
      if fmt == "jsonl":
        try:
          row = json.loads(line)
        except json.JSONDecodeError as e:
          row = e
        if not isinstance(row, dict):
          got = (f"{row.msg} at column {row.colno}" if isinstance(
              row, json.JSONDecodeError) else f"a JSON {type(row).__name__}")
          raise PredictError(
              f"{path}:{number}: not a JSON object ({got}): JSON lines hold "
              "one object per line (a pretty-printed .json spreads one over "
              "many; write each on one line, e.g. jq -c '.[]')")
        yield number, row
        continue
      fields = line.split("\t")
      if first and (header or header is None and (
          names is None or [f.strip().lower() for f in fields] == [
              n.lower() for n in names])):
        first, seen["header"] = False, number
        if names is None:
          names = fields
          if len(set(names)) != len(names):
            raise PredictError(f"{path}:{number}: the header names a column "
                               "twice")
        continue
      first = False
      if len(fields) != len(names):
        raise PredictError(
            f"{path}:{number}: {len(fields)} columns, the "
            f"{'--columns' if columns else 'header'} names {len(names)} "
            f"({', '.join(names)})")
      yield number, dict(zip(names, fields))
  except classifier_data.DataError as e:
    raise PredictError(str(e)) from None


class RowReader:
  """Turns rows into the model's inputs and gold labels, the gold looked
  for in each row (a JSON lines file may label some rows only)."""

  def __init__(self, predictor, path, input_columns=None, options_columns=None,
               label_column=None, same_columns=False):
    self.kind, self.path = predictor.kind, path
    self.inputs = tuple(predictor.inputs)
    self.scorer = predictor.task.scorer(predictor.record)
    self.columns = {name: name for name in self.inputs}
    mapped = {}
    for pair in input_columns or []:
      name, sep, column = pair.partition("=")
      if not sep or not name or not column:
        raise PredictError(f"--input_columns: {pair!r} is not NAME=COLUMN")
      mapped[name.strip()] = column.strip()
    unknown = sorted(set(mapped) - set(self.inputs))
    if unknown:
      raise PredictError(f"--input_columns: the {self.kind} model has no "
                         f"input {unknown[0]!r} (it takes "
                         f"{', '.join(self.inputs)})")
    self.columns.update(mapped)
    self.options_columns = list(options_columns or [])
    if self.options_columns and OPTIONS not in self.inputs:
      raise PredictError(f"--options_columns: the {self.kind} model takes no "
                         "options")
    self.label_column = label_column
    # A TSV's rows all have its columns: a --label_column it lacks is a typo.
    self.same_columns = same_columns
    read = set(self.columns.values()) | set(self.options_columns)
    self.gold_columns = [label_column] if label_column else [
        n for n in self.scorer.gold_columns if n not in read]

  def _missing(self, column, row, number, flag):
    return (f"{self.path}:{number}: no column {column!r} ({flag}; the row "
            f"has {', '.join(map(str, row)) or 'none'})")

  def __call__(self, number, row):
    """({input name: value}, gold or None) of one row."""
    values = {}
    for name in self.inputs:
      if name == OPTIONS and self.options_columns:
        for column in self.options_columns:
          if column not in row:
            raise PredictError(self._missing(column, row, number,
                                             "--options_columns"))
        values[name] = [row[c] for c in self.options_columns]
        continue
      column = self.columns[name]
      if column not in row:
        raise PredictError(
            f"{self.path}:{number}: no column {column!r} for the input "
            f"{name!r} (the {self.kind} model takes "
            f"{', '.join(self.inputs)}; the row has "
            f"{', '.join(map(str, row))}; --input_columns={name}=COLUMN "
            "maps another)")
      value = row[column]
      if name == OPTIONS and isinstance(value, str):
        try:
          value = json.loads(value)
        except json.JSONDecodeError:
          raise PredictError(f"{self.path}:{number}: column {column!r} is "
                             "not a JSON list of options "
                             "(--options_columns reads one column per "
                             "option)") from None
      if name == OPTIONS and not (isinstance(value, list) and value and all(
          isinstance(v, str) for v in value)):
        raise PredictError(f"{self.path}:{number}: {name} must be a list of "
                           f"strings, got {value!r}")
      if name != OPTIONS and not isinstance(value, str):
        raise PredictError(f"{self.path}:{number}: {name} must be a string, "
                           f"got {value!r}")
      values[name] = value
    if self.same_columns and self.label_column and (
        self.label_column not in row):
      raise PredictError(self._missing(self.label_column, row, number,
                                       "--label_column"))
    # No gold: no such column in this row, null, or a classifier's "".
    return values, next((v for v in map(row.get, self.gold_columns)
                         if v is not None and not (
                             self.scorer.blank_is_unlabelled and
                             isinstance(v, str) and not v.strip())), None)


def calibration_rows(path, text_column, text_b_column, max_examples,
                     read_line):
  """read_line(fields, text_column, text_b_column) of up to max_examples
  non-blank lines of a TSV (export_tflite's --representative_data). A
  column is an index (negative from the end) or a name in the first line,
  which is then the header; IndexError from read_line is a missing column."""
  text_column, text_b_column = (
      c if c is None or isinstance(c, int) else
      int(c) if str(c).strip().lstrip("-").isdigit() else str(c)
      for c in (text_column, text_b_column))
  named = [c for c in (text_column, text_b_column) if isinstance(c, str)]
  read = []
  with open(path, encoding="utf-8") as f:
    for line_number, line in enumerate(f, start=1):
      fields = line.rstrip("\r\n").split("\t")
      if not line.strip():
        continue
      if named:  # the first line is the header that names them
        missing = [c for c in named if c not in fields]
        if missing:
          raise ValueError(f"{path}:{line_number}: no column {missing[0]!r} "
                           f"in the header ({', '.join(fields)})")
        text_column, text_b_column = (
            fields.index(c) if isinstance(c, str) else c
            for c in (text_column, text_b_column))
        named = []
        continue
      try:
        read.append(read_line(fields, text_column, text_b_column))
      except IndexError:
        raise ValueError(f"{path}:{line_number}: no column {text_column}"
                         f"/{text_b_column}") from None
      if len(read) >= max_examples:
        break
  if not read:
    raise ValueError(f"--representative_data={path} has no lines")
  return read


# ------------------------------------------------------------------ writing
class RowWriter:
  """Rows to an open file, TSV (a header first, non-strings as JSON) or JSON
  lines."""

  def __init__(self, f, jsonl):
    self.f, self.jsonl, self.header = f, jsonl, None
    self.flattened = 0  # TSV rows whose text had a tab or a line break

  def note(self):
    """The line that says how many rows `cell` flattened, or ""."""
    return (f"{self.flattened} row(s) hold a tab or a line break in a text: "
            "written as spaces in this TSV output (a .jsonl --output_file "
            "keeps them)" if self.flattened else "")

  def write(self, row):
    if self.jsonl:
      self.f.write(json.dumps(row, ensure_ascii=False) + "\n")
      return
    if self.header is None:
      self.header = list(row)
      self.f.write("\t".join(self.header) + "\n")
    cells = [cell(row.get(k, "")) for k in self.header]
    self.flattened += any(isinstance(v, str) and c != v for v, c in zip(
        (row.get(k, "") for k in self.header), cells))
    self.f.write("\t".join(cells) + "\n")


def cell(value):
  """A TSV cell: a string flattened to one line, anything else as JSON."""
  if isinstance(value, str):
    return value.replace("\t", " ").replace("\n", " ").replace("\r", " ")
  return json.dumps(value, ensure_ascii=False)
