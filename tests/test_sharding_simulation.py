"""64 input pipelines on one machine: who reads which record, and how often.

A pod slice or a 64-host GPU job builds one input pipeline per host from a
`tf.distribute.InputContext`. Here the project's own input functions
(`PretrainingTask.build_inputs` -> `pretraining_dataset.make_dataset`, and
`tasks.base.step_indexed_inputs` for fine-tuning) are handed 64 contexts in
turn by a stand-in strategy, and every pipeline is read to the end of its
first epochs: no model, no devices, only datasets.
"""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.tasks.base import step_indexed_inputs
from albert_tf.tasks.pretraining import PretrainingTask
from tests import pretraining_fixtures as fx

# 64 pipelines built and read to the end, about 50 s of CPU: `make
# test-slow`.
pytestmark = pytest.mark.slow

PIPELINES = 64
RECORDS_PER_SHARD = 3


class PipelineStrategy:
  """The one call the input functions make on a strategy, recorded: the
  `dataset_fn` they pass is returned, to be called with chosen contexts."""

  def __init__(self, num_replicas_in_sync):
    self.num_replicas_in_sync = num_replicas_in_sync

  def distribute_datasets_from_function(self, dataset_fn):
    return dataset_fn


def contexts(num_replicas, pipeline_ids=range(PIPELINES)):
  return [tf.distribute.InputContext(
      num_input_pipelines=PIPELINES, input_pipeline_id=i,
      num_replicas_in_sync=num_replicas) for i in pipeline_ids]


def write_shards(folder, num_shards, records_per_shard=RECORDS_PER_SHARD):
  """num_shards files of records_per_shard records -> (sorted paths,
  {input_ids row as a tuple: (shard, index in shard)})."""
  folder.mkdir()
  owner, paths = {}, []
  for shard in range(num_shards):
    rng = np.random.default_rng(shard)
    path = str(folder / f"part-{shard:05d}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
      for index in range(records_per_shard):
        example = fx.random_example(rng)
        ids = tuple(example.features.feature["input_ids"].int64_list.value)
        owner[ids] = (shard, index)
        writer.write(example.SerializeToString())
    paths.append(path)
  # Random ids of 8-16 pieces never coincide: the rows name their records.
  assert len(owner) == num_shards * records_per_shard
  return paths, owner


def lean(dataset):
  """The dataset with one thread and no autotuning: for speed only (64
  pipelines on a few cores); its elements and their order stay its own."""
  options = tf.data.Options()
  options.autotune.enabled = False
  options.threading.private_threadpool_size = 1
  return dataset.with_options(options)


def read_records(dataset, owner, num_records=None):
  """[(shard, index)] of the records a pipeline yields, in order."""
  dataset = lean(dataset)
  if num_records is not None:
    dataset = dataset.unbatch().take(num_records).batch(64)
  return [owner[tuple(row)] for batch in dataset.as_numpy_iterator()
          for row in batch["input_ids"].tolist()]


def pretraining_task(files, shuffle_buffer_size):
  return PretrainingTask(files, files, max_seq_length=fx.SEQ,
                         max_predictions_per_seq=fx.PRED, eval_batch_size=128,
                         max_eval_steps=0,
                         shuffle_buffer_size=shuffle_buffer_size)


@pytest.fixture(scope="module")
def shards_128(tmp_path_factory):
  return write_shards(tmp_path_factory.mktemp("records") / "train", 128)


def test_pretraining_train_epochs_shard_by_file(shards_128):
  """128 files over 64 pipelines: 2 files each, every record once per epoch."""
  files, owner = shards_128
  # A buffer of 1 keeps the file-level order (file shuffle, interleave,
  # repeat) visible; a real buffer only reorders within a pipeline.
  dataset_fn = pretraining_task(files, shuffle_buffer_size=1).build_inputs(
      "train", PipelineStrategy(64), global_batch_size=64 * 2)
  per_epoch = 2 * RECORDS_PER_SHARD
  streams = [read_records(dataset_fn(c), owner, 3 * per_epoch)
             for c in contexts(64)]
  shards_of = [sorted({shard for shard, _ in s}) for s in streams]
  assert shards_of == [[i, i + PIPELINES] for i in range(PIPELINES)]
  for epoch in range(3):
    read = [r for s in streams for r in s[epoch * per_epoch:
                                          (epoch + 1) * per_epoch]]
    assert sorted(read) == sorted(owner.values())


def test_pretraining_train_default_buffer_keeps_files_apart(shards_128):
  """The default 1000-record buffer mixes epochs, never pipelines' files
  (4 of the 64 pipelines: which files a pipeline reads is the test above)."""
  files, owner = shards_128
  dataset_fn = pretraining_task(files, shuffle_buffer_size=1000).build_inputs(
      "train", PipelineStrategy(64), global_batch_size=64 * 2)
  ids = [0, 1, 62, 63]
  streams = [read_records(dataset_fn(c), owner, 4 * 2 * RECORDS_PER_SHARD)
             for c in contexts(64, ids)]
  assert [sorted({shard for shard, _ in s}) for s in streams] == [
      [i, i + PIPELINES] for i in ids]
  # Shuffled: not the round robin of the buffer-of-1 order.
  assert streams[0][:4] != [(0, 0), (64, 0), (0, 1), (64, 1)]


def test_pretraining_eval_reads_every_record_once(shards_128):
  """8 replicas per pipeline (a 64-host job of 8 accelerators each)."""
  files, owner = shards_128
  dataset_fn = pretraining_task(files, shuffle_buffer_size=1000).build_inputs(
      "eval", PipelineStrategy(512), global_batch_size=512)
  streams = [read_records(dataset_fn(c), owner) for c in contexts(512)]
  # In file order, round robin over the pipeline's two files.
  assert streams[5] == [(5, 0), (69, 0), (5, 1), (69, 1), (5, 2), (69, 2)]
  read = [r for s in streams for r in s]
  assert len(read) == 128 * RECORDS_PER_SHARD
  assert sorted(read) == sorted(owner.values())


def test_pretraining_fewer_files_than_pipelines_split_records(tmp_path):
  """16 files for 64 pipelines: split by record over one file order for all
  (the task's seed), so each epoch of 64 records reaches every pipeline once."""
  files, owner = write_shards(tmp_path / "train", 16, records_per_shard=4)
  dataset_fn = pretraining_task(files, shuffle_buffer_size=1).build_inputs(
      "train", PipelineStrategy(64), global_batch_size=64)
  streams = [read_records(dataset_fn(c), owner, 2) for c in contexts(64)]
  for epoch in range(2):
    assert sorted(s[epoch] for s in streams) == sorted(owner.values())
  # Record by record, so the pipelines share files: 4 read each file.
  assert sorted(s[0][0] for s in streams) == sorted(list(range(16)) * 4)


def pipeline_examples(dataset_fn, num_replicas):
  """[pipeline][example ids in the order the pipeline yields them]."""
  return [np.concatenate([f["example"] for f, _ in
                          lean(dataset_fn(c)).as_numpy_iterator()])
          for c in contexts(num_replicas)]


@pytest.mark.parametrize("n,num_replicas", [(640, 64), (600, 128)])
def test_step_indexed_inputs_every_example_once_per_epoch(n, num_replicas):
  """Fine-tuning: pipeline i takes slice i of every global batch of one
  permutation per epoch (n = 600 puts epoch boundaries inside steps)."""
  global_batch, num_steps, seed = 128, 14, 7
  columns = {"example": tf.range(n, dtype=tf.int32)}
  labels = {"label": tf.zeros([n], tf.int32)}
  dataset_fn = step_indexed_inputs(
      columns, labels, PipelineStrategy(num_replicas), global_batch, 0,
      num_steps, seed)
  per_pipeline = global_batch // PIPELINES
  mine = pipeline_examples(dataset_fn, num_replicas)
  assert [len(m) for m in mine] == [num_steps * per_pipeline] * PIPELINES
  # Step s is pipeline 0's slice of it, then pipeline 1's, ...
  stream = np.concatenate([m.reshape([num_steps, per_pipeline]) for m in mine],
                          axis=1).reshape([-1])
  epochs = 2  # complete ones in 14 x 128 = 1792 examples (then a part)
  expected = np.concatenate([np.random.default_rng([seed, e]).permutation(n)
                             for e in range(epochs + 1)])
  np.testing.assert_array_equal(stream, expected[:num_steps * global_batch])
  for e in range(epochs):
    np.testing.assert_array_equal(np.sort(stream[e * n:(e + 1) * n]),
                                  np.arange(n))
