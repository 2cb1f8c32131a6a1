"""Fill-mask: what a pretrained checkpoint predicts for each [MASK] in a text.

    python -m albert_tf.fill_mask --checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --text="中国[MASK]民银行" --top_k=5

prints, per [MASK], the top-k pieces of the pretrainer's tied MLM head with
their probabilities (softmax over the tokenizer's pieces). --input_file takes
one such text per line. The same is exported as the `serve_fill_mask`
signature of `export_saved_model --model=pretrainer` (`add_serve_fill_mask`).

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

import dataclasses
import os
from typing import List, Optional

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf import features as F
from albert_tf.training import resolution
from albert_tf.serving import text_graph
from albert_tf.training.checkpoints import restore_weights
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.data.tokenization import MASK_TOKEN, SPM_UNDERLINE, AlbertTokenizer

BATCH_SIZE = 32


class FillMaskError(ValueError):
  """Bad fill-mask input; the message names the flag, file or line."""


# ------------------------------------------------------- SentencePiece
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


def _read(path):
  with open(path, "rb") as f:
    return f.read()


# ------------------------------------------------------- text -> ids
def split_masked(text):
  """[(glued, rest)] of the parts of `text` between [MASK]s.

  `glued` is the run of non-whitespace right after the [MASK] before the
  part ("" for the first part); `rest` is what follows it.
  """
  parts = text.split(MASK_TOKEN)
  out = [("", parts[0])]
  for part in parts[1:]:
    end = next((i for i, c in enumerate(part) if c.isspace()), len(part))
    out.append((part[:end], part[end:]))
  return out


class MaskedTextTokenizer:
  """Python: a text with [MASK]s -> ids [CLS] ... [SEP] (see module doc)."""

  def __init__(self, tokenizer: AlbertTokenizer):
    self.tokenizer = tokenizer
    self.glued = tokenizer
    if tokenizer.kind == "sentencepiece":
      import sentencepiece as spm  # pylint: disable=g-import-not-at-top
      self.glued = AlbertTokenizer(
          "sentencepiece", tokenizer.model_file, tokenizer.do_lower_case,
          sp_model=spm.SentencePieceProcessor(model_proto=without_dummy_prefix(
              _read(tokenizer.model_file))))

  def encode(self, text):
    tok = self.tokenizer
    ids = [tok.cls_id]
    for i, (glued, rest) in enumerate(split_masked(text)):
      if i:
        ids.append(tok.mask_id)
      ids += self.glued.encode(glued) + tok.encode(rest)
    return ids + [tok.sep_id]


class MaskedTextEncoder(tf.Module):
  """In-graph twin of `MaskedTextTokenizer`, padded to max_seq_length.

  Call with tf.string [batch]; returns int32 `input_ids`, `input_mask`,
  `segment_ids` [batch, max_seq_length], `masked_lm_positions` [batch, M]
  (0-padded; M = the most masks in the batch) and `num_masks` [batch]. A
  text longer than max_seq_length is truncated, and a [MASK] cut off with
  it is not counted.
  """

  def __init__(self, tokenizer: AlbertTokenizer, max_seq_length, name=None):
    super().__init__(name=name)
    self.max_seq_length = int(max_seq_length)
    self.mask_id = tokenizer.mask_id
    self.cls_id, self.sep_id = tokenizer.cls_id, tokenizer.sep_id
    self.pad_id = tokenizer.pad_id
    self._text = text_graph.TextEncoder.from_tokenizer(tokenizer,
                                                       max_seq_length)
    self._glued = self._text
    if tokenizer.kind == "sentencepiece":
      glued_proto = without_dummy_prefix(_read(tokenizer.model_file))
      # Named: unnamed, this model and serve_text's would be shared in a
      # loaded SavedModel (see TextEncoder; tests/test_fill_mask.py checks
      # after loading).
      self._glued = text_graph.TextEncoder(
          "sentencepiece", max_seq_length, tokenizer.cls_id, tokenizer.sep_id,
          tokenizer.pad_id, model_proto=glued_proto,
          do_lower_case=tokenizer.do_lower_case, name="fill_mask_glued")
    # split_masked's str.isspace, as the tokenizer's normalisation uses it.
    space = text_graph._char_class("space")  # pylint: disable=protected-access
    self._non_space = "[^" + space[1:]
    self._encode_fn = None

  def __call__(self, text):
    if self._encode_fn is None:  # traced once, on first use
      self._encode_fn = tf.function(
          self._encode, input_signature=[tf.TensorSpec([None], tf.string)])
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
    ids = ids[:, :self.max_seq_length - 2]
    input_ids, segment_ids = tf_text.combine_segments(
        [ids], start_of_sequence_id=self.cls_id, end_of_segment_id=self.sep_id)
    input_ids, input_mask = tf_text.pad_model_inputs(
        input_ids, max_seq_length=self.max_seq_length, pad_value=self.pad_id)
    segment_ids, _ = tf_text.pad_model_inputs(
        segment_ids, max_seq_length=self.max_seq_length, pad_value=0)
    input_ids = tf.cast(input_ids, tf.int32)
    positions = tf.ragged.boolean_mask(
        tf.broadcast_to(tf.range(self.max_seq_length), tf.shape(input_ids)),
        tf.equal(input_ids, self.mask_id))
    return {F.INPUT_IDS: input_ids,
            F.INPUT_MASK: tf.cast(input_mask, tf.int32),
            F.SEGMENT_IDS: tf.cast(segment_ids, tf.int32),
            F.MASKED_LM_POSITIONS: positions.to_tensor(0),
            "num_masks": tf.cast(positions.row_lengths(), tf.int32)}


# ------------------------------------------------------- predictions
def predict_masks(model, features, top_k, vocab_size):
  """Top-k of the MLM head at `masked_lm_positions`.

  features: `input_ids`, `input_mask`, `segment_ids` [batch, seq] and
  `masked_lm_positions` [batch, M]. Probabilities are a softmax over the
  first `vocab_size` ids (the tokenizer's pieces; a config may reserve
  more ids than the tokenizer has, which no text can produce).
  Returns (probabilities float32 [batch, M, k], ids int32 [batch, M, k]).
  """
  inputs = {k: features[k] for k in F.ENCODER_INPUTS + (F.MASKED_LM_POSITIONS,)}
  logits = model(inputs, training=False)["mlm_logits"][..., :vocab_size]
  k = tf.minimum(top_k, vocab_size)
  probabilities, ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=k)
  return probabilities, tf.cast(ids, tf.int32)


def add_serve_fill_mask(archive, model, tokenizer, max_seq_length):
  """Adds `serve_fill_mask` to a keras.export.ExportArchive of a pretrainer.

  Inputs: string `text` [batch] with [MASK]s, int32 scalar `top_k`.
  Outputs: `top_k_ids` int32, `top_k_pieces` string and
  `top_k_probabilities` float32 [batch, M, top_k], `masked_lm_positions`
  int32 [batch, M] and `num_masks` int32 [batch]; rows of a text with fewer
  than M masks are padded with id -1, piece "" and probability 0.
  """
  encoder = MaskedTextEncoder(tokenizer, max_seq_length, name="fill_mask")
  archive.track(encoder)
  pieces = tokenizer.convert_ids_to_tokens(range(tokenizer.vocab_size))

  def serve_fill_mask(text, top_k):
    features = encoder(text)
    probabilities, ids = predict_masks(model, features, top_k,
                                       tokenizer.vocab_size)
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
        "num_masks": features["num_masks"]}

  archive.add_endpoint(
      "serve_fill_mask", serve_fill_mask,
      input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                       tf.TensorSpec([], tf.int32, name="top_k")])


# ------------------------------------------------------- Python API + CLI
@dataclasses.dataclass
class FillMaskArgs:
  """The command line, parsed."""
  checkpoint: str
  texts: List[str]
  top_k: int = 5
  spm_model_file: Optional[str] = None
  vocab_file: Optional[str] = None
  albert_config_file: Optional[str] = None
  do_lower_case: Optional[bool] = None


def load(checkpoint, albert_config_file=None, spm_model_file=None,
         vocab_file=None, do_lower_case=None):
  """(AlbertPretrainer with the checkpoint's weights, tokenizer).

  Raises FillMaskError when the checkpoint has no masked_lm_head.
  """
  config, tokenizer = resolution.resolve_model(
      albert_config_file=albert_config_file, init_checkpoint=checkpoint,
      spm_model_file=spm_model_file, vocab_file=vocab_file,
      do_lower_case=do_lower_case, checkpoint_flag="--checkpoint")
  model = AlbertPretrainer(config)
  report = restore_weights(checkpoint, model)
  if "masked_lm_head" in report["missing"]:
    raise FillMaskError(
        f"--checkpoint={report['prefix']} has no masked_lm_head: fill-mask "
        "needs a checkpoint written by run_pretraining (or converted with "
        "its MLM head)")
  return model, tokenizer


def fill_mask(model, tokenizer, texts, top_k=5):
  """Top-k predictions per [MASK] of each text.

  Returns one list per text, with one list per [MASK] (left to right) of
  top_k (piece, id, probability) tuples, most probable first. Raises
  FillMaskError for a text without [MASK] or longer than the model takes.
  """
  if top_k < 1:
    raise FillMaskError(f"--top_k must be >= 1, got {top_k}")
  masked = MaskedTextTokenizer(tokenizer)
  limit = model.config.max_position_embeddings
  encoded = []
  for n, text in enumerate(texts, 1):
    if MASK_TOKEN not in text:
      raise FillMaskError(f"text {n} has no {MASK_TOKEN}: {text[:60]!r}")
    ids = masked.encode(text)
    if len(ids) > limit:
      raise FillMaskError(
          f"text {n} is {len(ids)} tokens with [CLS]/[SEP], more than the "
          f"model's max_position_embeddings={limit}: {text[:60]!r}")
    encoded.append(ids)
  results = []
  for start in range(0, len(encoded), BATCH_SIZE):
    batch = encoded[start:start + BATCH_SIZE]
    width = max(len(ids) for ids in batch)
    positions = [[i for i, t in enumerate(ids) if t == tokenizer.mask_id]
                 for ids in batch]
    most = max(len(p) for p in positions)
    features = {
        F.INPUT_IDS: tf.constant([ids + [tokenizer.pad_id] * (width - len(ids))
                                  for ids in batch], tf.int32),
        F.INPUT_MASK: tf.constant([[1] * len(ids) + [0] * (width - len(ids))
                                   for ids in batch], tf.int32),
        F.SEGMENT_IDS: tf.zeros([len(batch), width], tf.int32),
        F.MASKED_LM_POSITIONS: tf.constant(
            [p + [0] * (most - len(p)) for p in positions], tf.int32)}
    probabilities, ids = predict_masks(model, features, top_k,
                                       tokenizer.vocab_size)
    probabilities, ids = probabilities.numpy(), ids.numpy()
    for row, row_positions in enumerate(positions):
      results.append([
          [(piece, int(i), float(p)) for piece, i, p in zip(
              tokenizer.convert_ids_to_tokens(ids[row, m].tolist()),
              ids[row, m], probabilities[row, m])]
          for m in range(len(row_positions))])
  return results


def _surface(piece, kind):
  """How a piece reads inside text ("▁" is a space, "##" continues)."""
  if kind == "wordpiece":
    return piece[2:] if piece.startswith("##") else piece
  return piece.replace(SPM_UNDERLINE, " ")


def format_result(text, masks, kind="sentencepiece"):
  """Lines for one text: the text filled with the top pieces, then per
  [MASK] its top-k pieces and probabilities."""
  parts = text.split(MASK_TOKEN)
  filled = parts[0] + "".join(_surface(m[0][0], kind) + part
                              for m, part in zip(masks, parts[1:]))
  lines = [f"{text}  ->  {filled}"]
  for n, predictions in enumerate(masks, 1):
    lines.append(f"  [MASK] {n}: " + "  ".join(
        f"{piece} {p:.4f}" for piece, _, p in predictions))
  return lines


def read_texts(text=None, input_file=None):
  """The texts of --text (one or more) or --input_file (blank lines skipped)."""
  if bool(text) == bool(input_file):
    raise FillMaskError("Give --text or --input_file (one of the two)")
  if text:
    return list(text)
  if not os.path.isfile(input_file):
    raise FillMaskError(f"--input_file={input_file} does not exist")
  with open(input_file, encoding="utf-8") as f:
    lines = [line.strip() for line in f]
  texts = [line for line in lines if line]
  if not texts:
    raise FillMaskError(f"--input_file={input_file} holds no text")
  return texts


def run(args: FillMaskArgs, log=print):
  """Loads the checkpoint, predicts, prints; returns `fill_mask`'s result."""
  model, tokenizer = load(args.checkpoint, args.albert_config_file,
                          args.spm_model_file, args.vocab_file,
                          args.do_lower_case)
  results = fill_mask(model, tokenizer, args.texts, args.top_k)
  for text, masks in zip(args.texts, results):
    for line in format_result(text, masks, tokenizer.kind):
      log(line)
  return results


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  run(FillMaskArgs(
      checkpoint=f.checkpoint, texts=read_texts(f.text, f.input_file),
      top_k=f.top_k, spm_model_file=f.spm_model_file,
      vocab_file=f.vocab_file, albert_config_file=f.albert_config_file,
      do_lower_case=f.do_lower_case))


def define_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("checkpoint", None, "Pretraining checkpoint prefix, or "
                      "a directory (its latest checkpoint).")
  flags.DEFINE_multi_string("text", None, "A text with one or more [MASK] "
                            "(repeat the flag for several texts).")
  flags.DEFINE_string("input_file", None, "A UTF-8 file of such texts, one "
                      "per line.")
  flags.DEFINE_integer("top_k", 5, "Pieces shown per [MASK].", lower_bound=1)
  flags.DEFINE_string("spm_model_file", None, "SentencePiece model (default: "
                      "the tokenizer recorded beside the checkpoint).")
  flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
  flags.DEFINE_string("albert_config_file", None, "albert_config.json "
                      "(default: the one beside the checkpoint).")
  flags.DEFINE_boolean("do_lower_case", None, "Lowercase + strip accents "
                       "(default: as recorded beside the checkpoint, else "
                       "true).")
  flags.DEFINE_boolean("verbose", False, "Show the traceback of an error.")
  flags.mark_flags_as_required(["checkpoint"])


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  define_flags()
  cli_errors.run_main(main)
