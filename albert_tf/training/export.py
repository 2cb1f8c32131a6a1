"""The library part of exporting and restoring a fine-tuned model.

`export_saved_model` (the command), `fill_mask` (the command) and
`albert_tf.inference` (`albert_tf.load`) all restore a checkpoint the same
way: the family its task_record.json names (`albert_tf.tasks.registry`), the
config and tokenizer by the rules of every command
(`resolution.resolve_model`), the family's `export_model` with the
checkpoint's weights, refused when a head is missing or a weight is not
finite. Which signatures an export keeps is `select_signatures`'. The
commands add their flags and files; this module has none.

TensorFlow and what imports it are imported by the functions that run, so
that the commands' --help answers before TF loads.
"""

import dataclasses
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from albert_tf.core import features as F
from albert_tf.data.tokenization import MASK_TOKEN

ENCODER = "encoder"  # --model without a task: the encoder's outputs
SERVING_DEFAULT = "serving_default"  # TF Serving's default; always saved
DEFAULT_SEQ_LENGTH = 128  # the export length when nothing is recorded
FILL_MASK_BATCH_SIZE = 32


class ExportError(ValueError):
  """A bad export request; the message names the flag or file."""


class FillMaskError(ValueError):
  """Bad fill-mask input; the message names the flag, file or line."""


def model_choices():
  """--model's values: encoder, then every family's export_name."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  return (ENCODER,) + tuple(dict.fromkeys(
      f.task.export_name for f in registry.families().values()
      if f.task.export_name))


def resolve_model(checkpoint, preset, albert_config_file, spm_model_file,
                  vocab_file, do_lower_case):
  """Config + tokenizer by the rules of every CLI (`resolution.resolve_model`)."""
  from albert_tf.training import resolution  # pylint: disable=g-import-not-at-top
  try:
    return resolution.resolve_model(
        preset, albert_config_file, init_checkpoint=checkpoint,
        spm_model_file=spm_model_file, vocab_file=vocab_file,
        do_lower_case=do_lower_case, checkpoint_flag="--checkpoint")
  except ValueError as e:
    raise ExportError(str(e)) from None


def default_seq_length(record, config):
  """The length served without --max_seq_length: the one trained at, else
  DEFAULT_SEQ_LENGTH within the config's max_position_embeddings."""
  recorded = record.recorded_length() if record else None
  return recorded or min(DEFAULT_SEQ_LENGTH, config.max_position_embeddings)


def resolve_task(checkpoint, model, record):
  """(the registered family name, or None for the encoder; the --model):
  the recorded family, or the one whose export_name --model gives."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks import registry
  from albert_tf.core.record import RECORD_FILE
  recorded = None
  if record and record.task:
    try:
      recorded = registry.family(record.task, record.task_module).task
    except registry.RegistryError as e:
      raise ExportError(f"{RECORD_FILE} beside --checkpoint={checkpoint}: "
                        f"{e}") from None
  model = model or (recorded.export_name if recorded else ENCODER)
  if model not in model_choices():
    raise ExportError(f"--model must be one of {model_choices()}, got "
                      f"{model!r}")
  if model == ENCODER:
    return None, model
  if recorded is not None:
    if recorded.export_name != model:
      raise ExportError(
          f"--checkpoint={checkpoint} is a {recorded.export_name} "
          f"({RECORD_FILE} beside it says task={record.task!r}): export it "
          f"with --model={recorded.export_name}")
    return record.task, model
  # No record: the first family registered under this export_name.
  return next(name for name, f in registry.families().items()
              if f.task.export_name == model), model


def check_finite(model_or_variables, where):
  """checkpoints.check_finite, imported when an export runs (TF)."""
  from albert_tf.training import checkpoints  # pylint: disable=g-import-not-at-top
  return checkpoints.check_finite(model_or_variables, where)


def restore(checkpoint, keras_model, model):
  """Restores keras_model from checkpoint; returns restore_weights' report.
  Raises ExportError (naming --model=`model`) for a checkpoint that does
  not load, lacks a part (a random head would serve garbage silently) or
  holds a non-finite weight."""
  from albert_tf.training.checkpoints import restore_weights  # pylint: disable=g-import-not-at-top
  try:
    report = restore_weights(checkpoint, keras_model)
  except (ValueError, FileNotFoundError) as e:
    raise ExportError(f"--checkpoint={checkpoint}: {e}") from None
  if report["missing"]:
    raise ExportError(
        f"--checkpoint={report['prefix']} has no "
        f"{', '.join(report['missing'])}: it cannot be exported as "
        f"--model={model} (export it as --model=encoder, or give a "
        "checkpoint written by the matching training script)")
  check_finite(keras_model, f"--checkpoint={report['prefix']}")
  return report


def requested_signatures(value) -> Optional[List[str]]:
  """--signatures (None, a comma string or a sequence) as a list of names
  (None: all the family's)."""
  if value is None:
    return None
  if isinstance(value, str):
    value = value.split(",")
  return list(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))


def needed_signatures(task) -> Tuple[str, ...]:
  """The signatures beside serving_default that albert_tf.load predicts
  through, which a family's SavedModel must keep (none for an encoder or a
  family decoded from serving_default's outputs)."""
  if task is None or task.decodes_serving_default:
    return ()
  return ("serve_fill_mask",) if task.fills_masks else ("serve_text",)


def select_signatures(family, wanted, task, model):
  """The family's signatures ({name: tf.function}) that --signatures names
  (wanted: `requested_signatures`'s list; None: all), in its order. Raises
  ExportError for an empty list, an unknown name, or one without
  serving_default or a `needed_signatures` one."""
  if wanted is None:
    return dict(family)
  valid = ",".join([SERVING_DEFAULT] + sorted(set(family) - {SERVING_DEFAULT}))
  given = ",".join(wanted)
  names = f"the {model}'s signatures are {valid}"
  if not wanted:
    raise ExportError(f"--signatures is empty: {names} (serving_default "
                      "alone has core TF ops only)")
  unknown = [n for n in wanted if n not in family]
  if unknown:
    raise ExportError(f"--signatures={given}: no signature "
                      f"{', '.join(unknown)}; {names}")
  if SERVING_DEFAULT not in wanted:
    raise ExportError(f"--signatures={given}: serving_default is required "
                      f"(TF Serving's default signature); {names}")
  missing = [n for n in needed_signatures(task)
             if n in family and n not in wanted]
  if missing:
    raise ExportError(
        f"--signatures={given}: the {model}'s results come from "
        f"{', '.join(missing)} (albert_tf.load predicts through it), so its "
        f"SavedModel keeps it; {names}. For ids in and core TF ops only, "
        "export_onnx or export_tflite serve its serving_default")
  return {n: family[n] for n in family if n in wanted}


class Restored(NamedTuple):
  """A fine-tuned model restored from its output_dir (`restore_task`)."""
  task: type            # the family's Task subclass
  record: object        # core.record.ModelInfo, max_seq_length filled in
  model: object         # the family's export_model, restored
  tokenizer: object
  config: object
  prefix: str           # the checkpoint prefix read


def restore_task(checkpoint, task_name, model_name, record,
                 spm_model_file=None, vocab_file=None, do_lower_case=None):
  """The family's `export_model` restored from checkpoint (no dtype policy,
  no flags)."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  config, tokenizer = resolve_model(checkpoint, None, None, spm_model_file,
                                    vocab_file, do_lower_case)
  task = registry.family(task_name, record.task_module).task
  record = dataclasses.replace(
      record, max_seq_length=default_seq_length(record, config))
  try:
    model = task.export_model(config, record)
  except ValueError as e:
    raise ExportError(str(e)) from None
  report = restore(checkpoint, model, model_name)
  return Restored(task, record, model, tokenizer, config, report["prefix"])


def restore_encoder(checkpoint, spm_model_file=None, vocab_file=None,
                    do_lower_case=None):
  """(AlbertEncoder with the checkpoint's encoder weights, tokenizer)."""
  from albert_tf.modeling.encoder import AlbertEncoder  # pylint: disable=g-import-not-at-top
  config, tokenizer = resolve_model(checkpoint, None, None, spm_model_file,
                                    vocab_file, do_lower_case)
  model = AlbertEncoder(config)
  restore(checkpoint, model, ENCODER)
  return model, tokenizer


# ------------------------------------------------------------ fill-mask
def load_pretrainer(checkpoint, albert_config_file=None, spm_model_file=None,
                    vocab_file=None, do_lower_case=None):
  """(AlbertPretrainer with the checkpoint's weights, tokenizer); a
  FillMaskError when the checkpoint has no masked_lm_head."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertPretrainer
  from albert_tf.training import resolution
  from albert_tf.training.checkpoints import restore_weights
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
  """Top-k predictions per [MASK] of each text: one list per text, with one
  list per [MASK] (left to right) of top_k (piece, id, probability) tuples,
  most probable first. Raises FillMaskError for a text without [MASK] or
  longer than the model takes."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf.serving.fill_mask_graph import predict_masks
  from albert_tf.serving.fill_mask_graph import special_ids
  if top_k < 1:
    raise FillMaskError(f"--top_k must be >= 1, got {top_k}")
  for n, text in enumerate(texts, 1):
    if MASK_TOKEN not in text:
      raise FillMaskError(f"text {n} has no {MASK_TOKEN}: {text[:60]!r}")
  if not texts:
    return []
  limit = model.config.max_position_embeddings
  texts = list(texts)
  encoder = _masked_encoder(tokenizer, limit)
  batches = [encoder(tf.constant(texts[i:i + FILL_MASK_BATCH_SIZE]))
             for i in range(0, len(texts), FILL_MASK_BATCH_SIZE)]
  lengths = np.concatenate([b["num_tokens"].numpy() for b in batches])
  for n in np.flatnonzero(lengths > limit)[:1]:
    raise FillMaskError(
        f"text {n + 1} is {lengths[n]} tokens with [CLS]/[SEP], more than the "
        f"model's max_position_embeddings={limit}: {texts[n][:60]!r}")
  excluded = special_ids(tokenizer)  # no fill is [CLS], [MASK], <pad>, ...
  results = []
  for batch in batches:
    width = int(tf.reduce_max(tf.reduce_sum(batch[F.INPUT_MASK], 1)))
    features = {k: batch[k][:, :width] for k in F.ENCODER_INPUTS}
    features[F.MASKED_LM_POSITIONS] = batch[F.MASKED_LM_POSITIONS]
    probabilities, ids = predict_masks(model, features, top_k,
                                       tokenizer.vocab_size, excluded)
    probabilities, ids = probabilities.numpy(), ids.numpy()
    for row, masks in enumerate(batch["num_masks"].numpy()):
      results.append([
          [(piece, int(i), float(p)) for piece, i, p in zip(
              tokenizer.convert_ids_to_tokens(ids[row, m].tolist()),
              ids[row, m], probabilities[row, m])]
          for m in range(masks)])
  return results


def _masked_encoder(tokenizer, length):
  # pylint: disable=g-import-not-at-top
  from albert_tf.serving import text_graph
  from albert_tf.serving.fill_mask_graph import MaskedTextEncoder
  return text_graph.kept(("fill_mask", tokenizer.fingerprint, length),
                         lambda: MaskedTextEncoder(tokenizer, length))
