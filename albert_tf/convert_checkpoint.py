r"""Import published ALBERT and BERT weights: original TF1, brightmart, Hugging Face, keras-hub.

    python -m albert_tf.convert_checkpoint --source=original \
        --checkpoint=albert_base/model.ckpt-best \
        --albert_config_file=albert_base/albert_config.json --output_dir=out/
    python -m albert_tf.convert_checkpoint --source=bert \
        --checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --output_dir=out/

Sources: original (google-research/albert TF1), brightmart (albert_zh TF1),
huggingface (ALBERT or BERT: model dir, .safetensors or pytorch_model.bin;
BERT is recognised by config.json model_type "bert" and encoder.layer.N
names, with or without the "bert." prefix), keras_hub (AlbertBackbone
preset), bert (Google's TF1 BERT: bert_model.ckpt, config default
bert_config.json beside it). BERT is read as the ALBERT special case
share="none", embedding_size == hidden_size, no embedding projection;
BERT's "gelu" is the exact erf GELU (gelu_exact here) and its next-sentence
head becomes the sentence_order_head. The tokenizer a source ships (keras-hub
assets/tokenizer/vocabulary.spm; HF spiece.model, sentencepiece.bpe.model or
vocab.txt; vocab.txt or the one *.model in a TF1 checkpoint's folder) is
checked, copied into --output_dir and its sha256 recorded in
conversion_report.json: fine-tuning from --output_dir uses it by default and
refuses another --spm_model_file/--vocab_file.

The output is the project's checkpoint layout plus albert_config.json. Every
tensor not consumed or not found is reported; a shape mismatch, a missing
encoder tensor, layers the config has no place for and a tokenizer that does
not fit vocab_size (fewer tokens: unless --allow_padded_vocab) are errors.
The output is moved into --output_dir when complete: a full disk leaves an
earlier conversion as it was.
"""

import dataclasses
import hashlib
import importlib
import json
import os
from typing import Optional

from absl import logging

from albert_tf.core import staging
from albert_tf.core import settings
from albert_tf.converters import SOURCES

# The CLI and `convert` (the docstring is --help); the readers live in
# albert_tf/converters and load with TF when a conversion runs, so --help
# and a flag mistake answer first. _MOVED: names this module offered before
# they moved there (tests and tools import them from here), loaded on use.
_MOVED = {
    "BRIGHTMART_RELEASES": "albert_tf.converters.brightmart",
    "brightmart_to_original": "albert_tf.converters.brightmart",
    "is_brightmart_layout": "albert_tf.converters.shared",
    "ConversionError": "albert_tf.converters.errors",
    "huggingface_config": "albert_tf.converters.shared",
    "huggingface_to_original": "albert_tf.converters.huggingface",
    "read_huggingface": "albert_tf.converters.huggingface",
    "read_pytorch_bin": "albert_tf.converters.huggingface",
    "read_safetensors": "albert_tf.converters.huggingface",
    "assign_original_weights": "albert_tf.converters.original",
    "original_variable_map": "albert_tf.converters.original",
    "read_tf1_checkpoint": "albert_tf.converters.tf1",
    "READERS": "albert_tf.converters",
}

__all__ = ["ConvertSettings", "SOURCES", "convert", "main",
           *sorted(set(_MOVED) - {"READERS"})]


def __getattr__(name):
  if name in _MOVED:
    return getattr(importlib.import_module(_MOVED[name]), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# TF's causes of a failed file write that mean the disk (quota) is full.
_FULL = {"No space left on device": 28, "Disk quota exceeded": 122,
         "File too large": 27}


# The tokenizer a source ships, looked for in this order beside its weights
# (keras-hub: inside the preset; TF1 releases: the checkpoint's folder).
# "*.model" counts only when it is the folder's one SentencePiece model.
TOKENIZER_NAMES = {
    "keras_hub": ("assets/tokenizer/vocabulary.spm",
                  "assets/tokenizer/vocabulary.txt"),
    "huggingface": ("spiece.model", "sentencepiece.bpe.model", "vocab.txt"),
    "original": ("spiece.model", "*.model", "vocab.txt"),
    "brightmart": ("vocab.txt", "spiece.model", "*.model"),
    "bert": ("vocab.txt",),
}


def source_tokenizer(source, checkpoint):
  """The tokenizer file the source ships beside its weights, or None."""
  if source == "keras_hub" and not os.path.isdir(checkpoint):
    for name in TOKENIZER_NAMES[source]:
      from albert_tf.converters import keras_hub  # pylint: disable=g-import-not-at-top
      found = keras_hub.preset_file(checkpoint, name)
      if found:
        return found
    return None
  directory = (checkpoint if os.path.isdir(checkpoint)
               else os.path.dirname(checkpoint) or ".")
  for name in TOKENIZER_NAMES[source]:
    if name == "*.model":
      models = sorted(f for f in os.listdir(directory)
                      if f.endswith(".model")
                      and os.path.isfile(os.path.join(directory, f)))
      if len(models) == 1:
        return os.path.join(directory, models[0])
      continue
    path = os.path.join(directory, name)
    if os.path.isfile(path):
      return path
  return None


def _check_source_tokenizer(path, config, allow_padded_vocab=False):
  """Refuses a tokenizer that does not load or fit vocab_size (fewer tokens:
  unless allow_padded_vocab); returns the warning for an allowed padding."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.errors import ConversionError
  from albert_tf.data.tokenization import load_tokenizer
  wordpiece = path.endswith(".txt")
  try:
    size = load_tokenizer(None if wordpiece else path,
                          path if wordpiece else None).vocab_size
  except ValueError as e:
    raise ConversionError(f"{path}: {e}") from None
  if size > config.vocab_size:
    raise ConversionError(
        f"{path}: {size} tokens but vocab_size={config.vocab_size} in the "
        "config: the tokenizer is not this model's")
  if size == config.vocab_size:
    return None
  unused = (f"the embedding rows of ids {size} to {config.vocab_size - 1} "
            "are never used")
  if not allow_padded_vocab:
    raise ConversionError(
        f"{path}: {size} tokens but vocab_size={config.vocab_size} in the "
        f"config: {unused}, and a vocabulary that is not this model's maps "
        "text to the wrong rows (give the tokenizer these weights were "
        "trained with, or --allow_padded_vocab if vocab_size was padded "
        "on purpose, as Megatron pads to a multiple of 128)")
  return (f"{path}: {size} tokens but vocab_size={config.vocab_size} "
          f"(--allow_padded_vocab): {unused}")


def convert(source, checkpoint, output_dir, albert_config_file=None,
            log=print, allow_padded_vocab=False):
  """Converts a checkpoint to the project layout in `output_dir`.

  Writes ckpt-1.* (encoder + the heads the source has), albert_config.json,
  conversion_report.json and the tokenizer the source ships (TOKENIZER_NAMES;
  its sha256 is "tokenizer_sha256" in the report, None with one warning when
  there is none). Returns the report dict: "assigned", "missing",
  "unconsumed", "heads", "notes", "checkpoint", "tokenizer_sha256" (and
  "tokenizer_file", "tokenizer_kind", "tokenizer_source", "vocab_file" or
  "spm_model_file" when copied).
  Raises ConversionError when encoder tensors are missing, a shape
  differs, the checkpoint has layers the config has not, or the tokenizer
  has more tokens than vocab_size (fewer: unless allow_padded_vocab).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf.converters import READERS
  from albert_tf.training import output_dir as run_dir
  reader = READERS.get(source)
  if reader is None:
    raise ValueError(f"--source must be one of {SOURCES}, got {source!r}")
  # A keras-hub preset may be a handle (albert_base_en_uncased, kaggle://...),
  # not a path: that reader checks what it is given.
  if source != "keras_hub" and not (os.path.exists(checkpoint) or
                                    tf.io.gfile.glob(checkpoint + ".*")):
    raise FileNotFoundError(f"--checkpoint={checkpoint} does not exist (no "
                            "such file, directory or checkpoint prefix)")
  # A training run's folder is not overwritten: its `checkpoint` index and
  # albert_config.json would name the conversion, and its next start would
  # train from it over its own ckpt-N.
  marks = [name for name in sorted(os.listdir(output_dir))
           if name in (run_dir.FINGERPRINT_FILE, "train_log.jsonl",
                       "eval_log.jsonl")] if os.path.isdir(output_dir) else []
  if marks:
    raise ValueError(
        f"--output_dir={output_dir} holds a training run ({marks[0]}): "
        "convert into a new folder, and pass it as --init_checkpoint")
  # One writer per output_dir: a second conversion stops here, before it
  # reads anything, removes the first one's live dot-folder or writes.
  with staging.claimed(output_dir, "--output_dir", "a convert_checkpoint",
                       tag="convert-"):
    return _convert(reader, source, checkpoint, output_dir,
                    albert_config_file, log, allow_padded_vocab)


def _convert(reader, source, checkpoint, output_dir, albert_config_file, log,
             allow_padded_vocab):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import write_synced  # pylint: disable=g-import-not-at-top
  from albert_tf.training import checkpoints  # pylint: disable=g-import-not-at-top
  config, pretrainer, report, heads = reader(checkpoint, albert_config_file)
  parts = {"encoder": pretrainer.encoder}
  parts.update({h: getattr(pretrainer, h) for h in heads})
  checkpoints.check_finite([v for part in parts.values()
                            for v in part.variables],
                           f"--checkpoint={checkpoint}")
  # The tokenizer shipped with the weights travels with them: copied into
  # output_dir, its sha256 recorded in conversion_report.json, which
  # fine-tuning from output_dir checks (training/resolution.py).
  vocab_source = (report.pop("vocab_source", None) or  # BERT's
                  source_tokenizer(source, checkpoint))
  vocab = None
  if vocab_source:
    padded = _check_source_tokenizer(vocab_source, config,
                                     allow_padded_vocab)
    if padded:
      logging.warning("%s", padded)
      report["notes"].append(padded)
    with open(vocab_source, "rb") as f:
      vocab = f.read()
    kind = "wordpiece" if vocab_source.endswith(".txt") else "sentencepiece"
    flag = "--vocab_file" if kind == "wordpiece" else "--spm_model_file"
    report.update(tokenizer_file=os.path.basename(vocab_source),
                  tokenizer_kind=kind,
                  tokenizer_sha256=hashlib.sha256(vocab).hexdigest(),
                  tokenizer_source=str(vocab_source))
  else:
    report["tokenizer_sha256"] = None
    logging.warning(
        "--checkpoint=%s ships no tokenizer (looked for %s): fine-tuning "
        "from %s cannot check that --spm_model_file/--vocab_file is the one "
        "these weights were trained with", checkpoint,
        ", ".join(TOKENIZER_NAMES[source]), output_dir)
  # Written in a dot-folder beside output_dir, moved in when complete.
  with staging.staged(output_dir, f"--output_dir={output_dir}",
                      "convert-") as stage:
    try:
      saved = tf.train.Checkpoint(**parts).save(os.path.join(stage.path,
                                                             "ckpt"))
    except tf.errors.OpError as e:  # a full disk, as TF says it
      full = [cause for cause in _FULL if cause in str(e)]
      if not full:
        raise
      raise OSError(_FULL[full[0]], full[0]) from e
    path = os.path.join(output_dir, os.path.basename(saved))
    if vocab_source:
      name = os.path.basename(vocab_source)
      write_synced(os.path.join(stage.path, name), vocab)
      report["vocab_file" if kind == "wordpiece" else "spm_model_file"] = (
          os.path.join(output_dir, name))
    write_synced(os.path.join(stage.path, checkpoints.CONFIG_NAME),
                 config.to_json_string().encode("utf-8"))
    report.update(heads=heads, checkpoint=path, source=source,
                  input=str(checkpoint))
    write_synced(os.path.join(stage.path, "conversion_report.json"),
                 json.dumps(report, indent=2).encode("utf-8"))
    if not os.path.exists(output_dir):
      stage.swap_in()
    else:
      # Into an earlier conversion's folder file by file (renames take no
      # space: a full disk failed the writes before this): the data, the
      # index, the `checkpoint` file naming it, the config, the report.
      order = lambda name: (name.endswith(".index"), name == "checkpoint",
                            name == "albert_config.json",
                            name == "conversion_report.json", name)
      stage.move(sorted(os.listdir(stage.path), key=order), output_dir)
  log(f"Converted {checkpoint} ({source}) -> {path}: "
      f"{len(report['assigned'])} tensors assigned, heads {heads or 'none'}")
  if vocab_source:
    copied = os.path.join(output_dir, report["tokenizer_file"])
    log(f"  tokenizer: {flag}={copied} (sha256 "
        f"{report['tokenizer_sha256'][:12]}…, from {vocab_source})")
  for note in report["notes"]:
    log(f"  note: {note}")
  for name in report["missing"]:
    log(f"  expected but not found: {name}")
  for name in report["unconsumed"]:
    log(f"  not consumed: {name}")
  return report


@dataclasses.dataclass
class ConvertSettings:
  """The command line of convert_checkpoint; the fields are the flags."""
  source: str = settings.field(None, "Checkpoint format.", choices=SOURCES,
                               required=True, group="model")
  checkpoint: str = settings.field(
      None, "TF1 checkpoint prefix/dir (ALBERT or BERT), HF model "
      "dir/.safetensors/.bin (ALBERT or BERT), or keras-hub preset dir or "
      "handle (e.g. albert_base_en_uncased).",
      required=True)
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json of the checkpoint (bert: bert_config.json, "
      "default the one beside it; HF: default config.json beside it).")
  output_dir: str = settings.field(
      None, "Where the converted checkpoint and albert_config.json go.",
      required=True)
  allow_padded_vocab: bool = settings.field(
      False, "Accept a tokenizer with fewer tokens than the config's "
      "vocab_size (a vocabulary padded to a multiple on purpose); the rows "
      "past its last token are kept but never used.", group="model")


def main(argv):
  del argv
  s = settings.from_flags(ConvertSettings)
  convert(s.source, s.checkpoint, s.output_dir, s.albert_config_file,
          allow_padded_vocab=s.allow_padded_vocab)


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(ConvertSettings)
  cli_errors.run_main(main)
