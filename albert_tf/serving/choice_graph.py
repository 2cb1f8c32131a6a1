"""In-graph RACE encoding: (article, question, options) -> model inputs.

`ChoiceEncoder` is the graph twin of `albert_tf.data.race.encode_race`: per
option, `qa_text` (every "_" of the question replaced by the option, else
question + " " + option), then `[CLS] article [SEP] qa [SEP]` with qa keeping
its last `max_qa_length` pieces and the article cut from its end to fit. The
text is tokenised by a `albert_tf.serving.text_graph.TextEncoder`, so the
pieces are those of the Python tokenizer (see there for the known
differences). It backs the `serve_text` signature of multiple-choice exports
(`albert_tf.tasks.multiple_choice`).

    encoder = ChoiceEncoder.from_tokenizer(tokenizer, 512, max_qa_length=128)
    features = encoder(tf.constant([article]), tf.constant([question]),
                       tf.constant([[a, b, c, d]]))  # int32 [1, 4, 512] each

Building or loading one needs `import tensorflow_text`.
"""

import tensorflow as tf

from albert_tf import features as F
from albert_tf.serving.text_graph import TextEncoder


class ChoiceEncoder(tf.Module):
  """Batches of RACE questions -> packed int32 model inputs, in the graph.

  Args:
    text_encoder: the `TextEncoder` whose `tokenize` (and special ids and
      max_seq_length) are used.
    max_qa_length: qa keeps its last this many pieces, as `encode_race`.
    name: the module's name.
  Raises:
    ValueError: max_qa_length not in [1, max_seq_length - 3].
  """

  def __init__(self, text_encoder, max_qa_length, name=None):
    super().__init__(name=name)
    length = text_encoder.max_seq_length
    if not 1 <= max_qa_length <= length - 3:
      raise ValueError(f"max_qa_length must be between 1 and max_seq_length "
                       f"- 3 = {length - 3} (the 3 for [CLS] and two [SEP]), "
                       f"got {max_qa_length}")
    self.text_encoder = text_encoder
    self.max_seq_length = length
    self.max_qa_length = int(max_qa_length)
    # The number of choices is left open here: a signature fixes it with
    # `input_specs`, and __call__ restores it in the static shape. No
    # autograph: nothing here branches on tensors, and converting the
    # tokenizer's code took most of the tracing time.
    self._encode_fn = tf.function(
        self._encode, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None, None], tf.string)])

  @classmethod
  def from_tokenizer(cls, tokenizer, max_seq_length, max_qa_length,
                     name=None):
    """The in-graph twin of `encode_race(..., tokenizer, max_seq_length,
    max_qa_length)` for an `albert_tf.data.tokenization` tokenizer."""
    text_name = f"{name}_text" if name else None
    return cls(TextEncoder.from_tokenizer(tokenizer, max_seq_length,
                                          name=text_name),
               max_qa_length, name=name)

  @staticmethod
  def input_specs(num_choices):
    """The specs of `article` [batch], `question` [batch], `options`
    [batch, num_choices] (tf.string), named for a serving signature."""
    return [tf.TensorSpec([None], tf.string, name="article"),
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None, num_choices], tf.string, name="options")]

  def __call__(self, article, question, options):
    """Encodes a batch like `race.encode_race`.

    Args:
      article, question: tf.string [batch].
      options: tf.string [batch, choices].
    Returns:
      {"input_ids", "input_mask", "segment_ids"}: int32
      [batch, choices, max_seq_length].
    """
    options = tf.convert_to_tensor(options, tf.string)
    features = self._encode_fn(article, question, options)
    shape = [None, options.shape[1], self.max_seq_length]
    return {k: tf.ensure_shape(v, shape) for k, v in features.items()}

  def qa_text(self, question, options):
    """`race.qa_text` of each option: tf.string [batch, choices].

    The option goes in by string joins, never as a regex rewrite, so "\\",
    "$1" and the like in it stay literal.
    """
    shape = tf.shape(options)
    option = tf.reshape(options, [-1])
    question = tf.reshape(tf.broadcast_to(question[:, None], shape), [-1])
    parts = tf.strings.split(question, sep="_")  # [n, (blanks + 1)]
    # Each part but the last of its row is followed by the option.
    rows = parts.value_rowids()
    is_last = tf.equal(tf.range(tf.size(rows, out_type=rows.dtype)) + 1,
                       tf.gather(parts.row_splits[1:], rows))
    after = tf.where(is_last, "", tf.gather(option, rows))
    filled = parts.with_flat_values(
        tf.strings.join([parts.flat_values, after]))
    filled = tf.strings.reduce_join(filled, axis=1)
    qa = tf.where(parts.row_lengths() > 1, filled,
                  tf.strings.join([question, option], " "))
    return tf.reshape(qa, shape)

  def _encode(self, article, question, options):
    length, encoder = self.max_seq_length, self.text_encoder
    shape = tf.shape(options, out_type=tf.int64)
    # Rows are matched by position: a batch of another size would pair
    # texts of different questions, or broadcast one question, silently.
    checks = []
    for what, text in (("article", article), ("question", question)):
      checks.append(tf.debugging.assert_equal(
          tf.size(text, out_type=tf.int64), shape[0],
          message=f"ChoiceEncoder: {what} must have one row per row of "
          "options"))
    with tf.control_dependencies(checks):
      article, question = tf.identity(article), tf.identity(question)
    # One tokenizer pass (half the graph of two): rows 0..batch-1 are the
    # articles, each tokenised once and read by all of its choices; then
    # the qa texts, question-major.
    pieces = encoder.tokenize(tf.concat(
        [article, tf.reshape(self.qa_text(question, options), [-1])], 0))
    splits = tf.cast(pieces.row_splits, tf.int64)
    lengths = splits[1:] - splits[:-1]
    qa_row = shape[0] + tf.range(shape[0] * shape[1])
    article_row = tf.range(shape[0] * shape[1]) // shape[1]
    qa_len = tf.minimum(tf.gather(lengths, qa_row), self.max_qa_length)
    qa_start = tf.gather(splits, qa_row + 1) - qa_len  # keeps the last pieces
    art_len = tf.minimum(tf.gather(lengths, article_row), length - 3 - qa_len)
    art_start = tf.gather(splits, article_row)
    art_len, art_start, qa_len, qa_start = (
        t[:, None] for t in (art_len, art_start, qa_len, qa_start))
    values = tf.concat([tf.cast(pieces.flat_values, tf.int32), [0]], 0)

    def take(index):
      # The 0 appended above: gather needs a valid index even where its
      # result is not used (and when every text is empty).
      return tf.gather(values, tf.clip_by_value(index, 0, splits[-1]))

    # Packed densely, position by position: [CLS] article[:art_len] [SEP]
    # qa[-qa_len:] [SEP] pad..., which traces far faster than ragged concat.
    j = tf.range(length, dtype=tf.int64)[None, :]
    second = art_len + 2  # the first position of segment 1
    end = second + qa_len + 1  # one past the last [SEP]
    ids = tf.where(
        (j >= 1) & (j < second - 1), take(art_start + j - 1),
        tf.where((j >= second) & (j < end - 1),
                 take(qa_start + j - second),
                 tf.where((j == second - 1) | (j == end - 1), encoder.sep_id,
                          encoder.pad_id)))
    ids = tf.where(j == 0, encoder.cls_id, ids)
    mask = j < end
    segments = (j >= second) & mask
    out_shape = tf.concat([shape[:2], [length]], axis=0)
    return {name: tf.reshape(tf.cast(value, tf.int32), out_shape)
            for name, value in ((F.INPUT_IDS, ids), (F.INPUT_MASK, mask),
                                (F.SEGMENT_IDS, segments))}

