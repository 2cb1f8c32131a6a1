r"""A SavedModel version checked in its own runtime before it is handed over.

export_saved_model writes a version into a hidden scratch folder; `verify`
loads it back from there, runs it on a few held-out examples and compares
its outputs with the signatures' own tf.functions in memory, before
`saved_model.write_version` renames it into place. serving_default alone
(`--signatures=serving_default`) is run by a child process, `python -m
albert_tf.serving.saved_model_check`, that never imports tensorflow_text
(it checks `sys.modules`), as stock TensorFlow or a TF Serving without TF
Text would; with serve_text (or serve_fill_mask), every signature is run
in this process, TF Text's ops loaded.

Each float output's largest absolute difference, relative to its largest
|value|, must be within TOLERANCE (BF16_TOLERANCE for bfloat16), and the
other outputs equal; else, or when the version does not load or run, a
one-line CheckError. Loaded back, a graph runs the same kernels on the same
inputs (every family measured 0, float32, bfloat16 and XLA, AMD EPYC
avx512_bf16): the tolerance leaves room for a runtime that orders sums
otherwise, far below what a wrong weight or a lost head moves.

Held-out examples, at most MAX_EXAMPLES: the run's dev split when the
record names a dev file that still exists and the family reads it back
(`Task.held_out_inputs`), encoded as the family encodes raw inputs
(`Task.encode_inputs`); else texts of the tokenizer's own pieces
(`verify.vocabulary_texts`), and the figures' "source" says so. The
figures (albert_export.json's `verification`, the card's verified section)
also hold `ops_outside_core_tf`: the saved graph's op types core
TensorFlow does not register (TF Text's).

No TensorFlow at import: the child process imports this module first.
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

MAX_EXAMPLES = 32
TOLERANCE = 1e-4  # float32: one graph run twice, loaded or not
BF16_TOLERANCE = 1e-2  # bfloat16 (measured 0 too; one bf16 rounding step)
STOCK_TIMEOUT_SECS = 900  # a child's TF import and load on a busy machine
NO_HELD_OUT = "vocabulary pieces, no held-out file"
STOCK = "stock"  # the runtime kinds of `verify`
IN_PROCESS = "in_process"


class CheckError(ValueError):
  """The written version does not load, run, or compute what the model in
  memory computes (one line; export_saved_model says it as an ExportError)."""


# ------------------------------------------------------------ held-out data
@dataclasses.dataclass
class HeldOut:
  """Raw inputs {serve_text input: a value per example}, the first input's
  texts, and where they came from."""
  raw: Dict[str, list]
  texts: List[str]
  source: str


def held_out(record, task, tokenizer, max_examples: int = MAX_EXAMPLES
             ) -> HeldOut:
  """The examples a version is checked on (module docstring). record: the
  export's (`training["data"]["dev"]["file"]` names the run's dev file);
  task: the family's Task class (the base `Task` for an encoder)."""
  names = list(task.serve_text_inputs(record))
  dev = (((record.training or {}).get("data") or {}).get("dev") or {}).get(
      "file")
  source = NO_HELD_OUT
  if dev and os.path.exists(dev):
    found, why = None, "the family does not read it back"
    if not task.fills_masks:
      try:
        found = task.held_out_inputs(record, max_examples)
      except Exception as e:  # pylint: disable=broad-except
        why = " ".join(str(e).split())[:200] or type(e).__name__
    source = f"vocabulary pieces: the dev file {dev} was not read ({why})"
    if found is not None:
      raw, _, source = found
      raw = {k: list(v)[:max_examples] for k, v in raw.items()}
      texts = [str(t) for t in raw.get(names[0], [])]
      if texts:
        return HeldOut(raw, texts, source)
  return vocabulary_held_out(names, tokenizer, max_examples, source)


def vocabulary_held_out(names, tokenizer, max_examples: int = MAX_EXAMPLES,
                        source: str = NO_HELD_OUT) -> HeldOut:
  """`verify.vocabulary_texts` as the raw inputs `names` (serve_text's;
  options: four texts each)."""
  from albert_tf.serving import verify  # pylint: disable=g-import-not-at-top
  raw = verify.vocabulary_texts(tokenizer, names, max_examples, 4)
  return HeldOut(raw, next(raw[n] for n in names if n != "options"), source)


def _positions(n, length, count=3):
  """masked_lm_positions [n, count]: 1, 2, ... (inside the sequence)."""
  row = np.minimum(np.arange(1, count + 1), max(length - 1, 1))
  return np.tile(row.astype(np.int32), [n, 1])


def ids_inputs(serving_default, held: HeldOut, record, task, tokenizer,
               max_seq_length: int) -> Dict[str, np.ndarray]:
  """serving_default's inputs for the held-out examples: the family's
  encoding of their raw inputs (`Task.encode_inputs`), and positions
  1, 2, 3 for an input it does not give (masked_lm_positions)."""
  specs = serving_default.input_signature
  raw = dict(held.raw)
  choices = [s.shape[1] for s in specs if s.shape.rank == 3]
  if choices and "options" in raw:  # as many options as the model takes
    raw["options"] = [(list(o) * choices[0])[:choices[0]]
                      for o in raw["options"]]
  features = task.encode_inputs(record, tokenizer, max_seq_length, raw)
  features = {k: np.asarray(v, np.int32) for k, v in features.items()}
  n = len(next(iter(features.values())))
  return {s.name: features[s.name] if s.name in features else _positions(
      n, max_seq_length) for s in specs}


def text_inputs(fn, name: str, held: HeldOut, tokenizer,
                max_seq_length: int) -> Dict[str, np.ndarray]:
  """The inputs of a string signature (serve_text, serve_fill_mask) from
  its input_signature: each string input its held-out values (a [MASK] in
  the middle of each text for serve_fill_mask), an int input
  masked_lm_positions 1, 2, 3, a scalar int (top_k) 3."""
  n = len(held.texts)
  mask = tokenizer.convert_ids_to_tokens([tokenizer.mask_id])[0]
  inputs = {}
  for spec in fn.input_signature:
    if spec.dtype.name == "string":
      values = held.raw.get(spec.name, held.texts)
      if name == "serve_fill_mask":
        values = [" ".join(t.split()[:2] + [mask] + t.split()[2:])
                  for t in held.texts]
      value = np.array(values, dtype=object)
      if spec.shape.rank == 2 and value.ndim == 2 and spec.shape[1]:
        width = spec.shape[1]
        value = np.array([(list(r) * width)[:width] for r in value], object)
      inputs[spec.name] = value
    elif spec.shape.rank == 0:
      inputs[spec.name] = np.int32(3)
    else:
      inputs[spec.name] = _positions(n, max_seq_length)
  return inputs


# ------------------------------------------------------------ comparing
def _numpy(outputs) -> Dict[str, np.ndarray]:
  return {k: np.asarray(getattr(v, "numpy", lambda v=v: v)())
          for k, v in outputs.items()}


def compare(reference: Dict[str, np.ndarray], got: Dict[str, np.ndarray]
            ) -> dict:
  """{max_abs_diff, max_relative_difference, mismatched_values, problems}
  of got against reference: floats by their difference relative to the
  reference output's largest |value|, the rest exactly."""
  figures = {"max_abs_diff": 0.0, "max_relative_difference": 0.0,
             "mismatched_values": 0, "problems": []}
  missing = sorted(set(reference) - set(got))
  if missing:
    figures["problems"].append(f"no output {', '.join(missing)}")
  for name in sorted(set(reference) & set(got)):
    ref, out = np.asarray(reference[name]), np.asarray(got[name])
    if ref.shape != out.shape:
      figures["problems"].append(f"{name}: shape {list(out.shape)}, the "
                                 f"in-process model's {list(ref.shape)}")
      continue
    if np.issubdtype(ref.dtype, np.floating):
      ref64, out64 = ref.astype(np.float64), out.astype(np.float64)
      finite = np.isfinite(ref64)
      if np.any(~np.isfinite(out64) & finite):
        figures["problems"].append(f"{name}: non-finite values")
        continue
      diff = np.abs(out64 - ref64)[finite]
      if diff.size:
        scale = float(np.abs(ref64[finite]).max())
        largest = float(diff.max())
        figures["max_abs_diff"] = max(figures["max_abs_diff"], largest)
        figures["max_relative_difference"] = max(
            figures["max_relative_difference"],
            largest / scale if scale > 0 else largest)
    elif np.any(ref != out):
      mismatched = int(np.sum(ref != out))
      figures["mismatched_values"] += mismatched
      figures["problems"].append(f"{mismatched} integer or string values "
                                 "differ")
  return figures


# ------------------------------------------------------------ the graph's ops
def graph_op_types(folder: str) -> List[str]:
  """Every op type of a SavedModel's graph and function library."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  proto = saved_model_pb2.SavedModel()
  with open(os.path.join(folder, "saved_model.pb"), "rb") as f:
    proto.ParseFromString(f.read())
  ops = set()
  for meta_graph in proto.meta_graphs:
    graph = meta_graph.graph_def
    ops.update(n.op for n in graph.node)
    for function in graph.library.function:
      ops.update(n.op for n in function.node_def)
  return sorted(ops)


def ops_outside_core_tf(folder: str) -> List[str]:
  """The op types of the SavedModel that core TensorFlow does not define
  (TF Text's: loaded with `tf.load_op_library`, they are no `tf.raw_ops`)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [op for op in graph_op_types(folder)
          if not op.startswith("_") and not hasattr(tf.raw_ops, op)]


# ------------------------------------------------------------ running
def _stock_outputs(folder: str, inputs: Dict[str, np.ndarray]):
  """serving_default of the SavedModel in folder run by a child process
  that never imports tensorflow_text (`main`): (outputs, info)."""
  package_root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  with tempfile.TemporaryDirectory(prefix="albert_tf-check-") as scratch:
    paths = [os.path.join(scratch, n) for n in ("inputs.npz", "outputs.npz",
                                                "info.json")]
    np.savez(paths[0], **inputs)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(
        [package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    try:
      done = subprocess.run(
          [sys.executable, "-m", "albert_tf.serving.saved_model_check",
           folder] + paths, env=env, capture_output=True, text=True,
          timeout=STOCK_TIMEOUT_SECS, check=False)
    except subprocess.TimeoutExpired:
      raise CheckError(
          f"--signatures=serving_default: loading the SavedModel in "
          f"TensorFlow without tensorflow_text took over "
          f"{STOCK_TIMEOUT_SECS} s") from None
    if done.returncode != 0:
      lines = [l for l in done.stderr.splitlines() if l.strip()]
      said = next((l[len("error: "):] for l in reversed(lines)
                   if l.startswith("error: ")),
                  lines[-1] if lines else f"exit {done.returncode}")
      raise CheckError(
          "--signatures=serving_default: the SavedModel does not load or "
          f"run in TensorFlow without tensorflow_text: {said[:400]}")
    with np.load(paths[1]) as f:
      outputs = {k: f[k] for k in f.files}
    with open(paths[2], encoding="utf-8") as f:
      info = json.load(f)
  return outputs, info


def verify(folder: str, signatures: Dict[str, Callable], held: HeldOut,
           record, task, tokenizer, max_seq_length: int,
           mixed_precision: str = "none") -> dict:
  """Loads the version written in folder and checks it against the
  in-process `signatures` (the tf.functions saved there, all of them) on
  held's examples, as the module docstring says. task: the family's Task
  class (the base `Task` for an encoder). Returns the figures; raises a
  one-line CheckError.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  start = time.time()
  stock = set(signatures) == {"serving_default"}
  tolerance = BF16_TOLERANCE if mixed_precision == "bfloat16" else TOLERANCE
  try:
    ids = ids_inputs(signatures["serving_default"], held, record, task,
                     tokenizer, max_seq_length)
  except Exception as e:  # pylint: disable=broad-except
    if held.source.startswith("vocabulary pieces"):
      raise
    # Rows of the dev file the family's encoding does not take: the check
    # is of the artifact, on other examples then.
    why = " ".join(str(e).split())[:200] or type(e).__name__
    held = vocabulary_held_out(
        list(held.raw), tokenizer, len(held.texts) or MAX_EXAMPLES,
        f"vocabulary pieces: {held.source} did not encode ({why})")
    ids = ids_inputs(signatures["serving_default"], held, record, task,
                     tokenizer, max_seq_length)
  first = sorted(signatures, key=lambda n: n != "serving_default")
  calls = {n: ids if n == "serving_default" else text_inputs(
      signatures[n], n, held, tokenizer, max_seq_length) for n in first}
  reference = {n: _numpy(signatures[n](*[
      tf.constant(calls[n][s.name], s.dtype)
      for s in signatures[n].input_signature])) for n in first}
  outside = ops_outside_core_tf(folder)
  if stock:
    if outside:
      raise CheckError(
          f"--signatures=serving_default: the SavedModel holds op types "
          f"that core TensorFlow does not define: {', '.join(outside)}")
    outputs, info = _stock_outputs(folder, ids)
    got = {"serving_default": outputs}
    runtime = (f"TensorFlow {info['tensorflow']} in a child process that "
               "never imported tensorflow_text")
    if info["signatures"] != ["serving_default"]:
      raise CheckError(f"--signatures=serving_default: the SavedModel "
                          f"holds {', '.join(info['signatures'])}")
  else:
    import tensorflow_text  # pylint: disable=g-import-not-at-top
    try:
      loaded = tf.saved_model.load(folder)
      got = {name: _numpy(loaded.signatures[name](**{
          k: tf.constant(v) for k, v in inputs.items()}))
             for name, inputs in calls.items()}
    except Exception as e:  # pylint: disable=broad-except
      first = (" ".join(str(e).split()) or type(e).__name__)[:400]
      raise CheckError(f"the written SavedModel does not load or run "
                          f"({', '.join(calls)}): {first}") from e
    del loaded
    runtime = (f"TensorFlow {tf.__version__} with tensorflow_text "
               f"{tensorflow_text.__version__}, in the exporting process")
  per_signature = {name: compare(reference[name], got[name])
                   for name in calls}
  figures = {
      "runtime": runtime,
      "runtime_kind": STOCK if stock else IN_PROCESS,
      "signatures": list(calls),
      "examples": int(len(ids["input_ids"])),
      "source": held.source,
      "max_abs_diff": max(f["max_abs_diff"] for f in per_signature.values()),
      "max_relative_difference": max(
          f["max_relative_difference"] for f in per_signature.values()),
      "tolerance": tolerance,
      "per_signature": {n: {k: v for k, v in f.items() if k != "problems"}
                        for n, f in per_signature.items()},
      "ops_outside_core_tf": outside,
  }
  problems = [f"{name}: {p}" for name, f in per_signature.items()
              for p in f["problems"]]
  if figures["max_relative_difference"] > tolerance:
    problems.append(f"outputs differ from the in-process model's by "
                    f"{figures['max_relative_difference']:.2e} of their "
                    f"scale (tolerance {tolerance:.0e})")
  where = ("loaded by TensorFlow without tensorflow_text" if stock else
           "loaded back")
  checked = " and ".join(calls)
  figures.update(passed=not problems, degraded=False,
                 seconds=round(time.time() - start, 2))
  if problems:
    raise CheckError(
        f"the written SavedModel's {checked}, {where}, on "
        f"{figures['examples']} examples ({held.source}): "
        f"{'; '.join(problems)}; nothing was written")
  # A classifier's figures say how often the predicted class is the same.
  from albert_tf.serving import verify as artifacts  # pylint: disable=g-import-not-at-top
  what, decide, _ = artifacts.decisions(reference["serving_default"], ids)
  if what == "the predicted class":
    figures.update(compared=what, agreement=float(np.mean(
        decide(reference["serving_default"]) ==
        decide(got["serving_default"]))))
  figures["verdict"] = (
      f"{checked} {where}: outputs within "
      f"{figures['max_relative_difference']:.1e} of the in-process model's, "
      f"relative to their scale (tolerance {tolerance:.0e}), on "
      f"{figures['examples']} examples" +
      (f"; predicted class agreement {figures['agreement']:.1%}"
       if "agreement" in figures else ""))
  return figures


def main(argv: Sequence[str]) -> int:
  """python -m albert_tf.serving.saved_model_check FOLDER INPUTS.npz
  OUTPUTS.npz INFO.json, the child of `_stock_outputs`: loads FOLDER, runs
  serving_default, saves its outputs and INFO (one `error:` line on
  stderr and exit 1 when the SavedModel does not load or run)."""
  if len(argv) != 5:
    print("error: usage: python -m albert_tf.serving.saved_model_check "
          "FOLDER INPUTS.npz OUTPUTS.npz INFO.json", file=sys.stderr)
    return 2
  folder, inputs_path, outputs_path, info_path = argv[1:]
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    loaded = tf.saved_model.load(folder)
    with np.load(inputs_path) as f:
      inputs = {k: tf.constant(f[k]) for k in f.files}
    outputs = loaded.signatures["serving_default"](**inputs)
    if "tensorflow_text" in sys.modules:
      raise RuntimeError("tensorflow_text was imported")
    np.savez(outputs_path, **{k: v.numpy() for k, v in outputs.items()})
    with open(info_path, "w", encoding="utf-8") as f:
      json.dump({"tensorflow": tf.__version__,
                 "signatures": sorted(loaded.signatures)}, f)
  except Exception as e:  # pylint: disable=broad-except
    print("error: " + (" ".join(str(e).split()) or type(e).__name__),
          file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
