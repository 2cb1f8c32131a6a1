"""RACE reading and per-level accuracy (data/race.py); its encoding is
tested with the graph that does it, in test_choice_graph."""

import json
import logging
import os

import numpy as np
import pytest

from albert_tf.data import race
from albert_tf.data.race import Question, RaceError

MIDDLE = {"article": "a b c", "questions": ["x ?"],
          "options": [["p", "q", "r", "s"]], "answers": ["B"],
          "id": "middle1.txt"}
HIGH = {"article": "d e f g h", "questions": ["i _ j .", "k"],
        "options": [["u v", "w", "y", "z"], ["t", "u", "v", "w"]],
        "answers": ["A", "D"], "id": "high2.txt"}


def _write(path, value):
  path.parent.mkdir(parents=True, exist_ok=True)
  text = value if isinstance(value, str) else json.dumps(value)
  path.write_text(text, encoding="utf-8")
  return path


def _tree(root, middle=MIDDLE, high=HIGH):
  _write(root / "RACE" / "train" / "middle" / "1.txt", middle)
  _write(root / "RACE" / "train" / "high" / "2.txt", high)
  return root / "RACE"


def _merged(path, *articles):
  return _write(path, "\n".join(json.dumps(a) for a in articles) + "\n")


def _summary(data):
  return [(q.id, q.level, q.label) for q in data.examples]


EXPECTED = [("middle1.txt-0", "middle", 1), ("high2.txt-0", "high", 0),
            ("high2.txt-1", "high", 3)]


def test_layouts_give_the_same_questions(tmp_path):
  root = _tree(tmp_path / "tree")
  data = race.read_race(str(root), split="train")
  assert _summary(data) == EXPECTED
  assert data.examples[1] == Question(
      "high2.txt-0", "high", "d e f g h", "i _ j .", ["u v", "w", "y", "z"], 0)
  assert data.counts == {"files": 2, "articles": 2, "questions": 3,
                         "middle": 1, "high": 2, "no_level": 0,
                         "unlabelled": 0}
  assert data.source == str(root / "train")
  merged = race.read_race(str(_merged(tmp_path / "m" / "all.txt", MIDDLE,
                                      HIGH)))
  assert merged.examples == data.examples
  assert merged.counts["files"] == 1 and merged.counts["articles"] == 2
  # The original's layout: RACE/train/{middle,high}/all.txt.
  orig = tmp_path / "orig" / "RACE"
  _merged(orig / "train" / "middle" / "all.txt", MIDDLE)
  _merged(orig / "train" / "high" / "all.txt", HIGH)
  assert race.read_race(str(orig), "train").examples == data.examples
  # The directory holding RACE/, the split directory, a level directory.
  assert race.read_race(str(tmp_path / "tree"), "train").examples == \
      data.examples
  assert race.read_race(str(root / "train")).examples == data.examples
  assert _summary(race.read_race(str(root / "train" / "high"))) == \
      EXPECTED[1:]


def test_all_txt_beside_articles_is_skipped_with_a_warning(tmp_path, caplog):
  root = _tree(tmp_path)
  _merged(root / "train" / "high" / "all.txt", HIGH)
  with caplog.at_level(logging.WARNING):
    data = race.read_race(str(root / "train"))
  assert _summary(data) == EXPECTED
  warned = [r.getMessage() for r in caplog.records if "skipped" in
            r.getMessage()]
  assert warned == [f"{root / 'train' / 'high'}: all.txt skipped: the "
                    "directory also has 1 article files (2.txt), which are "
                    "read instead"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_beside_articles_is_skipped_with_a_warning(tmp_path, caplog):
  root = _tree(tmp_path)
  fifo = root / "train" / "high" / "3.txt"
  os.mkfifo(fifo)  # no writer: opening it would block for ever
  (root / "train" / "high" / "4.txt").mkdir()
  with caplog.at_level(logging.WARNING):
    data = race.read_race(str(root / "train"))
  assert _summary(data) == EXPECTED
  warned = [r.getMessage() for r in caplog.records if "skipped" in
            r.getMessage()]
  assert warned == [f"{root / 'train' / 'high'}: 2 .txt entries skipped, "
                    "not regular files (3.txt, 4.txt)"]


def test_ids_levels_and_order_without_id_or_answers(tmp_path):
  unlabelled = {k: v for k, v in HIGH.items() if k not in ("id", "answers")}
  # No id: named after the file; the level comes from the file name.
  data = race.read_race(str(_write(tmp_path / "a" / "high123.txt",
                                   unlabelled)))
  assert _summary(data) == [("high123.txt-0", "high", None),
                            ("high123.txt-1", "high", None)]
  assert data.counts["unlabelled"] == 2
  data = race.read_race(str(_merged(tmp_path / "b" / "all.txt", MIDDLE,
                                    unlabelled)))
  assert _summary(data) == [("middle1.txt-0", "middle", 1),
                            ("all.txt:2-0", "", None),
                            ("all.txt:2-1", "", None)]
  assert data.counts["no_level"] == 2
  # Sorted file order ("10" before "9"), whatever the directory lists.
  for name in ("9.txt", "10.txt", "notes.md"):
    _write(tmp_path / "c" / name, dict(MIDDLE, id=name))
  assert [q.id for q in race.read_race(str(tmp_path / "c")).examples] == [
      "10.txt-0", "9.txt-0"]


def test_noise_is_read_and_warned(tmp_path, caplog):
  empty = dict(MIDDLE, questions=[], options=[], answers=[], id="e1.txt")
  path = _merged(tmp_path / "all.txt", empty, MIDDLE, MIDDLE)
  with caplog.at_level(logging.WARNING):
    data = race.read_race(str(path))
  assert [q.id for q in data.examples] == ["middle1.txt-0"] * 2
  assert data.counts["articles"] == 3
  messages = [r.getMessage() for r in caplog.records]
  assert f"1 articles have no questions ({path}:1)" in messages
  assert ("1 question ids occur more than once (the same article read "
          "twice?) (middle1.txt-0)") in messages


def _bad(tmp_path, name, value, match, **kwargs):
  path = _write(tmp_path / "bad" / name, value)
  with pytest.raises(RaceError, match=match):
    race.read_race(str(path), **kwargs)


def test_bad_input_messages(tmp_path):
  _bad(tmp_path, "1.txt", "{not json", r"1\.txt: not JSON \(.*\); expected "
       r"one JSON article with keys article, questions, options, answers "
       r"and id$")
  _bad(tmp_path, "all.txt", json.dumps(MIDDLE) + "\n{oops\n",
       r"all\.txt:2: not JSON \(.*\); expected one JSON article per line")
  _bad(tmp_path, "1.txt", "[1, 2]", r"1\.txt: expected a JSON object with "
       r"keys article, .* got list")
  _bad(tmp_path, "1.txt", {"article": "a", "questions": []},
       r"1\.txt: missing key\(s\) 'options' \(expected article, questions, "
       r"options, answers and id; answers and id may be left out\)")
  _bad(tmp_path, "2.txt", dict(HIGH, options=[["a"] * 4, ["a"] * 3]),
       r"2\.txt: question 1: 3 options \(expected 4 strings\)")
  _bad(tmp_path, "2.txt", dict(HIGH, answers=["A", "E"]),
       r"2\.txt: question 1: answer 'E' \(expected one of A, B, C, D\)")
  _bad(tmp_path, "2.txt", dict(HIGH, answers=["b", "A"]),
       r"2\.txt: question 0: answer 'b' \(expected one of A, B, C, D\)")
  _bad(tmp_path, "2.txt", dict(HIGH, answers=["A"]),
       r"2\.txt: 2 questions, 2 option lists and 1 answers \(expected one of "
       r"each per question\)")
  _bad(tmp_path, "all.txt", json.dumps(MIDDLE) + "\n" + json.dumps(
      dict(HIGH, options=[["a"] * 4])) + "\n",
       r"all\.txt:2: 2 questions, 1 option lists and 2 answers")
  _bad(tmp_path, "2.txt", dict(HIGH, article=["a"]),
       r"2\.txt: 'article' is list \(expected a string\)")
  _bad(tmp_path, "2.txt", dict(HIGH, questions=None),
       r"2\.txt: 'questions' is NoneType \(expected a list with one entry "
       r"per question\)")


def test_bad_paths(tmp_path):
  (tmp_path / "empty").mkdir()
  with pytest.raises(RaceError, match=r"empty: no \.txt files found \(expected"
                     r" the RACE root with split= .* or a merged all\.txt"):
    race.read_race(str(tmp_path / "empty"))
  with pytest.raises(RaceError, match=r"nowhere: no such file or directory"):
    race.read_race(str(tmp_path / "nowhere"))
  root = _tree(tmp_path / "t")
  with pytest.raises(RaceError, match=r"RACE: is a RACE root \(train, dev, "
                     r"test\); pass split= to pick one"):
    race.read_race(str(root))
  with pytest.raises(RaceError, match=r"split must be one of train, dev, "
                     r"test, got 'valid'"):
    race.read_race(str(root), split="valid")
  with pytest.raises(RaceError, match=r"dev: no such directory \(the RACE "
                     r"root has no dev split\)"):
    race.read_race(str(root), split="dev")
  with pytest.raises(RaceError, match=r"train: is not the dev split"):
    race.read_race(str(root / "train"), split="dev")


def test_accuracy_by_level():
  def q(i, level, label):
    return Question(str(i), level, "a", "x", ["p", "q", "r", "s"], label)
  examples = [q(0, "middle", 1), q(1, "high", 0), q(2, "high", 3)]
  scores = race.accuracy_by_level(examples, np.array([1, 0, 0]))
  assert list(scores) == ["accuracy", "accuracy_middle", "accuracy_high",
                          "num_middle", "num_high"]
  assert scores == {"accuracy": 2 / 3, "accuracy_middle": 1.0,
                    "accuracy_high": 0.5, "num_middle": 1, "num_high": 2}
  assert race.accuracy_by_level([q(0, "high", 2), q(1, "", 1)], [2, 2]) == {
      "accuracy": 0.5, "accuracy_high": 1.0, "num_high": 1}
  with pytest.raises(ValueError, match=r"2 predictions for 3 questions"):
    race.accuracy_by_level(examples, [0, 0])
  with pytest.raises(RaceError, match=r"question 1: no answer to score "
                     r"against \(1 unlabelled questions"):
    race.accuracy_by_level([q(0, "high", 2), q(1, "high", None)], [0, 0])
