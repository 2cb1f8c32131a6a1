r"""Convert an exported SavedModel's serving_default to TFLite (LiteRT), builtin ops only.

    python -m albert_tf.export_tflite --saved_model=saved_models/sentiment/1 \
        --output=tflite/sentiment_dynamic.tflite --quantize=dynamic

What is family-specific (the fixed input shapes: [1, L], or [1,
num_choices, L] for multiple choice; how a calibration line is read and
encoded) is the family's (`Task.tflite_input_shapes`,
`Task.calibration_inputs`, `Task.encode_inputs`), found through the registry
by the export's task.

The model is converted through a SavedModel, never `from_concrete_functions`
(with a Keras 3 model that path does not freeze the variables: the .tflite
comes out tiny and outputs NaN). A small wrapper SavedModel pins the inputs to
one example of the length stored at export ([1, max_seq_length]; [1,
num_choices, max_seq_length] for multiple choice) and keeps only
serving_default, so no TF Text op reaches the converter and no Flex delegate
is needed (the pip LiteRT interpreter no longer has one).

--quantize:
  none     float32.
  float16  float16 weights, float32 compute (half the size, ~1e-3 error).
  dynamic  int8 weights, activations quantized on the fly (a quarter of the
           size; the usual choice for BERT-like models on CPU).
  int8     the matmuls, GELU and the embedding lookup in int8 (weights per
           channel, activations calibrated on --representative_data: real
           text from a TSV, 500 lines by default); attention scores,
           softmax, LayerNorm and the residual adds stay float32
           (`INT8_FLOAT_OPS`). Not integer-only (no use for an NPU that
           needs that); on a CPU, dynamic is as small and as fast and
           agrees with the float model more often, so it stays the default.

Writes PATH.tflite (say m.tflite), its tokenizer beside it (m.spm.model,
or m.vocab.txt for a WordPiece vocab, so models exported into one folder
keep their own; an .onnx of the same stem shares it only when it is the
same file, else the export is refused), m.tflite.json (input/output
names, shapes and dtypes, the tokenizer file's name, the special ids,
labels, the normalisation rules an app must apply before tokenizing, and
the verification figures) and the model card m.tflite.README.md.
`albert_tf.load("m.tflite").predict([...])` serves it in LiteRT.

Verified before it is handed over (`serving.verify`): the .tflite runs in
LiteRT on held-out examples (--verify_data, else the run's recorded dev
split) and is compared with the SavedModel's float serving_default. Below a
floor (agreement 99.5% for none; 95% and at most 2 points of accuracy lost
for float16, dynamic and int8; --min_agreement, --max_metric_drop) the
command exits 1 with one line naming the figures and the mode to use
instead, and writes nothing; --allow_degraded writes it with DEGRADED on
its card. The figures are in the JSON and on the card.

The files are written in a dot-named scratch folder inside the output
folder (`.tmp-NAME.tflite-XXXXXXXX`, which also holds the converter's
fixed-shape SavedModel) and renamed into place once all are complete and
verified: a failure, a refusal or a kill leaves the files already at PATH
as they were. The scratch folder is removed when the command ends; one left
by a killed export of the same PATH is removed at the next start, with a
warning.

A tagger (`export_saved_model --model=tagger`) converts the same way: outputs
`logits` [1, L, tags] and `tag_ids` [1, L]; m.tflite.json adds its tags
(`label_list`) and `token_level`. serve_text's splitting and entity reading
are not in the .tflite (TF Text ops): an app does them around it, in Python
with `ner_data.encode_text` and `ner_data.tag_text`:

    tokens, features, positions = ner_data.encode_text(
        text, tokenizer, info["token_level"], info["max_seq_length"])
    tag_ids = runner(**features)[F.TAG_IDS][0]
    result = ner_data.tag_text(
        text, tokens, [info["label_list"][tag_ids[p]] for p in positions])
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import tempfile
from typing import List, Optional

from absl import logging

from albert_tf import errors
from albert_tf import file_io
from albert_tf import settings
from albert_tf.features import ENCODER_INPUTS
from albert_tf.data.tokenization import load_tokenizer, write_synced
from albert_tf.serving import verify

# TensorFlow, NumPy and what imports them (serving, tasks, checkpoints,
# the NER and classifier readers) are imported by the functions that run,
# not here: --help and a flag mistake answer before TF loads.

QUANTIZE_MODES = ("none", "float16", "dynamic", "int8")
# --quantize=int8 keeps these op kinds in float32; the matmuls
# (FULLY_CONNECTED, int8 weights per channel), GELU/TANH and the embedding
# GATHER run in int8. Whole-model int8 broke a real BERT (MiniLM-L6 on BBC
# headlines: 108/500 labels as the checkpoint's; benchmarks/export_fidelity.py):
# the attention scores share one int8 scale with the -10000 mask add (both
# ADDs, so they cannot be told apart by kind), and the LayerNorm variance
# saturates. With these kept float: 477/500, accuracy 0.798 vs 0.794.
INT8_FLOAT_OPS = ("ADD", "SUB", "MUL", "MEAN", "SQUARED_DIFFERENCE", "RSQRT",
                  "BATCH_MATMUL", "SOFTMAX")
# The tokenizer copy beside PATH.tflite: PATH + this suffix, by kind.
TOKENIZER_SUFFIXES = {"sentencepiece": ".spm.model", "wordpiece": ".vocab.txt"}


def tokenizer_copy_name(output, tokenizer_kind):
  """The name of the tokenizer file written beside `output` (no folder)."""
  stem = os.path.splitext(os.path.basename(output))[0]
  return stem + TOKENIZER_SUFFIXES[tokenizer_kind]


def version_dir(saved_model, error=ValueError):
  """saved_model itself when it holds saved_model.pb, else its highest
  numbered version; `error` (a ValueError) naming --saved_model otherwise."""
  if os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
    return saved_model
  versions = sorted(int(d) for d in (os.listdir(saved_model) if os.path.isdir(
      saved_model) else []) if d.isdigit() and os.path.isfile(
          os.path.join(saved_model, d, "saved_model.pb")))
  if not versions:
    raise error(
        f"--saved_model={saved_model}: no saved_model.pb there or in a "
        "numbered version folder (give export_saved_model's export_dir or "
        "a version)")
  return os.path.join(saved_model, str(versions[-1]))


def read_export_record(saved_model_dir):
  """The export's `serving.saved_model.ExportInfo` (a tasks.record.ModelInfo
  and how the SavedModel serves; assets.extra/albert_export.json)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.saved_model import METADATA_FILE, ExportInfo
  path = os.path.join(saved_model_dir, "assets.extra", METADATA_FILE)
  if not os.path.exists(path):
    raise ValueError(f"{path} not found: --saved_model must be a version "
                     "directory written by albert_tf.export_saved_model")
  # The record API reads old and new files alike. As ExportInfo, the
  # SavedModel's length_buckets (serve_text's, not the .tflite's fixed
  # [1, max_seq_length]) are no task field the .json would copy.
  return ExportInfo.read(path)


def read_export_metadata(saved_model_dir):
  """The export's metadata in the flat layout apps see."""
  return read_export_record(saved_model_dir).flat_dict()


def tokenizer_of(saved_model_dir, metadata):
  """The Python tokenizer stored in the SavedModel's assets."""
  path = os.path.join(saved_model_dir, "assets", metadata["tokenizer_file"])
  kind = metadata["tokenizer_kind"]
  return load_tokenizer(
      spm_model_file=path if kind == "sentencepiece" else None,
      vocab_file=path if kind == "wordpiece" else None,
      do_lower_case=metadata["do_lower_case"])


def task_of(record):
  """The family's Task subclass of an export record (`albert_tf.registry`;
  the base Task, sentence packing, for an encoder export)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import registry
  from albert_tf.tasks.base import Task
  if not record.task:
    return Task
  return registry.family(record.task, record.task_module).task


def read_representative_tsv(path, tokenizer, max_seq_length, text_column=-1,
                            text_b_column=None, max_examples=200,
                            record=None):
  """Model-input features of up to max_examples TSV lines (int32, one
  example each: [1, L], or [1, choices, L] for multiple choice).

  Each line is read into the raw inputs of the export's family
  (`Task.calibration_inputs`: text_column and text_b_column for the text
  families, question and context for span QA, article, question and
  options for multiple choice) and encoded as serve_text encodes them
  (`Task.encode_inputs`). record: the export's (`read_export_record`);
  without one, sentence packing.
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.record import ModelInfo
  record = record or ModelInfo()
  task = task_of(record)
  rows = []
  named = [c for c in (text_column, text_b_column)
           if c is not None and not _is_index(c)]
  text_column = _index_or_name(text_column)
  text_b_column = _index_or_name(text_b_column)
  with open(path, encoding="utf-8") as f:
    for line_number, line in enumerate(f, start=1):
      fields = line.rstrip("\r\n").split("\t")
      if not line.strip():
        continue
      if named:  # the first line is the header that names them
        missing = [c for c in named if c not in fields]
        if missing:
          raise ValueError(f"{path}:{line_number}: no column {missing[0]!r} "
                           f"in the header ({', '.join(fields)})")
        text_column, text_b_column = (
            fields.index(c) if isinstance(c, str) else c
            for c in (text_column, text_b_column))
        named = []
        continue
      try:
        rows.append(task.calibration_inputs(record, fields, text_column,
                                            text_b_column))
      except IndexError:
        raise ValueError(f"{path}:{line_number}: no column {text_column}"
                         f"/{text_b_column}") from None
      if len(rows) >= max_examples:
        break
  if not rows:
    raise ValueError(f"--representative_data={path} has no lines")
  return task.calibration_examples(record, tokenizer, max_seq_length, rows,
                                   max_examples)


def _is_index(column):
  return isinstance(column, int) or str(column).strip().lstrip("-").isdigit()


def _index_or_name(column):
  """--text_column's value: an int index, a header name, or None."""
  if column is None or isinstance(column, int):
    return column
  return int(column) if _is_index(column) else str(column)


def _fixed_shape_saved_model(saved_model_dir, out_dir, max_seq_length,
                             max_predictions, record=None):
  """Re-saves serving_default with the family's fixed one-example input
  shapes (`Task.tflite_input_shapes`; TF Text ops left behind)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  # The source SavedModel also holds serve_text; loading it needs the ops.
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import
  from albert_tf.training.checkpoints import check_finite
  if record is None:
    record = read_export_record(saved_model_dir)
  loaded = tf.saved_model.load(saved_model_dir)
  check_finite(loaded.variables, f"--saved_model={saved_model_dir}")
  serving = loaded.signatures["serving_default"]
  # The ids, then what else the task's serving_default takes (a
  # pretrainer's masked_lm_positions).
  names = ENCODER_INPUTS + tuple(sorted(
      set(serving.structured_input_signature[1]) - set(ENCODER_INPUTS)))
  shapes = task_of(record).tflite_input_shapes(record, max_seq_length, names,
                                                max_predictions)
  specs = [tf.TensorSpec(shapes[n], tf.int32, name=n) for n in names]
  module = tf.Module()
  module.loaded = loaded

  @tf.function(input_signature=specs)
  def serve(*args):
    return serving(**dict(zip(names, args)))

  module.serve = serve
  tf.saved_model.save(module, out_dir, signatures={"serving_default": serve})


def convert(saved_model, output, quantize="dynamic", representative_data=None,
            text_column=-1, text_b_column=None, num_calibration_examples=500,
            max_predictions=20, verify_data=None, allow_degraded=False,
            floors=None, num_verify_examples=verify.NUM_EXAMPLES,
            verify_columns=None):
  """Writes output (.tflite), its tokenizer and its .json.

  The tokenizer is output's stem + `.spm.model` / `.vocab.txt`
  (`tokenizer_copy_name`), the JSON and card output + `.json` /
  `.README.md` (`sidecar_names`); each is
  renamed into place only once all three are complete (see the module
  docstring).

  Before the rename, the .tflite runs in LiteRT on held-out examples
  (verify_data, else the run's dev split; `serving.verify`) and is compared
  with the SavedModel's serving_default; below `floors` (a verify.Floors)
  nothing is written unless allow_degraded.

  Returns the metadata dict written to the JSON ("verification": the
  figures).
  Raises:
    verify.ExportVerificationError: the .tflite does not run, or is below
      a floor (one line with the figures and the mode to use instead).
    OSError: writing failed (disk full, permission); one line naming
      --output, and what was replaced (normally nothing).
  """
  if quantize not in QUANTIZE_MODES:
    raise ValueError(f"--quantize must be one of {QUANTIZE_MODES}, got "
                     f"{quantize!r}")
  if quantize == "int8" and not representative_data:
    raise ValueError("--quantize=int8 needs --representative_data=TSV (real "
                     "text to calibrate the activation ranges)")
  saved_model = version_dir(saved_model)
  record = read_export_record(saved_model)
  if record.mixed_precision not in (None, "none"):
    raise ValueError(
        f"--saved_model={saved_model} computes in {record.mixed_precision} "
        "(export_saved_model --mixed_precision), which TFLite has no ops "
        "for: convert a float32 export (--quantize=float16 or dynamic halves "
        "or quarters its size)")
  metadata = record.flat_dict()
  length = metadata["max_seq_length"]
  tokenizer = tokenizer_of(saved_model, metadata)
  # Read before anything is written: a bad TSV is no write error.
  examples = read_representative_tsv(
      representative_data, tokenizer, length, text_column, text_b_column,
      num_calibration_examples, record=record
  ) if quantize == "int8" else None
  if not output.endswith(".tflite"):
    raise ValueError(f"--output={output}: end it in .tflite (its .json, "
                     "tokenizer and card are named after it)")
  names = sidecar_names(output, metadata["tokenizer_kind"])
  check_tokenizer_copy(output, names["tokenizer"], tokenizer.model_file)
  held, reference = held_out_examples(
      record, tokenizer, saved_model, verify_data, num_verify_examples,
      verify_columns, max_predictions)

  with _scratch_folder(output) as (scratch, replaced):
    flatbuffer = _convert_in(scratch, saved_model, length, max_predictions,
                             quantize, examples, record)
    write_synced(os.path.join(scratch, names["model"]), flatbuffer)
    # Proven in LiteRT before anything is renamed into place.
    checked = verify.check(
        output, quantize,
        # Loaded inside the check: a file LiteRT refuses is its one line.
        lambda f: interpreter_fn(os.path.join(scratch, names["model"]))(f),
        reference, held, floors or verify.Floors(), allow_degraded,
        "LiteRT (ai_edge_litert.interpreter)", INSTEAD[quantize])
    with open(tokenizer.model_file, "rb") as f:
      write_synced(os.path.join(scratch, names["tokenizer"]), f.read())
    info = {
        "model_file": names["model"], "quantize": quantize,
        "source_saved_model": os.path.abspath(saved_model),
        "model": metadata["model"], "max_seq_length": length,
        **describe_io(os.path.join(scratch, names["model"])),
        "tokenizer_kind": metadata["tokenizer_kind"],
        "tokenizer_file": names["tokenizer"],
        "do_lower_case": metadata["do_lower_case"],
        "special_ids": metadata["special_ids"],
        # Ids at or above it are refused (serving.tflite_runner).
        "vocab_size": (metadata.get("albert_config") or {}).get("vocab_size"),
        # An input longer than it is refused too.
        "max_position_embeddings": (metadata.get("albert_config") or {}).get(
            "max_position_embeddings"),
        "normalization": metadata["normalization"],
        "verification": checked,
    }
    # And what the family records for apps (a tagger's token_level, span
    # QA's doc_stride and max_query_length, ...).
    for key in ("task", "task_name", "task_module", "text_pair",
                "label_list", "num_labels", *record.task_config):
      if key in metadata:
        info[key] = metadata[key]
    write_synced(os.path.join(scratch, names["json"]), json.dumps(
        info, indent=2, ensure_ascii=False).encode("utf-8"))
    write_synced(os.path.join(scratch, names["card"]), _card(
        saved_model, record, tokenizer, info).encode("utf-8"))
    rename_into_place(scratch, output, names, replaced)
  return info


def read_verify_data(path, record, task, max_examples, input_columns=None):
  """(raw inputs {serve_text name: list}, gold label names or None, a
  description) of --verify_data, read as albert-predict reads files (a TSV
  with a header, JSON lines, plain text; gold labels from "label"; a
  tagger's: a list of tags per row, one per token of its text)."""
  # pylint: disable=g-import-not-at-top
  import types
  from albert_tf import predict
  inputs = task.serve_text_inputs(record)
  view = types.SimpleNamespace(kind=record.task or "encoder", inputs=inputs,
                               task=task, record=record)
  try:
    reader = predict.RowReader(view, path, input_columns=input_columns)
    values, gold = {n: [] for n in inputs}, []
    for number, row in predict.read_rows(path):
      got, label = reader(number, row)
      for name in inputs:
        values[name].append(got[name])
      # As albert-predict reads it (a tagger's: tags per token).
      gold.append(None if label is None else reader.scorer.read_gold(
          label, got, f"{path}:{number}"))
      if len(gold) >= max_examples:
        break
  except predict.PredictError as e:
    # predict's reader names predict's flags; this command's are these.
    text = str(e).replace("--input_file=", "--verify_data=").replace(
        "--input_columns", "--verify_columns")
    raise verify.ExportVerificationError(f"--verify_data: {text}") from None
  if not gold:
    raise verify.ExportVerificationError(f"--verify_data={path} holds no rows")
  labelled = sum(g is not None for g in gold)
  if record.label_list and 0 < labelled < len(gold):
    logging.warning("--verify_data=%s: %d of %d rows have no gold label: "
                    "%s (and --max_metric_drop) is scored on the %d "
                    "labelled rows", path, len(gold) - labelled, len(gold),
                    reader.scorer.verify_metric, labelled)
  return (values, (gold if record.label_list and labelled else None),
          f"--verify_data={path}")


def held_out_examples(record, tokenizer, saved_model, verify_data=None,
                      max_examples=verify.NUM_EXAMPLES, verify_columns=None,
                      max_predictions=20):
  """(`verify.held_out` for an export record, the float SavedModel's
  serving_default on them): --verify_data when given, encoded by the
  record's family (sentence packing for an encoder or a pretrainer, with
  max_predictions masked positions)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks.base import Task
  fills_masks = task_of(record).fills_masks  # reads masked positions too
  task = Task if fills_masks else task_of(record)
  given = read_verify_data(verify_data, record, task, max_examples,
                           verify_columns) if verify_data else None
  held = verify.held_out(record, tokenizer, task, given, max_examples)
  if fills_masks:
    held.features = verify.with_masked_positions(held.features, tokenizer,
                                                 max_predictions)
  return held, verify.reference_outputs(saved_model, held.features)


def sidecar_names(output, tokenizer_kind):
  """The files an export writes beside output: {"model", "tokenizer",
  "json", "card"}. The JSON and the card carry the model's whole name
  (m.tflite.json, m.onnx.README.md), so a .tflite and an .onnx of one stem
  never overwrite each other's; the tokenizer copy (m.spm.model) may be
  shared, when it is the same file (`check_tokenizer_copy`)."""
  base = os.path.basename(output)
  return {"model": base,
          "tokenizer": tokenizer_copy_name(output, tokenizer_kind),
          "json": base + ".json", "card": base + ".README.md"}


def check_tokenizer_copy(output, name, tokenizer_file):
  """Refuses when the tokenizer copy beside output differs from this
  export's tokenizer and another export of the same stem (m.onnx beside
  m.tflite) still reads it; replacing output's own export may change it."""
  folder = os.path.dirname(os.path.abspath(output))
  existing = os.path.join(folder, name)
  if not os.path.exists(existing):
    return
  with open(existing, "rb") as f, open(tokenizer_file, "rb") as g:
    if f.read() == g.read():
      return
  stem = os.path.splitext(os.path.basename(output))[0]
  others = [stem + ext for ext in (".tflite", ".onnx")
            if stem + ext != os.path.basename(output)
            and os.path.exists(os.path.join(folder, stem + ext))]
  if others:
    raise ValueError(
        f"--output={output}: {existing} is the tokenizer of {others[0]} "
        "beside it, not this model's; give another --output or remove "
        f"{others[0]}")


def interpreter_fn(tflite_path):
  """features [n, ...] -> outputs [n, ...] of a .tflite's serving_default,
  one example per call (its inputs are fixed at one example)."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from ai_edge_litert.interpreter import Interpreter
  runner = Interpreter(model_path=tflite_path).get_signature_runner(
      "serving_default")
  wanted = set(runner.get_input_details())

  def run(features):
    n = len(next(iter(features.values())))
    rows = [runner(**{k: np.asarray(v[i:i + 1], np.int32)
                      for k, v in features.items() if k in wanted})
            for i in range(n)]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
  return run


# The line a refusal ends with: what to try instead.
INSTEAD = {
    # verify.check adds "(--allow_degraded writes it anyway)".
    "none": "the float32 .tflite differs from the SavedModel; serve the "
            "SavedModel",
    "float16": "use --quantize=none",
    "dynamic": "use --quantize=float16 or none",
    "int8": "use --quantize=dynamic (int8 weights, float activations)",
}


def rename_into_place(scratch, output, names, replaced):
  """Moves names' files from scratch beside output, the JSON (which names
  the others) last; appends each name to replaced once it is in place."""
  # A Ctrl-C that the conversion swallowed (tf2onnx, TF's C++ layers)
  # stops the export here, before a file is replaced.
  errors.stop_if_ctrl_c()
  folder = os.path.dirname(os.path.abspath(output))
  for key in ("tokenizer", "model", "card", "json"):
    os.replace(os.path.join(scratch, names[key]),
               os.path.join(folder, names[key]))
    replaced.append(names[key])


def serve_inputs_of(record):
  """The inputs `albert_tf.load(artifact).predict` takes, in order ([] for
  an encoder or a pretrainer: nothing to predict from text)."""
  if not record.task:
    return []
  task = task_of(record)
  return [] if task.fills_masks else list(task.serve_text_inputs(record))


def _card(saved_model, record, tokenizer, info) -> str:
  """NAME.tflite.README.md: the model card of the SavedModel it came from,
  with the .tflite's own inputs and verified figures (`serving.model_card`)."""
  del saved_model
  from albert_tf.serving import model_card  # pylint: disable=g-import-not-at-top
  return model_card.card(record, record.checkpoint, tokenizer.model_file,
                         serve_inputs_of(record), info["model_file"],
                         tflite=info, tf_serving=False,
                         verification=info.get("verification"))


def _convert_in(scratch, saved_model, length, max_predictions, quantize,
                examples, record=None):
  """The .tflite flatbuffer; the fixed-shape SavedModel goes to scratch."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  fixed = os.path.join(scratch, "saved_model")
  _fixed_shape_saved_model(saved_model, fixed, length, max_predictions,
                           record)
  converter = tf.lite.TFLiteConverter.from_saved_model(
      fixed, signature_keys=["serving_default"])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  if quantize == "float16":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
  elif quantize == "dynamic":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  elif quantize == "int8":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: (dict(e) for e in examples)
    # Token ids stay int32; ops without an int8 kernel fall back to float.
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
    # Selective quantization (LiteRT's quantization debugger): INT8_FLOAT_OPS
    # stay float32. debug_dataset is read only by run(), never called here.
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=lambda: iter(()),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(
            denylisted_ops=list(INT8_FLOAT_OPS)))
    return debugger.get_nondebug_quantized_model()
  return converter.convert()


def _scratch_prefix(output):
  return f".tmp-{os.path.basename(output)}-"


def lock_path(output):
  """The lock file of one --output: `.NAME.lock` beside it."""
  return os.path.join(os.path.dirname(os.path.abspath(output)),
                      f".{os.path.basename(output)}.lock")


def remove_stale_scratch(output, command="export_tflite"):
  """Scratch folders of a killed export of the same output: removed, logged.

  Only `.tmp-NAME-` + mkdtemp's 8 characters, so another output's scratch
  (`.tmp-NAME-x.tflite-…`) is left alone. Called under the output's lock
  (`lock_path`), so a live export of the same output has been refused
  before: its scratch is never removed.
  """
  folder = os.path.dirname(os.path.abspath(output))
  stale = re.compile(re.escape(_scratch_prefix(output)) + r"[a-z0-9_]{8}$")
  for name in sorted(os.listdir(folder)):
    if stale.match(name):
      path = os.path.join(folder, name)
      logging.warning("Removing %s, left by an %s that was killed", path,
                      command)
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
      else:
        os.remove(path)


@contextlib.contextmanager
def _scratch_folder(output, command="export_tflite"):
  """Yields (a dot-named folder beside output, a list the caller fills with
  the names it has renamed into place). `command` names the exporter in the
  warning about a killed run's scratch.

  The folder is removed at the end, and the output folder too when this
  created it and the export failed. An OSError (disk full, permission)
  comes out as one line naming --output and what was replaced.
  """
  folder = os.path.dirname(os.path.abspath(output))
  created = not os.path.isdir(folder)
  scratch, replaced, done, lock = None, [], False, None
  try:
    os.makedirs(folder, exist_ok=True)
    # One writer per output (its scratch, its renames): a second export of
    # the same --output stops here, before any cleanup or write.
    lock = file_io.lock_output(folder, "--output", value=output,
                               lock_file=lock_path(output))
    remove_stale_scratch(output, command)
    scratch = tempfile.mkdtemp(prefix=_scratch_prefix(output), dir=folder)
    yield scratch, replaced
    done = True
  except OSError as e:
    kept = (f"replaced {', '.join(replaced)}; the rest left as it was"
            if replaced else "nothing there was replaced")
    raise OSError(e.errno, f"{e.strerror or e}: cannot write --output="
                  f"{output} ({kept})") from e
  finally:
    if scratch:
      shutil.rmtree(scratch, ignore_errors=True)
    if lock is not None:
      lock.release()
    if created and not done:
      with contextlib.suppress(OSError):
        os.rmdir(folder)  # only if empty


def describe_io(tflite_path):
  """Signature input/output names, shapes and dtypes of a .tflite file."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from ai_edge_litert.interpreter import Interpreter
  interpreter = Interpreter(model_path=tflite_path)
  runner = interpreter.get_signature_runner("serving_default")

  def describe(details):
    return [{"name": name, "shape": [int(d) for d in detail["shape"]],
             "dtype": np.dtype(detail["dtype"]).name}
            for name, detail in sorted(details.items())]

  return {"signature": "serving_default",
          "inputs": describe(runner.get_input_details()),
          "outputs": describe(runner.get_output_details())}


@dataclasses.dataclass
class VerifySettings:
  """The check before an export is written (export_tflite, export_onnx)."""
  verify_data: Optional[str] = settings.field(
      None, "Held-out examples the file is checked on before it is "
      "written, read as albert-predict reads files (TSV with a header, JSON "
      "lines, plain text; gold labels from a 'label' column). Default: the "
      "run's recorded dev split, else texts of the vocabulary's pieces.",
      group="output")
  verify_columns: Optional[List[str]] = settings.field(
      None, "NAME=COLUMN pairs for --verify_data, as albert-predict's "
      "--input_columns.", group="output")
  num_verify_examples: int = settings.field(
      verify.NUM_EXAMPLES, "Held-out examples run for the check.",
      lower_bound=1, group="output")
  min_agreement: Optional[float] = settings.field(
      None, "The floor of agreement with the float model (default: 0.995 "
      "for --quantize=none, 0.95 for the others).", lower_bound=0.0,
      upper_bound=1.0, group="output")
  max_metric_drop: float = settings.field(
      0.02, "Quantized: the most accuracy (a tagger: entity F1) the file "
      "may lose against the float model on the held-out examples (0.02: 2 "
      "points).",
      lower_bound=0.0, upper_bound=1.0, group="output")
  allow_degraded: bool = settings.field(
      False, "Write the file even below a floor (never one its runtime "
      "cannot load); its card then says DEGRADED with the figures.",
      group="output")

  def floors(self):
    return verify.Floors(self.min_agreement, self.max_metric_drop)


@dataclasses.dataclass
class TfliteSettings(VerifySettings):
  """The command line of export_tflite; the fields are the flags."""
  saved_model: str = settings.field(
      None, "An export_dir (its highest version) or version directory "
      "written by albert_tf.export_saved_model.",
      required=True, group="model")
  output: str = settings.field(None, "Output .tflite path.", required=True)
  quantize: str = settings.field("dynamic", "Quantization.",
                                 choices=QUANTIZE_MODES, group="model")
  representative_data: Optional[str] = settings.field(
      None, "TSV of real text for int8 calibration.")
  text_column: str = settings.field(
      "-1", "--representative_data's text column: a 0-based index "
      "(negative from the end; default: the last) or a name in its header "
      "line.")
  text_b_column: Optional[str] = settings.field(
      None, "--representative_data's text_b column (pairs): an index or a "
      "header name.")
  num_calibration_examples: int = settings.field(
      500, "Lines used for int8 (fewer lost agreement on a real BERT: "
      "469/500 with 200, 477/500 with 500).")
  max_predictions: int = settings.field(
      20, "Pretrainer: masked positions per sequence.", group="model")


def main(argv):
  del argv
  s = settings.from_flags(TfliteSettings)
  info = convert(s.saved_model, s.output, s.quantize, s.representative_data,
                 s.text_column, s.text_b_column, s.num_calibration_examples,
                 s.max_predictions, s.verify_data, s.allow_degraded,
                 s.floors(), s.num_verify_examples, s.verify_columns)
  size = os.path.getsize(s.output) / 2**20
  checked = info["verification"]
  print(f"Wrote {s.output} ({size:.2f} MiB, quantize={s.quantize}); inputs "
        f"{[(i['name'], i['shape']) for i in info['inputs']]}")
  print(("DEGRADED: " if checked["degraded"] else "Verified: ")
        + checked["verdict"])


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(TfliteSettings)
  cli_errors.run_main(main)
