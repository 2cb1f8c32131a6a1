"""µs per pretraining record for three ways to serialize a tf.train.Example.

    python -m benchmarks.example_encoder [--records=2000 --repetitions=7]

On the same synthetic records (seq 128, 20 prediction slots, ids below
30000, 90% full length), in one process, interleaved:
  - protobuf: `data_prep.example_encoder`, the Example class built from its
    descriptor with the plain protobuf package (upb), no TensorFlow; what the
    Beam workers use;
  - hand-written: the wire format encoded in Python, data_prep's encoder
    before protobuf's (kept here only as the peer);
  - tf.train.Example: `albert_tf.core.features.make_pretraining_example`, the
    project's TF code path (TF's class, built through its constructors).
protobuf and TF are serialized deterministically (map keys sorted), as the
pipeline needs; their bytes are checked equal, and the hand-written records
equal in content. Also times `import` of the encoder and of TensorFlow in a
fresh process, the cost a worker saves. Prints a table; --json_out writes it.
"""

import json
import os
import random
import struct
import subprocess
import sys
import time

from absl import app
from absl import flags

from albert_tf.core import features
from benchmarks import common
from data_prep import example_encoder

flags.DEFINE_integer("records", 2000, "Records encoded per timed pass.")
flags.DEFINE_integer("repetitions", 7, "Timed passes per encoder, "
                     "interleaved.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per record.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Prediction slots.")
flags.DEFINE_integer("import_repetitions", 3, "Fresh-process imports timed "
                     "per module (0: skip).")
flags.DEFINE_string("json_out", None, "Write the figures here as JSON.")
FLAGS = flags.FLAGS


# ------------------------------------- the former hand-written encoder (peer)
# data_prep/example_encoder.py as it was at commit d42bbd9, verbatim but for
# the function's name.
_SMALL_VARINTS = []  # _SMALL_VARINTS[n]: varint bytes of n (token ids, flags).
_SMALL_LIMIT = 1 << 16


def _varint(n):
  if 0 <= n < len(_SMALL_VARINTS):
    return _SMALL_VARINTS[n]
  n &= (1 << 64) - 1  # Negative int64: ten-byte two's complement.
  out = bytearray()
  while n > 0x7F:
    out.append((n & 0x7F) | 0x80)
    n >>= 7
  out.append(n)
  return bytes(out)


def _init_table():
  if not _SMALL_VARINTS:
    table = [_varint(n) for n in range(_SMALL_LIMIT)]
    _SMALL_VARINTS.extend(table)


def _field(tag, payload):
  return tag + _varint(len(payload)) + payload


def _pack_varints(values):
  # The common cases without a Python call per value (this function is a
  # third of the pipeline's CPU time): 0/1 masks and labels are their own
  # one-byte varints, token ids come from the table.
  if not values:
    return b""
  low, high = min(values), max(values)
  if low >= 0 and high < 0x80:
    return bytes(values)
  if low >= 0 and high < _SMALL_LIMIT:
    return b"".join(map(_SMALL_VARINTS.__getitem__, values))
  return b"".join(map(_varint, values))


def _int64_feature(values):
  packed = _pack_varints(values)
  return _field(b"\x1a", _field(b"\x0a", packed))  # int64_list: 3


def _float_feature(values):
  packed = struct.pack(f"<{len(values)}f", *values)
  return _field(b"\x12", _field(b"\x0a", packed))  # float_list: 2


_KEYS = {name: _field(b"\x0a", name.encode("utf-8")) for name in (
    features.SEQUENCE_FEATURES + features.PREDICTION_FEATURES +
    (features.NEXT_SENTENCE_LABELS,))}


def hand_written_encoder(input_ids, input_mask, segment_ids, token_boundary,
                         masked_lm_positions, masked_lm_ids,
                         masked_lm_weights, next_sentence_label):
  """Bytes equal in content to TF's Example, features in argument order."""
  _init_table()
  values = {
      features.INPUT_IDS: _int64_feature(input_ids),
      features.INPUT_MASK: _int64_feature(input_mask),
      features.SEGMENT_IDS: _int64_feature(segment_ids),
      features.TOKEN_BOUNDARY: _int64_feature(token_boundary),
      features.MASKED_LM_POSITIONS: _int64_feature(masked_lm_positions),
      features.MASKED_LM_IDS: _int64_feature(masked_lm_ids),
      features.MASKED_LM_WEIGHTS: _float_feature(masked_lm_weights),
      features.NEXT_SENTENCE_LABELS: _int64_feature([next_sentence_label]),
  }
  # Map entry: key = 1, value = 2.
  entries = b"".join(_field(b"\x0a", _KEYS[name] + _field(b"\x12", value))
                     for name, value in values.items())
  return _field(b"\x0a", entries)  # Example.features = 1


# ---------------------------------------------------------------- benchmark
def tensorflow_encoder(**values):
  return features.make_pretraining_example(**values).SerializeToString(
      deterministic=True)


ENCODERS = {
    "protobuf (upb, class from descriptor; data_prep)":
        example_encoder.encode_pretraining_example,
    "hand-written wire format (former)": hand_written_encoder,
    "tf.train.Example (TF; features.make_pretraining_example)":
        tensorflow_encoder,
}


def make_records(count, seq, pred, seed=0):
  """Padded feature dicts as data_prep.instances.padded_features makes."""
  rng = random.Random(seed)
  records = []
  for _ in range(count):
    n = seq if rng.random() < 0.9 else rng.randint(8, seq)
    k = min(pred, max(1, round(0.15 * n)))
    pad = [0] * (seq - n)
    first = rng.randint(2, n - 2)
    records.append(dict(
        input_ids=[rng.randrange(5, 30000) for _ in range(n)] + pad,
        input_mask=[1] * n + pad,
        segment_ids=[0] * first + [1] * (n - first) + pad,
        token_boundary=[rng.randint(0, 1) for _ in range(n)] + pad,
        masked_lm_positions=sorted(rng.sample(range(1, n), k)) + [0] * (
            pred - k),
        masked_lm_ids=[rng.randrange(5, 30000) for _ in range(k)] + [0] * (
            pred - k),
        masked_lm_weights=[1.0] * k + [0.0] * (pred - k),
        next_sentence_label=rng.randint(0, 1)))
  return records


def check_outputs(records):
  """protobuf == TF bytes; hand-written parses to the same Example."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for values in records:
    ours = example_encoder.encode_pretraining_example(**values)
    assert ours == tensorflow_encoder(**values)
    assert (tf.train.Example.FromString(hand_written_encoder(**values)) ==
            tf.train.Example.FromString(ours))


def time_encoders(records, repetitions):
  """{name: [µs per record of each pass]}, passes interleaved by encoder."""
  times = {name: [] for name in ENCODERS}
  names = list(ENCODERS)
  for rep in range(repetitions + 1):  # Pass 0 warms up and is dropped.
    for name in names[rep % len(names):] + names[:rep % len(names)]:
      encode = ENCODERS[name]
      start = time.perf_counter()
      for values in records:
        encode(**values)
      if rep:
        times[name].append(
            (time.perf_counter() - start) / len(records) * 1e6)
  return times


def import_seconds(module, repetitions):
  """Wall seconds of `python -c "import module"` in fresh processes."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
  seconds = []
  for _ in range(repetitions):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True,
                   env=env, cwd=root, capture_output=True)
    seconds.append(time.perf_counter() - start)
  return seconds


def main(argv):
  del argv
  records = make_records(FLAGS.records, FLAGS.max_seq_length,
                         FLAGS.max_predictions_per_seq)
  check_outputs(records[:200])
  times = time_encoders(records, FLAGS.repetitions)
  peer = common.summary(times["hand-written wire format (former)"])[0]
  result = {"machine": common.machine(), "records": FLAGS.records,
            "max_seq_length": FLAGS.max_seq_length,
            "repetitions": FLAGS.repetitions, "encoders": {}}
  print(result["machine"])
  print(f"{FLAGS.records} records, seq {FLAGS.max_seq_length}, "
        f"{FLAGS.repetitions} interleaved passes each")
  width = max(map(len, ENCODERS))
  print(f"{'encoder':{width}s} {'µs/record':>9s} {'min-max':>13s} "
        f"{'vs hand-written':>15s}")
  for name, values in times.items():
    median, spread = common.summary(values)
    result["encoders"][name] = {"us_per_record": median, "spread": spread,
                                "min": min(values), "max": max(values),
                                "ratio_vs_hand_written": median / peer}
    print(f"{name:{width}s} {median:9.1f} {min(values):6.1f}-{max(values):<6.1f} "
          f"{median / peer:15.2f}")
  if FLAGS.import_repetitions:
    result["import_seconds"] = {}
    for module in ("data_prep.example_encoder", "tensorflow"):
      seconds = import_seconds(module, FLAGS.import_repetitions)
      result["import_seconds"][module] = seconds
      print(f"import {module} in a fresh process: "
            f"{common.summary(seconds)[0]:.2f} s median "
            f"({min(seconds):.2f}-{max(seconds):.2f})")
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w", encoding="utf-8") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  app.run(main)
