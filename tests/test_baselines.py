"""Every classification evaluation stands beside its baselines.

Unit: the majority class and the char n-gram TF-IDF model on hand-checkable
data. Command: run_classifier writes `baseline_*` keys in eval_results.json
and says "below the baseline" when the model is (a run that cannot learn:
one step at a learning rate of 1e-9), and `--nobaseline` turns it off.
"""

import json
import logging

import numpy as np
import pytest

from albert_tf import run_classifier
from albert_tf.data import baselines
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "好差很不是的电影书手机质量服务一般"


def test_majority_is_the_most_frequent_train_label_smallest_on_ties():
  assert baselines.majority([1, 0, 1, 2], 3).tolist() == [1, 1, 1]
  assert baselines.majority([2, 0, 2, 0], 2).tolist() == [0, 0]


def test_tfidf_learns_a_keyword_and_a_pair_overlap():
  rng = np.random.default_rng(0)
  filler = list("很不是的电影书手机质量服务一般")

  def text(word):
    words = list(rng.choice(filler, size=5))
    words.insert(2, word)
    return "".join(words)

  train_a = [text("好" if i % 2 else "差") for i in range(40)]
  train_y = [i % 2 for i in range(40)]
  dev_a = ["好很不是", "差很不是", "书好", "差书"]
  (pred,) = baselines.tfidf((train_a, [None] * 40, train_y),
                            [(dev_a, [None] * 4)])
  assert pred.tolist() == [1, 0, 1, 0]
  # Pairs: label 1 iff text_b repeats text_a (the overlap feature).
  a = ["".join(rng.choice(filler, size=4)) for _ in range(60)]
  b = [x if i % 2 else "".join(rng.choice(list("甲乙丙丁戊己庚辛"), size=4))
       for i, x in enumerate(a)]
  y = [i % 2 for i in range(60)]
  (pair_pred,) = baselines.tfidf((a[:40], b[:40], y[:40]),
                                 [(a[40:], b[40:])])
  assert (pair_pred == np.array(y[40:])).mean() >= 0.9


def test_a_single_class_train_split_predicts_it():
  (pred,) = baselines.tfidf((["a", "b"], [None, None], [1, 1]),
                            [(["c"], [None])])
  assert pred.tolist() == [1]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("base")
  write_tiny_vocab_and_config(root, CHARS)
  rng = np.random.default_rng(0)
  filler = list("很不是的电影书手机质量服务一般")
  for split, n in (("train", 48), ("dev", 20), ("test", 20)):
    rows = []
    for i in range(n):
      # 3 in 4 are "neg": the majority class scores 0.75 on every split.
      pos = i % 4 == 0
      words = list(rng.choice(filler, size=4))
      words.insert(1, "好" if pos else "差")
      rows.append(f"{1 if pos else 0}\t{''.join(words)}")
    (root / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                       encoding="utf-8")
  return root


def _run(data, out, **kw):
  return run_classifier.run(
      task_name="sentiment", data_dir=str(data), output_dir=str(out),
      vocab_file=str(data / "vocab.txt"),
      albert_config_file=str(data / "config.json"), max_seq_length=12,
      train_batch_size=8, learning_rate=1e-9, train_step=1, warmup_step=0,
      do_train=True, do_eval=True, do_predict=True, **kw)


def test_run_classifier_reports_its_baselines(data, tmp_path, caplog):
  with caplog.at_level(logging.INFO):
    result = _run(data, tmp_path / "out")
  saved = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  # 15 of 20 dev and test rows are label 0, the train split's majority.
  assert saved["baseline_majority_accuracy"] == 0.75
  assert saved["test_baseline_majority_accuracy"] == 0.75
  # The keyword decides the label: TF-IDF finds it.
  assert saved["baseline_tfidf_accuracy"] == 1.0
  assert saved["test_baseline_tfidf_accuracy"] == 1.0
  said = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("dev accuracy")]
  assert said == [f"dev accuracy {result['eval']['accuracy']:.3f} (majority "
                  "0.750, tfidf 1.000): below the baseline"]


def test_nobaseline_turns_it_off(data, tmp_path):
  _run(data, tmp_path / "out", baseline=False)
  saved = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  assert not [k for k in saved if "baseline" in k]
