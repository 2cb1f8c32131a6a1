"""Serializes a pretraining `tf.train.Example` without importing TensorFlow.

Beam workers write millions of records; importing TensorFlow in each worker
costs seconds and hundreds of MB only to reach its Example message class.
The class is built here instead from the message definitions of
tensorflow/core/example/{feature,example}.proto, written out as a
FileDescriptorProto, with the plain `protobuf` package (its upb C backend
does the encoding). Only the wire format matters to a reader, and the
field numbers below are TF's. Feature names come from `albert_tf.core.features`.
`benchmarks/example_encoder.py` times this against a hand-written wire
encoder and TF's own class; `tests/test_example_encoder.py` checks the bytes
equal TF's.
"""

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

from albert_tf.core import features

_FIELD = descriptor_pb2.FieldDescriptorProto


def _example_file():
  """The FileDescriptorProto of tensorflow.Example and the messages it uses."""
  proto = descriptor_pb2.FileDescriptorProto(
      name="data_prep/tf_example.proto", package="tensorflow",
      syntax="proto3")  # proto3: repeated scalars are packed, as in TF's.

  def message(name, *fields):
    added = proto.message_type.add(name=name)
    for field_name, number, kind, type_name in fields:
      label = (_FIELD.LABEL_REPEATED if field_name in ("value", "feature")
               else _FIELD.LABEL_OPTIONAL)
      added.field.add(name=field_name, number=number, type=kind, label=label,
                      type_name=type_name)
    return added

  message("BytesList", ("value", 1, _FIELD.TYPE_BYTES, None))
  message("FloatList", ("value", 1, _FIELD.TYPE_FLOAT, None))
  message("Int64List", ("value", 1, _FIELD.TYPE_INT64, None))
  feature = message(
      "Feature",
      ("bytes_list", 1, _FIELD.TYPE_MESSAGE, ".tensorflow.BytesList"),
      ("float_list", 2, _FIELD.TYPE_MESSAGE, ".tensorflow.FloatList"),
      ("int64_list", 3, _FIELD.TYPE_MESSAGE, ".tensorflow.Int64List"))
  feature.oneof_decl.add(name="kind")
  for field in feature.field:
    field.oneof_index = 0
  # map<string, Feature> feature = 1, spelled as protoc spells a map.
  features_message = message(
      "Features", ("feature", 1, _FIELD.TYPE_MESSAGE,
                   ".tensorflow.Features.FeatureEntry"))
  entry = features_message.nested_type.add(name="FeatureEntry")
  entry.options.map_entry = True
  entry.field.add(name="key", number=1, type=_FIELD.TYPE_STRING,
                  label=_FIELD.LABEL_OPTIONAL)
  entry.field.add(name="value", number=2, type=_FIELD.TYPE_MESSAGE,
                  label=_FIELD.LABEL_OPTIONAL, type_name=".tensorflow.Feature")
  message("Example",
          ("features", 1, _FIELD.TYPE_MESSAGE, ".tensorflow.Features"))
  return proto


def _example_class():
  # A pool of its own: in a process that has imported TensorFlow too, the
  # default pool already holds tensorflow.Example, from TF's file.
  pool = descriptor_pool.DescriptorPool()
  pool.Add(_example_file())
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName("tensorflow.Example"))


Example = _example_class()


def encode_pretraining_example(input_ids, input_mask, segment_ids,
                               token_boundary, masked_lm_positions,
                               masked_lm_ids, masked_lm_weights,
                               next_sentence_label):
  """The bytes of `features.make_pretraining_example(...)`, serialized
  deterministically (features in name order)."""
  int64_features = {
      features.INPUT_IDS: input_ids,
      features.INPUT_MASK: input_mask,
      features.SEGMENT_IDS: segment_ids,
      features.TOKEN_BOUNDARY: token_boundary,
      features.MASKED_LM_POSITIONS: masked_lm_positions,
      features.MASKED_LM_IDS: masked_lm_ids,
      features.NEXT_SENTENCE_LABELS: [next_sentence_label],
  }
  example = Example()
  feature = example.features.feature
  for name, values in int64_features.items():
    feature[name].int64_list.value.extend(values)
  feature[features.MASKED_LM_WEIGHTS].float_list.value.extend(
      masked_lm_weights)
  # A record's bytes pick its shard and its place there (see
  # data_prep.transforms.record_sort_key). upb writes map entries in hash
  # order, which changes from process to process; deterministic=True sorts
  # them by key, so every worker and every run writes the same bytes.
  return example.SerializeToString(deterministic=True)
