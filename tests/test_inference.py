"""albert_tf.load: output_dirs, their exports and bare checkpoints predict.

One tiny run_classifier run (sentiment, its best checkpoint not its last),
its export, and one tiny run_ner run are shared by the module; the
fill-mask and encoder checkpoints have random weights, saved without a run.
"""

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

import albert_tf
from albert_tf import export_saved_model as export_lib
from albert_tf import fill_mask as fm
from albert_tf import inference
from albert_tf import run_classifier, run_ner
from albert_tf.core.config import AlbertConfig
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.training import checkpoints
from tests import numpy_reference
from tests.tagging_reference import reference_encode, reference_entities
from tests.numpy_reference import assert_close_to_scale
from tests.test_ner import FILLER, LOC, ORG, PER, synthetic_sentences
from tests.test_ner import write_conll
from tests.test_run_classifier import CHARS, base_options, sentiment_rows
from tests.test_run_classifier import write

TEXTS = ["很好的电影", "质量很差", "服务一般不是很好", "手机差", "", "ab好c"]


def _vocab_and_config(root, chars, hidden_size):
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(chars))
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=hidden_size, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64, initializer_range=0.2)
  config.to_json_file(root / "albert_config.json")
  return config


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
  """A sentiment output_dir whose best checkpoint (dev accuracy) is not its
  latest, and its export."""
  root = tmp_path_factory.mktemp("inf_cls")
  _vocab_and_config(root, CHARS + "abcdefghij", 16)
  write(root / "data" / "train.tsv", sentiment_rows(96, 0))
  write(root / "data" / "dev.tsv", sentiment_rows(32, 1))
  out = root / "out"
  result = run_classifier.run(
      task_name="sentiment", data_dir=str(root / "data"), output_dir=str(out),
      num_train_epochs=5, do_train=True, do_eval=True, **base_options(root))
  best = json.loads((out / "best" / "best.json").read_text())
  # Restoring the latest instead of the best would give other probabilities.
  assert best["step"] == result["best_step"] < result["num_train_steps"]
  version = export_lib.export(checkpoint=str(out),
                              export_dir=str(root / "saved"))
  return {"out": str(out), "version": version, "best": best,
          "export_dir": str(root / "saved"),
          "model": albert_tf.load(str(out))}


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
  root = tmp_path_factory.mktemp("inf_ner")
  _vocab_and_config(root, "".join(PER + LOC + ORG) + FILLER, 32)
  (root / "data").mkdir()
  write_conll(root / "data" / "train.txt", synthetic_sentences(300, seed=1))
  run_ner.run(task_name="conll", data_dir=str(root / "data"),
              output_dir=str(root / "out"), vocab_file=str(root / "vocab.txt"),
              albert_config_file=str(root / "albert_config.json"),
              max_seq_length=24, doc_stride=8, train_batch_size=16,
              learning_rate=3e-3, warmup_step=2, classifier_dropout=0.0,
              seed=1, train_step=60, iterations_per_loop=20,
              log_every_steps=60, do_train=True, do_eval=False)
  return root


def test_classifier_output_dir_serves_what_its_export_serves(classifier):
  model = classifier["model"]
  assert (model.kind, model.labels, model.max_seq_length) == (
      "classification", ["0", "1"], 16)
  assert model.checkpoint.endswith("best/" + classifier["best"]["checkpoint"])
  results = model.predict(TEXTS)
  assert [sorted(r) for r in results] == [["label", "probabilities"]] * 6
  probs = np.array([[r["probabilities"][k] for k in ("0", "1")]
                    for r in results])
  # The SavedModel of the same output_dir, read without albert_tf.
  outputs = tf.saved_model.load(classifier["version"]).signatures[
      "serve_text"](text=tf.constant(TEXTS))
  served = outputs["probabilities"].numpy()
  assert_close_to_scale(probs, served, rel=1e-6)
  # serve_text names the most probable class itself.
  assert [l.decode() for l in outputs["label"].numpy()] == [
      "01"[int(p.argmax())] for p in served]
  assert [r["label"] for r in results] == [
      "01"[int(p.argmax())] for p in served]
  # The easy examples, after training: 好 is positive, 差 negative.
  assert results[0]["label"] == "1" and results[1]["label"] == "0"
  # The export, by its version (an export_dir means its highest version).
  assert inference._version_dir(classifier["export_dir"]) == (  # pylint: disable=protected-access
      classifier["version"])
  exported = albert_tf.load(classifier["version"])
  assert (exported.kind, exported.labels, exported.model) == (
      "classification", ["0", "1"], None)
  assert exported.checkpoint == model.checkpoint
  again = exported.predict(TEXTS)
  assert [r["label"] for r in again] == [r["label"] for r in results]
  assert_close_to_scale([[r["probabilities"][k] for k in ("0", "1")]
                         for r in again], served, rel=1e-6)
  assert exported.encode(TEXTS)["input_ids"].tolist() == (
      model.encode(TEXTS)["input_ids"].tolist())
  with pytest.raises(ValueError, match="serves the classification outputs "
                     "only; load the output_dir it was exported from"):
    exported.embed(TEXTS)
  with pytest.raises(ValueError, match=r"^\S+/out: a single-text model "
                     r"takes no texts_b$"):
    model.predict(TEXTS, TEXTS)


def test_classifier_encode_and_embed(classifier):
  model = classifier["model"]
  features = model.encode(TEXTS)
  tokenizer = load_tokenizer(vocab_file=classifier["out"] + "/vocab.txt")
  expected = numpy_reference.packed(tokenizer, TEXTS, length=16)
  assert sorted(features) == ["input_ids", "input_mask", "segment_ids"]
  for name in expected:
    assert features[name].dtype == np.int32
    assert features[name].tolist() == expected[name].tolist()
  pairs = model.encode(["很好"], ["差"])
  assert pairs["input_ids"][0, :6].tolist() == [
      2, *tokenizer.encode("很好"), 3, *tokenizer.encode("差"), 3]
  assert pairs["segment_ids"][0, :6].tolist() == [0, 0, 0, 0, 1, 1]
  embedded = model.embed(TEXTS)
  assert embedded["sequence_output"].shape == (6, 16, 16)
  assert embedded["pooled_output"].shape == (6, 16)
  # The head on the embedding is what predict says (Python tokenizer and
  # Keras here, the in-graph tokenizer and the signature there).
  logits = model.model.classifier_head(embedded["pooled_output"])
  probs = [[r["probabilities"][k] for k in ("0", "1")]
           for r in model.predict(TEXTS)]
  assert_close_to_scale(tf.nn.softmax(logits).numpy(), probs, rel=1e-5)


def test_tagger_output_dir_entities_slice_back(tagger, caplog):
  model = albert_tf.load(tagger / "out")
  assert model.kind == "tagging" and model.token_level == "char"
  texts = ["张明在京湘说", "的是李华华去了沪", "他 在社院 说", "",
           "张明在京" * 8]
  with caplog.at_level("WARNING"):
    results = model.predict(texts)
  # 32 characters, 22 pieces read: the tail is untagged, and said so.
  assert [r.getMessage() for r in caplog.records] == [
      "1 of 5 texts are longer than the 22 pieces the tagger reads: their "
      "tails are not tagged (texts 4); split them first"]
  assert len(results) == 5 and results[3] == []
  found = 0
  for text, entities in zip(texts, results):
    for e in entities:
      assert text[e["start"]:e["end"]] == e["text"], (text, e)
      assert e["type"] in ("PER", "LOC", "ORG")
      found += 1
  assert found >= 3
  # The reference (the Python tokenizer's pieces, conll.spans) on the
  # Keras model.
  labels = model.labels
  for text, entities in zip(texts, results):
    tokens, ids, positions = reference_encode(text, model.tokenizer, "char",
                                              24)
    ids = np.asarray([ids], np.int32)
    tags = np.asarray(model.model(
        {"input_ids": ids, "input_mask": (ids != model.tokenizer.pad_id).astype(
             np.int32),
         "segment_ids": np.zeros_like(ids)}, training=False)["logits"])[
             0].argmax(-1)
    expected = reference_entities(text, tokens, [labels[tags[p]]
                                                 for p in positions])[0]
    assert [(e["type"], e["start"], e["end"], e["text"]) for e in entities
            ] == expected
  assert model.encode(texts[:1])["input_ids"].tolist() == [
      reference_encode(texts[0], model.tokenizer, "char", 24)[1]]


def _random_checkpoint(root, model_class):
  config = _vocab_and_config(root, CHARS, 16)
  model = model_class(config)
  checkpoints.save_weights(model, str(root / "ckpt-1"), config)
  return model, str(root / "vocab.txt")


def test_pretraining_checkpoint_fills_masks(tmp_path):
  original, vocab = _random_checkpoint(tmp_path, AlbertPretrainer)
  model = albert_tf.load(tmp_path, vocab_file=vocab)
  assert model.kind == "fill_mask"
  texts = ["很[MASK]的电影", "[MASK]量[MASK]差"]
  expected = fm.fill_mask(original, load_tokenizer(vocab_file=vocab), texts,
                          top_k=3)
  got = model.predict(texts, top_k=3)
  assert [len(m) for m in got] == [1, 2]
  assert [[[(d["piece"], d["id"]) for d in mask] for mask in masks]
          for masks in got] == [[[(p, i) for p, i, _ in mask]
                                 for mask in masks] for masks in expected]
  assert_close_to_scale([d["probability"] for masks in got for mask in masks
                         for d in mask],
                        [p for masks in expected for mask in masks
                         for _, _, p in mask], rel=1e-6)


def test_encoder_checkpoint_embeds_and_has_no_head(tmp_path):
  original, vocab = _random_checkpoint(tmp_path, AlbertEncoder)
  model = albert_tf.load(tmp_path, vocab_file=vocab)
  assert model.kind == "encoder"
  features = model.encode(TEXTS)
  expected = original(features, training=False)
  embedded = model.embed(TEXTS)
  for name in ("sequence_output", "pooled_output"):
    assert_close_to_scale(embedded[name], expected[name], rel=1e-6)
  with pytest.raises(ValueError) as e:
    model.predict(TEXTS)
  assert str(e.value) == (
      f"{tmp_path}: the encoder model there has no classifier, tagger or MLM "
      "head for predict(); embed() gives its encoder outputs")


def test_a_path_that_is_no_model_is_one_line(tmp_path):
  looked_for = inference.LOOKED_FOR
  with pytest.raises(ValueError) as e:
    albert_tf.load(tmp_path)
  assert str(e.value) == (f"{tmp_path} is not a model folder albert_tf.load "
                          f"reads: looked for {looked_for}")
  with pytest.raises(inference.LoadError) as e:
    albert_tf.load(tmp_path / "nothing")
  assert str(e.value) == (f"{tmp_path}/nothing does not exist "
                          f"(albert_tf.load reads {looked_for})")
  assert looked_for.startswith("a run_classifier/run_ner/run_pretraining "
                               "output_dir or checkpoint")


def test_keras_hub_preset_embeds_and_has_no_head(tmp_path):
  pytest.importorskip("keras_hub")
  from albert_tf import export_keras_hub  # pylint: disable=g-import-not-at-top
  from tests.fixtures_data import tiny_spm_model  # pylint: disable=g-import-not-at-top
  spm = tiny_spm_model(tmp_path, ["今天天气很好，我们去公园散步。",
                                  "the quick brown fox jumps."] * 20, 40)
  tokenizer = load_tokenizer(spm_model_file=spm)
  config = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=8,
                        hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
  original = AlbertEncoder(config)
  checkpoints.save_weights(original, str(tmp_path / "enc" / "ckpt-1"), config)
  export_keras_hub.export(str(tmp_path / "enc"), str(tmp_path / "preset"),
                          spm_model_file=spm, log=lambda _: None)
  model = albert_tf.load(tmp_path / "preset")
  assert (model.kind, model.max_seq_length) == ("encoder", 32)
  texts = ["今天很好", "the fox"]
  features = model.encode(texts)
  assert features["input_ids"].tolist() == numpy_reference.packed(
      tokenizer, texts, length=32)["input_ids"].tolist()
  expected = original(features, training=False)
  embedded = model.embed(texts)
  for name in ("sequence_output", "pooled_output"):
    assert_close_to_scale(embedded[name], expected[name], rel=1e-5)
  with pytest.raises(ValueError) as e:
    model.predict(texts)
  assert str(e.value) == (
      f"{tmp_path}/preset: the keras-hub preset (an AlbertBackbone) has no "
      "classifier, tagger or MLM head for predict(); embed() gives its "
      "encoder outputs")
