"""Import published ALBERT weights: original TF1, brightmart, Hugging Face, keras-hub.

    python -m albert_tf.convert_checkpoint --source=original \
        --checkpoint=albert_base/model.ckpt-best \
        --albert_config_file=albert_base/albert_config.json --output_dir=out/

Every source is first read into a dict keyed by the *original* google-research
TF1 variable names (bert/embeddings/word_embeddings, bert/encoder/transformer/
group_0/inner_group_0/attention_1/self/query/kernel, ... with kernels [in, out]),
then copied into an `AlbertPretrainer` by `assign_original_weights`. So there
is one name map to the model, and one map per foreign source to the original
names. The output is the project's checkpoint layout (encoder +
masked_lm_head + sentence_order_head, see checkpoints.py) plus
albert_config.json. Every tensor not consumed and every expected tensor not
found is reported; a shape mismatch is an error naming the variable.
"""

import dataclasses
import json
import os
from typing import Optional

import tensorflow as tf

from albert_tf import settings
from albert_tf.training import checkpoints
# This module is the CLI and `convert` only (the docstring above is also the
# --help text, so it stays as it was); the per-source readers live in
# albert_tf/converters and are chosen through converters.READERS.
from albert_tf.converters import READERS
from albert_tf.converters import SOURCES
from albert_tf.converters.brightmart import BRIGHTMART_RELEASES
from albert_tf.converters.brightmart import brightmart_to_original
from albert_tf.converters.brightmart import is_brightmart_layout
from albert_tf.converters.errors import ConversionError
from albert_tf.converters.huggingface import huggingface_config
from albert_tf.converters.huggingface import huggingface_to_original
from albert_tf.converters.huggingface import read_huggingface
from albert_tf.converters.huggingface import read_pytorch_bin
from albert_tf.converters.huggingface import read_safetensors
from albert_tf.converters.original import assign_original_weights
from albert_tf.converters.original import original_variable_map
from albert_tf.converters.tf1 import read_tf1_checkpoint


# The names this module offered before the readers moved to converters/;
# tests and tools still import them from here.
__all__ = [
    "BRIGHTMART_RELEASES", "ConversionError", "ConvertSettings", "SOURCES",
    "assign_original_weights", "brightmart_to_original", "convert",
    "huggingface_config", "huggingface_to_original",
    "is_brightmart_layout", "main", "original_variable_map",
    "read_huggingface", "read_pytorch_bin", "read_safetensors",
    "read_tf1_checkpoint",
]


def _refuse_a_training_run(output_dir):
  """A training run's folder is not overwritten: its `checkpoint` index and
  albert_config.json would then name the conversion, and the run's next
  start would train from it over its own ckpt-N."""
  from albert_tf.training import output_dir as run_dir  # pylint: disable=g-import-not-at-top
  if not os.path.isdir(output_dir):
    return
  marks = [name for name in sorted(os.listdir(output_dir))
           if name in (run_dir.FINGERPRINT_FILE, "train_log.jsonl",
                       "eval_log.jsonl")]
  if marks:
    raise ValueError(
        f"--output_dir={output_dir} holds a training run ({marks[0]}): "
        "convert into a new folder, and pass it as --init_checkpoint")


def convert(source, checkpoint, output_dir, albert_config_file=None,
            log=print):
  """Converts a checkpoint to the project layout in `output_dir`.

  Writes ckpt-1.* (encoder + the heads the source has), albert_config.json
  and conversion_report.json. Returns the report dict: "assigned",
  "missing", "unconsumed", "heads", "notes", "checkpoint".
  Raises ConversionError when encoder tensors are missing or a shape differs.
  """

  reader = READERS.get(source)
  if reader is None:
    raise ValueError(f"--source must be one of {SOURCES}, got {source!r}")
  # A keras-hub preset may be a handle (albert_base_en_uncased, kaggle://...),
  # not a path: that reader checks what it is given.
  if source != "keras_hub" and not (os.path.exists(checkpoint) or
                                    tf.io.gfile.glob(checkpoint + ".*")):
    raise FileNotFoundError(f"--checkpoint={checkpoint} does not exist (no "
                            "such file, directory or checkpoint prefix)")
  _refuse_a_training_run(output_dir)
  config, pretrainer, report, heads = reader(checkpoint, albert_config_file)
  parts = {"encoder": pretrainer.encoder}
  parts.update({h: getattr(pretrainer, h) for h in heads})
  checkpoints.check_finite([v for part in parts.values()
                            for v in part.variables],
                           f"--checkpoint={checkpoint}")
  os.makedirs(output_dir, exist_ok=True)
  path = tf.train.Checkpoint(**parts).save(os.path.join(output_dir, "ckpt"))
  config.to_json_file(os.path.join(output_dir, checkpoints.CONFIG_NAME))
  report.update(heads=heads, checkpoint=path, source=source,
                input=str(checkpoint))
  with open(os.path.join(output_dir, "conversion_report.json"), "w",
            encoding="utf-8") as f:
    json.dump(report, f, indent=2)
  log(f"Converted {checkpoint} ({source}) -> {path}: "
      f"{len(report['assigned'])} tensors assigned, heads {heads or 'none'}")
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
                               required=True)
  checkpoint: str = settings.field(
      None, "TF1 checkpoint prefix/dir, HF model dir/.safetensors/.bin, or "
      "keras-hub preset dir or handle (e.g. albert_base_en_uncased).",
      required=True)
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json of the checkpoint (HF: default config.json "
      "beside it).")
  output_dir: str = settings.field(
      None, "Where the converted checkpoint and albert_config.json go.",
      required=True)
  verbose: bool = settings.field(False, "Show the traceback of an error.")


def main(argv):
  del argv
  s = settings.from_flags(ConvertSettings)
  convert(s.source, s.checkpoint, s.output_dir, s.albert_config_file)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(ConvertSettings)
  cli_errors.run_main(main)
