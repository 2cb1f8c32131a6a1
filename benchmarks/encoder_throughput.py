"""Inference throughput of AlbertEncoder vs keras-hub's AlbertBackbone, same weights.

Fixed shapes (batch 32, sequence 128). Both models are wrapped the same way
(`tf.function`, no XLA unless --jit_compile) and timed alternately in one
run, so the ratio is robust to machine noise; the fraction of the 2048^2
matmul peak measured in the same run says how close to the hardware we are.
With onnxruntime and tf2onnx installed (benchmarks/requirements-peers.txt),
float32 rows also time ONNX Runtime on our encoder converted by tf2onnx,
in the same turns (one thread pool of as many threads as TF's); without
them that column is skipped with one line.

  python -m benchmarks.encoder_throughput [--presets=albert_tiny_zh,albert_base_v2]
      [--bfloat16] [--repetitions=5] [--json_out=FILE]
"""

import json

from absl import app
from absl import flags

flags.DEFINE_list("presets", ["albert_tiny_zh", "albert_base_v2"], "Presets.")
flags.DEFINE_integer("batch_size", 32, "Sequences per call.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("repetitions", 5, "Timed calls per model (alternating).")
flags.DEFINE_bool("bfloat16", False, "Also measure both models under mixed_bfloat16.")
flags.DEFINE_bool("jit_compile", False, "Compile both with XLA.")
flags.DEFINE_string("json_out", None, "Write the results as JSON here.")
FLAGS = flags.FLAGS


def _models(preset, policy):
  import keras  # pylint: disable=g-import-not-at-top
  import keras_hub  # pylint: disable=g-import-not-at-top
  from albert_tf import AlbertConfig, AlbertEncoder  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.keras_hub_interop import backbone_kwargs, copy_from_keras_hub  # pylint: disable=g-import-not-at-top
  config = AlbertConfig.from_preset(preset)
  keras.mixed_precision.set_global_policy(policy)
  backbone = keras_hub.models.AlbertBackbone(
      **dict(backbone_kwargs(config), dropout=0.0))
  ours = copy_from_keras_hub(backbone, AlbertEncoder(config))
  keras.mixed_precision.set_global_policy("float32")
  return config, ours, backbone


def measure(preset, policy, batch_size, seq_length, repetitions, jit_compile):
  """Median sequences/s of both models and their ratio, for one preset/policy."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.keras_hub_interop import keras_hub_inputs  # pylint: disable=g-import-not-at-top
  from benchmarks.common import summary, time_alternately  # pylint: disable=g-import-not-at-top
  config, ours, theirs = _models(preset, policy)
  rng = np.random.default_rng(0)
  feats = {"input_ids": tf.constant(rng.integers(5, config.vocab_size,
                                                 (batch_size, seq_length)),
                                    tf.int32),
           "input_mask": tf.ones((batch_size, seq_length), tf.int32),
           "segment_ids": tf.zeros((batch_size, seq_length), tf.int32)}
  run_ours = tf.function(lambda f: ours(f, training=False)["sequence_output"],
                         jit_compile=jit_compile)
  run_theirs = tf.function(
      lambda f: theirs(keras_hub_inputs(f), training=False)["sequence_output"],
      jit_compile=jit_compile)
  diff = float(np.max(np.abs(
      tf.cast(run_ours(feats), tf.float32).numpy() -
      tf.cast(run_theirs(feats), tf.float32).numpy())))
  fns = {"albert_tf": lambda: run_ours(feats).numpy(),
         "keras_hub": lambda: run_theirs(feats).numpy()}
  result = {"preset": preset, "policy": policy, "max_abs_diff": diff}
  session = _onnx_session(ours) if policy == "float32" else None
  if session is not None:
    feed = {k: v.numpy() for k, v in feats.items()}
    fns["onnxruntime"] = lambda: session.run(None, feed)[0]
    result["onnxruntime_max_abs_diff"] = float(np.max(np.abs(
        fns["onnxruntime"]() - fns["albert_tf"]())))
  times = time_alternately(fns, repetitions)
  for name, values in times.items():
    med, spread = summary([batch_size / t for t in values])
    result[name] = {"seq_per_s": med, "spread": spread}
  result["ratio"] = result["albert_tf"]["seq_per_s"] / result["keras_hub"]["seq_per_s"]
  if session is not None:
    result["ratio_onnxruntime"] = (result["albert_tf"]["seq_per_s"] /
                                   result["onnxruntime"]["seq_per_s"])
  return config, result


def _onnx_session(encoder):
  """ONNX Runtime on `encoder` (tf2onnx, opset 17), or None with one line."""
  import os  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    import onnxruntime as ort  # pylint: disable=g-import-not-at-top
    import tf2onnx  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    print(f"skip onnxruntime: {e.name} is not installed")
    return None
  specs = [tf.TensorSpec([None, None], tf.int32, name=n)
           for n in ("input_ids", "input_mask", "segment_ids")]
  fn = tf.function(lambda a, b, c: encoder(
      {"input_ids": a, "input_mask": b, "segment_ids": c},
      training=False)["sequence_output"], input_signature=specs)
  path = os.path.join(tempfile.mkdtemp(), "encoder.onnx")
  tf2onnx.convert.from_function(fn, input_signature=specs, opset=17,
                                output_path=path)
  options = ort.SessionOptions()
  options.intra_op_num_threads = (
      tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count())
  return ort.InferenceSession(path, options,
                              providers=["CPUExecutionProvider"])


def main(argv):
  del argv
  from benchmarks.common import encoder_flops_per_sequence, machine, matmul_peak_gflops  # pylint: disable=g-import-not-at-top
  peak = {"float32": matmul_peak_gflops("float32")}
  policies = ["float32"]
  if FLAGS.bfloat16:
    peak["bfloat16"] = matmul_peak_gflops("bfloat16")
    policies.append("mixed_bfloat16")
  print(f"machine: {machine()}")
  print(f"matmul 2048^2 peak: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peak.items()))
  print(f"batch {FLAGS.batch_size} x seq {FLAGS.seq_length}, "
        f"{FLAGS.repetitions} alternating repetitions, median (spread)")
  rows = []
  for preset in FLAGS.presets:
    for policy in policies:
      config, r = measure(preset, policy, FLAGS.batch_size, FLAGS.seq_length,
                          FLAGS.repetitions, FLAGS.jit_compile)
      gflop = encoder_flops_per_sequence(config, FLAGS.seq_length) / 1e9
      p = peak["bfloat16" if "bfloat16" in policy else "float32"]
      r["gflop_per_seq"] = gflop
      r["fraction_of_peak"] = r["albert_tf"]["seq_per_s"] * gflop / p
      rows.append(r)
      print(f"{preset:<16} {policy:<15} albert_tf {r['albert_tf']['seq_per_s']:7.1f} "
            f"({r['albert_tf']['spread']:.0%})  keras_hub "
            f"{r['keras_hub']['seq_per_s']:7.1f} ({r['keras_hub']['spread']:.0%})  "
            f"ratio {r['ratio']:.2f}x  {r['fraction_of_peak']:.0%} of peak  "
            f"max|diff| {r['max_abs_diff']:.1e}" + (
                f"  onnxruntime {r['onnxruntime']['seq_per_s']:7.1f} "
                f"({r['onnxruntime']['spread']:.0%}) ratio "
                f"{r['ratio_onnxruntime']:.2f}x" if "onnxruntime" in r
                else ""))
  if FLAGS.bfloat16:
    for preset in FLAGS.presets:
      fp32 = next(r for r in rows if r["preset"] == preset and r["policy"] == "float32")
      bf16 = next(r for r in rows if r["preset"] == preset and r["policy"] != "float32")
      ratio = bf16["albert_tf"]["seq_per_s"] / fp32["keras_hub"]["seq_per_s"]
      print(f"{preset:<16} albert_tf bfloat16 / keras_hub float32: {ratio:.2f}x")
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w") as f:
      json.dump({"machine": machine(), "peak_gflops": peak, "rows": rows}, f, indent=2)


if __name__ == "__main__":
  app.run(main)
