r"""Export a checkpoint as a versioned SavedModel for TF Serving.

    python -m albert_tf.export_saved_model \
        --checkpoint=demo_output/finetune \
        --export_dir=saved_models/sentiment --max_seq_length=128

writes `saved_models/sentiment/<version>/` (the next free integer unless
--version is given). What is served is the task's: the task_record.json
beside the checkpoint names its family (`albert_tf.tasks.registry`), whose
`export_model` and `export_signatures` say what to restore and serve.
--model (encoder | classifier | pretrainer | tagger | ...) defaults to that
family's `export_name`, or to encoder when nothing is recorded; a family's
name on another family's checkpoint is refused, and --model=encoder serves
the encoder of any checkpoint. Signatures:

  serving_default  int32 `input_ids`, `input_mask`, `segment_ids` [batch, seq]
                   (+ `masked_lm_positions` [batch, P] for the pretrainer).
                   Core TF ops only.
  serve_text       string `text` [batch] (+ `text_b` for pairs, +
                   `masked_lm_positions` for the pretrainer), tokenized in the
                   graph by `albert_tf.serving.text_graph` exactly as the Python
                   tokenizer does, truncated to --max_seq_length. TF Text ops.
  serve_fill_mask  pretrainer only: string `text` [batch] with [MASK]s and
                   int32 `top_k` -> the top-k pieces, ids and probabilities
                   per [MASK] (`albert_tf.serving.fill_mask_graph`). TF Text
                   ops.

One SavedModel is one graph: with serve_text or serve_fill_mask in it, TF
Text's ops must be registered to load it at all, whichever signature is
called (`import tensorflow_text` before `tf.saved_model.load`; else "Op
type not registered 'NormalizeUTF8'" or 'SentencepieceOp').
--signatures=serving_default saves it alone, core TF ops only, for stock
TensorFlow, `saved_model_cli run` and a TF Serving without TF Text; the app
tokenizes (albert_export.json says how). A tagger, span QA and the
pretrainer keep serve_text (serve_fill_mask), where their results are
decoded; their ids-only artifacts are export_onnx's and export_tflite's.
Which TF Serving build runs which version: saved_models/README.md.

Before a version is renamed into place it is loaded back and run on a few
held-out examples (`albert_tf.serving.saved_model_check`: a
serving_default-only version by a child process that never imports
tensorflow_text). Its outputs must be the model's in memory within 1e-4 of
each output's scale (1e-2 for bfloat16); else the export exits non-zero
with one line and writes nothing. The figures are albert_export.json's
`verification` and the model card's verified section.

Outputs: encoder `sequence_output` (by serve_text: as long as the batch's
length bucket), `pooled_output`; classifier `logits`,
`probabilities` (regression: `logits` only); pretrainer `sequence_output`,
`pooled_output`, `mlm_logits` [batch, P, vocab], `sop_logits` [batch, 2];
tagger `logits` [batch, seq, tags] float32, `tag_ids` [batch, seq] int32.
The tagger's serve_text takes string `text` [batch] and returns entities
with character offsets: `entity_types`, `entity_texts`, `entity_starts`,
`entity_ends` [batch, E], `num_entities` [batch], `char_tags` [batch, C]
and `num_untagged_chars` [batch] (`albert_tf.serving.tagging_graph.
TextTagger.__call__`); split texts longer than max_seq_length - 2 pieces
before sending.

Serving speed (saved_models/README.md, "Faster serving"): --length_buckets,
--jit_compile and --mixed_precision=bfloat16 (the flags below);
serving_default takes whatever length the caller sends, with any option.

Also written (`albert_tf.serving.saved_model`): `assets/<tokenizer file>`,
`assets.extra/albert_export.json` (what an app or export_tflite needs: the
task record, tokenizer, labels and how the version serves),
`assets.extra/tf_serving_warmup_requests` and the model card README.md, in
a hidden folder renamed into place: a polling server never sees half a
model.
"""

import dataclasses
import inspect
import os
from typing import List, Optional, Sequence, Tuple, Union

from albert_tf.core import features as F
from albert_tf.core import file_io
from albert_tf.core import settings
# TensorFlow and what imports it are imported by the functions that run
# (the library part, training.export, imports none): --help and a flag
# mistake answer before TF loads.
from albert_tf.training.export import (  # noqa: F401  (this module's API too)
    ENCODER, SERVING_DEFAULT, ExportError, check_finite, default_seq_length,
    model_choices, requested_signatures, resolve_model, resolve_task, restore,
    select_signatures)

FULL_PADDING = "none"  # --length_buckets=none: every row max_seq_length
SMALLEST_BUCKET = 16
# What an export may compute in (`training.runtime.canonical_precision`).
EXPORT_PRECISIONS = ("none", "bfloat16")


def length_buckets_for(value: Union[None, str, Sequence[int]],
                       max_seq_length: int) -> Tuple[int, ...]:
  """--length_buckets as the sorted lengths, max_seq_length the last.

  value: None (16, 32, 64, ... below max_seq_length), "none" or an empty
  sequence (max_seq_length alone: full padding), a comma list "16,32,64"
  or ints.
  Raises:
    ExportError: not lengths, or one outside [2, max_seq_length].
  """
  if value is None:
    value = [SMALLEST_BUCKET << i for i in range(int(max_seq_length))
             if SMALLEST_BUCKET << i < max_seq_length]
  if isinstance(value, str):
    text = value.strip()
    if text.lower() == FULL_PADDING:
      return (int(max_seq_length),)
    try:
      value = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
      raise ExportError(f"--length_buckets must be lengths separated by "
                        f"commas (e.g. 16,32,64) or {FULL_PADDING}, got "
                        f"{text!r}") from None
  buckets = sorted({int(v) for v in value})
  bad = [b for b in buckets if not 2 <= b <= max_seq_length]
  if bad:
    raise ExportError(f"--length_buckets {bad}: each must be in [2, "
                      f"--max_seq_length={max_seq_length}] (texts are cut "
                      "at max_seq_length, which is always the last bucket)")
  return tuple(b for b in buckets if b < max_seq_length) + (
      int(max_seq_length),)


def encoder_signatures(model, tokenizer, max_seq_length, text_pair,
                       length_buckets=None):
  """--model=encoder: `sequence_output` and `pooled_output` (float32)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf.serving import saved_model
  from albert_tf.serving.text_graph import TextEncoder
  encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length,
                                       length_buckets=length_buckets)

  def run(features):
    outputs = model(features, training=False)
    return {n: tf.cast(outputs[n], tf.float32) for n in F.ENCODER_OUTPUTS}

  return {"serving_default": saved_model.ids_signature(
              run, vocab_size=model.config.vocab_size),
          "serve_text": saved_model.signature(
              lambda t: run(encoder(t["text"], t.get("text_b"))),
              saved_model.text_specs(bool(text_pair)))}


def export(checkpoint, export_dir, model=None, preset=None,
           albert_config_file=None, spm_model_file=None, vocab_file=None,
           do_lower_case=None, num_labels=None, version=None,
           max_seq_length=None, text_pair=None, overwrite=False,
           length_buckets=None, jit_compile=False, mixed_precision="none",
           signatures=None):
  """Writes export_dir/<version>/ and returns its path.

  The arguments are `ExportSettings`' fields (the flags); length_buckets
  may also be a sequence of ints (`length_buckets_for`), signatures a
  sequence of names (`requested_signatures`). A family whose
  export_signatures takes no length_buckets pads to max_seq_length and
  refuses buckets given explicitly.
  Raises:
    ExportError: bad flags, an existing version without overwrite, a
      checkpoint that does not match the config or the task, or a version
      that fails its check (`serving.saved_model_check`; nothing is left).
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks import registry
  from albert_tf.modeling.encoder import AlbertEncoder
  from albert_tf.core.record import RECORD_FILE, ModelInfo
  from albert_tf.training import resolution
  from albert_tf.training import runtime
  precision = export_precision(mixed_precision)
  wanted = requested_signatures(signatures)
  if os.path.exists(export_dir) and not os.path.isdir(export_dir):
    raise ExportError(f"--export_dir={export_dir} is a file, not a folder "
                      "(the export writes numbered version folders under it)")
  record = registry.read_record(checkpoint)
  recorded = record  # its length is the default even for the encoder
  task_name, model = resolve_task(checkpoint, model, record)
  task = registry.family(task_name).task if task_name else None
  if task is None:
    record = ModelInfo()  # the encoder serves no task's labels or length
  elif record is None:
    record = ModelInfo(task=task_name)
  if num_labels and record.num_labels and num_labels != record.num_labels:
    raise ExportError(f"--num_labels={num_labels} but the {RECORD_FILE} "
                      f"beside --checkpoint says {record.num_labels}; omit "
                      "--num_labels")
  config, tokenizer = resolve_model(
      checkpoint, preset, albert_config_file, spm_model_file, vocab_file,
      do_lower_case)
  max_seq_length = max_seq_length or default_seq_length(recorded, config)
  record = dataclasses.replace(
      record, num_labels=record.num_labels or num_labels,
      max_seq_length=max_seq_length)
  buckets = length_buckets_for(length_buckets, max_seq_length)
  # Families whose export_signatures takes length_buckets pad to them.
  bucketed = task is None or "length_buckets" in inspect.signature(
      task.export_signatures).parameters
  if not bucketed and length_buckets is not None and len(buckets) > 1:
    raise ExportError(f"--length_buckets: the {model}'s serve_text pads to "
                      "--max_seq_length; omit --length_buckets or pass "
                      f"--length_buckets={FULL_PADDING}")
  buckets = buckets if bucketed else (max_seq_length,)
  try:
    # First what the record says (labels, the task's own fields); the
    # layers take the compute dtype of the policy they are built under.
    with runtime.dtype_policy(precision):
      keras_model = (task.export_model(config, record) if task else
                     AlbertEncoder(config))
    resolution.check_seq_length(max_seq_length, config)
  except ValueError as e:
    raise ExportError(str(e)) from None

  if version is not None and int(version) < 0:
    raise ExportError(f"--version must be a non-negative integer, got "
                      f"{version}")
  # One export at a time into export_dir (the version it picks, its
  # temporaries): held until this function returns.
  created = "://" not in export_dir and not os.path.exists(export_dir)
  lock = file_io.lock_output(export_dir, "--export_dir", error=ExportError)
  done = False
  try:
    path = _export_locked(
        checkpoint, export_dir, version, overwrite, keras_model, model, task,
        record, tokenizer, config, max_seq_length, text_pair, buckets,
        bucketed, jit_compile, precision, wanted)
    done = True
    return path
  finally:
    if lock is not None:
      lock.release()
    # A failed export leaves no --export_dir it created for its lock.
    if created and not done and os.path.isdir(export_dir) and not (
        os.listdir(export_dir)):
      os.rmdir(export_dir)


def _export_locked(checkpoint, export_dir, version, overwrite, keras_model,
                   model, task, record, tokenizer, config, max_seq_length,
                   text_pair, buckets, bucketed, jit_compile, precision,
                   wanted):
  """export()'s writing part, under export_dir's lock."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.core import quiet_logs
  from albert_tf.serving import model_card
  from albert_tf.serving import saved_model
  from albert_tf.serving import saved_model_check
  from albert_tf.tasks.base import Task
  from albert_tf.training import runtime
  version = saved_model.next_version(export_dir) if version is None else int(
      version)
  path = os.path.join(export_dir, str(version))
  if os.path.exists(path) and not overwrite:
    raise ExportError(f"{path} already exists; pass --overwrite to "
                      "replace it, or omit --version to write the next one")

  # The signatures (traced by make_archive, after the restore) first: a
  # --signatures mistake is answered before the checkpoint is read.
  served = saved_model.served_model(keras_model, jit_compile, precision)
  options = {"length_buckets": buckets} if bucketed else {}
  try:
    family = (task.export_signatures(served, record, tokenizer,
                                     max_seq_length, text_pair, **options)
              if task else
              encoder_signatures(served, tokenizer, max_seq_length,
                                 text_pair, **options))
  except ValueError as e:
    raise ExportError(str(e)) from None
  signatures = select_signatures(family, wanted, task, model)
  report = restore(checkpoint, keras_model, model)
  with runtime.dtype_policy(precision):  # (anything built while tracing)
    archive = saved_model.make_archive(keras_model, signatures)
  metadata = saved_model.export_metadata(
      record, model, version, report["prefix"], config, tokenizer,
      family, length_buckets=buckets, jit_compile=jit_compile,
      mixed_precision=precision, saved=signatures)
  # The model card's inputs: serve_text's, else those albert_tf.load
  # encodes in Python for serving_default.
  serve_text = signatures.get("serve_text")
  inputs = ([s.name for s in serve_text.input_signature]
            if serve_text is not None else
            list(task.serve_text_inputs(record))
            if task is not None and task.decodes_serving_default else [])
  family_task = task or Task  # an encoder encodes as the base Task does
  held = saved_model_check.held_out(record, family_task, tokenizer)

  def card(meta):
    # No TF Serving request of serve_text when the version has none.
    return model_card.card(meta, report["prefix"], tokenizer.model_file,
                           inputs, path,
                           tf_serving=serve_text is not None,
                           verification=meta.verification)

  def verify(folder):
    try:
      # (Lines TF's C++ prints the first time a kernel runs, such as
      # oneDNN's DT_INT64 one in serve_text, are not the command's.)
      with quiet_logs.cpp_lines_hidden():
        return saved_model_check.verify(folder, signatures, held, record,
                                        family_task, tokenizer,
                                        max_seq_length, precision)
    except saved_model_check.CheckError as e:
      raise ExportError(str(e)) from None

  return saved_model.write_version(archive, export_dir, version, tokenizer,
                                   metadata, signatures[SERVING_DEFAULT],
                                   overwrite,
                                   extra_files={model_card.CARD_FILE: card},
                                   verify=verify)


def export_precision(mixed_precision) -> str:
  """none|bfloat16 from --mixed_precision (Keras policy names accepted)."""
  from albert_tf.training import runtime  # pylint: disable=g-import-not-at-top
  try:
    precision = runtime.canonical_precision(mixed_precision)
  except ValueError as e:
    raise ExportError(str(e)) from None
  if precision not in EXPORT_PRECISIONS:
    raise ExportError(f"--mixed_precision={mixed_precision}: an export "
                      f"computes in {' or '.join(EXPORT_PRECISIONS)}")
  return precision


@dataclasses.dataclass
class ExportSettings:
  """The command line of export_saved_model; the fields are the flags."""
  checkpoint: str = settings.field(
      None, "Checkpoint prefix, or a directory (its latest checkpoint).",
      required=True)
  export_dir: str = settings.field(
      None, "Model base path, e.g. saved_models/NAME; versions go in integer "
      "subdirs.", required=True)
  model: Optional[str] = settings.field(
      None, "What to export: encoder, or a task family's export_name "
      "(pretrainer, classifier, tagger, ...; a wrong name is answered with "
      "the list). Default: the recorded task, else encoder.")
  preset: Optional[str] = settings.field(None, "Config preset name.")
  albert_config_file: Optional[str] = settings.field(
      None, "albert_config.json (default: the one beside the checkpoint).")
  spm_model_file: Optional[str] = settings.field(None, "SentencePiece model.")
  vocab_file: Optional[str] = settings.field(None, "WordPiece vocab.txt.")
  do_lower_case: Optional[bool] = settings.field(
      None, "Lowercase + strip accents (default: as recorded beside the "
      "checkpoint, else true).")
  num_labels: Optional[int] = settings.field(
      None, "Classifier classes (default: task_record.json beside the "
      "checkpoint).")
  version: Optional[int] = settings.field(
      None, "Version (default: next free).")
  # What the exported model takes.
  max_seq_length: Optional[int] = settings.field(
      None, "serve_text truncation length, the largest length bucket "
      "(default: the length in task_record.json, fine-tuning's or a "
      "pretraining run's, else 128 within max_position_embeddings).",
      group="model")
  text_pair: Optional[bool] = settings.field(
      None, "serve_text takes text_b too (default: pretrainer and pair "
      "tasks).", group="model")
  length_buckets: Optional[str] = settings.field(
      None, "serve_text pads a batch to the smallest of these lengths that "
      "holds its longest text (comma list; --max_seq_length is always the "
      f"last; {FULL_PADDING}: always --max_seq_length). Default: "
      f"{SMALLEST_BUCKET}, {2 * SMALLEST_BUCKET}, ... up to "
      "--max_seq_length. Encoder, classifier and tagger; the other families "
      "pad to --max_seq_length.", group="model")
  jit_compile: bool = settings.field(
      False, "XLA-compile the model inside the signatures (one compilation "
      "per input shape; see benchmarks/serving_latency.py).", group="model")
  mixed_precision: str = settings.field(
      "none", f"Compute dtype of the exported model: "
      f"{'|'.join(EXPORT_PRECISIONS)} (Keras policy names accepted); "
      "variables, LayerNorm statistics, the attention softmax and the "
      "outputs stay float32.", group="model")
  signatures: Optional[List[str]] = settings.field(
      None, "The signatures to save, a comma list (default: all the "
      "family's, serving_default,serve_text + serve_fill_mask for the "
      "pretrainer). serving_default alone: core TF ops only (checked in a "
      "process without tensorflow_text); with serve_text or serve_fill_mask "
      "the SavedModel needs TF Text's ops to load at all. A tagger, span QA "
      "and the pretrainer keep the signature albert_tf.load predicts "
      "through.", group="model")
  overwrite: bool = settings.field(False, "Replace an existing version.")


def main(argv):
  del argv
  s = settings.from_flags(ExportSettings)
  path = export(**dataclasses.asdict(s))
  from albert_tf.serving import export_files  # pylint: disable=g-import-not-at-top
  checked = export_files.read_export_record(path).verification or {}
  print(f"Verified: {checked.get('verdict')} ({checked.get('runtime')}; "
        f"{checked.get('source')})")
  print(f"Exported {s.model or 'the recorded task'} to {path}")


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(ExportSettings)
  cli_errors.run_main(main)
