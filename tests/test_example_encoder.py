"""data_prep.example_encoder: hand-written wire format == protobuf's Example.

Values cover each encoding path: 0/1 masks (one-byte varints), token ids
from the table (< 65536), ids beyond it, negative int64 (ten-byte varints),
empty lists and floats.
"""

import random

import pytest
import tensorflow as tf

from albert_tf import features
from data_prep import example_encoder


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
      masked_lm_weights=[1.0] * k + [0.0] * (pred - k),
      next_sentence_label=rng.randint(0, 1))


@pytest.mark.parametrize("id_range", [(0, 128), (0, 256), (0, 30000), (0, 1 << 40),
                                      (-(1 << 62), 1 << 62)])
def test_same_example_as_protobuf(id_range):
  rng = random.Random(id_range[1])
  for seq, pred in ((8, 2), (64, 10), (128, 20), (1, 1)):
    for _ in range(20):
      values = _features(rng, seq, pred, id_range)
      ours = tf.train.Example.FromString(
          example_encoder.encode_pretraining_example(**values))
      assert ours == features.make_pretraining_example(**values)


def test_empty_lists():
  values = dict(input_ids=[], input_mask=[], segment_ids=[],
                token_boundary=[], masked_lm_positions=[], masked_lm_ids=[],
                masked_lm_weights=[], next_sentence_label=0)
  ours = tf.train.Example.FromString(
      example_encoder.encode_pretraining_example(**values))
  assert ours == features.make_pretraining_example(**values)
