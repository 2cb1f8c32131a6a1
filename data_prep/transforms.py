"""The Beam pipeline of data prep: its DoFns, and build_pipeline.

Planned byte ranges (data_prep.reading.plan_reads) -> Create (spreads the
ranges over the workers) -> read the documents of each range -> tokenize
(tokenizer loaded in `DoFn.setup`) -> instances and masking
(`data_prep.instances`) -> GroupByKey on the shard (a hash of each
serialized record) -> write each shard in hash order (`WriteShardFn`);
counts are combined per bundle into summary.json. Every random choice is
seeded from the document's content, the dupe index and --random_seed, and a
record's shard and position come from its bytes, so any runner and any
number of workers write the same shard files, with the instances of a
document (and of its dupes) scattered over them.

This module and what it imports load without TensorFlow: Beam workers import
it in every process.
"""

import hashlib
import itertools
import os
import uuid

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from data_prep import beam_compat
from data_prep import example_encoder
from data_prep import instances as instances_lib
from data_prep import outputs
from data_prep import progress as progress_lib
from data_prep import reading

_STATS_TAG = "stats"
_INPUTS_TAG = "inputs"
# Records a DoFn holds before emitting them grouped by shard.
_RECORD_BUFFER_BYTES = 16 << 20
# NSP: random B segments come from this many documents, the ones with the
# smallest fingerprints, which is the same set whatever the arrival order.
_RANDOM_DOCUMENT_POOL_SIZE = 256


def tokenize_raw_document(tokenizer, raw_document):
  """(skip reason or None, document as a list of segments of token ids)."""
  lines, long_line = raw_document
  reason, texts = reading.classify_raw_document(lines, long_line)
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


def serialize_instance(instance, options):
  """One instance as a serialized tf.train.Example in the original format."""
  return example_encoder.encode_pretraining_example(
      **instances_lib.padded_features(instance, options))


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
        name: Metrics.counter(progress_lib.NAMESPACE, name)
        for name in ("inputs_skipped", "documents_over_max_sentences",
                     progress_lib.INPUT_BYTES)}

  def process(self, read_range):
    path, start, end = read_range
    report = {"documents": 0, "over_max_sentences": 0, "max_sentences": 0,
              "error": None, "whitespace_lines": {}}
    try:
      for raw_document in reading.read_raw_documents(
          path, self._max_line_bytes, start, end,
          whitespace_lines=report["whitespace_lines"]):
        sentences = len(raw_document[0])
        report["documents"] += 1
        report["max_sentences"] = max(report["max_sentences"], sentences)
        if sentences > self._max_sentences:
          report["over_max_sentences"] += 1
          self._counters["documents_over_max_sentences"].inc()
        yield raw_document
    except reading.BadInputError as e:
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
        name: Metrics.counter(progress_lib.NAMESPACE, name)
        for name in [progress_lib.DOCUMENTS_READ] + [
            f"skipped_{r}" for r in reading.SKIP_REASONS]}

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
    self._instances_counter = Metrics.counter(progress_lib.NAMESPACE,
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
    index, groups = shard
    keyed_records = sorted(itertools.chain.from_iterable(groups))
    final = outputs.shard_name(self._output_dir, index, self._num_shards)
    temp = FileSystems.join(
        self._output_dir, f"{outputs.TEMP_PREFIX}{uuid.uuid4().hex}-"
        f"{os.path.basename(final)}")
    with FileSystems.create(
        temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      for _, record in keyed_records:
        beam_compat.write_tfrecord(f, record)
    FileSystems.rename([temp], [final])
    Metrics.counter(progress_lib.NAMESPACE, progress_lib.RECORDS_WRITTEN).inc(
        len(keyed_records))
    yield final, len(keyed_records)


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
      | "FinishOutput" >> beam.Map(
          outputs.finish_output, output_dir, options, dupe_factor, num_shards,
          beam.pvalue.AsList(shards),
          beam.pvalue.AsList(raw_documents[_INPUTS_TAG])))
