"""--max_predict_examples: each fine-tuning family predicts only the first N
test examples, and leaves its dev split whole; --max_eval_examples limits
dev and leaves test whole (span QA reads both from one --predict_file)."""

import json

import pytest

from albert_tf.tasks import registry
from albert_tf.data import classifier_data
from albert_tf.data import tokenization
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "甲乙丙丁戊己庚辛"
ROWS = 7  # examples per split
LIMIT = 3


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"), CHARS)
  return tokenization.load_tokenizer(vocab_file=str(root / "vocab.txt"))


def _text(i):
  return CHARS[i % len(CHARS)] + CHARS[(i + 3) % len(CHARS)]


def _classification(root, tokenizer, **limits):
  for split in ("train", "dev", "test"):
    (root / f"{split}.tsv").write_text(
        "".join(f"{i % 2}\t{_text(i)}\n" for i in range(ROWS)),
        encoding="utf-8")
  task = registry.family("classification").task(
      classifier_data.get_task("sentiment"), tokenizer, str(root), 16,
      **limits)
  return lambda split: len(task.load_split(split)[0])


def _tagging(root, tokenizer, **limits):
  block = "".join(f"{c}\t{'B-LOC' if k == 0 else 'O'}\n"
                  for k, c in enumerate(CHARS[:4])) + "\n"
  for name in ("train.txt", "dev.txt", "test.txt"):
    (root / name).write_text(block * ROWS, encoding="utf-8")
  task = registry.family("tagging").task(
      "conll", tokenizer, str(root), 16, 8, tag_scheme="BIO", **limits)
  return lambda split: len(task.read_split(split).sentences)


def _span_qa(root, tokenizer, **limits):
  context = CHARS * 2
  data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": [
          {"id": f"q{i}", "question": _text(i), "answers": [
              {"text": context[i:i + 2], "answer_start": i}]}
          for i in range(ROWS)]}]}]}
  path = root / "squad.json"
  path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
  task = registry.family("span_qa").task("squad", tokenizer, str(path), str(path),
                                max_seq_length=32, doc_stride=8,
                                max_query_length=8, **limits)
  return lambda split: len(task.load_split(split)[0].examples)


def _multiple_choice(root, tokenizer, **limits):
  for split in ("train", "dev", "test"):
    folder = root / split / "middle"
    folder.mkdir(parents=True)
    for i in range(ROWS):
      (folder / f"{i}.txt").write_text(json.dumps(
          {"id": f"{split}{i}", "article": CHARS, "questions": [_text(i)],
           "options": [list(CHARS[:4])], "answers": ["A"]},
          ensure_ascii=False), encoding="utf-8")
  task = registry.family("multiple_choice").task("race", tokenizer, str(root), 32, 8,
                                        **limits)
  return lambda split: len(task.load_split(split)[0].examples)


@pytest.mark.parametrize("family", [_classification, _tagging, _span_qa,
                                    _multiple_choice],
                         ids=lambda f: f.__name__[1:])
def test_only_the_first_test_examples_are_predicted(family, tokenizer,
                                                    tmp_path):
  for name in ("whole", "limited"):
    (tmp_path / name).mkdir()
  whole = family(tmp_path / "whole", tokenizer)
  assert whole("test") == ROWS
  limited = family(tmp_path / "limited", tokenizer,
                   max_predict_examples=LIMIT)
  assert limited("test") == LIMIT
  assert limited("dev") == ROWS


@pytest.mark.parametrize("family", [_classification, _tagging, _span_qa,
                                    _multiple_choice],
                         ids=lambda f: f.__name__[1:])
def test_a_dev_limit_leaves_the_test_split_whole(family, tokenizer, tmp_path):
  limited = family(tmp_path, tokenizer, max_eval_examples=LIMIT)
  assert limited("dev") == LIMIT
  assert limited("test") == ROWS
