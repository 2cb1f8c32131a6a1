"""Multiple choice's one encoder: (article, question, options) -> model inputs.

`ChoiceEncoder` packs each option as RACE's original run_race: its qa text
(every "_" of the question replaced by the option, else question + " " +
option), then `[CLS] article [SEP] qa [SEP]` with qa keeping its last
`max_qa_length` pieces and the article cut from its end to fit, tokenised by
a `text_graph.TextEncoder`. It backs multiple-choice exports' `serve_text`;
`encode_questions` runs the same graph for fine-tuning and for the ONNX and
TFLite runners.

    encoder = ChoiceEncoder.from_tokenizer(tokenizer, 512, max_qa_length=128)
    features = encoder(tf.constant([article]), tf.constant([question]),
                       tf.constant([[a, b, c, d]]))  # int32 [1, 4, 512] each
    features, counts = encode_questions(questions, tokenizer, 512, 128)

Building or loading one needs `import tensorflow_text`.
"""

import numpy as np
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data import race
from albert_tf.serving import text_graph
from albert_tf.serving.text_graph import TextEncoder


class ChoiceEncoder(tf.Module):
  """Batches of RACE questions -> packed int32 model inputs, in the graph.

  Args:
    text_encoder: the `TextEncoder` whose `tokenize` (and special ids and
      max_seq_length) are used.
    max_qa_length: qa keeps its last this many pieces.
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
    # The number of choices is left open (a signature fixes it with
    # `input_specs`). No autograph: nothing branches on tensors, and
    # converting the tokenizer's code took most of the tracing time.
    self._encode_fn = tf.function(
        self._encode, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None, None], tf.string)])

  @classmethod
  def from_tokenizer(cls, tokenizer, max_seq_length, max_qa_length,
                     name=None):
    """The encoder of an `albert_tf.data.tokenization` tokenizer."""
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
    """article, question: tf.string [batch]; options: [batch, choices] ->
    {"input_ids", "input_mask", "segment_ids"}: int32 [batch, choices,
    max_seq_length] (the module doc's packing)."""
    options = tf.convert_to_tensor(options, tf.string)
    features = self._encode_fn(article, question, options)
    shape = [None, options.shape[1], self.max_seq_length]
    return {k: tf.ensure_shape(v, shape) for k, v in features.items()}

  def qa_text(self, question, options):
    """The text paired with the article for each option: tf.string [batch,
    choices].

    As the original's `question.replace("_", option)`
    (race_utils.RaceProcessor.read_examples): EVERY "_" becomes the option
    ("___" repeats it three times); without a blank the option follows the
    question after one space. String joins, not a regex rewrite, keep "\\"
    and "$1" in an option literal.
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
    return self.pack(article, tf.range(shape[0]), question, options)[0]

  def pack(self, articles, article_index, question, options):
    """Packs a batch whose question i reads articles[article_index[i]], so
    that an article several questions share is tokenised once.

    Args:
      articles: tf.string [articles]; article_index: int64 [batch].
      question: tf.string [batch]; options: tf.string [batch, choices].
    Returns:
      ({"input_ids", "input_mask", "segment_ids"}: int32 [batch, choices,
      max_seq_length], int32 [batch]: each question's article pieces, int32
      [batch, choices]: each qa text's pieces), the counts before the cut.
    """
    length, encoder = self.max_seq_length, self.text_encoder
    # int32 indices: the packing is memory-bound, and half the bytes of int64.
    shape = tf.shape(options, out_type=tf.int32)
    # One tokenizer pass (half the graph of two): the articles first, then
    # the qa texts, question-major.
    pieces = encoder.tokenize(tf.concat(
        [articles, tf.reshape(self.qa_text(question, options), [-1])], 0))
    splits = tf.cast(pieces.row_splits, tf.int32)
    lengths = splits[1:] - splits[:-1]
    qa_row = tf.size(articles, out_type=tf.int32) + tf.range(
        shape[0] * shape[1])
    article_row = tf.gather(tf.cast(article_index, tf.int32),
                            tf.range(shape[0] * shape[1]) // shape[1])
    qa_pieces = tf.gather(lengths, qa_row)
    qa_len = tf.minimum(qa_pieces, self.max_qa_length)
    qa_start = tf.gather(splits, qa_row + 1) - qa_len  # keeps the last pieces
    art_len = tf.minimum(tf.gather(lengths, article_row), length - 3 - qa_len)
    art_start = tf.gather(splits, article_row)
    art_len, art_start, qa_len, qa_start = (
        t[:, None] for t in (art_len, art_start, qa_len, qa_start))
    # Packed densely, position by position, by one gather: [CLS]
    # article[:art_len] [SEP] qa[-qa_len:] [SEP] pad..., the specials
    # appended after the pieces (traces far faster than ragged concat).
    n = splits[-1]
    values = tf.concat([tf.cast(pieces.flat_values, tf.int32), [
        encoder.pad_id, encoder.cls_id, encoder.sep_id]], 0)
    j = tf.range(length)[None, :]
    second = art_len + 2  # the first position of segment 1
    end = second + qa_len + 1  # one past the last [SEP]
    index = tf.where(
        (j >= 1) & (j < second - 1), art_start + j - 1,
        tf.where((j >= second) & (j < end - 1), qa_start + j - second,
                 tf.where((j == second - 1) | (j == end - 1), n + 2, n)))
    ids = tf.gather(values, tf.where(j == 0, n + 1, index))
    mask = j < end
    segments = (j >= second) & mask
    out_shape = tf.concat([shape[:2], [length]], axis=0)
    features = {name: tf.reshape(tf.cast(value, tf.int32), out_shape)
                for name, value in ((F.INPUT_IDS, ids), (F.INPUT_MASK, mask),
                                    (F.SEGMENT_IDS, segments))}
    return (features, tf.gather(lengths, tf.cast(article_index, tf.int32)),
            tf.reshape(qa_pieces, shape[:2]))


def shared_choice_encoder(tokenizer, max_seq_length, max_qa_length):
  """A `ChoiceEncoder` whose `packed` is its `pack` as a tf.function, kept
  per vocabulary and lengths (`text_graph.kept`)."""
  def build():
    encoder = ChoiceEncoder(
        text_graph.shared_encoder(tokenizer, max_seq_length), max_qa_length)
    encoder.packed = tf.function(
        encoder.pack, autograph=False, input_signature=[
            tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None, None], tf.string)])
    return encoder
  return text_graph.kept(
      ("choice", tokenizer.fingerprint, max_seq_length, max_qa_length), build)


def encode_questions(questions, tokenizer, max_seq_length=512,
                     max_qa_length=128, spec=race.RACE, batch_size=None):
  """Model inputs of questions as the dataset `spec` encodes them:
  `ChoiceEncoder`'s graph run batch by batch, or `spec.encode` where the
  dataset packs otherwise (CHID).

  Args:
    questions: `race.Question`s (article, question, options, label).
    batch_size: questions per graph call (default: 2**17 positions, the
      fastest measured: 64 questions at 512 x 4, 256 at 128 x 4).
    spec: a `race.ChoiceSpec`: its num_choices, and pad_choices (a question
      may have fewer options, C3's 2-4; the missing choices are all-zero
      rows, which the model masks out of the softmax).
  Returns:
    (features, counts). features: F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS
    int32 numpy [n, num_choices, max_seq_length] (24 KiB a question at
    512) and F.LABEL_IDS int32 [n] (-1: unlabelled). counts: questions,
    articles_truncated and qa_truncated (questions with that part cut in a
    choice), choices_padded with pad_choices, and truncated_at: the ids of
    the first 3 questions cut.
  Raises:
    ValueError: max_qa_length outside [1, max_seq_length - 3].
    race.RaceError: a question without num_choices options (more, or none,
      with pad_choices).
  """
  if spec.encode is not None:
    return spec.encode(questions, tokenizer, max_seq_length, max_qa_length)
  num_choices, pad_choices = spec.num_choices, spec.pad_choices
  batch_size = batch_size or max(1, 2**17 // (num_choices * max_seq_length))
  for question in questions:
    given = len(question.options)
    if given > num_choices or not given or (given < num_choices and
                                            not pad_choices):
      raise race.RaceError(
          f"question {question.id}: {given} options (expected "
          f"{'at most ' if pad_choices else ''}{num_choices})")
  encoder = shared_choice_encoder(tokenizer, max_seq_length, max_qa_length)
  n = len(questions)
  features = {k: np.zeros([n, num_choices, max_seq_length], np.int32)
              for k in F.ENCODER_INPUTS}
  given = np.asarray([len(q.options) for q in questions], np.int64)
  real = np.arange(num_choices)[None, :] < given[:, None]  # [n, choices]
  article_pieces = np.zeros([n], np.int64)
  qa_pieces = np.zeros([n, num_choices], np.int64)
  for start in range(0, n, batch_size):
    batch = questions[start:start + batch_size]
    articles = list(dict.fromkeys(q.article for q in batch))
    row = {a: i for i, a in enumerate(articles)}
    out, article_pieces[start:start + len(batch)], qa = encoder.packed(
        tf.constant(articles, tf.string),
        tf.constant([row[q.article] for q in batch], tf.int64),
        tf.constant([q.question for q in batch], tf.string),
        tf.constant([list(q.options) + [""] * (num_choices - len(q.options))
                     for q in batch], tf.string))
    qa_pieces[start:start + len(batch)] = qa
    for k in F.ENCODER_INPUTS:
      features[k][start:start + len(batch)] = out[k]
  for k in F.ENCODER_INPUTS:
    features[k][~real] = encoder.text_encoder.pad_id if k == F.INPUT_IDS else 0
  features[F.LABEL_IDS] = np.asarray(
      [-1 if q.label is None else q.label for q in questions], np.int32)
  # What was cut, from the graph's piece counts: qa beyond max_qa_length;
  # the article beyond the room its choice's kept qa leaves.
  qa_cut = (qa_pieces > max_qa_length) & real
  room = max_seq_length - 3 - np.minimum(qa_pieces, max_qa_length)
  article_cut = (article_pieces[:, None] > room) & real
  cut = qa_cut.any(-1) | article_cut.any(-1)
  counts = {"questions": n,
            "articles_truncated": int(article_cut.any(-1).sum()),
            "qa_truncated": int(qa_cut.any(-1).sum())}
  if pad_choices:
    counts["choices_padded"] = int((given < num_choices).sum())
  counts["truncated_at"] = [questions[i].id for i in np.flatnonzero(cut)[:3]]
  return features, counts
