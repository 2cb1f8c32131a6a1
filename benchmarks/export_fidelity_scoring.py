"""Scoring one artifact of benchmarks.export_fidelity: every test text fed
alone as an app feeds it, the labels predicted and batch-1 p50 latency."""

import json
import os
import time

import numpy as np

from benchmarks import minilm_transfer as mt


def write_text_tsv(path, rows):
  """One text per line, no header: export_tflite's --representative_data."""
  mt.write_atomically(path, "".join(text + "\n" for text, _, _ in rows))


def test_features(saved_model, test, scratch):
  """[{input: int32 [1, L]}] of the test texts, encoded as an app encodes
  them (export_tflite's calibration reader: the Python tokenizer, padded to
  the export length)."""
  from albert_tf import export_tflite as et  # pylint: disable=g-import-not-at-top
  record = et.read_export_record(saved_model)
  metadata = record.flat_dict()
  path = os.path.join(scratch, "test_text.tsv")
  write_text_tsv(path, test)
  return et.read_representative_tsv(
      path, et.tokenizer_of(saved_model, metadata),
      metadata["max_seq_length"], max_examples=len(test), record=record), \
      list(metadata["label_list"])


def timed_predictions(call, features, labels):
  """(labels predicted one call per example after 5 warm-up calls, p50 ms
  of those calls)."""
  def label(outputs):
    key = "probabilities" if "probabilities" in outputs else "logits"
    return labels[int(np.argmax(np.asarray(outputs[key]).reshape(-1)))]
  for x in features[:5]:
    call(x)
  predicted, seconds = [], []
  for x in features:
    start = time.perf_counter()
    outputs = call(x)
    seconds.append(time.perf_counter() - start)
    predicted.append(label(outputs))
  return predicted, 1000 * float(np.median(seconds))


def latency_only(call, features, calls):
  for x in features[:5]:
    call(x)
  seconds = []
  for i in range(calls):
    x = features[i % len(features)]
    start = time.perf_counter()
    call(x)
    seconds.append(time.perf_counter() - start)
  return 1000 * float(np.median(seconds))


def tflite_call(path, threads):
  from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  runner = Interpreter(model_path=path, num_threads=threads
                       ).get_signature_runner("serving_default")
  return lambda x: runner(**x)


def onnx_call(path, threads):
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  options = ort.SessionOptions()
  options.intra_op_num_threads = threads
  options.inter_op_num_threads = 1
  session = ort.InferenceSession(path, options,
                                 providers=["CPUExecutionProvider"])
  names = [o.name for o in session.get_outputs()]
  wanted = {i.name for i in session.get_inputs()}
  return lambda x: dict(zip(names, session.run(
      None, {k: v for k, v in x.items() if k in wanted})))


def score(kind, path, features, labels, latency_calls):
  """{"predicted", "p50_1", "p50_2"} of one artifact: every test text at 1
  thread (p50 of those calls), latency_calls more at 2 threads."""
  if kind == "saved_model":  # TF's threads are per process
    return score_saved_model(path, features, labels, latency_calls)
  make = tflite_call if kind == "tflite" else onnx_call
  predicted, p50_1 = timed_predictions(make(path, 1), features, labels)
  p50_2 = latency_only(make(path, 2), features, latency_calls)
  return {"predicted": predicted, "p50_1": p50_1, "p50_2": p50_2}


def score_saved_model(path, features, labels, latency_calls):
  """The SavedModel's serving_default in a subprocess per thread count."""
  folder = os.path.dirname(path.rstrip("/"))
  npz = os.path.join(folder, "test_features.npz")
  np.savez(npz, **{k: np.concatenate([f[k] for f in features])
                   for k in features[0]})
  result = {}
  for threads in (1, 2):
    out = os.path.join(folder, f"saved_model_score_{threads}.json")
    mt.run_command(["benchmarks.export_fidelity", "--_serve", path,
                    "--_features", npz, "--_threads", str(threads),
                    "--_labels", ",".join(labels), "--_out", out,
                    "--_latency_calls", str(latency_calls)],
                   out + ".log")
    with open(out, encoding="utf-8") as f:
      got = json.load(f)
    if threads == 1:
      result["predicted"], result["p50_1"] = got["predicted"], got["p50"]
    else:
      result["p50_2"] = got["p50_latency_only"]
  return result


def serve_saved_model(args):
  """--_serve: scores a SavedModel's serving_default with --_threads."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(args._threads)  # pylint: disable=protected-access
  tf.config.threading.set_inter_op_parallelism_threads(1)
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import,g-import-not-at-top
  fn = tf.saved_model.load(args._serve).signatures["serving_default"]  # pylint: disable=protected-access
  data = np.load(args._features)  # pylint: disable=protected-access
  features = [{k: tf.constant(data[k][i:i + 1]) for k in data.files}
              for i in range(len(data[data.files[0]]))]
  labels = args._labels.split(",")  # pylint: disable=protected-access
  call = lambda x: {k: v.numpy() for k, v in fn(**x).items()}
  got = {}
  if args._threads == 1:  # pylint: disable=protected-access
    got["predicted"], got["p50"] = timed_predictions(call, features, labels)
  got["p50_latency_only"] = latency_only(call, features, args._latency_calls)  # pylint: disable=protected-access
  mt.write_atomically(args._out, json.dumps(got))  # pylint: disable=protected-access


def size_mib(kind, path):
  if kind == "saved_model":
    total = 0
    for root, _, files in os.walk(path):
      total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total / 2**20
  return os.path.getsize(path) / 2**20
