"""Serializes a pretraining `tf.train.Example` without importing TensorFlow.

Beam workers write millions of records; importing TensorFlow in each worker
costs seconds and hundreds of MB, only to build a protobuf whose wire format
is fixed. This writes the same bytes layout by hand: Example{features: 1} ->
Features{feature: map<string, Feature> = 1} -> Feature{float_list: 2,
int64_list: 3} -> packed values. Feature names and order come from
`albert_tf.features`; `tests/test_data_prep_pipeline.py` checks that the
records parse with `tf.io.parse_single_example` to the same values as
`albert_tf.features.make_pretraining_example`.
"""

import struct

from albert_tf import features

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


def encode_pretraining_example(input_ids, input_mask, segment_ids,
                               token_boundary, masked_lm_positions,
                               masked_lm_ids, masked_lm_weights,
                               next_sentence_label):
  """Serialized bytes equal in content to
  `features.make_pretraining_example(...).SerializeToString()`."""
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
