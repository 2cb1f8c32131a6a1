"""In-graph RACE encoding (serving/choice_graph.py) == race.encode_race."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops a loaded model needs)

from albert_tf import features as F
from albert_tf.data import race
from albert_tf.data.race import Question
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.serving.choice_graph import ChoiceEncoder
from tests.fixtures_data import tiny_spm_model
from tests.fixtures_data import write_tiny_vocab_and_config

MAX_SEQ, MAX_QA = 40, 12
LETTERS = "abcdefghijklmnopqrstuvwxyz"
# One piece per character (and "##" letters), so every word is known.
CHARS = (list(LETTERS) + ["##" + c for c in LETTERS] + list("0123456789") +
         list("_$\\.,?") + list("今天气很好我们去公园散步哪里"))
LONG_ARTICLE = "we go to the park today. " * 6
LONG_QUESTION = "where do we go today and what is the weather like?"
CASES = [  # (article, question, options)
    ("a cat sat.", "who sat?", ["a cat", "a dog", "we", ""]),
    ("a cat sat.", "the cat sat on the _ .",
     ["mat", "a\\b", "$1", "x $0 \\1 \\\\"]),
    ("good.", "___ is ___", ["a", "$1$2", "\\g<0>", "_"]),
    ("今天天气很好，我们去公园散步。", "我们去哪里_？", ["公园", "$1", "里", "天"]),
    (LONG_ARTICLE, LONG_QUESTION, ["the park", "a", "good", "今天"]),
    ("", "", ["a", "b", "c", "d"]),
]
EXAMPLES = [Question(f"q{i}", "", a, q, o, None)
            for i, (a, q, o) in enumerate(CASES)]
# The options too: "$", "\\" and digits are pieces, not one <unk>.
SPM_LINES = [" ".join([a, q] + o) for a, q, o in CASES] + [
    "the quick brown fox jumps over the lazy dog.",
    "今天天气很好，我们去公园散步。", "where is the cat? on the mat."] * 10


@pytest.fixture(scope="module", name="wordpiece")
def _wordpiece(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("wp"), CHARS)
  return load_tokenizer(vocab_file=str(root / "vocab.txt"))


@pytest.fixture(scope="module", name="sentencepiece")
def _sentencepiece(tmp_path_factory):
  model = tiny_spm_model(tmp_path_factory.mktemp("spm"), SPM_LINES, 150)
  return load_tokenizer(spm_model_file=model)


@pytest.fixture(scope="module", name="small")
def _small(wordpiece):
  """An encoder of 12 positions, qa at most 4, shared to trace it once."""
  return ChoiceEncoder.from_tokenizer(wordpiece, 12, 4)


def _inputs(examples):
  return (tf.constant([e.article for e in examples]),
          tf.constant([e.question for e in examples]),
          tf.constant([e.options for e in examples]))


def _assert_equal(got, expected):
  for name in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS):
    assert got[name].dtype == tf.int32, name
    np.testing.assert_array_equal(got[name].numpy(), expected[name],
                                  err_msg=name)


def test_qa_text_inserts_options_literally(wordpiece):
  encoder = ChoiceEncoder.from_tokenizer(wordpiece, MAX_SEQ, MAX_QA)
  _, question, options = _inputs(EXAMPLES)
  got = [[t.decode("utf-8") for t in row]
         for row in encoder.qa_text(question, options).numpy()]
  assert got == [[race.qa_text(e.question, o) for o in e.options]
                 for e in EXAMPLES]
  assert got[1][1] == "the cat sat on the a\\b ."
  assert got[1][3] == "the cat sat on the x $0 \\1 \\\\ ."
  assert got[2][1] == "$1$2$1$2$1$2 is $1$2$1$2$1$2"
  assert got[2][3] == "___ is ___"  # the option is not searched again
  assert got[0][3] == "who sat? "


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_matches_encode_race(kind, request):
  tokenizer = request.getfixturevalue(kind)
  expected, counts = race.encode_race(EXAMPLES, tokenizer, MAX_SEQ, MAX_QA)
  # The cases do cut: the long article; qa in both blank questions (the
  # options are long, or written three times) and with the long question.
  assert counts == {"questions": 6, "articles_truncated": 1,
                    "qa_truncated": 3}
  encoder = ChoiceEncoder.from_tokenizer(tokenizer, MAX_SEQ, MAX_QA)
  got = encoder(*_inputs(EXAMPLES))
  assert got[F.INPUT_IDS].shape == (len(EXAMPLES), 4, MAX_SEQ)
  _assert_equal(got, expected)
  # A batch of one and an empty batch take the same path.
  _assert_equal(encoder(*_inputs(EXAMPLES[4:5])),
                {k: v[4:5] for k, v in expected.items()})
  empty = encoder(tf.constant([], tf.string), tf.constant([], tf.string),
                  tf.zeros([0, 4], tf.string))
  assert empty[F.INPUT_IDS].shape == (0, 4, MAX_SEQ)


def test_wordpiece_cuts_by_hand(wordpiece, small):
  """The rules themselves, on ids written out (one piece per character)."""
  ids = wordpiece.convert_tokens_to_ids
  got = small(tf.constant(["abc def"]), tf.constant(["x _ ."]),
              tf.constant([["yzy", "y", "", "$"]]))
  article = ids(["a", "##b", "##c", "d", "##e", "##f"])
  cls, sep = wordpiece.cls_id, wordpiece.sep_id
  assert got[F.INPUT_IDS].numpy()[0].tolist() == [
      # qa "x yzy ." keeps its last 4 pieces, the article its first 12-3-4.
      [cls] + article[:5] + [sep] + ids(["y", "##z", "##y", "."]) + [sep],
      [cls] + article + [sep] + ids(["x", "y", "."]) + [sep],
      [cls] + article + [sep] + ids(["x", "."]) + [sep, wordpiece.pad_id],
      [cls] + article + [sep] + ids(["x", "$", "."]) + [sep]]
  assert got[F.SEGMENT_IDS].numpy()[0, 1].tolist() == [0] * 8 + [1] * 4
  assert got[F.INPUT_MASK].numpy()[0, 2].tolist() == [1] * 11 + [0]


def test_saved_model_round_trip(sentencepiece, tmp_path):
  encoder = ChoiceEncoder.from_tokenizer(sentencepiece, MAX_SEQ, MAX_QA)
  module = tf.Module()
  module.encoder = encoder
  module.serve = tf.function(lambda a, q, o: encoder(a, q, o),
                             input_signature=ChoiceEncoder.input_specs(4))
  tf.saved_model.save(module, str(tmp_path / "sm"),
                      signatures={"serve_text": module.serve})
  del module, encoder
  loaded = tf.saved_model.load(str(tmp_path / "sm"))
  expected, _ = race.encode_race(EXAMPLES, sentencepiece, MAX_SEQ, MAX_QA)
  article, question, options = _inputs(EXAMPLES)
  _assert_equal(loaded.serve(article, question, options), expected)
  serve_text = loaded.signatures["serve_text"]
  assert serve_text.structured_outputs[F.INPUT_IDS].shape.as_list() == [
      None, 4, MAX_SEQ]
  _assert_equal(serve_text(article=article, question=question,
                           options=options), expected)


def test_rows_must_match(small):
  options = tf.constant([["a", "b"]])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="question must have one row per row of options"):
    small(tf.constant(["x"]), tf.constant(["x", "y"]), options)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="article must have one row per row of options"):
    small(tf.constant(["x", "y"]), tf.constant(["x"]), options)


def test_max_qa_length_out_of_range(wordpiece):
  with pytest.raises(ValueError, match=r"max_qa_length must be between 1 and "
                     r"max_seq_length - 3 = 9 .*got 10"):
    ChoiceEncoder.from_tokenizer(wordpiece, 12, 10)
