"""Where a batch-1 request's time goes: serving_default's ops, by type.

    python -m benchmarks.serving_ops [--saved_model=DIR] [--lengths=13,64,128]
        [--threads=1] [--calls=20]

Loads the SavedModel as TF Serving does (a TF1 Session, SavedModelBundle's
path) and runs serving_default on [1, L] ids with a full trace
(RunOptions.FULL_TRACE) `--calls` times after a warm-up; prints, per op type
(after Grappler's rewrites: a fused MatMul + BiasAdd is listed as MatMul),
the mean microseconds per request, the share of the traced time and the
number of ops, plus the untraced p50 of the same call. The default model is
the full-padding export that `benchmarks.serving_latency` writes.
"""

import argparse
import collections
import os
import time

DEFAULT_MODEL = os.path.join("demo_output", "serving_latency", "saved",
                             "full", "1")


def load(saved_model, threads):
  """(Session, serving_default SignatureDef) of a SavedModel, as TF Serving
  loads it, with `threads` op threads."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import
  v1 = tf.compat.v1
  graph = tf.Graph()
  session = v1.Session(graph=graph, config=v1.ConfigProto(
      intra_op_parallelism_threads=threads,
      inter_op_parallelism_threads=threads))
  with graph.as_default():
    meta = v1.saved_model.loader.load(session, ["serve"], saved_model)
  return session, meta.signature_def["serving_default"]


def op_times(session, signature, length, calls):
  """({op type: (mean us per request, ops per request)}, untraced p50 ms)."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  v1 = tf.compat.v1
  ids = np.arange(length, dtype=np.int32)[None] + 5
  values = {"input_ids": ids, "input_mask": np.ones_like(ids),
            "segment_ids": np.zeros_like(ids)}
  feed = {signature.inputs[k].name: v for k, v in values.items()}
  fetch = signature.outputs[sorted(signature.outputs)[0]].name
  for _ in range(20):
    session.run(fetch, feed)
  plain = []
  for _ in range(max(calls, 50)):
    start = time.perf_counter()
    session.run(fetch, feed)
    plain.append(time.perf_counter() - start)
  micros, count = collections.Counter(), collections.Counter()
  options = v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE)
  for _ in range(calls):
    metadata = v1.RunMetadata()
    session.run(fetch, feed, options=options, run_metadata=metadata)
    for device in metadata.step_stats.dev_stats:
      for node in device.node_stats:
        # timeline_label: "name = OpType(inputs)"; no label: a _SOURCE node.
        label = node.timeline_label
        op = (label.split(" = ", 1)[1].split("(")[0] if " = " in label
              else node.node_name)
        micros[op] += node.all_end_rel_micros / calls
        count[op] += 1 / calls
  table = {op: (micros[op], count[op]) for op, _ in micros.most_common()}
  return table, float(np.percentile(plain, 50) * 1000)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--saved_model", default=DEFAULT_MODEL)
  parser.add_argument("--lengths", default="13,64,128")
  parser.add_argument("--threads", type=int, default=1)
  parser.add_argument("--calls", type=int, default=20)
  parser.add_argument("--top", type=int, default=12)
  args = parser.parse_args(argv)
  if not os.path.isdir(args.saved_model):
    parser.error(f"--saved_model={args.saved_model}: no such directory "
                 "(`python -m benchmarks.serving_latency` writes the default)")
  session, signature = load(args.saved_model, args.threads)
  for length in [int(n) for n in args.lengths.split(",")]:
    table, p50 = op_times(session, signature, length, args.calls)
    total = sum(us for us, _ in table.values())
    print(f"\n{length} tokens, {args.threads} thread(s): untraced p50 "
          f"{p50:.2f} ms, traced ops {total / 1000:.2f} ms in "
          f"{sum(n for _, n in table.values()):.0f} ops")
    print("| op | us per request | share | ops |\n|---|---|---|---|")
    for op, (us, n) in list(table.items())[:args.top]:
      print(f"| {op} | {us:.0f} | {us / total:.0%} | {n:.0f} |")


if __name__ == "__main__":
  main()
