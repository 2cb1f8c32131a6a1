r"""`benchmarks.serving_latency --model=PATH`: your own artifact, timed.

    python -m benchmarks.serving_latency --model=saved_models/my_clf \
        [--data=my_tsv/dev.tsv] [--calls=N]

PATH is anything `albert_tf.load` reads: a fine-tuning output_dir, an
export_saved_model export, an export_tflite .tflite or an export_onnx
.onnx. It is timed as `albert_tf.load(PATH).predict` serves, tokenization
included, at batch 1 and batch 32, on texts of your data's lengths:
--data=FILE is read as albert-predict reads a file (TSV with a header,
JSON lines or plain text; the model's inputs by column name), else a text
cut to the model's recorded max_seq_length. Beside it, ONNX Runtime where
it can run the same model: the .onnx itself, or the `.onnx` beside a
SavedModel or .tflite of the same stem when export_onnx wrote one there
(a model given as .onnx is ONNX Runtime already). Prints one table: p50
and p90 milliseconds per call and rows/s.
"""

import os
import statistics
import time

BATCHES = (1, 32)
FILLER = "酒店的服务很好，房间也很干净，下次还来。"


def data_rows(predictor, path, limit=256):
  """Up to `limit` rows of path as predict() columns ({input: [values]}),
  read as albert-predict reads files."""
  from albert_tf import predict  # pylint: disable=g-import-not-at-top
  reader = predict.RowReader(predictor, path)
  fmt = predict.input_format(path)
  rows = []
  for number, row in predict.read_rows(path, fmt):
    rows.append(reader(number, row)[0])
    if len(rows) == limit:
      break
  if not rows:
    raise predict.PredictError(f"--data={path} holds no rows")
  return {name: [r[name] for r in rows] for name in predictor.inputs}


def recorded_rows(predictor):
  """One text per input, as long as the model reads (its max_seq_length)."""
  text = FILLER * (predictor.max_seq_length // len(FILLER) + 1)
  values = {"options": [[text[:8]] * 4]}
  return {name: values.get(name, [text]) for name in predictor.inputs}


def _lengths(predictor, columns):
  """Tokens of each row's first input, capped at the model's length."""
  first = columns[predictor.inputs[0]]
  return [min(len(predictor.tokenizer.tokenize(t)) + 2,
              predictor.max_seq_length) if isinstance(t, str) else
          predictor.max_seq_length for t in first]


def time_predictor(predictor, columns, batch, calls, warmup=2):
  """(p50 ms, p90 ms, rows/s) of predict() on `batch` rows at a time,
  cycling through the rows."""
  n = len(columns[predictor.inputs[0]])

  def take(start):
    index = [(start + i) % n for i in range(batch)]
    return [[columns[name][i] for i in index] for name in predictor.inputs]

  from albert_tf.core import quiet_logs  # pylint: disable=g-import-not-at-top
  with quiet_logs.cpp_lines_hidden():  # first kernels: oneDNN's notes
    for call in range(warmup):
      predictor.predict(*take(call * batch))
  times = []
  for call in range(calls):
    args = take(call * batch)
    start = time.perf_counter()
    predictor.predict(*args)
    times.append(time.perf_counter() - start)
  times.sort()
  p50 = statistics.median(times) * 1e3
  p90 = times[min(len(times) - 1, int(0.9 * len(times)))] * 1e3
  return p50, p90, batch / (p50 / 1e3)


def onnx_beside(path):
  """The ONNX Runtime twin of path: itself (.onnx), or the .onnx of the
  same stem beside a .tflite / SavedModel; None if there is none."""
  if path.endswith(".onnx"):
    return None
  stem = os.path.splitext(path.rstrip("/"))[0]
  candidate = stem + ".onnx"
  return candidate if os.path.isfile(candidate) else None


def run(model, data=None, calls=50, log=print):
  """Times model (and its ONNX twin) at BATCHES; returns the rows."""
  import albert_tf  # pylint: disable=g-import-not-at-top
  runtimes = [(model, albert_tf.load(model))]
  twin = onnx_beside(model)
  if twin:
    try:
      import onnxruntime  # pylint: disable=g-import-not-at-top,unused-import
      runtimes.append((twin, albert_tf.load(twin)))
    except ImportError:
      log(f"skip {twin}: onnxruntime not installed (pip install "
          "'albert_tf[onnx]')")
  predictor = runtimes[0][1]
  columns = (data_rows(predictor, data) if data else
             recorded_rows(predictor))
  lengths = sorted(_lengths(predictor, columns))
  log(f"{len(lengths)} row(s) of {data or 'the recorded length'}: "
      f"{lengths[0]}-{lengths[-1]} tokens (median "
      f"{statistics.median(lengths):g}); {calls} calls per cell")
  rows = []
  for path, runner in runtimes:
    kind = ("ONNX Runtime" if path.endswith(".onnx") else "LiteRT"
            if path.endswith(".tflite") else "TensorFlow")
    for batch in BATCHES:
      p50, p90, rate = time_predictor(runner, columns, batch, calls)
      rows.append({"model": path, "runtime": kind, "batch": batch,
                   "p50_ms": p50, "p90_ms": p90, "rows_per_s": rate})
  log("| model | runtime | batch | p50 ms | p90 ms | rows/s |")
  log("|---|---|---:|---:|---:|---:|")
  for r in rows:
    log(f"| {r['model']} | {r['runtime']} | {r['batch']} | "
        f"{r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['rows_per_s']:.1f} |")
  return rows
