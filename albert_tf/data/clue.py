"""CLUE 1.1 and FewCLUE classification sets, read from their own files.

Both benchmarks write one JSON object per line (layouts from their READMEs
and baselines, CLUEbenchmark/CLUE and CLUEbenchmark/FewCLUE):

  task        text_a / text_b                            labels
  AFQMC       sentence1 / sentence2                      "0", "1"
  TNEWS       sentence (label_desc, keywords unread)     15 codes "100".."116"
  IFLYTEK     sentence (label_des unread)                119 codes "0".."118"
  CMNLI/OCNLI sentence1 / sentence2                      contradiction,
                                                         entailment, neutral
  CSL         keyword joined by " " / abst               "0", "1"
  CLUEWSC2020 text, its two target spans marked          "true", "false"
  EPRSTMT     sentence                                   Negative, Positive
  BUSTM       sentence1 / sentence2                      "0", "1"
  CSLDCP      content                                    67 disciplines

As CLUE's baseline (classifier_utils.py): CLUEWSC2020's text gets "_"
around span1 and "[" "]" around span2 ("这时候放在_床_上 ... 现在[它]突然响了");
a label written as a JSON number (102) is read as its string ("102").

The files of each task are `albert_tf.datasets.clue`'s specs; labels.json
beside them, where CLUE ships one, is compared with the task's labels.
Nothing is dropped silently (`JsonReader`): empty lines are counted; the
label "-" (no annotator consensus) is skipped in train and dev as CLUE's
baseline does, kept unlabelled in test; bad lines are a `DataError` naming
file:line. `unlabeled_texts` reads FewCLUE's unlabeled.json for
pretraining (`data_prep.fewclue_unlabeled`).
"""

import dataclasses
import json
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from absl import logging

from albert_tf.data import classifier_data as cd
from albert_tf.data import tsv_reader

DataError = cd.DataError

# CLUE's label lists, in the order of the baselines' get_labels() (the
# model's output columns).
TNEWS_LABELS = tuple(str(100 + i) for i in range(17) if i not in (5, 11))
IFLYTEK_LABELS = tuple(str(i) for i in range(119))
NLI_LABELS = ("contradiction", "entailment", "neutral")
BINARY_LABELS = ("0", "1")
WSC_LABELS = ("true", "false")
EPRSTMT_LABELS = ("Negative", "Positive")
# FewCLUE datasets/csldcp/labels_all.txt, in its order.
CSLDCP_LABELS = (
    "材料科学与工程", "作物学", "口腔医学", "药学", "教育学", "水利工程",
    "理论经济学", "食品科学与工程", "畜牧学/兽医学", "体育学", "核科学与技术",
    "力学", "园艺学", "水产", "法学", "地质学/地质资源与地质工程",
    "石油与天然气工程", "农林经济管理", "信息与通信工程", "图书馆、情报与档案管理",
    "政治学", "电气工程", "海洋科学", "民族学", "航空宇航科学与技术",
    "化学/化学工程与技术", "哲学", "公共卫生与预防医学", "艺术学", "农业工程",
    "船舶与海洋工程", "计算机科学与技术", "冶金工程", "交通运输工程",
    "动力工程及工程热物理", "纺织科学与工程", "建筑学", "环境科学与工程",
    "公共管理", "数学", "物理学", "林学/林业工程", "心理学", "历史学",
    "工商管理", "应用经济学", "中医学/中药学", "天文学", "机械工程", "土木工程",
    "光学工程", "地理学", "农业资源利用", "生物学/生物科学与工程",
    "兵器科学与技术", "矿业工程", "大气科学", "基础医学/临床医学",
    "电子科学与技术", "测绘科学与技术", "控制科学与工程", "军事学",
    "中国语言文学", "新闻传播学", "社会学", "地球物理学", "植物保护")

# CMNLI's and OCNLI's label when the annotators did not agree.
NO_CONSENSUS = "-"
FEWCLUE_SPLITS = ("0", "1", "2", "3", "4", "all")
_LABELLED_SPLITS = ("train", "dev")


# ------------------------------------------------------------ JSON lines
def json_lines(path: str) -> Iterator[Tuple[str, Optional[dict]]]:
  """Yields ("file:line", JSON object) for each line of a JSON-lines file
  (`tsv_reader.text_lines`), (where, None) for an empty line. Raises
  DataError (file:line) for a line that is not UTF-8, JSON, or an object."""
  for number, line in tsv_reader.text_lines(path):
    where = f"{path}:{number}"
    if not line.strip():
      yield where, None
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"{where}: not JSON ({e.msg} at column {e.colno}); "
                      "expected one JSON object per line") from None
    if not isinstance(value, dict):
      raise DataError(f"{where}: expected a JSON object, got "
                      f"{type(value).__name__}")
    yield where, value


def require_fields(obj: dict, fields: Sequence[str], where: str,
                   expected: str) -> None:
  """DataError "where: missing field(s) ... (expected)" unless obj has
  every one of `fields`."""
  missing = [k for k in fields if k not in obj]
  if missing:
    raise DataError(f"{where}: missing field(s) "
                    f"{', '.join(map(repr, missing))} ({expected})")


def string_field(obj: dict, key: str, where: str) -> str:
  value = obj[key]
  if not isinstance(value, str):
    raise DataError(f"{where}: {key!r} is {type(value).__name__} (expected "
                    "a string)")
  return value


def _show_labels(labels: Sequence[str]) -> str:
  shown = ", ".join(map(repr, labels[:12]))
  return f"[{shown}{', ...' if len(labels) > 12 else ''}] ({len(labels)})"


# ----------------------------------------------------------------- texts
# Each layout: (fields it reads, texts(obj, where) -> (text_a, text_b),
# whether it reads pairs).
def single(field: str):
  return (field,), lambda obj, where: (
      string_field(obj, field, where), None), False


def pair(first: str, second: str):
  return (first, second), lambda obj, where: (
      string_field(obj, first, where), string_field(obj, second, where)), True


def _csl_texts(obj, where):
  keywords = obj["keyword"]
  if not isinstance(keywords, list) or not all(
      isinstance(k, str) for k in keywords):
    raise DataError(f"{where}: 'keyword' is not a list of strings")
  return " ".join(keywords), string_field(obj, "abst", where)


CSL = (("abst", "keyword"), _csl_texts, True)


def mark_wsc(text: str, target, where: str = "") -> str:
  """CLUEWSC2020's text with span1 (the noun) between "_" and span2 (the
  pronoun) between "[" and "]", as CLUE's baseline (WSCProcessor) marks
  them. Raises DataError when a span is not at its index."""
  if not isinstance(target, dict):
    raise DataError(f"{where}: 'target' is {type(target).__name__} "
                    "(expected an object with span1_text, span1_index, "
                    "span2_text, span2_index)")
  spans = []
  for n, (before, after) in ((1, ("_", "_")), (2, ("[", "]"))):
    span, index = target.get(f"span{n}_text"), target.get(f"span{n}_index")
    if not isinstance(span, str) or not span or isinstance(
        index, bool) or not isinstance(index, int):
      raise DataError(f"{where}: target needs span{n}_text (a string) and "
                      f"span{n}_index (an integer), got {span!r} and "
                      f"{index!r}")
    found = text[index:index + len(span)] if index >= 0 else ""
    if found != span:
      raise DataError(f"{where}: target span{n}_text {span!r} is not at "
                      f"span{n}_index {index} of the text (found {found!r})")
    spans.append((index, index + len(span), before, after))
  spans.sort()
  if spans[0][1] > spans[1][0]:
    raise DataError(f"{where}: the target spans overlap ({spans[0][:2]} and "
                    f"{spans[1][:2]})")
  for start, end, before, after in reversed(spans):
    text = text[:start] + before + text[start:end] + after + text[end:]
  return text


WSC = (("text", "target"), lambda obj, where: (
    mark_wsc(string_field(obj, "text", where), obj["target"], where), None),
       False)


# ---------------------------------------------------------------- reader
def _label(obj: dict, where: str) -> Optional[str]:
  if "label" not in obj:
    return None
  value = obj["label"]
  if isinstance(value, bool) or not isinstance(value, (str, int)):
    raise DataError(f"{where}: 'label' is {type(value).__name__} (expected "
                    "a string or an integer)")
  return str(value).strip()


def check_label_file(path: str, spec: cd.TaskSpec) -> None:
  """labels.json beside `path` (CLUE ships one with TNEWS and IFLYTEK):
  a warning when its labels are not the task's."""
  label_file = os.path.join(os.path.dirname(path), "labels.json")
  if spec.label_list is None or not os.path.isfile(label_file):
    return
  listed = []
  for where, obj in json_lines(label_file):
    if obj is not None:
      if "label" not in obj:
        raise DataError(f"{where}: missing field 'label'")
      listed.append(_label(obj, where))
  unknown = [x for x in listed if x not in spec.label_list]
  unlisted = [x for x in spec.label_list if x not in listed]
  if unknown or unlisted:
    logging.warning(
        "%s lists %d labels; task %s has %d%s%s (an example with a label "
        "outside the task's list is refused)", label_file, len(listed),
        spec.name, len(spec.label_list),
        f"; not the task's: {_show_labels(unknown)}" if unknown else "",
        f"; not listed: {_show_labels(unlisted)}" if unlisted else "")


@dataclasses.dataclass(frozen=True)
class JsonReader:
  """A `classifier_data.TaskSpec.reader` for one JSON-lines layout.

  fields: the text fields every line must have; texts(obj, where) ->
  (text_a, text_b or None); no_consensus: a label that means "no gold
  label" (skipped, counted and named). An example's "id" (else its 0-based
  place among the JSON lines, as CLUE's baseline) names its submission
  line (`check_submission_ids`).
  """
  fields: Tuple[str, ...]
  texts: Callable
  no_consensus: Optional[str] = None

  def __call__(self, path: str, spec: cd.TaskSpec, split: str,
               max_examples: Optional[int] = None):
    """(examples, stats); stats as classifier_data.read_tsv_examples' plus
    `no_consensus_skipped`, `no_consensus_kept` (test), `no_consensus_at`
    (the first three) and `not_read` (JSON lines after max_examples)."""
    check_label_file(path, spec)
    stats = {"file": path, "lines": 0, "examples": 0,
             "empty_lines_skipped": 0, "header_lines": 0, "not_read": 0}
    examples: List[cd.InputExample] = []
    skipped, kept, empty_text = [], [], []  # places: "file:line"
    given_ids: Dict[str, List[str]] = {}
    placed: List[Tuple[str, int]] = []  # lines named by their place
    records = 0
    lines = json_lines(path)
    for where, obj in lines:
      stats["lines"] += 1
      if obj is None:
        stats["empty_lines_skipped"] += 1
        continue
      index, records = records, records + 1
      require_fields(obj, self.fields, where, f"task {spec.name} reads "
                     f"{', '.join(self.fields)} and label")
      label = _label(obj, where)
      if label is None and split in _LABELLED_SPLITS:
        raise DataError(f"{where}: no 'label' (every line of the {split} "
                        "split needs one; only test files may leave it out)")
      if label is not None and label == self.no_consensus:
        if split in _LABELLED_SPLITS:
          skipped.append(where)
          continue
        # A test line: predicted like any other (a submission holds every
        # test id), not scored.
        kept.append(where)
        label = None
      if label is not None and label not in spec.label_list:
        raise DataError(f"{where}: unknown label {label!r}; task {spec.name} "
                        f"labels are {_show_labels(spec.label_list)}")
      text_a, text_b = self.texts(obj, where)
      if tsv_reader.skip_blank(where, text_a, text_b, split, empty_text):
        continue
      if "id" in obj:
        given_ids.setdefault(str(obj["id"]), []).append(where)
      else:
        placed.append((where, index))
      examples.append(cd.InputExample(
          guid=f"{split}-{len(examples)}", text_a=text_a, text_b=text_b,
          label=label, source=where, id=obj.get("id", index)))
      if max_examples and len(examples) >= max_examples:
        # The lines after it are counted, not read: a partial prediction
        # says it is one.
        stats["not_read"] = sum(
            1 for number, raw in tsv_reader.raw_lines(path, note=False)
            if number > stats["lines"] and raw.strip())
        break
    stats["examples"] = len(examples)
    tsv_reader.count_empty_text(path, split, stats, empty_text)
    if spec.submission is not None and spec.submission.split == split:
      check_submission_ids(path, given_ids, placed)
    if self.no_consensus is not None:
      stats["no_consensus_skipped"] = len(skipped)
      stats["no_consensus_at"] = (skipped or kept)[:3]
      stats["no_consensus_kept"] = len(kept)
    if skipped:
      logging.warning(
          "%s: %d line(s) skipped: label %r (no consensus among the "
          "annotators; CLUE's baseline skips them too), at %s", path,
          len(skipped), self.no_consensus, tsv_reader.first_places(skipped))
    if kept:
      logging.warning(
          "%s: %d line(s) with label %r (no consensus among the annotators) "
          "kept unlabelled: predicted, as the submission needs every test "
          "id, and left out of the test metrics (at %s)", path, len(kept),
          self.no_consensus, tsv_reader.first_places(kept))
    return examples, stats


def check_submission_ids(path: str, given: Dict[str, List[str]],
                         placed: Sequence[Tuple[str, int]]) -> None:
  """`given`: each "id" in the file, as text, with its lines; `placed`:
  the lines without one, with their 0-based place. Raises DataError for an
  id on two lines, or a place that is another line's id (the submission
  would hold two lines of one id); lines without an id among lines with
  one are a warning."""
  twice = {i: w for i, w in given.items() if len(w) > 1}
  if twice:
    shown = "; ".join(f"{i!r} at {tsv_reader.first_places(w)}" for i, w in
                      list(twice.items())[:3])
    more = f"; and {len(twice) - 3} more" if len(twice) > 3 else ""
    raise DataError(
        f"{path}: {len(twice)} id(s) on more than one line ({shown}{more}): "
        "the submission names each prediction by its line's id, so two "
        "would share one; give each line its own \"id\"")
  clash = [(w, i) for w, i in placed if str(i) in given]
  if clash:
    shown = tsv_reader.first_places(
        [f"{w} (named {i}, as {given[str(i)][0]} is)" for w, i in clash])
    raise DataError(
        f"{path}: {len(clash)} line(s) without an \"id\" take their 0-based "
        f"place as their id, which another line gives as its own ({shown}"
        "): the submission would hold two lines of one id; give every line "
        "an \"id\"")
  if placed and given:
    logging.warning(
        "%s: %d of %d lines have no \"id\": named by their 0-based place "
        "among the JSON lines, as CLUE's baseline numbers them (%s)", path,
        len(placed), len(placed) + sum(map(len, given.values())),
        tsv_reader.first_places([f"{w} as {i}" for w, i in placed]))


# -------------------------------------------------------------- FewCLUE
# name: (layout, labels, no-consensus label, FewCLUE's directory under
# datasets/). The names are FewCLUE's submission names and stems (tnewsf:
# FewCLUE's TNEWS, beside CLUE's tnews).
FEWCLUE_TASKS = {
    "eprstmt": (single("sentence"), EPRSTMT_LABELS, None, "eprstmt"),
    "bustm": (pair("sentence1", "sentence2"), BINARY_LABELS, None, "bustm"),
    "csldcp": (single("content"), CSLDCP_LABELS, None, "csldcp"),
    "tnewsf": (single("sentence"), TNEWS_LABELS, None, "tnews"),
    "iflytekf": (single("sentence"), IFLYTEK_LABELS, None, "iflytek"),
    "ocnlif": (pair("sentence1", "sentence2"), NLI_LABELS, NO_CONSENSUS,
               "ocnli"),
    "cslf": (CSL, BINARY_LABELS, None, "csl"),
    "cluewscf": (WSC, WSC_LABELS, None, "cluewsc"),
}


def fewclue_dataset_name(task: str, split: str) -> str:
  """eprstmt (split all: train_few_all) or eprstmt_0 .. eprstmt_4."""
  return task if split == "all" else f"{task}_{split}"


# ------------------------------------------------------ unlabeled text
# The text fields of FewCLUE's unlabeled.json files, by directory under
# datasets/ (CHID's texts have #idiom# holes and CLUEWSC has none: left out).
UNLABELED_FIELDS = {
    "eprstmt": ("sentence",),
    "bustm": ("sentence1", "sentence2"),
    "csldcp": ("content",),
    "tnews": ("sentence",),
    "iflytek": ("sentence",),
    "ocnli": ("sentence1", "sentence2"),
    "csl": ("abst",),
}
UNLABELED_FILE = "unlabeled.json"


def unlabeled_texts(path: str, fields: Sequence[str]
                    ) -> Iterator[Tuple[str, List[str]]]:
  """Yields ("file:line", [text of each field, empty ones left out]) for
  each JSON line of a FewCLUE unlabeled.json; empty lines are skipped.
  Raises DataError (file:line) for a line without the fields or not JSON."""
  for where, obj in json_lines(path):
    if obj is None:
      continue
    require_fields(obj, fields, where, f"reading {', '.join(fields)}")
    texts = [string_field(obj, k, where).strip() for k in fields]
    yield where, [t for t in texts if t]
