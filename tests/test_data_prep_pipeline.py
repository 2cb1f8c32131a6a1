"""data_prep.pipeline: the Beam pipeline end to end on real text.

Two Beam runs over the same corpus (People's Daily subset + every kind of bad
input, plain and gzip files): in-process with one worker reading each file
whole, and with two worker processes reading the plain file in small byte
ranges. They must write byte-identical shards, whose records must equal the
records of the plain per-document functions on the good documents only.
"""

import bz2
import glob
import gzip
import json
import logging
import lzma
import os
import zlib

import pytest
import tensorflow as tf
import zstandard

from albert_tf.core import features as F
from albert_tf.data import tokenization
from data_prep import instances as inst
from data_prep import outputs
from data_prep import pipeline
from data_prep import reading
from data_prep import transforms
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401 pylint: disable=unused-import

SEQ, PRED = 64, 10
OPTIONS = inst.InstanceOptions(max_seq_length=SEQ, max_predictions_per_seq=PRED)
DUPE = 2
MAX_LINE_BYTES = 5000
NUM_GOOD = 120  # documents of the subset used (split over two files)

# Bad documents, each separated by blank lines, with their skip reason.
BAD_DOCUMENTS = [
    (b"\xff\xfe broken \xc3\x28 utf-8\nsecond line\n", "invalid_utf8"),
    (b"\xe4\xb8\xad\xe6\x96\x87 then \xed\xa0\x80 a surrogate\nmore\n",
     "invalid_utf8"),
    (bytes(b for b in range(256) if b not in b"\r\n") + b"\n", "binary"),
    ("ok text\n\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c\x0e\x0f\n"
     .encode("utf-8"), "binary"),
    ("\u3000\u3000\n\u200b\n".encode("utf-8"), "empty"),
    ("这是唯一的一句话。\n".encode("utf-8"), "single_sentence"),
    (("很长" * 5000 + "。\n第二句。\n").encode("utf-8"), "line_too_long"),
]

# The original ALBERT record format, written out here rather than imported,
# so that a change to albert_tf.core.features cannot silently pass this test.
ORIGINAL_SPEC = {
    "input_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
    "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
    "token_boundary": tf.io.FixedLenFeature([SEQ], tf.int64),
    "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
    "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
    "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
}


def _doc_bytes(document):
  return "\n".join(document).encode("utf-8") + b"\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, pd_corpus):  # pylint: disable=redefined-outer-name
  """Input glob and the good documents it contains."""
  directory = tmp_path_factory.mktemp("bad_corpus")
  good = [d for d in pd_corpus[1] if len(d) >= 2][:NUM_GOOD]
  half = len(good) // 2
  parts = []
  for i, document in enumerate(good[:half]):
    parts.append(_doc_bytes(document))
    if i < len(BAD_DOCUMENTS):
      parts.append(BAD_DOCUMENTS[i][0])
  # CRLF line ends, several blank lines between documents, no final newline.
  text = b"\n\n\n".join(parts).replace(b"\n", b"\r\n").rstrip(b"\r\n")
  (directory / "part-0.txt").write_bytes(text)
  with gzip.open(directory / "part-1.txt.gz", "wb") as f:
    f.write(b"\n\n".join(_doc_bytes(d) for d in good[half:]))
  return str(directory / "part-*"), good


def _run(corpus_glob, spm, output_dir, pipeline_args, overwrite=False,
         split_bytes=None):
  return pipeline.run_pipeline(
      corpus_glob, output_dir, spm_model_file=spm, options=OPTIONS,
      dupe_factor=DUPE, num_shards=3, overwrite=overwrite,
      pipeline_args=pipeline_args, max_line_bytes=MAX_LINE_BYTES,
      split_bytes=split_bytes)


def _records(output_dir):
  shards = sorted(glob.glob(os.path.join(output_dir, "pretrain-*")))
  return shards, sorted(r for s in shards
                        for r in tf.data.TFRecordDataset(s).as_numpy_iterator())


@pytest.fixture(scope="module")
def runs(corpus, spm_model, tmp_path_factory):  # pylint: disable=redefined-outer-name
  """{workers: (output_dir, summary)} for 1 (in-process) and 2 processes."""
  results = {}
  for workers, args, split_bytes in (
      (1, ["--runner=DirectRunner", "--direct_num_workers=1"], None),
      # About ten ranges for the plain file (the gzip one stays whole).
      (2, ["--runner=DirectRunner", "--direct_num_workers=2",
           "--direct_running_mode=multi_processing"], 4000)):
    out = str(tmp_path_factory.mktemp(f"out{workers}"))
    results[workers] = out, _run(corpus[0], spm_model, out, args,
                                 split_bytes=split_bytes)
  return results


def _read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def test_same_shards_with_one_and_two_workers(runs):
  shards_1, records_1 = _records(runs[1][0])
  shards_2, _ = _records(runs[2][0])
  names = [f"pretrain-0000{i}-of-00003.tfrecord" for i in range(3)]
  assert [os.path.basename(s) for s in shards_1] == names
  assert [os.path.basename(s) for s in shards_2] == names
  assert len(records_1) == runs[1][1]["instances"] > 500
  # Same files byte for byte, not just the same set of records.
  assert [_read_bytes(s) for s in shards_1] == [_read_bytes(s)
                                                for s in shards_2]
  assert runs[1][1]["documents"] == runs[2][1]["documents"]
  for output_dir, _ in runs.values():  # No temporary file left behind.
    assert not [n for n in os.listdir(output_dir) if n.startswith(".tmp-")]


def test_shards_hold_records_in_sort_key_order(runs):
  """The documented placement: shard = key % num_shards, key order inside."""
  shards, _ = _records(runs[2][0])
  sizes = []
  for index, shard in enumerate(shards):
    keys = [transforms.record_sort_key(r)
            for r in tf.data.TFRecordDataset(shard).as_numpy_iterator()]
    assert keys == sorted(keys)
    assert {k % len(shards) for k in keys} == {index}
    sizes.append(len(keys))
  # A hash spreads records evenly: each shard within 25% of the mean.
  mean = sum(sizes) / len(sizes)
  assert all(abs(n - mean) < 0.25 * mean for n in sizes), sizes


def test_skipped_documents_counted_and_good_ones_all_present(runs, corpus,
                                                             spm_model):
  good = corpus[1]
  summary = runs[1][1]
  expected_skips = {reason: 0 for reason in reading.SKIP_REASONS}
  for _, reason in BAD_DOCUMENTS:
    expected_skips[reason] += 1
  assert summary["documents"] == {
      "read": len(good) + len(BAD_DOCUMENTS), "used": len(good),
      "skipped": expected_skips}
  # Exactly the records of the plain functions over the good documents.
  tokenizer = tokenization.load_tokenizer(spm_model_file=spm_model)
  vocab = inst.Vocab.from_tokenizer(tokenizer)
  expected = []
  for document in good:
    raw = (tuple(s.encode("utf-8") for s in document), False)
    reason, tokenized = transforms.tokenize_raw_document(tokenizer, raw)
    assert reason is None
    expected.extend(transforms.document_to_records(tokenized, OPTIONS, vocab,
                                                   DUPE)[0])
  assert sorted(expected) == _records(runs[1][0])[1]


def test_records_parse_with_original_spec_and_match_summary(runs):
  output_dir, summary = runs[1]
  shards, records = _records(output_dir)
  parsed = tf.data.TFRecordDataset(shards).map(
      lambda r: tf.io.parse_single_example(r, ORIGINAL_SPEC))
  tokens = masked = label_1 = 0
  for f in parsed.as_numpy_iterator():
    n = int(f["input_mask"].sum())
    assert f["input_mask"][:n].all() and not f["input_mask"][n:].any()
    assert f["input_ids"][0] == 2 and f["input_ids"][n - 1] == 3
    assert not f["input_ids"][n:].any() and not f["segment_ids"][n:].any()
    k = int(f["masked_lm_weights"].sum())
    assert 1 <= k <= PRED and f["masked_lm_weights"][:k].all()
    assert (f["masked_lm_positions"][:k] < n).all()
    assert not f["masked_lm_positions"][k:].any()
    tokens, masked, label_1 = (tokens + n, masked + k,
                               label_1 + int(f["next_sentence_labels"][0]))
  assert summary["tokens"] == tokens and summary["masked_tokens"] == masked
  assert summary["next_sentence_labels"] == {
      "0": len(records) - label_1, "1": label_1}
  assert 0.14 <= summary["masked_lm_rate"] <= 0.16
  assert abs(summary["next_sentence_label_1_fraction"] - 0.5) < 0.05
  assert set(summary["ngram_lengths"]) == {"1", "2", "3"}
  assert os.path.exists(os.path.join(output_dir, "_SUCCESS"))
  with open(os.path.join(output_dir, "summary.json"), encoding="utf-8") as f:
    assert json.load(f) == summary


def test_manifest_is_written_last_and_matches_the_shards(runs, corpus):
  manifests = []
  for output_dir, summary in runs.values():
    with open(os.path.join(output_dir, F.MANIFEST_FILE),
              encoding="utf-8") as f:
      manifest = json.load(f)
    shards = _records(output_dir)[0]
    assert {n: e["records"] for n, e in manifest["shards"].items()} == {
        os.path.basename(s): sum(1 for _ in tf.data.TFRecordDataset(s))
        for s in shards} == summary["records_per_shard"]
    assert {n: e["bytes"] for n, e in manifest["shards"].items()} == {
        os.path.basename(s): os.path.getsize(s) for s in shards}
    assert manifest["records"] == manifest["instances"] == summary["instances"]
    assert manifest["documents"] == summary["documents"]
    assert [i["path"] for i in manifest["inputs"]] == sorted(
        glob.glob(corpus[0]))
    assert all(i["error"] is None and i["bytes"] > 0
               for i in manifest["inputs"])
    assert manifest["flags"]["max_seq_length"] == SEQ
    assert len(manifest["tokenizer"]["sha256"]) == 64
    # The _SUCCESS marker is older than (or as old as) the manifest.
    assert os.path.getmtime(os.path.join(output_dir, F.SUCCESS_FILE)) <= (
        os.path.getmtime(os.path.join(output_dir, F.MANIFEST_FILE)))
    manifest["flags"].pop("pipeline_args")
    manifest["flags"].pop("split_bytes")
    manifests.append(manifest)
  assert manifests[0] == manifests[1]  # same whatever the workers


@pytest.mark.parametrize("compress, suffix", [
    (gzip.compress, ".gz"), (bz2.compress, ".bz2"), (lzma.compress, ".xz"),
    (zlib.compress, ".deflate"), (zstandard.compress, ".zst")])
def test_damaged_compressed_input_raises_after_its_complete_documents(
    tmp_path, compress, suffix):
  text = "\n\n".join(f"doc {i} first\ndoc {i} second"
                      for i in range(3000)) + "\n"
  data = compress(text.encode("utf-8"))
  whole = tmp_path / f"whole.txt{suffix}"
  whole.write_bytes(data)
  assert len(list(reading.read_raw_documents(str(whole), 1000))) == 3000
  half = tmp_path / f"half.txt{suffix}"
  half.write_bytes(data[:len(data) // 2])
  documents = []
  with pytest.raises(reading.BadInputError) as raised:
    for document in reading.read_raw_documents(str(half), 1000):
      documents.append(document)
  assert raised.value.path == str(half) and "EOFError" in raised.value.detail
  # Only whole documents, in order, none cut at the damage.
  assert documents == [((f"doc {i} first".encode(), f"doc {i} second".encode()),
                        False) for i in range(len(documents))]
  # The launcher finds file and reason in a runner's wrapped error text.
  assert reading.BadInputError.find_in(
      f"RuntimeError: BadInputError: {raised.value} [while running 'x']") == (
          str(half), raised.value.detail)


def test_clear_errors_before_any_work(runs, corpus, spm_model, tmp_path):
  with pytest.raises(ValueError, match="nothing-here"):
    _run(str(tmp_path / "nothing-here*.txt"), spm_model, str(tmp_path / "o"),
         [])
  junk = tmp_path / "junk.model"
  junk.write_bytes(b"\x00junk")
  with pytest.raises(ValueError, match="junk.model"):
    _run(corpus[0], str(junk), str(tmp_path / "o"), [])
  output_dir = runs[1][0]
  with pytest.raises(ValueError, match="--overwrite"):
    _run(corpus[0], spm_model, output_dir, [])
  assert not os.path.exists(tmp_path / "o")  # Nothing was created.


def test_byte_ranges_read_the_same_documents_as_the_whole_file(tmp_path,
                                                              monkeypatch):
  # Hard cases for a cut: CRLF, runs of empty lines, whitespace-only lines,
  # a long line, a document at the very start and one with no final newline.
  parts = [b"a1\r\na2\r\n", b"\r\n\r\n", b"b1\nb2\n", b" \t\n",
           b"c1\n", b"\n\n\n", b"x" * 300 + b"\nd2\n", b"\n",
           b"e1\ne2\n\n", b"f1\nf2"]
  path = tmp_path / "docs.txt"
  path.write_bytes(b"".join(parts) * 20)
  whole = list(reading.read_raw_documents(str(path), 200))
  assert len(whole) == 20 * 5 + 1  # "f1 f2" runs into the next "a1 a2".
  for split_bytes, scan_chunk in ((1, 64 << 10), (7, 3), (50, 2), (333, 5)):
    # Tiny scan chunks: an empty line split over two reads is still found.
    monkeypatch.setattr(reading, "_SPLIT_SCAN_CHUNK", scan_chunk)
    ranges = reading.plan_reads([str(path)], split_bytes)
    assert len(ranges) > 3
    starts = [start for _, start, _ in ranges]
    assert starts == sorted(set(starts)) and starts[0] == 0
    assert [end for _, _, end in ranges] == starts[1:] + [None]
    pieces = [d for p, start, end in ranges
              for d in reading.read_raw_documents(p, 200, start, end)]
    assert pieces == whole, split_bytes
  gz = tmp_path / "docs.txt.gz"
  with gzip.open(gz, "wb") as f:
    f.write(path.read_bytes())
  assert reading.plan_reads([str(gz)], 50) == [(str(gz), 0, None)]


# Lines 3 and 8 hold only whitespace inside a document and end it; line 6
# follows a blank line (no document open), line 11 is CRLF's empty line.
WHITESPACE_LINES = b"a1\na2\n  \nb1\n\n \t\nc1\n\t\nc2\nd1\r\n\r\ne1\n"


def test_whitespace_only_lines_end_documents_counted_with_their_lines(
    tmp_path):
  path = tmp_path / "spaces.txt"
  path.write_bytes(WHITESPACE_LINES)
  found = {}
  documents = [d for d, _ in reading.read_raw_documents(
      str(path), 200, whitespace_lines=found)]
  assert documents == [(b"a1", b"a2"), (b"b1",), (b"c1",), (b"c2", b"d1"),
                       (b"e1",)]
  assert found == {"count": 2, "places": [f"{path}:3", f"{path}:8"]}
  # Cut at the blank lines 5 and 11: the ranges after the first count the
  # file's lines before them.
  ranges = reading.plan_reads([str(path)], 1)
  assert [start for _, start, _ in ranges] == [
      0, WHITESPACE_LINES.index(b" \t"), WHITESPACE_LINES.index(b"e1")]
  reports = []
  for p, start, end in ranges:
    found = {}
    list(reading.read_raw_documents(p, 200, start, end,
                                    whitespace_lines=found))
    reports.append((p, {"documents": 0, "over_max_sentences": 0,
                        "max_sentences": 0, "error": None,
                        "whitespace_lines": found}))
  merged = outputs.merge_input_reports(reversed(reports))
  assert merged[str(path)]["whitespace_lines"] == {
      "count": 2, "places": [f"{path}:3", f"{path}:8"]}


def test_unicode_whitespace_lines_are_blank_as_str_strip_reads_them(tmp_path):
  # Line 2: ideographic spaces (U+3000), line 5: a no-break space and a
  # tab; line 7 starts with U+3000 and a curly quote but holds text.
  text = ("甲。\n\u3000\u3000\n乙。\n丙。\n\u00a0\t\n丁。\n"
          "\u3000\u201c戊\u201d\n")
  path = tmp_path / "spaces.txt"
  path.write_bytes(text.encode("utf-8"))
  found = {}
  documents = [d for d, _ in reading.read_raw_documents(
      str(path), 200, whitespace_lines=found)]
  assert documents == [("甲。".encode(),), ("乙。".encode(), "丙。".encode()),
                       ("丁。".encode(), "\u3000\u201c戊\u201d".encode())]
  assert found == {"count": 2, "places": [f"{path}:2", f"{path}:5"]}
  for line in text.split("\n"):
    assert reading.is_blank(line.encode()) == (not line.strip()), line
  assert not reading.is_blank(b"\xe3\x80")  # a cut character is text


def test_whitespace_only_lines_are_one_warning_of_the_pipeline(
    spm_model, tmp_path, caplog):  # pylint: disable=redefined-outer-name
  path = tmp_path / "corpus.txt"
  sentences = ["江泽民主席发表讲话。", "北京今天天气很好。", "我们在上海开会。"]
  text = "\n\n".join("\n".join(sentences) for _ in range(6))
  # Two whitespace-only lines inside documents 2 and 5 (lines 6 and 18).
  lines = text.split("\n")
  lines[5] = "   "
  lines[17] = "\t"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  with caplog.at_level(logging.WARNING):
    _run(str(path), spm_model, str(tmp_path / "out"),
         ["--runner=DirectRunner", "--direct_num_workers=1"], split_bytes=40)
  said = [r.getMessage() for r in caplog.records if "whitespace" in
          r.getMessage()]
  assert said == [f"2 line(s) of whitespace only were read as blank lines, "
                  f"each ending a document (first at {path}:6, {path}:18): "
                  "remove the whitespace, or the line if the document goes "
                  "on after it"]


def test_iter_lines_bounds_long_lines():
  import io
  data = b"a\r\n" + b"x" * 50 + b"\nb\n" + b"y" * 30
  lines = list(reading.iter_lines(io.BytesIO(data), max_line_bytes=20))
  assert lines == [(b"a", False), (None, True), (b"b", False), (None, True)]
