"""serving.verify: the figures and the verdict every export is judged by.

The figures are checked against hand-worked arrays (counted here, not
recomputed with the module), the floors at their edges, and a runtime
that fails is one line naming the artifact and the runtime.
"""

import re

import numpy as np
import pytest

from albert_tf import export_tflite
from albert_tf.core.record import ModelInfo
from albert_tf.serving import verify
from albert_tf.tasks.base import Task

MASK = np.ones([4, 3], np.int32)
FEATURES = {"input_ids": MASK * 5, "input_mask": MASK,
            "segment_ids": MASK * 0}


def _probs(rows):
  return {"probabilities": np.array(rows, np.float32),
          "logits": np.log(np.array(rows, np.float32))}


def test_compare_counts_agreement_accuracy_and_the_probability_gap():
  reference = _probs([[.9, .1], [.2, .8], [.6, .4], [.3, .7]])
  # The third example flips (0.6 -> 0.45 for class 0): 3 of 4 agree.
  artifact = _probs([[.85, .15], [.2, .8], [.45, .55], [.3, .7]])
  gold = np.array([0, 1, 0, 0])
  figures = verify.compare(reference, artifact, FEATURES, gold)
  assert figures["agreement"] == 0.75
  assert figures["compared"] == "the predicted class"
  assert figures["float_accuracy"] == 0.75  # ex. 4 wrong
  assert figures["accuracy"] == 0.5         # ex. 3 and 4 wrong
  assert figures["max_probability_difference"] == pytest.approx(0.15, abs=1e-6)
  # The largest of each output's max |difference| / max |reference|:
  # probabilities 0.15 / 0.9; logits log(.15 / .1) / |log .1| (the larger).
  assert figures["max_relative_difference"] == pytest.approx(
      max(0.15 / 0.9, np.log(1.5) / np.log(10)), rel=1e-5)


def test_a_tagger_is_compared_on_its_real_tokens_only():
  mask = np.array([[1, 1, 0], [1, 0, 0]], np.int32)
  features = {"input_ids": mask, "input_mask": mask, "segment_ids": 0 * mask}
  logits = np.zeros([2, 3, 2], np.float32)
  logits[..., 0] = 1.0
  other = logits.copy()
  other[0, 1] = [0.0, 1.0]   # a real token flips: 2 of 3 real tokens agree
  other[1, 2] = [0.0, 1.0]   # padding flips: not counted
  figures = verify.compare({"logits": logits}, {"logits": other}, features)
  assert figures["compared"] == "the tag of each real token"
  assert figures["agreement"] == pytest.approx(2 / 3)


def test_an_encoder_agrees_by_the_direction_of_its_pooled_output():
  ref = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
  got = np.array([[2.0, 0.01], [1.0, 1.0]], np.float32)  # cos ~1, cos 0.707
  figures = verify.compare({"pooled_output": ref}, {"pooled_output": got},
                           {"input_ids": ref.astype(np.int32)})
  assert figures["agreement"] == 0.5
  assert figures["min_pooled_cosine"] == pytest.approx(np.sqrt(0.5), rel=1e-6)


@pytest.mark.parametrize("quantize,agreement,accuracy,passed", [
    ("none", 0.995, 0.80, True),     # at the float floor
    ("none", 0.994, 0.80, False),    # just below it
    ("dynamic", 0.95, 0.78, True),   # 2 points lost: at the floor
    ("dynamic", 0.95, 0.77, False),  # 3 points lost
    ("int8", 0.94, 0.80, False),     # agreement below 95%
])
def test_floors_at_their_edges(quantize, agreement, accuracy, passed):
  figures = {"examples": 500, "compared": "the predicted class",
             "agreement": agreement, "float_accuracy": 0.80,
             "accuracy": accuracy, "max_relative_difference": 0.0}
  verify.judge(figures, quantize, verify.Floors(), "m.tflite", "use dynamic")
  assert figures["passed"] is passed
  if not passed:
    assert figures["verdict"].startswith(f"m.tflite (quantize={quantize}) ")
    assert figures["verdict"].endswith("on 500 held-out examples: use dynamic")


def test_check_refuses_below_the_floor_unless_degraded_is_allowed():
  reference = _probs([[.9, .1], [.2, .8], [.6, .4], [.3, .7]])
  flipped = _probs([[.1, .9], [.8, .2], [.4, .6], [.7, .3]])
  held = verify.HeldOut(FEATURES, np.array([0, 1, 0, 1]), "a file", True)
  with pytest.raises(verify.ExportVerificationError) as error:
    verify.check("m.onnx", "dynamic", lambda f: flipped, reference, held,
                 verify.Floors(), False, "ONNX Runtime", "use none")
  assert str(error.value) == (
      "m.onnx (quantize=dynamic) agrees with the float model on 0.0% of the "
      "predicted class (floor 95.0%); accuracy 0.000 against the float "
      "model's 1.000 (100.0 points lost, floor 2.0) on 4 held-out examples: "
      "use none (--allow_degraded writes it anyway)")
  figures = verify.check("m.onnx", "dynamic", lambda f: flipped, reference,
                         held, verify.Floors(), True, "ONNX Runtime",
                         "use none")
  assert figures["degraded"] and figures["accuracy"] == 0.0


def test_a_runtime_that_fails_is_one_line_even_with_degraded_allowed():
  def broken(features):
    raise RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH : No Op "
                       "registered for Erfc\nmore detail")
  held = verify.HeldOut(FEATURES, None, "a file", True)
  with pytest.raises(verify.ExportVerificationError) as error:
    verify.check("m.onnx", "none", broken, _probs([[.5, .5]] * 4), held,
                 verify.Floors(), True, "ONNX Runtime 1.32.0 (CPU)", "")
  assert str(error.value) == (
      "m.onnx does not run in ONNX Runtime 1.32.0 (CPU): [ONNXRuntimeError] "
      ": 10 : INVALID_GRAPH : No Op registered for Erfc")


class _Tokenizer:
  """Enough of a WordPiece tokenizer for the made-up texts."""
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ab", "##cd", "ef"]
  pad_id, unk_id, cls_id, sep_id, mask_id = 0, 1, 2, 3, 4
  vocab_size = len(vocab)

  def convert_ids_to_tokens(self, ids):
    return [self.vocab[i] for i in ids]


def test_without_held_out_text_the_made_up_texts_fit_every_input():
  texts = verify.vocabulary_texts(
      _Tokenizer(), ("article", "question", "options"), 5, num_choices=3)
  assert [len(texts[k]) for k in texts] == [5, 5, 5]
  assert all(len(options) == 3 for options in texts["options"])
  words = " ".join(texts["article"]).split()
  # Pieces spelled as text: "##cd" glued to the word before it.
  assert words and all(re.fullmatch("(ab|ef|cd)+", w) for w in words), words


def test_verify_data_is_read_as_albert_predict_reads_files(tmp_path):
  path = tmp_path / "held.tsv"
  path.write_text("id\treview\tlabel\n1\tgood\tpos\n2\tbad\tneg\n",
                  encoding="utf-8")
  record = ModelInfo(task="classification", label_list=["neg", "pos"],
                     max_seq_length=8)
  raw, gold, source = export_tflite.read_verify_data(
      str(path), record, Task, 10, input_columns=["text=review"])
  assert raw == {"text": ["good", "bad"]} and gold == ["pos", "neg"]
  assert source == f"--verify_data={path}"
  with pytest.raises(verify.ExportVerificationError) as error:
    export_tflite.read_verify_data(str(path), record, Task, 10)
  assert str(error.value).startswith(
      f"--verify_data: {path}:2: no column 'text' for the input 'text'")


# ------------------------------------------------------------ a tagger
TAGS = ["B-n", "I-n", "B-r", "I-r"]  # a POS tag set without O


def _tagger_record(tmp_path, level="char", dev=None):
  training = {"data_dir": str(tmp_path), "data": {"dev": {
      "file": str(dev), "sentences": 2}}} if dev else None
  return ModelInfo(task="tagging", task_name="conll", label_list=TAGS,
                   max_seq_length=8, training=training,
                   task_config={"tag_scheme": "BIO", "doc_stride": 4,
                                "token_level": level})


def _char_tokenizer(tmp_path):
  from albert_tf.data import tokenization  # pylint: disable=g-import-not-at-top
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                            + list("你好吗我们")) + "\n", encoding="utf-8")
  return tokenization.load_tokenizer(vocab_file=str(path))


def test_a_taggers_verify_data_has_tags_per_token_as_albert_predict_reads(
    tmp_path):
  """The JSON lines albert-predict --model=tagger scores (a list of tags
  per row) and a TSV of tags between spaces were refused: 'gold label
  "['B-r', ...]" is not one of the model's labels'."""
  from albert_tf.tasks.tagging import TaggingTask  # pylint: disable=g-import-not-at-top
  record = _tagger_record(tmp_path)
  jsonl = tmp_path / "test.jsonl"
  jsonl.write_text('{"text": "你好吗", "label": ["B-r", "I-r", "B-n"]}\n'
                   '{"text": "我 们", "label": ["B-n", "I-n"]}\n'
                   '{"text": "我们"}\n', encoding="utf-8")
  tsv = tmp_path / "test.tsv"
  tsv.write_text("text\tlabel\n你好吗\tB-r I-r B-n\n我 们\tB-n I-n\n",
                 encoding="utf-8")
  gold = [["B-r", "I-r", "B-n"], ["B-n", "I-n"]]
  assert export_tflite.read_verify_data(str(jsonl), record, TaggingTask,
                                        10) == (
      {"text": ["你好吗", "我 们", "我们"]}, gold + [None],
      f"--verify_data={jsonl}")
  assert export_tflite.read_verify_data(str(tsv), record, TaggingTask,
                                        10)[1] == gold
  # One tag per character, as albert-predict counts them.
  tsv.write_text("text\tlabel\n你好吗\tB-r I-r\n", encoding="utf-8")
  with pytest.raises(verify.ExportVerificationError) as error:
    export_tflite.read_verify_data(str(tsv), record, TaggingTask, 10)
  assert str(error.value) == (
      f"--verify_data: {tsv}:2: 2 gold tags, the text has 3 tokens (one tag "
      "per character, whitespace skipped)")


def _logits(features, tags_per_row):
  """Logits [n, seq, 4] whose argmax is tags_per_row[i][j] at the j-th
  token's position (tokens are one piece each here: position j + 1)."""
  logits = np.zeros(features["input_ids"].shape + (len(TAGS),), np.float32)
  for i, tags in enumerate(tags_per_row):
    for j, tag in enumerate(tags):
      logits[i, j + 1, TAGS.index(tag)] = 1.0
  return {"logits": logits}


def test_a_tagger_is_scored_by_entity_f1_on_its_gold_tags(tmp_path):
  from albert_tf.tasks.tagging import TaggingTask  # pylint: disable=g-import-not-at-top
  record = _tagger_record(tmp_path)
  gold = [["B-r", "I-r", "B-n"], ["B-n", "I-n"], None]
  held = verify.held_out(record, _char_tokenizer(tmp_path), TaggingTask, (
      {"text": ["你好吗", "我们", "你"]}, gold, "test.jsonl"))
  assert held.gold is None and held.metric[0] == "entity_f1"
  reference = _logits(held.features, gold[:2] + [["B-n"]])
  # The second text's 们 flips I-n -> B-r: entities n(0,1) r(1,2) where
  # the gold has n(0,2). Gold 3 entities, predicted 4, 2 right:
  # P 1/2, R 2/3, F1 4/7.
  artifact = _logits(held.features, [gold[0], ["B-n", "B-r"], ["B-n"]])
  figures = verify.compare(reference, artifact, held.features,
                           held.gold, held.metric)
  assert figures["float_entity_f1"] == 1.0
  assert figures["entity_f1"] == pytest.approx(4 / 7)
  assert figures["entity_f1_examples"] == 2
  # Real positions: [CLS] + 3 + [SEP], [CLS] + 2 + [SEP], [CLS] + 1 + [SEP].
  assert figures["agreement"] == pytest.approx(11 / 12)
  verify.judge(figures, "dynamic", verify.Floors(min_agreement=0.9),
               "m.tflite", "use none")
  assert figures["verdict"] == (
      "m.tflite (quantize=dynamic) entity F1 0.571 against the float "
      "model's 1.000 (42.9 points lost, floor 2.0) on 3 held-out examples "
      "(entity F1 on the 2 labelled): use none")
  figures = verify.compare(reference, reference, held.features, None,
                           held.metric)
  verify.judge(figures, "dynamic", verify.Floors(), "m.tflite", "")
  assert figures["verdict"] == (
      "entity F1 1.000 (+0.0 points against the float model's 1.000); "
      "agreement 100.0% on 3 held-out examples (entity F1 on the 2 "
      "labelled)")


def test_a_taggers_default_held_out_data_is_its_recorded_dev_split(
    tmp_path):
  """It was '64 texts made of the vocabulary's own pieces (no held-out
  text: give --verify_data)', and export_saved_model said the dev file
  was not read (the family does not read it back)."""
  from albert_tf.serving import model_card, saved_model_check  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks.tagging import TaggingTask  # pylint: disable=g-import-not-at-top
  dev = tmp_path / "dev.txt"
  dev.write_text("你 B-r\n好 I-r\n吗 B-n\n\n我 B-n\n们 I-n\n\n",
                 encoding="utf-8")
  record = _tagger_record(tmp_path, dev=dev)
  source = f"the run's dev split, {dev} (2 sentences)"
  gold = [["B-r", "I-r", "B-n"], ["B-n", "I-n"]]
  assert TaggingTask.held_out_inputs(record, 10) == (
      {"text": ["你好吗", "我们"]}, gold, source)
  held = verify.held_out(record, _char_tokenizer(tmp_path), TaggingTask)
  assert held.source == source and held.real_text
  assert held.metric[0] == "entity_f1" and held.metric[2] == 2
  checked = saved_model_check.held_out(record, TaggingTask,
                                       _char_tokenizer(tmp_path))
  assert checked.source == source and checked.texts == ["你好吗", "我们"]
  # Words joined by a space; a sentence that does not split back into its
  # tokens (U.S. is three tokens to serve_text) is left out.
  dev.write_text("ab B-n\ncd I-n\n\nU.S. B-r\n\n", encoding="utf-8")
  assert TaggingTask.held_out_inputs(_tagger_record(tmp_path, "word", dev),
                                     10) == (
      {"text": ["ab cd"]}, [["B-n", "I-n"]],
      f"the run's dev split, {dev} (1 sentence)")
  # The card names the dev split with its size, where it said (? examples).
  card = model_card.card(record, None, str(tmp_path / "vocab.txt"), ["text"],
                         "m.tflite")
  assert f"- dev: {dev} (2 sentences)" in card
