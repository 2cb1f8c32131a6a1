"""CLUE 1.1 and FewCLUE classification from their own files: every
dataset's reader, the rows it skips and counts, a malformed line's error
(file:line), the submission file's exact content, FewCLUE's unlabeled text
as pretraining text, and one fine-tune of `afqmc` end to end.

The files are written here in the official layouts (a few lines each, not
the real data)."""

import json
import logging
import os

import numpy as np
import pytest

from albert_tf.tasks import registry
from albert_tf.data import classifier_data as cd
from albert_tf.data import clue
from albert_tf.data import tokenization
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "甲乙丙丁戊己庚辛问答新闻好差床它手机"


def write_lines(path, rows):
  """JSON lines; a str row is written as it is (a raw or empty line)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(
      (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
      for r in rows), encoding="utf-8")
  return path


# Each task: a labelled record of row i, its (text_a, text_b), and a label.
def _wsc(i):
  return {"text": f"甲{i}放在床上，它响了", "target": {
      "span1_text": "床", "span1_index": 5 if i >= 10 else 4,
      "span2_text": "它", "span2_index": 8 if i >= 10 else 7}, "idx": i}


TASKS = {
    "afqmc": (lambda i: {"sentence1": f"问{i}", "sentence2": f"答{i}"},
              lambda i: (f"问{i}", f"答{i}")),
    "tnews": (lambda i: {"sentence": f"新闻{i}", "label_desc": "news_story",
                         "keywords": "甲,乙"},
              lambda i: (f"新闻{i}", None)),
    "iflytek": (lambda i: {"sentence": f"好{i}", "label_des": "打车"},
                lambda i: (f"好{i}", None)),
    "cmnli": (lambda i: {"sentence1": f"甲{i}", "sentence2": f"乙{i}"},
              lambda i: (f"甲{i}", f"乙{i}")),
    "ocnli": (lambda i: {"sentence1": f"甲{i}", "sentence2": f"乙{i}",
                         "genre": "lit", "level": "easy"},
              lambda i: (f"甲{i}", f"乙{i}")),
    "csl": (lambda i: {"abst": f"摘要{i}", "keyword": ["甲", f"乙{i}"]},
            lambda i: (f"甲 乙{i}", f"摘要{i}")),
    "cluewsc2020": (_wsc, lambda i: (
        f"甲{i}放在_床_上，[它]响了", None)),
    "eprstmt": (lambda i: {"sentence": f"好{i}"}, lambda i: (f"好{i}", None)),
    "bustm": (lambda i: {"sentence1": f"问{i}", "sentence2": f"答{i}"},
              lambda i: (f"问{i}", f"答{i}")),
    "csldcp": (lambda i: {"content": f"摘要{i}"},
               lambda i: (f"摘要{i}", None)),
    "tnewsf": (lambda i: {"sentence": f"新闻{i}", "label_desc": "x",
                          "keywords": ""}, lambda i: (f"新闻{i}", None)),
    "iflytekf": (lambda i: {"sentence": f"好{i}", "label_des": "x"},
                 lambda i: (f"好{i}", None)),
    "ocnlif": (lambda i: {"sentence1": f"甲{i}", "sentence2": f"乙{i}"},
               lambda i: (f"甲{i}", f"乙{i}")),
    "cslf": (lambda i: {"abst": f"摘要{i}", "keyword": [f"乙{i}"]},
             lambda i: (f"乙{i}", f"摘要{i}")),
    "cluewscf": (_wsc, lambda i: (f"甲{i}放在_床_上，[它]响了", None)),
}
FEWCLUE = set(clue.FEWCLUE_TASKS)
# FewCLUE's TNEWS and IFLYTEK write labels as JSON numbers.
NUMERIC_LABELS = {"tnewsf", "iflytekf"}


def spec_of(task, split="0"):
  name = clue.fewclue_dataset_name(task, split) if task in FEWCLUE else task
  return registry.datasets("classification")[name].spec


def labelled(task, i, spec):
  record = dict(TASKS[task][0](i))
  label = spec.label_list[i % len(spec.label_list)]
  record["label"] = int(label) if task in NUMERIC_LABELS else label
  return record


def write_task(root, task, n_train=3, n_test=3, split="0"):
  """The task's files under root; test ids 100, 101, ... (FewCLUE's
  test.json: "t0", "t1", ...)."""
  spec = spec_of(task, split)
  train, dev = spec.files["train"][0], spec.files["dev"][0]
  rows = [labelled(task, i, spec) for i in range(n_train)]
  write_lines(root / train, rows[:1] + [""] + rows[1:])
  write_lines(root / dev, [labelled(task, i, spec) for i in range(2)])
  test = [dict(TASKS[task][0](i), id=100 + i) for i in range(n_test)]
  if task in FEWCLUE:
    write_lines(root / "test_public.json",
                [labelled(task, i, spec) for i in range(n_test + 1)])
    write_lines(root / "test.json",
                [dict(TASKS[task][0](i), id=f"t{i}") for i in range(n_test)])
  else:
    write_lines(root / "test.json", test)
  return spec


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"), CHARS)
  return tokenization.load_tokenizer(vocab_file=str(root / "vocab.txt"))


# ------------------------------------------------------------- reading
@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_dataset_reads_its_layout(task, tmp_path):
  spec = write_task(tmp_path, task)
  texts = TASKS[task][1]
  train, stats = cd.read_examples(spec, str(tmp_path), "train")
  assert stats["examples"] == 3 and stats["empty_lines_skipped"] == 1
  assert [(e.text_a, e.text_b) for e in train] == [texts(i) for i in range(3)]
  assert [e.label for e in train] == [
      spec.label_list[i % len(spec.label_list)] for i in range(3)]
  assert train[0].source.endswith("train_0.json:1" if task in FEWCLUE
                                  else "train.json:1")
  assert train[1].source.endswith(":3")  # after the empty line
  test, _ = cd.read_examples(spec, str(tmp_path), "test")
  if task in FEWCLUE:  # test_public.json: labelled
    assert len(test) == 4 and all(e.label is not None for e in test)
    submit, _ = cd.read_examples(spec, str(tmp_path), "submit")
    assert [e.id for e in submit] == ["t0", "t1", "t2"]
    assert all(e.label is None for e in submit)
  else:  # test.json: unlabelled, its ids kept
    assert [e.id for e in test] == [100, 101, 102]
    assert all(e.label is None for e in test)
  # A record without "id" is named by its place among the JSON lines.
  assert [e.id for e in train] == [0, 1, 2]


def test_registered_names_files_and_submissions():
  data = registry.datasets("classification")
  expected = {"afqmc": "afqmc_predict.json", "tnews": "tnews11_predict.json",
              "iflytek": "iflytek_predict.json",
              "cmnli": "cmnli_predict.json",
              "ocnli": "ocnli_50k_predict.json", "csl": "csl_predict.json",
              "cluewsc2020": "cluewsc11_predict.json"}
  for name, file_name in expected.items():
    spec = data[name].spec
    assert spec.submission == cd.Submission(file_name, "test"), name
    assert spec.files["test"] == ("test.json",)
  assert len(data["tnews"].spec.label_list) == 15
  assert "105" not in data["tnews"].spec.label_list
  assert len(data["iflytek"].spec.label_list) == 119
  assert len(data["csldcp"].spec.label_list) == 67
  assert data["iflytek"].defaults["num_train_epochs"] == 10.0
  for task in clue.FEWCLUE_TASKS:  # the submission stem is the name
    for k in "01234":
      spec = data[f"{task}_{k}"].spec
      assert spec.files["train"] == (f"train_{k}.json",)
      assert spec.files["dev"] == (f"dev_{k}.json",)
      assert spec.submission == cd.Submission(f"{task}_predict_{k}.json",
                                              "submit")
    spec = data[task].spec
    assert spec.files["train"] == ("train_few_all.json",)
    assert spec.files["test"] == ("test_public.json",)
    assert spec.files["submit"] == ("test.json",)
    assert spec.submission.file_name == f"{task}_predict_all.json"
  assert data["tnewsf"].spec.submission.file_name == "tnewsf_predict_all.json"


@pytest.mark.parametrize("task", ["ocnli", "cmnli", "ocnlif"])
def test_no_consensus_rows_are_skipped_counted_and_named(task, tmp_path,
                                                         caplog):
  spec = spec_of(task)
  rows = [labelled(task, i, spec) for i in range(6)]
  rows[1]["label"] = rows[4]["label"] = "-"
  path = write_lines(tmp_path / spec.files["train"][0], rows)
  with caplog.at_level(logging.WARNING):
    examples, stats = cd.read_examples(spec, str(tmp_path), "train")
  assert len(examples) == 4 and stats["no_consensus_skipped"] == 2
  assert stats["no_consensus_at"] == [f"{path}:2", f"{path}:5"]
  assert [e.id for e in examples] == [0, 2, 3, 5]
  assert f"2 line(s) skipped: label '-'" in caplog.text
  assert f"{path}:2, {path}:5" in caplog.text


def _bad(task, **change):
  def make(spec):
    row = labelled(task, 1, spec)
    row.update(change)
    return row
  return make


MALFORMED = {
    "not JSON": ("afqmc", lambda spec: '{"sentence1": "问", oops',
                 r"train\.json:2: not JSON \(Expecting .* at column \d+\); "
                 r"expected one JSON object per line"),
    "not an object": ("tnews", lambda spec: "[1, 2]",
                      r"train\.json:2: expected a JSON object, got list"),
    "missing field": ("afqmc", lambda spec: {"sentence1": "问", "label": "0"},
                      r"train\.json:2: missing field\(s\) 'sentence2' \(task "
                      r"afqmc reads sentence1, sentence2 and label\)"),
    "unknown label": ("tnews", _bad("tnews", label="105"),
                      r"train\.json:2: unknown label '105'; task tnews labels "
                      r"are \['100', '101', .*\] \(15\)"),
    "no label in train": ("eprstmt", lambda spec: {"sentence": "好"},
                          r"train_0\.json:2: no 'label' \(every line of the "
                          r"train split needs one"),
    "text not a string": ("iflytek", _bad("iflytek", sentence=["a"]),
                          r"train\.json:2: 'sentence' is list \(expected a "
                          r"string\)"),
    "keyword not a list": ("csl", _bad("csl", keyword="甲"),
                           r"train\.json:2: 'keyword' is not a list of "
                           "strings"),
    "span not at its index": (
        "cluewsc2020", _bad("cluewsc2020", target={
            "span1_text": "床", "span1_index": 3, "span2_text": "它",
            "span2_index": 7}),
        r"train\.json:2: target span1_text '床' is not at span1_index 3 of "
        r"the text \(found '在'\)"),
    "label a list": ("bustm", _bad("bustm", label=[1]),
                     r"train_0\.json:2: 'label' is list"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_line_is_an_error_naming_file_and_line(kind, tmp_path):
  task, bad, message = MALFORMED[kind]
  spec = spec_of(task)
  write_lines(tmp_path / spec.files["train"][0],
              [labelled(task, 0, spec), bad(spec), labelled(task, 2, spec)])
  with pytest.raises(cd.DataError, match=message):
    cd.read_examples(spec, str(tmp_path), "train")


def test_wsc_marks_spans_in_either_order():
  target = {"span1_text": "床", "span1_index": 5, "span2_text": "它",
            "span2_index": 0}
  assert clue.mark_wsc("它放在上面床上", target) == "[它]放在上面_床_上"
  with pytest.raises(cd.DataError, match="overlap"):
    clue.mark_wsc("床它", {"span1_text": "床它", "span1_index": 0,
                          "span2_text": "它", "span2_index": 1})


def test_labels_json_that_differs_is_a_warning(tmp_path, caplog):
  spec = write_task(tmp_path, "tnews")
  write_lines(tmp_path / "labels.json",
              [{"label": str(100 + i), "label_desc": "x"} for i in range(17)])
  with caplog.at_level(logging.WARNING):
    cd.read_examples(spec, str(tmp_path), "train")
  assert "lists 17 labels; task tnews has 15; not the task's: ['105', " \
      "'111'] (2)" in caplog.text


# ---------------------------------------------------------- submission
def _predict(spec, tokenizer, data_dir, output_dir, monkeypatch):
  """ClassificationTask.predict with logits that pick label i % n for row
  i: the submission's content is then known."""
  task = registry.family("classification").task(spec, tokenizer,
                                                str(data_dir), 16)
  n = len(spec.label_list)

  def logits(model, features):
    rows = len(features["input_ids"])
    return np.eye(n, dtype=np.float32)[np.arange(rows) % n] * 5

  monkeypatch.setattr(task, "logits", logits)
  return task.predict(None, str(output_dir))


@pytest.mark.parametrize("task", sorted(TASKS))
def test_submission_file_content(task, tokenizer, tmp_path, monkeypatch):
  spec = write_task(tmp_path / "data", task)
  out = tmp_path / "out"
  out.mkdir()
  result = _predict(spec, tokenizer, tmp_path / "data", out, monkeypatch)
  labels = spec.label_list
  if task in FEWCLUE:
    ids = ["t0", "t1", "t2"]
    assert result["accuracy"] == 1.0 and result["num_examples"] == 4
  else:
    ids = [100, 101, 102]
    assert result == {}
  text = (out / spec.submission.file_name).read_text(encoding="utf-8")
  assert text == "".join(
      json.dumps({"id": i, "label": labels[k % len(labels)]}) + "\n"
      for k, i in enumerate(ids))
  assert (out / "test_results.tsv").exists()


def test_submission_exact_bytes_for_afqmc_and_csldcp(tokenizer, tmp_path,
                                                     monkeypatch):
  spec = write_task(tmp_path / "a", "afqmc")
  _predict(spec, tokenizer, tmp_path / "a", tmp_path, monkeypatch)
  assert (tmp_path / "afqmc_predict.json").read_bytes() == (
      b'{"id": 100, "label": "0"}\n{"id": 101, "label": "1"}\n'
      b'{"id": 102, "label": "0"}\n')
  spec = write_task(tmp_path / "c", "csldcp", split="all")
  _predict(spec, tokenizer, tmp_path / "c", tmp_path, monkeypatch)
  # As FewCLUE's example: json.dumps escapes the discipline's characters.
  assert (tmp_path / "csldcp_predict_all.json").read_text().splitlines()[
      1] == '{"id": "t1", "label": "\\u4f5c\\u7269\\u5b66"}'


def test_fewclue_without_test_json_writes_no_submission(tokenizer, tmp_path,
                                                        monkeypatch, caplog):
  spec = write_task(tmp_path / "d", "eprstmt")
  (tmp_path / "d" / "test.json").unlink()
  with caplog.at_level(logging.WARNING):
    result = _predict(spec, tokenizer, tmp_path / "d", tmp_path, monkeypatch)
  assert result["accuracy"] == 1.0
  assert not (tmp_path / "eprstmt_predict_0.json").exists()
  assert "eprstmt_predict_0.json is not written" in caplog.text


# ------------------------------------------------------ unlabeled text
def test_unlabeled_json_becomes_pretraining_text(tmp_path):
  from data_prep import fewclue_unlabeled  # pylint: disable=g-import-not-at-top
  write_lines(tmp_path / "in" / "eprstmt" / "unlabeled.json", [
      {"id": 0, "sentence": "好。差！"}, "",
      {"id": 1, "sentence": "甲，乙"}, {"id": 2, "sentence": "甲"}])
  write_lines(tmp_path / "in" / "bustm" / "unlabeled.json", [
      {"id": 0, "sentence1": "问", "sentence2": "答"},
      {"id": 1, "sentence1": "问", "sentence2": ""}])
  sizes = fewclue_unlabeled.write_unlabeled(
      str(tmp_path / "in"), str(tmp_path / "out"), ["eprstmt", "bustm", "csl"])
  assert (tmp_path / "out" / "unlabeled.txt").read_text(encoding="utf-8") == (
      "好。\n差！\n\n甲，\n乙\n\n甲\n\n问\n答\n\n问\n")
  assert sizes["eprstmt"] == {"lines": 3, "documents": 3, "sentences": 5,
                              "one_sentence_documents": 1, "empty_lines": 0}
  assert sizes["bustm"]["one_sentence_documents"] == 1
  assert sizes["csl"] == {"missing": str(tmp_path / "in" / "csl" /
                                         "unlabeled.json")}
  assert json.loads((tmp_path / "out" / "sizes.json").read_text()) == sizes
  write_lines(tmp_path / "in" / "eprstmt" / "unlabeled.json",
              [{"id": 0, "sentence": "好"}, {"id": 1}])
  with pytest.raises(cd.DataError, match=r"unlabeled\.json:2: missing "
                     r"field\(s\) 'sentence'"):
    fewclue_unlabeled.write_unlabeled(str(tmp_path / "in"),
                                      str(tmp_path / "out2"), ["eprstmt"])


# ---------------------------------------------------------- end to end
def test_afqmc_fine_tunes_and_writes_its_submission(tmp_path):
  from albert_tf import finetune  # pylint: disable=g-import-not-at-top
  root = write_tiny_vocab_and_config(tmp_path, CHARS)
  data = tmp_path / "afqmc"
  write_lines(data / "train.json", [
      {"sentence1": "问好" if i % 2 else "问差", "sentence2": "答",
       "label": str(i % 2)} for i in range(16)])
  write_lines(data / "dev.json", [
      {"sentence1": "问好" if i % 2 else "问差", "sentence2": "答",
       "label": str(i % 2)} for i in range(4)])
  write_lines(data / "test.json", [
      {"id": i, "sentence1": "问甲", "sentence2": "答乙"} for i in (7, 3, 9)])
  out = tmp_path / "out"
  result = finetune.run(
      task="afqmc", data_dir=str(data), output_dir=str(out),
      vocab_file=str(root / "vocab.txt"),
      albert_config_file=str(root / "config.json"), max_seq_length=16,
      train_batch_size=8, learning_rate=1e-3, num_train_epochs=1.0,
      do_train=True, do_eval=True, do_predict=True)
  assert result["data"]["train"]["examples"] == 16
  assert result["eval"]["num_examples"] == 4
  lines = [json.loads(line) for line in
           (out / "afqmc_predict.json").read_text().splitlines()]
  assert [line["id"] for line in lines] == [7, 3, 9]
  assert all(line["label"] in ("0", "1") for line in lines)
  rows = (out / "test_results.tsv").read_text().splitlines()
  assert [r.split("\t")[1] for r in rows[1:]] == [l["label"] for l in lines]


def test_overwrite_removes_the_submission_files_and_keeps_the_users(
    tmp_path):
  """--overwrite starts over: a previous run's CLUE submission files go
  (they are the datasets' `Task.dataset_output_files`), a file of the
  user's with a similar name stays."""
  from albert_tf.training import output_dir  # pylint: disable=g-import-not-at-top
  for name in ("afqmc_predict.json", "c311_predict.json",
               "eprstmt_predict_all.json", "chid11_predict.json.tmp",
               "my_predict.json", "afqmc_predict.json.bak"):
    (tmp_path / name).write_text("{}\n", encoding="utf-8")
  removed = output_dir.remove_run_files(str(tmp_path))
  assert sorted(os.path.basename(p) for p in removed) == [
      "afqmc_predict.json", "c311_predict.json", "chid11_predict.json.tmp",
      "eprstmt_predict_all.json"]
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      "afqmc_predict.json.bak", "my_predict.json"]
