"""The tagger's graph preprocessor against hand-checked expectations and the
Python tokenizer's pieces; serve_text == run_ner-style prediction; the
TFLite file == the SavedModel.

Two tiny taggers are trained for a few steps with `run_ner.run` on synthetic
mixed Chinese/Latin/digit text: character tokens with a WordPiece vocab, and
word tokens with a SentencePiece model trained on People's Daily. Each is
exported once per module and shared by the tests.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

from albert_tf import run_ner
from albert_tf.training import checkpoints
from albert_tf.data import conll, ner_data
from albert_tf.data import tokenization
from albert_tf import export_saved_model as export_lib
from albert_tf import export_tflite
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.models import AlbertTagger
from albert_tf.serving import saved_model
from albert_tf.serving import tagging_graph
from albert_tf.serving.tagging_graph import TextTagger
from tests import deploy_fixtures as fx
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401  pylint: disable=unused-import
from tests.numpy_reference import assert_close_to_scale
from tests.tagging_reference import (reference_encode, reference_entities,
                                     reference_split)

MAX_SEQ = 32
ENTITIES = {"PER": ["张三", "李四", "王小明", "Alice", "Bob Smith"],
            "LOC": ["北京", "上海", "广州", "Paris", "New York"],
            "ORG": ["新华社", "人民日报", "Google", "ACME"]}
FILLER = ["在", "了", "去", "用", "年", "说", "的", "和", "2024", "１５",
          "iPhone", "15", "，", "。", "went to", "the", "👍"]
# Mixed scripts, full-width forms, runs of spaces, emoji (with a skin-tone
# modifier: two code points), a decomposed accent, and one text past the
# window (its tail is not tagged).
TEST_TEXTS = [
    "张三在2024年用iPhone 15去了北京。",
    "  李四和王小明   去了上海，  用 Google 👍🏽  ",
    "Alice went to Paris 和 New York，在２０２４年。",
    "",
    "Ｂｏｂ Smith 说：新华社的 ACME 在广州 cafe\u0301。",
    "人民日报\t说\u3000王小明\n在北京",
    "张三在北京。" * 12,
]


def synthetic_text(rng):
  """A text of entities and filler; returns (text, [(type, start, end)])."""
  text, spans = "", []
  for _ in range(rng.integers(3, 9)):
    if rng.random() < 0.4:
      kind = str(rng.choice(sorted(ENTITIES)))
      part = str(rng.choice(ENTITIES[kind]))
    else:
      kind, part = None, str(rng.choice(FILLER))
    # Word characters on both sides need a space, or two words would merge
    # into one token across an entity border.
    if text and (tagging_graph.is_word_char(text[-1]) and
                 tagging_graph.is_word_char(part[0]) or rng.random() < 0.3):
      text += " " * int(rng.integers(1, 3))
    if kind:
      spans.append((kind, len(text), len(text) + len(part)))
    text += part
  return text, spans


def sentences(n, seed, token_level):
  """CoNLL sentences of synthetic texts split as serve_text splits them."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    text, spans = synthetic_text(rng)
    tokens = reference_split(text, token_level)
    tags = ["O"] * len(tokens)
    for kind, start, end in spans:
      inside = [i for i, (_, s, e) in enumerate(tokens)
                if s >= start and e <= end]
      for j, i in enumerate(inside):
        tags[i] = ("B-" if j == 0 else "I-") + kind
    out.append(conll.Sentence([t for t, _, _ in tokens], tags, 0))
  return out


def write_conll(path, data):
  with open(path, "w", encoding="utf-8") as f:
    for s in data:
      f.writelines(f"{t} {g}\n" for t, g in zip(s.tokens, s.tags))
      f.write("\n")


def wordpiece_vocab(directory):
  """Every normalised character of the texts (the emoji stay [UNK]), a few
  words, and ## pieces for the rest of the Latin letters and digits."""
  chars = set()
  texts = TEST_TEXTS + FILLER + [e for v in ENTITIES.values() for e in v]
  for text in texts:
    chars.update(tokenization.normalize(text, "wordpiece").replace(" ", ""))
  chars -= {"👍", "\U0001f3fd"}
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(chars) +
           ["iphone", "google", "paris", "##" + "e", "##le"] +
           ["##" + c for c in "abcdfghijklmnopqrstuvwxyz0123456789"])
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(dict.fromkeys(vocab)) + "\n")
  return path


def train_and_export(root, token_level, tokenizer_flag, tokenizer_file):
  """run_ner for a few steps, then export_saved_model --model=tagger."""
  data = root / "data"
  data.mkdir()
  write_conll(data / "train.txt", sentences(300, 1, token_level))
  tokenizer = tokenization.load_tokenizer(**{tokenizer_flag: tokenizer_file})
  config = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16,
                        hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=MAX_SEQ)
  config.to_json_file(root / "albert_config.json")
  run_ner.run(task_name="conll", data_dir=str(data),
              output_dir=str(root / "ner"),
              albert_config_file=str(root / "albert_config.json"),
              max_seq_length=MAX_SEQ, doc_stride=10, train_batch_size=16,
              learning_rate=3e-3, warmup_step=2, classifier_dropout=0.0,
              seed=1, train_step=60, iterations_per_loop=20,
              log_every_steps=60, do_train=True, do_eval=False,
              **{tokenizer_flag: tokenizer_file})
  info = json.loads((root / "ner" / "task_record.json").read_text())
  assert info["task"] == "tagging"
  assert info["task_config"] == {"tag_scheme": "BIO", "doc_stride": 10,
                                 "token_level": token_level}
  # No --model: the recorded task's (the tagger).
  path = export_lib.export(checkpoint=str(root / "ner"),
                           export_dir=str(root / "saved_models" / "ner"))
  # The Keras model with the checkpoint's weights: run_ner's predictions.
  model = AlbertTagger(config, len(info["label_list"]))
  checkpoints.restore_weights(str(root / "ner"), model)
  return {"root": root, "path": path, "model": model, "tokenizer": tokenizer,
          "labels": info["label_list"], "level": token_level,
          "loaded": tf.saved_model.load(path)}


@pytest.fixture(scope="module")
def char_wordpiece(tmp_path_factory):
  root = tmp_path_factory.mktemp("tag_char")
  return train_and_export(root, "char", "vocab_file",
                          wordpiece_vocab(str(root)))


@pytest.fixture(scope="module")
def word_sentencepiece(tmp_path_factory, spm_model):  # pylint: disable=redefined-outer-name
  return train_and_export(tmp_path_factory.mktemp("tag_word"), "word",
                          "spm_model_file", spm_model)


EXPORTS = ["char_wordpiece", "word_sentencepiece"]


# ------------------------------------------------------------ helpers
def serve(exported, texts):
  out = exported["loaded"].signatures["serve_text"](text=tf.constant(texts))
  return {k: v.numpy() for k, v in out.items()}


def served_row(out, i, length):
  """(entities, char_tags, num_untagged_chars) of row i of serve_text."""
  n = int(out["num_entities"][i])
  entities = [(out["entity_types"][i, j].decode(),
               int(out["entity_starts"][i, j]), int(out["entity_ends"][i, j]),
               out["entity_texts"][i, j].decode()) for j in range(n)]
  # Past the entities and past the text: padding only.
  assert set(out["entity_types"][i, n:]) <= {b""}
  assert set(out["entity_starts"][i, n:]) <= {-1}
  assert set(out["char_tags"][i, length:]) <= {b""}
  return (entities, [t.decode() for t in out["char_tags"][i, :length]],
          int(out["num_untagged_chars"][i]))


def keras_logits(model, features):
  return np.asarray(model(features, training=False)["logits"])


# Logits of one model computed twice (Keras eager, the SavedModel graph,
# LiteRT's XNNPACK) differ by float32 rounding of differently ordered sums:
# at most this much times the largest |logit|.
SAME_MODEL_REL = 1e-5
LITERT_REL = 1e-4


def assert_same_argmax(logits, tag_ids, rel):
  """tag_ids == argmax(logits), except where two tags tie: their logits
  closer than twice the rounding difference (`rel` x the largest |logit|)."""
  logits = np.asarray(logits, np.float64)
  tag_ids = np.asarray(tag_ids)
  best = logits.argmax(-1)
  differ = best != tag_ids
  if differ.any():
    picked = np.take_along_axis(logits, tag_ids[..., None], -1)[..., 0]
    gap = (logits.max(-1) - picked)[differ]
    scale = np.abs(logits).max()
    assert gap.max() <= 2 * rel * scale, (differ.sum(), gap.max(), scale)


# ------------------------------------------------------------ preprocessor
def test_split_levels():
  text = "张三在2024年用iPhone 15去了北京。"
  [words, chars] = [tagging_graph.split_texts([t], level)[0] for t, level in (
      (text, "word"), (" a\u00a0b１２ 👍🏽", "char"))]
  assert [t for t, _, _ in words] == ["张", "三", "在", "2024", "年", "用",
                                      "iPhone", "15", "去", "了", "北", "京",
                                      "。"]
  assert words[6] == ("iPhone", 9, 15)
  assert [t for t, _, _ in chars] == ["a", "b", "１", "２", "👍", "\U0001f3fd"]
  for level in tagging_graph.TOKEN_LEVELS:
    split = tagging_graph.split_texts(TEST_TEXTS + fx.MIXED_TEXTS, level)
    for t, tokens in zip(TEST_TEXTS + fx.MIXED_TEXTS, split):
      assert all(t[s:e] == token for token, s, e in tokens)
      # Nothing but whitespace is left out.
      covered = {i for _, s, e in tokens for i in range(s, e)}
      assert all(t[i].isspace() for i in range(len(t)) if i not in covered)
      assert tokens == reference_split(t, level), t
  with pytest.raises(ValueError, match="token_level must be one of"):
    tagging_graph.split_texts(["x"], "piece")


def test_decode_reads_tags_as_conlleval(tmp_path):
  tokenizer = tokenization.load_tokenizer(
      vocab_file=wordpiece_vocab(str(tmp_path)))
  labels = ner_data.bio_label_list(["LOC", "ORG", "PER"])
  text = "Bob  Smith went to New York 和北京"
  tags = ["B-PER", "I-PER", "O", "O", "I-LOC", "I-LOC", "O", "B-LOC",
          "I-ORG"]
  _, [tokens], [positions] = TextTagger.from_tokenizer(
      tokenizer, MAX_SEQ, "word", labels).encode_batch([text])
  assert len(tokens) == len(positions) == len(tags)
  # A window that ends just before the last token's first piece.
  tagger = TextTagger.from_tokenizer(tokenizer, positions[-1] + 1, "word",
                                     labels)
  features, _, [cut_positions] = tagger.encode_batch([text])
  assert cut_positions == positions[:-1]
  tag_ids = np.zeros(features["input_ids"].shape, np.int64)
  tag_ids[0, positions[:-1]] = [labels.index(t) for t in tags[:-1]]
  out = tagger.decode(tf.constant([text]), tagger.encode(tf.constant(
      [text]))[1], tf.constant(tag_ids))
  entities, char_tags, untagged = served_row(
      {k: v.numpy() for k, v in out.items()}, 0, len(text))
  assert [(k, text[s:e]) for k, s, e, _ in entities] == [
      ("PER", "Bob  Smith"), ("LOC", "New York"), ("LOC", "北")]
  assert all(text[s:e] == t for _, s, e, t in entities)
  # The spaces inside an entity are I-, so the character tags read back as
  # strict BIO give the same entities; the untagged last token is "".
  assert char_tags[3:5] == ["I-PER", "I-PER"]
  assert char_tags[-1] == "" and untagged == 1
  assert conll.spans(char_tags[:-1], "BIO") == [
      (k, s, e) for k, s, e, _ in entities]
  # The same read eagerly (as around an ONNX or TFLite model).
  assert served_row(tagger.tag_batch([text], tag_ids), 0, len(text)) == (
      entities, char_tags, untagged)


@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
@pytest.mark.parametrize("level", tagging_graph.TOKEN_LEVELS)
def test_in_graph_encode_matches_python_pieces(kind, level, spm_model,  # pylint: disable=redefined-outer-name
                                               tmp_path):
  tokenizer = (tokenization.load_tokenizer(spm_model_file=spm_model)
               if kind == "sentencepiece" else tokenization.load_tokenizer(
                   vocab_file=wordpiece_vocab(str(tmp_path))))
  labels = ner_data.bio_label_list(sorted(ENTITIES))
  tagger = TextTagger.from_tokenizer(tokenizer, MAX_SEQ, level, labels)
  texts = TEST_TEXTS + fx.MIXED_TEXTS + fx.article_texts(20)
  features, tokens, positions = tagger.encode_batch(texts)
  window_rows = 0
  for i, text in enumerate(texts):
    expected_tokens, expected_ids, expected_positions = reference_encode(
        text, tokenizer, level, MAX_SEQ)
    assert tokens[i] == expected_tokens, text
    assert positions[i] == expected_positions, text
    np.testing.assert_array_equal(features["input_ids"][i], expected_ids,
                                  err_msg=text)
    np.testing.assert_array_equal(features["input_mask"][i],
                                  np.not_equal(expected_ids, tokenizer.pad_id))
    assert not features["segment_ids"][i].any()
    # serve_text's window is fine-tuning's first.
    windows = ner_data.encode_sentences(
        [conll.Sentence([t for t, _, _ in expected_tokens], None, 0)],
        tagger, None, doc_stride=MAX_SEQ - 2)
    if expected_tokens and windows.num_windows == 1:
      window_rows += 1
      np.testing.assert_array_equal(windows.features["input_ids"][0],
                                    expected_ids)
      assert [p for _, p in windows.owner[0]] == expected_positions
  assert window_rows >= 8


def test_in_graph_entities_match_reference(char_wordpiece):
  """Random tag ids (I- after O, type changes, untagged tails) read back as
  the reference reads them."""
  tokenizer, labels = char_wordpiece["tokenizer"], char_wordpiece["labels"]
  for level in tagging_graph.TOKEN_LEVELS:
    tagger = TextTagger.from_tokenizer(tokenizer, 16, level, labels)
    features, tokens = tagger.encode(tf.constant(TEST_TEXTS))
    rng = np.random.default_rng(7)
    num_entities = 0
    for _ in range(10):
      tag_ids = rng.integers(0, len(labels), size=(len(TEST_TEXTS), 16))
      out = tagger.decode(tf.constant(TEST_TEXTS), tokens,
                          tf.constant(tag_ids, tf.int32))
      out = {k: v.numpy() for k, v in out.items()}
      for i, text in enumerate(TEST_TEXTS):
        split, _, positions = reference_encode(text, tokenizer, level, 16)
        expected = reference_entities(text, split, [labels[tag_ids[i, p]]
                                                    for p in positions])
        got = served_row(out, i, len(text))
        assert got == expected, text
        num_entities += len(got[0])
    assert num_entities > 50
    assert features["input_ids"].shape == (len(TEST_TEXTS), 16)


# ------------------------------------------------------------ SavedModel
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n == "char_wordpiece" else pytest.mark.slow)
    for n in EXPORTS])
def test_serving_default_matches_keras(name, request):
  exported = request.getfixturevalue(name)
  loaded = exported["loaded"]
  assert set(loaded.signatures) == {"serving_default", "serve_text"}
  features = TextTagger.from_tokenizer(
      exported["tokenizer"], MAX_SEQ, exported["level"],
      exported["labels"]).encode_batch(TEST_TEXTS)[0]
  out = loaded.signatures["serving_default"](
      **{k: tf.constant(v) for k, v in features.items()})
  expected = keras_logits(exported["model"], features)
  got = out["logits"].numpy()
  assert got.dtype == np.float32 and got.shape == expected.shape
  assert got.shape == (len(TEST_TEXTS), MAX_SEQ, len(exported["labels"]))
  assert_close_to_scale(got, expected, rel=SAME_MODEL_REL)
  assert out["tag_ids"].dtype == tf.int32
  np.testing.assert_array_equal(out["tag_ids"].numpy(), got.argmax(-1))
  with open(os.path.join(exported["path"], "assets.extra",
                         saved_model.METADATA_FILE), encoding="utf-8") as f:
    meta = json.load(f)
  assert meta["model"] == "tagger" and meta["label_list"] == exported["labels"]
  assert meta["task"] == "tagging" and meta["tag_scheme"] == "BIO"
  assert meta["token_level"] == exported["level"]
  assert meta["max_seq_length"] == MAX_SEQ
  assert meta["normalization"][0].startswith("split the raw text")


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=() if n == "char_wordpiece" else pytest.mark.slow)
    for n in EXPORTS])
def test_serve_text_matches_run_ner_prediction(name, request):
  exported = request.getfixturevalue(name)
  tokenizer, labels, level = (exported["tokenizer"], exported["labels"],
                              exported["level"])
  texts = TEST_TEXTS + fx.MIXED_TEXTS
  out = serve(exported, texts)
  assert out["char_tags"].shape == (len(texts), max(len(t) for t in texts))
  found, untagged, one_window, ties = [], 0, 0, 0
  tagger = TextTagger.from_tokenizer(tokenizer, MAX_SEQ, level, labels)
  all_features, all_tokens, all_positions = tagger.encode_batch(texts)
  all_logits = keras_logits(exported["model"], all_features)
  for i, text in enumerate(texts):
    tokens, positions = all_tokens[i], all_positions[i]
    features = {k: v[i:i + 1] for k, v in all_features.items()}
    logits = all_logits[i][positions]
    tags = [labels[j] for j in logits.argmax(-1)]
    expected = reference_entities(text, tokens, tags)
    served = served_row(out, i, len(text))
    if served != expected:
      # Only a tie between two tags (differently rounded sums) may differ.
      top2 = np.sort(logits, -1)[:, -2:]
      gap = (top2[:, 1] - top2[:, 0]).min()
      assert gap <= 2 * SAME_MODEL_REL * np.abs(logits).max(), (
          text, served, expected)
      ties += 1
    for _, start, end, entity_text in served[0]:
      assert text[start:end] == entity_text
    found.extend(served[0])
    untagged += served[2]
    # run_ner's own prediction (windows, owner positions) of the same tokens.
    windows = ner_data.encode_sentences(
        [conll.Sentence([t for t, _, _ in tokens], None, 0)], tagger,
        None, doc_stride=10)
    if windows.num_windows == 1 and tokens:
      one_window += 1
      inputs = {k: windows.features[k] for k in features}
      assert ner_data.tags_from_logits(windows, keras_logits(
          exported["model"], inputs), labels) == [tags]
  # Most short texts fit one window (where run_ner and serve_text agree).
  assert one_window >= 4 and ties <= 1
  # The long text's tail is past the window: reported, not tagged.
  assert untagged > 0
  # A few steps of training find some of the training entities.
  assert {t for _, _, _, t in found} & {e for v in ENTITIES.values()
                                        for e in v}, found


def test_serve_text_batch_edge_cases(char_wordpiece):
  out = serve(char_wordpiece, ["", "   "])
  assert out["char_tags"].tolist() == [[b"", b"", b""], [b"O", b"O", b"O"]]
  assert out["num_entities"].tolist() == [0, 0]
  assert out["entity_starts"].shape == (2, 0)
  out = char_wordpiece["loaded"].signatures["serve_text"](
      text=tf.constant([], tf.string))
  assert out["num_entities"].shape == (0,)


# ------------------------------------------------------------ refusals
def test_export_refuses_mismatched_checkpoints(char_wordpiece, tmp_path):
  ner_dir = char_wordpiece["root"] / "ner"
  export_dir = tmp_path / "sm"
  with pytest.raises(export_lib.ExportError, match=r"is a tagger \(task_"
                     "record.json beside it says task='tagging'\\): export "
                     "it with --model=tagger"):
    export_lib.export(checkpoint=str(ner_dir), export_dir=str(export_dir),
                      model="classifier")
  # An encoder-only checkpoint with a tagger's files beside it.
  encoder_dir = tmp_path / "encoder_only"
  encoder_dir.mkdir()
  for name in ("task_record.json", "vocab.txt"):
    shutil.copy(ner_dir / name, encoder_dir / name)
  checkpoints.save_weights(char_wordpiece["model"].encoder,
                           str(encoder_dir / "ckpt-1"),
                           char_wordpiece["model"].config)
  with pytest.raises(export_lib.ExportError, match=r"has no tagger_head: it "
                     "cannot be exported as --model=tagger"):
    export_lib.export(checkpoint=str(encoder_dir), export_dir=str(export_dir),
                      model="tagger")
  os.remove(encoder_dir / "task_record.json")
  with pytest.raises(export_lib.ExportError, match="--model=tagger needs the "
                     "task_record.json run_ner writes beside --checkpoint"):
    export_lib.export(checkpoint=str(encoder_dir), export_dir=str(export_dir),
                      model="tagger", vocab_file=str(ner_dir / "vocab.txt"))
  assert not export_dir.exists()


# ------------------------------------------------------------ TFLite
@pytest.mark.slow
def test_tflite_tagger_agrees_with_saved_model(word_sentencepiece):
  from ai_edge_litert.interpreter import Interpreter
  exported = word_sentencepiece
  tokenizer, level = exported["tokenizer"], exported["level"]
  texts = TEST_TEXTS + fx.article_texts(20)
  tagger = TextTagger.from_tokenizer(tokenizer, MAX_SEQ, level,
                                     exported["labels"])
  all_features, _, all_positions = tagger.encode_batch(texts)
  rows = [(None, {k: v[i:i + 1] for k, v in all_features.items()}, p)
          for i, p in enumerate(all_positions)]
  serving = exported["loaded"].signatures["serving_default"]
  references = [serving(**{k: tf.constant(v) for k, v in features.items()})
                for _, features, _ in rows]
  differ = {}
  for quantize in ("none", "dynamic"):
    output = str(exported["root"] / "tflite" / f"ner_{quantize}.tflite")
    # Bounded here; the floors are test_export_fidelity's (trained models).
    info = export_tflite.convert(exported["path"], output, quantize,
                                 allow_degraded=True, num_verify_examples=8)
    assert info["label_list"] == exported["labels"]
    assert info["token_level"] == level
    assert {o["name"]: o["shape"] for o in info["outputs"]} == {
        "logits": [1, MAX_SEQ, len(exported["labels"])],
        "tag_ids": [1, MAX_SEQ]}
    runner = Interpreter(model_path=output).get_signature_runner(
        "serving_default")
    differ[quantize] = total = 0
    for (_, features, positions), reference in zip(rows, references):
      lite = runner(**features)
      assert np.all(np.isfinite(lite["logits"]))
      ref_logits = reference["logits"].numpy()[0]
      lite_tags = lite["tag_ids"][0][positions]
      np.testing.assert_array_equal(lite_tags,
                                    lite["logits"][0][positions].argmax(-1))
      if quantize == "none":
        assert_same_argmax(ref_logits[positions], lite_tags, LITERT_REL)
        assert_close_to_scale(lite["logits"][0], ref_logits, rel=LITERT_REL)
      differ[quantize] += int(np.sum(
          lite_tags != reference["tag_ids"].numpy()[0][positions]))
      total += len(positions)
  print(f"TFLite tags differing from the SavedModel's over {total} tokens: "
        f"{differ}")
  assert total > 400


def test_kept_tagger_survives_a_seed(spm_model):  # pylint: disable=redefined-outer-name
  """The tagger encode_inputs keeps is built again after
  keras.utils.set_random_seed (as fine-tuning starts), which clears TF's
  kernels and with them its SentencePiece model."""
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.core.record import ModelInfo  # pylint: disable=g-import-not-at-top
  from albert_tf.tasks.tagging import TaggingTask  # pylint: disable=g-import-not-at-top
  tokenizer = tokenization.load_tokenizer(spm_model_file=spm_model)
  record = ModelInfo(task="tagging", max_seq_length=MAX_SEQ,
                     label_list=ner_data.bio_label_list(sorted(ENTITIES)),
                     task_config={"token_level": "char"})
  inputs = {"text": TEST_TEXTS}
  first = TaggingTask.encode_inputs(record, tokenizer, MAX_SEQ, inputs)
  keras.utils.set_random_seed(3)
  again = TaggingTask.encode_inputs(record, tokenizer, MAX_SEQ, inputs)
  assert first["input_ids"].any()
  for name, value in first.items():
    np.testing.assert_array_equal(again[name], value)
