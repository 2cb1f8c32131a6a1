"""In-graph span QA serving (`serving.span_graph`) against its Python twins.

The in-graph pieces and offsets == `char_spans.encode_with_offsets`, the
windows == `squad.make_windows`, and the answers == `span_decode.decode_v1`
/ `decode_v2` on the same windows and (fake) model outputs; a tf.Module
holding a reader survives a SavedModel round trip. A tiny SentencePiece
model (trained once for the module) and a WordPiece vocab.txt.
"""

import random

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import char_spans, span_decode, squad, tokenization
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
def test_pieces_and_offsets_equal_python(tokenizers, kind, lower):
  tok = tokenizers[kind, lower]
  ids, starts, ends = _reader(tok).encode_with_offsets(tf.constant(TRICKY))
  for i, text in enumerate(TRICKY):
    want_ids, want_spans = char_spans.encode_with_offsets(tok, text)
    assert ids[i].numpy().tolist() == want_ids, text
    assert list(zip(starts[i].numpy().tolist(),
                    ends[i].numpy().tolist())) == want_spans, text
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
  want_ids, want_spans = char_spans.encode_with_offsets(tok, text)
  ids, starts, ends = _reader(tok).encode_with_offsets(tf.constant([text]))
  got = ids[0].numpy().tolist()
  diff = [i for i, (a, b) in enumerate(zip(got, want_ids)) if a != b]
  assert len(got) == len(want_ids) and diff == [len(got) - 4,
                                                len(got) - 3]
  assert tok.convert_ids_to_tokens(want_ids[-4:-2]) == ["0", "00"]
  assert tok.convert_ids_to_tokens(got[-4:-2]) == ["00", "0"]
  got_spans = list(zip(starts[0].numpy().tolist(), ends[0].numpy().tolist()))
  assert got_spans[:-4] == want_spans[:-4]
  assert got_spans[-2:] == want_spans[-2:]
  assert got_spans[-4][0] == want_spans[-4][0]
  assert got_spans[-3][1] == want_spans[-3][1]


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


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_windows_equal_make_windows(tokenizers, kind):
  tok = tokenizers[kind, True]
  reader = _reader(tok, 24, doc_stride=5, max_query_length=6)
  pairs = _pairs()
  got = reader.encode(tf.constant([q for q, _ in pairs]),
                      tf.constant([c for _, c in pairs]))
  want = squad.make_windows(_examples(pairs), tok, max_seq_length=24,
                            doc_stride=5, max_query_length=6)
  for name in ("input_ids", "segment_ids", "input_mask"):
    np.testing.assert_array_equal(got[name].numpy(), want.features[name],
                                  err_msg=name)
  np.testing.assert_array_equal(got["is_max_context"].numpy(),
                                want.is_max_context)
  np.testing.assert_array_equal(got["piece_spans"].numpy(), want.piece_spans)
  np.testing.assert_array_equal(got["pair"].numpy(), want.example_index)
  # The long question keeps its first max_query_length pieces.
  row = got["input_ids"].numpy()[want.example_index.tolist().index(2)]
  assert row[:8].tolist() == ([tok.cls_id] + tok.encode(pairs[2][0])[:6] +
                              [tok.sep_id])
  # The long context: 3 x max_seq_length pieces, 11+ windows.
  assert len(tok.encode(pairs[0][1])) > 3 * 24
  assert (want.example_index == 0).sum() >= 11
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
    _, spans = char_spans.encode_with_offsets(tok, context)
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
