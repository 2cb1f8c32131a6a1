"""Span question answering's one preprocessor, in the graph: (question,
context) strings -> windows -> answers.

Fine-tuning runs `TextSpanReader.encode` over each split
(`albert_tf.data.squad.make_windows`); serve_text runs it, the model and
`decode` (the best entry of `span_decode.decode_v1` / `decode_v2`).

    reader = TextSpanReader.from_tokenizer(tokenizer, 384, task_config)
    out = reader(questions, contexts, run)   # run: features -> model outputs
    out["answer"], out["start"], out["end"]  # a slice of each context

Offsets: each normalised character keeps the original characters it came
from (`flat.Units`, flat tensors with row ids). The string tokenised is the
whole-string normalisation (a word-final "Σ" lowers to "ς") when it has as
many characters as the per-character one, else the latter. The pieces are
`text_graph.TextEncoder`'s (`wordpieces`, `number_pieces`). Needs
`import tensorflow_text`, as does loading a SavedModel holding one.
"""

import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data import normalization
from albert_tf.modeling import span_qa as span_model
from albert_tf.serving import flat
from albert_tf.serving import text_graph

# pylint: disable-next=protected-access
_cc, _UNDERLINE = text_graph._char_class, text_graph._UNDERLINE
_BIG = 2 ** 62
_STRING = tf.TensorSpec([None], tf.string)


def _spec(dtype, shape=(None, None)):
  return tf.TensorSpec(shape, dtype)


class TextSpanReader(tf.Module):
  """(question, context) strings -> answer spans of the context, in the graph.

  Args:
    encoder: the `text_graph.TextEncoder` whose normalisation, tokenizer,
      special ids and max_seq_length the windows use.
    version_2_with_negative: the model's head (v1 logits or v2 beams).
    doc_stride, max_query_length: the windows (`encode`).
    n_best_size, max_answer_length: the decoding (`span_decode`).
  """

  def __init__(self, encoder, version_2_with_negative=False, doc_stride=128,
               max_query_length=64, n_best_size=20, max_answer_length=30,
               name=None):
    super().__init__(name=name)
    if encoder.max_seq_length < 4 or doc_stride < 1:
      raise ValueError(f"max_seq_length={encoder.max_seq_length}, doc_stride="
                       f"{doc_stride}: expected at least 4 and 1")
    self.encoder, self.kind = encoder, encoder.kind
    self.max_seq_length = encoder.max_seq_length
    self.v2, self.doc_stride = bool(version_2_with_negative), int(doc_stride)
    self.max_query_length, self.n_best_size, self.max_answer_length = (
        int(max_query_length), int(n_best_size), int(max_answer_length))
    self._encode_fn = self._decode_fn = None

  @classmethod
  def from_tokenizer(cls, tokenizer, max_seq_length, task_config, name=None):
    """The reader of a tokenizer and a span QA record's task_config."""
    # Its SentencePiece named apart from a TextEncoder's: in a loaded
    # SavedModel tf-text shares one model among resources of one name.
    encoder = text_graph.TextEncoder.from_tokenizer(
        tokenizer, max_seq_length, name=name or "span_reader")
    return cls(encoder, name=name, **{k: task_config[k] for k in (
        "version_2_with_negative", "doc_stride", "max_query_length",
        "n_best_size", "max_answer_length") if k in task_config})

  def input_specs(self):
    return [tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context")]

  # ------------------------------------------------------------ offsets
  def _normalize(self, text):
    """(normalised text [B], _Units of the original characters)."""
    chars = tf.strings.unicode_split(text, "UTF-8")
    nrows = tf.shape(text, out_type=tf.int64)[0]
    rows = chars.value_rowids()
    s = flat.arange(tf.size(rows)) - tf.gather(chars.row_splits, rows)
    units = flat.Units(chars.flat_values, s, s + 1, rows)
    for group in normalization.offset_groups(self.kind,
                                             self.encoder.do_lower_case):
      units = units.run(group, nrows)
    whole = self.encoder.normalize(text)
    joined = tf.strings.unsorted_segment_join(units.chars, units.rows, nrows)
    same = tf.equal(flat.length(whole), flat.length(joined))
    return tf.where(same, whole, joined), units

  def _pieces(self, text):
    """(ids, starts, ends, row_splits): flat `encode_with_offsets`."""
    norm, units = self._normalize(text)
    table = flat.CharTable(norm)
    if self.kind == "sentencepiece":
      ids, strings, b, e, splits = self._spm_pieces(norm, table)
    else:
      ids, b, e, splits = self._wordpiece_pieces(norm, table)
    rows = flat.rows_of(splits)
    row_end = tf.gather(table.splits, rows + 1)
    b = self._skip_spaces(table, b, e)
    size = tf.gather(flat.length(text), rows)

    def at(values, index, ok):  # values[index], else the text's length
      return tf.where(ok, tf.gather(flat.pad(values, 0),
                                    tf.where(ok, index, 0)),
                      size)
    start = at(units.s, b, b < row_end)
    end = tf.where(b < e, at(units.e, e - 1, b < e), at(units.e, b,
                                                         b < row_end))
    if self.kind == "sentencepiece":
      # A bare "▁" covers nothing: zero width at the next character.
      bare = tf.strings.regex_full_match(strings, f"{_UNDERLINE}+")
      point = at(units.s, e, e < row_end)
      start, end = tf.where(bare, point, start), tf.where(bare, point, end)
    return ids, start, end, splits

  @staticmethod
  def _skip_spaces(table, b, e):
    """b moved past the spaces (" ") at the start of [b, e)."""
    solid = tf.reshape(tf.where(tf.not_equal(table.codepoints, 32)), [-1])
    return tf.minimum(tf.gather(flat.pad(solid, _BIG), tf.searchsorted(
        solid, b, out_type=tf.int64)), e)

  def encode_with_offsets(self, text):
    """tf.string [B] -> RaggedTensors [B, (pieces)]: ids int32 (as
    `tokenizer.encode`, known differences aside), starts, ends int64."""
    ids, start, end, splits = self._pieces(text)
    return tuple(tf.RaggedTensor.from_row_splits(v, splits, validate=False)
                 for v in (ids, start, end))

  def _spm_pieces(self, norm, table):
    """SentencePiece, then the "9," re-split (`TextEncoder.number_pieces`),
    with spans (global characters of norm)."""
    sp = self.encoder._sp  # pylint: disable=protected-access
    ids, b, e = sp.tokenize_with_offsets(norm)
    ids, splits = ids.flat_values, ids.row_splits
    b, e = table.span(flat.rows_of(splits), b.flat_values, e.flat_values)
    strings = sp.id_to_string(ids)
    match = tf.strings.regex_full_match(strings, f"(?s).*{_cc('digit')},")
    mb, me = flat.mask(b, match), flat.mask(e, match)
    mb = self._skip_spaces(table, mb, me)
    number, (sub, sb, se, srow) = self.encoder.number_pieces(
        flat.mask(strings, match))
    local = flat.CharTable(number)
    sb, se = (v - tf.gather(local.splits, srow)
              for v in local.span(srow, sb, se))
    # Piece characters one to one (else NFKC changed them, "🄂" is "0,"):
    # each part its own characters, else the whole piece.
    exact = tf.equal(me - mb, flat.length(number) + 1)
    ex, at = tf.gather(exact, srow), tf.gather(mb, srow)
    pos = tf.reshape(tf.where(match), [-1])  # the piece of each match
    commas = tf.fill(tf.shape(pos), ",")
    sub_ids, comma_ids = (tf.cast(sp.string_to_id(v), ids.dtype)
                          for v in (sub, commas))
    columns = [(ids, sub_ids, comma_ids), (strings, sub, commas),
               (b, tf.where(ex, at + sb, at), tf.where(exact, me - 1, mb)),
               (e, tf.where(ex, at + se, tf.gather(me, srow)), me)]
    # The pieces in order, each match's replaced by its sub-pieces and ",".
    key = tf.concat([flat.mask(flat.arange(tf.size(match)), ~match) * 2,
                     tf.gather(pos, srow) * 2, pos * 2 + 1], 0)
    order = tf.argsort(key, stable=True)
    out = [tf.gather(tf.concat([flat.mask(old, ~match), new, comma], 0), order)
           for old, new, comma in columns]
    return (*out, tf.searchsorted(tf.gather(key, order) // 2, splits,
                                  out_type=tf.int64))

  def _wordpiece_pieces(self, norm, table):
    """`TextEncoder.wordpieces` with spans; a word that becomes [UNK] spans
    the whole word."""
    ids, wb, we, pb, pe, long = self.encoder.wordpieces(norm)
    word = ids.values.value_rowids()
    wb, we = tf.gather(wb.flat_values, word), tf.gather(we.flat_values, word)
    long = tf.gather(long, word)
    b = tf.where(long, wb, wb + pb.flat_values)
    e = tf.where(long, we, wb + pe.flat_values)
    splits = tf.gather(ids.values.row_splits, ids.row_splits)
    b, e = table.span(flat.rows_of(splits), b, e)
    return ids.flat_values, b, e, splits

  # ------------------------------------------------------------ windows
  def encode(self, question, context, context_of=None):
    """The original run_squad's windows of each (question, context) pair
    (`squad.make_windows` adds the labels). With context_of (int64 [b]), pair
    i is (question[i], context[context_of[i]]), each context tokenised once.
    Returns int32 [n, L] "input_ids", "input_mask", "segment_ids" and the
    bookkeeping of `decode`: "pair" int32 [n] (the pair of each window),
    "piece_spans" int32 [n, L, 2] (-1 -1 off the context), "is_max_context"
    bool [n, L]; and "window_start" int32 [n] (its first context piece),
    "question_pieces" int32 [b] (before the max_query_length cut).
    """
    if self._encode_fn is None:
      self._encode_fn = tf.function(self._encode, autograph=False,
                                    input_signature=[_STRING, _STRING,
                                                     _spec(tf.int64, [None])])
    if context_of is None:
      context_of = flat.arange(tf.shape(context)[0])
    return self._encode_fn(question, context, context_of)

  def _encode(self, question, context, context_of):
    length = self.max_seq_length
    b = tf.shape(question, out_type=tf.int64)[0]
    ids, starts, ends, splits = self._pieces(tf.concat([question, context], 0))
    rows = [tf.gather(tf.RaggedTensor.from_row_splits(v, splits, False),
                      tf.concat([flat.arange(b), b + context_of], 0))
            for v in (ids, starts, ends)]  # each pair's row of its context
    ids, starts, ends = (r.flat_values for r in rows)
    splits = rows[0].row_splits
    q_base, c_base = splits[:b], splits[b:-1]  # rows: questions, contexts
    q_len = tf.minimum(splits[1:b + 1] - q_base, self.max_query_length)
    num = splits[b + 1:] - c_base
    width = length - 3 - q_len  # context pieces per window
    check = tf.debugging.assert_positive(width, message=(
        f"a question of more than {length - 4} pieces leaves no room for the "
        f"context in max_seq_length {length} (lower max_query_length)"))
    with tf.control_dependencies([check]):
      step = tf.minimum(width, self.doc_stride)
    pair, k = flat.spread(
        1 + tf.maximum(num * 0, (num - width + step - 1) // step))
    start = k * tf.gather(step, pair)
    size = tf.minimum(tf.gather(num, pair) - start, tf.gather(width, pair))
    j = flat.arange(length)[None, :]
    ql, sz = tf.gather(q_len, pair)[:, None], size[:, None]
    at = j - ql - 2  # position among the window's context pieces
    in_ctx = (at >= 0) & (at < sz)
    piece = tf.where(in_ctx, tf.gather(c_base, pair)[:, None] +
                     start[:, None] + at, tf.size(ids, out_type=tf.int64))
    in_q = (j >= 1) & (j <= ql)
    from_q = tf.where(in_q, tf.gather(q_base, pair)[:, None] + j - 1, 0)
    sep = tf.equal(j, ql + 1) | tf.equal(j, ql + 2 + sz)
    special = self.encoder
    ids = flat.pad(ids, special.pad_id)
    input_ids = tf.where(in_ctx, tf.gather(ids, piece), tf.where(
        in_q, tf.gather(ids, from_q), tf.where(
            sep, special.sep_id, tf.where(tf.equal(j, 0), special.cls_id,
                                          special.pad_id))))
    input_mask = j <= ql + 2 + sz
    # The original's max-context score (float64 as numpy's); the first
    # window wins a tie.
    score = tf.cast(tf.minimum(at, sz - 1 - at), tf.float64) + 0.01 * tf.cast(
        sz, tf.float64)
    window = tf.broadcast_to(flat.arange(tf.size(pair))[:, None], tf.shape(at))
    total = tf.size(ids, out_type=tf.int64) + 1
    best = tf.math.unsorted_segment_max(score, piece, total)
    owner = tf.math.unsorted_segment_min(tf.where(tf.equal(
        score, tf.gather(best, piece)), window, _BIG), piece, total)
    spans = tf.stack([tf.gather(flat.pad(v, -1), piece)
                      for v in (starts, ends)],
                     -1)
    out = {F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask,
           F.SEGMENT_IDS: input_mask & (j >= ql + 2), "pair": pair,
           "piece_spans": spans, "window_start": start,
           "question_pieces": splits[1:b + 1] - q_base}
    return {**{k: tf.cast(v, tf.int32) for k, v in out.items()},
            "is_max_context": in_ctx & tf.equal(tf.gather(owner, piece),
                                                window)}

  # ------------------------------------------------------------ decode
  def decode(self, context, windows, outputs):
    """The best `span_decode` candidate of each pair (see `__call__`) of
    contexts tf.string [b], `encode`'s windows and the model's outputs."""
    if self._decode_fn is None:
      f32, i32 = _spec(tf.float32), _spec(tf.int32)
      heads = ([f32, i32, f32, i32, _spec(tf.float32, [None])] if self.v2
               else [f32, f32])
      fixed = [_STRING, _spec(tf.int32, [None]),
               _spec(tf.int32, [None, None, 2]), _spec(tf.bool)]
      self._decode_fn = tf.function(self._decode, autograph=False,
                                    input_signature=fixed + heads)
    heads = [tf.cast(outputs[n], tf.int32 if n.endswith("index")
                     else tf.float32) for n in span_model.head_outputs(self.v2)]
    return self._decode_fn(context, windows["pair"], windows["piece_spans"],
                           windows["is_max_context"], *heads)

  def _decode(self, context, pair, spans, is_max, *heads):
    b = tf.shape(context, out_type=tf.int64)[0]
    pair = tf.cast(pair, tf.int64)
    if self.v2:
      start_lp, starts, end_lp, ends, cls = heads
      k1 = tf.shape(starts)[1]
      ends = tf.reshape(ends, [-1, k1, tf.shape(ends)[1] // k1])
      end_lp = tf.reshape(end_lp, tf.shape(ends))
    else:  # the top n_best_size starts x ends of each window
      k = tf.minimum(self.n_best_size, tf.shape(heads[0])[1])
      (start_lp, starts), (end_lp, ends) = (tf.math.top_k(h, k) for h in heads)
      end_lp, ends = end_lp[:, None], ends[:, None] + 0 * starts[:, :, None]
    piece = spans[:, :, 0] >= 0
    ok = (flat.at(piece, starts) & flat.at(is_max, starts))[:, :, None] & (
        flat.at(piece, ends) & (ends >= starts[:, :, None]) &
        (ends - starts[:, :, None] < self.max_answer_length))
    # Python's float sums and its stable sort: the first of equal scores
    # (window, start beam, end beam order) wins.
    score = tf.cast(start_lp, tf.float64)[:, :, None] + tf.cast(end_lp,
                                                                tf.float64)
    per = tf.cast(tf.shape(ok)[1] * tf.shape(ok)[2], tf.int64)
    scores = tf.reshape(tf.where(ok, score, score.dtype.min), [-1])
    segments = tf.repeat(pair, per)
    best = tf.math.unsorted_segment_max(scores, segments, b)
    pick = tf.math.unsorted_segment_min(tf.where(tf.equal(scores, tf.gather(
        best, segments)), flat.arange(tf.size(scores)), _BIG), segments, b)
    found = tf.math.unsorted_segment_max(tf.cast(tf.reshape(
        ok, [-1]), tf.int32), segments, b) > 0
    pick = tf.where(found, pick, 0)
    w = pick // per
    s = tf.gather(tf.reshape(tf.broadcast_to(starts[:, :, None], tf.shape(
        ends)), [-1]), pick)
    e = tf.gather(tf.reshape(ends, [-1]), pick)
    char_s = tf.gather_nd(spans[:, :, 0], tf.stack([w, tf.cast(s, tf.int64)],
                                                   1))
    char_e = tf.gather_nd(spans[:, :, 1], tf.stack([w, tf.cast(e, tf.int64)],
                                                   1))
    # Surrounding whitespace stripped, as span_decode's str.strip.
    at = tf.where(found, char_s, 0)
    raw = tf.strings.substr(context, at, tf.where(found, char_e - at, 0),
                            unit="UTF8_CHAR")
    lead = tf.strings.regex_replace(raw, f"^{_cc('space')}+", "")
    text = tf.strings.regex_replace(lead, f"{_cc('space')}+$", "")
    start = tf.where(found, at + tf.cast(
        flat.length(raw) - flat.length(lead), tf.int32), -1)
    end = tf.where(found, start + tf.cast(flat.length(text), tf.int32), -1)
    out = {"answer": text, "start": start, "end": end,
           # No span: the score of span_decode's "" entry.
           "score": tf.cast(tf.where(found, best, -2e6 if self.v2 else 0.0),
                            tf.float32)}
    if self.v2:
      out["no_answer_score"] = tf.math.unsorted_segment_min(cls, pair, b)
    return out

  def __call__(self, question, context, run):
    """Answers a batch of b (question, context) pairs.

    run: features (int32 [n_windows, max_seq_length] encoder inputs) -> the
    model's output dict. Returns "answer" string [b] (a slice of the
    context; "" when no span is allowed), "start", "end" int32 [b] (code
    points, end exclusive; -1 -1 then), "score" float32 [b] (v1: start +
    end logit; v2: start + end log prob) and, v2, "no_answer_score" float32
    [b]: the least cls_logits over the pair's windows (the null odds)."""
    windows = self.encode(question, context)
    outputs = run({n: windows[n] for n in F.ENCODER_INPUTS})
    return self.decode(context, windows, outputs)
