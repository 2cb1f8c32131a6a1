"""Span QA's preprocessor and serving (`serving.span_graph`).

The in-graph pieces == the Python tokenizer's (`tokenizer.encode`) with
spans covering the text, the windows == the original run_squad's rules
written out here from those pieces, and the answers == `span_decode.decode_v1`
/ `decode_v2` on the same windows and (fake) model outputs; a tf.Module
holding a reader survives a SavedModel round trip. A tiny SentencePiece
model (trained once for the module) and a WordPiece vocab.txt.
"""

import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import span_decode, squad, tokenization
from albert_tf.serving import saved_model
from albert_tf.serving.span_graph import TextSpanReader
from tests.fixtures_data import tiny_spm_model

_WORDS = ("café déjà vu école paris people came the quick brown fox jumps "
          "over lazy dog town river museum price dollars").split()
_ZH = "北京是中国的首都上海最大城市人口很多全角字符"

TRICKY = [
    "Café Déjà vu in PARIS", "ÉCOLE Élève", "北京是中国的首都。",
    "ＡＢＣ１２３，全角", "emoji 😀 and 🎉!", "  several   spaces  here ",
    "tab\tnew\nline\r\n\u3000ideographic\u00a0nb", "1,000,000 people, 49,",
    "``quoted'' text ``` ''''", "ΟΔΟΣ Σ", "x\x00y", "´´ 9, z", "ﬁsh ① 🄂",
    "e\u0301te\u0301", "İstanbul", "zero\u200bwidth", "", "   ", "A,B,9,",
    "a" * 120 + " b", "ﬁ\u0301 ﬃ\u0308x", "한\u0301국",
    "ΟΔΟΣ\x00Σ x",
]


def _corpus():
  rng = random.Random(0)
  lines = []
  for i in range(300):
    if i % 3 == 0:
      lines.append(" ".join(rng.choice(_WORDS) for _ in range(8)) +
                   f" {rng.randrange(1, 99)}9, {rng.randrange(1000)},000 .")
    elif i % 3 == 1:
      lines.append("".join(rng.choice(_ZH) for _ in range(10)) + "。 "
                   f'"{rng.choice(_WORDS)}"')
    else:
      lines.append("ＡＢＣ１２３，" + "".join(rng.choice(_ZH) for _ in range(4))
                   + " 😀 🎉 " + " ".join(rng.sample(_WORDS, 4)))
  return lines


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
  """(kind, do_lower_case) -> AlbertTokenizer."""
  spm_file = tiny_spm_model(tmp_path_factory.mktemp("span_spm"), _corpus(),
                            300)
  chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789,.!。，😀οδσς" +
                     _ZH))
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars +
           ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"] +
           ["cafe", "paris", "the", "museum", "οδος"])
  vocab_file = tmp_path_factory.mktemp("span_wp") / "vocab.txt"
  vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  out = {}
  for lower in (True, False):
    out["sentencepiece", lower] = tokenization.load_tokenizer(
        spm_model_file=spm_file, do_lower_case=lower)
    out["wordpiece", lower] = tokenization.load_tokenizer(
        vocab_file=str(vocab_file), do_lower_case=lower)
  return out


def _reader(tok, max_seq_length=32, **config):
  return TextSpanReader.from_tokenizer(tok, max_seq_length, config)


# ------------------------------------------------------------------ offsets
@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
@pytest.mark.parametrize("lower", [True, False])
def test_pieces_equal_encode_and_spans_cover_the_text(tokenizers, kind,
                                                      lower):
  tok = tokenizers[kind, lower]
  ids, starts, ends = _reader(tok).encode_with_offsets(tf.constant(TRICKY))
  uncovered = []
  for i, text in enumerate(TRICKY):
    assert ids[i].numpy().tolist() == tok.encode(text), text
    spans = list(zip(starts[i].numpy().tolist(), ends[i].numpy().tolist()))
    assert [s for s, _ in spans] == sorted(s for s, _ in spans), text
    assert all(0 <= s <= e <= len(text) for s, e in spans), text
    covered = {i for s, e in spans for i in range(s, e)}
    uncovered += [c for i, c in enumerate(text)
                  if not c.isspace() and i not in covered]
  # A dropped combining mark or control character joins the character
  # before it; SentencePiece reads U+200B as a space (a bare "▁"); "´" is
  # NFKD " " + U+0301, a space once ALBERT's lowercasing strips the accent.
  assert uncovered == {("sentencepiece", True): ["´", "´", "\u200b"],
                       ("sentencepiece", False): ["\u200b"]}.get(
                           (kind, lower), [])
  assert ids.flat_values.shape[0] > 100  # not all dropped or merged


def test_offsets_exact(tokenizers):
  tok = tokenizers["sentencepiece", True]
  text = "Café  ÉCOLE, 1,500"
  ids, starts, ends = _reader(tok).encode_with_offsets(tf.constant([text]))
  pieces = tok.convert_ids_to_tokens(ids[0].numpy().tolist())
  spans = zip(starts[0].numpy().tolist(), ends[0].numpy().tolist())
  assert [(p, text[s:e]) for p, (s, e) in zip(pieces, spans)] == [
      ("▁cafe", "Café"), ("▁ecole", "ÉCOLE"), (",", ","), ("▁1", "1"),
      (",", ","), ("5", "5"), ("00", "00")]
  # A dropped control character joins the span of the one before it.
  tok = tokenizers["wordpiece", True]
  ids, starts, ends = _reader(tok).encode_with_offsets(
      tf.constant(["ab\x00c"]))
  assert tok.convert_ids_to_tokens(ids[0].numpy().tolist()) == [
      "a", "##b", "##c"]
  assert starts[0].numpy().tolist() == [0, 1, 3]
  assert ends[0].numpy().tolist() == [1, 3, 4]


def test_known_difference_sentencepiece_ties(tokenizers):
  """TF Text's SentencePiece breaks an exact tie of the lattice unlike the
  Python package ("0" + "00" and "00" + "0" score the same): the one kind of
  difference found (also in text_graph.TextEncoder). The pieces differ
  there only and cover the same characters."""
  tok = tokenizers["sentencepiece", True]
  text = _long_context().replace("1,500", "1,000")
  want_ids = tok.encode(text)
  ids, starts, ends = _reader(tok).encode_with_offsets(tf.constant([text]))
  got = ids[0].numpy().tolist()
  diff = [i for i, (a, b) in enumerate(zip(got, want_ids)) if a != b]
  assert len(got) == len(want_ids) and diff == [len(got) - 4,
                                                len(got) - 3]
  assert tok.convert_ids_to_tokens(want_ids[-4:-2]) == ["0", "00"]
  assert tok.convert_ids_to_tokens(got[-4:-2]) == ["00", "0"]
  # "1,000 dollars.": the two pieces span "000" between them.
  spans = list(zip(starts[0].numpy().tolist(), ends[0].numpy().tolist()))
  at = text.index("000 dollars.")
  assert spans[-4:] == [(at, at + 2), (at + 2, at + 3), (at + 4, at + 11),
                        (at + 11, at + 12)]


# ------------------------------------------------------------------ windows
def _examples(pairs):
  return [squad.Example(f"q{i}", q, c, [], False, "T")
          for i, (q, c) in enumerate(pairs)]


def _long_context(answer_at=80, n_words=110):
  rng = random.Random(3)
  filler = [w for w in _WORDS if w not in ("paris", "museum")]
  words = [rng.choice(filler) for _ in range(n_words)]
  words[answer_at:answer_at + 2] = ["Paris", "Museum"]
  return " ".join(words) + ", 1,500 dollars."


def _pairs(context=None):
  return [("Which museum is it?", context or _long_context()),
          ("北京是什么？", "北京是中国的首都。" * 3),
          ("a long question " * 4, "the fox"),
          ("empty?", "   ")]


def _reference_windows(tok, pairs, length, doc_stride, max_query_length):
  """The original run_squad's windows of each pair from tokenizer.encode's
  pieces: input_ids, segment_ids, is_max_context [n, length], pair [n] and
  the (start, size) of each window's context pieces."""
  out = {"input_ids": [], "segment_ids": [], "is_max_context": [],
         "pair": [], "window": []}
  for p, (question, context) in enumerate(pairs):
    q, c = tok.encode(question)[:max_query_length], tok.encode(context)
    spans, start = [], 0
    while True:  # one every doc_stride pieces until one reaches the end
      size = min(len(c) - start, length - 3 - len(q))
      spans.append((start, size))
      if start + size >= len(c):
        break
      start += min(size, doc_stride)
    best = {}  # piece -> (score, window): min(left, right) + 0.01 * size
    for w, (start, size) in enumerate(spans):
      for i in range(start, start + size):
        score = min(i - start, start + size - 1 - i) + 0.01 * size
        if i not in best or score > best[i][0]:
          best[i] = (score, w)
    for w, (start, size) in enumerate(spans):
      pad = length - len(q) - 3 - size
      out["input_ids"].append([tok.cls_id] + q + [tok.sep_id] +
                              c[start:start + size] + [tok.sep_id] +
                              [tok.pad_id] * pad)
      out["segment_ids"].append([0] * (len(q) + 2) + [1] * (size + 1) +
                                [0] * pad)
      out["is_max_context"].append(
          [False] * (len(q) + 2) +
          [best[i][1] == w for i in range(start, start + size)] +
          [False] * (pad + 1))
      out["pair"].append(p)
      out["window"].append((start, size))
  return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_windows_equal_the_original_rules(tokenizers, kind):
  tok = tokenizers[kind, True]
  reader = _reader(tok, 24, doc_stride=5, max_query_length=6)
  pairs = _pairs()
  got = reader.encode(tf.constant([q for q, _ in pairs]),
                      tf.constant([c for _, c in pairs]))
  want = _reference_windows(tok, pairs, 24, 5, 6)
  for name in ("input_ids", "segment_ids", "is_max_context", "pair"):
    np.testing.assert_array_equal(got[name].numpy(), want[name],
                                  err_msg=name)
  np.testing.assert_array_equal(got["input_mask"].numpy(),
                                want["input_ids"] != tok.pad_id)
  np.testing.assert_array_equal(got["window_start"].numpy(),
                                want["window"][:, 0])
  # Each window carries its context pieces' spans, -1 elsewhere.
  _, starts, ends = reader.encode_with_offsets(
      tf.constant([c for _, c in pairs]))
  spans = got["piece_spans"].numpy()
  for w, (p, (start, size)) in enumerate(zip(want["pair"], want["window"])):
    at = 2 + min(len(tok.encode(pairs[p][0])), 6)
    np.testing.assert_array_equal(spans[w, at:at + size, 0],
                                  starts[p][start:start + size])
    np.testing.assert_array_equal(spans[w, at:at + size, 1],
                                  ends[p][start:start + size])
    assert (spans[w, :at] == -1).all() and (spans[w, at + size:] == -1).all()
  assert got["question_pieces"].numpy().tolist() == [
      len(tok.encode(q)) for q, _ in pairs]
  # Fine-tuning's call: each distinct context given once, context_of
  # pointing each question at its own (here in reverse order).
  shared = reader.encode(tf.constant([q for q, _ in pairs]),
                         tf.constant([c for _, c in pairs][::-1]),
                         tf.constant([3, 2, 1, 0], tf.int64))
  assert shared.keys() == got.keys()
  for name, value in shared.items():
    np.testing.assert_array_equal(value.numpy(), got[name].numpy(),
                                  err_msg=name)
  # The long question keeps its first max_query_length pieces.
  assert len(tok.encode(pairs[2][0])) > 6
  # The long context: 3 x max_seq_length pieces, 11+ windows.
  assert len(tok.encode(pairs[0][1])) > 3 * 24
  assert (want["pair"] == 0).sum() >= 11
  assert got["input_ids"].dtype == tf.int32


def test_question_leaving_no_room(tokenizers):
  reader = _reader(tokenizers["wordpiece", True], 8, max_query_length=64)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="leaves no room for the context"):
    reader.encode(tf.constant(["a b c d e"]), tf.constant(["x"]))


# ------------------------------------------------------------------ decode
L = 32


def _setup(tok, **config):
  """The reader, Python windows and pairs, and the answer "Paris Museum"
  placed where its first piece is predicted from the third window."""
  reader = _reader(tok, L, doc_stride=8, max_query_length=8,
                   max_answer_length=6, **config)
  for answer_at in range(40):
    pairs = _pairs(_long_context(answer_at))
    windows = squad.make_windows(_examples(pairs), tok, max_seq_length=L,
                                 doc_stride=8, max_query_length=8)
    context = pairs[0][1]
    at = context.index("Paris Museum")
    spans = squad.context_spans(tok, [context])[0]
    first, last = squad.char_span_to_pieces(spans, at, at + 12)
    offset = windows.window_start[2]
    start = 2 + min(len(tok.encode(pairs[0][0])), 8) + first - offset
    if 0 <= first - offset and start < L and windows.is_max_context[2, start]:
      assert windows.example_index[2] == 0 and len(spans) > 3 * L
      return (reader, windows, pairs, (2, start, start + last - first),
              (at, at + 12))
  raise AssertionError("no answer position in the third window")


def _where(windows, pairs):
  return (windows.example_index, windows.piece_spans, windows.is_max_context,
          [c for _, c in pairs], [f"q{i}" for i in range(len(pairs))])


def _serve(reader, pairs, run):
  out = reader(tf.constant([q for q, _ in pairs]),
               tf.constant([c for _, c in pairs]), run)
  return {k: v.numpy() for k, v in out.items()}


def _check_against(out, predictions, nbest, keys):
  for i, qid in enumerate(predictions):
    best = nbest[qid][0]
    assert out["answer"][i].decode() == predictions[qid], qid
    assert (out["start"][i], out["end"][i]) == (best["start"], best["end"])
    assert out["score"][i] == np.float32(best[keys[0]] + best[keys[1]])


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_v1_answers_equal_decode_v1(tokenizers, kind):
  tok = tokenizers[kind, True]
  reader, windows, pairs, (w, s, e), (at, to) = _setup(tok, n_best_size=4)
  rng = np.random.default_rng(0)
  answered = 0
  for trial in range(4):
    logits = rng.normal(size=(2, windows.num_windows, L)).astype(np.float32)
    if trial == 0:
      logits[0, w, s] = logits[1, w, e] = 20.0
    if trial == 3:  # ties everywhere: the first candidate wins in both
      logits = np.round(logits)

    def run(features, logits=logits):
      assert features["input_ids"].shape == (windows.num_windows, L)
      np.testing.assert_array_equal(features["input_ids"].numpy(),
                                    windows.features["input_ids"])
      return {"start_logits": tf.constant(logits[0]),
              "end_logits": tf.constant(logits[1])}
    out = _serve(reader, pairs, run)
    predictions, nbest = span_decode.decode_v1(
        logits[0], logits[1], *_where(windows, pairs), n_best_size=4,
        max_answer_length=6)
    _check_against(out, predictions, nbest, ("start_logit", "end_logit"))
    answered += (out["start"] >= 0).sum()
    if trial == 0:
      assert out["answer"][0].decode() == "Paris Museum"
      assert (out["start"][0], out["end"][0]) == (at, to)
      assert pairs[0][1][at:to] == "Paris Museum" and out["score"][0] == 40
    # No context piece in "   ": no answer.
    assert (out["answer"][3], out["start"][3], out["end"][3],
            out["score"][3]) == (b"", -1, -1, 0.0)
  assert "no_answer_score" not in out
  assert answered >= 6  # of 12 answerable: the checks above are not all ""


def test_v1_scores_summed_in_float64_as_python(tokenizers):
  """8 + 2**-21 ties 8 in float32: Python's float sum picks the later
  candidate, a float32 sum would keep the first."""
  tok = tokenizers["sentencepiece", True]
  reader, windows, pairs, (w, s, e), _ = _setup(tok, n_best_size=4)
  assert e == s + 1 and windows.is_max_context[w, s + 2]
  logits = np.full((2, windows.num_windows, L), -10.0, np.float32)
  logits[0, w, s + 2], logits[1, w, s + 3] = 8.0, 0.0  # first: 8
  logits[0, w, s], logits[1, w, e] = 8.0 - 2.0 ** -21, 2.0 ** -20
  out = _serve(reader, pairs, lambda f: {"start_logits": tf.constant(
      logits[0]), "end_logits": tf.constant(logits[1])})
  predictions, nbest = span_decode.decode_v1(
      logits[0], logits[1], *_where(windows, pairs), n_best_size=4,
      max_answer_length=6)
  _check_against(out, predictions, nbest, ("start_logit", "end_logit"))
  assert out["answer"][0].decode() == "Paris Museum"
  assert out["score"][0] == 8.0


def test_v2_answers_equal_decode_v2(tokenizers):
  tok = tokenizers["sentencepiece", True]
  reader, windows, pairs, (w, s, e), (at, to) = _setup(
      tok, version_2_with_negative=True)
  n, k1, k2 = windows.num_windows, 3, 2
  rng = np.random.default_rng(1)
  answered = 0
  for trial in range(4):
    start_ix = rng.integers(0, L, size=(n, k1)).astype(np.int32)
    end_ix = (np.repeat(start_ix, k2, axis=1) +
              rng.integers(-1, 5, size=(n, k1 * k2))).clip(0, L - 1)
    start_lp = -rng.exponential(size=(n, k1)).astype(np.float32)
    end_lp = -rng.exponential(size=(n, k1 * k2)).astype(np.float32)
    cls = rng.normal(size=n).astype(np.float32)
    if trial == 0:
      start_ix[w, 1], end_ix[w, 1 * k2 + 0] = s, e
      start_lp[w, 1], end_lp[w, 1 * k2 + 0] = -0.01, -0.02
    heads = {"start_top_log_probs": start_lp, "start_top_index": start_ix,
             "end_top_log_probs": end_lp,
             "end_top_index": end_ix.astype(np.int32), "cls_logits": cls}
    out = _serve(reader, pairs, lambda f, h=heads: {
        k: tf.constant(v) for k, v in h.items()})
    predictions, nbest, null_odds = span_decode.decode_v2(
        *heads.values(), *_where(windows, pairs), n_best_size=20,
        max_answer_length=6)
    _check_against(out, predictions, nbest,
                   ("start_log_prob", "end_log_prob"))
    assert out["no_answer_score"].tolist() == [
        np.float32(v) for v in null_odds.values()]
    if trial == 0:
      assert out["answer"][0].decode() == "Paris Museum"
      assert (out["start"][0], out["end"][0]) == (at, to)
      assert out["score"][0] == np.float32(-0.01 + -0.02)
    assert (out["answer"][3], out["start"][3], out["score"][3]) == (
        b"", -1, -2e6)
    answered += (out["start"] >= 0).sum()
  assert answered >= 6  # of 12 answerable


# ------------------------------------------------------------------ SavedModel
def test_saved_model_round_trip(tokenizers, tmp_path):
  """A tf.Module holding a reader, its serve_text made as
  tasks.span_qa.export_signatures makes it, saved and loaded."""
  tok = tokenizers["sentencepiece", True]
  context = _long_context()
  first, *_, last = tok.encode("Paris Museum")

  def run(features):  # a fake model: logit 1 at the answer's pieces
    ids = features["input_ids"]
    return {"start_logits": tf.cast(tf.equal(ids, first), tf.float32),
            "end_logits": tf.cast(tf.equal(ids, last), tf.float32)}

  module = tf.Module()
  module.reader = reader = _reader(tok, L, doc_stride=8, max_query_length=8)
  module.serve = saved_model.signature(
      lambda t: reader(t["question"], t["context"], run),
      reader.input_specs())
  tf.saved_model.save(module, str(tmp_path / "sm"),
                      signatures={"serve_text": module.serve})
  loaded = tf.saved_model.load(str(tmp_path / "sm"))
  out = loaded.signatures["serve_text"](
      question=tf.constant(["where?", "?"]),
      context=tf.constant([context, "Paris Museum, said the fox."]))
  assert [a.decode() for a in out["answer"].numpy()] == ["Paris Museum"] * 2
  assert out["start"].numpy().tolist() == [context.index("Paris"), 0]
  assert out["end"].numpy().tolist() == [context.index("Paris") + 12, 12]
  assert out["score"].numpy().tolist() == [2.0, 2.0]


def test_kept_reader_survives_a_seed(tokenizers):
  """The reader fine-tuning and encode_inputs keep is built again after
  keras.utils.set_random_seed (as fine-tuning starts), which clears TF's
  kernels and with them its SentencePiece model."""
  import keras  # pylint: disable=g-import-not-at-top
  tokenizer = tokenizers["sentencepiece", True]
  first = squad.context_spans(tokenizer, ["北京是中国的首都。"])
  keras.utils.set_random_seed(3)
  again = squad.context_spans(tokenizer, ["北京是中国的首都。"])
  assert len(first[0]) > 1
  np.testing.assert_array_equal(again[0], first[0])
