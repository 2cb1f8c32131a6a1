"""Checks of pretraining TFRecords before the first step, in the order
`run_pretraining` runs them: `expand_input_files` (never hidden `.tmp-*`
shards), `check_records_dirs` (data prep's `_SUCCESS` and manifest against
the flags), `check_shards` (the first record of every file),
`require_records` and `first_batch`, all under
`albert_tf.data.input_timeout.with_input_timeout`, so a read that blocks
is an error naming the file, not a hang.

Records that go bad later in a file (`--skip_corrupt_records`) are
`albert_tf.data.corrupt_records`.
"""

import fnmatch
import glob
import json
import os
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data.corrupt_records import reader_message
from albert_tf.data.input_timeout import InputFileError
from albert_tf.data.pretraining_dataset import make_dataset
from albert_tf.data.tokenization import file_sha256
from albert_tf.core.features import (MANIFEST_FILE, MANIFEST_FORMAT, SHARD_GLOB,
                                SUCCESS_FILE, SUMMARY_FILE, TEMP_PREFIX)

_INCOMPLETE_HINT = "pass --allow_incomplete_input to read the files as they are"


def _first3(names: Sequence[str]) -> str:
  return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _hidden_match(pattern: str, path: str) -> bool:
  """A path component that starts with "." where the pattern's is a glob
  (TF's glob matches a leading dot, a shell's does not)."""
  pattern_parts = pattern.replace("\\", "/").split("/")
  path_parts = path.replace("\\", "/").split("/")
  if len(pattern_parts) != len(path_parts):
    return os.path.basename(path).startswith(".")
  return any(part.startswith(".") and glob.has_magic(p)
             and not p.startswith(".")
             for p, part in zip(pattern_parts, path_parts))


def expand_input_files(input_file: str) -> List[str]:
  """Comma-separated globs -> sorted, de-duplicated list of existing files.

  As in a shell, a glob matches no hidden file or directory, so data prep's
  `.tmp-*` shards are never read. Raises InputFileError naming every
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
  """Why a pattern in a folder without _SUCCESS may match nothing: data
  prep renames each shard into place when complete, so a run killed early
  leaves no shard, or only hidden `.tmp-*` ones."""
  directory = os.path.dirname(pattern)
  if (not directory or glob.has_magic(directory)
      or not tf.io.gfile.isdir(directory)
      or tf.io.gfile.exists(os.path.join(directory, SUCCESS_FILE))):
    return ""
  return (f"; {directory} has no {SUCCESS_FILE} either: if data prep writes "
          "there, its run was killed, failed or is still running (rerun it "
          "with --overwrite)")


# ------------------------------------------------------ data prep's markers
def check_records_dirs(files: Sequence[str], max_seq_length: int,
                       max_predictions_per_seq: int,
                       spm_model_file: Optional[str] = None,
                       allow_incomplete: bool = False,
                       flag: str = "--input_file") -> Dict[str, dict]:
  """Checks each directory of `files` against data prep's markers.

  A directory with no data prep file (its markers, summary.json, shards
  named as it names them, its `.tmp-*` files) holds records
  written elsewhere (google-research/albert's create_pretraining_data.py,
  data prep's --output_file): read, with one warning for all of them. Any
  other must hold `_SUCCESS` and `manifest.json` (written last: without
  them the run was killed, failed or is still writing), list every file
  with its size, and match max_seq_length, max_predictions_per_seq and,
  when given, spm_model_file's sha256.

  allow_incomplete (--allow_incomplete_input): missing markers, unlisted
  files and size differences are warnings; length and tokenizer mismatches
  stay errors. flag: the flag that named `files`, for the messages.
  Returns {directory: manifest} of those that have one; raises
  InputFileError naming the directory or file and the flag that changes it.
  """
  by_dir: Dict[str, List[str]] = {}
  for path in files:
    by_dir.setdefault(os.path.dirname(path) or ".", []).append(path)
  manifests = {}
  spm_sha256 = None
  elsewhere = []  # (directory, files) of records without data prep files
  for directory, paths in sorted(by_dir.items()):
    own = sorted(name for name in tf.io.gfile.listdir(directory)
                 if name.rstrip("/") in (SUCCESS_FILE, MANIFEST_FILE,
                                         SUMMARY_FILE)
                 or name.startswith(TEMP_PREFIX)
                 or fnmatch.fnmatchcase(name, SHARD_GLOB))
    if not own:
      elsewhere.append((directory, len(paths)))
      continue
    missing = [name for name in (SUCCESS_FILE, MANIFEST_FILE)
               if name not in own]
    if missing:
      message = (
          f"{directory}: no {' and no '.join(missing)} (the files data prep "
          f"writes last) beside data prep's {_first3(own)}, so its run "
          f"there was killed, failed or is still writing, and the shards may "
          f"be partial or missing ({flag} matched {len(paths)} file(s) "
          "there)")
      if not allow_incomplete:
        raise InputFileError(f"{message}. Rerun data prep with --overwrite, "
                             f"or {_INCOMPLETE_HINT}")
      logging.warning("--allow_incomplete_input: reading them as they are: "
                      "%s", message)
      if MANIFEST_FILE in missing:
        continue
    manifest_path = os.path.join(directory, MANIFEST_FILE)
    try:
      with tf.io.gfile.GFile(manifest_path, "rb") as f:
        manifest = json.loads(f.read().decode("utf-8"))
    except (ValueError, tf.errors.OpError) as e:
      raise InputFileError(
          f"{manifest_path}: unreadable manifest ({e}); regenerate the "
          f"records, or {_INCOMPLETE_HINT}") from None
    if not isinstance(manifest, dict) or manifest.get(
        "format") != MANIFEST_FORMAT:
      raise InputFileError(
          f"{manifest_path}: not a data prep manifest (no \"format\": "
          f"\"{MANIFEST_FORMAT}\"); regenerate the records, or "
          f"{_INCOMPLETE_HINT}")
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
  if elsewhere:
    logging.warning(
        "%s: %d file(s) of %s with no data prep file beside them (no %s, "
        "%s, %s or %s shard): read as records written elsewhere (e.g. "
        "google-research/albert's create_pretraining_data.py, or data "
        "prep's --output_file); only their first records' lengths are "
        "checked, not their tokenizer", _first3([d for d, _ in elsewhere]),
        sum(n for _, n in elsewhere), flag, SUCCESS_FILE, MANIFEST_FILE,
        SUMMARY_FILE, SHARD_GLOB)
  return manifests


# ------------------------------------------------------------------ checks
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
  progress: a read that blocks is then named). Returns the files that hold
  a record (for require_records).
  """
  expected = {name: max_seq_length for name in F.SEQUENCE_FEATURES}
  expected.update({name: max_predictions_per_seq
                   for name in F.PREDICTION_FEATURES})
  expected[F.NEXT_SENTENCE_LABELS] = 1
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
          f"file): {reader_message(e)}") from None
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
      kind = feature_map[name].WhichOneof("kind")
      found = len(getattr(feature_map[name], kind).value) if kind else 0
      if found != length and name == F.NEXT_SENTENCE_LABELS:
        raise InputFileError(
            f"{path}: feature '{name}' has length {found}, not 1 (one "
            "sentence-order label per example): not a pretraining record")
      if found != length:
        what = ("max_seq_length" if name in F.SEQUENCE_FEATURES else
                "max_predictions_per_seq")
        raise InputFileError(
            f"{path}: feature '{name}' has length {found} but "
            f"--{what}={length}: the shard was written with {what}={found}; "
            f"pass --{what}={found} or regenerate it")
  return non_empty


def require_records(files: Sequence[str], non_empty: Sequence[str],
                    flag: str = "--input_file") -> None:
  """InputFileError when none of `files` is among the `non_empty` ones
  (training, whose input repeats, would wait forever for a first batch)."""
  if not files or set(files) & set(non_empty):
    return
  raise InputFileError(
      f"no records at all in the {len(files)} file(s) of {flag} "
      f"({_first3(files)}): "
      "every shard is empty, and training would wait forever for a first "
      "batch. Data prep writes empty shards when it makes no instance (an "
      "empty, unreadable or one-sentence-per-document corpus): see its "
      f"summary.json, or fix {flag}")


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
