"""Every evaluation stands beside its baselines.

Unit: the majority class and the char n-gram TF-IDF model, the entity
dictionary and the sliding-window answer on hand-checkable data. Command:
run_classifier, run_ner and run_squad write `baseline_*` keys in
eval_results.json with the values worked out by hand below, and say "below
the baseline" when the model is (a run that cannot learn: one step at a
learning rate of 1e-9); `--nobaseline` turns it off.
"""

import json
import logging

import numpy as np
import pytest

from albert_tf import run_classifier, run_ner, run_squad
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


# ------------------------------------------------------------ tagging
# Train: 张三 PER, 北京 LOC twice, 北京大学 ORG once.
NER_TRAIN = [("张三在北京", "B-PER I-PER O B-LOC I-LOC"),
             ("北京大学很好", "B-ORG I-ORG I-ORG I-ORG O O"),
             ("北京很大", "B-LOC I-LOC O O")]
# Dev: the dictionary finds 张三, 北京大学 (the longest match, ORG) and 北京;
# it misses 李四 (never seen). 4 gold entities, 3 predicted, 3 right:
# precision 1, recall 3/4, F1 6/7; tokens 14 of 16 right. All-O: F1 0,
# tokens 6 of 16 (the O ones).
NER_DEV = [("张三去北京大学", "B-PER I-PER O B-ORG I-ORG I-ORG I-ORG"),
           ("李四在北京", "B-PER I-PER O B-LOC I-LOC"),
           ("大学很好", "O O O O")]


def _conll(path, rows):
  path.write_text("".join("".join(f"{c} {t}\n" for c, t in zip(
      text, tags.split())) + "\n" for text, tags in rows), encoding="utf-8")


def test_entity_dictionary_takes_the_longest_match_and_the_commonest_type():
  dictionary = baselines.EntityDictionary.fit(
      [list(t) for t, _ in NER_TRAIN], [g.split() for _, g in NER_TRAIN])
  assert dictionary.types == {("张", "三"): "PER", ("北", "京"): "LOC",
                              ("北", "京", "大", "学"): "ORG"}
  assert [" ".join(dictionary.tag(list(t))) for t, _ in NER_DEV] == [
      "B-PER I-PER O B-ORG I-ORG I-ORG I-ORG", "O O O B-LOC I-LOC",
      "O O O O"]
  # A tie between two types: the first in sorted order.
  tied = baselines.EntityDictionary.fit([["a"], ["a"]], [["B-X"], ["B-B"]])
  assert tied.types == {("a",): "B"}


@pytest.fixture(scope="module")
def ner_data(tmp_path_factory):
  root = tmp_path_factory.mktemp("ner_base")
  write_tiny_vocab_and_config(root, "张三在北京大学很好去李四")
  _conll(root / "train.txt", NER_TRAIN)
  _conll(root / "dev.txt", NER_DEV)
  _conll(root / "test.txt", NER_DEV)
  return root


def _run_ner(data, out, **kw):
  return run_ner.run(
      task_name="conll", data_dir=str(data), output_dir=str(out),
      vocab_file=str(data / "vocab.txt"),
      albert_config_file=str(data / "config.json"), max_seq_length=12,
      train_batch_size=4, learning_rate=1e-9, train_step=1, warmup_step=0,
      do_train=True, do_eval=True, do_predict=True, **kw)


def test_run_ner_reports_all_o_and_the_dictionary(ner_data, tmp_path,
                                                  caplog):
  with caplog.at_level(logging.INFO):
    result = _run_ner(ner_data, tmp_path / "out")
  saved = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  for prefix in ("", "test_"):
    assert saved[f"{prefix}baseline_all_o_entity_f1"] == 0.0
    assert saved[f"{prefix}baseline_all_o_token_accuracy"] == 6 / 16
    assert saved[f"{prefix}baseline_dictionary_entity_precision"] == 1.0
    assert saved[f"{prefix}baseline_dictionary_entity_recall"] == 0.75
    assert saved[f"{prefix}baseline_dictionary_entity_f1"] == pytest.approx(
        6 / 7)
    assert saved[f"{prefix}baseline_dictionary_token_accuracy"] == 14 / 16
  said = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("dev entity_f1")]
  assert said == [f"dev entity_f1 {result['eval']['entity_f1']:.3f} (all_o "
                  "0.000, dictionary 0.857): below the baseline"]
  # An eval-only run (the train file read, not encoded) fits the same one.
  run_ner.run(task_name="conll", data_dir=str(ner_data),
              output_dir=str(tmp_path / "eval"),
              init_checkpoint=str(tmp_path / "out"), do_train=False,
              do_eval=True)
  again = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
  assert again["baseline_dictionary_entity_f1"] == pytest.approx(6 / 7)
  assert "test_baseline_dictionary_entity_f1" not in again


def test_run_ner_nobaseline_turns_it_off(ner_data, tmp_path):
  _run_ner(ner_data, tmp_path / "out", baseline=False)
  saved = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  assert not [k for k in saved if "baseline" in k]


# ------------------------------------------------------------ span QA
def test_sliding_window_answer_english_and_chinese():
  # "Paris": its sentence's next words are the question's 5 words (the
  # first sentence shares only "the") and its 4 bigrams.
  context = "The cat sat on the mat. Paris is the capital of France."
  assert baselines.sliding_window_answer(
      "What is the capital of France?", context, 1) == "Paris"
  # Chinese: one word per character. 北京 is the only 2-character run of
  # its sentence without a question character, followed by 是中国的首都.
  assert baselines.sliding_window_answer(
      "中国的首都是哪里？", "我喜欢猫。北京是中国的首都。", 2) == "北京"
  # Every word is in the question: no candidate.
  assert baselines.sliding_window_answer("a b", "b a.", 1) == ""
  assert baselines.answer_words(["北京", "上海", "大城市", "New York"]) == 2
  assert baselines.answer_words([]) == 1


def _cmrc(path):
  """3 questions. Answers of 2, 2, 3 characters: the baseline takes runs
  of 2. It answers 北京 and 上海 (right: EM and F1 100) and, for the third,
  大城 (the first of the ties 大城/城市, after 上海是一个: 5 unigrams and 4
  bigrams of the question): EM 0, CMRC F1 2 * 1 * 2/3 / (1 + 2/3) = 0.8.
  Overall EM 200/3, F1 280/3."""
  c1, c2 = "我喜欢猫。北京是中国的首都。", "他住在上海。上海是一个大城市。"
  paragraphs = [
      {"context": c1, "qas": [{"id": "q1", "question": "中国的首都是哪里？",
                               "answers": [{"text": "北京",
                                            "answer_start": 5}]}]},
      {"context": c2, "qas": [
          {"id": "q2", "question": "他住在哪里？",
           "answers": [{"text": "上海", "answer_start": 3}]},
          {"id": "q3", "question": "上海是一个什么？",
           "answers": [{"text": "大城市", "answer_start": 11}]}]}]
  path.write_text(json.dumps({"version": "v1.0", "data": [
      {"title": "t", "paragraphs": paragraphs}]}, ensure_ascii=False),
                  encoding="utf-8")
  return path


def test_run_squad_reports_the_sliding_window(tmp_path, caplog):
  write_tiny_vocab_and_config(tmp_path, "我喜欢猫北京是中国的首都他住在上海一个"
                              "大城市哪里什么。？")
  path = _cmrc(tmp_path / "cmrc.json")
  options = dict(
      task_name="cmrc2018", train_file=str(path), predict_file=str(path),
      vocab_file=str(tmp_path / "vocab.txt"),
      albert_config_file=str(tmp_path / "config.json"), max_seq_length=32,
      doc_stride=16, max_query_length=12, train_batch_size=4,
      learning_rate=1e-9, train_step=1, warmup_step=0, do_train=True,
      do_eval=True, do_predict=True)
  with caplog.at_level(logging.INFO):
    result = run_squad.run(output_dir=str(tmp_path / "out"), **options)
  saved = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  for prefix in ("", "test_"):
    assert saved[f"{prefix}baseline_sliding_window_exact_match"] == (
        pytest.approx(200 / 3))
    assert saved[f"{prefix}baseline_sliding_window_f1"] == pytest.approx(
        280 / 3)
  said = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("dev f1")]
  assert said == [f"dev f1 {result['eval']['f1']:.3f} (sliding_window "
                  "93.333): below the baseline"]
  run_squad.run(output_dir=str(tmp_path / "off"), baseline=False, **options)
  saved = json.loads((tmp_path / "off" / "eval_results.json").read_text())
  assert not [k for k in saved if "baseline" in k]
