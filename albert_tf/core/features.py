"""Input and output names, and the pretraining TFRecord format: one source of truth.

The feature names, dtypes and shapes are exactly those written by the
original google-research/albert `create_pretraining_data.py`, so records of
that code, of `data_prep` or of any tool following the format are
interchangeable. Integers are stored as int64 and cast to int32 by readers.
TensorFlow is imported inside the functions: the names load without it.
"""

INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
SEGMENT_IDS = "segment_ids"
TOKEN_BOUNDARY = "token_boundary"
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
NEXT_SENTENCE_LABELS = "next_sentence_labels"

# The encoder's inputs: every model, signature and TFLite file uses these names.
ENCODER_INPUTS = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS)
# Fine-tuning labels (class index, or float score for regression).
LABEL_IDS = "label_ids"
# Span QA's labels: the answer's first and last piece, v2's no-answer flag.
START_POSITIONS = "start_positions"
END_POSITIONS = "end_positions"
IS_IMPOSSIBLE = "is_impossible"

# Model outputs, and what the export signatures return.
SEQUENCE_OUTPUT = "sequence_output"   # encoder: [batch, seq, hidden]
POOLED_OUTPUT = "pooled_output"       # encoder: [batch, hidden]
ENCODER_OUTPUTS = (SEQUENCE_OUTPUT, POOLED_OUTPUT)
MLM_LOGITS = "mlm_logits"             # pretrainer: [batch, predictions, vocab]
SOP_LOGITS = "sop_logits"             # pretrainer: [batch, 2]
LOGITS = "logits"                     # classifier [batch, labels], tagger
                                      # [batch, seq, tags]
PROBABILITIES = "probabilities"       # classifier export (not regression)
TAG_IDS = "tag_ids"                   # tagger export: [batch, seq]

# Features of length max_seq_length, and of length max_predictions_per_seq.
SEQUENCE_FEATURES = (INPUT_IDS, INPUT_MASK, SEGMENT_IDS, TOKEN_BOUNDARY)
PREDICTION_FEATURES = (MASKED_LM_POSITIONS, MASKED_LM_IDS, MASKED_LM_WEIGHTS)

# Beside its shards data prep writes _SUCCESS, then the manifest (last): the
# hand-off that pretraining checks (albert_tf.data.record_checks).
SUCCESS_FILE = "_SUCCESS"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "albert_tf.pretraining_records"
MANIFEST_VERSION = 1
# The rest of data prep's layout (data_prep.outputs): shards named
# SHARD_PREFIX-SSSSS-of-NNNNN SHARD_SUFFIX, files being written TEMP_PREFIX...
# until complete, the pipeline's counts in SUMMARY_FILE. Any of them beside
# records marks a data prep folder (record_checks.check_records_dirs).
SHARD_PREFIX = "pretrain"
SHARD_SUFFIX = ".tfrecord"
SHARD_GLOB = f"{SHARD_PREFIX}-*-of-*{SHARD_SUFFIX}"
TEMP_PREFIX = ".tmp-"
SUMMARY_FILE = "summary.json"
# Pretraining's report of the records it skipped, in its output_dir.
SKIPPED_RECORDS_FILE = "skipped_records.json"


def pretraining_feature_spec(max_seq_length, max_predictions_per_seq):
  """Returns the `tf.io.parse_single_example` spec of one pretraining record."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64)
          for name in SEQUENCE_FEATURES}
  for name in PREDICTION_FEATURES:
    spec[name] = tf.io.FixedLenFeature(
        [max_predictions_per_seq],
        tf.float32 if name == MASKED_LM_WEIGHTS else tf.int64)
  spec[NEXT_SENTENCE_LABELS] = tf.io.FixedLenFeature([1], tf.int64)
  return spec


def make_pretraining_example(input_ids, input_mask, segment_ids, token_boundary,
                             masked_lm_positions, masked_lm_ids,
                             masked_lm_weights, next_sentence_label):
  """Builds one `tf.train.Example` in the original format (already padded)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  values = dict(zip(SEQUENCE_FEATURES + PREDICTION_FEATURES, (
      input_ids, input_mask, segment_ids, token_boundary,
      masked_lm_positions, masked_lm_ids, masked_lm_weights)))
  values[NEXT_SENTENCE_LABELS] = [next_sentence_label]
  feature = {
      name: tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))
      if name == MASKED_LM_WEIGHTS else
      tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))
      for name, v in values.items()}
  return tf.train.Example(features=tf.train.Features(feature=feature))

# The original's v2 span head: start positions kept, and end positions per
# start (run_squad's --start_n_top / --end_n_top defaults).
START_N_TOP = 5
END_N_TOP = 5
