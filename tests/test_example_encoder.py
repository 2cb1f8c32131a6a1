"""data_prep.example_encoder: the same bytes as TF's Example, without TF.

Values cover small and large token ids, negative int64 (ten-byte varints),
empty lists and floats.
"""

import json
import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf

from albert_tf.core import features
from data_prep import example_encoder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _features(rng, seq, pred, id_range):
  n = rng.randint(0, seq)
  k = rng.randint(0, pred)
  pad = [0] * (seq - n)
  return dict(
      input_ids=[rng.randrange(*id_range) for _ in range(n)] + pad,
      input_mask=[1] * n + pad,
      segment_ids=[rng.randint(0, 1) for _ in range(n)] + pad,
      token_boundary=[rng.randint(0, 1) for _ in range(n)] + pad,
      masked_lm_positions=[rng.randrange(seq) for _ in range(k)] + [0] * (
          pred - k),
      masked_lm_ids=[rng.randrange(*id_range) for _ in range(k)] + [0] * (
          pred - k),
      masked_lm_weights=[rng.random() for _ in range(k)] + [0.0] * (pred - k),
      next_sentence_label=rng.randint(0, 1))


def _tf_bytes(values):
  return features.make_pretraining_example(**values).SerializeToString(
      deterministic=True)


@pytest.mark.parametrize("id_range", [(0, 128), (0, 30000), (0, 1 << 40),
                                      (-(1 << 62), 1 << 62)])
def test_same_bytes_as_tensorflow(id_range):
  rng = random.Random(id_range[1])
  for seq, pred in ((8, 2), (128, 20), (1, 1)):
    for _ in range(20):
      values = _features(rng, seq, pred, id_range)
      ours = example_encoder.encode_pretraining_example(**values)
      assert ours == _tf_bytes(values)
      assert tf.train.Example.FromString(ours) == (
          features.make_pretraining_example(**values))


def test_empty_lists():
  values = dict(input_ids=[], input_mask=[], segment_ids=[],
                token_boundary=[], masked_lm_positions=[], masked_lm_ids=[],
                masked_lm_weights=[], next_sentence_label=0)
  assert example_encoder.encode_pretraining_example(**values) == _tf_bytes(
      values)


_WORKER = """
import json, sys
from data_prep import create_pretraining_data, example_encoder, transforms
from albert_tf.data import tokenization
record = example_encoder.encode_pretraining_example(**json.load(sys.stdin))
print(json.dumps({"record": record.hex(),
                  "tensorflow": [m for m in sys.modules
                                 if m.split(".")[0] == "tensorflow"]}))
"""


def test_worker_imports_no_tensorflow_and_writes_the_same_bytes_each_run():
  """What a Beam worker imports, in fresh processes: no TensorFlow, and the
  same bytes in every process (map order must not depend on the process)."""
  values = _features(random.Random(5), 128, 20, (0, 30000))
  env = dict(os.environ, PYTHONPATH=ROOT)
  outputs = []
  for _ in range(2):
    done = subprocess.run([sys.executable, "-c", _WORKER],
                          input=json.dumps(values), capture_output=True,
                          text=True, env=env, cwd=ROOT, check=True)
    outputs.append(json.loads(done.stdout.strip().splitlines()[-1]))
  for output in outputs:
    assert output["tensorflow"] == []
    assert bytes.fromhex(output["record"]) == _tf_bytes(values)
