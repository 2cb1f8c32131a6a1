r"""Convert an exported SavedModel's serving_default to ONNX, the shared weights kept once.

    python -m albert_tf.export_onnx --saved_model=saved_models/sentiment/1 \
        --output=onnx/sentiment.onnx [--quantize=dynamic]

Takes what export_tflite takes: a version directory written by
export_saved_model (or its export_dir: the highest version). Every
family's serving_default converts (classifier, regression, tagger, span QA,
multiple choice, the pretrainer's ids + masked_lm_positions signature):
int32 inputs of dynamic batch and sequence length ([batch, choices, seq]
for multiple choice), the family's float outputs.

Why the weights are deduplicated. ALBERT runs one transformer block L
times. tf2onnx freezes the SavedModel's variables into constants, one per
read, and a Keras layer called L times reads its variables L times: the
converted graph holds L identical copies of the shared block (an L-fold
larger file), and a dynamic-range quantizer then quantizes each copy on
its own (L scales, L int8 tensors). tf2onnx 1.17's `merge_duplication`
optimizer merges these copies when it runs (all of them, for every
model tested here); with it off, a 6-layer model converted to 15.2 MB of
initializers for 3.45 MB of weights. So the exporter does not rely on it:
after conversion, `share_initializers`
hashes every initializer (dtype, shape, bytes) and points every use of a
duplicate at the first copy, so the file holds each shared matrix once;
ONNX Runtime's `quantize_dynamic` keys its quantized weights by initializer
name, so each shared matrix is then quantized once too.

--quantize:
  none     float32 (ONNX Runtime's outputs equal the Keras model's within
           1e-4 of their scale in tests/test_export_onnx.py; ~1e-6 seen).
  dynamic  int8 weights of MatMul/Gather, activations quantized per call
           (onnxruntime.quantization.quantize_dynamic, per tensor): about a
           quarter of the size.

Verified before it is handed over, as export_tflite's are
(`serving.verify`): the .onnx must load in ONNX Runtime (an op it lacks is
an error here, never a `Wrote` line) and agree with the SavedModel's float
serving_default on held-out examples (--verify_data, else the run's dev
split): 99.5% for none; 95% and at most 2 points of accuracy lost for
dynamic. Below, exit 1 with one line and nothing written; --allow_degraded
writes it with DEGRADED on its card.

Writes PATH.onnx (say m.onnx), its tokenizer (m.spm.model or m.vocab.txt,
shared with a .tflite of the same stem only when it is the same file),
m.onnx.json (the export record, the inputs and outputs, the tokenizer file,
the verification figures) and the model card m.onnx.README.md, all in a
dot-named scratch folder beside PATH and renamed into place once complete
and verified, under the output's lock (as export_tflite does). `albert_tf.load("PATH.onnx").predict(...)` serves it
through ONNX Runtime (`serving.onnx_runner`).
"""

import dataclasses
import hashlib
import os

from albert_tf.core import settings
from albert_tf.serving import verify
from albert_tf.export_tflite import (held_out_examples, load_saved_model,
                                     serve_inputs_of, serving_default)
from albert_tf.serving.export_files import (
    read_source, scratch_folder, verdict_line, VerifySettings, write_beside)

# TensorFlow, onnx and tf2onnx are imported by the functions that run: --help
# and a flag mistake answer before they load.

QUANTIZE_MODES = ("none", "dynamic")
OPSET = 17
EXTRA = "pip install 'albert_tf[onnx]'"


class OnnxExportError(ValueError):
  """A flag or a source export_onnx cannot convert."""


def convert_serving_default(loaded):
  """The ONNX ModelProto of a loaded SavedModel's serving_default, every
  input dimension dynamic."""
  import tf2onnx  # pylint: disable=g-import-not-at-top
  serve = serving_default(loaded)
  return tf2onnx.convert.from_function(
      serve, input_signature=serve.input_signature, opset=OPSET)[0]


def share_initializers(model):
  """Keeps one initializer per distinct (dtype, shape, content), in place;
  every input that named a duplicate names the kept one (subgraphs too).
  Returns {"initializers_before", "initializers_after", "bytes_removed"}."""
  from onnx import numpy_helper  # pylint: disable=g-import-not-at-top
  graph = model.graph
  kept, rename = {}, {}
  for tensor in list(graph.initializer):
    key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(
        numpy_helper.to_array(tensor).tobytes()).hexdigest())
    if key in kept:
      rename[tensor.name] = kept[key]
    else:
      kept[key] = tensor.name
  before = len(graph.initializer)
  survivors = [t for t in graph.initializer if t.name not in rename]
  removed = sum(len(t.SerializeToString()) for t in graph.initializer
                if t.name in rename)
  del graph.initializer[:]
  graph.initializer.extend(survivors)

  def relink(g):
    for node in g.node:
      for i, name in enumerate(node.input):
        if name in rename:
          node.input[i] = rename[name]
      for attribute in node.attribute:
        if attribute.g.node:
          relink(attribute.g)
        for sub in attribute.graphs:
          relink(sub)
  relink(graph)
  for value_info in list(graph.value_info):
    if value_info.name in rename:
      graph.value_info.remove(value_info)
  return {"initializers_before": before,
          "initializers_after": len(graph.initializer),
          "bytes_removed": removed}


def describe_io(model):
  """{"inputs", "outputs"}: [{"name", "shape" (ints, None dynamic),
  "dtype"}] of an ONNX model's graph."""
  from onnx import helper  # pylint: disable=g-import-not-at-top
  initializers = {t.name for t in model.graph.initializer}

  def describe(values):
    return [{"name": v.name,
             "shape": [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim],
             "dtype": helper.tensor_dtype_to_np_dtype(
                 v.type.tensor_type.elem_type).name}
            for v in values if v.name not in initializers]
  return {"inputs": describe(model.graph.input),
          "outputs": describe(model.graph.output)}


def ort_fn(onnx_path):
  """features -> outputs of an .onnx in ONNX Runtime (CPU), 64 rows a call."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  session = ort.InferenceSession(onnx_path,
                                 providers=["CPUExecutionProvider"])
  names = [o.name for o in session.get_outputs()]
  wanted = {i.name for i in session.get_inputs()}

  def run(features):
    return verify.run_batched(lambda **f: dict(zip(names, session.run(
        None, {k: np.asarray(v, np.int32) for k, v in f.items()
               if k in wanted}))), features, 64)
  return run


INSTEAD = {"none": "serve the SavedModel (or --allow_degraded)",
           "dynamic": "use --quantize=none"}


def convert(saved_model, output, quantize="none", verify_data=None,
            allow_degraded=False, floors=None,
            num_verify_examples=verify.NUM_EXAMPLES, verify_columns=None,
            max_predictions=20):
  """Writes output (.onnx), its tokenizer, its .json and its model card.

  Before the rename, the .onnx runs in ONNX Runtime on held-out examples
  (`serving.verify`, as export_tflite) and is compared with the
  SavedModel's serving_default; a graph ONNX Runtime cannot load, or
  figures below `floors`, stop the export unless allow_degraded (a graph
  that does not load never passes).

  Returns the .json's dict (with "sharing": share_initializers' counts,
  "verification": the figures). Raises OnnxExportError for a bad flag or
  source, verify.ExportVerificationError below a floor, OSError (one line
  naming --output) when writing fails.
  """
  if quantize not in QUANTIZE_MODES:
    raise OnnxExportError(f"--quantize must be one of {QUANTIZE_MODES}, got "
                          f"{quantize!r}")
  saved_model, record, tokenizer, names = read_source(
      saved_model, output, ".onnx", OnnxExportError,
      "; convert a float32 export (--quantize=dynamic makes it smaller)")
  missing = []
  for module in ("onnx", "onnxruntime", "tf2onnx"):
    try:
      __import__(module)
    except ImportError:
      missing.append(module)
  if missing:
    raise OnnxExportError(f"export_onnx needs {', '.join(missing)}: {EXTRA}")
  loaded = load_saved_model(saved_model)
  held, reference = held_out_examples(
      record, tokenizer, loaded, verify_data, num_verify_examples,
      verify_columns, max_predictions)
  import onnx  # pylint: disable=g-import-not-at-top
  with scratch_folder(output, "export_onnx") as stage:
    model = convert_serving_default(loaded)
    sharing = share_initializers(model)
    float_path = os.path.join(stage.path, "float32.onnx")
    onnx.save_model(model, float_path)
    target = os.path.join(stage.path, names["model"])
    if quantize == "dynamic":  # int8 weights per tensor
      from onnxruntime import quantization  # pylint: disable=g-import-not-at-top
      quantization.quantize_dynamic(
          float_path, target, weight_type=quantization.QuantType.QInt8)
    else:
      os.replace(float_path, target)
    # Synced before the rename: some file systems report a full disk only
    # at the sync.
    with open(target, "rb+") as f:
      os.fsync(f.fileno())
    # A graph ONNX Runtime cannot load fails here, before any rename: the
    # session is made inside verify.check, whose one line says so.
    import onnxruntime  # pylint: disable=g-import-not-at-top
    checked = verify.check(
        output, quantize, lambda features: ort_fn(target)(features),
        reference, held, floors or verify.Floors(), allow_degraded,
        f"ONNX Runtime {onnxruntime.__version__} (CPU)", INSTEAD[quantize])
    info = {**{k: v for k, v in record.to_dict().items()
               if k not in ("tokenizer_file",)},
            "model_file": names["model"], "format": "onnx",
            "quantize": quantize, "opset": OPSET,
            "source_saved_model": os.path.abspath(saved_model),
            "tokenizer_file": names["tokenizer"],
            **describe_io(onnx.load_model(target, load_external_data=False)),
            "sharing": sharing, "verification": checked}
    inputs = ", ".join(f"{i['name']} {i['shape']}" for i in info["inputs"])
    write_beside(stage, names, record, tokenizer, info,
                 serve_inputs_of(record), card_tail=(
        f"\nONNX (`{info['model_file']}`, opset {OPSET}, "
        f"quantize={quantize}, ONNX Runtime): inputs {inputs} (int32; "
        f"None: any size); the tokenizer is `{info['tokenizer_file']}`, "
        "the record in the .json beside it.\n"))
  return info


@dataclasses.dataclass
class OnnxSettings(VerifySettings):
  """The command line of export_onnx; the fields are the flags."""
  saved_model: str = settings.field(
      None, "An export_dir or version directory written by "
      "albert_tf.export_saved_model.", required=True, group="model")
  output: str = settings.field(None, "Output .onnx path.", required=True)
  quantize: str = settings.field("none", "Quantization.",
                                 choices=QUANTIZE_MODES, group="model")


def main(argv):
  del argv
  s = settings.from_flags(OnnxSettings)
  info = convert(s.saved_model, s.output, s.quantize, s.verify_data,
                 s.allow_degraded, s.floors(), s.num_verify_examples,
                 s.verify_columns)
  size = os.path.getsize(s.output) / 2**20
  sharing = info["sharing"]
  print(f"Wrote {s.output} ({size:.2f} MiB, quantize={s.quantize}; "
        f"{sharing['initializers_before'] - sharing['initializers_after']} "
        "duplicate initializers shared); inputs "
        f"{[(i['name'], i['shape']) for i in info['inputs']]}")
  print(verdict_line(info["verification"]))


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(OnnxSettings)
  cli_errors.run_main(main)
