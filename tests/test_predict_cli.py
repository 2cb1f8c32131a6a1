"""`python -m albert_tf.predict`: a file in, one prediction row per input
out, scored when it holds gold labels.

Tiny random-weight models of tests/test_family_serving.py (a classifier of
one text, of pairs, a tagger, span QA, multiple choice), built once. The
written rows are checked against `albert_tf.load(path).predict` on the same
inputs, the printed figures against sklearn / seqeval / squad_metrics
computed here from the written predictions and the gold labels.
"""

import dataclasses
import json
import re
from unittest import mock

import pytest
from sklearn import metrics as skm

import albert_tf
from albert_tf import inference
from albert_tf import predict as predict_cli
from albert_tf.data import squad_metrics
from albert_tf.serving import predictor as predictor_lib
from tests import cli_runner
from tests.tagging_reference import reference_split
from tests import test_family_serving as fs

FAMILIES = ("classification", "pair", "tagging", "span_qa",
            "multiple_choice")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """{name: (output_dir, its Predictor)}."""
  out = {}
  for name in FAMILIES:
    root = tmp_path_factory.mktemp(name) / "out"
    family = "classification" if name == "pair" else name
    records = dict(fs.RECORDS)
    if name == "classification":  # one text
      records[family] = dataclasses.replace(records[family], text_pair=False)
    with mock.patch.dict(fs.RECORDS, records):
      fs._make(root, family)  # pylint: disable=protected-access
    out[name] = (str(root), albert_tf.load(str(root)))
  return out


def _run(model, input_file, output_file, **flags):
  printed = []
  args = predict_cli.PredictArgs(model=model, input_file=str(input_file),
                                 output_file=str(output_file), **flags)
  result = predict_cli.run(args, log=printed.append)
  return result, printed


def _read_tsv(path):
  lines = path.read_text(encoding="utf-8").splitlines()
  header = lines[0].split("\t")
  return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def _read_jsonl(path):
  return [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines()]


def _tsv(path, header, rows):
  path.write_text("\n".join("\t".join(r) for r in ([header] if header else [])
                            + rows) + "\n", encoding="utf-8")
  return path


def _jsonl(path, rows):
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                          for r in rows), encoding="utf-8")
  return path


def _printed_figure(printed, name):
  found = [float(m.group(1)) for line in printed
           for m in [re.search(rf"\b{name}=([0-9.]+)", line)] if m]
  assert found, (name, printed)
  return found[0]


def _printed_matrix(printed, labels):
  start = next(i for i, l in enumerate(printed)
               if l.startswith("confusion matrix"))
  header = printed[start + 1].split()
  assert header == ["gold\\pred"] + labels
  rows = [l.split() for l in printed[start + 2:start + 2 + len(labels)]]
  assert [r[0] for r in rows] == labels
  return [[int(v) for v in r[1:]] for r in rows]


def _check_classifier_figures(printed, gold, predicted, labels):
  """The printed accuracy, macro-F1, majority and matrix are sklearn's."""
  assert _printed_figure(printed, "accuracy") == round(
      skm.accuracy_score(gold, predicted), 4)
  assert _printed_figure(printed, "macro_f1") == round(skm.f1_score(
      gold, predicted, labels=labels, average="macro", zero_division=0), 4)
  assert _printed_matrix(printed, labels) == skm.confusion_matrix(
      gold, predicted, labels=labels).tolist()
  # The majority class of this file's gold labels, scored the same way.
  majority = max(labels, key=lambda l: (gold.count(l), -labels.index(l)))
  line = next(l for l in printed if l.startswith("majority class"))
  assert f"({majority!r}, not of a train split)" in line
  assert f"accuracy={skm.accuracy_score(gold, [majority] * len(gold)):.4f}" in (
      line)


def test_classifier_tsv_with_labels_and_plain_text_without(models, tmp_path):
  path, predictor = models["classification"]
  texts = fs.TEXTS * 3
  gold = ["neg", "pos", "mid", "pos", "pos"] * 3
  source = _tsv(tmp_path / "in.tsv", ["label", "text"],
                [[g, t] for g, t in zip(gold, texts)])
  # Streamed: predict() sees --batch_size rows at a time, a progress line
  # (rows, rows/s) follows each full batch when the interval has passed.
  batches, real_predict = [], inference.Predictor.predict

  def spy(self, *columns, **kw):
    batches.append(len(columns[0]))
    return real_predict(self, *columns, **kw)

  with mock.patch.object(inference.Predictor, "predict", spy), (
      mock.patch.object(predictor_lib.logging, "info")) as info:
    result, printed = _run(path, source, tmp_path / "out.tsv", batch_size=4,
                           progress_interval_secs=0.0)
  assert batches == [4, 4, 4, 3]
  assert [c.args[:2] for c in info.call_args_list] == [
      ("predict: %d rows, %.1f rows/s", n) for n in (4, 8, 12)]
  rows = _read_tsv(tmp_path / "out.tsv")
  expected = predictor.predict(texts)
  assert result["rows"] == len(rows) == len(texts)
  assert list(rows[0]) == ["line", "text", "gold", "label", "probabilities"]
  assert [int(r["line"]) for r in rows] == list(range(2, 2 + len(texts)))
  assert [r["text"] for r in rows] == texts
  assert [r["gold"] for r in rows] == gold
  # Batches of 4 against one of 15: oneDNN may block the matmuls otherwise
  # (AVX2-only CPUs differ in the last bits, ~3e-8), so the labels are
  # compared exactly and the probabilities to float32 rounding.
  predicted = [r["label"] for r in rows]
  assert predicted == [e["label"] for e in expected]
  for row, e in zip(rows, expected):
    assert json.loads(row["probabilities"]) == pytest.approx(
        e["probabilities"], rel=1e-5, abs=1e-7)
  _check_classifier_figures(printed, gold, predicted, ["neg", "mid", "pos"])
  assert result["metrics"]["confusion_matrix"] == skm.confusion_matrix(
      gold, predicted, labels=["neg", "mid", "pos"]).tolist()

  # Plain text (blank lines skipped), JSON lines out, no gold: no figures.
  text_file = tmp_path / "in.txt"
  text_file.write_text("很好的今天\n\n差\n", encoding="utf-8")
  result, printed = _run(path, text_file, tmp_path / "out.jsonl")
  rows = _read_jsonl(tmp_path / "out.jsonl")
  assert rows == [{"line": n, "text": t, **p} for n, t, p in zip(
      [1, 3], ["很好的今天", "差"], predictor.predict(["很好的今天", "差"]))]
  assert result["metrics"] == {} and printed[1:] == [
      f"1 blank or whitespace-only line(s) skipped ({text_file}:2)"]


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_pair_classifier_jsonl_and_headerless_tsv_with_mapped_columns(
    models, tmp_path):
  path, predictor = models["pair"]
  assert predictor.inputs == ("text", "text_b")
  gold = ["pos", "neg", "neg", "mid", "pos"]
  source = _jsonl(tmp_path / "in.jsonl", [
      {"text": a, "text_b": b, "label": g, "extra": 1}
      for a, b, g in zip(fs.TEXTS, fs.TEXTS_B, gold)])
  _, printed = _run(path, source, tmp_path / "out.jsonl")
  rows = _read_jsonl(tmp_path / "out.jsonl")
  expected = predictor.predict(fs.TEXTS, fs.TEXTS_B)
  assert rows == [{"line": i + 1, "text": a, "text_b": b, "gold": g, **p}
                  for i, (a, b, g, p) in enumerate(
                      zip(fs.TEXTS, fs.TEXTS_B, gold, expected))]
  _check_classifier_figures(printed, gold, [r["label"] for r in rows],
                            ["neg", "mid", "pos"])
  # A TSV without header: --columns names its columns, --input_columns
  # maps them, --label_column the gold.
  source = _tsv(tmp_path / "in.tsv", None,
                [[g, a, b] for a, b, g in zip(fs.TEXTS, fs.TEXTS_B, gold)])
  _, printed_too = _run(
      path, source, tmp_path / "out2.jsonl", columns=["y", "q", "d"],
      input_columns=["text=q", "text_b=d"], label_column="y")
  assert [{k: r[k] for k in ("label", "probabilities")}
          for r in _read_jsonl(tmp_path / "out2.jsonl")] == expected
  assert printed_too[1] == (f"--columns: {source} read as having no header "
                            "line (--header skips one)")
  assert printed_too[2:] == printed[1:]


def test_tagger_entities_and_entity_f1(models, tmp_path):
  path, predictor = models["tagging"]
  texts = [t for t in fs.TEXTS if t] + ["北京 上海"]
  gold_tags = []
  for text in texts:
    tokens = reference_split(text, "char")
    tags = ["O"] * len(tokens)
    for i, (char, _, _) in enumerate(tokens):
      if char in "北上" and i + 1 < len(tokens):
        tags[i], tags[i + 1] = "B-LOC", "I-LOC"
      if char == "张":
        tags[i] = "B-PER"
    gold_tags.append(tags)
  source = _jsonl(tmp_path / "in.jsonl", [
      {"text": t, "tags": " ".join(g)} for t, g in zip(texts, gold_tags)])
  result, printed = _run(path, source, tmp_path / "out.tsv")
  rows = _read_tsv(tmp_path / "out.tsv")
  entities = [json.loads(r["entities"]) for r in rows]
  assert entities == predictor.predict(texts)
  # The printed F1: seqeval's on the written entities as token tags.
  predicted = []
  for text, found in zip(texts, entities):
    tags = ["O"] * len(reference_split(text, "char"))
    for e in found:
      for i in range(e["start"], e["end"]):  # char tokens: no spaces inside
        k = len(reference_split(text[:i], "char"))
        tags[k] = ("B-" if i == e["start"] else "I-") + e["type"]
    predicted.append(tags)
  from seqeval import metrics as seq  # pylint: disable=g-import-not-at-top
  f1 = seq.f1_score(gold_tags, predicted, zero_division=0)
  assert result["metrics"]["entity_f1"] == pytest.approx(f1)
  assert _printed_figure(printed, "entity_f1") == round(f1, 4)


def test_span_qa_answers_and_exact_match(models, tmp_path):
  path, predictor = models["span_qa"]
  expected = predictor.predict(fs.QUESTIONS, fs.CONTEXTS)
  # Gold: the model's own first answer, then two it will not give.
  answers = [[expected[0]["answer"], "x"], ["the cat"], ["北京"]]
  source = _tsv(tmp_path / "in.tsv", ["context", "question", "answers"],
                [[c, q, json.dumps(a, ensure_ascii=False)] for c, q, a in
                 zip(fs.CONTEXTS, fs.QUESTIONS, answers)])
  result, printed = _run(path, source, tmp_path / "out.jsonl")
  rows = _read_jsonl(tmp_path / "out.jsonl")
  assert [{k: r[k] for k in ("answer", "start", "end", "score")}
          for r in rows] == expected
  assert [r["question"] for r in rows] == fs.QUESTIONS
  scores = squad_metrics.squad_v1(
      {str(i): a for i, a in enumerate(answers)},
      {str(i): r["answer"] for i, r in enumerate(rows)})
  assert scores["exact_match"] >= 100 / 3
  assert _printed_figure(printed, "exact_match") == round(
      scores["exact_match"], 2)
  assert _printed_figure(printed, "f1") == round(scores["f1"], 2)
  assert result["metrics"]["f1"] == scores["f1"]


def test_multiple_choice_options_as_columns_or_a_json_list(models, tmp_path):
  path, predictor = models["multiple_choice"]
  expected = predictor.predict(fs.ARTICLES, fs.MC_QUESTIONS, fs.OPTIONS)
  gold = ["B", "A", "D"]
  source = _tsv(tmp_path / "in.tsv",
                ["article", "question", "A", "B", "C", "D", "label"],
                [[a, q, *o, g] for a, q, o, g in
                 zip(fs.ARTICLES, fs.MC_QUESTIONS, fs.OPTIONS, gold)])
  _, printed = _run(path, source, tmp_path / "out.tsv",
                    options_columns=list("ABCD"))
  rows = _read_tsv(tmp_path / "out.tsv")
  assert [json.loads(r["options"]) for r in rows] == fs.OPTIONS
  assert [{"label": r["label"], "choice": int(r["choice"]),
           "probabilities": json.loads(r["probabilities"])}
          for r in rows] == expected
  _check_classifier_figures(printed, gold, [r["label"] for r in rows],
                            list("ABCD"))
  # JSON lines: options a list, the gold an option index.
  source = _jsonl(tmp_path / "in.jsonl", [
      {"article": a, "question": q, "options": o, "answer": "ABCD".index(g)}
      for a, q, o, g in zip(fs.ARTICLES, fs.MC_QUESTIONS, fs.OPTIONS, gold)])
  _, printed_too = _run(path, source, tmp_path / "out.jsonl",
                        label_column="answer")
  assert [r["choice"] for r in _read_jsonl(tmp_path / "out.jsonl")] == [
      e["choice"] for e in expected]
  assert printed_too[1:] == printed[1:]


def test_bad_input_is_one_error_naming_file_and_line(models, tmp_path):
  path, _ = models["pair"]
  cases = {
      "missing.tsv": (None, "--input_file=.*missing.tsv does not exist"),
      "no_b.tsv": ("text\tlabel\n好\tpos\n",
                   r"no_b.tsv:2: no column 'text_b' for the input 'text_b'"),
      "bad.jsonl": ('{"text": "a", "text_b": "b"}\n{"text": "a",\n',
                    r"bad.jsonl:2: not a JSON object"),
      "list.jsonl": ('{"text": "a", "text_b": 3}\n',
                     r"list.jsonl:1: text_b must be a string, got 3"),
      "short.tsv": ("text\ttext_b\na\tb\nc\n",
                    r"short.tsv:3: 1 columns, the header names 2"),
      "gold.tsv": ("text\ttext_b\tlabel\na\tb\tpositive\n",
                   r"gold.tsv:2: gold label 'positive' is not one of the "
                   r"model's labels \(neg, mid, pos\)"),
      "pair.txt": ("a\n", r"plain text .* the classification model takes "
                   r"text, text_b"),
  }
  for name, (content, message) in cases.items():
    if content is not None:
      (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(predict_cli.PredictError, match=message):
      _run(path, tmp_path / name, tmp_path / "out.tsv")
  assert not (tmp_path / "out.tsv").exists()  # nothing half-written


def test_command_line_predicts_an_export_and_errors_in_one_line(models,
                                                                tmp_path):
  from albert_tf import export_saved_model  # pylint: disable=g-import-not-at-top
  path, predictor = models["classification"]
  export_saved_model.export(checkpoint=path, export_dir=str(tmp_path / "sm"))
  source = _tsv(tmp_path / "in.tsv", None,
                [["pos", t] for t in fs.TEXTS])
  proc = cli_runner.run_module(
      ["albert_tf.predict", f"--model={tmp_path / 'sm'}",
       f"--input_file={source}", "--columns=label,text",
       f"--output_file={tmp_path / 'out.jsonl'}"], timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "confusion matrix (rows: gold, columns: predicted):" in proc.stdout
  rows = _read_jsonl(tmp_path / "out.jsonl")
  fs._assert_results(  # pylint: disable=protected-access
      [{k: r[k] for k in ("label", "probabilities")} for r in rows],
      predictor.predict(fs.TEXTS), fs.SERVED_REL)
  proc = cli_runner.run_module(
      ["albert_tf.predict", f"--model={tmp_path / 'sm'}",
       f"--input_file={source}", f"--output_file={tmp_path / 'x.tsv'}"],
      timeout=300)
  assert proc.returncode == 1
  # One line (TF's C++ start-up lines, such as cuInit's, aside).
  assert [l for l in proc.stderr.splitlines()
          if not l.startswith(("E0000", "W0000", "I0000"))] == [
      f"error: {source}:2: no column 'text' for the input 'text' (the "
      "classification model takes text; the row has pos, 很好的今天; "
      "--input_columns=text=COLUMN maps another)"]
