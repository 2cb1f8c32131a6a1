"""RACE reading, qa text, encoding and per-level accuracy (data/race.py)."""

import dataclasses
import json
import logging
import os

import numpy as np
import pytest

from albert_tf import features as F
from albert_tf.data import race
from albert_tf.data.race import Question, RaceError
from albert_tf.data.tokenization import load_tokenizer

# Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, "a".."z" 5..30, "?" 31,
# "." 32: one piece per letter word, so expected ids can be written by hand.
CHARS = "abcdefghijklmnopqrstuvwxyz?."
MIDDLE = {"article": "a b c", "questions": ["x ?"],
          "options": [["p", "q", "r", "s"]], "answers": ["B"],
          "id": "middle1.txt"}
HIGH = {"article": "d e f g h", "questions": ["i _ j .", "k"],
        "options": [["u v", "w", "y", "z"], ["t", "u", "v", "w"]],
        "answers": ["A", "D"], "id": "high2.txt"}


def _id(char):
  return 5 + CHARS.index(char)


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


@pytest.fixture(name="tok")
def _tok(tmp_path):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS)
  _write(tmp_path / "vocab" / "vocab.txt", "\n".join(vocab) + "\n")
  return load_tokenizer(vocab_file=str(tmp_path / "vocab" / "vocab.txt"))


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


def test_qa_text():
  assert race.qa_text("The _ sat.", "cat") == "The cat sat."
  assert race.qa_text("Who sat?", "the cat") == "Who sat? the cat"
  # As the original's str.replace: every "_" becomes the option.
  assert race.qa_text("_ and _, or ___", "x") == "x and x, or xxx"
  assert race.qa_text("", "x") == " x"


def test_encode_one_choice_exactly(tok):
  question = Question("m-0", "middle", "a b c", "x ?", ["p", "q", "r", "s"], 1)
  features, counts = race.encode_race([question], tok, max_seq_length=10,
                                      max_qa_length=4)
  assert sorted(features) == sorted([F.INPUT_IDS, F.INPUT_MASK,
                                     F.SEGMENT_IDS, F.LABEL_IDS])
  assert features[F.INPUT_IDS].shape == (1, 4, 10)
  assert all(v.dtype == np.int32 for v in features.values())
  ids = [2, _id("a"), _id("b"), _id("c"), 3, _id("x"), _id("?"), _id("p"), 3,
         0]
  assert features[F.INPUT_IDS][0, 0].tolist() == ids
  assert features[F.INPUT_MASK][0, 0].tolist() == [1] * 9 + [0]
  assert features[F.SEGMENT_IDS][0, 0].tolist() == [0] * 5 + [1] * 4 + [0]
  assert features[F.INPUT_IDS][0, 3, 7] == _id("s")
  assert features[F.LABEL_IDS].tolist() == [1]
  assert counts == {"questions": 1, "articles_truncated": 0,
                    "qa_truncated": 0}


def test_encode_truncation_rules(tmp_path, tok):
  examples = race.read_race(str(_tree(tmp_path)), "train").examples
  unlabelled = dataclasses.replace(examples[0], label=None)
  features, counts = race.encode_race(examples + [unlabelled], tok,
                                      max_seq_length=10, max_qa_length=4)
  ids = features[F.INPUT_IDS]
  d, e, f, g, h = (_id(c) for c in "defgh")
  # "i u v j ." keeps its last 4 pieces; the article keeps its first 3.
  assert ids[1, 0].tolist() == [2, d, e, f, 3, _id("u"), _id("v"), _id("j"),
                                _id("."), 3]
  assert features[F.SEGMENT_IDS][1, 0].tolist() == [0] * 5 + [1] * 5
  # "i w j ." is 4 pieces: the article is cut to 3 as well.
  assert ids[1, 1].tolist() == [2, d, e, f, 3, _id("i"), _id("w"), _id("j"),
                                _id("."), 3]
  # "k t" leaves room for the whole article.
  assert ids[2, 0].tolist() == [2, d, e, f, g, h, 3, _id("k"), _id("t"), 3]
  assert features[F.SEGMENT_IDS][2, 0].tolist() == [0] * 7 + [1] * 3
  assert features[F.INPUT_MASK][2].sum() == 40
  assert features[F.LABEL_IDS].tolist() == [1, 0, 3, -1]
  assert counts == {"questions": 4, "articles_truncated": 1,
                    "qa_truncated": 1}
  _, counts = race.encode_race(examples, tok, max_seq_length=13,
                               max_qa_length=5)
  assert counts == {"questions": 3, "articles_truncated": 0,
                    "qa_truncated": 0}
  # One piece too many: the article loses its last piece only.
  features, counts = race.encode_race(examples[2:], tok, max_seq_length=9,
                                      max_qa_length=4)
  assert features[F.INPUT_IDS][0, 0].tolist() == [2, d, e, f, g, 3, _id("k"),
                                                  _id("t"), 3]
  assert counts == {"questions": 1, "articles_truncated": 1,
                    "qa_truncated": 0}


def test_each_article_is_tokenised_once(tmp_path, tok):
  calls = []

  class Counting:
    cls_id, sep_id, pad_id = tok.cls_id, tok.sep_id, tok.pad_id

    def encode(self, text):
      calls.append(text)
      return tok.encode(text)

  examples = race.read_race(str(_tree(tmp_path)), "train").examples
  race.encode_race(examples, Counting(), max_seq_length=10, max_qa_length=4)
  assert calls.count("d e f g h") == 1 and calls.count("a b c") == 1
  assert len(calls) == 2 + 3 * 4


def test_encode_errors(tok):
  question = Question("m-0", "middle", "a", "x", ["p", "q", "r"], 0)
  with pytest.raises(ValueError, match=r"max_qa_length must be between 1 and "
                     r"max_seq_length - 3 = 7 .*got 8"):
    race.encode_race([], tok, max_seq_length=10, max_qa_length=8)
  with pytest.raises(RaceError,
                     match=r"question m-0: 3 options \(expected 4\)"):
    race.encode_race([question], tok, max_seq_length=10, max_qa_length=4)


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
