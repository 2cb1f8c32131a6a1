"""A model card beside every export: README.md in the SavedModel version,
NAME.README.md beside the .tflite, with what the run recorded.

A tiny classifier is fine-tuned (its eval_results.json holds the dev metric
and the baselines), exported and converted; the cards must give its labels,
the tokenizer's sha256, the training files and sizes, the steps and the
learning rate, the dev metric beside its baselines, and how to call it.
"""

import hashlib
import json

import numpy as np
import pytest

from albert_tf import export_saved_model
from albert_tf import export_tflite
from albert_tf import run_classifier
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "好差很不是的电影书"


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_export_and_tflite_write_a_model_card(tmp_path):
  write_tiny_vocab_and_config(tmp_path, CHARS)
  rng = np.random.default_rng(0)
  data = tmp_path / "data"
  data.mkdir()
  for split, n in (("train", 24), ("dev", 12)):
    rows = [f"{i % 2}\t{'好' if i % 2 else '差'}"
            f"{''.join(rng.choice(list(CHARS[2:]), 4))}" for i in range(n)]
    (data / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                       encoding="utf-8")
  out = tmp_path / "clf"
  run_classifier.run(task_name="sentiment", data_dir=str(data),
                     output_dir=str(out), vocab_file=str(tmp_path /
                                                         "vocab.txt"),
                     albert_config_file=str(tmp_path / "config.json"),
                     max_seq_length=8, train_batch_size=8, train_step=3,
                     learning_rate=2e-3, do_train=True, do_eval=True)
  results = json.loads((out / "eval_results.json").read_text())
  version = export_saved_model.export(str(out), str(tmp_path / "export"))
  text = open(f"{version}/README.md", encoding="utf-8").read()
  sha = hashlib.sha256((tmp_path / "vocab.txt").read_bytes()).hexdigest()
  assert "# Model card: classification (sentiment)" in text
  assert "- labels, in the model's order: 0, 1" in text
  assert f"`vocab.txt`, sha256 {sha}" in text
  assert f"- train: {data / 'train.tsv'} (24 examples)" in text
  assert f"- dev: {data / 'dev.tsv'} (12 examples)" in text
  assert (f"- the served weights: step {results['best_step']} of batch 8, "
          "optimizer adamw at learning rate 0.002") in text
  assert (f"accuracy {results['accuracy']:.4f}" in text and
          f"step {results['best_step']})" in text)
  assert (f"majority_accuracy {results['baseline_majority_accuracy']:.4f}"
          in text)
  assert ('{"signature_name": "serve_text", "instances": [{"text": "..."}]}'
          in text)
  tflite = tmp_path / "clf.tflite"
  export_tflite.convert(version, str(tflite), "none")
  lite = (tmp_path / "clf.tflite.README.md").read_text(encoding="utf-8")
  assert f"`vocab.txt`, sha256 {sha}" in lite  # the copy beside the .tflite
  assert "TFLite (`clf.tflite`, quantize=none): inputs input_ids [1, 8]" in (
      lite)
  assert f"accuracy {results['accuracy']:.4f}" in lite
