"""Checks of pretraining TFRecords before the first step (data prep's markers,
the first record of every shard, corrupt records).

Checks before the first step (`run_pretraining` runs them in this order):
  * `expand_input_files` never matches hidden files (".tmp-*" shards that a
    data prep run is still writing, or left when killed), as a shell glob.
  * `check_records_dirs`: each directory of input files must hold data
    prep's `_SUCCESS` and `manifest.json` (else the run was killed, failed or
    is still running), every file must be listed in the manifest with its
    size, and the manifest's max_seq_length, max_predictions_per_seq and
    tokenizer sha256 must match the run. `allow_incomplete` (the
    --allow_incomplete_input flag) lets directories without them through,
    such as records written by other tools (google-research/albert's
    create_pretraining_data.py), with a warning.
  * `check_shards` reads the first record of every file (cheap) and names
    the file whose record is unreadable or whose lengths disagree with the
    flags; `require_records` turns "no file holds a record" into an error
    (training on it would wait forever for a first batch).
  * `with_input_timeout` runs those checks and `first_batch` so that a read
    that blocks (a named pipe, a hung mount) is an error naming the file
    after --input_timeout_secs instead of a hang; it watches nothing after
    the first batch.

Corrupt data. A record that goes bad later in a file surfaces while training
as a `tf.errors.DataLossError` without a file name; `scan_tfrecords` then
finds the file and offset (`run_pretraining` calls it for you). With
`skip_corrupt_records=True` the pipeline skips bad records instead: a
TFRecord reader cannot re-synchronise after a damaged record, so the rest of
that file is skipped; records that do not parse as pretraining examples are
skipped one by one. `count_corrupt_records` counts exactly those, per file,
before training (two passes over the files, and a walk over the record
headers after a damaged record), and `check_corrupt_fraction` stops a run
that would skip more than a given share of them.
"""


import dataclasses
import functools
import glob
import json
import os
import re
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import tensorflow as tf

from albert_tf import features as F
from albert_tf.data.pretraining_dataset import InputFileError, decode_record, make_dataset
from albert_tf.data.tokenization import file_sha256

# What data prep (data_prep.create_pretraining_data) writes next to its
# shards, last: the same names as there.
SUCCESS_FILE = "_SUCCESS"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "albert_tf.pretraining_records"
SKIPPED_RECORDS_FILE = "skipped_records.json"
_INCOMPLETE_HINT = (
    "pass --allow_incomplete_input to read the files as they are (needed "
    "for records written by other tools, e.g. google-research/albert's "
    "create_pretraining_data.py or --output_file, which write no _SUCCESS "
    "or manifest)")



def _hidden_match(pattern: str, path: str) -> bool:
  """A path component that starts with "." where the pattern's is a glob.

  Shell rule: `*` does not match a leading dot. TF's glob does, so
  `dir/*.tfrecord` would also match data prep's `.tmp-...` shards.
  """
  pattern_parts = pattern.replace("\\", "/").split("/")
  path_parts = path.replace("\\", "/").split("/")
  if len(pattern_parts) != len(path_parts):
    return os.path.basename(path).startswith(".")
  return any(part.startswith(".") and glob.has_magic(p)
             and not p.startswith(".")
             for p, part in zip(pattern_parts, path_parts))


def expand_input_files(input_file: str) -> List[str]:
  """Comma-separated globs -> sorted, de-duplicated list of existing files.

  A glob does not match hidden files or directories (as in a shell: only a
  pattern component that starts with "." does), so temporary shards such as
  data prep's `.tmp-*` are never read. Raises InputFileError naming every
  pattern that matched nothing.
  """
  patterns = [p.strip() for p in input_file.split(",") if p.strip()]
  if not patterns:
    raise InputFileError("No input files given (empty --input_file)")
  files, empty = [], []
  for pattern in patterns:
    matched = sorted(m for m in tf.io.gfile.glob(pattern)
                     if not _hidden_match(pattern, m)) if glob.has_magic(
                         pattern) else (
                             [pattern] if tf.io.gfile.exists(pattern) else [])
    if not matched:
      empty.append(pattern)
    files.extend(matched)
  if empty:
    raise InputFileError(f"Input pattern(s) matched no file: {empty}"
                         + "".join(_unfinished_note(p) for p in empty))
  return sorted(set(files))


def _unfinished_note(pattern: str) -> str:
  """Why a pattern in a folder without _SUCCESS may match nothing.

  Data prep creates its output_dir first and renames each shard into place
  when it is complete: a run killed early leaves a folder with no shard, or
  only hidden `.tmp-*` ones, and no _SUCCESS.
  """
  directory = os.path.dirname(pattern)
  if (not directory or glob.has_magic(directory)
      or not tf.io.gfile.isdir(directory)
      or tf.io.gfile.exists(os.path.join(directory, SUCCESS_FILE))):
    return ""
  return (f"; {directory} has no {SUCCESS_FILE} either: if data prep writes "
          "there, its run was killed, failed or is still running (rerun it "
          "with --overwrite)")


# ------------------------------------------------------ data prep's markers
def _read_manifest(path: str) -> dict:
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      manifest = json.loads(f.read().decode("utf-8"))
  except (ValueError, tf.errors.OpError) as e:
    raise InputFileError(
        f"{path}: unreadable manifest ({e}); regenerate the records, or "
        f"{_INCOMPLETE_HINT}") from None
  if not isinstance(manifest, dict) or manifest.get(
      "format") != MANIFEST_FORMAT:
    raise InputFileError(
        f"{path}: not a data prep manifest (no \"format\": "
        f"\"{MANIFEST_FORMAT}\"); regenerate the records, or "
        f"{_INCOMPLETE_HINT}")
  return manifest


def check_records_dirs(files: Sequence[str], max_seq_length: int,
                       max_predictions_per_seq: int,
                       spm_model_file: Optional[str] = None,
                       allow_incomplete: bool = False,
                       flag: str = "--input_file") -> Dict[str, dict]:
  """Checks each directory of `files` against data prep's markers.

  Each directory must hold `_SUCCESS` and `manifest.json` (data prep writes
  them last: without them the run was killed, failed or is still writing),
  list every file with its size, and have been written with this
  max_seq_length and max_predictions_per_seq, and, when spm_model_file is
  given, with the SentencePiece model of that sha256.

  Args:
    files: the input files (expand_input_files).
    allow_incomplete: missing markers, unlisted files and size differences
      are warnings instead of errors (--allow_incomplete_input). Length and
      tokenizer mismatches stay errors.
    flag: the flag that named the files, for the messages.
  Returns:
    {directory: manifest dict} of the directories that have one.
  Raises:
    InputFileError: one line naming the directory or file, what is wrong
      and the flag that changes it.
  """
  by_dir: Dict[str, List[str]] = {}
  for path in files:
    by_dir.setdefault(os.path.dirname(path) or ".", []).append(path)
  manifests = {}
  spm_sha256 = None
  for directory, paths in sorted(by_dir.items()):
    missing = [name for name in (SUCCESS_FILE, MANIFEST_FILE)
               if not tf.io.gfile.exists(os.path.join(directory, name))]
    if missing:
      message = (
          f"{directory}: no {' and no '.join(missing)} (the files data prep "
          f"writes last), so its run there was killed, failed or is still "
          f"writing, and the shards may be partial or missing ({flag} "
          f"matched {len(paths)} file(s) there)")
      if not allow_incomplete:
        raise InputFileError(f"{message}. Rerun data prep with --overwrite, "
                             f"or {_INCOMPLETE_HINT}")
      logging.warning("--allow_incomplete_input: reading them as they are: "
                      "%s", message)
      if MANIFEST_FILE in missing:
        continue
    manifest_path = os.path.join(directory, MANIFEST_FILE)
    manifest = _read_manifest(manifest_path)
    manifests[directory] = manifest
    written = manifest.get("flags", {})
    for name, value in (("max_seq_length", max_seq_length),
                        ("max_predictions_per_seq", max_predictions_per_seq)):
      if written.get(name) != value:
        raise InputFileError(
            f"{manifest_path}: the records were written with "
            f"--{name}={written.get(name)} but this run has --{name}={value}; "
            f"pass --{name}={written.get(name)}, or regenerate the records "
            f"with --{name}={value}")
    tokenizer = manifest.get("tokenizer", {})
    if spm_model_file:
      spm_sha256 = spm_sha256 or file_sha256(spm_model_file)
      if tokenizer.get("sha256") != spm_sha256:
        raise InputFileError(
            f"{manifest_path}: the records were tokenized with "
            f"{tokenizer.get('file')} (sha256 "
            f"{str(tokenizer.get('sha256'))[:12]}...), not with "
            f"--spm_model_file={spm_model_file} (sha256 {spm_sha256[:12]}...):"
            " their token ids mean other pieces; pass the model data prep "
            "used, or regenerate the records with this one")
    shards = manifest.get("shards", {})
    for path in paths:
      name = os.path.basename(path)
      problem = None
      if name not in shards:
        problem = (f"{path} is not listed in {manifest_path} (a leftover of "
                   "another run, or a file data prep did not write)")
      else:
        size = tf.io.gfile.stat(path).length
        if size != shards[name].get("bytes"):
          problem = (f"{path} has {size} bytes but {manifest_path} says "
                     f"{shards[name].get('bytes')}: it changed after data "
                     "prep (truncated or overwritten?)")
      if problem and not allow_incomplete:
        raise InputFileError(f"{problem}; regenerate the records, fix {flag},"
                             " or pass --allow_incomplete_input to read it "
                             "as it is")
      if problem:
        logging.warning("--allow_incomplete_input: %s", problem)
  return manifests


# ------------------------------------------------------------------ checks
def _reader_message(error: tf.errors.OpError) -> str:
  """'corrupted record at 123' out of TF's decorated error text."""
  message = error.message.strip().splitlines()[-1]
  message = re.sub(r"\{\{.*?\}\}\s*", "", message)
  message = re.sub(r"' failed with ", ": ", message)  # "truncated record"
  return re.sub(r"\s*\[Op:.*$", "", message).strip()


def _feature_length(feature: tf.train.Feature) -> int:
  kind = feature.WhichOneof("kind")
  return len(getattr(feature, kind).value) if kind else 0


def check_shards(files: Sequence[str], max_seq_length: int,
                 max_predictions_per_seq: int,
                 skip_corrupt_records: bool = False,
                 on_file: Optional[Callable[[str], None]] = None
                 ) -> List[str]:
  """Reads the first record of each file and checks it against the flags.

  Raises InputFileError naming the file when the record is unreadable, is
  not a `tf.train.Example`, lacks a pretraining feature, or has lengths
  other than max_seq_length / max_predictions_per_seq. Empty files pass.
  With skip_corrupt_records, an unreadable or unparsable first record
  passes too (count_corrupt_records counts it); wrong lengths do not.
  on_file(path) is called before each file is opened (with_input_timeout's
  progress: a read that blocks is then named).

  Returns:
    The files that hold at least one record (see require_records).
  """
  expected = {name: max_seq_length for name in F.SEQUENCE_FEATURES}
  expected.update({name: max_predictions_per_seq
                   for name in F.PREDICTION_FEATURES})
  expected[F.NEXT_SENTENCE_LABELS] = 1
  flag_of = {max_seq_length: "--max_seq_length",
             max_predictions_per_seq: "--max_predictions_per_seq"}
  non_empty = []
  for path in files:
    if on_file:
      on_file(path)
    try:
      records = list(tf.data.TFRecordDataset(path).take(1).as_numpy_iterator())
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      if skip_corrupt_records:
        non_empty.append(path)
        continue
      raise InputFileError(
          f"{path}: first record is unreadable (corrupt or not a TFRecord "
          f"file): {_reader_message(e)}") from None
    if not records:
      continue
    non_empty.append(path)
    try:
      example = tf.train.Example.FromString(records[0])
    except Exception as e:  # protobuf DecodeError
      if skip_corrupt_records:
        continue
      raise InputFileError(
          f"{path}: first record is not a tf.train.Example ({e})") from None
    feature_map = example.features.feature
    missing = [name for name in expected if name not in feature_map]
    if missing and skip_corrupt_records:
      continue
    if missing:
      raise InputFileError(
          f"{path}: not a pretraining record: missing feature(s) {missing}")
    for name, length in expected.items():
      found = _feature_length(feature_map[name])
      if found != length:
        what = ("max_seq_length" if name in F.SEQUENCE_FEATURES else
                "max_predictions_per_seq")
        raise InputFileError(
            f"{path}: feature '{name}' has length {found} but "
            f"{flag_of.get(length, what)}={length}: the shard was written "
            f"with {what}={found}; pass --{what}={found} or regenerate it")
  return non_empty


def require_records(files: Sequence[str], non_empty: Sequence[str],
                    flag: str = "--input_file") -> None:
  """InputFileError when none of `files` is among the `non_empty` ones.

  Training on files without a single record would wait for its first batch
  forever (the input repeats: an endless loop over empty files).
  """
  if not files or set(files) & set(non_empty):
    return
  shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
  raise InputFileError(
      f"no records at all in the {len(files)} file(s) of {flag} ({shown}): "
      "every shard is empty, and training would wait forever for a first "
      "batch. Data prep writes empty shards when it makes no instance (an "
      "empty, unreadable or one-sentence-per-document corpus): see its "
      f"summary.json, or fix {flag}")


class InputTimeoutError(InputFileError):
  """An input read made no progress within --input_timeout_secs."""


def with_input_timeout(fn: Callable, timeout_secs: float,
                       flag: str = "--input_timeout_secs"):
  """fn(progress) in a helper thread; an error if it stalls, not a hang.

  fn calls progress(what) before each read that may block (a file's first
  record, the first training batch); InputTimeoutError names `what` when
  the next call or fn's return does not come within timeout_secs of it. A
  blocked read (a named pipe without a writer, a hung network mount)
  cannot be interrupted from Python: the helper thread (a daemon) is left
  behind and the caller gets the error. Nothing is watched after fn
  returns, so a slow but working run is never stopped later.

  Returns fn's value; fn's exception is re-raised. timeout_secs <= 0 calls
  fn directly.
  """
  if timeout_secs <= 0:
    return fn(lambda what: None)
  state = {"what": "the input files", "since": time.monotonic()}
  outcome = {}

  def progress(what):
    state["what"], state["since"] = what, time.monotonic()

  def target():
    try:
      outcome["value"] = fn(progress)
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e
  thread = threading.Thread(target=target, name="input-check", daemon=True)
  thread.start()
  while thread.is_alive():
    waited = time.monotonic() - state["since"]
    if waited >= timeout_secs:
      raise InputTimeoutError(
          f"no record from {state['what']} within {flag}={timeout_secs:g} "
          "seconds: the read made no progress (a named pipe without a "
          "writer, a hung network mount, a file still being written, or a "
          f"very slow one?); fix the input, or raise {flag} (0: no limit)")
    thread.join(min(timeout_secs - waited, 0.2))
  if "error" in outcome:
    raise outcome["error"]
  return outcome.get("value")


def first_batch(files: Sequence[str], batch_size: int, **kwargs) -> None:
  """Reads one batch through make_dataset, as training will read.

  Not training's exact first batch (that one is per replica, seeded with
  the start step): only whether a batch comes at all is checked here
  (with_input_timeout), for about shuffle_buffer_size + batch_size records.
  A bad record in it is left to training, whose error names the file
  (PretrainingTask.guard_input_errors).
  """
  try:
    next(iter(make_dataset(files, batch_size, is_training=True, **kwargs)))
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
    pass


@dataclasses.dataclass
class ScanResult:
  """What `scan_tfrecords` found in one file."""
  path: str
  good_records: int
  error: Optional[str] = None  # the reader's message, e.g. "corrupted record at 123"


def scan_tfrecords(files: Sequence[str]) -> List[ScanResult]:
  """Reads every file once (CRC checks in C++); one ScanResult per file."""
  results = []
  for path in files:
    dataset = tf.data.TFRecordDataset(path)
    count = lambda ds: int(ds.reduce(tf.constant(0, tf.int64),
                                     lambda n, _: n + 1))
    try:
      results.append(ScanResult(path, count(dataset)))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      results.append(ScanResult(path, count(dataset.ignore_errors()),
                                _reader_message(e)))
  return results


def describe_corrupt_files(results: Sequence[ScanResult]) -> str:
  bad = [r for r in results if r.error]
  return "; ".join(f"{r.path}: {r.error} (after {r.good_records} good records)"
                   for r in bad)


# ----------------------------------------------- --skip_corrupt_records
@functools.lru_cache(maxsize=1)
def _crc32c():
  import crcmod.predefined  # pylint: disable=g-import-not-at-top
  return crcmod.predefined.mkCrcFun("crc-32c")


def _masked_crc32c(data: bytes) -> int:
  """TFRecord's checksum: CRC-32C (crcmod, which Beam's tfrecord extra
  installs), rotated and offset."""
  crc = _crc32c()(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


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
      if _masked_crc32c(header[:8]) != length_crc:
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
  """Per file, exactly the records that skip_corrupt_records would skip.

  Those are the records that do not parse with this run's feature spec
  (decode_record: not a tf.train.Example, a feature missing, other lengths)
  and every record from the first damaged one to the end of the file (a
  TFRecord reader cannot re-synchronise; they are counted by their
  headers). One pass reads the records (scan_tfrecords), one parses them.
  on_file(path) is called before each file (see check_shards).
  """
  counts = []
  count = lambda ds: int(ds.reduce(tf.constant(0, tf.int64),
                                   lambda n, _: n + 1))
  for path in files:
    if on_file:
      on_file(path)
    scan, = scan_tfrecords([path])
    parsed = tf.data.TFRecordDataset(scan.path).take(scan.good_records).map(
        lambda s: decode_record(s, max_seq_length, max_predictions_per_seq)
    ).ignore_errors()
    parsable = count(parsed)
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
      "files": {c.path: {"records": c.records, "skipped": c.skipped,
                         "unparsable": c.unparsable,
                         "unreadable": c.unreadable, "error": c.error,
                         "unaccounted_bytes": c.unaccounted_bytes}
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


