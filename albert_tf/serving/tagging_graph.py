"""The token tagger's one preprocessor, in the graph: training and serving.

`TextTagger` splits each token into pieces with the `text_graph.TextEncoder`
of the tagger's tokenizer (`token_pieces`) for every caller: fine-tuning
(`ner_data.encode_sentences` packs `piece_ids` into windows); serve_text
(`__call__`: raw text -> tokens with code-point offsets (`split`) -> pieces
-> one window -> the model's tag ids -> entities and character tags,
`decode`); and, from Python around a model without TF Text (ONNX, TFLite,
the export checks), `encode_batch`, `tag_batch` and `ids_predictor`.
Building or loading one needs `import tensorflow_text`.
"""

import functools
import sys
import unicodedata
import weakref

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.core import features as F
from albert_tf.data import tokenization
from albert_tf.serving import text_graph

# pylint: disable=protected-access  (text_graph's character classes)

TOKEN_LEVELS = ("char", "word")


def check_token_level(token_level):
  if token_level not in TOKEN_LEVELS:
    raise ValueError(f"token_level must be one of {TOKEN_LEVELS}, got "
                     f"{token_level!r}")


def is_word_char(char: str) -> bool:
  """True for a character that joins its neighbours into one "word" token:
  a letter, digit or combining mark (so "café" in NFD stays one word) that is
  not a CJK ideograph."""
  return ((char.isalnum() or unicodedata.category(char).startswith("M"))
          and not tokenization.is_cjk_char(char))


@functools.lru_cache(maxsize=None)
def _word_char_class():
  """RE2 class of `is_word_char` (letters, digits, marks; no CJK)."""
  return text_graph._re2_class(
      cp for cp in range(0, sys.maxunicode + 1)
      if not 0xD800 <= cp <= 0xDFFF and is_word_char(chr(cp)))


def _shift_right(values, row_start, fill):
  """values[i - 1] (fill at the first item of each row), flat 1-D."""
  shifted = tf.concat([tf.fill([1], fill), values[:-1]], axis=0)[
      :tf.shape(values)[0]]
  return tf.where(row_start, tf.fill(tf.shape(values), fill), shifted)


def split(text, token_level):
  """tf.string [batch] -> the tokens of each text: RaggedTensors [batch,
  (tokens)] `tokens`, `starts`, `ends` (int64 code points, end exclusive)
  and `chars` [batch, (characters)].

  token_level "char": every non-whitespace character is a token (People's
  Daily NER). "word": a run of `is_word_char` characters is one token
  ("iPhone", "2024", "１５"); any other non-whitespace character is one
  alone (a CJK ideograph, a punctuation mark). Characters are code points:
  an emoji with a skin-tone modifier is two tokens.
  """
  chars = tf.strings.unicode_split(text, "UTF-8")
  flat = chars.flat_values
  n = tf.shape(flat, out_type=tf.int64)[0]
  index = tf.range(n)
  char_row = chars.value_rowids()
  row_start = tf.equal(index, tf.gather(chars.row_splits, char_row))
  space = tf.strings.regex_full_match(flat, text_graph._char_class("space"))
  starts_token = tf.logical_not(space)
  if token_level == "word":
    word = tf.strings.regex_full_match(flat, _word_char_class())
    # A word character right after another one continues its token.
    starts_token &= tf.logical_not(
        word & _shift_right(word, row_start, False))
  # Every non-space character belongs to the token started last.
  member = tf.logical_not(space)
  token_of_char = tf.boolean_mask(tf.cumsum(tf.cast(starts_token, tf.int64))
                                  - 1, member)
  num_tokens = tf.reduce_sum(tf.cast(starts_token, tf.int64))
  first_char = tf.boolean_mask(index, starts_token)
  strings = tf.strings.unsorted_segment_join(
      tf.boolean_mask(flat, member), token_of_char, num_tokens)
  last_char = tf.math.unsorted_segment_max(
      tf.boolean_mask(index, member), token_of_char, num_tokens)
  token_row = tf.gather(char_row, first_char)
  row_offset = tf.gather(chars.row_splits, token_row)
  nrows = tf.shape(text, out_type=tf.int64)[0]

  def per_row(values):
    return tf.RaggedTensor.from_value_rowids(values, token_row, nrows=nrows,
                                             validate=False)
  return {"tokens": per_row(strings),
          "starts": per_row(first_char - row_offset),
          "ends": per_row(last_char + 1 - row_offset), "chars": chars}


class TextTagger(tf.Module):
  """Tokens -> pieces -> model inputs; tag ids -> entities, in the graph
  (offsets: code points of the UTF-8 input).

  Args:
    encoder: the tokenizer's `text_graph.TextEncoder`: its `tokenize`, its
      max_seq_length (the cut) and its `pad` (to a length bucket, if any).
    token_level: "char" or "word" (`split`).
    label_list: the model's tags, index = tag id: "O", "B-X", "I-X".
    unk_id: the piece of a token that has none.
    underline_id: SentencePiece's bare word-start piece "▁", dropped in front
      of a token's other pieces; -1 if none.
  """

  def __init__(self, encoder, token_level, label_list, unk_id,
               underline_id=-1, name=None):
    super().__init__(name=name)
    check_token_level(token_level)
    for tag in label_list:
      if tag != "O" and (tag[:2] not in ("B-", "I-") or len(tag) < 3):
        raise ValueError(f"tag {tag!r}: the tagger's labels must be BIO "
                         "(O, B-<type>, I-<type>)")
    self._types = list(dict.fromkeys(t[2:] for t in label_list if t != "O"))
    self._prefixes = [0 if t == "O" else 1 if t[0] == "B" else 2
                      for t in label_list]
    self._type_ids = [-1 if t == "O" else self._types.index(t[2:])
                      for t in label_list]
    self.encoder, self.token_level = encoder, token_level
    self.label_list = list(label_list)
    self.unk_id, self.underline_id = int(unk_id), int(underline_id)

  @classmethod
  def from_tokenizer(cls, tokenizer, max_seq_length, token_level, label_list,
                     name=None, length_buckets=None):
    """length_buckets: `text_graph.TextEncoder`'s (default: none)."""
    underline = tokenizer.convert_tokens_to_ids([text_graph._UNDERLINE])[0]
    if tokenizer.convert_ids_to_tokens([underline])[0] != text_graph._UNDERLINE:
      underline = -1  # no "▁" piece in the vocabulary
    encoder = text_graph.TextEncoder.from_tokenizer(
        tokenizer, max_seq_length, length_buckets=length_buckets)
    return cls(encoder, token_level, label_list, tokenizer.unk_id, underline,
               name=name)

  def token_pieces(self, tokens):
    """tf.string [n] tokens -> (int64 RaggedTensor [n, (pieces)], bool [n]):
    each token's pieces, never empty (a bare "▁" before its other pieces is
    dropped: it would double a character-level sentence; a token that
    normalises to nothing is one unknown piece, the bool True)."""
    pieces = tf.cast(self.encoder.tokenize(tokens), tf.int64)
    lengths = pieces.row_lengths()
    if self.underline_id >= 0:
      drop = (lengths > 1) & tf.equal(
          pieces[:, :1].to_tensor(default_value=-1, shape=[None, 1])[:, 0],
          self.underline_id)
      keep = tf.logical_not(
          tf.equal(tf.ragged.range(lengths), 0) & tf.expand_dims(drop, 1))
      pieces = tf.ragged.boolean_mask(pieces, keep)
    empty = tf.equal(pieces.row_lengths(), 0)
    pieces = tf.concat([pieces, tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int64))],
                tf.constant(self.unk_id, tf.int64)),
        tf.cast(empty, tf.int64), validate=False)], axis=1)
    return pieces, empty

  def encode(self, text):
    """tf.string [batch] -> (features, tokens): one window per text.

    features: int32 [batch, length] encoder inputs, [CLS] the tokens'
    pieces cut after max_seq_length - 2, [SEP], padded to the encoder's
    bucket of the longest row: fine-tuning's first window. tokens: `split`'s
    plus `positions` (int64 [batch, (tokens)]: each token's first piece in
    the inputs) and `tagged` (the same inside the cut: the token's tag).
    """
    tokens = split(text, self.token_level)
    pieces, _ = self.token_pieces(tokens["tokens"].flat_values)
    lengths = pieces.row_lengths()
    # Offset of each token's first piece in its text's pieces.
    counts = tokens["tokens"].with_flat_values(lengths)
    offsets = tf.cumsum(counts, axis=1, exclusive=True)
    max_pieces = self.encoder.max_seq_length - 2
    tokens["positions"] = offsets + 1
    tokens["tagged"] = offsets < max_pieces
    per_text = tf.RaggedTensor.from_row_splits(
        pieces, tokens["tokens"].row_splits, validate=False).merge_dims(1, 2)
    input_ids, _ = tf_text.combine_segments(
        [per_text[:, :max_pieces]], start_of_sequence_id=self.encoder.cls_id,
        end_of_segment_id=self.encoder.sep_id)
    # A tagged first piece is inside its row and bucket: decode stays in.
    return self.encoder.pad(input_ids), tokens

  def decode(self, text, tokens, tag_ids):
    """The model's tag ids [batch, length] on `encode`'s features ->
    `__call__`'s dict: entities as conlleval reads the tokens' BIO tags,
    from the first character of the first token to the last of the last;
    character tags B-X/I-X over an entity (whitespace inside too), O
    elsewhere, "" on characters of untagged tokens."""
    nrows = tf.shape(text, out_type=tf.int64)[0]
    rows = tokens["tokens"].value_rowids()
    tagged = tokens["tagged"].flat_values
    index = tf.range(tf.shape(rows, out_type=tf.int64)[0])
    row_start = tf.equal(index, tf.gather(tokens["tokens"].row_splits, rows))
    # The tag of a token is the model's tag at its first piece (-1: untagged).
    positions = tf.where(tagged, tokens["positions"].flat_values, 0)
    tag = tf.gather_nd(tf.cast(tag_ids, tf.int64),
                       tf.stack([rows, positions], axis=1))
    tag = tf.where(tagged, tag, -1)
    safe = tf.maximum(tag, 0)
    prefix = tf.where(tagged, tf.gather(tf.constant(self._prefixes, tf.int64),
                                        safe), 0)
    kind = tf.where(prefix > 0, tf.gather(tf.constant(self._type_ids,
                                                      tf.int64), safe), -1)
    # conlleval: I-X continues an X before it; any other non-O tag starts one.
    continues = tf.equal(prefix, 2) & tf.equal(
        kind, _shift_right(kind, row_start, tf.constant(-1, tf.int64)))
    begins = (prefix > 0) & tf.logical_not(continues)
    inside = prefix > 0
    entity_of_token = tf.cumsum(tf.cast(begins, tf.int64)) - 1
    num_entities = tf.reduce_sum(tf.cast(begins, tf.int64))
    first_token = tf.boolean_mask(index, begins)
    last_token = tf.math.unsorted_segment_max(
        tf.boolean_mask(index, inside),
        tf.boolean_mask(entity_of_token, inside), num_entities)
    entity_row = tf.gather(rows, first_token)
    entity_kind = tf.gather(kind, first_token)
    entity_start = tf.gather(tokens["starts"].flat_values, first_token)
    entity_end = tf.gather(tokens["ends"].flat_values, last_token)
    entity_text = tf.strings.substr(
        tf.gather(text, entity_row), entity_start, entity_end - entity_start,
        unit="UTF8_CHAR")

    # Character tags, flat over the characters of the batch.
    chars = tokens["chars"]
    num_chars = tf.shape(chars.flat_values, out_type=tf.int64)[0]
    row_offset = tf.gather(chars.row_splits, entity_row)
    begin_at = row_offset + entity_start
    end_at = row_offset + entity_end
    ones = tf.ones_like(begin_at)
    depth = tf.math.unsorted_segment_sum(
        tf.concat([ones, -ones], 0), tf.concat([begin_at, end_at], 0),
        num_chars + 1)
    in_entity = tf.cumsum(depth)[:-1] > 0
    is_begin = tf.math.unsorted_segment_sum(ones, begin_at, num_chars + 1)[
        :-1] > 0
    # One padding kind: a batch without entities gathers nothing outside.
    char_kind = tf.gather(tf.concat([entity_kind, [0]], 0), tf.maximum(
        tf.cumsum(tf.cast(is_begin, tf.int64)) - 1, 0))
    types = tf.constant(self._types + [""], tf.string)
    b_tags = tf.strings.join(["B-", types])
    i_tags = tf.strings.join(["I-", types])
    # Untagged: the characters from the first untagged token on (a suffix).
    untagged = tf.logical_not(tagged)
    cut = tf.math.unsorted_segment_min(
        tf.boolean_mask(tokens["starts"].flat_values, untagged),
        tf.boolean_mask(rows, untagged), nrows)
    cut = tf.minimum(cut, chars.row_lengths())
    char_row = chars.value_rowids()
    char_pos = tf.range(num_chars) - tf.gather(chars.row_splits, char_row)
    space = tf.strings.regex_full_match(chars.flat_values,
                                        text_graph._char_class("space"))
    not_tagged = tf.logical_not(space) & (char_pos >= tf.gather(cut, char_row))
    safe_kind = tf.maximum(char_kind, 0)
    char_tags = tf.where(
        in_entity,
        tf.where(is_begin, tf.gather(b_tags, safe_kind),
                 tf.gather(i_tags, safe_kind)),
        tf.where(not_tagged, "", "O"))

    def dense(values, default):
      return tf.RaggedTensor.from_value_rowids(
          values, entity_row, nrows=nrows, validate=False).to_tensor(
              default_value=default)
    entity_type = tf.gather(types, tf.maximum(entity_kind, 0))
    return {
        "char_tags": chars.with_flat_values(char_tags).to_tensor(
            default_value=""),
        "entity_types": dense(entity_type, ""),
        "entity_texts": dense(entity_text, ""),
        "entity_starts": dense(tf.cast(entity_start, tf.int32), -1),
        "entity_ends": dense(tf.cast(entity_end, tf.int32), -1),
        "num_entities": tf.cast(tf.math.unsorted_segment_sum(
            tf.ones_like(entity_row), entity_row, nrows), tf.int32),
        "num_untagged_chars": tf.cast(tf.math.unsorted_segment_sum(
            tf.cast(not_tagged, tf.int32), char_row, nrows), tf.int32),
    }

  def __call__(self, text, tag_fn):
    """Tags raw texts tf.string [batch]; tag_fn: the model, features -> int
    [batch, length] tag ids. Returns, padded to the batch's longest text and
    most entities: `char_tags` string [batch, max_chars] (BIO per character,
    "" past the text's end and on untagged characters); `entity_types`,
    `entity_texts` string [batch, max_entities] ("" padding);
    `entity_starts`, `entity_ends` (exclusive) int32 code points (-1
    padding); `num_entities` int32 [batch]; `num_untagged_chars` int32
    [batch], non-whitespace characters past the pieces the model sees."""
    features, tokens = self.encode(text)
    return self.decode(text, tokens, tag_fn(features))

  # ------------------------------------------------ run eagerly from Python
  def piece_ids(self, tokens, batch_size=4096):
    """Python tokens -> (each one's piece ids, how many had no piece):
    `token_pieces` in batches, as fine-tuning encodes a split."""
    pieces, unknown = [], 0
    for start in range(0, len(tokens), batch_size):
      ids, empty = _traced(self, "token_pieces")(
          tokens[start:start + batch_size])
      pieces.extend(ids.to_list())
      unknown += int(tf.reduce_sum(tf.cast(empty, tf.int32)))
    return pieces, unknown

  def encode_batch(self, texts):
    """Python texts -> (`encode`'s features as numpy; per text its tokens
    [(token, start, end)] and its tagged tokens' first-piece positions)."""
    features, tokens = _traced(self, "encode")(texts)
    positions = tf.ragged.boolean_mask(tokens["positions"], tokens["tagged"])
    return ({k: v.numpy() for k, v in features.items()},
            _token_lists(tokens), positions.to_list())

  def tag_batch(self, texts, tag_ids):
    """Python texts, tag ids on `encode_batch`'s features -> `decode`'s."""
    return {k: v.numpy() for k, v in _traced(self, "_decode_ids")(
        texts, tag_ids).items()}

  def _decode_ids(self, text, tag_ids):
    return self.decode(text, self.encode(text)[1], tag_ids)

  def truncated(self, texts):
    """Per Python text: whether tokens after the one window go untagged."""
    _, tokens, positions = self.encode_batch(texts)
    return [len(p) < len(t) for t, p in zip(tokens, positions)]

  def ids_predictor(self, run):
    """fn({"text": texts}) -> `entities`, around run(**inputs) -> tag_ids."""
    def predict(inputs):
      features = self.encode_batch(inputs["text"])[0]
      return entities(self.tag_batch(inputs["text"], run(**features)[
          F.TAG_IDS]), len(inputs["text"]))
    return predict


def shared(tokenizer, max_seq_length, token_level="char", label_list=("O",)):
  """One `TextTagger` per arguments in a process (`text_graph.kept`); the
  defaults: fine-tuning's, whose pieces need no level nor tags."""
  labels = tuple(label_list)
  return text_graph.kept(
      ("tagger", tokenizer.fingerprint, max_seq_length, token_level, labels),
      lambda: TextTagger.from_tokenizer(tokenizer, max_seq_length,
                                        token_level, labels))


def entities(outputs, n):
  """Per text of `__call__`'s numpy outputs its entities [{"type", "text",
  "start", "end"}] (code points: text[start:end] is the entity)."""
  return [[{"type": outputs["entity_types"][i, j].decode(),
            "text": outputs["entity_texts"][i, j].decode(),
            "start": int(outputs["entity_starts"][i, j]),
            "end": int(outputs["entity_ends"][i, j])}
           for j in range(int(outputs["num_entities"][i]))] for i in range(n)]


def split_texts(texts, token_level):
  """Python texts -> per text its tokens [(token, start, end)] (`split`)."""
  check_token_level(token_level)
  return _token_lists(_splitter(token_level)(tf.constant(list(texts),
                                                         tf.string)))


@functools.lru_cache(maxsize=None)
def _splitter(token_level):
  return tf.function(lambda t: split(t, token_level), autograph=False,
                     input_signature=[tf.TensorSpec([None], tf.string)])


def _token_lists(tokens):
  return [list(zip([t.decode() for t in words], starts, ends))
          for words, starts, ends in zip(*[tokens[k].to_list() for k in (
              "tokens", "starts", "ends")])]


# A tagger's methods traced for eager callers, kept beside (not in) the
# tagger: a SavedModel would save the tf.functions of its attributes.
_TRACED = weakref.WeakKeyDictionary()


def _traced(tagger, method):
  """tagger.<method> as a Python function of texts (and int tag ids)."""
  functions = _TRACED.setdefault(tagger, {})
  if method not in functions:
    ref = weakref.ref(tagger)
    spec = [tf.TensorSpec([None], tf.string)] + [tf.TensorSpec(
        [None, None], tf.int64)] * (method == "_decode_ids")
    traced = tf.function(lambda *args: getattr(ref(), method)(*args),
                         input_signature=spec, autograph=False)
    functions[method] = lambda texts, *ids: traced(
        tf.constant(list(texts), tf.string),
        *[tf.constant(x, tf.int64) for x in ids])
  return functions[method]
