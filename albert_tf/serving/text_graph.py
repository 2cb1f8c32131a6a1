"""In-graph tokenization: strings -> `input_ids`/`input_mask`/`segment_ids`.

`TextEncoder` is the sentence(-pair) encoder: the normalisation and
tokenizer of `albert_tf.data.tokenization` (SentencePiece or WordPiece) and
the original's [CLS] a [SEP] (b [SEP]) packing, longest first cut, in
TensorFlow and tensorflow-text ops. serve_text runs it, and classification's
fine-tuning and every Python caller of that encoding run the same graph
(`encode_texts`). The tagger, multiple-choice and fill-mask graphs build on
its `tokenize`; span QA's offset-keeping reader (`span_graph`) on its
`wordpieces` and `number_pieces`.

The normalisation is the graph side of `albert_tf.data.normalization`'s
table of steps (pretraining's data prep runs the Python side); the
character classes are generated from the Python predicates as RE2 classes
(tests/test_preprocessing_parity.py compares both). Known differences: TF
Text's SentencePiece breaks exact Viterbi ties otherwise in rare strings
("1,0000"); TF's case tables (Unicode 13) leave 40 capitals of Unicode 14
uppercase (Vithkuqi, Latin Extended-D, U+2C2F; no CJK, Latin-1, Cyrillic
or Greek).

    encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length=128)
    features = encoder(tf.constant(["很好用"]))   # dict of int32 [1, 128]

With `length_buckets` (e.g. (16, 32, 64)) a batch is padded to the smallest
bucket that holds its longest row (["很好用"] to 16); the cut stays at
max_seq_length, and padded positions are masked, so the outputs for the
real tokens are those of full padding, for a fraction of the compute.
Building a `TextEncoder` (or loading a SavedModel with one) needs tf-text.
"""

import collections
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.core import features as F
from albert_tf.core import quiet_logs
from albert_tf.data import normalization
from albert_tf.data import tokenization

_UNDERLINE = tokenization.SPM_UNDERLINE
_re2_class = normalization.re2_class  # tagging_graph's name for it
# Predicates beyond the normalisation table's: the tokenizer's own.
_SPLIT_PREDICATES = {"digit": str.isdigit,
                     "punctuation": tokenization.is_punctuation}


def _char_class(name):
  """RE2 class of the characters a Python predicate selects, by name: one of
  `normalization.CHAR_PREDICATES` or "digit" / "punctuation"."""
  if name in _SPLIT_PREDICATES:
    return normalization.predicate_class(_SPLIT_PREDICATES[name])
  return normalization.char_class(name)


class TextEncoder(tf.Module):
  """Strings -> packed int32 model inputs, in the graph.

  Args:
    kind: "sentencepiece" (model_proto: the serialized .model bytes) or
      "wordpiece" (vocab: list of tokens, index = id).
    max_seq_length: length of every output row.
    cls_id, sep_id, pad_id: special token ids.
    do_lower_case: lowercase and strip accents (see `normalize`).
    unk_token: the WordPiece unknown token.
    length_buckets: the lengths a batch may be padded to (`bucket_lengths`);
      default: max_seq_length alone (every row that long).
  """

  def __init__(self, kind, max_seq_length, cls_id, sep_id, pad_id,
               model_proto=None, vocab=None, do_lower_case=True,
               unk_token="[UNK]", name=None, length_buckets=None):
    super().__init__(name=name)
    if kind not in ("sentencepiece", "wordpiece"):
      raise ValueError(f"kind must be 'sentencepiece' or 'wordpiece', got "
                       f"{kind!r}")
    if max_seq_length < 3:
      raise ValueError(f"max_seq_length={max_seq_length} leaves no room for "
                       "text (needs >= 3)")
    self.kind = kind
    self.max_seq_length = int(max_seq_length)
    self.length_buckets = bucket_lengths(length_buckets, self.max_seq_length)
    self.cls_id, self.sep_id, self.pad_id = int(cls_id), int(sep_id), int(pad_id)
    self.do_lower_case = bool(do_lower_case)
    self._encode_single = self._encode_pair = None
    if kind == "sentencepiece":
      if model_proto is None:
        raise ValueError("kind='sentencepiece' needs model_proto")
      # tf-text 2.21: in a loaded SavedModel, SentencepieceTokenizers whose
      # resources have the same node name share one model (the first one
      # created); a named encoder names its tokenizer so that two encoders
      # of different models in one SavedModel stay apart.
      self._sp = tf_text.SentencepieceTokenizer(
          model=model_proto, out_type=tf.int32, add_bos=False, add_eos=False,
          name=f"{name}_sentencepiece" if name else None)
    else:
      if not vocab:
        raise ValueError("kind='wordpiece' needs a vocab list")
      punct = _char_class("punctuation")
      cjk = "[" + "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}"
                          for a, b in tokenization.CJK_RANGES) + "]"
      self._split_pattern = f"{_char_class('space')}|{punct}|{cjk}"
      self._keep_pattern = f"{punct}|{cjk}"
      # BERT's limit is 100 characters (tokenize() checks), not bytes. An
      # empty line of vocab.txt holds an id no piece maps to; it gets a name
      # no word can match (FastWordpieceTokenizer refuses empty tokens).
      vocab = [token or f"[empty vocab line {i + 1}]"
               for i, token in enumerate(vocab)]
      self._wordpiece = tf_text.FastWordpieceTokenizer(
          vocab=vocab, suffix_indicator="##", max_bytes_per_word=400,
          token_out_type=tf.int32, unknown_token=unk_token,
          no_pretokenization=True, support_detokenization=False)
      self._unk_token = unk_token

  @classmethod
  def from_tokenizer(cls, tokenizer, max_seq_length, name=None,
                     length_buckets=None):
    """Builds the in-graph twin of an `albert_tf.data.tokenization` tokenizer."""
    kwargs = dict(kind=tokenizer.kind, max_seq_length=max_seq_length,
                  length_buckets=length_buckets,
                  cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                  pad_id=tokenizer.pad_id,
                  unk_token=tokenizer.convert_ids_to_tokens([tokenizer.unk_id])[0],
                  do_lower_case=tokenizer.do_lower_case,
                  name=name)
    if tokenizer.kind == "sentencepiece":
      with open(tokenizer.model_file, "rb") as f:
        kwargs["model_proto"] = f.read()
    else:
      kwargs["vocab"] = tokenizer.convert_ids_to_tokens(
          list(range(tokenizer.vocab_size)))
    return cls(**kwargs)

  def normalize(self, text):
    """tf.string [batch] -> normalised: `normalization.normalize_graph`."""
    return normalization.normalize_graph(text, self.kind, self.do_lower_case)

  # ------------------------------------------------------------ tokenize
  def tokenize(self, text):
    """tf.string [batch] -> int32 RaggedTensor [batch, (tokens)] of ids."""
    text = self.normalize(text)
    if self.kind == "sentencepiece":
      return self._split_digit_commas(self._sp.tokenize(text))
    return self.wordpieces(text)[0].merge_dims(1, 2)

  def wordpieces(self, text):
    """BERT's split of normalised text [batch], then WordPiece, a word of
    over 100 characters one [UNK]: (ids [batch, (words), (pieces)], word
    byte starts, ends [batch, (words)], piece byte starts, ends in their
    word [words, (pieces)], bool [words]: the word was that long)."""
    words, starts, ends = tf_text.regex_split_with_offsets(
        text, self._split_pattern, self._keep_pattern)
    long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > 100
    ids, b, e = self._wordpiece.tokenize_with_offsets(
        tf.where(long, self._unk_token, words.flat_values))
    return words.with_flat_values(ids), starts, ends, b, e, long

  def number_pieces(self, matched):
    """The original `encode_pieces` rule for pieces "…9," (tf.string [m]):
    each one's text without "▁" and "," encoded again, the leading "▁"
    removed inside a word (the "," follows). Returns (that text [m], [its
    pieces' strings, byte starts and ends in it, rows in [0, m)]), flat."""
    number = tf.strings.regex_replace(
        tf.strings.regex_replace(matched, ",$", ""), _UNDERLINE, "")
    ids, starts, ends = self._sp.tokenize_with_offsets(number)
    rows = tf.cast(ids.value_rowids(), tf.int64)
    sub = self._sp.id_to_string(ids.flat_values)
    first = tf.not_equal(rows, tf.pad(rows[:-1], [[1, 0]], constant_values=-1))
    in_word = tf.logical_not(tf.strings.regex_full_match(
        matched, f"(?s){_UNDERLINE}.*"))
    fix = first & tf.gather(in_word, rows) & tf.strings.regex_full_match(
        sub, f"(?s){_UNDERLINE}.*")
    sub = tf.where(fix, tf.strings.regex_replace(sub, f"^{_UNDERLINE}", ""),
                   sub)
    keep = tf.not_equal(sub, "")  # a bare "▁" goes
    return number, [tf.boolean_mask(v, keep) for v in (
        sub, starts.flat_values, ends.flat_values, rows)]

  def _split_digit_commas(self, ids):
    """ids (int32 RaggedTensor [batch, (pieces)]) with each piece "…9,"
    replaced by its `number_pieces` and ","."""
    flat_ids = ids.flat_values
    pieces = self._sp.id_to_string(flat_ids)
    match = tf.strings.regex_full_match(
        pieces, "(?s).*" + _char_class("digit") + ",")
    sub, _, _, rows = self.number_pieces(tf.boolean_mask(pieces, match))[1]
    m = tf.reduce_sum(tf.cast(match, tf.int64))
    sub = self._sp.string_to_id(tf.concat([tf.RaggedTensor.from_value_rowids(
        sub, rows, nrows=m, validate=False), tf.RaggedTensor.from_tensor(
            tf.fill([m, 1], ","), row_splits_dtype=tf.int64)], axis=1))
    # Rows 0..n-1: the original pieces; rows n..n+m-1: the replacements.
    n = tf.shape(flat_ids, out_type=tf.int64)[0]
    candidates = tf.concat([tf.RaggedTensor.from_tensor(flat_ids[:, None]),
                            tf.cast(sub, flat_ids.dtype)], axis=0)
    pick = tf.where(match, n + tf.cumsum(tf.cast(match, tf.int64)) - 1,
                    tf.range(n))
    return ids.with_flat_values(tf.gather(candidates, pick)).merge_dims(1, 2)

  # ------------------------------------------------------------ pack
  def __call__(self, text, text_b=None):
    """Encodes a batch: [CLS] a [SEP] (b [SEP]), cut longest first.

    text, text_b: tf.string [batch]. Returns {"input_ids", "input_mask",
    "segment_ids"}: int32 [batch, length], length the smallest of
    `length_buckets` that holds the longest packed row (max_seq_length
    without buckets).
    """
    # One tf.function per arity, made on first use (a SavedModel traces all
    # it holds, the slow part of an export); no autograph: nothing branches
    # on tensors, and converting took a third of an export's time.
    spec = tf.TensorSpec([None], tf.string)
    if text_b is None:
      if self._encode_single is None:
        self._encode_single = tf.function(
            lambda a: self._encode(a, None), input_signature=[spec],
            autograph=False)
      return self._encode_single(text)
    if self._encode_pair is None:
      self._encode_pair = tf.function(self._encode, autograph=False,
                                      input_signature=[spec, spec])
    return self._encode_pair(text, text_b)

  def _encode(self, text, text_b):
    input_ids, segment_ids, _ = self.pack(text, text_b)
    return self.pad(input_ids, segment_ids)

  def pack(self, text, text_b=None):
    """tf.string [batch] text (and text_b) -> (input_ids, segment_ids): int
    RaggedTensors [batch, (tokens)] of [CLS] a [SEP] (b [SEP]) rows cut to
    max_seq_length, unpadded, and int64 [batch]: the pieces each row lost."""
    length = self.max_seq_length
    ids_a = self.tokenize(text)
    len_a = ids_a.row_lengths()
    if text_b is None:
      keep_a = tf.minimum(len_a, length - 2)
      segments = [_keep_first(ids_a, keep_a)]
      removed = len_a - keep_a
    else:
      ids_b = self.tokenize(text_b)
      budget = length - 3
      # The original _truncate_seq_pair pops from the longer side (ties: b):
      # b keeps max(budget - len_a, budget // 2), a keeps the rest.
      len_b = ids_b.row_lengths()
      keep_b = tf.minimum(len_b, tf.maximum(budget - len_a, budget // 2))
      keep_a = tf.minimum(len_a, budget - keep_b)
      segments = [_keep_first(ids_a, keep_a), _keep_first(ids_b, keep_b)]
      removed = len_a - keep_a + len_b - keep_b
    input_ids, segment_ids = tf_text.combine_segments(
        segments, start_of_sequence_id=self.cls_id,
        end_of_segment_id=self.sep_id)
    return input_ids, segment_ids, removed

  # ------------------------------------------------------------ pad
  def pad(self, input_ids, segment_ids=None):
    """Packed rows -> the model inputs, padded to the smallest of
    `length_buckets` that holds every row (an empty batch: the smallest).

    input_ids, segment_ids: int RaggedTensors [batch, (tokens)] of rows no
    longer than max_seq_length ([CLS] ... [SEP] already in); segment_ids
    None: all 0. Returns {"input_ids", "input_mask", "segment_ids"}: int32
    [batch, length].
    """
    # One bucket: a Python int keeps full padding's static shape.
    length = self.max_seq_length
    if len(self.length_buckets) > 1:
      buckets = tf.constant(self.length_buckets, tf.int64)
      longest = tf.reduce_max(tf.concat([tf.zeros([1], tf.int64), tf.cast(
          input_ids.row_lengths(), tf.int64)], 0))
      length = tf.reduce_min(tf.boolean_mask(buckets, buckets >= longest))
    input_ids, input_mask = tf_text.pad_model_inputs(
        input_ids, max_seq_length=length, pad_value=self.pad_id)
    if segment_ids is None:
      segment_ids = tf.zeros_like(input_ids)
    else:
      segment_ids, _ = tf_text.pad_model_inputs(
          segment_ids, max_seq_length=length, pad_value=0)
    return {F.INPUT_IDS: tf.cast(input_ids, tf.int32),
            F.INPUT_MASK: tf.cast(input_mask, tf.int32),
            F.SEGMENT_IDS: tf.cast(segment_ids, tf.int32)}


_KEPT = collections.OrderedDict()


def kept(key, build):
  """The tf.Module `build()` makes, kept in this process under key (the
  8 most recently used): a tf-text graph is traced once per process, not per
  split or call. Built again when TF has freed its SentencePiece models
  (`alive`). Keys start with the graph's kind and the tokenizer's
  `fingerprint`, so tokenizers read twice from one file share a module."""
  module = _KEPT.get(key)
  if module is None or not alive(module):
    module = _KEPT[key] = build()
    while len(_KEPT) > 8:
      _KEPT.popitem(last=False)
  _KEPT.move_to_end(key)
  return module


def shared_encoder(tokenizer, max_seq_length):
  """The `TextEncoder` of `tokenizer` at max_seq_length (no length buckets),
  kept (`kept`)."""
  return kept(("text", tokenizer.fingerprint, int(max_seq_length)),
              lambda: TextEncoder.from_tokenizer(tokenizer, max_seq_length))


def alive(module):
  """Whether TF still holds the SentencePiece models `module` reads: tf-text
  builds one eagerly in a kernel that owns it, and tf.random.set_seed
  (keras.utils.set_random_seed, as fine-tuning starts) clears the kernels.
  A module kept between calls is checked, and built again if not."""
  try:
    for sp in module.submodules:
      if isinstance(sp, tf_text.SentencepieceTokenizer):
        sp.vocab_size()
  except tf.errors.NotFoundError:
    return False
  return True


def encode_texts(encoder, texts, texts_b=None, batch_size=256):
  """The model inputs of many examples, `encoder`'s graph run batch by batch
  (fine-tuning, the ONNX and TFLite runners, the export checks).

  Args:
    encoder: a `TextEncoder`; rows are padded to its max_seq_length.
    texts: strings; texts_b: per example a string or None ([CLS] a [SEP]
      alone), or None for all.
  Returns ({input_ids, input_mask, segment_ids: int32 numpy [n,
  max_seq_length]}, int numpy [n]: the pieces each example lost to the cut).
  """
  texts = list(texts)
  texts_b = list(texts_b) if texts_b is not None else [None] * len(texts)
  if len(texts_b) != len(texts):
    raise ValueError(f"{len(texts_b)} second texts for {len(texts)} texts")
  with quiet_logs.cpp_lines_hidden():  # oneDNN's int64 note, once
    n, length = len(texts), encoder.max_seq_length
    features = {k: np.zeros([n, length], np.int32) for k in F.ENCODER_INPUTS}
    features[F.INPUT_IDS][:] = encoder.pad_id
    removed = np.zeros([n], np.int64)
    for pair in (False, True):
      rows = [i for i, b in enumerate(texts_b) if (b is not None) == pair]
      columns = (texts, texts_b) if pair else (texts,)
      for start in range(0, len(rows), batch_size):
        index = rows[start:start + batch_size]
        padded, cut = _counted(encoder, pair)(
            *[tf.constant([c[i] for i in index], tf.string) for c in columns])
        for k in F.ENCODER_INPUTS:
          features[k][index, :padded[k].shape[1]] = padded[k]
        removed[index] = cut
  return features, removed


_COUNTED = weakref.WeakKeyDictionary()


def _counted(encoder, pair):
  """encoder's pack + pad, traced once per encoder and arity (kept outside:
  a SavedModel saves the tf.functions a module holds)."""
  functions = _COUNTED.setdefault(encoder, {})
  if pair not in functions:
    def encode(*texts):
      input_ids, segment_ids, cut = encoder.pack(*texts)
      return encoder.pad(input_ids, segment_ids), cut
    functions[pair] = tf.function(encode, autograph=False, input_signature=[
        tf.TensorSpec([None], tf.string)] * (1 + pair))
  return functions[pair]


def bucket_lengths(length_buckets, max_seq_length):
  """The sorted lengths a batch may be padded to, max_seq_length the last.

  length_buckets: ints in [2, max_seq_length] (a row holds [CLS] and [SEP]
  at least), any order; None or empty: max_seq_length alone.
  Raises:
    ValueError: a bucket outside [2, max_seq_length].
  """
  buckets = sorted({int(b) for b in (length_buckets or ())})
  bad = [b for b in buckets if not 2 <= b <= max_seq_length]
  if bad:
    raise ValueError(f"length_buckets {bad} outside [2, max_seq_length="
                     f"{max_seq_length}]: a batch is padded to a bucket and "
                     "cut at max_seq_length")
  return tuple(b for b in buckets if b < max_seq_length) + (max_seq_length,)


def _keep_first(ragged, counts):
  """The first counts[i] items of each row of a 2-D RaggedTensor."""
  positions = tf.ragged.range(ragged.row_lengths())
  keep = positions < tf.expand_dims(tf.cast(counts, positions.dtype), 1)
  return tf.ragged.boolean_mask(ragged, keep)
