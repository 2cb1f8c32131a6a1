"""Span QA data: piece offsets, SQuAD-layout reading and model windows.

The offsets and windows are serve_text's preprocessor
(`serving.span_graph.TextSpanReader`, which `squad.make_windows` runs),
checked against the Python tokenizer's pieces and hand-worked spans. A real
tiny SentencePiece model (trained once for the module on mixed English,
Chinese, full-width, emoji and number text) and a WordPiece vocab.txt of
single characters.
"""

import functools
import json
import logging
import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import normalization, squad, tokenization
from albert_tf.serving import flat
from albert_tf.data.squad import Example, SquadError
from tests.fixtures_data import tiny_spm_model

_WORDS = ("café déjà vu école paris people came the quick brown fox jumps "
          "over lazy dog party emoji and make price were dollars in at "
          "where museum river city").split()
_ZH = "北京是中国的首都上海最大城市人口很多全角字符常见长江黄河"

TRICKY = [
    "Café Déjà vu", "ÉCOLE", "  leading and   several   spaces  ",
    "北京是中国的首都。", "ＡＢＣ１２３，全角", "emoji 😀 and 🎉!",
    "1,000,000 people in 2019, 49, 3,000", "``quoted'' text", "ﬁsh ① ㍿",
    "ΟΔΟΣ Σ", "e\u0301te\u0301", "tab\tnew\nline\u3000ideographic\u00a0nb",
    "İstanbul", "zero\u200bwidth", "", "   ", "Paris.", "A,B,9,",
]


def _corpus():
  rng = random.Random(0)
  lines = []
  for i in range(400):
    kind = i % 4
    if kind == 0:
      lines.append(" ".join(rng.choice(_WORDS) for _ in range(8)) +
                   f" {rng.randrange(1, 99)}9, {rng.randrange(1000)},000 .")
    elif kind == 1:
      lines.append("".join(rng.choice(_ZH) for _ in range(12)) + "。")
    elif kind == 2:
      lines.append("ＡＢＣ１２３，" + "".join(rng.choice(_ZH) for _ in range(5))
                   + " 😀 🎉")
    else:
      lines.append(f"In {rng.randrange(1900, 2030)}, {rng.randrange(10)}9, "
                   "the " + " ".join(rng.choice(_WORDS) for _ in range(5)))
  return lines


@pytest.fixture(scope="module")
def spm_file(tmp_path_factory):
  return tiny_spm_model(tmp_path_factory.mktemp("squad_spm"), _corpus(), 300)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789,.!。，😀🎉" + _ZH))
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars +
           ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] +
           ["cafe", "paris"])
  path = tmp_path_factory.mktemp("squad_wp") / "vocab.txt"
  path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def tokenizers(spm_file, vocab_file):
  """(kind, do_lower_case) -> AlbertTokenizer."""
  out = {}
  for lower in (True, False):
    out["sentencepiece", lower] = tokenization.load_tokenizer(
        spm_model_file=spm_file, do_lower_case=lower)
    out["wordpiece", lower] = tokenization.load_tokenizer(
        vocab_file=vocab_file, do_lower_case=lower)
  return out


def _encode(tok, text):
  """(ids, spans) of one text by the graph reader."""
  ids, starts, ends = squad.span_reader(tok).encode_with_offsets(
      tf.constant([text]))
  return ids[0].numpy().tolist(), list(zip(starts[0].numpy().tolist(),
                                           ends[0].numpy().tolist()))


def _pieces(tok, text):
  ids, spans = _encode(tok, text)
  return [(p, text[s:e]) for p, (s, e) in
          zip(tok.convert_ids_to_tokens(ids), spans)], spans


# ------------------------------------------------------------------ offsets
@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
@pytest.mark.parametrize("lower", [True, False])
def test_ids_equal_encode_and_spans_cover_the_text(tokenizers, kind, lower):
  tok = tokenizers[kind, lower]
  uncovered = []
  for text in TRICKY:
    ids, spans = _encode(tok, text)
    assert ids == tok.encode(text), text
    assert len(spans) == len(ids)
    assert [s for s, _ in spans] == sorted(s for s, _ in spans), text
    assert all(0 <= s <= e <= len(text) for s, e in spans), text
    covered = {i for s, e in spans for i in range(s, e)}
    uncovered += [c for i, c in enumerate(text)
                  if not c.isspace() and i not in covered]
  # A dropped combining mark or control character joins the character
  # before it; SentencePiece reads U+200B as a space (a bare "▁").
  assert uncovered == (["\u200b"] if kind == "sentencepiece" else [])


def test_sentencepiece_spans_exact(tokenizers):
  tok = tokenizers["sentencepiece", True]
  pieces, _ = _pieces(tok, "Café  ÉCOLE, 1,000")
  assert pieces == [("▁cafe", "Café"), ("▁ecole", "ÉCOLE"), (",", ","),
                    ("▁", ""), ("1", "1"), (",", ","), ("000", "000")]
  # "9," (and "1," above) is re-split as the tokenizer does; a bare "▁" is
  # a zero-width span at the next character.
  text = "In 2019, 49, the"
  assert tok._sp.encode(tok.normalize(text), out_type=str) == [
      "▁in", "▁201", "9,", "▁", "4", "9,", "▁the"]
  pieces, spans = _pieces(tok, text)
  assert [p for p, _ in pieces] == ["▁in", "▁201", "9", ",", "▁", "4", "9",
                                    ",", "▁the"]
  assert spans == [(0, 2), (3, 6), (6, 7), (7, 8), (9, 9), (9, 10), (10, 11),
                   (11, 12), (13, 16)]
  # SentencePiece's own NFKC: full-width characters, each its own span.
  pieces, _ = _pieces(tokenizers["sentencepiece", False], "ＡＢＣ１２３，😀")
  assert pieces == [("▁", ""), ("<unk>", "ＡＢＣ"), ("1", "１"), ("2", "２"),
                    ("3", "３"), (",", "，"), ("😀", "😀")]
  # One character, two pieces: both span it.
  pieces, _ = _pieces(tok, "ﬁsh")
  assert pieces == [("▁", ""), ("f", "ﬁ"), ("i", "ﬁ"), ("s", "s"), ("h", "h")]


def test_wordpiece_spans_exact(tokenizers):
  text = "Café  Déjà, 北京"
  pieces, spans = _pieces(tokenizers["wordpiece", True], text)
  assert pieces == [("cafe", "Café"), ("d", "D"), ("##e", "é"), ("##j", "j"),
                    ("##a", "à"), (",", ","), ("北", "北"), ("京", "京")]
  assert spans == [(0, 4), (6, 7), (7, 8), (8, 9), (9, 10), (10, 11),
                   (12, 13), (13, 14)]
  # Cased: the capitalised words are not in the vocab, [UNK] for the word.
  pieces, _ = _pieces(tokenizers["wordpiece", False], text)
  assert pieces == [("[UNK]", "Café"), ("[UNK]", "Déjà"), (",", ","),
                    ("北", "北"), ("京", "京")]


def test_lowercase_final_sigma(tokenizers):
  # Python lowercases a word-final Σ to ς: not a per-character step; the
  # reader tokenises the whole-string lowercasing, each character keeping
  # its span (the two spaces are one).
  reader = squad.span_reader(tokenizers["sentencepiece", True])
  norm, units = reader._normalize(tf.constant(["ΟΔΟΣ  Σ"]))
  assert norm.numpy()[0].decode() == "οδος σ"
  assert list(zip(units.s.numpy().tolist(), units.e.numpy().tolist())) == [
      (0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 7)]


def test_span_forms_are_the_table_steps():
  # The reader runs the table's steps: each group of steps, in its graph
  # span form (`Step.offsets`), gives the characters of the steps' Python
  # form (no word-final sigma here: the one rule looking at neighbours
  # that these texts would meet).
  texts = [t for t in TRICKY if "Σ" not in t] + [
      "x\x00y\ufffd\u200bz", " ``a'' `'`' ''' ```", "ﬁ\u0301 ﬃ\u0308x",
      "\u0301a\u0301", "한\u0301국 ＡＢＣ"]
  for kind in tokenization.KINDS:
    for lower in (True, False):
      groups = normalization.offset_groups(kind, lower)
      assert [s for g in groups for s in g] == list(
          normalization.steps(kind, lower))
      for group in groups:
        for text in texts:
          chars = tf.constant(list(text) or [""])[:len(text)]
          n = len(text)
          units = flat.Units(
              chars, tf.range(n, dtype=tf.int64),
              tf.range(1, n + 1, dtype=tf.int64), tf.zeros([n], tf.int64))
          got = units.run(group, tf.constant(1, tf.int64)).chars.numpy()
          want = functools.reduce(lambda t, s: s.python(t), group, text)
          assert b"".join(got).decode() == want, (group, text)


# ------------------------------------------------------------------ reading
def _write(tmp_path, obj, name="data.json"):
  path = tmp_path / name
  text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
  path.write_text(text, encoding="utf-8")
  return str(path)


def _qa(qid, question, answers=(), **extra):
  return dict(id=qid, question=question,
              answers=[{"text": t, "answer_start": s} for t, s in answers],
              **extra)


def _squad(*paragraphs, title="T"):
  return {"version": "1.1", "data": [{"title": title, "paragraphs": [
      {"context": c, "qas": list(q)} for c, q in paragraphs]}]}


MIXED = [
    ("Café Déjà vu is a museum in Paris. In 2019, 1,000,000 people came.",
     [("Café Déjà vu", 0), ("Paris", 28), ("1,000,000", 44), ("2019", 38),
      ("000", 50)]),
    ("北京是中国的首都。上海是中国最大的城市。",
     [("北京", 0), ("中国的首都", 3), ("上海", 9), ("京", 1)]),
    ("ＡＢＣ１２３，全角字符很常见 😀 🎉", [("ＡＢＣ", 0), ("全角字符", 7),
                                  ("😀", 15)]),
]


def _mixed_file(tmp_path):
  paragraphs = [(c, [_qa(f"q{i}-{k}", "what?", [a])
                     for k, a in enumerate(answers)])
                for i, (c, answers) in enumerate(MIXED)]
  return _write(tmp_path, _squad(*paragraphs))


def test_answers_round_trip(tmp_path, tokenizers):
  data = squad.read_squad(_mixed_file(tmp_path), False, True)
  assert data.counts == dict(paragraphs=3, questions=12, impossible=0,
                             answers=12, answer_start_fixed=0,
                             answers_not_found=0, empty_questions=0)
  for lower in (True, False):
    # WordPiece splits CJK and punctuation one by one; the one straddle is
    # the word "ＡＢＣ１２３", not in the vocab, so one [UNK] piece.
    assert squad.round_trip_mismatches(
        data.examples, tokenizers["wordpiece", lower]) == [
            ("q2-0", "ＡＢＣ", "ＡＢＣ１２３")]
    # The SentencePiece model has the piece "北京": the answer "京" reads
    # back as "北京" (the label covers the whole piece).
    assert squad.round_trip_mismatches(
        data.examples, tokenizers["sentencepiece", lower]) == [
            ("q1-3", "京", "北京")]
  # "000" inside "1,000,000" (q0-4) is not listed: the "9," re-split
  # leaves "," its own piece.


def test_read_v2_with_impossible(tmp_path):
  path = _write(tmp_path, _squad(("The river is long.", [
      _qa("a", "Which river?", [("river", 4)], is_impossible=False),
      _qa(7, "Which city?", is_impossible=True,
          plausible_answers=[{"text": "river", "answer_start": 4}]),
  ])))
  data = squad.read_squad(path, True, True)
  assert [(e.qas_id, e.answers, e.is_impossible, e.title)
          for e in data.examples] == [("a", [("river", 4)], False, "T"),
                                      ("7", [], True, "T")]
  assert data.counts["impossible"] == 1
  with pytest.raises(SquadError, match=r"data.json: question '7' is_impossible"
                     r" \(a SQuAD 2.0 file\); pass --version_2_with_negative"):
    squad.read_squad(path, False, False)


@pytest.mark.parametrize("obj, is_training, match", [
    ("{not json", False, r"data.json: not SQuAD JSON \(expected \{\"data\": "
     r"\[\{\"paragraphs\": \[...\]\}\]\}\), got unreadable JSON"),
    ([1, 2], False, r"not SQuAD JSON .* got the top level without 'data'"),
    ({"data": [{"paragraphs": [{"qas": []}]}]}, False,
     r"got data\[0\]\.paragraphs\[0\] without 'context' as a string"),
    (_squad(("a b", [{"id": "x", "answers": []}])), False,
     r"got data\[0\]\.paragraphs\[0\]\.qas\[0\] \('x'\) without 'question'"),
    (_squad(("a b", [_qa("x", "q", [("a", "0")])])), False,
     r"got question 'x' with an answer that is not"),
    (_squad(("a b", [_qa("x", "q", [("a", 0)])]),
            ("c d", [_qa("x", "q", [("c", 0)])])), False,
     r"question id 'x' appears twice, at data\[0\]\.paragraphs\[0\]\.qas\[0\] "
     r"and data\[0\]\.paragraphs\[1\]\.qas\[0\]"),
    (_squad(("a b", [_qa("x", "q", [("a", 0)], is_impossible=True)])), False,
     r"question 'x' is_impossible but has 1 answers"),
    (_squad(("a b", [_qa("x", "q")])), True,
     r"training question 'x' has no answers \(expected at least one, or "
     r"is_impossible true\)"),
    (_squad((" \n ", [_qa("x", "q")]), title="Tea"), False,
     r"data.json: paragraph 0 of 'Tea' \(data\[0\]\) has an empty context"),
])
def test_bad_input(tmp_path, obj, is_training, match):
  with pytest.raises(SquadError, match=match):
    squad.read_squad(_write(tmp_path, obj), True, is_training)


def test_missing_file(tmp_path):
  with pytest.raises(SquadError, match=r"nope.json: cannot read the file "
                     r"\(No such file or directory\)"):
    squad.read_squad(str(tmp_path / "nope.json"), False, False)


def test_unlabelled_question_at_predict_time(tmp_path):
  data = squad.read_squad(_write(tmp_path, _squad(("a b", [_qa("x", "q")]))),
                          True, False)
  assert data.examples[0].answers == [] and not data.examples[0].is_impossible


def test_answer_start_fixed_and_not_found(tmp_path, caplog, tokenizers):
  path = _write(tmp_path, _squad(("the cat sat on the mat", [
      _qa("q1", "who?", [("the", 14)]), _qa("q2", "what?", [("dog", 3)]),
      _qa("q3", "where?", [("mat", 19)])])))
  with caplog.at_level(logging.WARNING, logger="absl"):
    data = squad.read_squad(path, False, True)
  assert [e.answers for e in data.examples] == [[("the", 15)], [("dog", 3)],
                                                [("mat", 19)]]
  assert (data.counts["answer_start_fixed"],
          data.counts["answers_not_found"]) == (1, 1)
  assert [r.getMessage() for r in caplog.records if r.name == "absl"] == [
      f"{path}: 1 answers not at their answer_start moved to the nearest "
      "occurrence of their text (first: q1); 1 answers whose text is not in "
      "the context give no training label (first: q2)"]
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="absl"):
    windows = squad.make_windows(data.examples, tokenizers["wordpiece", True],
                                 max_seq_length=32, is_training=True,
                                 file=path)
  assert windows.counts["labels_missing"] == 1
  assert [r.getMessage() for r in caplog.records if r.name == "absl"] == [
      f"{path}: 1 training questions have no answer in their context that "
      "covers a piece; their windows are left out of training (first: q2)"]
  f = windows.features
  # [CLS] w ##h ##o ? [SEP]: the context starts at 6; the second "the" is
  # its pieces 11-13. "where?" is 6 pieces, "mat" is context pieces 14-16.
  assert f["start_positions"].tolist() == [6 + 11, 0, 8 + 14]
  assert f["end_positions"].tolist() == [6 + 13, 0, 8 + 16]
  assert f["is_impossible"].tolist() == [0, 1, 0]
  assert windows.trainable.tolist() == [True, False, True]


# ------------------------------------------------------------------ windows
def _example(context, question, answers=(), impossible=False, qid="q"):
  return Example(qid, question, context, list(answers), impossible, "T")


def test_windows_exact(tokenizers):
  tok = tokenizers["wordpiece", True]
  ex = _example("北京是中国的首都", "首都", [("中国", 3)])
  # Window length 9 - 2 - 3 = 4 pieces, starts 0, 2, 4 (the step).
  w = squad.make_windows([ex], tok, max_seq_length=9, doc_stride=2,
                         max_query_length=64, is_training=True)
  f = w.features
  assert w.window_start.tolist() == [0, 2, 4]
  assert w.example_index.tolist() == [0, 0, 0]
  assert tok.convert_ids_to_tokens(f["input_ids"][1]) == [
      "[CLS]", "首", "都", "[SEP]", "是", "中", "国", "的", "[SEP]"]
  assert f["segment_ids"][1].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]
  assert f["p_mask"][1].tolist() == [0, 1, 1, 1, 0, 0, 0, 0, 1]
  assert f["input_mask"].tolist() == [[1] * 9] * 3
  # Only the middle window holds the whole answer (pieces 3, 4).
  assert f["start_positions"].tolist() == [0, 5, 0]
  assert f["end_positions"].tolist() == [0, 6, 0]
  assert f["is_impossible"].tolist() == [1, 0, 1]
  assert w.piece_spans[1].tolist() == [[-1, -1]] * 4 + [
      [2, 3], [3, 4], [4, 5], [5, 6]] + [[-1, -1]]
  # Piece 3 (中) is in windows 0 and 1; window 1 gives it more context.
  assert w.is_max_context[:, 4:8].tolist() == [
      [True, True, True, False], [False, True, True, False],
      [False, True, True, True]]
  assert not w.is_max_context[:, :4].any() and not w.is_max_context[:, 8].any()
  assert w.counts == dict(questions=1, windows=3, questions_truncated=0,
                          answers_unmapped=0, labels_missing=0)
  # At prediction time: no labels.
  w = squad.make_windows([ex], tok, max_seq_length=9, doc_stride=2)
  assert w.features["start_positions"].tolist() == [0, 0, 0]
  assert w.features["is_impossible"].tolist() == [0, 0, 0]


def test_doc_stride_steps_and_padding(tokenizers):
  tok = tokenizers["wordpiece", True]
  ex = _example("abcdefghijklmnopqrst", "q")  # one word: a ##b ... ##t
  w = squad.make_windows([ex], tok, max_seq_length=12, doc_stride=3)
  assert w.window_start.tolist() == [0, 3, 6, 9, 12]  # 12 + 8 = 20 pieces
  # A step longer than the window: no gap, the window length instead.
  assert squad.make_windows([ex], tok, max_seq_length=12, doc_stride=10
                            ).window_start.tolist() == [0, 8, 16]
  last = w.features["input_mask"][-1].tolist()
  assert last == [1] * 12
  # Piece 7 is in windows 0 (7 left, 0 right), 1 (4 left, 3 right) and 2
  # (1 left, 6 right): window 1 has most context on the shorter side. Piece
  # 5 has 2 on its shorter side in windows 0 and 1: the earlier one wins.
  window, position = np.nonzero(w.is_max_context)
  owner = np.full(20, -1)
  owner[w.window_start[window] + position - 3] = window  # [CLS] q [SEP]
  assert owner.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4,
                            4, 4, 4, 4]


def test_question_truncated_and_empty_context(tokenizers):
  tok = tokenizers["wordpiece", True]
  examples = [_example("北京", "北京是中国的首都"),
              _example("\u200b", "首都")]  # the context has no piece
  w = squad.make_windows(examples, tok, max_seq_length=10,
                         max_query_length=3)
  assert w.counts["questions_truncated"] == 1
  assert w.example_index.tolist() == [0, 1]
  assert tok.convert_ids_to_tokens(w.features["input_ids"][0][:7]) == [
      "[CLS]", "北", "京", "是", "[SEP]", "北", "京"]
  assert tok.convert_ids_to_tokens(w.features["input_ids"][1][:6]) == [
      "[CLS]", "首", "都", "[SEP]", "[SEP]", "[PAD]"]
  assert w.features["input_mask"][1].tolist() == [1] * 5 + [0] * 5
  assert w.features["p_mask"][1].tolist() == [0] + [1] * 9
  assert w.features["segment_ids"][1].tolist() == [0] * 4 + [1] + [0] * 5
  assert (w.piece_spans[1] == -1).all()


def test_impossible_and_unmapped(tokenizers, caplog):
  tok = tokenizers["sentencepiece", True]
  examples = [_example("the river is long", "which city?", impossible=True,
                       qid="imp"),
              _example("a  b", "gap?", [(" ", 1)], qid="gap")]
  with caplog.at_level(logging.WARNING, logger="absl"):
    w = squad.make_windows(examples, tok, max_seq_length=24,
                           is_training=True, file="f.json")
  assert w.features["start_positions"].tolist() == [0, 0]
  assert w.features["is_impossible"].tolist() == [1, 1]
  assert (w.counts["answers_unmapped"], w.counts["labels_missing"]) == (1, 1)
  assert [r.getMessage() for r in caplog.records if r.name == "absl"][0] == (
      "f.json: 1 answers cover no context piece (e.g. only whitespace) "
      "(first: gap)")


def test_bad_window_settings(tokenizers):
  with pytest.raises(ValueError, match=r"f.json: question 'q' has 3 pieces: "
                     r"max_seq_length 6 leaves no room for the context"):
    squad.make_windows([_example("abc", "a b c")],
                       tokenizers["wordpiece", True], max_seq_length=6,
                       file="f.json")
  with pytest.raises(ValueError, match=r"doc_stride must be at least 1"):
    squad.make_windows([], tokenizers["wordpiece", True], doc_stride=0)


def test_windows_arrays(tmp_path, tokenizers):
  data = squad.read_squad(_mixed_file(tmp_path), False, True)
  w = squad.make_windows(data.examples, tokenizers["sentencepiece", True],
                         max_seq_length=24, doc_stride=8, is_training=True)
  n = w.num_windows
  assert {k: (v.shape, v.dtype) for k, v in w.features.items()} == {
      k: ((n, 24) if k in ("input_ids", "input_mask", "segment_ids",
                           "p_mask") else (n,), np.dtype(np.int32))
      for k in squad.FEATURES}
  assert w.piece_spans.shape == (n, 24, 2) and w.is_max_context.dtype == bool
  # Every context piece is owned by exactly one window of its question.
  for e in range(len(data.examples)):
    rows = w.example_index == e
    owned = w.piece_spans[rows][w.is_max_context[rows]]
    _, spans = _encode(tokenizers["sentencepiece", True],
                       data.examples[e].context)
    assert sorted(map(tuple, owned.tolist())) == sorted(spans)
  # Every labelled window's start/end read back the (straddled) answer.
  for i in np.flatnonzero(w.features["is_impossible"] == 0):
    ex = data.examples[w.example_index[i]]
    s = w.piece_spans[i, w.features["start_positions"][i], 0]
    t = w.piece_spans[i, w.features["end_positions"][i], 1]
    assert ex.context[s:t] in (ex.answers[0][0], "北京")
