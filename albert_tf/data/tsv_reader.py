"""Reading a TSV task file: its lines, header, columns and labels, checked.

`read_tsv_examples` reads one split of a `classifier_data.TaskSpec` (see
that module for what is counted, warned about and refused); the line
readers (`raw_lines`, `text_lines`) and the noise accounting
(`skip_blank`, `count_empty_text`, `first_places`) serve the JSON-lines
readers (`clue`) too.
"""

import collections
import dataclasses
import math
import re
from typing import Any, Optional

from absl import logging


class DataError(ValueError):
  """Bad task input; the message names the file and line."""


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


# A label that is a plain decimal number (not float()'s "nan", "inf", "1_0").
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def label_number(label):
  """The finite value of a label written as a decimal number, else None."""
  if label is None or not _NUMBER.fullmatch(label):
    return None
  value = float(label)
  return value if math.isfinite(value) else None


def same_numbers(labels):
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


def first_places(places, limit=3):
  """The first `limit` places, and how many more."""
  more = len(places) - limit
  return ", ".join(places[:limit]) + (f", and {more} more" if more > 0 else "")


def skip_blank(where, text_a, text_b, split, places):
  """Notes a row whose text_a or text_b (None: not read) is empty or only
  whitespace in `places` ("file:line text_a"); True when `split` skips it:
  train does (such a row teaches only its label's frequency), dev and test
  keep every row, all scored and predicted."""
  blank = [name for name, text in (("text_a", text_a), ("text_b", text_b))
           if text is not None and not text.strip()]
  if blank:
    places.append(f"{where} {' and '.join(blank)}")
  return bool(blank) and split == "train"


def count_empty_text(path, split, stats, places, warn=True):
  """Stats `empty_text`, `empty_text_skipped`, `empty_text_at` of a split's
  rows without text (`skip_blank`'s places), and one warning."""
  skipped = split == "train"
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
        "GLUE and CLUE evaluations do", first_places(places))


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


def read_tsv_examples(path, spec, split, max_examples=None,
                      check_labels=True):
  """Reads `path` with the columns `spec` gives for `split`; see read_examples.

  check_labels=False reads labels as they are (to find a task's label set),
  and warns of nothing. stats also has `count_empty_text`'s keys and
  `labels_respelled` (a number spelled otherwise than its class, read as
  it).
  """
  text_a_col, text_b_col, label_col = spec.columns[split]
  has_header = spec.header_for(split)
  stats = {"file": path, "lines": 0, "examples": 0, "empty_lines_skipped": 0,
           "header_lines": 0}
  examples = []
  empty_text, respelled = [], []
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
  elif cols is not None:  # the smaller on a tie: an extra tab adds a field
    counts = collections.Counter(raw.count(b"\t") + 1 for _, raw in
                                 raw_lines(path, note=False) if raw.strip())
    width = min(counts, key=lambda w: (-counts[w], w)) if counts else None
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
      for column in (text_a_col, text_b_col, label_col):
        # Ambiguous: pandas reads the first, csv.DictReader the last.
        if isinstance(column, str) and fields.count(column) > 1:
          first = fields.index(column)
          raise DataError(
              f"{path}:1: header names column {column!r} twice, at columns "
              f"{first} and {fields.index(column, first + 1)} (0-based); "
              "rename one")
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
    if skip_blank(where, text_a, text_b, split, empty_text):
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
        first_places(respelled))
  return examples, stats
