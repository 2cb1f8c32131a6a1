"""Export a checkpoint as a keras-hub `AlbertBackbone` preset, with its tokenizer.

    python -m albert_tf.export_keras_hub --checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --output_dir=presets/albert_zh_demo

writes a folder that keras-hub loads like any of its own presets:

    backbone = keras_hub.models.AlbertBackbone.from_preset("presets/albert_zh_demo")
    tokenizer = keras_hub.models.AlbertTokenizer.from_preset("presets/albert_zh_demo")

(config.json + model.weights.h5 from `backbone.save_to_preset`, tokenizer.json
+ assets/tokenizer/vocabulary.spm from `tokenizer.save_to_preset`). The
backbone gives the encoder's sequence and pooled outputs; the MLM/SOP heads
are not part of a backbone preset. `convert_checkpoint --source=keras_hub`
reads such a folder back.

Known difference: keras-hub's AlbertTokenizer runs the SentencePiece model
only. It skips albert_tf's text normalisation before it
(`albert_tf.data.tokenization.normalize`): lowercasing and accent stripping
(do_lower_case), `` and '' -> ", and the digit-comma rule ("1998," ->
"1998" + ","). On text that is already lowercase, accent-free and without a
digit directly before a comma, both give the same ids; otherwise apply
`albert_tf.data.tokenization.normalize` to the text before keras-hub's tokenizer.

Refused with one line: a WordPiece vocab.txt (keras-hub's AlbertTokenizer is
SentencePiece only) and configs keras-hub's AlbertBackbone cannot express
(brightmart embedding layout, share != all, hidden_act other than the tanh
GELU, layer_norm_eps other than 1e-12).
"""

import dataclasses
import os
import shutil
import tempfile
from typing import Optional

from albert_tf import settings
from albert_tf.training import checkpoints
from albert_tf.converters import keras_hub_interop
from albert_tf.training import resolution
from albert_tf.modeling.encoder import AlbertEncoder


class KerasHubExportError(ValueError):
  """A request export_keras_hub cannot fulfil; names the flag or file."""


def _check_output_dir(output_dir, overwrite):
  if os.path.isfile(output_dir):
    raise KerasHubExportError(f"--output_dir={output_dir} is a file")
  if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
    raise KerasHubExportError(
        f"--output_dir={output_dir} is not empty; pass --overwrite to "
        "replace it, or choose another directory")


def export(checkpoint, output_dir, albert_config_file=None,
           spm_model_file=None, overwrite=False, log=print):
  """Writes a keras-hub preset of `checkpoint` to `output_dir`; returns it.

  Args:
    checkpoint: a checkpoint prefix, or a directory (its latest/best).
    output_dir: the preset folder (created; must be empty unless overwrite).
    albert_config_file: default: the albert_config.json beside the checkpoint.
    spm_model_file: the SentencePiece model (default: the one recorded in
      the task_record.json beside the checkpoint).
    overwrite: replace a non-empty output_dir.
  Raises:
    ValueError (one line, naming the flag or file) before anything is
    written: no or a WordPiece tokenizer, a config keras-hub cannot
    express, a checkpoint that does not fit, a non-empty output_dir.
  """
  config, tokenizer = resolution.resolve_model(
      albert_config_file=albert_config_file, init_checkpoint=checkpoint,
      spm_model_file=spm_model_file, require_tokenizer=False,
      checkpoint_flag="--checkpoint")
  if tokenizer is None:
    raise KerasHubExportError("Give --spm_model_file (the SentencePiece "
                              "model the checkpoint was trained with)")
  if tokenizer.kind != "sentencepiece":
    raise KerasHubExportError(
        f"tokenizer {tokenizer.model_file} is a WordPiece vocab; keras-hub's "
        "AlbertTokenizer takes a SentencePiece model only (--spm_model_file)")
  try:
    kwargs = keras_hub_interop.backbone_kwargs(config)
  except ValueError as e:
    source = albert_config_file or os.path.join(
        checkpoints.checkpoint_dir(checkpoint), checkpoints.CONFIG_NAME)
    raise KerasHubExportError(f"{source}: {e}") from None
  _check_output_dir(output_dir, overwrite)

  encoder = AlbertEncoder(config)
  report = checkpoints.restore_weights(checkpoint, encoder)
  import keras_hub  # pylint: disable=g-import-not-at-top
  # float32 whatever the global policy: a preset is a weights file first.
  backbone = keras_hub.models.AlbertBackbone(**kwargs, dtype="float32")
  keras_hub_interop.copy_to_keras_hub(encoder, backbone)
  with open(tokenizer.model_file, "rb") as f:
    hub_tokenizer = keras_hub.models.AlbertTokenizer(proto=f.read())

  parent = os.path.dirname(os.path.abspath(output_dir))
  os.makedirs(parent, exist_ok=True)
  # Written beside the target and renamed into place: a killed export leaves
  # a dot-folder, never a half preset under the requested name.
  tmp_dir = tempfile.mkdtemp(prefix=".tmp-keras-hub-", dir=parent)
  try:
    backbone.save_to_preset(tmp_dir)
    hub_tokenizer.save_to_preset(tmp_dir)
    os.chmod(tmp_dir, 0o755)  # mkdtemp makes 0700
    if os.path.isdir(output_dir):
      shutil.rmtree(output_dir)
    os.rename(tmp_dir, output_dir)
  finally:
    if os.path.exists(tmp_dir):
      shutil.rmtree(tmp_dir)
  log(f"Exported {report['prefix']} as a keras-hub AlbertBackbone preset: "
      f"{output_dir}")
  if tokenizer.do_lower_case:
    log("  note: keras-hub's AlbertTokenizer does not lowercase or strip "
        "accents; apply albert_tf.data.tokenization.normalize to text first")
  return output_dir


@dataclasses.dataclass
class KerasHubExportSettings:
  """The command line of export_keras_hub; the fields are the flags."""
  checkpoint: str = settings.field(
      None, "Checkpoint prefix, or a directory (its latest checkpoint).",
      required=True)
  output_dir: str = settings.field(
      None, "The keras-hub preset folder to write.", required=True)
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json (default: the one beside the checkpoint).")
  spm_model_file: Optional[str] = settings.field(
      None, "SentencePiece model of the checkpoint (default: the one "
      "recorded beside it).")
  overwrite: bool = settings.field(False, "Replace a non-empty --output_dir.")
  verbose: bool = settings.field(False, "Show the traceback of an error.")


def main(argv):
  del argv
  s = settings.from_flags(KerasHubExportSettings)
  export(s.checkpoint, s.output_dir, albert_config_file=s.albert_config_file,
         spm_model_file=s.spm_model_file, overwrite=s.overwrite)


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(KerasHubExportSettings)
  cli_errors.run_main(main)
