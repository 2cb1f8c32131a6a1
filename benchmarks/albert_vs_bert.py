"""Parameters and inference throughput: albert_tiny_zh vs albert_base_v2 vs bert_base.

All three are this project's `AlbertEncoder` (bert_base = E == H, no
sharing), timed alternately in one run at batch 32 x sequence 128, float32.
The seed article says albert_tiny is about 10x faster than bert_base.

  python -m benchmarks.albert_vs_bert [--repetitions=3] [--json_out=FILE]
"""

import json

from absl import app
from absl import flags

FLAGS = flags.FLAGS


def _define_flags():
  # Only when run as a script: the demo's report imports `compare`.
  flags.DEFINE_list("presets", ["albert_tiny_zh", "albert_base_v2",
                                "bert_base"],
                    "Presets to compare (the first is the reference row).")
  flags.DEFINE_integer("batch_size", 32, "Sequences per call.")
  flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
  flags.DEFINE_integer("repetitions", 3, "Timed calls per model "
                       "(alternating).")
  flags.DEFINE_bool("jit_compile", False, "Compile with XLA.")
  flags.DEFINE_string("json_out", None, "Write the results as JSON here.")


def compare(presets, batch_size=32, seq_length=128, repetitions=3,
            jit_compile=False):
  """{preset: {params, seq_per_s, spread}} measured side by side."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf import AlbertConfig, AlbertEncoder  # pylint: disable=g-import-not-at-top
  from albert_tf.params import count_params  # pylint: disable=g-import-not-at-top
  from benchmarks.common import summary, time_alternately  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  runners, results = {}, {}
  for preset in presets:
    config = AlbertConfig.from_preset(preset)
    encoder = AlbertEncoder(config)
    feats = {"input_ids": tf.constant(rng.integers(5, config.vocab_size, (
        batch_size, seq_length)), tf.int32),
             "input_mask": tf.ones((batch_size, seq_length), tf.int32),
             "segment_ids": tf.zeros((batch_size, seq_length), tf.int32)}
    fn = tf.function(lambda f, e=encoder: e(f)["sequence_output"],
                     jit_compile=jit_compile)
    fn(feats).numpy()  # trace and warm up
    runners[preset] = (fn, feats)
    results[preset] = {"params": count_params(encoder)}
  times = time_alternately(
      {preset: lambda fn=fn, feats=feats: fn(feats).numpy()
       for preset, (fn, feats) in runners.items()}, repetitions)
  for preset, r in results.items():
    r["seq_per_s"], r["spread"] = summary([batch_size / t
                                           for t in times[preset]])
  return results


def main(argv):
  del argv
  from benchmarks.common import machine  # pylint: disable=g-import-not-at-top
  results = compare(FLAGS.presets, FLAGS.batch_size, FLAGS.seq_length,
                    FLAGS.repetitions, FLAGS.jit_compile)
  print(f"machine: {machine()}; batch {FLAGS.batch_size} x seq "
        f"{FLAGS.seq_length}, float32, {FLAGS.repetitions} alternating "
        "repetitions, median (spread)")
  last = FLAGS.presets[-1]
  print(f"{'preset':<16} {'params':>13} {'seq/s':>8} {'spread':>7} "
        f"{'speed vs ' + last:>18}")
  for preset, r in results.items():
    ratio = r["seq_per_s"] / results[last]["seq_per_s"]
    print(f"{preset:<16} {r['params']:>13,} {r['seq_per_s']:>8.1f} "
          f"{r['spread']:>6.0%} {ratio:>17.1f}x")
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w") as f:
      json.dump({"machine": machine(), "results": results}, f, indent=2)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
