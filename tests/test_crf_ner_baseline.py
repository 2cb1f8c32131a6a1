"""benchmarks.crf_ner_baseline on a few hundred People's Daily sentences."""

import json

import numpy as np
import pytest

from albert_tf.data import conll, ner_data
from benchmarks import crf_ner_baseline as crf
from data_prep import corpora


def test_token_class_and_window_features():
  assert [crf.token_class(t) for t in ("１", "7", "Ａ", "x", "。", "，", "江",
                                       "a1")] == list("DDLLPPHM")
  features = crf.sentence_features(["江", "泽", "民"])
  assert len(features) == 3
  assert {"c0=泽", "c-1=江", "c+1=民", "c-2=<s1>", "c+2=</s1>", "c-1c0=江|泽",
          "t-1t0t+1=HHH"} <= set(features[1])
  assert "t-1t0t+1=BHH" in features[0] and "c-2c-1=<s2>|<s1>" in features[0]


def test_fits_the_training_sentences_and_writes_the_test_tokens(tmp_path):
  data_dir, output_dir = tmp_path / "ner", tmp_path / "crf"
  corpora.write_corpus("peoples_daily_ner", str(data_dir), max_documents=40)
  result = crf.run(str(data_dir), str(output_dir), max_iterations=50,
                   max_train_sentences=300)
  assert result["train_sentences"] == 300
  assert result["train"]["num_sentences"] == 300
  # The gold entities of the first 300 sentences of train.txt (BIO: one B-
  # tag each), counted from the file's text.
  with open(data_dir / "train.txt", encoding="utf-8") as f:
    sentences = [b for b in f.read().split("\n\n") if b.strip()][:300]
  assert len(sentences) == 300
  gold_entities = sum(line.split(" ")[-1].startswith("B-")
                      for s in sentences for line in s.split("\n"))
  assert result["train"]["num_gold_entities"] == gold_entities
  # A CRF with this many features memorises 300 sentences: every training
  # tag right from 40 L-BFGS iterations on (0.996 at 30, 0.81 at 20), so
  # 50 leave a margin. Less means the tags did not reach the sentences they
  # belong to.
  assert result["train"]["entity_f1"] == 1.0
  assert result["train"]["token_accuracy"] == 1.0
  assert result["train"]["num_predicted_entities"] == gold_entities
  with open(output_dir / "crf_results.json", encoding="utf-8") as f:
    assert json.load(f)["test"] == result["test"]
  # The predictions file: the test tokens and gold tags in order, one
  # predicted BIO tag each, a blank line after each sentence.
  test = conll.read_conll(str(data_dir / "test.txt"))
  with open(output_dir / "crf_test_predictions.txt", encoding="utf-8") as f:
    blocks = f.read().split("\n\n")
  assert blocks[-1] == ""
  rows = [[line.split("\t") for line in block.split("\n")]
          for block in blocks[:-1]]
  assert [[r[0] for r in sentence] for sentence in rows] == [
      s.tokens for s in test.sentences]
  assert [[r[1] for r in sentence] for sentence in rows] == [
      s.tags for s in test.sentences]
  predicted = [[r[2] for r in sentence] for sentence in rows]
  assert {t for p in predicted for t in p} <= set(
      ner_data.bio_label_list(["LOC", "ORG", "PER"]))
  # result["test"] scores that file: the figures counted here from its
  # columns (BIO, the scheme the CRF predicts), with the chunks below.
  assert test.scheme == "BIO"
  gold = [[r[1] for r in sentence] for sentence in rows]
  gold_chunks, predicted_chunks = _chunks(gold), _chunks(predicted)
  assert predicted_chunks  # the CRF finds some entities in test
  expected = {"num_sentences": len(rows),
              "num_tokens": sum(len(sentence) for sentence in rows),
              "num_gold_entities": len(gold_chunks),
              "num_predicted_entities": len(predicted_chunks),
              "token_accuracy": np.mean([g == p for gs, ps in zip(
                  gold, predicted) for g, p in zip(gs, ps)])}
  kinds = sorted({c[-1] for c in gold_chunks | predicted_chunks})
  for prefix, kind in [("entity", None)] + [(k, k) for k in kinds]:
    g = {c for c in gold_chunks if kind in (None, c[-1])}
    p = {c for c in predicted_chunks if kind in (None, c[-1])}
    precision = len(g & p) / len(p) if p else 0.0
    recall = len(g & p) / len(g) if g else 0.0
    expected[f"{prefix}_precision"], expected[f"{prefix}_recall"] = (
        precision, recall)
    expected[f"{prefix}_f1"] = (2 * precision * recall / (precision + recall)
                                if precision + recall else 0.0)
    if kind:
      expected[f"{kind}_support"] = len(g)
  assert result["test"] == pytest.approx(expected, rel=1e-12)


def _chunks(tags_per_sentence):
  """{(sentence, start, end, type)} of BIO tags, as conlleval reads them:
  an entity starts at B-X, or at an I-X that follows no X, and runs over
  the I-X after it."""
  chunks = set()
  for s, tags in enumerate(tags_per_sentence):
    start = kind = None
    for i, tag in enumerate(list(tags) + ["O"]):
      continues = tag.startswith("I-") and tag[2:] == kind
      if kind is not None and not continues:
        chunks.add((s, start, i, kind))
        kind = None
      if tag != "O" and not continues:
        start, kind = i, tag[2:]
  return chunks


def test_chunks_by_hand():
  # B-PER I-PER: one PER over 0-2; O, then I-LOC: a LOC starts at 3; B-ORG
  # ends it and starts an ORG at 4; I-LOC after ORG starts a LOC at 5.
  # Second sentence: B-LOC B-LOC are two LOCs; I-LOC continues the second.
  assert _chunks([["B-PER", "I-PER", "O", "I-LOC", "B-ORG", "I-LOC"],
                  ["B-LOC", "B-LOC", "I-LOC", "O"]]) == {
                      (0, 0, 2, "PER"), (0, 3, 4, "LOC"), (0, 4, 5, "ORG"),
                      (0, 5, 6, "LOC"), (1, 0, 1, "LOC"), (1, 1, 3, "LOC")}
