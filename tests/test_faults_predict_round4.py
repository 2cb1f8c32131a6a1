"""albert-predict's faults of issue 50 ("Nothing silent, round 4"), rows 1,
2, 6-9, 18-22 and 31 of docs/faults.md: each test makes the fault and checks
what the user sees.

`predict.run` is driven with a stand-in for `albert_tf.load`'s Predictor (a
classifier that says "pos" for a text with 好, else "neg"; its Task the
registered classification family's, its tokenizer a real WordPiece of one
piece per character), so the expected rows, counts and metrics are worked
out by hand here; tests/test_predict_cli.py runs the same code on real
models. Rows 22 and 31 call `albert_tf.load` itself.
"""

import json
import os
import re
from unittest import mock

import pytest

from albert_tf import inference
from albert_tf import predict
from albert_tf.tasks import registry
from albert_tf.data import classifier_data
from albert_tf.data import tokenization
from albert_tf.core.record import ModelInfo
from albert_tf.data.rows import PredictError
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "好差很甲乙丙丁戊己庚辛"
LENGTH = 8  # [CLS] + 6 pieces + [SEP]: a text of 7 characters is cut


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"), CHARS)
  return tokenization.load_tokenizer(vocab_file=str(root / "vocab.txt"))


class Classifier:
  """What predict.run reads of a loaded classifier."""

  kind = "classification"
  labels = ["neg", "pos"]
  token_level = None

  def __init__(self, tokenizer, pair=False):
    self.inputs = ("text", "text_b") if pair else ("text",)
    self.record = ModelInfo(task="classification", num_labels=2,
                            label_list=self.labels, max_seq_length=LENGTH,
                            text_pair=pair)
    self.task = registry.family("classification").task
    self.tokenizer, self.max_seq_length = tokenizer, LENGTH
    self.seen = []  # the texts predicted, in order

  def predict(self, texts, *more):
    del more
    self.seen += texts
    return [{"label": "pos" if "好" in t else "neg",
             "probabilities": {"neg": 0.0, "pos": 1.0} if "好" in t else
                              {"neg": 1.0, "pos": 0.0}} for t in texts]


def _run(tokenizer, input_file, output_file, pair=False, **flags):
  model = Classifier(tokenizer, pair)
  printed = []
  args = predict.PredictArgs(model="m", input_file=str(input_file),
                             output_file=str(output_file), **flags)
  with mock.patch.object(inference, "load", return_value=model):
    result = predict.run(args, log=printed.append)
  return result, printed, model


def _jsonl(path):
  return [json.loads(l) for l in path.read_text("utf-8").splitlines()]


def _tsv(path):
  lines = path.read_text("utf-8").splitlines()
  return [dict(zip(lines[0].split("\t"), l.split("\t"))) for l in lines[1:]]


# 1 ---------------------------------------------------------------------
def test_empty_or_header_only_input_keeps_the_earlier_output(tokenizer,
                                                             tmp_path):
  out = tmp_path / "out.tsv"
  out.write_text("line\ttext\tlabel\n1\t好\tpos\n", encoding="utf-8")
  before = out.read_bytes()
  inputs = {"empty.tsv": "", "header.tsv": "text\tlabel\n",
            "blank.txt": "\n  \n\t\n", "header_blank.tsv": "text\n\n"}
  for name, content in inputs.items():
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(PredictError) as e:
      _run(tokenizer, tmp_path / name, out)
    assert str(e.value).startswith(f"--input_file={tmp_path / name} holds "
                                   "no rows"), e.value
    assert f"--output_file={out} not written" in str(e.value)
    assert out.read_bytes() == before, name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.tsv", *list(inputs)[:list(inputs).index(name) + 1]])


# 2 ---------------------------------------------------------------------
def test_an_output_that_is_the_input_is_refused(tokenizer, tmp_path,
                                                monkeypatch):
  source = tmp_path / "same.tsv"
  source.write_text("text\n好\n差\n", encoding="utf-8")
  before = source.read_bytes()
  (tmp_path / "link.tsv").symlink_to(source)
  os.link(source, tmp_path / "hard.tsv")
  (tmp_path / "sub").mkdir()
  monkeypatch.chdir(tmp_path / "sub")
  for output in (source, "../same.tsv", tmp_path / "link.tsv",
                 tmp_path / "hard.tsv"):
    with pytest.raises(PredictError) as e:
      _run(tokenizer, source, output)
    assert str(e.value) == (
        f"--output_file={output} is --input_file={source} "
        f"({os.path.realpath(source)}): the predictions would replace the "
        "input; name another output file")
  # The output's temporary (out.tsv.tmp, written first) as the input.
  tmp_input = tmp_path / "x.tsv.tmp"
  tmp_input.write_bytes(before)
  with pytest.raises(PredictError, match=re.escape(
      f"--output_file={tmp_path / 'x.tsv'} is written as {tmp_input}, "
      f"which is --input_file={tmp_input}")):
    _run(tokenizer, tmp_input, tmp_path / "x.tsv")
  assert source.read_bytes() == before == tmp_input.read_bytes()
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      "hard.tsv", "link.tsv", "same.tsv", "sub", "x.tsv.tmp"]


# 6 ---------------------------------------------------------------------
def test_json_lines_gold_labels_are_read_row_by_row(tokenizer, tmp_path):
  rows = [{"text": "差"},                   # no label: predicted neg
          {"text": "很好", "label": "pos"},  # right
          {"text": "甲乙", "label": "pos"},  # wrong: predicted neg
          {"text": "好", "label": None},    # null: no label
          {"text": "丙", "label": ""},      # empty: no label
          {"text": "丁", "label": "neg"}]   # right
  source = tmp_path / "in.jsonl"
  source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                            for r in rows), encoding="utf-8")
  result, printed, _ = _run(tokenizer, source, tmp_path / "out.jsonl")
  predicted = ["neg", "pos", "neg", "pos", "neg", "neg"]
  assert _jsonl(tmp_path / "out.jsonl") == [
      {"line": i + 1, "text": r["text"],
       **({"gold": r["label"]} if r.get("label") else {}),
       "label": p, "probabilities": {"neg": float(p == "neg"),
                                     "pos": float(p == "pos")}}
      for i, (r, p) in enumerate(zip(rows, predicted))]
  # Scored on the 3 labelled rows: 2 right; gold neg, pos, pos.
  assert result["metrics"]["examples"] == 3
  assert result["metrics"]["accuracy"] == pytest.approx(2 / 3)
  assert result["metrics"]["confusion_matrix"] == [[1, 0], [1, 1]]
  assert result["unlabelled"] == 3
  assert printed[-1] == (f"3 of 6 rows have no gold label and are not "
                         f"scored ({source}:1, {source}:4, {source}:5)")
  assert "accuracy=0.6667 macro_f1=0.6667 on 3 labelled examples" in printed
  # TSV out: one header, so every row has the gold column ("" without).
  _run(tokenizer, source, tmp_path / "out.tsv")
  written = _tsv(tmp_path / "out.tsv")
  assert [(r["line"], r["gold"], r["label"]) for r in written] == [
      (str(i + 1), r.get("label") or "", p)
      for i, (r, p) in enumerate(zip(rows, predicted))]


# 7 ---------------------------------------------------------------------
def test_texts_cut_to_the_model_length_are_counted(tokenizer, tmp_path):
  # 6 pieces fit one text ([CLS] text [SEP] in 8); lines 2, 4, 5 have 7+.
  texts = ["好差很", "甲乙丙丁戊己庚", "甲乙丙丁戊己", "好" * 9, "差" * 12,
           "丙"]
  source = tmp_path / "in.txt"
  source.write_text("\n".join(texts) + "\n", encoding="utf-8")
  result, printed, _ = _run(tokenizer, source, tmp_path / "out.jsonl")
  assert result["cut"] == 3
  assert (f"3 of 6 rows cut to the model's max_seq_length=8: their ends are "
          f"not read (first at {source}:2, {source}:4, {source}:5)"
          ) in printed
  # A pair: [CLS] a [SEP] b [SEP], 5 pieces for both texts.
  source = tmp_path / "pair.jsonl"
  source.write_text("".join(json.dumps({"text": a, "text_b": b}) + "\n" for
                            a, b in [("甲乙", "丙丁戊"), ("甲乙", "丙丁戊己"),
                                     ("好", "差")]), encoding="utf-8")
  result, printed, _ = _run(tokenizer, source, tmp_path / "pair.tsv",
                            pair=True)
  assert result["cut"] == 1 and (
      f"1 of 3 rows cut to the model's max_seq_length=8: their ends are not "
      f"read (first at {source}:2)") in printed
  # Nothing cut: no line.
  source.write_text('{"text": "甲乙丙丁戊己"}\n', encoding="utf-8")
  result, printed, _ = _run(tokenizer, source, tmp_path / "short.tsv")
  assert result["cut"] == 0 and not any(" cut " in l for l in printed)


def test_each_family_says_which_inputs_it_cuts(tokenizer):
  """The rule of each family's encoding, by hand: a tagger's window of
  LENGTH - 2 characters, span QA's max_query_length on the question (the
  context is read whole, in windows), RACE's article in what a question
  and an option leave."""
  tagging = registry.family("tagging").task
  record = ModelInfo(task="tagging", label_list=["O"], max_seq_length=LENGTH,
                     task_config={"token_level": "char"})
  assert tagging.truncated_inputs(record, tokenizer, LENGTH, {
      "text": ["甲乙丙丁戊己", "甲乙丙丁戊己庚", "甲 乙 丙 丁 戊 己"]}) == [
          False, True, False]
  span = registry.family("span_qa").task
  record = ModelInfo(task="span_qa", max_seq_length=LENGTH,
                     task_config={"max_query_length": 3, "doc_stride": 2})
  assert span.truncated_inputs(record, tokenizer, LENGTH, {
      "question": ["甲乙丙", "甲乙丙丁"], "context": ["好" * 40] * 2}) == [
          False, True]
  choice = registry.family("multiple_choice").task
  record = ModelInfo(task="multiple_choice", max_seq_length=12,
                     task_config={"max_qa_length": 6})
  # RACE's [CLS] article [SEP] question option [SEP]: 12 - 3 - 2 = 7
  # pieces for the article beside a 1-piece question and option; a qa of
  # more than max_qa_length=6 pieces is cut too.
  assert choice.truncated_inputs(record, tokenizer, 12, {
      "article": ["甲乙丙丁戊己庚", "甲乙丙丁戊己庚辛", "甲"],
      "question": ["好", "好", "好好好好好好"],
      "options": [list("差很甲乙")] * 3}) == [False, True, True]


# 8 ---------------------------------------------------------------------
def test_columns_on_a_file_with_a_header_line(tokenizer, tmp_path):
  headed = tmp_path / "headed.tsv"
  headed.write_text("text\n好\n差\n", encoding="utf-8")
  result, printed, model = _run(tokenizer, headed, tmp_path / "o.tsv",
                                columns=["text"])
  assert model.seen == ["好", "差"] and result["rows"] == 2
  assert (f"{headed}:1 equals --columns: read as the header line, not "
          "predicted (--noheader predicts it)") in printed
  assert [r["line"] for r in _tsv(tmp_path / "o.tsv")] == ["2", "3"]
  # --noheader: every line is a row.
  _, _, model = _run(tokenizer, headed, tmp_path / "o.tsv", columns=["text"],
                     header=False)
  assert model.seen == ["text", "好", "差"]
  # A header of other names: a row, and said so; --header skips it.
  other = tmp_path / "other.tsv"
  other.write_text("review\n好\n差\n", encoding="utf-8")
  _, printed, model = _run(tokenizer, other, tmp_path / "o.tsv",
                           columns=["text"])
  assert model.seen == ["review", "好", "差"]
  assert (f"--columns: {other} read as having no header line (--header "
          "skips one)") in printed
  _, printed, model = _run(tokenizer, other, tmp_path / "o.tsv",
                           columns=["text"], header=True)
  assert model.seen == ["好", "差"]
  assert not any("header" in l for l in printed)
  for flags, message in [
      ({"header": False}, "--noheader: name the TSV's columns with "
                          "--columns"),
      ({"header": True, "input_format": "text"},
       rf"--header: --input_file={other} is read as text, not TSV")]:
    with pytest.raises(PredictError, match=message):
      _run(tokenizer, other, tmp_path / "o.tsv", **flags)


# 9 ---------------------------------------------------------------------
def test_plain_text_blank_lines_are_counted_and_rows_keep_line_numbers(
    tokenizer, tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("好\n\n   \n差\n\t\n很好\n\n", encoding="utf-8")
  result, printed, _ = _run(tokenizer, source, tmp_path / "out.jsonl")
  assert [(r["line"], r["text"]) for r in _jsonl(tmp_path / "out.jsonl")] == [
      (1, "好"), (4, "差"), (6, "很好")]
  assert result["blank"] == 4
  assert (f"4 blank or whitespace-only line(s) skipped ({source}:2, "
          f"{source}:3, {source}:5 and 1 more)") in printed
  assert printed[0].endswith(f"-> {tmp_path / 'out.jsonl'} (its \"line\" "
                             "column: the input line of each)")


# 18 --------------------------------------------------------------------
def test_non_utf8_input_is_one_line_naming_file_and_line(tokenizer, tmp_path):
  for name, content in [("in.txt", b"\xe5\xa5\xbd\nab \xff\n"),
                        ("in.tsv", b"text\n\xe5\xa5\xbd\nab \xff\n"),
                        ("in.jsonl", b'{"text": "a"}\n{"text": "\xff"}\n')]:
    (tmp_path / name).write_bytes(content)
    line = content.count(b"\n")
    column = content.splitlines()[-1].index(b"\xff") + 1
    with pytest.raises(PredictError) as e:
      _run(tokenizer, tmp_path / name, tmp_path / "out.tsv")
    assert str(e.value) == (f"{tmp_path / name}:{line}: not UTF-8 text "
                            f"(byte b'\\xff' at column {column})")
  assert not (tmp_path / "out.tsv").exists()


# 19 --------------------------------------------------------------------
def test_a_bom_is_read_as_fine_tuning_reads_it(tokenizer, tmp_path):
  source = tmp_path / "bom.tsv"
  source.write_text("\ufefftext\tlabel\r\n好\tpos\r\n差\tpos\r\n",
                    encoding="utf-8")
  result, _, model = _run(tokenizer, source, tmp_path / "out.tsv")
  assert model.seen == ["好", "差"] and result["metrics"]["accuracy"] == 0.5
  # Fine-tuning's reader of the same file.
  spec = classifier_data.make_tsv_task("text", "label",
                                       label_list=["neg", "pos"])
  examples, _ = classifier_data.read_tsv_examples(str(source), spec, "dev")
  assert [(e.text_a, e.label) for e in examples] == [("好", "pos"),
                                                     ("差", "pos")]
  source = tmp_path / "bom.jsonl"
  source.write_text('\ufeff{"text": "好"}\n', encoding="utf-8")
  _, _, model = _run(tokenizer, source, tmp_path / "out.tsv")
  assert model.seen == ["好"]


# 20 --------------------------------------------------------------------
def test_an_input_folder_is_named_a_folder(tokenizer, tmp_path):
  (tmp_path / "data").mkdir()
  with pytest.raises(PredictError, match=(
      rf"^--input_file={tmp_path / 'data'} is a directory, not a file")):
    _run(tokenizer, tmp_path / "data", tmp_path / "out.tsv")
  (tmp_path / "in.txt").write_text("好\n", encoding="utf-8")
  with pytest.raises(PredictError, match=(
      rf"^--output_file={tmp_path / 'data'} is a directory")):
    _run(tokenizer, tmp_path / "in.txt", tmp_path / "data")


# 21 --------------------------------------------------------------------
def test_a_pretty_printed_json_file_asks_for_one_object_per_line(tokenizer,
                                                                 tmp_path):
  rows = [{"text": "好"}, {"text": "差"}]
  hint = ("JSON lines hold one object per line (a pretty-printed .json "
          "spreads one over many; write each on one line, e.g. jq -c '.[]')")
  cases = {
      "list.json": (json.dumps(rows, indent=2),
                    "1: not a JSON object (Expecting value at column 2)"),
      "object.json": (json.dumps(rows[0], indent=2), (
          "1: not a JSON object (Expecting property name enclosed in double "
          "quotes at column 2)")),
      "one_line.json": (json.dumps(rows), "1: not a JSON object (a JSON "
                                          "list)"),
      "later.jsonl": (json.dumps(rows[0]) + "\n" + json.dumps(
          rows[1], indent=1), "2: not a JSON object (Expecting property name "
                              "enclosed in double quotes at column 2)")}
  for name, (content, where) in cases.items():
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(PredictError) as e:
      _run(tokenizer, tmp_path / name, tmp_path / "out.tsv")
    assert str(e.value) == f"{tmp_path / name}:{where}: {hint}"


# 22 --------------------------------------------------------------------
def test_load_lists_onnx_and_tflite_among_what_it_reads(tmp_path):
  for name in ("m.tflite", "m.onnx", "run"):
    with pytest.raises(inference.LoadError) as e:
      inference.load(str(tmp_path / name))
    assert str(e.value).startswith(f"{tmp_path / name} does not exist "
                                   "(albert_tf.load reads ")
    assert ("an export_onnx .onnx or export_tflite .tflite file (NAME.json "
            "beside it)") in str(e.value)
  (tmp_path / "folder").mkdir()
  with pytest.raises(inference.LoadError, match=(
      "is not a model folder albert_tf.load reads: looked for .*an "
      r"export_onnx \.onnx or export_tflite \.tflite file")):
    inference.load(str(tmp_path / "folder"))
  (tmp_path / "m.tflite").write_bytes(b"TFL3")
  with pytest.raises(inference.LoadError, match=(
      rf"^{tmp_path / 'm.tflite'}: {tmp_path / 'm.tflite'}.json does not "
      r"exist \(load reads \.tflite files written by "
      r"albert_tf\.export_tflite\)$")):
    inference.load(str(tmp_path / "m.tflite"))


# 31 --------------------------------------------------------------------
def _onnx_identity():
  """A valid .onnx (one Identity) as bytes: onnx's own helpers."""
  from onnx import TensorProto, helper  # pylint: disable=g-import-not-at-top
  spec = [None, None]
  graph = helper.make_graph(
      [helper.make_node("Identity", ["input_ids"], ["logits"])], "g",
      [helper.make_tensor_value_info("input_ids", TensorProto.INT32, spec)],
      [helper.make_tensor_value_info("logits", TensorProto.INT32, spec)])
  return helper.make_model(graph, opset_imports=[
      helper.make_opsetid("", 13)]).SerializeToString()


def test_a_truncated_onnx_is_a_load_error_naming_the_file(tmp_path):
  pytest.importorskip("onnxruntime")
  model = tmp_path / "m.onnx"
  sidecar = tmp_path / "m.onnx.json"
  sidecar.write_text(json.dumps({"inputs": [
      {"name": "input_ids", "shape": [None, None], "dtype": "int32"}]}),
                     encoding="utf-8")
  model.write_bytes(_onnx_identity()[:40])  # cut: a partial download, copy
  with pytest.raises(inference.LoadError) as e:
    inference.load(str(model))
  assert str(e.value).startswith(
      f"{model} does not load in ONNX Runtime (InvalidProtobuf: "
      "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from ")
  assert str(e.value).endswith(": a cut or damaged file? write it again "
                               "with albert_tf.export_onnx")
  assert "\n" not in str(e.value)
  # Its JSON cut: named too (json's error names no file).
  model.write_bytes(_onnx_identity())
  sidecar.write_text('{"inputs": [', encoding="utf-8")
  with pytest.raises(inference.LoadError, match=(
      rf"^{sidecar} is not JSON \(JSONDecodeError: Expecting value: line 1 "
      r"column 13 \(char 12\)\): a cut or damaged file\?")):
    inference.load(str(model))
  # A damaged .tflite: LiteRT's ValueError, with the file named.
  pytest.importorskip("ai_edge_litert")
  (tmp_path / "m.tflite").write_bytes(b"\0" * 64)
  (tmp_path / "m.tflite.json").write_text('{"inputs": []}', encoding="utf-8")
  with pytest.raises(inference.LoadError, match=(
      rf"^{tmp_path / 'm.tflite'} does not load in LiteRT \(ValueError: The "
      r"model is not a valid Flatbuffer buffer\): a cut or damaged file\? "
      r"write it again with albert_tf\.export_tflite$")):
    inference.load(str(tmp_path / "m.tflite"))
