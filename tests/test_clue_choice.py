"""CLUE's C3 and CHID in the multiple_choice family: their readers (the
official layouts, written here in a few lines), encoders, padded choices
masked out of the softmax, the submission files, and one fine-tune of each
end to end on a tiny model."""

import json

import numpy as np
import pytest

from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.data import clue_choice
from albert_tf.data import race
from albert_tf.data import tokenization
from albert_tf.data.classifier_data import DataError
from albert_tf.serving import choice_graph
from tests import numpy_reference
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "甲乙丙丁戊己庚辛男女问答好差山水风火云雨林石花月"


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
  return write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"), CHARS)


@pytest.fixture(scope="module")
def tokenizer(vocab_dir):
  return tokenization.load_tokenizer(vocab_file=str(vocab_dir / "vocab.txt"))


# ------------------------------------------------------------------ C3
def c3_doc(k, n_choices=(4, 3, 2), answers=True, ids=False):
  questions = []
  for j, n in enumerate(n_choices):
    q = {"question": f"问{k}{j}", "choice": list("山水风火")[:n]}
    if answers:
      q["answer"] = q["choice"][(k + j) % n]
    if ids:
      q["id"] = f"q{k}-{j}"
    questions.append(q)
  return [[f"男：甲{k}", f"女：乙{k}"], questions, f"{k}-{k}"]


def write_c3(root, split_docs):
  root.mkdir(parents=True, exist_ok=True)
  for name, docs in split_docs.items():
    # Indented as CLUE's files are: each document starts on its own line.
    (root / name).write_text(json.dumps(docs, ensure_ascii=False, indent=1),
                             encoding="utf-8")
  return root


def c3_tree(root):
  return write_c3(root, {
      "d-train.json": [c3_doc(0), c3_doc(1)],
      "m-train.json": [c3_doc(2, (2,))],
      "d-dev.json": [c3_doc(3, (4,))], "m-dev.json": [c3_doc(4, (3,))],
      "test1.1.json": [c3_doc(5, answers=False), c3_doc(6, (4,), False)]})


def test_c3_reads_questions_answers_levels_and_ids(tmp_path):
  c3_tree(tmp_path)
  data = clue_choice.read_c3(str(tmp_path), "train")
  assert [q.id for q in data.examples] == [0, 1, 2, 3, 4, 5, 6]
  assert [len(q.options) for q in data.examples] == [4, 3, 2, 4, 3, 2, 2]
  assert [q.label for q in data.examples] == [0, 1, 0, 1, 2, 1, 0]
  assert [q.level for q in data.examples] == ["d"] * 6 + ["m"]
  assert data.examples[0].article == "男：甲0\n女：乙0"
  assert data.counts == {"files": 2, "documents": 3, "questions": 7,
                         "unlabelled": 0, "choices_2": 3, "choices_3": 2,
                         "choices_4": 2}
  test = clue_choice.read_c3(str(tmp_path), "test")
  assert [q.id for q in test.examples] == [0, 1, 2, 3]
  assert all(q.label is None for q in test.examples)
  write_c3(tmp_path, {"test1.1.json": [c3_doc(7, (2, 4), False, ids=True)]})
  assert [q.id for q in clue_choice.read_c3(str(tmp_path), "test").examples
          ] == ["q7-0", "q7-1"]


@pytest.mark.parametrize("change, message", [
    (lambda d: d[1][0].update(answer="石"),
     r"document '1-1' question 0: answer '石' is not one of its choices"),
    (lambda d: d[1][0].update(choice=["山"]),
     r"document '1-1' question 0: 'choice' is not a list of 2 to 4 strings"),
    (lambda d: d[1][1].pop("answer"),
     r"document '1-1' question 1: no 'answer'"),
    (lambda d: d.pop(), r"expected a document"),
])
def test_c3_malformed_document_names_file_and_line(change, message,
                                                   tmp_path):
  c3_tree(tmp_path)
  doc = c3_doc(1)
  change(doc)
  write_c3(tmp_path, {"d-train.json": [c3_doc(0, (2,)), doc]})
  # The line where the second document starts.
  lines = (tmp_path / "d-train.json").read_text(encoding="utf-8").split("\n")
  line = [i for i, text in enumerate(lines, 1) if text == " ["][1]
  assert line == 19
  with pytest.raises(DataError, match=rf"d-train\.json:{line}: {message}"):
    clue_choice.read_c3(str(tmp_path), "train")


def test_c3_bad_json_and_missing_files(tmp_path):
  c3_tree(tmp_path)
  (tmp_path / "m-dev.json").write_text('[\n [["a"], [], "x"],\n oops\n]',
                                       encoding="utf-8")
  with pytest.raises(DataError, match=r"m-dev\.json:3: not JSON"):
    clue_choice.read_c3(str(tmp_path), "dev")
  (tmp_path / "m-dev.json").unlink()
  with pytest.raises(FileNotFoundError, match=r"no dev file\(s\) in .*"
                     r"looked for d-dev\.json \+ m-dev\.json; c3-d-dev\.json"):
    clue_choice.read_c3(str(tmp_path), "dev")


def test_c3_encoding_pads_missing_choices(tmp_path, tokenizer):
  c3_tree(tmp_path)
  data = clue_choice.read_c3(str(tmp_path), "train")
  features, counts = choice_graph.encode_questions(
      data.examples, tokenizer, 24, 8, clue_choice.C3)
  assert features[F.INPUT_IDS].shape == (7, 4, 24)
  real = features[F.INPUT_MASK].any(-1)
  assert real.sum(-1).tolist() == [4, 3, 2, 4, 3, 2, 2]
  assert counts["choices_padded"] == 5
  # The real choices are the original RACE packing of the question.
  for i, n in ((0, 4), (1, 3)):
    expected, _, _ = numpy_reference.race_packing(
        tokenizer, data.examples[i:i + 1], 24, 8)
    np.testing.assert_array_equal(features[F.INPUT_IDS][i, :n],
                                  expected[F.INPUT_IDS][0])
  assert features[F.LABEL_IDS].tolist() == [0, 1, 0, 1, 2, 1, 0]


# ---------------------------------------------------------------- CHID
def chid_line(first, n_candidates=7, passages=2):
  """A content line of `passages` passages, blanks numbered from first."""
  content = [f"山水#idiom{first:06d}#风火云", f"甲#idiom{first + 1:06d}#乙"
             f"丙丁#idiom{first + 2:06d}#戊"][:passages]
  return {"content": content,
          "candidates": ["山水风火", "云雨林石", "花月甲乙", "丙丁戊己",
                         "庚辛男女", "问答好差", "山云花丙", "水雨月丁",
                         "风林甲戊", "火石乙己"][:n_candidates]}


def write_chid(root, split, lines, answers=None):
  root.mkdir(parents=True, exist_ok=True)
  name = {"test": "test1.1.json"}.get(split, f"{split}.json")
  (root / name).write_text("".join(
      (l if isinstance(l, str) else json.dumps(l, ensure_ascii=False)) + "\n"
      for l in lines), encoding="utf-8")
  if answers is not None:
    (root / name.replace(".json", "_answer.json")).write_text(
        json.dumps(answers, indent=2), encoding="utf-8")


def chid_tree(root):
  write_chid(root, "train", [chid_line(0), "", chid_line(3, 10, 1)],
             {"#idiom000000#": 1, "#idiom000001#": 0, "#idiom000002#": 6,
              "#idiom000003#": 9, "#idiom999999#": 2})
  write_chid(root, "dev", [chid_line(10, 8)],
             {"#idiom000010#": 2, "#idiom000011#": 3, "#idiom000012#": 7})
  write_chid(root, "test", [chid_line(20), chid_line(23, 10, 1)])


def test_chid_reads_blanks_answers_and_counts(tmp_path):
  chid_tree(tmp_path)
  data = clue_choice.read_chid(str(tmp_path), "train")
  assert [q.id for q in data.examples] == [
      "#idiom000000#", "#idiom000001#", "#idiom000002#", "#idiom000003#"]
  assert [q.label for q in data.examples] == [1, 0, 6, 9]
  assert [len(q.options) for q in data.examples] == [7, 7, 7, 10]
  assert data.examples[1].article == "甲#idiom000001#乙丙丁#idiom000002#戊"
  assert data.counts == {"lines": 2, "passages": 3, "blanks": 4,
                         "passages_without_blank": 0, "answers_unused": 1,
                         "unlabelled": 0}
  test = clue_choice.read_chid(str(tmp_path), "test")
  assert len(test.examples) == 4 and test.counts["unlabelled"] == 4


def test_chid_passage_without_blank_is_skipped_and_named(tmp_path, caplog):
  line = chid_line(0)
  line["content"].append("没有空")
  write_chid(tmp_path, "dev", [line], {f"#idiom00000{i}#": 0
                                       for i in range(3)})
  data = clue_choice.read_chid(str(tmp_path), "dev")
  assert len(data.examples) == 3
  assert data.counts["passages_without_blank"] == 1
  assert "dev.json:1 passage 2" in caplog.text


@pytest.mark.parametrize("lines, answers, message", [
    ([chid_line(0), chid_line(2)], {}, r"dev\.json:1: blank #idiom000000# "
     r"has no answer in .*dev_answer\.json"),
    ([chid_line(0), chid_line(2)], {f"#idiom{i:06d}#": 0 for i in range(5)},
     r"dev\.json:2: blank #idiom000002# occurs again \(first at "
     r".*dev\.json:1\)"),
    ([chid_line(0), {"content": ["#idiom000009#"]}],
     {f"#idiom{i:06d}#": 0 for i in range(10)},
     r"dev\.json:2: missing field\(s\) 'candidates'"),
    ([dict(chid_line(0), candidates=["山水风火"] * 11)], {},
     r"dev\.json:1: 'candidates' is not a list of 2 to 10 idioms"),
    ([chid_line(0)], {f"#idiom{i:06d}#": 7 for i in range(3)},
     r"dev_answer\.json: #idiom000000#: answer 7 is not an index of the 7 "
     r"candidates of .*dev\.json:1"),
    (["{oops"], {}, r"dev\.json:1: not JSON"),
])
def test_chid_malformed_input_names_file_and_line(lines, answers, message,
                                                  tmp_path):
  write_chid(tmp_path, "dev", lines, answers)
  with pytest.raises(DataError, match=message):
    clue_choice.read_chid(str(tmp_path), "dev")


def test_chid_train_needs_its_answer_file(tmp_path):
  write_chid(tmp_path, "train", [chid_line(0)])
  with pytest.raises(FileNotFoundError, match=r"needs .*train_answer\.json"):
    clue_choice.read_chid(str(tmp_path), "train")


def test_chid_encoding(tmp_path, tokenizer):
  chid_tree(tmp_path)
  data = clue_choice.read_chid(str(tmp_path), "train")
  features, counts = clue_choice.encode_chid(data.examples, tokenizer, 18, 4)
  ids, mask = features[F.INPUT_IDS], features[F.INPUT_MASK]
  assert ids.shape == (4, 10, 18)
  assert mask.any(-1).sum(-1).tolist() == [7, 7, 7, 10]
  tok = tokenizer.convert_ids_to_tokens
  # The vocabulary has no [unused1]: the blank's marker is [MASK]; the
  # passage's other blank is four [MASK]s; the context fits whole.
  assert "".join(tok(ids[1, 0][mask[1, 0] == 1])) == (
      "[CLS]山水风火[SEP]甲[MASK]乙丙丁[MASK][MASK][MASK][MASK]戊[SEP]")
  segments = features[F.SEGMENT_IDS][1, 0][mask[1, 0] == 1].tolist()
  assert segments == [0] * 6 + [1] * 11
  assert counts == {"questions": 4, "contexts_truncated": 0,
                    "idioms_truncated": 0, "choices_padded": 3}
  # Longer than the window: the pieces nearest the blank are kept.
  features, counts = clue_choice.encode_chid(data.examples, tokenizer, 12, 4)
  assert "".join(tok(features[F.INPUT_IDS][2, 1])) == (
      "[CLS]云雨林石[SEP]乙丙丁[MASK]戊[SEP]")
  assert counts["contexts_truncated"] == 4
  with pytest.raises(ValueError, match="max_qa_length"):
    clue_choice.encode_chid(data.examples, tokenizer, 8, 5)


def test_chid_marker_is_unused1_where_the_vocabulary_has_it(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(
      ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused1]"] +
      list(CHARS)) + "\n", encoding="utf-8")
  tok = tokenization.load_tokenizer(vocab_file=str(tmp_path / "vocab.txt"))
  question = race.Question("#idiom000001#", "", "甲#idiom000001#乙",
                           "#idiom000001#", ["山水风火", "云雨林石"], None)
  features, _ = clue_choice.encode_chid([question], tok, 16, 4)
  assert tok.convert_ids_to_tokens(features[F.INPUT_IDS][0, 0, :9]) == [
      "[CLS]", "山", "水", "风", "火", "[SEP]", "甲", "[unused1]", "乙"]


def test_chid_served_inputs_encode_as_training(tmp_path, tokenizer):
  """albert_tf.load / ONNX / TFLite encode (article, question: the blank's
  tag, options) as fine-tuning does; a question no blank of its article is
  an error."""
  from albert_tf.core.record import ModelInfo  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks.multiple_choice import MultipleChoiceTask  # pylint: disable=g-import-not-at-top
  chid_tree(tmp_path)
  data = clue_choice.read_chid(str(tmp_path), "train").examples
  record = ModelInfo(task="multiple_choice", task_name="chid",
                     task_config={"max_qa_length": 4, "num_choices": 10})
  inputs = {"article": [q.article for q in data],
            "question": [q.question for q in data],
            "options": [q.options for q in data]}
  served = MultipleChoiceTask.encode_inputs(record, tokenizer, 12, inputs)
  trained = clue_choice.encode_chid(data, tokenizer, 12, 4)[0]
  for k in F.ENCODER_INPUTS:
    np.testing.assert_array_equal(served[k], trained[k])
  inputs["question"][1] = "#idiom000009#"
  with pytest.raises(DataError, match=r"'#idiom000009#' is not a #idiom"):
    MultipleChoiceTask.encode_inputs(record, tokenizer, 12, inputs)


# --------------------------------------------------------- submissions
def test_submission_files_exact_content(tmp_path):
  c3 = [race.Question(i, "", "a", "q", ["x", "y"], None) for i in (0, 1, 2)]
  clue_choice.write_c3_submission(str(tmp_path / "c3.json"), c3,
                                  np.array([1, 0, 3]))
  assert (tmp_path / "c3.json").read_text() == (
      '{"id": 0, "label": 1}\n{"id": 1, "label": 0}\n{"id": 2, "label": 3}\n')
  chid = [race.Question(f"#idiom00000{i}#", "", "a", "q", ["x"], None)
          for i in (4, 2)]
  clue_choice.write_chid_submission(str(tmp_path / "chid.json"), chid,
                                    [6, 0])
  assert (tmp_path / "chid.json").read_text() == (
      '{\n  "#idiom000004#": 6,\n  "#idiom000002#": 0\n}\n')


def test_registered_with_clues_settings():
  data = registry.datasets("multiple_choice")
  assert data["c3"].spec is clue_choice.C3
  assert data["chid"].spec is clue_choice.CHID
  assert data["chid"].defaults["max_seq_length"] == 64
  assert data["c3"].spec.submission_file == "c311_predict.json"
  assert data["chid"].spec.submission_file == "chid11_predict.json"


# ----------------------------------------------------------- the model
def test_padded_choices_get_no_probability(tiny_config):
  from albert_tf.modeling import multiple_choice  # pylint: disable=g-import-not-at-top
  model = multiple_choice.AlbertMultipleChoice(tiny_config, 3)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 60, (2, 3, 8)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[0, 2] = 0
  ids[0, 2] = 0
  logits = model({F.INPUT_IDS: ids, F.INPUT_MASK: mask,
                  F.SEGMENT_IDS: np.zeros_like(ids)})[F.LOGITS].numpy()
  assert logits[0, 2] == multiple_choice.PADDED_CHOICE_LOGIT
  assert (np.abs(logits[1]) < 100).all() and (np.abs(logits[0, :2]) < 100
                                              ).all()


# ---------------------------------------------------------- end to end
def _run(task, data_dir, output_dir, vocab_dir, **kw):
  from albert_tf import finetune  # pylint: disable=g-import-not-at-top
  return finetune.run(
      task=task, data_dir=str(data_dir), output_dir=str(output_dir),
      vocab_file=str(vocab_dir / "vocab.txt"),
      albert_config_file=str(vocab_dir / "config.json"), train_batch_size=4,
      learning_rate=1e-3, num_train_epochs=1.0, do_train=True, do_eval=True,
      do_predict=True, **kw)


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_c3_fine_tunes_and_writes_its_submission(tmp_path, vocab_dir):
  c3_tree(tmp_path / "c3")
  result = _run("c3", tmp_path / "c3", tmp_path / "out", vocab_dir,
                max_seq_length=24, max_qa_length=8)
  assert result["eval"]["num_examples"] == 2
  assert result["data"]["train"]["choices_padded"] == 5
  lines = [json.loads(l) for l in
           (tmp_path / "out" / "c311_predict.json").read_text().splitlines()]
  assert [l["id"] for l in lines] == [0, 1, 2, 3]
  # A padded choice is never the prediction: question 2 has 2 choices.
  assert lines[2]["label"] in (0, 1) and all(
      0 <= l["label"] < 4 for l in lines)
  rows = (tmp_path / "out" / "test_predictions.tsv").read_text().splitlines()
  assert rows[0].split("\t") == ["id", "level", "prediction", "prob_0",
                                 "prob_1", "prob_2", "prob_3"]
  assert float(rows[3].split("\t")[-1]) == 0.0  # question 2's 4th choice
  record = json.loads((tmp_path / "out" / "task_record.json").read_text())
  assert record["task_config"]["num_choices"] == 4
  # albert_tf.load encodes raw questions as training did (C3's padded
  # choices, not RACE's packing): the probabilities test_predictions.tsv
  # has, for questions with 2 to 4 options.
  import albert_tf  # pylint: disable=g-import-not-at-top
  test = clue_choice.read_c3(str(tmp_path / "c3"), "test").examples
  got = albert_tf.load(str(tmp_path / "out")).predict(
      [q.article for q in test], [q.question for q in test],
      [q.options for q in test])
  written = np.array([[float(x) for x in row.split("\t")[3:]]
                      for row in rows[1:]])
  np.testing.assert_allclose([g["probabilities"] for g in got], written,
                             atol=2e-6)  # the file's 6 decimals
  # C3's export has no serve_text (its padded choices): it serves ids.
  from albert_tf import export_saved_model  # pylint: disable=g-import-not-at-top
  version = export_saved_model.export(checkpoint=str(tmp_path / "out"),
                              export_dir=str(tmp_path / "saved"))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert sorted(tf.saved_model.load(version).signatures) == [
      "serving_default"]
  # ... and albert_tf.load of the export encodes in Python too.
  served = albert_tf.load(version).predict(
      [q.article for q in test], [q.question for q in test],
      [q.options for q in test])
  np.testing.assert_allclose([g["probabilities"] for g in served], written,
                             atol=2e-6)


def test_chid_fine_tunes_and_writes_its_submission(tmp_path, vocab_dir):
  chid_tree(tmp_path / "chid")
  result = _run("chid", tmp_path / "chid", tmp_path / "out", vocab_dir,
                max_seq_length=16, max_qa_length=4)
  assert result["eval"]["num_examples"] == 3
  answers = json.loads((tmp_path / "out" / "chid11_predict.json").read_text())
  assert list(answers) == ["#idiom000020#", "#idiom000021#", "#idiom000022#",
                           "#idiom000023#"]
  assert all(0 <= answers[t] < 7 for t in list(answers)[:3])
  assert 0 <= answers["#idiom000023#"] < 10
