r"""Fill-mask: what a pretrained checkpoint predicts for each [MASK] in a text.

    python -m albert_tf.fill_mask --checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --text="中国[MASK]民银行" --top_k=5

prints, per [MASK], the top-k pieces of the pretrainer's tied MLM head with
their probabilities (softmax over the tokenizer's pieces). --input_file takes
one such text per line. The same is exported as the `serve_fill_mask`
signature of `export_saved_model --model=pretrainer` (`serve_fill_mask_signature`).

How a text with [MASK] becomes ids: `albert_tf.serving.fill_mask_graph`.
"""

import dataclasses
import os
from typing import List, Optional

from albert_tf import features as F
from albert_tf import settings
from albert_tf.data.tokenization import MASK_TOKEN, SPM_UNDERLINE

# TensorFlow and what imports it (serving, modeling, checkpoints,
# resolution) are imported by the functions that run, not here: --help and
# a flag mistake answer before TF loads.

BATCH_SIZE = 32


class FillMaskError(ValueError):
  """Bad fill-mask input; the message names the flag, file or line."""


# ------------------------------------------------------- SentencePiece
# ------------------------------------------------------- Python API + CLI
@dataclasses.dataclass
class FillMaskArgs:
  """The command line; the fields are the flags (`texts` is --text)."""
  checkpoint: str = settings.field(
      None, "Pretraining checkpoint prefix, or a directory (its latest "
      "checkpoint).", required=True)
  texts: Optional[List[str]] = settings.field(
      None, "A text with one or more [MASK] (repeat the flag for several "
      "texts).", flag="text", multi=True)
  input_file: Optional[str] = settings.field(
      None, "A UTF-8 file of such texts, one per line.")
  top_k: int = settings.field(5, "Pieces shown per [MASK].", lower_bound=1,
                              group="output")
  spm_model_file: Optional[str] = settings.field(
      None, "SentencePiece model (default: the tokenizer recorded beside the "
      "checkpoint).")
  vocab_file: Optional[str] = settings.field(None, "WordPiece vocab.txt.")
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json (default: the one beside the checkpoint).")
  do_lower_case: Optional[bool] = settings.field(
      None, "Lowercase + strip accents (default: as recorded beside the "
      "checkpoint, else true).")
  verbose: bool = settings.field(False, "Show the traceback of an error.")


def load(checkpoint, albert_config_file=None, spm_model_file=None,
         vocab_file=None, do_lower_case=None):
  """(AlbertPretrainer with the checkpoint's weights, tokenizer).

  Raises FillMaskError when the checkpoint has no masked_lm_head.
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertPretrainer
  from albert_tf.training import resolution
  from albert_tf.training.checkpoints import check_finite, restore_weights
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
  check_finite(model, f"--checkpoint={report['prefix']}")
  return model, tokenizer


def fill_mask(model, tokenizer, texts, top_k=5):
  """Top-k predictions per [MASK] of each text.

  Returns one list per text, with one list per [MASK] (left to right) of
  top_k (piece, id, probability) tuples, most probable first. Raises
  FillMaskError for a text without [MASK] or longer than the model takes.
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf.serving.fill_mask_graph import MaskedTextTokenizer
  from albert_tf.serving.fill_mask_graph import predict_masks
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
  """Loads the checkpoint, predicts, prints; returns `fill_mask`'s result.

  The texts are args.texts or the lines of args.input_file (one of the two).
  """
  texts = read_texts(args.texts, args.input_file)
  model, tokenizer = load(args.checkpoint, args.albert_config_file,
                          args.spm_model_file, args.vocab_file,
                          args.do_lower_case)
  results = fill_mask(model, tokenizer, texts, args.top_k)
  for text, masks in zip(texts, results):
    for line in format_result(text, masks, tokenizer.kind):
      log(line)
  return results


def main(argv):
  del argv
  run(settings.from_flags(FillMaskArgs))


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(FillMaskArgs)
  cli_errors.run_main(main)
