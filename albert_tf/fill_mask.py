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

from albert_tf.core import settings
from albert_tf.data.tokenization import MASK_TOKEN, SPM_UNDERLINE
from albert_tf.training import export as export_lib

# TensorFlow and what imports it (serving, modeling, checkpoints,
# resolution) are imported by the functions that run, not here: --help and
# a flag mistake answer before TF loads.

# The library part, this command's API too: load (the pretrainer of a
# checkpoint), fill_mask (its top-k per [MASK]) and their FillMaskError.
FillMaskError = export_lib.FillMaskError
load = export_lib.load_pretrainer
fill_mask = export_lib.fill_mask


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
    texts = [line.strip() for line in f if line.strip()]
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
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(FillMaskArgs)
  cli_errors.run_main(main)
