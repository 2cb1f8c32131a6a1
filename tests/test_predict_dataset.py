"""`albert-predict --task=<dataset> --data_dir=DIR`: a benchmark's own files.

A tiny random-weight pair classifier of labels "0"/"1" (tests/
test_family_serving.py's) predicts a FewCLUE BUSTM directory written here
in the official layout (train_0.json, dev_0.json, test_public.json
labelled; test.json with ids, no labels). The written ids, predictions and
submission lines are checked against `albert_tf.load(...).predict` on the
same texts, the printed scores against sklearn, the majority baseline
against a count by hand.
"""

import dataclasses
import json
import os
import subprocess
import sys
from unittest import mock

import pytest
from sklearn import metrics as skm

import albert_tf
from albert_tf import predict as predict_cli
from tests import test_family_serving as fs
from tests.test_quiet_logs import _TF_LINE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

S1 = ["今天很好", "差", "张明在北京", "李华去了上海", "很好的今天", "是的",
      "the fox 很好", "red dog"]
S2 = ["他说很好", "是的", "今天", "北京", "差", "很好", "今天 red", "fox"]
# train_0: "1" five times, "0" three times: the majority class is "1".
TRAIN = ["1", "0", "1", "1", "0", "1", "0", "1"]
DEV = ["0", "0", "1", "0", "1", "0"]
TEST_PUBLIC = ["1", "1", "0", "1", "0", "1"]
SUBMIT_IDS = [7, 3, 11, 0, 5]


def _lines(path, rows):
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                          for r in rows), encoding="utf-8")


def _pairs(n, shift):
  return [(S1[(i + shift) % 8], S2[(i * 3 + shift) % 8]) for i in range(n)]


@pytest.fixture(scope="module")
def bustm(tmp_path_factory):
  """(model folder, data_dir) of a "0"/"1" pair classifier and BUSTM's files."""
  root = tmp_path_factory.mktemp("bustm")
  record = dataclasses.replace(fs.RECORDS["classification"], num_labels=2,
                               label_list=["0", "1"], task_name="bustm_0")
  with mock.patch.dict(fs.RECORDS, {"classification": record}):
    fs._make(root / "model", "classification")  # pylint: disable=protected-access
  data = root / "bustm"
  data.mkdir()
  for name, labels, shift in (("train_0.json", TRAIN, 0),
                              ("dev_0.json", DEV, 1),
                              ("test_public.json", TEST_PUBLIC, 2)):
    _lines(data / name, [
        {"id": i, "sentence1": a, "sentence2": b, "label": label}
        for i, ((a, b), label) in enumerate(zip(_pairs(len(labels), shift),
                                                labels))])
  _lines(data / "test.json", [
      {"id": i, "sentence1": a, "sentence2": b}
      for i, (a, b) in zip(SUBMIT_IDS, _pairs(len(SUBMIT_IDS), 3))])
  return str(root / "model"), data


def _run(model, data, **flags):
  printed = []
  args = predict_cli.PredictArgs(model=model, task="bustm_0",
                                 data_dir=str(data), **flags)
  return predict_cli.run(args, log=printed.append), printed


def test_reads_scores_and_writes_the_submission(bustm, tmp_path):
  model, data = bustm
  result, printed = _run(model, data, output_file=str(tmp_path / "rows.jsonl"),
                         submission_file=str(tmp_path))
  predictor = albert_tf.load(model)

  def labels(pairs):
    return [r["label"] for r in predictor.predict(
        [a for a, _ in pairs], texts_b=[b for _, b in pairs])]

  # The submission: BUSTM's name for split 0, test.json's ids in file
  # order, one line each, the model's label of each line.
  submission = tmp_path / "bustm_predict_0.json"
  assert result["submission"] == str(submission)
  lines = [json.loads(l) for l in submission.read_text().splitlines()]
  assert lines == [{"id": i, "label": l} for i, l in zip(
      SUBMIT_IDS, labels(_pairs(len(SUBMIT_IDS), 3)))]

  # Scores of the labelled splits: sklearn's on the model's labels; the
  # majority baseline is train's "1", so its accuracy is the share of "1".
  for split, gold, shift in (("dev", DEV, 1), ("test", TEST_PUBLIC, 2)):
    predicted = labels(_pairs(len(gold), shift))
    scores = result[split]["metrics"]
    assert scores["accuracy"] == pytest.approx(
        skm.accuracy_score(gold, predicted))
    assert f"[{split}] accuracy={scores['accuracy']:.4f}" in "\n".join(printed)
    majority = result[split]["baselines"]["majority"]
    assert majority["accuracy"] == pytest.approx(gold.count("1") / len(gold))
    assert set(result[split]["baselines"]) == {"majority", "tfidf"}
  assert result["submit"] == {"rows": 5, "metrics": {}, "baselines": {}}
  assert "train" not in result

  # Every predicted row, with its split, id and file:line.
  rows = [json.loads(l) for l in (tmp_path / "rows.jsonl").read_text(
      encoding="utf-8").splitlines()]
  assert [(r["split"], r["id"]) for r in rows] == (
      [("dev", i) for i in range(6)] + [("test", i) for i in range(6)] +
      [("submit", i) for i in SUBMIT_IDS])
  assert rows[-1]["line"] == f"{data / 'test.json'}:5"
  assert rows[0]["gold"] == "0" and rows[-1]["gold"] == ""


def test_a_fuller_submission_is_not_replaced(bustm, tmp_path):
  model, data = bustm
  fuller = tmp_path / "mine.json"
  fuller.write_text("".join(json.dumps({"id": i, "label": "0"}) + "\n"
                            for i in range(6)))
  before = fuller.read_text()
  with pytest.raises(predict_cli.PredictError, match=(
      r"mine.json holds 6 lines, this one would hold 5 .*not replaced")):
    _run(model, data, submission_file=str(fuller))
  assert fuller.read_text() == before


@pytest.mark.parametrize("flags, message", [
    ({"task": "c3"}, "albert-predict reads the classification datasets' "
                     "files, not multiple_choice's"),
    ({"task": "classification"}, "is a task family; name one of its datasets"),
    ({"task": "afqmc", "data_dir": "."},
     r"--data_dir=\.: none of afqmc's files \(dev.json, test.json\)"),
    ({"task": "bustm_0", "input_file": "x.tsv"}, "--input_file or --task"),
])
def test_refusals(bustm, flags, message, tmp_path, monkeypatch):
  model, data = bustm
  monkeypatch.chdir(tmp_path)  # "." holds no file
  args = predict_cli.PredictArgs(model=model, **{"data_dir": str(data),
                                                 **flags})
  with pytest.raises(predict_cli.PredictError, match=message):
    predict_cli.run(args, log=lambda _: None)


def test_a_model_of_other_labels_is_refused(bustm, tmp_path):
  _, data = bustm
  fs._make(tmp_path / "three", "classification")  # pylint: disable=protected-access
  with pytest.raises(predict_cli.PredictError, match=(
      r"a classification model of pairs, labels \['neg', 'mid', 'pos'\]; "
      r"--task=bustm_0 reads pairs, labels \['0', '1'\]")):
    _run(str(tmp_path / "three"), data)


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_command_line_prints_no_tensorflow_lines(bustm, tmp_path):
  """As a user runs it (a fresh process, no TF_CPP_MIN_LOG_LEVEL): the
  scores, the submission, and none of TF's start-up or first-kernel lines
  (cuInit, oneDNN's DT_INT64 note), which --verbose keeps."""
  model, data = bustm
  env = dict(os.environ, PYTHONPATH=ROOT)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  argv = [sys.executable, "-m", "albert_tf.predict", f"--model={model}",
          "--task=bustm_0", f"--data_dir={data}"]
  proc = subprocess.run(argv + [f"--submission_file={tmp_path}"], env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "[dev] baselines fitted on" in proc.stdout
  assert len((tmp_path / "bustm_predict_0.json").read_text().splitlines()) == 5
  assert _TF_LINE.findall(proc.stderr) == [], proc.stderr[-3000:]
  loud = subprocess.run(argv + ["--verbose"], env=env, capture_output=True,
                        text=True, timeout=300, check=False)
  assert loud.returncode == 0, loud.stderr[-3000:]
  assert _TF_LINE.findall(loud.stderr)
