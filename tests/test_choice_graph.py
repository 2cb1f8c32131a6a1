"""Multiple choice's one encoder (serving/choice_graph.py): the graph
against the original run_race packing (`numpy_reference.race_packing`, on
the Python tokenizer's pieces) and against ids written out by hand, and
`encode_questions` (fine-tuning's and the ONNX/TFLite runners' path): its
batches, truncation counts, padded choices and errors."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops a loaded model needs)

from albert_tf.core import features as F
from albert_tf.data import clue_choice
from albert_tf.data.race import Question, RaceError
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.serving.choice_graph import ChoiceEncoder, encode_questions
from tests import numpy_reference
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


def _qa_texts(encoder, questions, options):
  return [[t.decode("utf-8") for t in row] for row in encoder.qa_text(
      tf.constant(questions), tf.constant(options)).numpy()]


def test_qa_text_inserts_options_literally(small):
  got = _qa_texts(small, [e.question for e in EXAMPLES],
                  [e.options for e in EXAMPLES])
  # The original's rule: str.replace of every "_", else a space between.
  assert got == [[e.question.replace("_", o) if "_" in e.question
                  else e.question + " " + o for o in e.options]
                 for e in EXAMPLES]
  assert _qa_texts(small, ["The _ sat.", "Who sat?", "_ and _, or ___", ""],
                   [["cat"], ["the cat"], ["x"], ["x"]]) == [
                       ["The cat sat."], ["Who sat? the cat"],
                       ["x and x, or xxx"], [" x"]]
  assert got[1][1] == "the cat sat on the a\\b ."
  assert got[1][3] == "the cat sat on the x $0 \\1 \\\\ ."
  assert got[2][1] == "$1$2$1$2$1$2 is $1$2$1$2$1$2"
  assert got[2][3] == "___ is ___"  # the option is not searched again
  assert got[0][3] == "who sat? "


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
def test_matches_the_original_packing(kind, request):
  tokenizer = request.getfixturevalue(kind)
  expected, cut_article, cut_qa = numpy_reference.race_packing(
      tokenizer, EXAMPLES, MAX_SEQ, MAX_QA)
  # The cases do cut: the long article; qa in both blank questions (the
  # options are long, or written three times) and with the long question.
  assert (cut_article, cut_qa) == (1, 3)
  features, counts = encode_questions(EXAMPLES, tokenizer, MAX_SEQ, MAX_QA,
                                      batch_size=4)
  assert counts == {"questions": 6, "articles_truncated": 1,
                    "qa_truncated": 3, "truncated_at": ["q1", "q2", "q4"]}
  for name in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS):
    np.testing.assert_array_equal(features[name], expected[name],
                                  err_msg=name)
  assert features[F.LABEL_IDS].tolist() == [-1] * 6
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
  expected, _, _ = numpy_reference.race_packing(sentencepiece, EXAMPLES,
                                                MAX_SEQ, MAX_QA)
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


# ------------------------------------------------- encode_questions by hand
# Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, "a".."z" 5..30, "?" 31,
# "." 32: one piece per letter word, so expected ids can be written by hand.
ABC = "abcdefghijklmnopqrstuvwxyz?."
ONE = Question("middle1.txt-0", "middle", "a b c", "x ?",
               ["p", "q", "r", "s"], 1)
TWO = [Question("high2.txt-0", "high", "d e f g h", "i _ j .",
                ["u v", "w", "y", "z"], 0),
       Question("high2.txt-1", "high", "d e f g h", "k", ["t", "u", "v", "w"],
                3)]


def _id(char):
  return 5 + ABC.index(char)


@pytest.fixture(scope="module", name="letters")
def _letters(tmp_path_factory):
  root = tmp_path_factory.mktemp("letters")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(ABC)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  return load_tokenizer(vocab_file=str(root / "vocab.txt"))


def test_encode_one_question_exactly(letters):
  features, counts = encode_questions([ONE], letters, max_seq_length=10,
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
                    "qa_truncated": 0, "truncated_at": []}


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_encode_truncation_rules(letters, batch_size):
  """Batches of one, of questions sharing an article (tokenised once per
  batch) and of all give the same ids."""
  unlabelled = dataclasses.replace(ONE, id="u", label=None)
  features, counts = encode_questions(
      [ONE] + TWO + [unlabelled], letters, max_seq_length=10,
      max_qa_length=4, batch_size=batch_size)
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
                    "qa_truncated": 1, "truncated_at": ["high2.txt-0"]}
  _, counts = encode_questions([ONE] + TWO, letters, max_seq_length=13,
                               max_qa_length=5, batch_size=batch_size)
  assert counts == {"questions": 3, "articles_truncated": 0,
                    "qa_truncated": 0, "truncated_at": []}
  # One piece too many: the article loses its last piece only.
  features, counts = encode_questions(TWO[1:], letters, max_seq_length=9,
                                      max_qa_length=4, batch_size=batch_size)
  assert features[F.INPUT_IDS][0, 0].tolist() == [2, d, e, f, g, 3, _id("k"),
                                                  _id("t"), 3]
  assert counts == {"questions": 1, "articles_truncated": 1,
                    "qa_truncated": 0, "truncated_at": ["high2.txt-1"]}


def test_padded_choices_are_zero_rows_and_not_counted(letters):
  """C3's spec: fewer options padded to 4 with all-zero rows; a cut is
  counted in the real choices only."""
  short = Question("c-0", "", "a b c d e", "x", ["p", "q"], 1)
  features, counts = encode_questions([short, ONE], letters, 10, 4,
                                      spec=clue_choice.C3)
  assert features[F.INPUT_IDS].shape == (2, 4, 10)
  for name in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS):
    assert not features[name][0, 2:].any(), name
  # "x p": the article keeps 10 - 3 - 2 = 5 pieces, all of it.
  assert features[F.INPUT_IDS][0, 1].tolist() == [
      2] + [_id(c) for c in "abcde"] + [3, _id("x"), _id("q"), 3]
  assert counts == {"questions": 2, "articles_truncated": 0,
                    "qa_truncated": 0, "choices_padded": 1,
                    "truncated_at": []}
  with pytest.raises(RaceError, match=r"question c-0: 2 options "
                     r"\(expected 4\)"):
    encode_questions([short], letters, 10, 4)
  with pytest.raises(RaceError, match=r"question c-0: 0 options "
                     r"\(expected at most 4\)"):
    encode_questions([dataclasses.replace(short, options=[])], letters, 10, 4,
                     spec=clue_choice.C3)


def test_encode_questions_errors(letters):
  with pytest.raises(ValueError, match=r"max_qa_length must be between 1 and "
                     r"max_seq_length - 3 = 7 .*got 8"):
    encode_questions([ONE], letters, max_seq_length=10, max_qa_length=8)
  five = dataclasses.replace(ONE, options=list("pqrst"))
  with pytest.raises(RaceError, match=r"question middle1.txt-0: 5 options "
                     r"\(expected 4\)"):
    encode_questions([five], letters, max_seq_length=10, max_qa_length=4)
