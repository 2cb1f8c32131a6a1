"""[MASK] texts to ids, in Python and in the graph, and the pretrainer's
`serve_fill_mask` signature (`python -m albert_tf.fill_mask` is the command).

How a text with [MASK] becomes ids (the same in Python and in the graph):
the literal "[MASK]" splits the text, and each one becomes one mask id, so
one position is predicted per [MASK]; it is never tokenized as the pieces of
"[", "mask", "]". The text before the first [MASK] and every part that
starts with whitespace is tokenized by the project tokenizer as usual. The
characters glued to the end of a [MASK] (up to the next whitespace) continue
the word the mask stands in: SentencePiece encodes them without its "▁"
word-start prefix, as they were encoded in the whole sentence the model was
pretrained on. (WordPiece: a [MASK] ends a word, as in BERT.)
"""

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.core import features as F
from albert_tf.data.tokenization import MASK_TOKEN, AlbertTokenizer
from albert_tf.serving import text_graph


def without_dummy_prefix(model_proto: bytes) -> bytes:
  """The SentencePiece model `model_proto` with add_dummy_prefix=false.

  Such a model encodes "气很好" as a continuation ("气", ...), not as a new
  word ("▁", "气", ...). sentencepiece's own generated proto module does not
  load with the protobuf runtime TF pins, so the two fields needed are
  declared here; protobuf keeps every other field as it is.
  """
  from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # pylint: disable=g-import-not-at-top,g-multiple-import
  field = descriptor_pb2.FieldDescriptorProto
  file_proto = descriptor_pb2.FileDescriptorProto(
      name="albert_tf/sentencepiece_subset.proto",
      package="albert_tf_sentencepiece", syntax="proto2")
  # Field numbers and default of sentencepiece_model.proto.
  spec = file_proto.message_type.add(name="NormalizerSpec")
  spec.field.add(name="add_dummy_prefix", number=3, type=field.TYPE_BOOL,
                 label=field.LABEL_OPTIONAL, default_value="true")
  model = file_proto.message_type.add(name="ModelProto")
  model.field.add(name="normalizer_spec", number=3, type=field.TYPE_MESSAGE,
                  label=field.LABEL_OPTIONAL,
                  type_name=".albert_tf_sentencepiece.NormalizerSpec")
  pool = descriptor_pool.DescriptorPool()
  pool.Add(file_proto)
  message = message_factory.GetMessageClass(pool.FindMessageTypeByName(
      "albert_tf_sentencepiece.ModelProto")).FromString(model_proto)
  message.normalizer_spec.add_dummy_prefix = False
  return message.SerializeToString()


# ------------------------------------------------------- text -> ids
class MaskedTextEncoder(tf.Module):
  """Texts with [MASK]s -> ids [CLS] ... [SEP] (see the module doc), padded
  to max_seq_length: serve_fill_mask's encoder, and `training.export
  .fill_mask`'s.

  Call with tf.string [batch]; returns int32 `input_ids`, `input_mask`,
  `segment_ids` [batch, max_seq_length], `masked_lm_positions` [batch, M]
  (0-padded; M = the most masks in the batch), `num_masks` [batch] and
  `num_tokens` [batch] (the length before the cut, [CLS] and [SEP] in). A
  text longer than max_seq_length is truncated, and a [MASK] cut off with
  it is not counted.
  """

  def __init__(self, tokenizer: AlbertTokenizer, max_seq_length, name=None):
    super().__init__(name=name)
    self.max_seq_length = int(max_seq_length)
    self.mask_id = tokenizer.mask_id
    self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
    self._text = text_graph.TextEncoder.from_tokenizer(tokenizer,
                                                       max_seq_length)
    self._glued = self._text
    if tokenizer.kind == "sentencepiece":
      with open(tokenizer.model_file, "rb") as f:
        glued_proto = without_dummy_prefix(f.read())
      # Named: unnamed, this model and serve_text's would be shared in a
      # loaded SavedModel (see TextEncoder; tests/test_fill_mask.py checks
      # after loading).
      self._glued = text_graph.TextEncoder(
          "sentencepiece", max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
          tokenizer.pad_id, model_proto=glued_proto,
          do_lower_case=tokenizer.do_lower_case, name="fill_mask_glued")
    # The glued run ends at str.isspace, as the tokenizer's normalisation.
    space = text_graph._char_class("space")  # pylint: disable=protected-access
    self._non_space = "[^" + space[1:]
    self._encode_fn = None

  def __call__(self, text):
    if self._encode_fn is None:  # traced once, on first use
      self._encode_fn = tf.function(  # no tensor branches: no autograph
          self._encode, autograph=False,
          input_signature=[tf.TensorSpec([None], tf.string)])
    return self._encode_fn(text)

  def _encode(self, text):
    parts = tf.strings.split(text, sep=MASK_TOKEN)  # [batch, (parts)]
    flat = parts.flat_values
    first = tf.equal(tf.ragged.range(parts.row_lengths()).flat_values, 0)
    glued = tf.where(first, "", tf.strings.regex_replace(
        flat, f"(?s)^({self._non_space}*).*$", r"\1"))
    rest = tf.where(first, flat,
                    tf.strings.regex_replace(flat, f"^{self._non_space}*", ""))
    # Every part but the first starts with the id of the [MASK] before it.
    mask = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(~first, tf.int32))], self.mask_id),
        tf.cast(~first, tf.int64))
    ids = tf.concat([mask, self._glued.tokenize(glued),
                     self._text.tokenize(rest)], axis=1)
    ids = parts.with_flat_values(ids).merge_dims(1, 2)  # [batch, (ids)]
    num_tokens = tf.cast(ids.row_lengths() + 2, tf.int32)
    ids = ids[:, :self.max_seq_length - 2]
    # Padded to max_seq_length: the text encoder has no length buckets.
    features = self._text.pad(*tf_text.combine_segments(
        [ids], start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id))
    input_ids = features[F.INPUT_IDS]
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(self.max_seq_length), tf.shape(input_ids)),
        tf.equal(input_ids, self.mask_id))
    return {**features, F.MASKED_LM_POSITIONS: positions.to_tensor(0),
            "num_masks": tf.cast(positions.row_lengths(), tf.int32),
            "num_tokens": num_tokens,
            # The [MASK]s of the text that truncation cut off.
            "num_masks_past_length": tf.cast(
                parts.row_lengths() - 1 - positions.row_lengths(), tf.int32)}


# ------------------------------------------------------- predictions
SPECIAL_PIECES = ("[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<pad>",
                  "<unk>")


def special_ids(tokenizer):
  """The ids fill-mask never proposes: the tokenizer's pad, unk, CLS, SEP
  and mask ids and any other `SPECIAL_PIECES` its vocabulary holds (a
  SentencePiece model with a "[PAD]" too). Sorted."""
  ids = {tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id,
         tokenizer.sep_id, tokenizer.mask_id}
  # Pieces not in the vocabulary convert to unk_id, already in.
  ids.update(tokenizer.convert_tokens_to_ids(list(SPECIAL_PIECES)))
  return sorted(i for i in ids if 0 <= i < tokenizer.vocab_size)


def predict_masks(model, features, top_k, vocab_size, excluded_ids=()):
  """Top-k of the MLM head at `masked_lm_positions`.

  features: `input_ids`, `input_mask`, `segment_ids` [batch, seq] and
  `masked_lm_positions` [batch, M]. Probabilities are a softmax over the
  first `vocab_size` ids (the tokenizer's pieces; a config may reserve
  more ids than the tokenizer has, which no text can produce); the
  excluded_ids (`special_ids`: [CLS], [MASK], <pad>, ... are no fill) are
  never among the top k, whose probabilities stay the softmax's over all
  of them.
  Returns (probabilities float32 [batch, M, k], ids int32 [batch, M, k]).
  """
  inputs = {k: features[k] for k in F.ENCODER_INPUTS + (F.MASKED_LM_POSITIONS,)}
  logits = model(inputs, training=False)["mlm_logits"][..., :vocab_size]
  probabilities = tf.nn.softmax(logits, axis=-1)
  excluded = sorted({int(i) for i in excluded_ids if 0 <= int(i) < vocab_size})
  ranked = probabilities
  if excluded:
    # -1: below every probability, so an excluded id is never picked.
    is_excluded = tf.scatter_nd(
        [[i] for i in excluded], tf.ones([len(excluded)], tf.bool),
        [vocab_size])
    ranked = tf.where(is_excluded, tf.constant(-1.0, probabilities.dtype),
                      probabilities)
  k = tf.minimum(top_k, max(vocab_size - len(excluded), 1))
  # The top k of ranked are probabilities: k leaves out no other id.
  probabilities, ids = tf.math.top_k(ranked, k=k)
  return probabilities, tf.cast(ids, tf.int32)


def serve_fill_mask_signature(model, tokenizer, max_seq_length):
  """The `serve_fill_mask` signature of a pretrainer (a tf.function).

  Inputs: string `text` [batch] with [MASK]s, int32 scalar `top_k`.
  Outputs: `top_k_ids` int32, `top_k_pieces` string and
  `top_k_probabilities` float32 [batch, M, top_k], `masked_lm_positions`
  int32 [batch, M], `num_masks` int32 [batch] (the masks answered) and
  `num_masks_past_length` int32 [batch] (masks of the text past
  max_seq_length, which truncation cut off: not answered); rows of a text
  with fewer than M masks are padded with id -1, piece "" and
  probability 0.
  """
  encoder = MaskedTextEncoder(tokenizer, max_seq_length, name="fill_mask")
  pieces = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))
  excluded = special_ids(tokenizer)  # no fill is [CLS], [MASK], <pad>, ...

  def serve_fill_mask(text, top_k):
    features = encoder(text)
    probabilities, ids = predict_masks(model, features, top_k,
                                       tokenizer.vocab_size, excluded)
    real = tf.sequence_mask(features["num_masks"],
                            tf.shape(ids)[1])[..., tf.newaxis]
    real = tf.broadcast_to(real, tf.shape(ids))
    return {
        "top_k_ids": tf.where(real, ids, -1),
        # Built inside the function: a graph constant, not a captured tensor.
        "top_k_pieces": tf.where(real, tf.gather(tf.constant(pieces), ids),
                                 ""),
        "top_k_probabilities": tf.where(real, probabilities, 0.0),
        F.MASKED_LM_POSITIONS: features[F.MASKED_LM_POSITIONS],
        "num_masks": features["num_masks"],
        "num_masks_past_length": features["num_masks_past_length"]}

  # The archive saves `encoder` (its tokenizers) as the function closes
  # over it (`serving.saved_model.make_archive`).
  return tf.function(
      serve_fill_mask, autograph=False,
      input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                       tf.TensorSpec([], tf.int32, name="top_k")])
