"""Parsing, sharding, bad shards, corrupt records (albert_tf.data's
pretraining_dataset, record_checks and corrupt_records)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data import corrupt_records
from albert_tf.data import pretraining_dataset
from albert_tf.data import record_checks
from tests.pretraining_fixtures import PRED, SEQ, write_records


def _flip_byte(path, offset):
  data = bytearray(open(path, "rb").read())
  data[offset] ^= 0xFF
  open(path, "wb").write(bytes(data))


def test_expand_input_files_comma_globs(tmp_path):
  a = write_records(tmp_path / "a-0.tfrecord", 1)
  b = write_records(tmp_path / "b-0.tfrecord", 1)
  files = record_checks.expand_input_files(f"{tmp_path}/a-*.tfrecord, {b},{a}")
  assert files == sorted([a, b])
  with pytest.raises(record_checks.InputFileError, match="nothing-.*"):
    record_checks.expand_input_files(f"{a},{tmp_path}/nothing-*.tfrecord")


def test_records_written_independently_of_albert_tf(tmp_path):
  """The original format, built by hand: int64 features -> int32 tensors."""
  ids = [2, 10, 4, 12, 3, 20, 4, 3] + [0] * 8
  feature = {
      "input_ids": ids, "input_mask": [1] * 8 + [0] * 8,
      "segment_ids": [0] * 5 + [1] * 3 + [0] * 8,
      "token_boundary": [1] * 8 + [0] * 8,
      "masked_lm_positions": [2, 6, 0, 0], "masked_lm_ids": [11, 21, 0, 0],
  }
  proto = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
           for k, v in feature.items()}
  proto["masked_lm_weights"] = tf.train.Feature(
      float_list=tf.train.FloatList(value=[1.0, 1.0, 0.0, 0.0]))
  proto["next_sentence_labels"] = tf.train.Feature(
      int64_list=tf.train.Int64List(value=[1]))
  path = str(tmp_path / "orig.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for _ in range(3):
      w.write(tf.train.Example(features=tf.train.Features(
          feature=proto)).SerializeToString())
  record_checks.check_shards([path], 16, 4)
  batch = next(iter(pretraining_dataset.make_dataset([path], 2, 16, 4, is_training=False)))
  assert batch["input_ids"].dtype == tf.int32
  assert batch["masked_lm_weights"].dtype == tf.float32
  np.testing.assert_array_equal(batch["input_ids"][1], ids)
  np.testing.assert_array_equal(batch["masked_lm_ids"][0], [11, 21, 0, 0])
  np.testing.assert_array_equal(batch["next_sentence_labels"], [[1], [1]])
  # 3 records, batch 2: eval keeps the partial batch (2 + 1) unless static
  # shapes are asked for (TPU); max_batches stops early.
  eval_sizes = [int(b["input_ids"].shape[0]) for b in pretraining_dataset.make_dataset(
      [path], 2, 16, 4, is_training=False)]
  assert eval_sizes == [2, 1]
  assert len(list(pretraining_dataset.make_dataset([path], 2, 16, 4, is_training=False,
                                  drop_remainder=True))) == 1
  assert len(list(pretraining_dataset.make_dataset([path], 1, 16, 4, is_training=False,
                                  max_batches=2))) == 2


def test_training_dataset_shapes_repeat_and_seed(tmp_path):
  files = [write_records(tmp_path / f"p{i}.tfrecord", 5, seed=i)
           for i in range(3)]
  make = lambda seed: pretraining_dataset.make_dataset(files, 4, SEQ, PRED, is_training=True,
                                      seed=seed, shuffle_buffer_size=8)
  batches = list(make(1).take(10))  # 40 examples > 15 records: repeats
  assert batches[0]["input_ids"].shape == (4, SEQ)
  assert batches[0]["masked_lm_positions"].shape == (4, PRED)
  assert batches[0]["next_sentence_labels"].shape == (4, 1)
  again = list(make(1).take(10))
  for x, y in zip(batches, again):
    np.testing.assert_array_equal(x["input_ids"], y["input_ids"])


def test_shards_by_file_per_input_pipeline(tmp_path):
  files = [write_records(tmp_path / f"p{i}.tfrecord", 4, seed=i)
           for i in range(4)]
  per_file = [next(iter(pretraining_dataset.make_dataset([f], 4, SEQ, PRED, is_training=False)))
              ["input_ids"].numpy() for f in files]
  ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
                                   num_replicas_in_sync=2)
  batches = list(pretraining_dataset.make_dataset(files, 4, SEQ, PRED, is_training=False,
                                 input_context=ctx))
  got = np.concatenate([b["input_ids"].numpy() for b in batches])
  # Worker 1 of 2 reads files 1 and 3, nothing else.
  expected = {tuple(r) for f in (1, 3) for r in per_file[f]}
  assert {tuple(r) for r in got} == expected and len(got) == 8


@pytest.mark.parametrize("num_files", [2, 4, 6])
def test_training_workers_together_read_the_one_pipeline_batch(tmp_path,
                                                               num_files):
  """Training, in order (no shuffle): worker batches = the default batch.

  Each worker has fewer files than cycle_length; the file list repeats, so
  a spare interleave slot would read a worker's file twice, side by side
  (every record appeared twice in a row before the fix).
  """
  files = [write_records(tmp_path / f"p{i}.tfrecord", 6, seed=i)
           for i in range(num_files)]
  global_batch, workers = 4 * num_files, 2
  make = lambda batch, ctx=None: iter(pretraining_dataset.make_dataset(
      files, batch, SEQ, PRED, is_training=True, shuffle_buffer_size=0,
      cycle_length=num_files, input_context=ctx))
  default = make(global_batch)
  pipelines = [make(global_batch // workers, tf.distribute.InputContext(
      num_input_pipelines=workers, input_pipeline_id=i,
      num_replicas_in_sync=workers)) for i in range(workers)]
  for _ in range(3):  # 3 batches: across the end of the first epoch
    want = next(default)["input_ids"].numpy()
    got = np.concatenate([next(p)["input_ids"].numpy() for p in pipelines])
    assert sorted(map(tuple, got)) == sorted(map(tuple, want))


def test_mismatched_shard_names_file_and_flag(tmp_path):
  good = write_records(tmp_path / "good.tfrecord", 2)
  long = write_records(tmp_path / "long.tfrecord", 2, seq=32)
  with pytest.raises(record_checks.InputFileError,
                     match=r"long\.tfrecord.*length 32.*--max_seq_length=16"):
    record_checks.check_shards([good, long], SEQ, PRED)
  preds = write_records(tmp_path / "preds.tfrecord", 2, pred=6)
  with pytest.raises(record_checks.InputFileError,
                     match=r"preds\.tfrecord.*max_predictions_per_seq=4"):
    record_checks.check_shards([good, preds], SEQ, PRED)
  # Equal flags: the message names the flag the feature's length comes from.
  with pytest.raises(record_checks.InputFileError, match=(
      rf"input_ids' has length {SEQ} but --max_seq_length={PRED}:")):
    record_checks.check_shards([good], PRED, PRED)
  with pytest.raises(record_checks.InputFileError, match=(
      rf"masked_lm_positions' has length {PRED} but "
      rf"--max_predictions_per_seq={SEQ}:")):
    record_checks.check_shards([good], SEQ, SEQ)
  two = tmp_path / "two_labels.tfrecord"
  example = tf.train.Example.FromString(next(iter(
      tf.data.TFRecordDataset(good).take(1).as_numpy_iterator())))
  example.features.feature[F.NEXT_SENTENCE_LABELS].int64_list.value.append(1)
  with tf.io.TFRecordWriter(str(two)) as w:
    w.write(example.SerializeToString())
  with pytest.raises(record_checks.InputFileError, match=(
      r"two_labels\.tfrecord: feature 'next_sentence_labels' has length 2, "
      r"not 1")):
    record_checks.check_shards([str(two)], SEQ, PRED)
  other = tmp_path / "other.tfrecord"
  with tf.io.TFRecordWriter(str(other)) as w:
    w.write(tf.train.Example().SerializeToString())
  with pytest.raises(record_checks.InputFileError, match="other.tfrecord.*missing"):
    record_checks.check_shards([str(other)], SEQ, PRED)


def test_corrupt_first_record_is_named(tmp_path):
  bad = write_records(tmp_path / "bad.tfrecord", 3)
  _flip_byte(bad, 20)
  with pytest.raises(record_checks.InputFileError, match=r"bad\.tfrecord.*unreadable"):
    record_checks.check_shards([bad], SEQ, PRED)


def test_corrupt_record_mid_file_fails_or_is_skipped(tmp_path):
  good = write_records(tmp_path / "good.tfrecord", 8, seed=1)
  bad = write_records(tmp_path / "bad.tfrecord", 8, seed=2)
  size = len(open(bad, "rb").read())
  _flip_byte(bad, size * 5 // 8 + 30)  # inside record 5 of 8
  record_checks.check_shards([good, bad], SEQ, PRED)  # first records are fine
  scan = {r.path: r for r in corrupt_records.scan_tfrecords([good, bad])}
  assert scan[good].error is None and scan[good].good_records == 8
  assert "corrupted record" in scan[bad].error
  assert scan[bad].good_records == 5
  assert "bad.tfrecord" in corrupt_records.describe_corrupt_files(scan.values())

  with pytest.raises(tf.errors.DataLossError):
    list(pretraining_dataset.make_dataset([good, bad], 1, SEQ, PRED, is_training=False))
  skipped = list(pretraining_dataset.make_dataset([good, bad], 1, SEQ, PRED, is_training=False,
                                 skip_corrupt_records=True))
  assert len(skipped) == 8 + 5


def _record_offsets(data):
  offsets, offset = [], 0
  while offset < len(data):
    offsets.append(offset)
    offset += 16 + int.from_bytes(data[offset:offset + 8], "little")
  return offsets


def test_globs_never_match_hidden_files(tmp_path):
  """Data prep's `.tmp-*` partial shards are not `*.tfrecord` (shell rule)."""
  a = write_records(tmp_path / "a.tfrecord", 1)
  temp = write_records(tmp_path / ".tmp-0123-a.tfrecord", 1)
  (tmp_path / ".staging").mkdir()
  write_records(tmp_path / ".staging" / "b.tfrecord", 1)
  assert record_checks.expand_input_files(f"{tmp_path}/*.tfrecord") == [a]
  assert record_checks.expand_input_files(f"{tmp_path}/*") == [a]
  with pytest.raises(record_checks.InputFileError, match="matched no file"):
    record_checks.expand_input_files(f"{tmp_path}/*/b.tfrecord")
  # Asked for by name, or by a pattern that starts with the dot: read.
  assert record_checks.expand_input_files(temp) == [temp]
  assert record_checks.expand_input_files(f"{tmp_path}/.tmp-*") == [temp]


def test_records_dirs_need_markers_unless_allowed(tmp_path, caplog):
  # No data prep file beside them: another tool's records, read with one
  # warning.
  path = write_records(tmp_path / "part-0.tfrecord", 2)
  assert record_checks.check_records_dirs([path], SEQ, PRED) == {}
  assert caplog.text.count("written elsewhere") == 1
  # Data prep's shard name without its markers: a killed run, refused.
  os.rename(path, tmp_path / "pretrain-00000-of-00001.tfrecord")
  path = str(tmp_path / "pretrain-00000-of-00001.tfrecord")
  with pytest.raises(record_checks.InputFileError,
                     match=r"no _SUCCESS and no manifest\.json \(.*beside "
                     r"data prep's pretrain-00000-of-00001\.tfrecord, .*"
                     r"killed.*--allow_incomplete_input"):
    record_checks.check_records_dirs([path], SEQ, PRED)
  (tmp_path / F.SUCCESS_FILE).write_bytes(b"")
  with pytest.raises(record_checks.InputFileError, match=r"no manifest\.json \("):
    record_checks.check_records_dirs([path], SEQ, PRED)
  assert record_checks.check_records_dirs([path], SEQ, PRED, allow_incomplete=True) == {}
  assert "--allow_incomplete_input" in caplog.text
  (tmp_path / F.MANIFEST_FILE).write_text("{not json")
  with pytest.raises(record_checks.InputFileError, match=r"manifest\.json: unreadable"):
    record_checks.check_records_dirs([path], SEQ, PRED)


def test_all_empty_files_are_an_error(tmp_path):
  empty = [str(tmp_path / f"e{i}.tfrecord") for i in range(2)]
  for path in empty:
    open(path, "wb").close()
  full = write_records(tmp_path / "full.tfrecord", 1)
  assert record_checks.check_shards(empty + [full], SEQ, PRED) == [full]
  record_checks.require_records(empty + [full], [full])
  with pytest.raises(record_checks.InputFileError,
                     match=r"no records at all in the 2 file\(s\) of "
                     r"--eval_input_file"):
    record_checks.require_records(empty, record_checks.check_shards(empty, SEQ, PRED),
                       "--eval_input_file")


@pytest.mark.parametrize("damage, records, skipped, unaccounted", [
    ("data", 10, 4, False),  # record 6's data: 6, 7, 8, 9 are skipped
    ("header", 7, 1, True),  # record 6's length: the rest cannot be counted
    ("truncated", 7, 1, False),  # the file ends inside record 6
])
def test_count_corrupt_records_is_what_skipping_drops(tmp_path, damage,
                                                       records, skipped,
                                                       unaccounted):
  path = write_records(tmp_path / "x.tfrecord", 10)
  data = bytearray(open(path, "rb").read())
  start = _record_offsets(bytes(data))[6]
  if damage == "data":
    data[start + 14] ^= 0xFF
  elif damage == "header":
    data[start + 2] ^= 0xFF
  else:
    data = data[:start + 20]
  open(path, "wb").write(bytes(data))
  [count] = corrupt_records.count_corrupt_records([path], SEQ, PRED)
  assert (count.records, count.skipped, count.unparsable) == (records,
                                                              skipped, 0)
  assert bool(count.unaccounted_bytes) == unaccounted
  kept = pretraining_dataset.make_dataset([path], 1, SEQ, PRED, is_training=False,
                         skip_corrupt_records=True)
  assert sum(1 for _ in kept) == count.records - count.skipped == 6
  report = corrupt_records.check_corrupt_fraction([count], 1.0, [path])
  assert report["files"][path]["skipped"] == skipped
  with pytest.raises(record_checks.InputFileError, match="--max_corrupt_fraction=0.1"):
    corrupt_records.check_corrupt_fraction([count], 0.1)
