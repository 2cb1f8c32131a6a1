"""NER tagging throughput: AlbertTagger vs the same head on keras-hub's backbone.

What an app pays per batch of 32 sentences of 128 tokens: the encoder, the
dense tag layer on every token and the argmax, as `export_saved_model
--model=tagger` serves them (serving_default). The same tagger built on
keras-hub's AlbertBackbone with the same weights is timed alternately in
one run, so the ratio is robust to machine noise.

  python -m benchmarks.tagging_throughput [--preset=albert_tiny_zh]
      [--num_tags=7] [--repetitions=5] [--json_out=FILE]
"""

import json

from absl import app
from absl import flags

flags.DEFINE_string("preset", "albert_tiny_zh", "Encoder preset.")
flags.DEFINE_integer("num_tags", 7, "Tags (O + B/I of PER, LOC, ORG).")
flags.DEFINE_integer("batch_size", 32, "Sentences per call.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sentence.")
flags.DEFINE_integer("repetitions", 5, "Timed calls per model (alternating).")
flags.DEFINE_string("json_out", None, "Write the results as JSON here.")
FLAGS = flags.FLAGS


def measure(preset, num_tags, batch_size, seq_length, repetitions):
  """Median sentences/s of both taggers, their ratio and tag agreement."""
  import keras  # pylint: disable=g-import-not-at-top
  import keras_hub  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf import AlbertConfig  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.keras_hub_interop import backbone_kwargs, copy_from_keras_hub, keras_hub_inputs  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertTagger  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks.tagging import TaggingTask  # pylint: disable=g-import-not-at-top
  from benchmarks.common import summary, time_alternately  # pylint: disable=g-import-not-at-top

  config = AlbertConfig.from_preset(preset)
  backbone = keras_hub.models.AlbertBackbone(
      **dict(backbone_kwargs(config), dropout=0.0))
  ours = AlbertTagger(config, num_tags, classifier_dropout=0.0)
  copy_from_keras_hub(backbone, ours.encoder)
  head = keras.layers.Dense(num_tags)
  head.build([None, None, config.hidden_size])
  head.set_weights(ours.tagger_head.dense.get_weights())

  rng = np.random.default_rng(0)
  feats = {"input_ids": tf.constant(rng.integers(
      5, config.vocab_size, (batch_size, seq_length)), tf.int32),
           "input_mask": tf.ones((batch_size, seq_length), tf.int32),
           "segment_ids": tf.zeros((batch_size, seq_length), tf.int32)}
  run_ours = tf.function(
      lambda f: TaggingTask.export_outputs(ours(f, training=False))["tag_ids"])
  run_theirs = tf.function(lambda f: tf.argmax(head(backbone(
      keras_hub_inputs(f), training=False)["sequence_output"]), -1,
                                               output_type=tf.int32))
  agreement = float(np.mean(run_ours(feats).numpy() ==
                            run_theirs(feats).numpy()))
  times = time_alternately(
      {"albert_tf": lambda: run_ours(feats).numpy(),
       "keras_hub": lambda: run_theirs(feats).numpy()}, repetitions)
  result = {"preset": preset, "num_tags": num_tags, "batch_size": batch_size,
            "seq_length": seq_length, "tag_agreement": agreement}
  for name, values in times.items():
    med, spread = summary([batch_size / t for t in values])
    result[name] = {"sentences_per_s": med, "spread": spread}
  result["ratio"] = (result["albert_tf"]["sentences_per_s"] /
                     result["keras_hub"]["sentences_per_s"])
  return result


def main(argv):
  del argv
  from benchmarks.common import machine  # pylint: disable=g-import-not-at-top
  r = measure(FLAGS.preset, FLAGS.num_tags, FLAGS.batch_size,
              FLAGS.seq_length, FLAGS.repetitions)
  print(f"machine: {machine()}")
  print(f"{r['preset']} tagger, {r['num_tags']} tags, batch {r['batch_size']}"
        f" x seq {r['seq_length']}, {FLAGS.repetitions} alternating "
        "repetitions, median (spread)")
  print(f"albert_tf {r['albert_tf']['sentences_per_s']:.1f} sentences/s "
        f"({r['albert_tf']['spread']:.0%})  keras-hub backbone + dense "
        f"{r['keras_hub']['sentences_per_s']:.1f} "
        f"({r['keras_hub']['spread']:.0%})  ratio {r['ratio']:.2f}x  "
        f"same tags {r['tag_agreement']:.1%}")
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w") as f:
      json.dump({"machine": machine(), **r}, f, indent=2)


if __name__ == "__main__":
  app.run(main)
