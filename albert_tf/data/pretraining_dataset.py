"""TFRecord shards -> batches of pretraining features (the reader side of `features`).

    files = expand_input_files("data/train/*.tfrecord,more/*.tfrecord")
    check_shards(files, max_seq_length=128, max_predictions_per_seq=20)
    dataset = make_dataset(files, batch_size=64, max_seq_length=128,
                           max_predictions_per_seq=20, is_training=True)

Each element is a dict in the TFRecord feature names (`albert_tf.core.features`),
every integer feature cast to int32: `input_ids`, `input_mask`,
`segment_ids`, `token_boundary` [batch, max_seq_length];
`masked_lm_positions`, `masked_lm_ids` [batch, P] int32,
`masked_lm_weights` [batch, P] float32; `next_sentence_labels` [batch, 1].
The order of the steps is docs/CONTRACTS.md (b).
"""

from typing import Dict, Optional, Sequence

import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data.input_timeout import InputFileError
from albert_tf.data.length_buckets import bucket_widths, cut_to_width


# ------------------------------------------------------------------ parsing
def files_with_ids_over(files: Sequence[str], vocab_size: int,
                        max_seq_length: int, max_predictions_per_seq: int):
  """[(path, largest token id)] of the files holding an id >= vocab_size
  (input_ids or masked_lm_ids): names the file once the model met one."""
  spec = {F.INPUT_IDS: tf.io.FixedLenFeature([max_seq_length], tf.int64),
          F.MASKED_LM_IDS: tf.io.FixedLenFeature([max_predictions_per_seq],
                                                 tf.int64)}
  found = []
  for path in files:
    largest = tf.data.TFRecordDataset(path).batch(1024).map(
        lambda s: tf.reduce_max([tf.reduce_max(v) for v in
                                 tf.io.parse_example(s, spec).values()]))
    top = max((int(v) for v in largest.as_numpy_iterator()), default=-1)
    if top >= vocab_size:
      found.append((path, top))
  return found


def decode_record(serialized: tf.Tensor, max_seq_length: int,
                  max_predictions_per_seq: int) -> Dict[str, tf.Tensor]:
  """Parses one serialized Example (scalar) or a batch (vector); int64 -> int32."""
  spec = F.pretraining_feature_spec(max_seq_length, max_predictions_per_seq)
  parse = (tf.io.parse_single_example if serialized.shape.rank == 0 else
           tf.io.parse_example)
  parsed = parse(serialized, spec)
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in parsed.items()}


def make_dataset(files: Sequence[str],
                 batch_size: int,
                 max_seq_length: int,
                 max_predictions_per_seq: int,
                 is_training: bool = True,
                 seed: Optional[int] = None,
                 shuffle_buffer_size: int = 1000,
                 cycle_length: int = 4,
                 skip_corrupt_records: bool = False,
                 input_context: Optional[tf.distribute.InputContext] = None,
                 drop_remainder: Optional[bool] = None,
                 max_batches: Optional[int] = None,
                 length_buckets: int = 0
                 ) -> tf.data.Dataset:
  """The tf.data pipeline for one input pipeline (one worker).

  Args:
    files: TFRecord paths (see `expand_input_files`).
    batch_size: this pipeline's batch (the per-replica batch under
      `tf.distribute`).
    is_training: shuffle files and records and repeat forever; otherwise
      read files in order, once.
    seed: makes file and record shuffling reproducible.
    shuffle_buffer_size: record-level shuffle buffer; 0 disables shuffling
      (files are then read in order and interleaved round-robin).
    cycle_length: files read concurrently.
    skip_corrupt_records: skip unreadable / unparsable records.
    input_context: from `distribute_datasets_from_function`; shards by file.
    drop_remainder: drop a last partial batch. Default: when training (the
      stream repeats, so only static shapes matter); eval keeps every record
      unless static shapes are required (TPU).
    max_batches: stop after this many batches (eval's max_eval_steps: set on
      the data, it holds whatever steps_per_execution Keras runs with).
    length_buckets: training only, when > 1: each batch holds examples of
      one length bucket (`group_by_length`) and is cut to that bucket's
      width, so short texts are not padded to max_seq_length. The batches
      then have a dynamic sequence length (not for TPUs or XLA).
  """
  if drop_remainder is None:
    drop_remainder = is_training
  files = list(files)
  if not files:
    raise InputFileError("make_dataset: no input files")
  shard_records = None
  if input_context and input_context.num_input_pipelines > 1:
    n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
    if len(files) >= n:
      files = files[i::n]  # This worker's files (what Dataset.shard keeps).
    else:  # too few files to give each worker its own: split the records
      shard_records = (n, i)
  dataset = tf.data.Dataset.from_tensor_slices(files)
  shuffle = is_training and shuffle_buffer_size > 0
  if shuffle:
    dataset = dataset.shuffle(len(files), seed=seed,
                              reshuffle_each_iteration=True)
  if is_training:
    dataset = dataset.repeat()

  def read_file(path):
    records = tf.data.TFRecordDataset(path, buffer_size=8 << 20)
    return records.ignore_errors() if skip_corrupt_records else records

  # Deterministic round robin over `cycle_length` files: with a seed the
  # order of records is reproducible (and identical across strategies).
  # Never more slots than this pipeline's files: the list repeats, so a
  # spare slot would read a file a second time, in step with the first.
  parallel = dict(num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=True) if shuffle else {}
  dataset = dataset.interleave(
      read_file, cycle_length=min(cycle_length, len(files)), block_length=1,
      **parallel)
  if shard_records:
    dataset = dataset.shard(*shard_records)
  if shuffle:
    dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
  decode = lambda s: decode_record(s, max_seq_length, max_predictions_per_seq)
  if is_training and length_buckets > 1:
    if skip_corrupt_records:
      dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
      dataset = dataset.ignore_errors()
    else:
      dataset = dataset.batch(256).map(
          decode, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    dataset = group_by_length(dataset, batch_size, max_seq_length,
                              length_buckets, drop_remainder)
  elif skip_corrupt_records:  # parse one by one: one bad record is skipped
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.ignore_errors().batch(batch_size,
                                            drop_remainder=drop_remainder)
  else:  # batch the serialized strings, then parse a whole batch (faster)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
  if max_batches:
    dataset = dataset.take(max_batches)
  options = tf.data.Options()
  # We shard by file ourselves; tell tf.distribute not to shard again.
  options.experimental_distribute.auto_shard_policy = (
      tf.data.experimental.AutoShardPolicy.OFF)
  dataset = dataset.with_options(options)
  return dataset.prefetch(tf.data.AUTOTUNE)


def group_by_length(dataset: tf.data.Dataset, batch_size: int,
                    max_seq_length: int, length_buckets: int,
                    drop_remainder: bool = True) -> tf.data.Dataset:
  """Batches of examples whose length (the input_mask's sum) falls in one
  bucket, each cut to its bucket's width (`bucket_widths`).

  Only padding is cut (masked_lm_positions index real tokens). Within a
  bucket the examples keep their order; a batch is formed when its bucket
  has batch_size examples (tf.data's group_by_window).
  """
  widths = tf.constant(bucket_widths(max_seq_length, length_buckets),
                       tf.int32)

  def bucket(features):
    length = tf.reduce_sum(tf.cast(features[F.INPUT_MASK], tf.int32))
    return tf.cast(tf.searchsorted(widths, [length])[0], tf.int64)

  def batch(key, window):
    width = widths[tf.minimum(tf.cast(key, tf.int32), len(widths) - 1)]
    return window.batch(batch_size, drop_remainder=drop_remainder).map(
        lambda features: cut_to_width(features, width, F.SEQUENCE_FEATURES))

  return dataset.group_by_window(bucket, batch, window_size=batch_size)


def make_distributed_dataset(strategy: tf.distribute.Strategy,
                             files: Sequence[str], global_batch_size: int,
                             **kwargs):
  """`make_dataset` once per worker, each with the per-replica batch size
  (one worker's replicas take consecutive batches: together those of a
  single pipeline of `global_batch_size`)."""
  replicas = strategy.num_replicas_in_sync
  if global_batch_size % replicas:
    raise ValueError(
        f"--train_batch_size/--eval_batch_size ({global_batch_size}) must be "
        f"divisible by the number of replicas ({replicas})")

  def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch_size)
    return make_dataset(files, batch, input_context=input_context, **kwargs)

  return strategy.distribute_datasets_from_function(dataset_fn)
