"""The Beam pipeline of data prep: its DoFns, and build_pipeline.

Planned byte ranges (data_prep.reading.plan_reads) -> Create (spreads the
ranges over the workers) -> one ParDo per range reads its documents,
tokenizes them (tokenizer loaded in `DoFn.setup`), makes the instances and
masks (`data_prep.instances`) and serializes them -> GroupByKey on the shard
(a hash of each serialized record) -> write each shard in hash order
(`WriteShardFn`) -> GroupByKey on one key -> summary.json (`FinishOutputFn`).
NSP (--random_next_sentence) needs the pool of random documents first: the
ranges' tokenized documents and pool candidates go through two GroupByKeys
(pool, then pool with each range's documents) before the instances.

Only Create, ParDo and GroupByKey, which every runner has (the DaskRunner
little more): no side inputs, combiners, tagged outputs or finish_bundle
output. The summary's counts travel as elements under SUMMARY_KEY; Beam
counters only feed the progress lines. Seeds and shard places come from the
content (data_prep/README.md, "Behaviour worth knowing"), so any runner and
worker count write the same shards. No TensorFlow: every worker imports
this module.
"""

import hashlib
import itertools
import os
import uuid

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from data_prep import beam_compat
from data_prep import example_encoder
from data_prep import instances as instances_lib
from data_prep import outputs
from data_prep import progress as progress_lib
from data_prep import reading

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


def record_sort_key(record):
  """A record's place in the output: a 64-bit hash of its bytes. The shard
  is sort_key % num_shards, written in sort_key order: the original's global
  shuffle of instances, depending only on the records."""
  digest = hashlib.blake2b(record, digest_size=8,
                           person=b"albert-shard").digest()
  return int.from_bytes(digest, "little")


# Keys of the (key, value) elements that go through the pipeline's
# GroupByKeys besides the shard indexes (0 .. num_shards - 1) and the read
# range indexes: the summary's parts, the NSP document pool, and the last
# step's inputs.
SUMMARY_KEY = -1
_POOL_KEY = -2
_FINAL_KEY = -3


def _add_counts(into, counts):
  for key, value in counts.items():
    into[key] = into.get(key, 0) + value
  return into


class _RangeFn(beam.DoFn):
  """Reads and tokenizes the documents of one planned byte range.

  `_documents(read_range, counts)` yields them, adds documents read and
  skipped to `counts` and leaves the range's report, (path, {"documents",
  "over_max_sentences", "max_sentences", "error"}), in self._report for
  summary.json and the manifest. A truncated or corrupt compressed file
  raises BadInputError; with skip_bad_inputs its complete documents before
  the damage are kept and the report carries the error.
  """

  def __init__(self, read_options, tokenizer_args):
    (self._max_line_bytes, self._max_sentences, self._skip_bad_inputs,
     self._file_sizes) = read_options
    self._tokenizer_args = tokenizer_args
    self._tokenizer = None
    self._counters = {}
    self._report = None

  def setup(self):
    # May run more than once per worker; loading is idempotent.
    from albert_tf.data import tokenization
    self._tokenizer = tokenization.load_tokenizer(**self._tokenizer_args)
    self._counters = {  # the progress lines' (module doc)
        name: Metrics.counter(progress_lib.NAMESPACE, name)
        for name in ["inputs_skipped", "documents_over_max_sentences",
                     progress_lib.INPUT_BYTES, progress_lib.DOCUMENTS_READ,
                     progress_lib.INSTANCES] + [
                         f"skipped_{r}" for r in reading.SKIP_REASONS]}

  def _documents(self, read_range, counts):
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
        self._counters[progress_lib.DOCUMENTS_READ].inc()
        _add_counts(counts, {"documents_read": 1})
        reason, document = tokenize_raw_document(self._tokenizer,
                                                 raw_document)
        if reason is not None:
          self._counters[f"skipped_{reason}"].inc()
          _add_counts(counts, {f"skipped_{reason}": 1})
          continue
        yield document
    except reading.BadInputError as e:
      if not self._skip_bad_inputs:
        raise
      # The launcher logs it from summary.json (a worker's log may be
      # out of sight).
      self._counters["inputs_skipped"].inc()
      report["error"] = e.detail
    # The planned bytes of the range, once it is read: the launcher's ETA
    # is the share of the input's bytes done (see data_prep.progress).
    size = self._file_sizes.get(path, 0)
    self._counters[progress_lib.INPUT_BYTES].inc(
        max(0, (size if end is None else end) - start))
    self._report = (path, report)

  def _summary_parts(self, counts):
    """The (SUMMARY_KEY, ...) elements of the range just read."""
    yield SUMMARY_KEY, ("input", self._report)
    yield SUMMARY_KEY, ("counts", counts)


class _RecordBuffer:
  """Records held per shard, handed out as (shard, [(sort key, record), ...])
  groups of up to _RECORD_BUFFER_BYTES in all: the GroupByKey then moves a
  few large elements, not one per record (most of the DirectRunner's cost)."""

  def __init__(self, options, vocab, dupe_factor, num_shards, counts,
               instances_counter):
    self._args = (options, vocab, dupe_factor)
    self._num_shards = num_shards
    self._counts = counts
    self._instances_counter = instances_counter
    self._buffer, self._buffered_bytes = {}, 0

  def add(self, document, random_documents=()):  # yields groups when full
    records, stats = document_to_records(document, *self._args,
                                         random_documents)
    self._instances_counter.inc(len(records))
    _add_counts(self._counts, stats)
    for record in records:
      key = record_sort_key(record)
      self._buffer.setdefault(key % self._num_shards, []).append(
          (key, record))
      self._buffered_bytes += len(record)
    if self._buffered_bytes >= _RECORD_BUFFER_BYTES:
      yield from self.flush()

  def flush(self):
    buffer, self._buffer, self._buffered_bytes = self._buffer, {}, 0
    yield from buffer.items()


class RangeToRecordsFn(_RangeFn):
  """(index, (path, start, end)) -> (shard, [(sort key, record), ...])
  groups of its documents' records, then its summary parts (SOP)."""

  def __init__(self, read_options, tokenizer_args, record_args):
    super().__init__(read_options, tokenizer_args)
    self._record_args = record_args

  def process(self, indexed_range):
    _, read_range = indexed_range
    counts = {}
    records = _RecordBuffer(*self._record_args, counts,
                            self._counters[progress_lib.INSTANCES])
    for document in self._documents(read_range, counts):
      yield from records.add(document)
    yield from records.flush()
    yield from self._summary_parts(counts)


class RangeToDocumentsFn(_RangeFn):
  """NSP, before the document pool exists: (index, (path, start, end)) ->
  (index, ("documents", [document, ...])) chunks, the range's pool
  candidates (the _RANDOM_DOCUMENT_POOL_SIZE documents with the smallest
  fingerprints) under _POOL_KEY, and its summary parts."""

  def process(self, indexed_range):
    index, read_range = indexed_range
    chunk, chunk_tokens, candidates, counts = [], 0, [], {}
    for document in self._documents(read_range, counts):
      chunk.append(document)
      chunk_tokens += sum(map(len, document))
      candidates.append((instances_lib.document_fingerprint(document),
                         document))
      if len(candidates) > 2 * _RANDOM_DOCUMENT_POOL_SIZE:
        candidates = _smallest(candidates)
      if chunk_tokens * 8 >= _RECORD_BUFFER_BYTES:
        yield index, ("documents", chunk)
        chunk, chunk_tokens = [], 0
    if chunk:
      yield index, ("documents", chunk)
    yield _POOL_KEY, ("pool", _smallest(candidates))
    yield from self._summary_parts(counts)


def _smallest(candidates):
  return sorted(candidates, key=lambda kv: kv[0])[:_RANDOM_DOCUMENT_POOL_SIZE]


class ShareDocumentPoolFn(beam.DoFn):
  """NSP: merges the ranges' pool candidates into the pool and hands it to
  every range (num_ranges of them); other groups pass through."""

  def __init__(self, num_ranges):
    self._num_ranges = num_ranges

  def process(self, group):
    key, values = group
    if key == _POOL_KEY:
      pool = _smallest(itertools.chain.from_iterable(
          candidates for _, candidates in values))
      for index in range(self._num_ranges):
        yield index, ("pool", pool)
    else:
      for value in values:
        yield key, value


class DocumentsToRecordsFn(beam.DoFn):
  """NSP: (range index, [its document chunks and the pool]) -> shard groups
  of its records, and their counts; summary parts pass through."""

  def __init__(self, record_args):
    self._record_args = record_args
    self._instances_counter = None

  def setup(self):
    self._instances_counter = Metrics.counter(progress_lib.NAMESPACE,
                                              progress_lib.INSTANCES)

  def process(self, group):
    key, values = group
    if key == SUMMARY_KEY:
      for value in values:
        yield key, value
      return
    values = list(values)
    pool = next((p for kind, p in values if kind == "pool"), ())
    counts = {}
    records = _RecordBuffer(*self._record_args, counts,
                            self._instances_counter)
    for kind, chunk in values:
      if kind == "documents":
        for document in chunk:
          yield from records.add(document, pool)
    yield from records.flush()
    yield SUMMARY_KEY, ("counts", counts)


class WriteShardFn(beam.DoFn):
  """(shard index, lists of (sort key, record)) -> one TFRecord file, and
  (_FINAL_KEY, ("shard", (path, records))); the summary's parts go on to
  the last step under _FINAL_KEY.

  By hand, as beam.io.WriteToTFRecord deals records round-robin in arrival
  order (shards differ between runs; on the DirectRunner a document's
  instances and dupes end up adjacent). A shard holds the records whose sort
  key falls in it, in key order, with Beam's TFRecord framing, sorted in
  memory (choose --num_shards for a few hundred MB each), written under a
  temporary name and renamed: a retried or killed bundle leaves no partial
  shard under the final name.
  """

  def __init__(self, output_dir, num_shards):
    self._output_dir = output_dir
    self._num_shards = num_shards

  def process(self, shard):
    index, groups = shard
    if index == SUMMARY_KEY:
      for value in groups:
        yield _FINAL_KEY, value
      return
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
    yield _FINAL_KEY, ("shard", (final, len(keyed_records)))


class FinishOutputFn(beam.DoFn):
  """(_FINAL_KEY, [("shard", ...), ("counts", ...), ("input", ...)]) ->
  summary.json (outputs.finish_output); yields its path."""

  def __init__(self, output_dir, options, dupe_factor, num_shards):
    self._args = (output_dir, options, dupe_factor, num_shards)

  def process(self, group):
    _, values = group
    parts = {"shard": [], "counts": [], "input": []}
    for kind, value in values:
      parts[kind].append(value)
    counts = {}
    for part in parts["counts"]:
      _add_counts(counts, part)
    output_dir, options, dupe_factor, num_shards = self._args
    outputs.finish_output(counts, output_dir, options, dupe_factor,
                          num_shards, parts["shard"], parts["input"])
    yield FileSystems.join(output_dir, outputs.SUMMARY_FILE)


def build_pipeline(pipeline, read_ranges, output_dir, tokenizer, options,
                   dupe_factor, num_shards, max_line_bytes,
                   max_sentences_per_document=10_000, skip_bad_inputs=False,
                   file_sizes=None):
  """Adds the transforms to `pipeline` (module doc). file_sizes: {input
  path: bytes}, for the input_bytes counter of a range read to its end."""
  vocab = instances_lib.Vocab.from_tokenizer(tokenizer)
  read_options = (max_line_bytes, max_sentences_per_document,
                  skip_bad_inputs, file_sizes or {})
  tokenizer_args = dict(
      spm_model_file=(tokenizer.model_file
                      if tokenizer.kind == "sentencepiece" else None),
      vocab_file=(tokenizer.model_file
                  if tokenizer.kind == "wordpiece" else None),
      do_lower_case=tokenizer.do_lower_case)
  record_args = (options, vocab, dupe_factor, num_shards)
  # Create spreads the ranges over the workers: no raw text (nor, for SOP,
  # documents) moves through a shuffle.
  ranges = pipeline | "PlanReads" >> beam.Create(list(enumerate(read_ranges)))
  if options.random_next_sentence:
    groups = (
        ranges
        | "ReadDocuments" >> beam.ParDo(RangeToDocumentsFn(
            read_options, tokenizer_args))
        | "GroupByRange" >> beam.GroupByKey()
        | "ShareDocumentPool" >> beam.ParDo(ShareDocumentPoolFn(
            len(read_ranges)))
        | "GroupWithPool" >> beam.GroupByKey()
        | "MakeInstances" >> beam.ParDo(DocumentsToRecordsFn(record_args)))
  else:
    groups = ranges | "MakeInstances" >> beam.ParDo(RangeToRecordsFn(
        read_options, tokenizer_args, record_args))
  _ = (
      groups
      | "GroupByShard" >> beam.GroupByKey()
      | "WriteShards" >> beam.ParDo(WriteShardFn(output_dir, num_shards))
      | "GatherSummary" >> beam.GroupByKey()
      | "FinishOutput" >> beam.ParDo(FinishOutputFn(
          output_dir, options, dupe_factor, num_shards)))
