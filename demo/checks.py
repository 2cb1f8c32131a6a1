"""The demo's last check: the SavedModel's `serve_text` signature (tokenizing in
the graph) and the TFLite model (fed by the Python tokenizer, as an app would)
classify the same real reviews the same way."""

import json
import os

import numpy as np

NUM_SENTENCES = 20
# A prediction whose top-two probabilities differ by less than this is a tie.
TIE_MARGIN = 0.02


def _reviews(test_tsv, count):
  texts, labels = [], []
  with open(test_tsv, encoding="utf-8") as f:
    for line in f:
      parts = line.rstrip("\n").split("\t")
      if len(parts) >= 2 and parts[-1].strip():
        labels.append(parts[0])
        texts.append(parts[-1])
      if len(texts) == count:
        break
  return texts, labels


def compare_serving_and_tflite(saved_model, tflite_path, test_tsv, out):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  from albert_tf.serving.tflite_runner import TFLiteRunner  # pylint: disable=g-import-not-at-top
  from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
  from albert_tf.export_tflite import read_export_metadata, tokenizer_of  # pylint: disable=g-import-not-at-top

  texts, labels = _reviews(test_tsv, NUM_SENTENCES)
  served = tf.saved_model.load(saved_model).signatures["serve_text"]
  serving_probs = served(text=tf.constant(texts))["probabilities"].numpy()

  metadata = read_export_metadata(saved_model)
  tokenizer = tokenizer_of(saved_model, metadata)
  runner = TFLiteRunner(tflite_path)  # checks the inputs against NAME.tflite.json
  features, _ = text_graph.encode_texts(text_graph.shared_encoder(
      tokenizer, metadata["max_seq_length"]), texts)
  tflite_probs = [runner(**{k: v[i:i + 1] for k, v in features.items()})[
      "probabilities"][0] for i in range(len(texts))]
  tflite_probs = np.array(tflite_probs)

  agree = serving_probs.argmax(1) == tflite_probs.argmax(1)
  # Dynamic-range int8 weights move probabilities by ~1e-2; where the float
  # model itself is that undecided (top-two margin < TIE_MARGIN, as a barely
  # trained model is) a flipped label is a tie, not a deployment error.
  top2 = np.sort(serving_probs, axis=1)[:, -2:]
  tie = (top2[:, 1] - top2[:, 0]) < TIE_MARGIN
  rows = [{"text": t, "label": l, "serve_text": p.round(4).tolist(),
           "tflite": q.round(4).tolist()}
          for t, l, p, q in zip(texts, labels, serving_probs, tflite_probs)]
  with open(os.path.join(out, "predictions.json"), "w", encoding="utf-8") as f:
    json.dump(rows, f, indent=2, ensure_ascii=False)
  for row in rows[:5]:
    print(f"      {row['text'][:40]:<40}  serve_text {row['serve_text']}  "
          f"tflite {row['tflite']}", flush=True)
  figures = {"sentences": len(texts), "same_label": int(agree.sum()),
             "ties": int(tie.sum()),
             "max_probability_diff": float(np.abs(serving_probs - tflite_probs).max())}
  wrong = ~agree & ~tie
  if wrong.any():
    raise RuntimeError(f"serve_text and TFLite disagree on "
                       f"{int(wrong.sum())} of {len(texts)} reviews; see "
                       f"{out}/predictions.json")
  return figures
