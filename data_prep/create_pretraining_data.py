"""Apache Beam pipeline: text files -> ALBERT pretraining TFRecords.

  python -m data_prep.create_pretraining_data --input_file='corpus/train.txt' \
      --output_dir=out/train --spm_model_file=vocab/spm.model \
      --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=2 \
      --direct_num_workers=2

Input: text files (globs, comma-separated; gzip by ".gz"), one sentence per
line, documents separated by blank lines. Output in --output_dir:
`pretrain-SSSSS-of-NNNNN.tfrecord` (the original ALBERT record format, see
`albert_tf.features`), `summary.json` (counts, masked rate, label balance,
n-gram histogram, skipped documents by reason, records per shard, what was
read from each input), then `_SUCCESS`, then `manifest.json`, written last
and atomically (temporary file + rename): the hand-off to pretraining, which
checks it (`albert_tf.data.record_checks.check_records_dirs`). It holds the input
files with their byte sizes, documents read / skipped by reason, inputs
skipped, instances, records and bytes per shard, the flags used and the
tokenizer's sha256; see make_manifest. Or, as the original script,
--output_file=FILE: all records in that one TFRecord file (a comma-separated
list: one shard per file; no summary.json, _SUCCESS or manifest).

Beam's pipeline options are accepted by their Beam names (--runner,
--direct_num_workers, Dataflow's --project, ...), so the same command runs on
Dataflow, Flink or Spark; any other unknown flag is an error. Without
--runner the pipeline runs locally on the DirectRunner, and with
--direct_num_workers > 1 and no --direct_running_mode its workers are
processes (multi_processing); see choose_runner. A mistake in a flag, an input
or the tokenizer file is one line on stderr, `error: <what>, <where>
(<hint>)`, before anything is written; --verbose shows the traceback instead.

Pipeline: match files -> plan byte ranges that start at document boundaries
(`plan_reads`; a compressed file is one range) -> Create (spreads the ranges
over the workers) -> read the documents of each range -> tokenize (tokenizer
loaded in `DoFn.setup`) -> instances and masking (`data_prep.instances`) ->
GroupByKey on the shard (a hash of each serialized record) -> write each
shard in hash order (`WriteShardFn`); counts are combined per bundle into the
summary. Every random choice is seeded from the document's content, the dupe
index and --random_seed, and a record's shard and position come from its
bytes, so any runner and any number of workers write the same shard files,
with the instances of a document (and of its dupes) scattered over them.
While it runs, a log line every --progress_interval_secs (10) gives the
workers' counts so far, records/s and an ETA from the planned byte ranges
read (data_prep.progress); a last line gives the committed counts.

Bad documents are counted and skipped, never fatal: a document with a line
over --max_line_bytes ("line_too_long"), NUL bytes or mostly control
characters ("binary"), invalid UTF-8 ("invalid_utf8"), no tokens ("empty"),
or fewer than two non-empty sentences ("single_sentence": no sentence pair to
order). A document of more than --max_sentences_per_document sentences is
counted and logged as a warning (a corpus without blank lines between
documents is one huge document). Bad input FILES and empty results are
errors, one line naming the file or the counts: a truncated or corrupt
compressed input (with --skip_bad_inputs: its complete documents before the
damage are kept, the rest of the file is skipped, and the skip is logged and
listed in summary.json and the manifest), and a run that makes no instance
at all (no _SUCCESS, no manifest).
"""

import bz2
import contextlib
import dataclasses
import gzip
import hashlib
import itertools
import json
import logging
import lzma
import os
import re
import sys
import unicodedata
import uuid
import zlib

if __name__ == "__main__":
  # Run as a command: `import apache_beam` logs "apitools not found ..."
  # (the optional GCP client) through the root logger, which would put a
  # line of noise before every one-line error. The NullHandler also keeps
  # logging from installing its default stderr handler for that message.
  logging.getLogger().addHandler(logging.NullHandler())
  logging.getLogger().addFilter(
      lambda record: "apitools not found" not in record.getMessage())

import apache_beam as beam  # pylint: disable=g-import-not-at-top,wrong-import-position
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from albert_tf import cli_errors
from data_prep import example_encoder
from data_prep import instances as instances_lib
from data_prep import progress as progress_lib

SHARD_PREFIX = "pretrain"
SHARD_SUFFIX = ".tfrecord"
SUMMARY_FILE = "summary.json"
SUCCESS_FILE = "_SUCCESS"
# The same names as albert_tf.data.record_checks's, which checks them (not
# imported: the workers never import TensorFlow).
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "albert_tf.pretraining_records"
MANIFEST_VERSION = 1
TEMP_PREFIX = ".tmp-"
SKIP_REASONS = ("line_too_long", "binary", "invalid_utf8", "empty",
                "single_sentence")
_LOGGER = logging.getLogger(__name__)
# --runner values that mean Beam's local DirectRunner (create_runner's
# spellings); choose_runner runs them without the PrismRunner attempt.
_DIRECT_RUNNER_NAMES = ("directrunner", "direct")
_METRICS_NAMESPACE = "data_prep"
_STATS_TAG = "stats"
_INPUTS_TAG = "inputs"
_READ_CHUNK_BYTES = 1 << 20
# Input files are read in ranges of about this size, so reading, tokenizing
# and instance creation of one file spread over the workers (see plan_reads);
# run_pipeline picks the size from the input size.
_MIN_SPLIT_BYTES = 64 << 10
_MAX_SPLIT_BYTES = 64 << 20
_SPLITS_PER_INPUT = 64
_SPLIT_SCAN_BYTES = 4 << 20
_SPLIT_SCAN_CHUNK = 64 << 10
# Records a DoFn holds before emitting them grouped by shard.
_RECORD_BUFFER_BYTES = 16 << 20
_EMPTY_LINE = re.compile(rb"\n\r?\n")
# NSP: random B segments come from this many documents, the ones with the
# smallest fingerprints, which is the same set whatever the arrival order.
_RANDOM_DOCUMENT_POOL_SIZE = 256
# More than this share of control characters marks a document as binary junk.
_MAX_CONTROL_CHAR_FRACTION = 0.05


# ---------------------------------------------------------------- reading
def iter_lines(f, max_line_bytes, limit=None):
  """Yields (line, too_long) from a binary file; memory stays bounded.

  A line longer than max_line_bytes is yielded once as (None, True); its
  bytes are never held in memory beyond one chunk. With `limit`, reads at
  most that many bytes from the current position.
  """
  pending = b""
  discarding = False  # Inside a too-long line: drop bytes until "\n".
  remaining = limit
  while True:
    size = _READ_CHUNK_BYTES if remaining is None else min(
        _READ_CHUNK_BYTES, remaining)
    chunk = f.read(size) if size else b""
    if not chunk:
      break
    if remaining is not None:
      remaining -= len(chunk)
    parts = chunk.split(b"\n")
    for part in parts[:-1]:
      if discarding:
        discarding = False
        yield None, True
        continue
      line = pending + part
      pending = b""
      if len(line) > max_line_bytes:
        yield None, True
      else:
        yield line.rstrip(b"\r"), False
    if discarding:
      continue
    pending += parts[-1]
    if len(pending) > max_line_bytes:
      pending, discarding = b"", True
  if discarding:
    yield None, True
  elif pending:
    if len(pending) > max_line_bytes:
      yield None, True
    else:
      yield pending.rstrip(b"\r"), False


def _is_compressed(path):
  return (CompressionTypes.detect_compression_type(path) !=
          CompressionTypes.UNCOMPRESSED)


def _next_document_start(f, offset, scan_bytes):
  """Offset of the first line after an empty line at or after `offset`.

  Looks for "\n\n" (or "\n\r\n") in the next scan_bytes; None if there is
  none, e.g. in a file of one huge line. Whitespace-only lines also separate
  documents when reading, but are not used as split points, so a split never
  depends on max_line_bytes.
  """
  f.seek(offset)
  window, scanned = b"", 0
  while scanned < scan_bytes:
    chunk = f.read(_SPLIT_SCAN_CHUNK)
    if not chunk:
      return None
    # Keep the last two bytes: "\n\r\n" may straddle two chunks.
    window_start = offset + scanned - len(window)
    window += chunk
    scanned += len(chunk)
    match = _EMPTY_LINE.search(window)
    if match is not None:
      return window_start + match.end()
    window = window[-2:]
  return None


def input_sizes(paths):
  """Sizes in bytes of the files, in order; ValueError for a vanished one."""
  # One match call for all paths (one request per batch on remote storage);
  # one result per path, in order.
  sizes = []
  for path, result in zip(paths, FileSystems.match(list(paths))):
    if not result.metadata_list:
      raise ValueError(f"--input_file: {path!r} disappeared before reading")
    sizes.append(result.metadata_list[0].size_in_bytes)
  return sizes


def plan_reads(paths, split_bytes=None, sizes=None):
  """(path, start, end) byte ranges that together hold every document once.

  Uncompressed files are cut about every split_bytes, each cut moved forward
  to the start of a document (after an empty line), so a range reader needs
  no look-back and no neighbour: the same documents come out as from one
  pass over the file. Compressed files are one range (end None = to EOF).
  The launcher reads only a small window at each cut. split_bytes None:
  about _SPLITS_PER_INPUT ranges over all inputs, within the size bounds.
  sizes: the files' sizes in bytes (input_sizes), if known.
  """
  sizes = input_sizes(paths) if sizes is None else sizes
  if split_bytes is None:
    split_bytes = min(_MAX_SPLIT_BYTES,
                      max(_MIN_SPLIT_BYTES, sum(sizes) // _SPLITS_PER_INPUT))
  ranges = []
  for path, size in zip(paths, sizes):
    if _is_compressed(path) or size <= split_bytes:
      ranges.append((path, 0, None))
      continue
    starts = [0]
    with FileSystems.open(path, compression_type=
                          CompressionTypes.UNCOMPRESSED) as f:
      for offset in range(split_bytes, size, split_bytes):
        if offset < starts[-1]:
          continue  # The previous cut already moved past this one.
        start = _next_document_start(f, offset, _SPLIT_SCAN_BYTES)
        if start is not None and start < size:
          starts.append(start)
    ends = starts[1:] + [None]
    ranges.extend((path, a, b) for a, b in zip(starts, ends))
  return ranges


class BadInputError(ValueError):
  """A compressed input file is truncated or corrupt.

  Raised in a worker; its text carries a marker (see bad_input_in) so that
  the launcher can find the file and the reason in whatever exception the
  runner raises for the failed pipeline.
  """

  _MARK = re.compile(r"<<bad-input>>(.*?)<</bad-input>>", re.S)

  def __init__(self, path, detail):
    self.path, self.detail = path, detail
    super().__init__("<<bad-input>>" + json.dumps(
        {"path": path, "detail": detail}) + "<</bad-input>>")

  @classmethod
  def find_in(cls, text):
    """(path, detail) of the first BadInputError in an error text, or None."""
    match = cls._MARK.search(text)
    if match is None:
      return None
    try:
      found = json.loads(match.group(1))
    except ValueError:
      return None
    return found["path"], found["detail"]


# Errors of the decompressors on a damaged stream: gzip's EOFError
# ("Compressed file ended before the end-of-stream marker was reached") and
# BadGzipFile (an OSError: bad magic, CRC or length), zlib.error, bz2's
# OSError ("Invalid data stream"), lzma.LZMAError.
_DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


class _ReadOne:
  """read(n) as read1(n): returns what one decompression step gave.

  A buffered read(1 MB) of a truncated stream raises without returning the
  bytes it had decompressed; read1 hands them out first, so the complete
  documents before the damage are seen before the error.
  """

  def __init__(self, f):
    self._f = f

  def read(self, size=-1):
    return self._f.read1(size)


@contextlib.contextmanager
def _open_input(path):
  """A binary reader of the (decompressed) file.

  gzip, bzip2 and lzma go through Python's own readers, which raise on a
  truncated or corrupt stream (Beam's CompressedFile returns what it could
  decompress, so a file cut in half read as half the documents); DEFLATE and
  zstd through Beam's, with a check for a stream that ended early.
  """
  compression = CompressionTypes.detect_compression_type(path)
  if compression == CompressionTypes.UNCOMPRESSED:
    with FileSystems.open(path, compression_type=
                          CompressionTypes.UNCOMPRESSED) as f:
      yield f
    return
  openers = {CompressionTypes.GZIP: lambda raw: gzip.GzipFile(fileobj=raw),
             CompressionTypes.BZIP2: bz2.BZ2File,
             CompressionTypes.LZMA: lzma.LZMAFile}
  if compression in openers:
    with FileSystems.open(path, compression_type=
                          CompressionTypes.UNCOMPRESSED) as raw:
      with openers[compression](raw) as f:
        yield _ReadOne(f)
    return
  with FileSystems.open(path, compression_type=compression) as f:
    yield f
    # Beam's CompressedFile stops quietly where the data stops.
    decompressor = getattr(f, "_decompressor", None)
    if decompressor is not None and not getattr(decompressor, "eof", True):
      raise EOFError("compressed stream ended before its end marker")


def read_raw_documents(path, max_line_bytes, start=0, end=None):
  """Yields (lines: tuple of bytes, has_long_line: bool) per document.

  Reads bytes [start, end) of the file (end None: to its end); `start` must
  be 0 or a document start from `plan_reads`. A compressed file that turns
  out truncated or corrupt raises BadInputError after its last complete
  document (the partial one being read is dropped).
  """
  lines, long_line = [], False
  compressed = _is_compressed(path)
  try:
    with _open_input(path) as f:
      if start:
        f.seek(start)
      limit = None if end is None else end - start
      for line, too_long in iter_lines(f, max_line_bytes, limit):
        if too_long:
          long_line = True
        elif line.strip():
          lines.append(line)
        elif lines or long_line:
          yield tuple(lines), long_line
          lines, long_line = [], False
  except _DECOMPRESSION_ERRORS as e:
    if not compressed:
      raise
    raise BadInputError(path, f"{type(e).__name__}: {e}") from e
  if lines or long_line:
    yield tuple(lines), long_line


def classify_raw_document(lines, long_line):
  """(reason, texts): a skip reason or None, and the decoded lines."""
  if long_line:
    return "line_too_long", None
  if any(b"\x00" in line for line in lines):
    return "binary", None
  try:
    texts = [line.decode("utf-8") for line in lines]
  except UnicodeDecodeError:
    return "invalid_utf8", None
  num_chars = sum(len(t) for t in texts)
  num_control = sum(1 for t in texts for c in t
                    if c != "\t" and unicodedata.category(c) == "Cc")
  if num_chars and num_control > _MAX_CONTROL_CHAR_FRACTION * num_chars:
    return "binary", None
  return None, texts


# ---------------------------------------------------- per-document functions
def tokenize_raw_document(tokenizer, raw_document):
  """(skip reason or None, document as a list of segments of token ids)."""
  lines, long_line = raw_document
  reason, texts = classify_raw_document(lines, long_line)
  if reason is not None:
    return reason, None
  document = [ids for ids in map(tokenizer.encode, texts) if ids]
  if not document:
    return "empty", None
  if len(document) < 2:
    return "single_sentence", None
  return None, document


def document_to_records(document, options, vocab, dupe_factor,
                        random_documents=()):
  """(serialized records of all dupes, stats dict) of one tokenized document."""
  instances = instances_lib.instances_for_document(
      document, options, vocab, dupe_factor, random_documents)
  stats = instances_lib.instance_stats(instances)
  stats["documents_used"] = 1
  return [serialize_instance(i, options) for i in instances], stats


# ---------------------------------------------------------------- DoFns
class _CountsPerBundle:
  """Adds count dicts over a bundle and emits one dict per bundle.

  One stats element per bundle instead of one per document keeps the
  summary's bookkeeping out of the per-element cost.
  """

  def start_bundle(self):
    self._bundle_counts = {}

  def _count(self, counts):
    for key, value in counts.items():
      self._bundle_counts[key] = self._bundle_counts.get(key, 0) + value

  def finish_bundle(self):
    if self._bundle_counts:
      yield beam.pvalue.TaggedOutput(_STATS_TAG, WindowedValue(
          self._bundle_counts, MIN_TIMESTAMP, [GlobalWindow()]))


class ReadDocumentsFn(beam.DoFn):
  """(path, start, end) -> raw documents, plus one report per range.

  The report, (path, {"documents", "over_max_sentences", "max_sentences",
  "error"}) on the "inputs" output, is what summary.json and the manifest
  say about each input file. A truncated or corrupt compressed file raises
  BadInputError (the pipeline fails, the launcher names the file); with
  skip_bad_inputs its complete documents before the damage are kept and the
  report carries the error.
  """

  def __init__(self, max_line_bytes, max_sentences_per_document,
               skip_bad_inputs, file_sizes=None):
    self._max_line_bytes = max_line_bytes
    self._max_sentences = max_sentences_per_document
    self._skip_bad_inputs = skip_bad_inputs
    self._file_sizes = file_sizes or {}
    self._counters = {}

  def setup(self):
    self._counters = {
        name: Metrics.counter(_METRICS_NAMESPACE, name)
        for name in ("inputs_skipped", "documents_over_max_sentences",
                     progress_lib.INPUT_BYTES)}

  def process(self, read_range):
    path, start, end = read_range
    report = {"documents": 0, "over_max_sentences": 0, "max_sentences": 0,
              "error": None}
    try:
      for raw_document in read_raw_documents(path, self._max_line_bytes,
                                             start, end):
        sentences = len(raw_document[0])
        report["documents"] += 1
        report["max_sentences"] = max(report["max_sentences"], sentences)
        if sentences > self._max_sentences:
          report["over_max_sentences"] += 1
          self._counters["documents_over_max_sentences"].inc()
        yield raw_document
    except BadInputError as e:
      if not self._skip_bad_inputs:
        raise
      # Logged by the launcher, from summary.json (a worker's log may be
      # out of sight: another process or machine).
      self._counters["inputs_skipped"].inc()
      report["error"] = e.detail
    # The planned bytes of the range, once it is read: the launcher's ETA
    # is the share of the input's bytes done (see data_prep.progress).
    size = self._file_sizes.get(path, 0)
    self._counters[progress_lib.INPUT_BYTES].inc(
        max(0, (size if end is None else end) - start))
    yield beam.pvalue.TaggedOutput(_INPUTS_TAG, (path, report))


class TokenizeDocumentFn(_CountsPerBundle, beam.DoFn):
  """Raw document -> list of segments (token ids); skipped ones are counted."""

  def __init__(self, spm_model_file, vocab_file, do_lower_case):
    self._tokenizer_args = dict(spm_model_file=spm_model_file,
                                vocab_file=vocab_file,
                                do_lower_case=do_lower_case)
    self._tokenizer = None
    self._counters = {}

  def setup(self):
    # setup() may run more than once per worker; loading is idempotent.
    from albert_tf.data import tokenization
    self._tokenizer = tokenization.load_tokenizer(**self._tokenizer_args)
    self._counters = {
        name: Metrics.counter(_METRICS_NAMESPACE, name)
        for name in [progress_lib.DOCUMENTS_READ] + [
            f"skipped_{r}" for r in SKIP_REASONS]}

  def process(self, raw_document):
    self._counters[progress_lib.DOCUMENTS_READ].inc()
    reason, document = tokenize_raw_document(self._tokenizer, raw_document)
    if reason is not None:
      self._counters[f"skipped_{reason}"].inc()
      self._count({"documents_read": 1, f"skipped_{reason}": 1})
      return
    self._count({"documents_read": 1})
    yield document


def record_sort_key(record):
  """A record's place in the output: a 64-bit hash of its bytes.

  The shard is sort_key % num_shards, and each shard is written in sort_key
  order, so shard contents and order depend only on the records, and
  instances of one document (and of its dupes) are scattered over all shards
  and positions, as the original's global shuffle of instances does.
  """
  digest = hashlib.blake2b(record, digest_size=8,
                           person=b"albert-shard").digest()
  return int.from_bytes(digest, "little")


class DocumentToRecordsFn(_CountsPerBundle, beam.DoFn):
  """Tokenized documents -> (shard, [(sort key, record), ...]) groups.

  Records are buffered per shard and emitted in groups of up to
  _RECORD_BUFFER_BYTES (all shards together): the shuffle before the shard
  writers then handles a few large elements instead of one per record,
  which on the DirectRunner is most of Beam's cost.
  """

  def __init__(self, options, vocab, dupe_factor, num_shards):
    self._options = options
    self._vocab = vocab
    self._dupe_factor = dupe_factor
    self._num_shards = num_shards
    self._instances_counter = None

  def setup(self):
    self._instances_counter = Metrics.counter(_METRICS_NAMESPACE,
                                              progress_lib.INSTANCES)

  def start_bundle(self):
    super().start_bundle()
    self._buffer, self._buffered_bytes = {}, 0

  def process(self, document, random_documents=()):
    records, stats = document_to_records(document, self._options, self._vocab,
                                         self._dupe_factor, random_documents)
    self._instances_counter.inc(len(records))
    self._count(stats)
    for record in records:
      key = record_sort_key(record)
      self._buffer.setdefault(key % self._num_shards, []).append(
          (key, record))
      self._buffered_bytes += len(record)
    if self._buffered_bytes >= _RECORD_BUFFER_BYTES:
      yield from self._flush()

  def _flush(self):
    buffer, self._buffer, self._buffered_bytes = self._buffer, {}, 0
    return buffer.items()

  def finish_bundle(self):
    yield from super().finish_bundle()
    for group in self._flush():
      yield WindowedValue(group, MIN_TIMESTAMP, [GlobalWindow()])


def shard_name(output_dir, index, num_shards):
  return FileSystems.join(
      output_dir,
      f"{SHARD_PREFIX}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}")


class WriteShardFn(beam.DoFn):
  """(shard index, lists of (sort key, record)) -> one TFRecord file.

  Written by hand rather than with beam.io.WriteToTFRecord, which deals
  records to shards round-robin in arrival order: its shards differ from run
  to run, and on the DirectRunner a document's instances and all its dupes
  end up next to each other. Here a shard holds the records whose sort key
  falls in it, in key order (see record_sort_key), with Beam's own TFRecord
  framing. A shard is sorted in memory: choose --num_shards so one shard
  fits a worker comfortably (a few hundred MB). The file is written under a
  temporary name and renamed, so a retried or killed bundle never leaves a
  partial shard under the final name.
  """

  def __init__(self, output_dir, num_shards):
    self._output_dir = output_dir
    self._num_shards = num_shards

  def process(self, shard):
    from apache_beam.io.tfrecordio import _TFRecordUtil
    index, groups = shard
    keyed_records = sorted(itertools.chain.from_iterable(groups))
    final = shard_name(self._output_dir, index, self._num_shards)
    temp = FileSystems.join(
        self._output_dir, f"{TEMP_PREFIX}{uuid.uuid4().hex}-"
        f"{os.path.basename(final)}")
    with FileSystems.create(
        temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      for _, record in keyed_records:
        _TFRecordUtil.write_record(f, record)
    FileSystems.rename([temp], [final])
    Metrics.counter(_METRICS_NAMESPACE, progress_lib.RECORDS_WRITTEN).inc(
        len(keyed_records))
    yield final, len(keyed_records)


def serialize_instance(instance, options):
  """One instance as a serialized tf.train.Example in the original format."""
  return example_encoder.encode_pretraining_example(
      **instances_lib.padded_features(instance, options))


class SumCountsFn(beam.CombineFn):
  """Adds dicts of counts key by key."""

  def create_accumulator(self):
    return {}

  def add_input(self, accumulator, counts):
    for key, value in counts.items():
      accumulator[key] = accumulator.get(key, 0) + value
    return accumulator

  def merge_accumulators(self, accumulators):
    merged = {}
    for accumulator in accumulators:
      self.add_input(merged, accumulator)
    return merged

  def extract_output(self, accumulator):
    return accumulator


# ---------------------------------------------------------------- summary
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


def _finish_output(counts, output_dir, options, dupe_factor, num_shards,
                   written_shards, input_reports):
  """Creates the shards no record fell into (empty), then summary.json.

  written_shards: (path, records) of WriteShardFn; input_reports: the
  "inputs" output of ReadDocumentsFn.
  """
  shards = [shard_name(output_dir, i, num_shards) for i in range(num_shards)]
  records_per_shard = dict(written_shards)
  for path in sorted(set(shards) - set(records_per_shard)):
    with FileSystems.create(path):
      pass
  summary = make_summary(counts, options, dupe_factor, shards,
                         records_per_shard,
                         merge_input_reports(input_reports))
  with FileSystems.create(FileSystems.join(output_dir, SUMMARY_FILE)) as f:
    f.write(json.dumps(summary, indent=2, sort_keys=True).encode("utf-8"))


# ---------------------------------------------------------------- checks
def match_inputs(input_file):
  """Paths of the comma-separated globs; ValueError naming an empty one."""
  paths = []
  for pattern in filter(None, (p.strip() for p in input_file.split(","))):
    matched = [m.path for r in FileSystems.match([pattern])
               for m in r.metadata_list]
    if not matched:
      raise ValueError(cli_errors.error_line(
          f"no file matches {pattern!r}", "--input_file",
          "check the path; comma-separated globs and .gz files are accepted"))
    paths.extend(sorted(matched))
  if not paths:
    raise ValueError(cli_errors.error_line(f"no file named in {input_file!r}",
                                 "--input_file", "give comma-separated globs"))
  return paths


def _existing_outputs(output_dir):
  patterns = [FileSystems.join(output_dir, n) for n in (
      f"{SHARD_PREFIX}-*{SHARD_SUFFIX}", f"{TEMP_PREFIX}*", SUMMARY_FILE,
      SUCCESS_FILE, MANIFEST_FILE)]
  return [m.path for r in FileSystems.match(patterns) for m in r.metadata_list]


def prepare_output_dir(output_dir, overwrite):
  """Creates output_dir; refuses (or with overwrite, deletes) a previous run."""
  existing = _existing_outputs(output_dir)
  if existing and not overwrite:
    raise ValueError(cli_errors.error_line(
        f"{output_dir!r} already holds the output of a previous run "
        f"({len(existing)} files, e.g. {os.path.basename(existing[0])})",
        "--output_dir", "pass --overwrite to replace it"))
  if existing:
    FileSystems.delete(existing)
  if not FileSystems.exists(output_dir):
    FileSystems.mkdirs(output_dir)


def _make_workers_find_this_package():
  # Multi-process and portable workers import data_prep/albert_tf by name;
  # they inherit the environment, not the launcher's sys.path.
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
  if root not in paths:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root] + paths))
  if root not in sys.path:
    sys.path.insert(0, root)


# ---------------------------------------------------------- Beam options
def _beam_option_parser():
  """The parser PipelineOptions builds: every PipelineOptions subclass's flags.

  Built the way `PipelineOptions.get_all_options` builds it (the direct
  subclasses, one per name, via their `_add_argparse_args`), so an option of
  any installed runner or IO (Dataflow, Flink, Spark, S3, ...) is known by
  its Beam name. A bad value raises ValueError instead of exiting.
  """
  from apache_beam.options import pipeline_options

  class Parser(pipeline_options._BeamArgumentParser):  # pylint: disable=protected-access

    def error(self, message):
      if message.startswith("ambiguous option: "):
        return  # Beam ignores these too (abbreviations are off anyway).
      match = re.match(r"argument ([^:]+): (.*)$", message)
      if match:
        raise ValueError(cli_errors.error_line(match.group(2), match.group(1),
                                     "a Beam pipeline option"))
      raise ValueError(cli_errors.error_line(message, hint="Beam pipeline options"))

  parser = Parser(allow_abbrev=False, add_help=False)
  classes = {}
  for cls in PipelineOptions.__subclasses__():
    classes.setdefault(str(cls), cls)
  for cls in classes.values():
    cls._add_argparse_args(parser)  # pylint: disable=protected-access
  # None = not given, so that choose_runner can tell a default from a choice.
  parser.set_defaults(runner=None, direct_running_mode=None,
                      direct_num_workers=None)
  return parser


def beam_option_names():
  """Names of Beam's pipeline options, without the leading "--"."""
  parser = _beam_option_parser()
  return {option.lstrip("-") for action in parser._actions  # pylint: disable=protected-access
          for option in action.option_strings}


def parse_pipeline_args(pipeline_args):
  """(argparse namespace, arguments that are no Beam pipeline option)."""
  return _beam_option_parser().parse_known_args(list(pipeline_args))


def _direct_batch_runner(options, progress_request_secs=None):
  # What Beam's DirectRunner runs a batch pipeline on once the PrismRunner
  # is out of the way: the FnApiRunner, given the options the same way;
  # progress_request_secs: how often it asks workers for their counters so
  # far (data_prep.progress).
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.portable_runner import JobServiceHandle
  encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
  return fn_runner.FnApiRunner(
      provision_info=fn_runner.ExtendedProvisionInfo(
          beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)),
      progress_request_frequency=progress_request_secs)


def choose_runner(pipeline_args, progress_request_secs=None):
  """(PipelineOptions, runner object or None, one line saying what was picked).

  No --runner: the DirectRunner. Beam's DirectRunner first tries the
  PrismRunner, which downloads its binary from GitHub on first use (offline:
  a failed download, then a fallback), so a DirectRunner run goes straight to
  the engine the DirectRunner uses for batch pipelines (FnApiRunner);
  --runner=PrismRunner or SwitchingDirectRunner still get Beam's choice.
  --direct_num_workers above 1 (or 0: one per core) without
  --direct_running_mode: multi_processing, because Beam's default in_memory
  mode runs every worker in this one process. Options given win.
  progress_request_secs: how often the DirectRunner asks its workers for
  their counters so far (None: never).

  Raises:
    ValueError: an argument that is no Beam pipeline option, or a bad value.
  """
  known, unknown = parse_pipeline_args(pipeline_args)
  if unknown:
    raise ValueError(cli_errors.describe_unknown_argument(
        unknown[0], beam_option_names()))
  args, picked = list(pipeline_args), []
  if known.runner is None:
    picked.append("--runner=DirectRunner")
  runner_name = known.runner or "DirectRunner"
  direct = (runner_name.lower() in _DIRECT_RUNNER_NAMES
            and not known.streaming)  # Streaming needs Beam's own choice.
  workers = known.direct_num_workers
  if workers == 0:
    workers = os.cpu_count() or 1
  if direct and known.direct_running_mode is None and (workers or 1) > 1:
    picked.append("--direct_running_mode=multi_processing")
  options = PipelineOptions(args + picked)
  if direct:
    runner = _direct_batch_runner(options, progress_request_secs)
    direct_options = options.view_as(DirectOptions)
    what = (f"DirectRunner (batch engine FnApiRunner, PrismRunner not tried), "
            f"direct_running_mode={direct_options.direct_running_mode}, "
            f"direct_num_workers={direct_options.direct_num_workers}")
  else:
    runner, what = _create_runner(runner_name), runner_name
  description = f"Beam runner: {what}" + (
      f" (picked here: {' '.join(picked)}; give them to choose)" if picked
      else " (as given)")
  return options, runner, description


def _create_runner(name):
  # Now rather than when the pipeline starts: a misspelt runner or a
  # runner whose extras are missing fails before the output is created.
  from apache_beam.runners import runner as runner_lib
  try:
    return runner_lib.create_runner(name)
  except ImportError as e:
    raise ValueError(cli_errors.error_line(f"runner {name!r} cannot be loaded: {e}",
                                 "--runner", "install its apache-beam extra")
                     ) from e
  except ValueError as e:
    raise ValueError(cli_errors.error_line(
        f"unknown runner {name!r}", "--runner",
        "e.g. DirectRunner, PrismRunner, DataflowRunner, FlinkRunner, "
        "SparkRunner, or a PipelineRunner class path")) from e


# ---------------------------------------------------------------- pipeline
def build_pipeline(pipeline, read_ranges, output_dir, tokenizer, options,
                   dupe_factor, num_shards, max_line_bytes,
                   max_sentences_per_document=10_000, skip_bad_inputs=False,
                   file_sizes=None):
  """Adds the transforms to `pipeline`; see the module docstring.

  file_sizes: {input path: bytes}, for the input_bytes counter of a range
  read to the end of its file.
  """
  vocab = instances_lib.Vocab.from_tokenizer(tokenizer)
  raw_documents = (
      pipeline
      # Create spreads its elements over the workers, so each worker reads,
      # tokenizes and builds instances for its ranges without moving raw
      # text or documents through a shuffle.
      | "PlanReads" >> beam.Create(read_ranges)
      | "ReadDocuments" >> beam.ParDo(ReadDocumentsFn(
          max_line_bytes, max_sentences_per_document, skip_bad_inputs,
          file_sizes)).with_outputs(_INPUTS_TAG, main="documents"))
  tokenized = (
      raw_documents.documents
      | "Tokenize" >> beam.ParDo(TokenizeDocumentFn(
          tokenizer.model_file if tokenizer.kind == "sentencepiece" else None,
          tokenizer.model_file if tokenizer.kind == "wordpiece" else None,
          tokenizer.do_lower_case)).with_outputs(_STATS_TAG, main="documents"))
  documents = tokenized.documents
  random_documents = ()
  if options.random_next_sentence:
    random_documents = beam.pvalue.AsSingleton(
        documents
        | "FingerprintDocuments" >> beam.Map(
            lambda d: (instances_lib.document_fingerprint(d), d))
        | "RandomDocumentPool" >> beam.combiners.Top.Of(
            _RANDOM_DOCUMENT_POOL_SIZE, key=lambda kv: kv[0], reverse=True))
  examples = documents | "MakeInstances" >> beam.ParDo(
      DocumentToRecordsFn(options, vocab, dupe_factor, num_shards),
      random_documents).with_outputs(_STATS_TAG, main="records")
  shards = (
      examples.records
      | "GroupByShard" >> beam.GroupByKey()
      | "WriteShards" >> beam.ParDo(WriteShardFn(output_dir, num_shards)))
  _ = (
      (tokenized[_STATS_TAG], examples[_STATS_TAG])
      | "AllStats" >> beam.Flatten()
      | "SumStats" >> beam.CombineGlobally(SumCountsFn())
      | "FinishOutput" >> beam.Map(_finish_output, output_dir, options,
                                   dupe_factor, num_shards,
                                   beam.pvalue.AsList(shards),
                                   beam.pvalue.AsList(
                                       raw_documents[_INPUTS_TAG])))


def run_pipeline(input_file, output_dir, spm_model_file=None, vocab_file=None,
                 do_lower_case=True, options=None, dupe_factor=40,
                 num_shards=4, overwrite=False, pipeline_args=(),
                 max_line_bytes=100_000, split_bytes=None,
                 skip_bad_inputs=False, max_sentences_per_document=10_000,
                 progress_interval_secs=10.0):
  """Checks inputs, runs the pipeline to completion, returns the summary dict.

  Args:
    input_file: comma-separated globs of text files.
    output_dir: directory of the shards, summary.json, _SUCCESS and
      manifest.json.
    spm_model_file / vocab_file: the tokenizer (exactly one).
    do_lower_case: tokenizer normalisation.
    options: `data_prep.instances.InstanceOptions`.
    dupe_factor: passes over each document, each with its own masks.
    num_shards: number of TFRecord files.
    overwrite: replace the output of a previous run in output_dir.
    pipeline_args: Beam options, e.g. ["--direct_num_workers=2"]; see
      choose_runner for the runner picked when --runner is not among them.
    max_line_bytes: a document with a longer line is skipped.
    split_bytes: read uncompressed files in ranges of about this size
      (default: from the input size, 256 KB to 64 MB).
    skip_bad_inputs: a truncated or corrupt compressed input is logged and
      listed in summary.json / the manifest (its complete documents before
      the damage are kept) instead of failing the run.
    max_sentences_per_document: longer documents are counted and logged as
      a warning (missing blank lines between documents?).
    progress_interval_secs: seconds between two progress lines in the log
      (see data_prep.progress).
  Raises:
    ValueError: before any work, for a glob that matches nothing, an
      unreadable tokenizer file, output_dir holding a previous run, or a
      pipeline argument that is no Beam option; after the pipeline, for a
      truncated or corrupt compressed input (without skip_bad_inputs) and
      for a run that made no instance. _SUCCESS and the manifest are then
      not written.
  """
  options = options or instances_lib.InstanceOptions()
  if dupe_factor < 1 or num_shards < 1:
    raise ValueError(f"dupe_factor and num_shards must be >= 1, got "
                     f"{dupe_factor} and {num_shards}")
  if max_sentences_per_document < 1:
    raise ValueError(cli_errors.error_line(
        f"must be >= 1, got {max_sentences_per_document}",
        "--max_sentences_per_document"))
  if not progress_interval_secs > 0:
    raise ValueError(cli_errors.error_line(
        f"must be > 0, got {progress_interval_secs}",
        "--progress_interval_secs"))
  pipeline_options, runner, runner_line = choose_runner(
      pipeline_args, progress_lib.progress_request_secs(progress_interval_secs))
  paths = match_inputs(input_file)
  sizes = input_sizes(paths)
  tokenizer = _load_tokenizer(spm_model_file, vocab_file, do_lower_case)
  tokenizer_info = describe_tokenizer(tokenizer)
  run_flags = dict(
      input_file=input_file, spm_model_file=spm_model_file,
      vocab_file=vocab_file, do_lower_case=do_lower_case,
      **dataclasses.asdict(options), dupe_factor=dupe_factor,
      num_shards=num_shards, max_line_bytes=max_line_bytes,
      split_bytes=split_bytes, skip_bad_inputs=skip_bad_inputs,
      max_sentences_per_document=max_sentences_per_document,
      pipeline_args=list(pipeline_args))
  prepare_output_dir(output_dir, overwrite)
  _make_workers_find_this_package()
  read_ranges = plan_reads(paths, split_bytes, sizes)
  _LOGGER.info(runner_line)
  progress = _pipeline_progress(runner, pipeline_options, sum(sizes),
                                progress_interval_secs)
  try:
    with progress:
      with beam.Pipeline(runner=runner, options=pipeline_options) as p:
        build_pipeline(p, read_ranges, output_dir, tokenizer, options,
                       dupe_factor, num_shards, max_line_bytes,
                       max_sentences_per_document, skip_bad_inputs,
                       dict(zip(paths, sizes)))
    progress.log_final(p.result)
  except Exception as e:  # pylint: disable=broad-except
    # Runners wrap a worker's exception in their own (often as text only).
    bad = BadInputError.find_in(_error_text(e))
    if bad is None:
      raise
    raise ValueError(cli_errors.error_line(
        f"input file {bad[0]!r} is truncated or corrupt ({bad[1]}); nothing "
        "was marked done", "--input_file",
        "fix or remove the file, or pass --skip_bad_inputs to keep its "
        "complete documents before the damage and skip the rest; the skip "
        "is logged and listed in the manifest")) from None
  with FileSystems.open(FileSystems.join(output_dir, SUMMARY_FILE)) as f:
    summary = json.loads(f.read().decode("utf-8"))
  _log_input_warnings(summary, max_sentences_per_document)
  if not summary["instances"]:
    raise ValueError(_no_instances_message(summary, paths, output_dir))
  records = sum(summary["records_per_shard"].values())
  if records != summary["instances"]:  # A runner that lost or added records.
    raise ValueError(cli_errors.error_line(
        f"the shards in {output_dir!r} hold {records} records but "
        f"{summary['instances']} instances were made; nothing was marked "
        "done", "--output_dir", "rerun with --overwrite"))
  # _SUCCESS, then the manifest, written last: their presence means the
  # shards and the summary are complete (run_pretraining checks both).
  with FileSystems.create(FileSystems.join(output_dir, SUCCESS_FILE)) as f:
    f.write(b"")
  shard_paths = [FileSystems.join(output_dir, name)
                 for name in summary["records_per_shard"]]
  manifest = make_manifest(summary, dict(zip(paths, sizes)), run_flags,
                           tokenizer_info,
                           dict(zip(shard_paths, input_sizes(shard_paths))))
  write_json_atomically(FileSystems.join(output_dir, MANIFEST_FILE), manifest)
  return summary


def _pipeline_progress(runner, pipeline_options, total_input_bytes,
                       interval_secs):
  """The PipelineProgress of a run: live counts from the DirectRunner's
  worker processes or threads; elsewhere, a line saying where they are."""
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  mode = pipeline_options.view_as(DirectOptions).direct_running_mode
  direct = isinstance(runner, fn_runner.FnApiRunner)
  live = direct and mode != "in_memory"
  if live:
    note = ""
  elif direct:
    note = ("direct_running_mode=in_memory gives its counts at the end; "
            "--direct_num_workers=2 runs worker processes, which report them "
            "as they go")
  else:
    note = "the runner's own UI shows the counters as they go"
  return progress_lib.PipelineProgress(
      _METRICS_NAMESPACE, total_input_bytes, interval_secs, live, note)


def _error_text(error):
  """The text of an exception and of the exceptions it was raised from."""
  texts, seen = [], set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    texts.append(str(error))
    error = error.__cause__ or error.__context__
  return "\n".join(texts)


def describe_tokenizer(tokenizer):
  """The manifest's "tokenizer": kind, file, sha256 of the file, lowercase."""
  digest = hashlib.sha256()
  with open(tokenizer.model_file, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return {"kind": tokenizer.kind, "file": tokenizer.model_file,
          "sha256": digest.hexdigest(),
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


def _log_input_warnings(summary, max_sentences_per_document):
  inputs = summary.get("inputs", {})
  for path, report in inputs.items():
    if report["error"]:
      _LOGGER.warning(
          "--skip_bad_inputs: %s is truncated or corrupt (%s): kept its %d "
          "complete documents before the damage, skipped the rest (listed "
          "in the manifest)", path, report["error"], report["documents"])
  over = summary.get("documents_over_max_sentences", 0)
  if over:
    longest = max(inputs, key=lambda p: inputs[p]["max_sentences"])
    _LOGGER.warning(
        "%d document(s) have more than --max_sentences_per_document=%d "
        "sentences (the longest: %d, in %s): is the corpus missing the blank "
        "lines between documents? Without them a file reads as one document "
        "(one sentence per line, a blank line after each document)", over,
        max_sentences_per_document, inputs[longest]["max_sentences"], longest)


def _no_instances_message(summary, paths, output_dir):
  documents = summary["documents"]
  skipped = {r: n for r, n in documents["skipped"].items() if n}
  if not documents["read"]:
    what = (f"no instances: no documents in {len(paths)} input file(s) "
            f"(e.g. {paths[0]!r})")
    hint = "the input is empty"
  else:
    what = (f"no instances from the {documents['read']} document(s) read "
            f"(skipped: " + (", ".join(f"{n} {r}" for r, n in skipped.items())
                             or "none") + ")")
    hint = "check the input"
  if skipped.get("single_sentence"):
    hint = ("each document needs two or more sentences: one sentence per "
            "line, a blank line between documents")
  return cli_errors.error_line(what, "--input_file",
                     f"{hint}; nothing was marked done, see "
                     f"{FileSystems.join(output_dir, SUMMARY_FILE)}")


def _load_tokenizer(spm_model_file, vocab_file, do_lower_case):
  from albert_tf.data import tokenization
  try:
    return tokenization.load_tokenizer(spm_model_file, vocab_file,
                                       do_lower_case)
  except ValueError as e:
    if spm_model_file is None and vocab_file is None:
      raise ValueError(cli_errors.error_line(
          "no tokenizer given", "--spm_model_file / --vocab_file",
          "pass a SentencePiece model from `python -m data_prep.train_vocab`,"
          " or a WordPiece vocab.txt")) from e
    if spm_model_file is not None and vocab_file is not None:
      raise ValueError(cli_errors.error_line(
          "two tokenizers given", "--spm_model_file and --vocab_file",
          "pass one of them")) from e
    flag = "--spm_model_file" if spm_model_file else "--vocab_file"
    hint = ("train one with `python -m data_prep.train_vocab`"
            if spm_model_file else "one WordPiece token per line")
    raise ValueError(cli_errors.error_line(str(e), flag, hint)) from e


def output_file_paths(output_file):
  """The comma-separated paths of --output_file, in order."""
  return [p.strip() for p in output_file.split(",") if p.strip()]


def run_pipeline_to_files(output_files, input_file, overwrite=False, **kwargs):
  """run_pipeline writing its shards to the given files, one per file.

  The original's --output_file: the shards (len(output_files) of them) are
  written to a temporary directory next to the first file and then renamed
  to the given names; summary.json and _SUCCESS are not kept. Same
  arguments as run_pipeline otherwise; returns its summary, whose "shards"
  are the given files.

  Raises:
    ValueError: as run_pipeline; also when a file exists and not overwrite,
      or a path names a directory.
  """
  if not output_files:
    raise ValueError(cli_errors.error_line("no file named", "--output_file"))
  for path in output_files:
    if os.path.isdir(path):
      raise ValueError(cli_errors.error_line(f"{path!r} is a directory",
                                   "--output_file",
                                   "use --output_dir for a directory"))
    if FileSystems.exists(path) and not overwrite:
      raise ValueError(cli_errors.error_line(f"{path!r} already exists",
                                   "--output_file",
                                   "pass --overwrite to replace it"))
  first = output_files[0]
  staging = FileSystems.join(
      os.path.dirname(first) or ".",
      f"{TEMP_PREFIX}{os.path.basename(first)}-{uuid.uuid4().hex}")
  num_shards = len(output_files)
  try:
    summary = run_pipeline(input_file, staging, num_shards=num_shards,
                           overwrite=False, **kwargs)
    for index, path in enumerate(output_files):
      FileSystems.rename([shard_name(staging, index, num_shards)], [path])
  finally:
    if FileSystems.exists(staging):
      FileSystems.delete([staging])
  summary["shards"] = list(output_files)
  return summary


# ---------------------------------------------------------------- entry point
# Flags of google-research/albert's create_pretraining_data.py that mean
# nothing here: accepted, so its commands run, and reported as ignored.
_IGNORED_ORIGINAL_FLAGS = {
    "input_file_mode": "input files are read as bytes and decoded as UTF-8",
    "do_permutation": "permutation training is not implemented; records "
                      "have --max_predictions_per_seq mask slots",
    "parallel": "Beam runs the work in parallel (--direct_num_workers)",
}


def _define_flags():
  # Defined only when run as a script, so tests and the benchmark can import
  # this module next to others that define flags of the same names.
  from absl import flags
  flags.DEFINE_string("input_file", None, "Comma-separated globs of text "
                      "files: one sentence per line, blank line between "
                      "documents; .gz allowed.")
  flags.DEFINE_string("output_dir", None, "Directory for the TFRecord shards, "
                      "summary.json, _SUCCESS and manifest.json.")
  flags.DEFINE_string("output_file", None, "Instead of --output_dir, as the "
                      "original: write all records to this one TFRecord file "
                      "(comma-separated files: one shard each).")
  flags.DEFINE_string("spm_model_file", None, "SentencePiece model.")
  flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt (instead of "
                      "--spm_model_file).")
  flags.DEFINE_bool("do_lower_case", True, "Lowercase and strip accents.")
  flags.DEFINE_integer("max_seq_length", 512, "Tokens per sequence.",
                       lower_bound=5)
  flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked tokens cap.",
                       lower_bound=1)
  flags.DEFINE_float("masked_lm_prob", 0.15, "Share of tokens masked.",
                     lower_bound=0, upper_bound=1)
  flags.DEFINE_integer("dupe_factor", 40, "Passes over the data, each with "
                       "different masks.", lower_bound=1)
  flags.DEFINE_float("short_seq_prob", 0.1, "Share of documents (per pass) "
                     "whose sequences are shorter than max_seq_length.",
                     lower_bound=0, upper_bound=1)
  flags.DEFINE_integer("ngram", 3, "Longest masked n-gram, p(n) ∝ 1/n.",
                       lower_bound=1)
  flags.DEFINE_bool("favor_shorter_ngram", True, "p(n) ∝ 1/n, else uniform.")
  flags.DEFINE_integer("random_seed", 12345, "Seed mixed into each "
                       "document's seed.")
  flags.DEFINE_bool("random_next_sentence", False, "BERT's NSP instead of "
                    "SOP.")
  flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words.")
  flags.DEFINE_integer("num_shards", 4, "TFRecord files to write.",
                       lower_bound=1)
  flags.DEFINE_bool("overwrite", False, "Replace a previous run's output in "
                    "--output_dir (or the --output_file).")
  flags.DEFINE_integer("max_line_bytes", 100_000, "Documents with a longer "
                       "line are skipped as junk.", lower_bound=1)
  flags.DEFINE_bool("skip_bad_inputs", False, "A truncated or corrupt "
                    "compressed input file is an error; with this flag its "
                    "complete documents before the damage are kept, the "
                    "rest is skipped, and the skip is logged and listed in "
                    "summary.json and manifest.json.")
  flags.DEFINE_integer("max_sentences_per_document", 10_000, "Documents with "
                       "more sentences (lines) are counted and logged as a "
                       "warning: blank lines between documents missing?",
                       lower_bound=1)
  flags.DEFINE_bool("verbose", False, "Show the traceback of an error instead "
                    "of one line.")
  flags.DEFINE_float("progress_interval_secs", 10.0, "Seconds between two "
                     "progress lines in the log.")
  flags.DEFINE_string("input_file_mode", "r", "Accepted for the original's "
                      "commands; ignored.")
  flags.DEFINE_bool("do_permutation", False, "Accepted for the original's "
                    "commands; ignored.")
  flags.DEFINE_bool("parallel", False, "Accepted for the original's commands; "
                    "ignored.")
  return flags.FLAGS


def _parse_flags(argv):
  # Beam's pipeline options (--runner, --direct_num_workers, ...) are kept
  # for PipelineOptions; any other unknown flag is a one-line error, before
  # anything is read or written.
  def beam_options_among(args):
    _, unknown = parse_pipeline_args(args)
    return unknown, beam_option_names()
  return cli_errors.flags_parser(argv, beam_options_among)


def _instance_options(FLAGS):  # pylint: disable=invalid-name
  try:
    return instances_lib.InstanceOptions(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        ngram=FLAGS.ngram,
        favor_shorter_ngram=FLAGS.favor_shorter_ngram,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        random_next_sentence=FLAGS.random_next_sentence,
        random_seed=FLAGS.random_seed)
  except ValueError as e:  # "<field> must be ...": the field is the flag.
    field = str(e).split(" ", 1)[0]
    raise ValueError(cli_errors.error_line(str(e), f"--{field}")) from e


def main(argv):
  from absl import flags
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  for name, reason in _IGNORED_ORIGINAL_FLAGS.items():
    if FLAGS[name].present:
      _LOGGER.info("--%s is ignored here: %s", name, reason)
  if not FLAGS.input_file:
    raise cli_errors.CommandLineError(cli_errors.error_line(
        "a required flag is missing", "--input_file",
        "e.g. --input_file=demo_output/corpus/peoples_daily/train.txt"))
  if FLAGS.output_dir and FLAGS.output_file:
    raise cli_errors.CommandLineError(cli_errors.error_line(
        "two outputs given", "--output_dir and --output_file",
        "pass one: --output_dir for shards, summary.json, _SUCCESS and "
        "manifest.json, --output_file for one TFRecord file as the "
        "original"))
  if not FLAGS.output_dir and not FLAGS.output_file:
    raise cli_errors.CommandLineError(cli_errors.error_line(
        "no output given", "--output_dir or --output_file",
        "e.g. --output_dir=demo_output/tfrecords/train"))
  common = dict(spm_model_file=FLAGS.spm_model_file,
                vocab_file=FLAGS.vocab_file,
                do_lower_case=FLAGS.do_lower_case,
                options=_instance_options(FLAGS),
                dupe_factor=FLAGS.dupe_factor, overwrite=FLAGS.overwrite,
                pipeline_args=argv[1:], max_line_bytes=FLAGS.max_line_bytes,
                skip_bad_inputs=FLAGS.skip_bad_inputs,
                max_sentences_per_document=FLAGS.max_sentences_per_document,
                progress_interval_secs=FLAGS.progress_interval_secs)
  if FLAGS.output_file:
    output_files = output_file_paths(FLAGS.output_file)
    if FLAGS["num_shards"].present and FLAGS.num_shards != len(output_files):
      raise cli_errors.CommandLineError(cli_errors.error_line(
          f"--num_shards={FLAGS.num_shards} but {len(output_files)} output "
          "files", "--output_file", "with --output_file there is one shard "
          "per file; drop --num_shards"))
    summary = run_pipeline_to_files(output_files, FLAGS.input_file, **common)
  else:
    summary = run_pipeline(FLAGS.input_file, FLAGS.output_dir,
                           num_shards=FLAGS.num_shards, **common)
  # With --output_file there is no summary.json: say where the records went.
  print(json.dumps({k: summary[k] for k in (
      "instances", "tokens", "masked_lm_rate", "next_sentence_label_1_fraction",
      "ngram_ratio", "documents") + (("shards",) if FLAGS.output_file else ())},
                   indent=1))


if __name__ == "__main__":
  from absl import app
  # A bad input file fails the pipeline in a worker, and Beam logs that
  # worker error with its traceback; the one `error:` line names the file
  # (--verbose shows the traceback).
  if "--verbose" not in sys.argv:
    for _name in ("apache_beam.runners.common",
                  "apache_beam.runners.portability.local_job_service",
                  "apache_beam.runners.worker.sdk_worker"):
      logging.getLogger(_name).addFilter(
          lambda record: "<<bad-input>>" not in record.getMessage())
  _define_flags()
  app.run(cli_errors.one_line_errors(main), flags_parser=_parse_flags)
