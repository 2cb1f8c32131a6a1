r"""Convert an exported SavedModel's serving_default to TFLite (LiteRT), builtin ops only.

    python -m albert_tf.export_tflite --saved_model=saved_models/sentiment/1 \
        --output=tflite/sentiment_dynamic.tflite --quantize=dynamic

The family's own parts (the fixed input shapes: [1, L], [1, num_choices,
L] for multiple choice; how a calibration line is read and encoded) are
its Task's (`tflite_input_shapes`, `calibration_inputs`, `encode_inputs`).
It converts through a small SavedModel that pins the inputs to one example
and keeps only serving_default (never `from_concrete_functions`, which
does not freeze a Keras 3 model's variables: a tiny .tflite of NaNs), so
no TF Text op or Flex delegate is needed.

--quantize:
  none     float32.
  float16  float16 weights, float32 compute (half the size, ~1e-3 error).
  dynamic  int8 weights, activations quantized on the fly (a quarter of the
           size; the usual choice for BERT-like models on CPU).
  int8     the matmuls, GELU and the embedding lookup in int8 (weights per
           channel, activations calibrated on --representative_data, 500
           TSV lines); the rest float32 (`INT8_FLOAT_OPS`): not for an NPU.
           On a CPU dynamic is as small and fast and agrees more often.

Writes PATH.tflite (say m.tflite), its tokenizer (m.spm.model or
m.vocab.txt; shared with an .onnx of the same stem only when the same
file), m.tflite.json (inputs, outputs, the tokenizer, special ids, labels,
the normalisation an app must apply, the verification figures) and the
model card m.tflite.README.md, renamed into place only once all are
complete and verified (`serving/export_files.py`); `albert_tf.load(
"m.tflite")` serves it.

Verified before it is handed over (`serving.verify`): the .tflite runs in
LiteRT on held-out examples (--verify_data, else the run's recorded dev
split) and is compared with the SavedModel's float serving_default. Below a
floor (agreement 99.5% for none; 95% and at most 2 points of accuracy lost
for float16, dynamic and int8; --min_agreement, --max_metric_drop) the
command exits 1 with one line naming the figures and the mode to use
instead, writing nothing (--allow_degraded: DEGRADED on its card).

A family whose serve_text does more than serving_default (a tagger's
splitting and entity reading, span QA's windows: TF Text ops, not in the
.tflite) is served around it in Python by its `Task.ids_decoder`, which
`albert_tf.load` calls and an app can copy.
"""

import dataclasses
import os
from typing import Optional

from albert_tf.core import settings
from albert_tf.data.tokenization import write_synced
from albert_tf.serving import verify
# What export_onnx shares (and callers of earlier versions imported here).
from albert_tf.serving.export_files import (  # noqa: F401  pylint: disable=unused-import
    check_tokenizer_copy, lock_path, read_export_metadata, read_export_record,
    read_source, read_verify_data, rename_into_place, scratch_folder,
    sidecar_names, tokenizer_of, verdict_line, VerifySettings, version_dir,
    write_beside)

# TensorFlow and what imports it load in the functions that run: --help
# and a flag mistake answer before TF loads.

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


def task_of(record):
  """The family's Task subclass of an export record (`albert_tf.tasks.
  registry`; the base Task, sentence packing, for an encoder export)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks import registry
  from albert_tf.tasks.base import Task
  if not record.task:
    return Task
  return registry.family(record.task, record.task_module).task


def serve_inputs_of(record):
  """The inputs `albert_tf.load(artifact).predict` takes, in order ([] for
  an encoder or a pretrainer: nothing to predict from text)."""
  if not record.task:
    return []
  task = task_of(record)
  return [] if task.fills_masks else list(task.serve_text_inputs(record))


def load_saved_model(saved_model):
  """The SavedModel at saved_model, its variables checked finite
  (`check_finite`, naming --saved_model)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  # The SavedModel may hold serve_text: loading it needs TF Text's ops.
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import
  from albert_tf.training.checkpoints import check_finite
  loaded = tf.saved_model.load(saved_model)
  check_finite(loaded.variables, f"--saved_model={saved_model}")
  return loaded


def serving_default(loaded, shapes=None):
  """loaded's serving_default as a tf.function of its inputs, the ids
  first, then the others by name, of the shapes `shapes(names)` gives
  ({name: shape}; default: the rank kept, every size open). It reads
  loaded's variables weakly: keep loaded referenced."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from albert_tf.core.features import ENCODER_INPUTS
  serving = loaded.signatures["serving_default"]
  given = serving.structured_input_signature[1]
  names = [n for n in ENCODER_INPUTS if n in given] + sorted(
      set(given) - set(ENCODER_INPUTS))
  shapes = shapes(names) if shapes else {
      n: [None] * len(given[n].shape) for n in names}
  specs = [tf.TensorSpec(shapes[n], given[n].dtype, name=n) for n in names]

  @tf.function(input_signature=specs)
  def serve(*args):
    return serving(**dict(zip(names, args)))

  return serve


def held_out_examples(record, tokenizer, loaded, verify_data=None,
                      max_examples=verify.NUM_EXAMPLES, verify_columns=None,
                      max_predictions=20):
  """(`verify.held_out` for an export record, the float SavedModel's
  serving_default on them): --verify_data when given, encoded by the
  record's family (sentence packing for an encoder or a pretrainer, with
  max_predictions masked positions)."""
  from albert_tf.tasks.base import Task  # pylint: disable=g-import-not-at-top
  family = task_of(record)
  fills_masks = family.fills_masks  # reads masked positions too
  task = Task if fills_masks else family
  given = read_verify_data(verify_data, record, task, max_examples,
                           verify_columns) if verify_data else None
  held = verify.held_out(record, tokenizer, task, given, max_examples)
  if fills_masks:
    held.features = verify.with_masked_positions(held.features, tokenizer,
                                                 max_predictions)
  return held, verify.reference_outputs(loaded, held.features)


def read_representative_tsv(path, tokenizer, max_seq_length, text_column=-1,
                            text_b_column=None, max_examples=200,
                            record=None):
  """Model-input features of up to max_examples TSV lines (int32, one
  example each: [1, L], or [1, choices, L] for multiple choice): each line
  read into the raw inputs of the export's family (`Task.calibration_inputs`;
  `data.rows.calibration_rows`) and encoded as serve_text encodes them
  (`Task.encode_inputs`). record: the export's (`read_export_record`);
  without one, sentence packing.
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.data import rows
  from albert_tf.core.record import ModelInfo
  record = record or ModelInfo()
  task = task_of(record)
  read = rows.calibration_rows(
      path, text_column, text_b_column, max_examples,
      lambda fields, a, b: task.calibration_inputs(record, fields, a, b))
  return task.calibration_examples(record, tokenizer, max_seq_length, read,
                                   max_examples)


def convert(saved_model, output, quantize="dynamic", representative_data=None,
            text_column=-1, text_b_column=None, num_calibration_examples=500,
            max_predictions=20, verify_data=None, allow_degraded=False,
            floors=None, num_verify_examples=verify.NUM_EXAMPLES,
            verify_columns=None):
  """Writes output (.tflite), its tokenizer, its .json and its card
  (`sidecar_names`), renamed into place once all are complete.

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
  saved_model, record, tokenizer, names = read_source(
      saved_model, output, ".tflite", ValueError,
      " (export_saved_model --mixed_precision), which TFLite has no ops "
      "for: convert a float32 export (--quantize=float16 or dynamic halves "
      "or quarters its size)")
  metadata = record.flat_dict()
  length = metadata["max_seq_length"]
  # Read before anything is written: a bad TSV is no write error.
  examples = read_representative_tsv(
      representative_data, tokenizer, length, text_column, text_b_column,
      num_calibration_examples, record=record
  ) if quantize == "int8" else None
  loaded = load_saved_model(saved_model)
  held, reference = held_out_examples(
      record, tokenizer, loaded, verify_data, num_verify_examples,
      verify_columns, max_predictions)

  with scratch_folder(output) as stage:
    model = os.path.join(stage.path, names["model"])
    write_synced(model, _convert_in(stage.path, loaded, length,
                                    max_predictions, quantize, examples,
                                    record))
    # Proven in LiteRT before anything is renamed into place.
    checked = verify.check(
        output, quantize,
        # Loaded inside the check: a file LiteRT refuses is its one line.
        lambda f: interpreter_fn(model)(f),
        reference, held, floors or verify.Floors(), allow_degraded,
        "LiteRT (ai_edge_litert.interpreter)", INSTEAD[quantize])
    config = metadata.get("albert_config") or {}
    info = {
        "model_file": names["model"], "quantize": quantize,
        "source_saved_model": os.path.abspath(saved_model),
        "model": metadata["model"], "max_seq_length": length,
        **describe_io(model),
        "tokenizer_kind": metadata["tokenizer_kind"],
        "tokenizer_file": names["tokenizer"],
        "do_lower_case": metadata["do_lower_case"],
        "special_ids": metadata["special_ids"],
        # Ids at or above it are refused (serving.tflite_runner), and an
        # input longer than max_position_embeddings.
        "vocab_size": config.get("vocab_size"),
        "max_position_embeddings": config.get("max_position_embeddings"),
        "normalization": metadata["normalization"],
        "verification": checked,
    }
    # And what the family records for apps (a tagger's token_level, span
    # QA's doc_stride and max_query_length, ...).
    for key in ("task", "task_name", "task_module", "text_pair",
                "label_list", "num_labels", *record.task_config):
      if key in metadata:
        info[key] = metadata[key]
    write_beside(stage, names, record, tokenizer, info,
                 serve_inputs_of(record), tflite=info)
  return info


def interpreter_fn(tflite_path):
  """features [n, ...] -> outputs [n, ...] of a .tflite's serving_default,
  one example per call (its inputs are fixed at one example)."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from ai_edge_litert.interpreter import Interpreter
  from albert_tf.serving.tflite_runner import one_at_a_time
  runner = Interpreter(model_path=tflite_path).get_signature_runner(
      "serving_default")
  wanted, run = set(runner.get_input_details()), one_at_a_time(runner)
  return lambda features: run(**{k: np.asarray(v, np.int32) for k, v in
                                 features.items() if k in wanted})


# The line a refusal ends with: what to try instead.
INSTEAD = {
    # verify.check adds "(--allow_degraded writes it anyway)".
    "none": "the float32 .tflite differs from the SavedModel; serve the "
            "SavedModel",
    "float16": "use --quantize=none",
    "dynamic": "use --quantize=float16 or none",
    "int8": "use --quantize=dynamic (int8 weights, float activations)",
}


def _convert_in(scratch, loaded, length, max_predictions, quantize,
                examples, record):
  """The .tflite flatbuffer of serving_default re-saved in scratch with the
  family's fixed one-example shapes (`Task.tflite_input_shapes`; TF Text
  ops left behind)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  fixed = os.path.join(scratch, "saved_model")
  serve = serving_default(
      loaded, lambda names: task_of(record).tflite_input_shapes(
          record, length, names, max_predictions))
  module = tf.Module()
  module.loaded, module.serve = loaded, serve
  tf.saved_model.save(module, fixed, signatures={"serving_default": serve})
  converter = tf.lite.TFLiteConverter.from_saved_model(
      fixed, signature_keys=["serving_default"])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  if quantize != "none":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  if quantize == "float16":
    converter.target_spec.supported_types = [tf.float16]
  elif quantize == "int8":
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


def describe_io(tflite_path):
  """Signature input/output names, shapes and dtypes of a .tflite file."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from ai_edge_litert.interpreter import Interpreter
  runner = Interpreter(model_path=tflite_path).get_signature_runner(
      "serving_default")

  def describe(details):
    return [{"name": name, "shape": [int(d) for d in detail["shape"]],
             "dtype": np.dtype(detail["dtype"]).name}
            for name, detail in sorted(details.items())]

  return {"signature": "serving_default",
          "inputs": describe(runner.get_input_details()),
          "outputs": describe(runner.get_output_details())}


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
  print(verdict_line(checked))


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(TfliteSettings)
  cli_errors.run_main(main)
