"""What a data prep run writes in --output_dir besides the records.

`pretrain-SSSSS-of-NNNNN.tfrecord` shards, `summary.json` (the pipeline's
counts, written by its last step), then `_SUCCESS`, then `manifest.json`,
written last and atomically: the hand-off to pretraining, which checks it
(albert_tf.data.record_checks). Files being written carry TEMP_PREFIX until
they are complete.
"""

import dataclasses
import json
import logging
import os
import uuid

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from albert_tf.core import errors
from albert_tf.core import file_io
from albert_tf.data.tokenization import file_sha256
from albert_tf.core.features import (MANIFEST_FILE, MANIFEST_FORMAT,
                                MANIFEST_VERSION, SHARD_PREFIX, SHARD_SUFFIX,
                                SUCCESS_FILE, SUMMARY_FILE, TEMP_PREFIX)
from data_prep.reading import MAX_PLACES, SKIP_REASONS, input_sizes


def shard_name(output_dir, index, num_shards):
  """Path of shard `index` (0-based) of num_shards in output_dir."""
  return FileSystems.join(
      output_dir,
      f"{SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}")


def output_file_paths(output_file):
  """The comma-separated paths of --output_file, in order."""
  return [p.strip() for p in output_file.split(",") if p.strip()]


# Written when a run starts and deleted after its manifest: a folder that
# holds it but no _SUCCESS or manifest.json holds what an unfinished run (a
# killed launcher, a failed pipeline, a Dask cluster gone) left, which the
# same command then replaces without --overwrite. (A TEMP_PREFIX name:
# pretraining never reads it.)
UNFINISHED_MARKER = f"{TEMP_PREFIX}unfinished-run"


def _existing_outputs(output_dir):
  patterns = [FileSystems.join(output_dir, n) for n in (
      f"{SHARD_PREFIX}-*{SHARD_SUFFIX}", f"{TEMP_PREFIX}*", SUMMARY_FILE,
      SUCCESS_FILE, MANIFEST_FILE)]
  return [m.path for r in FileSystems.match(patterns) for m in r.metadata_list]


def prepare_output_dir(output_dir, overwrite):
  """Creates and locks output_dir; refuses (or with overwrite, deletes) a
  previous run, and replaces what an unfinished run left (UNFINISHED_MARKER
  without _SUCCESS or manifest.json) with one warning. Then marks the new
  run unfinished until `mark_done`. Returns the lock (`file_io.lock_output`;
  None on a remote file system): hold it while the run writes, release it
  at the end. A second run into output_dir is refused before anything is
  deleted, so a live run's `.tmp-*` files are never removed."""
  if "://" not in output_dir and os.path.exists(output_dir) and not (
      os.path.isdir(output_dir)):
    raise ValueError(errors.error_line(
        f"{output_dir!r} is a file, not a folder", "--output_dir",
        "name a folder (it is created), or use --output_file for one file"))
  lock = file_io.lock_output(output_dir, "--output_dir")
  try:
    _prepare_locked(output_dir, overwrite)
  except BaseException:
    if lock is not None:
      lock.release()
    raise
  return lock


def _prepare_locked(output_dir, overwrite):
  existing = _existing_outputs(output_dir)
  names = {os.path.basename(path) for path in existing}
  unfinished = UNFINISHED_MARKER in names and not (
      names & {SUCCESS_FILE, MANIFEST_FILE})
  if existing and not overwrite and not unfinished:
    raise ValueError(errors.error_line(
        f"{output_dir!r} already holds the output of a previous run "
        f"({len(existing)} files, e.g. {os.path.basename(existing[0])})",
        "--output_dir", "pass --overwrite to replace it"))
  if unfinished and not overwrite:
    logging.getLogger(__name__).warning(
        "--output_dir=%s holds what an unfinished run left (%d files, no "
        "%s): replacing them", output_dir, len(existing), SUCCESS_FILE)
  if existing:
    FileSystems.delete(existing)
  if not FileSystems.exists(output_dir):
    FileSystems.mkdirs(output_dir)
  with FileSystems.create(FileSystems.join(output_dir, UNFINISHED_MARKER)):
    pass


def merge_input_reports(reports):
  """{path: report} from the per-range reports of ReadDocumentsFn."""
  merged = {}
  for path, report in reports:
    into = merged.setdefault(path, {"documents": 0, "over_max_sentences": 0,
                                    "max_sentences": 0, "error": None})
    into["documents"] += report["documents"]
    into["over_max_sentences"] += report["over_max_sentences"]
    into["max_sentences"] = max(into["max_sentences"], report["max_sentences"])
    into["error"] = into["error"] or report["error"]
    spaces = report.get("whitespace_lines") or {}
    if spaces.get("count"):
      total = into.setdefault("whitespace_lines", {"count": 0, "places": []})
      total["count"] += spaces["count"]
      # The first lines of the file (ranges arrive in any order).
      total["places"] = sorted(
          total["places"] + spaces["places"],
          key=lambda p: int(p.rsplit(":", 1)[1]))[:MAX_PLACES]
  return {path: merged[path] for path in sorted(merged)}


def make_summary(counts, options, dupe_factor, shards, records_per_shard=None,
                 inputs=None):
  """The summary.json dict from the combined counts.

  records_per_shard: {shard path: records}; inputs: {path: report} of
  merge_input_reports.
  """
  records_per_shard = records_per_shard or {}
  inputs = inputs or {}
  tokens = counts.get("tokens", 0)
  num_instances = counts.get("instances", 0)
  label_1 = counts.get("next_sentence_label_1", 0)
  ngrams = {int(k.split("_")[1]): v for k, v in counts.items()
            if k.startswith("ngram_")}
  longest_count = ngrams[max(ngrams)] if ngrams else 0
  return {
      "instances": num_instances,
      "tokens": tokens,
      "masked_tokens": counts.get("masked_tokens", 0),
      "masked_lm_rate": counts.get("masked_tokens", 0) / tokens if tokens else 0,
      "next_sentence_labels": {"0": num_instances - label_1, "1": label_1},
      "next_sentence_label_1_fraction": (label_1 / num_instances
                                         if num_instances else 0),
      "ngram_lengths": {str(n): ngrams[n] for n in sorted(ngrams)},
      # Scaled so the longest n-gram counts 2, comparable to 6:3:2 for n=3.
      "ngram_ratio": ({str(n): round(2 * ngrams[n] / longest_count, 2)
                       for n in sorted(ngrams)} if longest_count else {}),
      "documents": {
          "read": counts.get("documents_read", 0),
          "used": counts.get("documents_used", 0),
          "skipped": {r: counts.get(f"skipped_{r}", 0) for r in SKIP_REASONS},
      },
      "dupe_factor": dupe_factor,
      "options": dataclasses.asdict(options),
      "shards": sorted(os.path.basename(s) for s in shards),
      "records_per_shard": {os.path.basename(s): records_per_shard.get(s, 0)
                            for s in sorted(shards)},
      # What was read from each input file; "error": why the rest of a
      # damaged compressed file was skipped (--skip_bad_inputs).
      "inputs": inputs,
      "inputs_skipped": sum(1 for r in inputs.values() if r["error"]),
      "documents_over_max_sentences": sum(
          r["over_max_sentences"] for r in inputs.values()),
      "most_sentences_in_a_document": max(
          [r["max_sentences"] for r in inputs.values()] or [0]),
  }


def write_summary(output_dir, summary):
  """Writes summary.json in output_dir (whole or not at all, as the
  manifest: a temporary name renamed into place)."""
  write_json_atomically(FileSystems.join(output_dir, SUMMARY_FILE), summary)


def finish_output(counts, output_dir, options, dupe_factor, num_shards,
                  written_shards, input_reports):
  """Creates the shards no record fell into (empty), then summary.json.

  The pipeline's last step. written_shards: (path, records) of
  WriteShardFn; input_reports: the "inputs" output of ReadDocumentsFn.
  """
  shards = [shard_name(output_dir, i, num_shards) for i in range(num_shards)]
  records_per_shard = dict(written_shards)
  for path in sorted(set(shards) - set(records_per_shard)):
    with FileSystems.create(path):
      pass
  write_summary(output_dir, make_summary(
      counts, options, dupe_factor, shards, records_per_shard,
      merge_input_reports(input_reports)))


def read_summary(output_dir):
  """The summary.json dict of output_dir."""
  with FileSystems.open(FileSystems.join(output_dir, SUMMARY_FILE)) as f:
    return json.loads(f.read().decode("utf-8"))


def mark_done(output_dir, summary, input_bytes, run_flags, tokenizer_info):
  """Writes _SUCCESS, then manifest.json (see make_manifest for the args).

  The manifest is written last, atomically: its presence means the shards
  and the summary are complete (run_pretraining checks both markers).
  """
  with FileSystems.create(FileSystems.join(output_dir, SUCCESS_FILE)) as f:
    f.write(b"")
  shard_paths = [FileSystems.join(output_dir, name)
                 for name in summary["records_per_shard"]]
  manifest = make_manifest(summary, input_bytes, run_flags, tokenizer_info,
                           dict(zip(shard_paths, input_sizes(shard_paths))))
  write_json_atomically(FileSystems.join(output_dir, MANIFEST_FILE), manifest)
  FileSystems.delete([FileSystems.join(output_dir, UNFINISHED_MARKER)])


def describe_tokenizer(tokenizer):
  """The manifest's "tokenizer": kind, file, sha256 of the file, lowercase."""
  return {"kind": tokenizer.kind, "file": tokenizer.model_file,
          "sha256": file_sha256(tokenizer.model_file),
          "do_lower_case": tokenizer.do_lower_case}


def make_manifest(summary, input_bytes, run_flags, tokenizer_info,
                  shard_bytes):
  """The manifest.json dict: what a consumer checks before reading shards.

  Args:
    summary: the summary.json dict of the run (the pipeline's counts).
    input_bytes: {input path: size in bytes}.
    run_flags: the flags of the run, by flag name.
    tokenizer_info: describe_tokenizer's dict.
    shard_bytes: {shard path: size in bytes}.
  """
  inputs = summary.get("inputs", {})
  return {
      "format": MANIFEST_FORMAT,
      "version": MANIFEST_VERSION,
      "written_by": "data_prep.create_pretraining_data",
      "inputs": [dict(path=path, bytes=size,
                      documents=inputs.get(path, {}).get("documents", 0),
                      error=inputs.get(path, {}).get("error"))
                 for path, size in input_bytes.items()],
      "inputs_skipped": summary.get("inputs_skipped", 0),
      "documents": summary["documents"],
      "documents_over_max_sentences": summary.get(
          "documents_over_max_sentences", 0),
      "instances": summary["instances"],
      "records": sum(summary["records_per_shard"].values()),
      "shards": {os.path.basename(path): {
          "records": summary["records_per_shard"][os.path.basename(path)],
          "bytes": size} for path, size in sorted(shard_bytes.items())},
      "flags": run_flags,
      "tokenizer": tokenizer_info,
  }


def write_json_atomically(path, value):
  """Writes JSON under a temporary name in the same directory, then renames."""
  directory, name = os.path.split(path)
  temp = FileSystems.join(directory, f"{TEMP_PREFIX}{uuid.uuid4().hex}-{name}")
  with FileSystems.create(temp, compression_type=
                          CompressionTypes.UNCOMPRESSED) as f:
    f.write(json.dumps(value, indent=2, sort_keys=True).encode("utf-8"))
  FileSystems.rename([temp], [path])
