"""RACE multiple-choice reading comprehension: read and score.

    data = read_race("data/RACE", split="dev")
    scores = accuracy_by_level(data.examples, predicted)  # predicted: [n]

`read_race` reads RACE's tree (`RACE/{train,dev,test}/{middle,high}/*.txt`,
one JSON article {"article", "questions", "options", "answers", "id"} per
file) from any of its levels, or the original run_race's merged `all.txt`
(one article per line; beside article files it is skipped with a warning).
Files are read sorted, middle before high, as the original. An article
without "answers" is unlabelled; one without "id" is named after its file
(and line). The level is the level directory's, else the id's or the file
name's prefix ("high123.txt"), else "".

Each question becomes four sequences `[CLS] article [SEP] qa [SEP]`,
packed by the family's one encoder, `albert_tf.serving.choice_graph`.
"""

import collections
import dataclasses
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging

from albert_tf.data.tsv_reader import first_places

# run_race's --task_name values.
TASK_NAMES = ("race",)

SPLITS = ("train", "dev", "test")
LEVELS = ("middle", "high")          # the original's reading order
LETTERS = "ABCD"
NUM_CHOICES = 4
MERGED_FILE = "all.txt"
LAYOUTS = ("the RACE root with split= (RACE/{train,dev,test}/), the "
           "directory holding RACE/, a split directory (middle/, high/), a "
           "level directory of *.txt articles, or a merged all.txt (one JSON "
           "article per line)")
_KEYS = "article, questions, options, answers and id"


class RaceError(ValueError):
  """Bad RACE data or arguments; the message names the file and place."""


@dataclasses.dataclass
class Question:
  id: str                    # article id + "-" + question index
  level: str                 # "middle", "high", or "" when unknown
  article: str
  question: str
  options: List[str]         # 4 options, in the order of labels A-D
  label: Optional[int]       # 0-3, None when the file has no answers


@dataclasses.dataclass
class RaceData:
  examples: List[Question]
  counts: Dict[str, int]     # files, articles, questions, middle, high,
                             # no_level, unlabelled (the last four: questions)
  source: str                # the directory or file read


# ------------------------------------------------------------------ reading
def _level_of(name: str) -> str:
  return next((level for level in LEVELS if name.startswith(level)), "")


def _resolve(path: str, split: Optional[str]) -> Tuple[str, List[Tuple]]:
  """(directory or file read, [(file, level of its directory)])."""
  if split is not None and split not in SPLITS:
    raise RaceError(f"{path}: split must be one of {', '.join(SPLITS)}, got "
                    f"{split!r}")
  if os.path.isfile(path):
    return path, [(path, _level_dir(os.path.dirname(path)))]
  if not os.path.isdir(path):
    raise RaceError(f"{path}: no such file or directory (expected {LAYOUTS})")
  if not _has_dirs(path, SPLITS + LEVELS) and _has_dirs(
      os.path.join(path, "RACE"), SPLITS):
    path = os.path.join(path, "RACE")
  if _has_dirs(path, SPLITS):
    if split is None:
      raise RaceError(f"{path}: is a RACE root ({', '.join(SPLITS)}); pass "
                      "split= to pick one")
    path = os.path.join(path, split)
    if not os.path.isdir(path):
      raise RaceError(f"{path}: no such directory (the RACE root has no "
                      f"{split} split)")
  elif split is not None and os.path.basename(
      os.path.normpath(path)) in set(SPLITS) - {split}:
    raise RaceError(f"{path}: is not the {split} split (split={split!r})")
  levels = [lv for lv in LEVELS if os.path.isdir(os.path.join(path, lv))]
  files = []
  for directory in [os.path.join(path, lv) for lv in levels] or [path]:
    txt = sorted(n for n in os.listdir(directory) if n.endswith(".txt"))
    names = [n for n in txt if os.path.isfile(os.path.join(directory, n))]
    others = [n for n in txt if n not in names]
    if others:  # a FIFO or a device would block or never end: not opened
      logging.warning("%s: %d .txt entr%s skipped, not regular files (%s)",
                      directory, len(others),
                      "y" if len(others) == 1 else "ies", ", ".join(others[:3]))
    if MERGED_FILE in names and len(names) > 1:
      names.remove(MERGED_FILE)
      logging.warning("%s: %s skipped: the directory also has %d article "
                      "files (%s), which are read instead", directory,
                      MERGED_FILE, len(names), ", ".join(names[:3]))
    files.extend((os.path.join(directory, n), _level_dir(directory))
                 for n in names)
  if not files:
    raise RaceError(f"{path}: no .txt files found (expected {LAYOUTS})")
  return path, files


def _has_dirs(directory: str, names: Sequence[str]) -> bool:
  return any(os.path.isdir(os.path.join(directory, n)) for n in names)


def _level_dir(directory: str) -> str:
  name = os.path.basename(os.path.normpath(directory))
  return name if name in LEVELS else ""


def _articles(path: str):
  """Yields (line or None, JSON value): one article file, or JSON lines."""
  try:
    with open(path, encoding="utf-8-sig") as f:
      text = f.read()
  except UnicodeDecodeError as e:
    raise RaceError(f"{path}: not UTF-8 text ({e})") from None
  try:
    yield None, json.loads(text)
    return
  except json.JSONDecodeError as e:
    lines = [(i, line) for i, line in enumerate(text.splitlines(), 1)
             if line.strip()]
    if len(lines) < 2:
      raise RaceError(f"{path}: not JSON ({e}); expected one JSON article "
                      f"with keys {_KEYS}") from None
  for number, line in lines:
    try:
      yield number, json.loads(line)
    except json.JSONDecodeError as e:
      raise RaceError(f"{path}:{number}: not JSON ({e}); expected one JSON "
                      f"article per line with keys {_KEYS}") from None


def _questions(where: str, data, default_id: str, levels: Sequence[str]
               ) -> List[Question]:
  """The questions of one parsed article, checked.

  `levels`: the level of the file's directory and of its name; the first
  known one of (directory, article id, file name) is the questions' level.
  """
  if not isinstance(data, dict):
    raise RaceError(f"{where}: expected a JSON object with keys {_KEYS}, got "
                    f"{type(data).__name__}")
  missing = [k for k in ("article", "questions", "options") if k not in data]
  if missing:
    raise RaceError(f"{where}: missing key(s) "
                    f"{', '.join(repr(k) for k in missing)} (expected "
                    f"{_KEYS}; answers and id may be left out)")
  article, questions, options = (data["article"], data["questions"],
                                 data["options"])
  answers = data.get("answers")
  if not isinstance(article, str):
    raise RaceError(f"{where}: 'article' is {type(article).__name__} "
                    "(expected a string)")
  for key, value in (("questions", questions), ("options", options),
                     ("answers", answers)):
    if not isinstance(value, list) and (key != "answers" or
                                        value is not None):
      raise RaceError(f"{where}: {key!r} is {type(value).__name__} (expected "
                      "a list with one entry per question)")
  if len(options) != len(questions) or (
      answers is not None and len(answers) != len(questions)):
    got = "none" if answers is None else len(answers)
    raise RaceError(f"{where}: {len(questions)} questions, {len(options)} "
                    f"option lists and {got} answers (expected one of each "
                    "per question)")
  article_id = str(data.get("id") or default_id)
  level = levels[0] or _level_of(article_id) or levels[1]
  out = []
  for i, question in enumerate(questions):
    choices = options[i]
    if not isinstance(question, str):
      raise RaceError(f"{where}: question {i}: is {type(question).__name__} "
                      "(expected a string)")
    if (not isinstance(choices, list) or len(choices) != NUM_CHOICES or
        not all(isinstance(c, str) for c in choices)):
      got = (f"{len(choices)} options" if isinstance(choices, list) else
             f"options of type {type(choices).__name__}")
      raise RaceError(f"{where}: question {i}: {got} (expected "
                      f"{NUM_CHOICES} strings)")
    label = None
    if answers is not None:
      if answers[i] not in tuple(LETTERS):
        raise RaceError(f"{where}: question {i}: answer {answers[i]!r} "
                        f"(expected one of {', '.join(LETTERS)})")
      label = LETTERS.index(answers[i])
    out.append(Question(f"{article_id}-{i}", level, article, question,
                        list(choices), label))
  return out


def read_race(path: str, split: Optional[str] = None) -> RaceData:
  """RACE questions from any of the layouts in `LAYOUTS`; `split` (train,
  dev, test) is needed when `path` is the RACE root. Articles without
  questions and repeated question ids are kept, named in one warning each.
  Raises RaceError naming the file (line, question) and what was expected.
  """
  source, files = _resolve(path, split)
  examples, empty = [], []
  articles = 0
  for file, level in files:
    base = os.path.basename(file)
    for line, data in _articles(file):
      where = file if line is None else f"{file}:{line}"
      default_id = base if line is None else f"{base}:{line}"
      questions = _questions(where, data, default_id,
                             (level, _level_of(base)))
      articles += 1
      if not questions:
        empty.append(where)
      examples.extend(questions)
  if empty:
    logging.warning("%d articles have no questions (%s)", len(empty),
                    first_places(empty))
  seen = collections.Counter(q.id for q in examples)
  repeated = [i for i, c in seen.items() if c > 1]
  if repeated:
    logging.warning("%d question ids occur more than once (the same "
                    "article read twice?) (%s)", len(repeated),
                    first_places(repeated))
  counts = {"files": len(files), "articles": articles,
            "questions": len(examples)}
  for level in LEVELS:
    counts[level] = sum(q.level == level for q in examples)
  counts["no_level"] = sum(not q.level for q in examples)
  counts["unlabelled"] = sum(q.label is None for q in examples)
  logging.info("RACE %s: %s", source, counts)
  return RaceData(examples, counts, source)


# ------------------------------------------------------------------ scoring
def accuracy_by_level(examples: Sequence[Question],
                      predicted: Sequence[int]) -> Dict[str, float]:
  """{"accuracy", "accuracy_middle", "accuracy_high", "num_middle",
  "num_high"}: fractions in [0, 1] and counts, as RACE results are given; a
  level without questions has neither key, questions of no level count only
  in "accuracy". Raises ValueError unless one answer per question (and
  some), RaceError for an unlabelled question.
  """
  if len(predicted) != len(examples):
    raise ValueError(f"{len(predicted)} predictions for {len(examples)} "
                     "questions (expected one per question)")
  if not examples:
    raise ValueError("no questions to score")
  unlabelled = [q.id for q in examples if q.label is None]
  if unlabelled:
    raise RaceError(f"question {unlabelled[0]}: no answer to score against "
                    f"({len(unlabelled)} unlabelled questions; accuracy "
                    "needs labelled data)")
  total, correct = collections.Counter(), collections.Counter()
  for question, guess in zip(examples, predicted):
    total[question.level] += 1
    correct[question.level] += int(guess) == question.label
  result = {"accuracy": sum(correct.values()) / len(examples)}
  present = [lv for lv in LEVELS if total[lv]]
  for level in present:
    result[f"accuracy_{level}"] = correct[level] / total[level]
  for level in present:
    result[f"num_{level}"] = total[level]
  return result


# ------------------------------------------------------------------ datasets
@dataclasses.dataclass(frozen=True)
class ChoiceSpec:
  """A multiple-choice dataset as the multiple_choice family reads it: a
  registered dataset's `spec` (`albert_tf.data.clue_choice` has CLUE's C3
  and CHID; `RACE` is the family's default).

  read(data_dir, split) -> RaceData (Questions: id, level, article,
    question, options, label).
  encode: None for RACE's packing (`choice_graph.encode_questions`, which
    serve_text runs too), else (examples, tokenizer, max_seq_length,
    max_qa_length) -> (features [n, num_choices, L], counts), as that.
  pad_choices: a question may have fewer options, whose rows are all zero
    (masked out by the model).
  choice_names: how predictions and the record name each choice position.
  submission_file / write_submission(path, examples, predicted indices):
    the benchmark's prediction file written beside the predictions.
  """
  name: str
  read: Callable
  encode: Optional[Callable] = None
  num_choices: int = NUM_CHOICES
  pad_choices: bool = False
  choice_names: Tuple[str, ...] = tuple(LETTERS)
  submission_file: Optional[str] = None
  write_submission: Optional[Callable] = None


RACE = ChoiceSpec("race", read_race)
