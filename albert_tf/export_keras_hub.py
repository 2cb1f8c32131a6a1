r"""Export a checkpoint as a keras-hub `AlbertBackbone` preset, with its tokenizer.

    python -m albert_tf.export_keras_hub --checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --output_dir=presets/albert_zh_demo

writes a folder that keras-hub loads like any of its own presets:

    backbone = keras_hub.models.AlbertBackbone.from_preset("presets/albert_zh_demo")
    tokenizer = keras_hub.models.AlbertTokenizer.from_preset("presets/albert_zh_demo")

(config.json + model.weights.h5 from `backbone.save_to_preset`, tokenizer.json
+ assets/tokenizer/vocabulary.spm from `tokenizer.save_to_preset`). The
backbone gives the encoder's sequence and pooled outputs; the MLM/SOP heads
are not part of a backbone preset. A run_classifier output (its
task_record.json says classification or regression) becomes a task preset,
head and preprocessor included (task.json, task.weights.h5,
preprocessor.json), whose logits are the classifier's:

    classifier = keras_hub.models.AlbertTextClassifier.from_preset("presets/clf")
    classifier.predict(["很好用"])          # logits; softmax = our probabilities

keras-hub has no task model for the other families (tagging, span QA,
multiple choice): their presets hold the encoder, and the export says so. `convert_checkpoint --source=keras_hub`
reads such a folder back. The preset is written in a dot-folder beside
output_dir (`.tmp-keras-hub-NAME-XXXXXXXX`) and renamed into place when
complete; a previous preset (--overwrite) is swapped out only then. A
failure leaves the previous one as it was and no dot-folder; those of a
killed export are removed (or the previous preset put back) at the next
start, with a warning.

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
from typing import Optional

from albert_tf.core import staging
from albert_tf.core import settings

# TensorFlow and what imports it (checkpoints, converters, resolution,
# modeling) are imported by `export`, not here: --help and a flag mistake
# answer before TF loads.

TAG = "keras-hub-"  # its dot-folders and lock: .tmp-keras-hub-NAME-...


class KerasHubExportError(ValueError):
  """A request export_keras_hub cannot fulfil; names the flag or file."""


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
    OSError (one line, naming --output_dir): the preset could not be
    written (disk full, permission); a previous one is left as it was.
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters import keras_hub_interop
  from albert_tf.modeling.encoder import AlbertEncoder
  from albert_tf.training import checkpoints
  from albert_tf.training import resolution
  from albert_tf.training.export import default_seq_length
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
  # One writer per output_dir (its temporaries, its swap): a second export
  # stops here, before any cleanup or write; a killed one's preset swapped
  # out is put back first.
  with staging.claimed(output_dir, "--output_dir", "an export", TAG,
                       error=KerasHubExportError):
    if os.path.isfile(output_dir):
      raise KerasHubExportError(f"--output_dir={output_dir} is a file")
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
      raise KerasHubExportError(
          f"--output_dir={output_dir} is not empty; pass --overwrite to "
          "replace it, or choose another directory")
    from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
    record = registry.read_record(checkpoint)
    # A family says whether it is keras-hub's AlbertTextClassifier, head
    # included (`Task.keras_hub_text_classifier`); else the backbone only.
    family = record.task if record else None
    family_task = registry.family(family, record.task_module).task if (
        family) else None
    whole = bool(family_task and family_task.keras_hub_text_classifier)
    if whole:
      from albert_tf.modeling.models import AlbertClassifier  # pylint: disable=g-import-not-at-top
      model = AlbertClassifier(config, record.num_labels)
      report = checkpoints.restore_weights(checkpoint, model)
      if report["missing"]:
        raise KerasHubExportError(
            f"--checkpoint={report['prefix']} has no "
            f"{', '.join(report['missing'])}, though the task_record.json "
            f"beside it says task={family!r}")
      encoder = model.encoder
    else:
      encoder = AlbertEncoder(config)
      report = checkpoints.restore_weights(checkpoint, encoder)
    import keras_hub  # pylint: disable=g-import-not-at-top
    # float32 whatever the global policy: a preset is a weights file first.
    backbone = keras_hub.models.AlbertBackbone(**kwargs, dtype="float32")
    keras_hub_interop.copy_to_keras_hub(encoder, backbone)
    with open(tokenizer.model_file, "rb") as f:
      hub_tokenizer = keras_hub.models.AlbertTokenizer(proto=f.read())

    task = None
    if whole:
      # keras-hub's dropout + dense on pooled_output is our classifier's
      # head: its weights are copied as they are; activation None: the
      # logits, as serving_default gives.
      task = keras_hub.models.AlbertTextClassifier(
          backbone=backbone, num_classes=model.num_labels,
          preprocessor=keras_hub.models.AlbertTextClassifierPreprocessor(
              tokenizer=hub_tokenizer,
              sequence_length=default_seq_length(record, config)),
          activation=None, dropout=model.classifier_dropout)
      task.output_dense.set_weights(
          [w.numpy() for w in model.classifier_head.dense.weights])
    # Saved in a dot-folder beside output_dir, checked as keras-hub loads
    # it, then swapped in: a failure or a kill never leaves a half preset
    # under the requested name, and a failure leaves the previous one.
    with staging.staged(output_dir, f"--output_dir={output_dir}",
                        TAG) as stage:
      if task is not None:  # backbone, head, preprocessor and tokenizer
        task.save_to_preset(stage.path)
      else:
        backbone.save_to_preset(stage.path)
        hub_tokenizer.save_to_preset(stage.path)
      checked = _verify_preset(stage.path, model if whole else encoder,
                               family_task if whole else None, tokenizer,
                               record, config)
      stage.swap_in()
    if task is not None:
      log(f"Exported {report['prefix']} as a keras-hub AlbertTextClassifier "
          f"preset (backbone, head, preprocessor at sequence_length="
          f"{task.preprocessor.sequence_length}): {output_dir}")
      if record.label_list:
        log("  its outputs are the logits of the labels " +
            ", ".join(f"{i}={label}" for i, label in
                      enumerate(record.label_list)))
    else:
      log(f"Exported {report['prefix']} as a keras-hub AlbertBackbone preset: "
          f"{output_dir}")
      if family_task and not family_task.fills_masks:  # a head dropped
        log(f"  note: keras-hub has no task model for the {family} family: "
            "the preset holds the encoder only, without the task's head")
    log(f"  verified: {checked['verdict']}")
    if tokenizer.do_lower_case:
      log("  note: keras-hub's AlbertTokenizer does not lowercase or strip "
          "accents; apply albert_tf.data.tokenization.normalize to text first")
    return output_dir


def _verify_preset(preset_dir, model, task, tokenizer, record, config):
  """The preset loaded back by keras-hub (`from_preset`) and run on
  held-out ids (`serving.verify`: the run's dev split for a classifier,
  else vocabulary sequences) against our model: the class agreement of a
  classifier's logits (task: its family's Task), the pooled output's
  direction for a backbone (task None), at the float floor (99.5%).
  Returns the figures; raises KerasHubExportError below it."""
  # pylint: disable=g-import-not-at-top
  import keras_hub
  import numpy as np
  from albert_tf.core import features as F
  from albert_tf.core.record import ModelInfo
  from albert_tf.serving import verify
  from albert_tf.tasks.base import Task
  from albert_tf.training.export import default_seq_length
  length = min(default_seq_length(record, config),
               config.max_position_embeddings)
  info = dataclasses.replace(record, max_seq_length=length) if record else (
      ModelInfo(max_seq_length=length))
  held = verify.held_out(info, tokenizer, task or Task, max_examples=64)
  key = F.POOLED_OUTPUT if task is None else F.LOGITS
  loaded = (keras_hub.models.AlbertBackbone if task is None else
            keras_hub.models.AlbertTextClassifier).from_preset(preset_dir)

  def theirs(**f):
    out = loaded({"token_ids": f[F.INPUT_IDS], "padding_mask":
                  f[F.INPUT_MASK], "segment_ids": f[F.SEGMENT_IDS]})
    return {key: np.asarray(out if task else out[key])}

  ours = lambda **f: {key: np.asarray(model(f, training=False)[key])}
  reference = verify.run_batched(ours, held.features, 32)
  try:
    return verify.check(preset_dir, "none",
                        lambda f: verify.run_batched(theirs, f, 32),
                        reference, held, verify.Floors(), False,
                        f"keras-hub {keras_hub.__version__}",
                        "the preset does not compute what the checkpoint "
                        "does")
  except verify.ExportVerificationError as e:
    raise KerasHubExportError(str(e)) from None


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


def main(argv):
  del argv
  s = settings.from_flags(KerasHubExportSettings)
  export(s.checkpoint, s.output_dir, albert_config_file=s.albert_config_file,
         spm_model_file=s.spm_model_file, overwrite=s.overwrite)


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(KerasHubExportSettings)
  cli_errors.run_main(main)
