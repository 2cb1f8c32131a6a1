"""Corrupt pretraining records: find them, count them, bound the share skipped.

A record that goes bad later in a file surfaces while training as a
`tf.errors.DataLossError` without a file name; `scan_tfrecords` finds the
file and offset. `--skip_corrupt_records` skips what `count_corrupt_records`
counts before training (a TFRecord reader cannot re-synchronise, so the
rest of a file after a damaged record goes too), and
`check_corrupt_fraction` stops a run that would skip more than a share.
"""

import dataclasses
import functools
import json
import os
import re
import struct
from typing import Callable, List, Optional, Sequence

from absl import logging
import tensorflow as tf

from albert_tf.data.input_timeout import InputFileError
from albert_tf.data.pretraining_dataset import decode_record
from albert_tf.core.features import SKIPPED_RECORDS_FILE


def reader_message(error: tf.errors.OpError) -> str:
  """'corrupted record at 123' out of TF's decorated error text."""
  message = error.message.strip().splitlines()[-1]
  message = re.sub(r"\{\{.*?\}\}\s*", "", message)
  message = re.sub(r"' failed with ", ": ", message)  # "truncated record"
  return re.sub(r"\s*\[Op:.*$", "", message).strip()


@dataclasses.dataclass
class ScanResult:
  """What `scan_tfrecords` found in one file."""
  path: str
  good_records: int
  error: Optional[str] = None  # the reader's message, e.g. "corrupted record at 123"


def _count(dataset: tf.data.Dataset) -> int:
  return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def scan_tfrecords(files: Sequence[str]) -> List[ScanResult]:
  """Reads every file once (CRC checks in C++); one ScanResult per file."""
  results = []
  for path in files:
    dataset = tf.data.TFRecordDataset(path)
    try:
      results.append(ScanResult(path, _count(dataset)))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      results.append(ScanResult(path, _count(dataset.ignore_errors()),
                                reader_message(e)))
  return results


def describe_corrupt_files(results: Sequence[ScanResult]) -> str:
  bad = [r for r in results if r.error]
  return "; ".join(f"{r.path}: {r.error} (after {r.good_records} good records)"
                   for r in bad)


# ----------------------------------------------- --skip_corrupt_records
@functools.lru_cache(maxsize=1)
def _crc32c():
  # crcmod: Beam's tfrecord extra installs it.
  import crcmod.predefined  # pylint: disable=g-import-not-at-top
  return crcmod.predefined.mkCrcFun("crc-32c")


def _count_frames(path: str):
  """(records, unaccounted bytes) of a TFRecord file, from its headers.

  Walks the frames by their length headers (each has its own checksum), so
  the records after a damaged one are counted although a reader stops
  there; a record cut short by the end of the file counts as one. A damaged
  header ends the walk: the bytes from it on are returned as unaccounted.
  """
  records, offset = 0, 0
  with tf.io.gfile.GFile(path, "rb") as f:
    size = f.size()
    while offset < size:
      f.seek(offset)
      header = f.read(12)
      if len(header) < 12:
        return records + 1, 0
      length, length_crc = struct.unpack("<QI", header)
      crc = _crc32c()(header[:8])  # TFRecord's: rotated and offset
      if (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF != length_crc:
        return records, size - offset
      records += 1
      offset += 12 + length + 4
  return records, 0


@dataclasses.dataclass
class CorruptCount:
  """The records `make_dataset(skip_corrupt_records=True)` skips in a file."""
  path: str
  records: int  # all records in the file (a lower bound if unaccounted_bytes)
  unparsable: int  # readable, but not a pretraining example of these lengths
  unreadable: int  # from the first damaged record to the end of the file
  error: Optional[str] = None  # the reader's message at the damaged record
  unaccounted_bytes: int = 0  # after a damaged record header: not countable

  @property
  def skipped(self) -> int:
    return self.unparsable + self.unreadable

  def describe(self) -> str:
    text = f"{self.path}: {self.skipped} of {self.records} records skipped"
    parts = []
    if self.unparsable:
      parts.append(f"{self.unparsable} unparsable")
    if self.unreadable:
      parts.append(f"{self.unreadable} unreadable from the first damaged one "
                   f"on ({self.error})")
    if self.unaccounted_bytes:
      parts.append(f"and {self.unaccounted_bytes} bytes after a damaged "
                   "record header, not countable")
    return text + (f" ({', '.join(parts)})" if parts else "")


def count_corrupt_records(files: Sequence[str], max_seq_length: int,
                          max_predictions_per_seq: int,
                          on_file: Optional[Callable[[str], None]] = None
                          ) -> List[CorruptCount]:
  """Per file, exactly the records that skip_corrupt_records would skip:
  those that do not parse with this run's feature spec (`decode_record`),
  and every record from the first damaged one to the end of the file
  (counted by their headers). on_file(path) is called before each file
  (see check_shards).
  """
  counts = []
  for path in files:
    if on_file:
      on_file(path)
    scan, = scan_tfrecords([path])
    parsed = tf.data.TFRecordDataset(scan.path).take(scan.good_records).map(
        lambda s: decode_record(s, max_seq_length, max_predictions_per_seq)
    ).ignore_errors()
    parsable = _count(parsed)
    unreadable = unaccounted = 0
    if scan.error:
      frames, unaccounted = _count_frames(scan.path)
      unreadable = max(frames - scan.good_records, 1)
    counts.append(CorruptCount(
        scan.path, scan.good_records + unreadable,
        scan.good_records - parsable, unreadable, scan.error, unaccounted))
  return counts


def check_corrupt_fraction(counts: Sequence[CorruptCount],
                           max_corrupt_fraction: float,
                           train_files: Sequence[str] = ()) -> dict:
  """Logs the skipped records per file; InputFileError past the fraction.

  Returns the skipped_records.json dict (write_skipped_records). Also an
  error: no record of train_files left to train on.
  """
  total = sum(c.records for c in counts)
  skipped = sum(c.skipped for c in counts)
  fraction = skipped / total if total else 0.0
  bad = sorted((c for c in counts if c.skipped or c.unaccounted_bytes),
               key=lambda c: -c.skipped)
  for c in bad:
    logging.warning("--skip_corrupt_records: %s", c.describe())
  logging.info("--skip_corrupt_records: %d of %d records (%.4f%%) in %d "
               "file(s) will be skipped", skipped, total, 100 * fraction,
               len(counts))
  if fraction > max_corrupt_fraction:
    shown = "; ".join(c.describe() for c in bad[:3]) + (
        f"; and {len(bad) - 3} more file(s)" if len(bad) > 3 else "")
    raise InputFileError(
        f"--skip_corrupt_records: {skipped} of {total} records "
        f"({100 * fraction:.4f}%) would be skipped, more than "
        f"--max_corrupt_fraction={max_corrupt_fraction}: {shown}. Fix or "
        "remove the file(s), or raise --max_corrupt_fraction")
  usable = {c.path: c.records - c.skipped for c in counts}
  if train_files and not sum(usable.get(f, 0) for f in set(train_files)):
    raise InputFileError(
        f"--skip_corrupt_records: no usable record in the "
        f"{len(set(train_files))} training file(s): every one would be "
        "skipped, and training would wait forever for a first batch")
  return {
      "records": total, "skipped": skipped, "fraction": fraction,
      "max_corrupt_fraction": max_corrupt_fraction,
      "files": {c.path: {k: v for k, v in dataclasses.asdict(c).items()
                         if k != "path"} | {"skipped": c.skipped}
                for c in counts},
  }


def write_skipped_records(output_dir: str, report: dict) -> str:
  """Writes the report to output_dir/skipped_records.json; returns the path."""
  path = os.path.join(output_dir, SKIPPED_RECORDS_FILE)
  temp = path + ".tmp"
  with tf.io.gfile.GFile(temp, "w") as f:
    f.write(json.dumps(report, indent=2, sort_keys=True))
  tf.io.gfile.rename(temp, path, overwrite=True)
  return path
