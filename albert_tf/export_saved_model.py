r"""Export a checkpoint as a versioned SavedModel for TF Serving.

    python -m albert_tf.export_saved_model \
        --checkpoint=demo_output/finetune \
        --export_dir=saved_models/sentiment --max_seq_length=128

writes `saved_models/sentiment/<version>/` (the next free integer unless
--version is given). What is served is the task's: the task_record.json
beside the checkpoint names its family (`albert_tf.registry`), whose
`export_model` and `export_signatures` say what to restore and serve.
--model (encoder | classifier | pretrainer | tagger) defaults to that
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

--signatures (default: all of the family's) says which are saved. One
SavedModel is one graph: with serve_text or serve_fill_mask in it, TF
Text's ops must be registered to load the SavedModel at all, whichever
signature is called (in Python, `import tensorflow_text` before
`tf.saved_model.load`; `saved_model_cli run` and TF Serving fail with "Op
type not registered 'NormalizeUTF8'" or 'SentencepieceOp' otherwise).
--signatures=serving_default saves serving_default alone, with core TF
ops only: stock TensorFlow, `saved_model_cli run` and a TF Serving built
without TF Text load and run it, and the app tokenizes (albert_export.json
says how; `albert_tf.load` encodes raw text in Python). A tagger, span QA
and the pretrainer keep serve_text (serve_fill_mask) beside it: their
results (entities, answers, filled masks) are decoded in that graph; their
ids-only artifacts are export_onnx's and export_tflite's. TF Serving's own
builds link TF Text's ops, at the version their workspace pins, which has
lagged TF Text's (tensorflow/serving#1490, #2064, #4057); whether a build
runs a version is found by loading it there and sending one serve_text
request (saved_models/README.md, "Which TensorFlow loads which export":
the ops a SavedModel uses, and why grepping the binary does not tell).

Before a version is renamed into place it is loaded back and run on a few
held-out examples (the run's dev split when the record names it and the
family reads it back, else texts of the tokenizer's own pieces;
`albert_tf.serving.saved_model_check`): a serving_default-only version by
a child process that never imports tensorflow_text, one with serve_text in
this process, every signature. Its outputs must be those of the model in
memory, within 1e-4 of each output's scale (1e-2 for bfloat16; measured:
exactly 0 for every family, float32, bfloat16 and --jit_compile, the same
graph on the same kernels); else the export exits non-zero with one line
and writes nothing. The figures (runtime, examples, source, max_abs_diff,
max_relative_difference, the op types outside core TF) are the
`verification` of albert_export.json and the card's verified section.

Outputs: encoder `sequence_output` (by serve_text: as long as the batch's
length bucket), `pooled_output`; classifier `logits`,
`probabilities` (regression: `logits` only); pretrainer `sequence_output`,
`pooled_output`, `mlm_logits` [batch, P, vocab], `sop_logits` [batch, 2];
tagger `logits` [batch, seq, tags] float32, `tag_ids` [batch, seq] int32.

The tagger's serve_text (a run_ner output_dir; tags, max_seq_length,
do_lower_case and token_level come from its task_record.json) takes string
`text` [batch] and returns entities with character offsets, read the way
run_ner read its data: `entity_types`, `entity_texts`, `entity_starts`,
`entity_ends` [batch, E], `num_entities` [batch], `char_tags` [batch, C]
and `num_untagged_chars` [batch] (`albert_tf.serving.tagging_graph.
TextTagger.__call__` says how; fine-tuning split its tokens into pieces
with the same graph). Split texts longer than max_seq_length - 2 pieces
before sending.

Serving speed (saved_models/README.md, "Faster serving"): --length_buckets
(default 16, 32, ... up to --max_seq_length; `none`: full padding) pads a
serve_text batch to the smallest length that holds its longest row, with
the outputs of full padding (the padding is masked; encoder, classifier and
tagger); --jit_compile makes the model call inside each signature one
tf.function(jit_compile=True), the tokenizer ops outside it; and
--mixed_precision=bfloat16 computes in bfloat16 with float32 outputs.
serving_default takes whatever length the caller sends, with any option.

Also written (`albert_tf.serving.saved_model`): `assets/<tokenizer file>`,
`assets.extra/albert_export.json` (what an app or export_tflite needs: task,
model, max_seq_length, tokenizer, labels, the task's own fields, and
length_buckets, jit_compile, mixed_precision, signatures and verification) and
`assets.extra/tf_serving_warmup_requests` (PredictionLog records for
serving_default). The version is written to a hidden temporary directory
beside it and renamed into place, so a polling server never sees half a model.

Over 400 lines: the command, its flags and the one export path of every
task family (task and record resolution, the checkpoint check, length
buckets, XLA and bfloat16) are kept in one module, the export's reference.
"""

import dataclasses
import inspect
import os
from typing import List, Optional, Sequence, Tuple, Union

from albert_tf import features as F
from albert_tf import file_io
from albert_tf import settings
# The library part (restoring, resolving the task; no TensorFlow at import).
from albert_tf.training.export import (  # noqa: F401  (this module's API too)
    ENCODER, ExportError, check_finite, default_seq_length, model_choices,
    resolve_model, resolve_task, restore)

# TensorFlow and what imports it (tasks, serving, modeling, checkpoints)
# are imported by the functions that run, not here: --help and a flag
# mistake answer before TF loads.

FULL_PADDING = "none"  # --length_buckets=none: every row max_seq_length
SERVING_DEFAULT = "serving_default"  # TF Serving's default; always saved
SMALLEST_BUCKET = 16
# What an export may compute in (`training.runtime.canonical_precision`).
EXPORT_PRECISIONS = ("none", "bfloat16")


def default_length_buckets(max_seq_length: int) -> Tuple[int, ...]:
  """16, 32, 64, ... below max_seq_length, then max_seq_length itself."""
  buckets, length = [], SMALLEST_BUCKET
  while length < max_seq_length:
    buckets.append(length)
    length *= 2
  return tuple(buckets) + (int(max_seq_length),)


def length_buckets_for(value: Union[None, str, Sequence[int]],
                       max_seq_length: int) -> Tuple[int, ...]:
  """--length_buckets as the sorted lengths, max_seq_length the last.

  value: None (`default_length_buckets`), "none" or an empty sequence
  (max_seq_length alone: full padding), a comma list "16,32,64" or ints.
  Raises:
    ExportError: not lengths, or one outside [2, max_seq_length].
  """
  if value is None:
    return default_length_buckets(max_seq_length)
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


def takes_length_buckets(export_signatures) -> bool:
  """Whether a family's export_signatures pads serve_text to buckets."""
  return "length_buckets" in inspect.signature(export_signatures).parameters


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

  Args:
    checkpoint: a checkpoint prefix, or a directory (its latest checkpoint).
    export_dir: the model base path TF Serving polls.
    model: one of `model_choices()`; default: the recorded task's
      export_name, else "encoder".
    preset / albert_config_file: the encoder config (default: the
      albert_config.json beside the checkpoint).
    spm_model_file / vocab_file: the tokenizer (default: the one named in
      the task_record.json beside the checkpoint).
    num_labels: classifier classes when nothing is recorded (a recorded
      number must agree).
    version: integer version (default: the next free one).
    max_seq_length: serve_text output length (truncation); default: the
      recorded length (fine-tuning's, or a pretraining run's records'),
      else 128 within the config's max_position_embeddings.
    text_pair: whether serve_text takes `text_b` (default: the task's: the
      pretrainer and pair tasks take one).
    overwrite: replace an existing version directory.
    length_buckets: the lengths serve_text pads a batch to
      (`length_buckets_for`: None, the default, is 16, 32, ... up to
      max_seq_length; "none" is full padding). Families whose
      export_signatures takes none pad to max_seq_length, and refuse
      buckets given explicitly.
    jit_compile: XLA-compile the model call inside the signatures.
    mixed_precision: "none" or "bfloat16" (Keras policy names accepted):
      the model's compute dtype; the outputs are float32 either way.
    signatures: the names of the signatures to save, a comma string or a
      sequence (`select_signatures`); None: all the family's.
  Raises:
    ExportError: bad flags, an existing version without overwrite, a
      checkpoint that does not match the config or the task, or a written
      version that does not load, run or compute what the model computes
      (`albert_tf.serving.saved_model_check`; nothing is left at
      export_dir/<version>).
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf import registry
  from albert_tf.modeling.encoder import AlbertEncoder
  from albert_tf.serving import saved_model
  from albert_tf.record import RECORD_FILE, ModelInfo
  from albert_tf.training import resolution
  from albert_tf.training import runtime
  precision = export_precision(mixed_precision)
  wanted = requested_signatures(signatures)
  if os.path.exists(export_dir) and not os.path.isdir(export_dir):
    raise ExportError(f"--export_dir={export_dir} is a file, not a folder "
                      "(the export writes numbered version folders under it)")
  record = ModelInfo.read_beside(checkpoint)
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
  bucketed = task is None or takes_length_buckets(task.export_signatures)
  if not bucketed:
    if length_buckets is not None and len(buckets) > 1:
      raise ExportError(f"--length_buckets: the {model}'s serve_text pads "
                        "to --max_seq_length; omit --length_buckets or pass "
                        f"--length_buckets={FULL_PADDING}")
    buckets = (max_seq_length,)
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
  from albert_tf.serving import saved_model
  from albert_tf.serving import saved_model_check
  from albert_tf.training import runtime
  version = saved_model.next_version(export_dir) if version is None else int(
      version)
  final_dir = os.path.join(export_dir, str(version))
  if os.path.exists(final_dir) and not overwrite:
    raise ExportError(f"{final_dir} already exists; pass --overwrite to "
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
  # The model card: what it is, how it was trained, how good, how to call,
  # and what the check of the written version measured.
  from albert_tf.serving import model_card  # pylint: disable=g-import-not-at-top
  serve_text = signatures.get("serve_text")
  if serve_text is not None:
    inputs = [s.name for s in serve_text.input_signature]
  elif task is not None and task.decodes_serving_default:
    # albert_tf.load encodes raw inputs in Python and runs serving_default.
    inputs = list(task.serve_text_inputs(record))
  else:
    inputs = []
  prefix, path = report["prefix"], os.path.join(export_dir, str(version))
  from albert_tf.tasks.base import Task  # pylint: disable=g-import-not-at-top
  family_task = task or Task  # an encoder encodes as the base Task does
  held = saved_model_check.held_out(record, family_task, tokenizer)

  def card(meta):
    # No TF Serving request of serve_text when the version has none.
    return model_card.card(meta, prefix, tokenizer.model_file, inputs, path,
                           tf_serving=serve_text is not None,
                           verification=meta.verification)

  def verify(folder):
    from albert_tf import quiet_logs  # pylint: disable=g-import-not-at-top
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


def requested_signatures(value) -> Optional[List[str]]:
  """--signatures as a list of names (None: all the family's).

  value: None, a comma string or a sequence of names. The names are
  checked against the family's by `select_signatures`.
  """
  if value is None:
    return None
  if isinstance(value, str):
    value = value.split(",")
  return list(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))


def needed_signatures(task) -> Tuple[str, ...]:
  """What albert_tf.load predicts through beside serving_default, which a
  family's SavedModel must keep: serve_fill_mask for a family that fills
  masks, serve_text for one whose results serve_text decodes in the graph
  (a tagger's entities, span QA's answers); nothing for an encoder or a
  family decoded from serving_default's outputs
  (`Task.decodes_serving_default`: classifiers, multiple choice)."""
  if task is None or task.decodes_serving_default:
    return ()
  return ("serve_fill_mask",) if task.fills_masks else ("serve_text",)


def select_signatures(family, wanted, task, model):
  """The family's signatures ({name: tf.function}) that --signatures names
  (wanted: `requested_signatures`'s list; None: all), in its order.

  Raises:
    ExportError (one line, naming --signatures and the family's names):
      an empty list, a name the family does not serve, a list without
      serving_default, or one without the signature albert_tf.load
      predicts the family's results through (`needed_signatures`).
  """
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
      None, "What to export: encoder, or the export_name of a task family "
      "in albert_tf/tasks (pretrainer, classifier, tagger, ...; a wrong name "
      "is answered with the list). Default: the task recorded beside the "
      "checkpoint, else encoder.")
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
      None, "The signatures to save, a comma list. serving_default alone: "
      "core TF ops only, so stock TensorFlow, saved_model_cli and a TF "
      "Serving without TF Text's ops load and run it (checked before it is "
      "written: loaded by a process without tensorflow_text). With "
      "serve_text (or serve_fill_mask) the SavedModel needs TF Text's ops to "
      "load at all, whichever signature is called (saved_models/README.md: "
      "how to check a TF Serving build). Default: all the family's, "
      "serving_default,serve_text (+ serve_fill_mask for the pretrainer). A "
      "tagger, span QA and the pretrainer keep the signature albert_tf.load "
      "predicts through.", group="model")
  overwrite: bool = settings.field(False, "Replace an existing version.")


def main(argv):
  del argv
  s = settings.from_flags(ExportSettings)
  path = export(
      checkpoint=s.checkpoint, export_dir=s.export_dir, model=s.model,
      preset=s.preset, albert_config_file=s.albert_config_file,
      spm_model_file=s.spm_model_file, vocab_file=s.vocab_file,
      do_lower_case=s.do_lower_case, num_labels=s.num_labels,
      version=s.version, max_seq_length=s.max_seq_length,
      text_pair=s.text_pair, overwrite=s.overwrite,
      length_buckets=s.length_buckets, jit_compile=s.jit_compile,
      mixed_precision=s.mixed_precision, signatures=s.signatures)
  from albert_tf.serving import saved_model  # pylint: disable=g-import-not-at-top
  checked = saved_model.ExportInfo.read(os.path.join(
      path, "assets.extra", saved_model.METADATA_FILE)).verification or {}
  print(f"Verified: {checked.get('verdict')} ({checked.get('runtime')}; "
        f"{checked.get('source')})")
  print(f"Exported {s.model or 'the recorded task'} to {path}")


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(ExportSettings)
  cli_errors.run_main(main)
