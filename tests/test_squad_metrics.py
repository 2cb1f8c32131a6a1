"""Span QA: the official SQuAD v1.1/v2.0 and CMRC 2018 metrics, span decoding.

Every expected number is worked out by hand in the comments. The SQuAD
functions were also checked, offline, against the official code (the v1.1
and v2.0 functions as google-research/albert's squad_utils.py copies them,
the same text as evaluate-v2.0.py): these cases and 3,000 random ones agree
in every key, its value and the key order, including the v1.1/v2.0
difference for empty strings, a HasAns question whose answers normalise to
nothing, NoAns keys left out when the group is empty, the thresholded
scoring by gold class and find_best_thresh's sweep (ungrouped ties, 0.0 when
answering none is best, the raw-string test of a NoAns prediction). The CMRC
functions were checked likewise against a Python 3 reading of
cmrc2018_evaluate.py run with nltk 3.10's word tokenizer (20,000 random
mixed strings); nltk is not needed here. decode_v1/decode_v2 were checked
likewise against a loop-by-loop reading of the original's
accumulate/write_predictions_v1 and _v2 (300 random sets of windows with
tied scores).
"""

import collections
import json
import math
import os

import numpy as np
import pytest

from albert_tf.data import span_decode
from albert_tf.data import squad_metrics as sm


# ---------------------------------------------------------------- SQuAD v1.1

def test_squad_v1_normalisation_f1_and_missing():
  gold = {"q1": ["the Eiffel Tower"], "q2": ["Paris, France", "Paris"],
          "q3": ["in 1889"]}
  predictions = {"q1": "Eiffel tower!", "q2": "the city of Paris"}
  # q1: both normalise to "eiffel tower": EM 1, F1 1.
  # q2: "city of paris" (3 tokens). Against "paris france": 1 common,
  #   P 1/3, R 1/2, F1 = 2(1/6)/(5/6) = 0.4; against "paris": P 1/3, R 1,
  #   F1 = 2(1/3)/(4/3) = 0.5; the best is 0.5, EM 0.
  # q3: no prediction, 0 (and counted).
  assert sm.squad_v1(gold, predictions) == {
      "exact_match": 100.0 / 3, "f1": 100.0 * 1.5 / 3, "total": 3,
      "missing": 1}
  assert sm.normalize_answer("  The  Eiffel-Tower, an icon ") == (
      "eiffeltower icon")


def test_squad_v1_and_v2_differ_on_empty_strings():
  # "." normalises to "": EM 1 under both, F1 0 under v1.1, 1 under v2.0.
  assert sm.squad_v1({"q": ["."]}, {"q": ""})["f1"] == 0.0
  assert sm.squad_v1({"q": ["."]}, {"q": ""})["exact_match"] == 100.0
  with pytest.raises(sm.MetricsError, match="question 'q' has no gold"):
    sm.squad_v1({"q": []}, {"q": "x"})


# ---------------------------------------------------------------- SQuAD v2.0

GOLD_V2 = {"a": ["Denver Broncos"], "b": ["1990"], "c": [], "d": []}
PRED_V2 = {"a": "Denver Broncos", "b": "in 1990 season", "c": "Broncos",
           "d": ""}
# Raw per question (exact, f1): a (1, 1); b (0, 0.5: 1 common of 3 predicted
# and 1 gold tokens, P 1/3 R 1); c (0, 0: NoAns answered); d (1, 1).
NULL_ODDS = {"a": -2.0, "b": 0.2, "c": 0.5, "d": 3.0}


def test_squad_v2_has_ans_no_ans_split():
  assert sm.squad_v2(GOLD_V2, PRED_V2) == {
      "exact": 50.0, "f1": 62.5, "total": 4,           # (1+0+0+1)/4, 2.5/4
      "HasAns_exact": 50.0, "HasAns_f1": 75.0, "HasAns_total": 2,
      "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
      "missing": 0}
  # No NoAns question: its keys are left out, as the official does.
  only = sm.squad_v2({"a": GOLD_V2["a"]}, PRED_V2)
  assert list(only) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1",
                        "HasAns_total", "missing"]


def test_squad_v2_threshold_and_best_sweep():
  # threshold 0.0: b, c, d (odds > 0) are scored as answered "": b 0 (a
  # HasAns question), c 1, d 1; a keeps 1. exact = f1 = 3/4.
  # Sweep in rising odds a(-2) b(0.2) c(0.5) d(3), starting from the 2 NoAns
  # points (answer nothing): exact 2 -> a +1 = 3 (best, thresh -2) -> b +0
  # -> c -1 (answered a NoAns) -> d +0 (""): best_exact 3/4 at -2.0.
  # f1 2 -> a 3 (best, -2) -> b +0.5 = 3.5 (best, 0.2) -> c 2.5 -> d 2.5:
  # best_f1 3.5/4 = 87.5 at 0.2.
  got = sm.squad_v2(GOLD_V2, PRED_V2, NULL_ODDS, threshold=0.0)
  assert got == {
      "exact": 75.0, "f1": 75.0, "total": 4,
      "HasAns_exact": 50.0, "HasAns_f1": 50.0, "HasAns_total": 2,
      "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 2,
      "best_exact": 75.0, "best_exact_thresh": -2.0,
      "best_f1": 87.5, "best_f1_thresh": 0.2, "missing": 0}
  # At best_f1_thresh only c and d (odds > 0.2) are nulled: f1 = 87.5.
  at_best = sm.squad_v2(GOLD_V2, PRED_V2, NULL_ODDS, threshold=0.2)
  assert (at_best["exact"], at_best["f1"]) == (75.0, 87.5)
  assert sm.apply_null_threshold(PRED_V2, NULL_ODDS, 0.2) == {
      "a": "Denver Broncos", "b": "in 1990 season", "c": "", "d": ""}
  with pytest.raises(sm.MetricsError, match="first 'd'"):
    sm.squad_v2(GOLD_V2, PRED_V2, {"a": 0.0, "b": 0.0, "c": 0.0})


def test_squad_v2_missing_prediction_scores_zero():
  # d has no prediction: 0 everywhere (the official crashes), so exact =
  # (1+0+0+0)/4 and the sweep starts from 1 NoAns point (c's null).
  predictions = {k: v for k, v in PRED_V2.items() if k != "d"}
  got = sm.squad_v2(GOLD_V2, predictions, NULL_ODDS, threshold=10.0)
  assert (got["exact"], got["NoAns_exact"], got["missing"]) == (25.0, 0.0, 1)
  # exact sweep: 1 -> a 2 (best, -2) -> b 2 -> c 1: 2/4.
  assert (got["best_exact"], got["best_exact_thresh"]) == (50.0, -2.0)


def test_gold_answers():
  Example = collections.namedtuple("Example", "qas_id answers")
  examples = [Example("q1", [("Denver", 10), ("Denver Broncos", 10)]),
              Example("q2", [])]
  assert sm.gold_answers(examples) == {"q1": ["Denver", "Denver Broncos"],
                                       "q2": []}
  with pytest.raises(sm.MetricsError, match="'q1' occurs twice"):
    sm.gold_answers(examples + examples[:1])


# ------------------------------------------------------------------ CMRC 2018

def test_cmrc_mixed_segmentation():
  assert sm.mixed_segmentation("2018年ALBERT模型，") == [
      "2018", "年", "albert", "模", "型", "，"]
  assert sm.mixed_segmentation("2018年ALBERT模型，", rm_punc=True) == [
      "2018", "年", "albert", "模", "型"]
  # Removed punctuation does not end a run; NLTK keeps 3.5 and 1,000 whole
  # and splits % and a final period off.
  assert sm.mixed_segmentation("2018-2019", rm_punc=True) == ["20182019"]
  assert sm.mixed_segmentation("3.5亿 1,000人 50% done.") == [
      "3.5", "亿", "1,000", "人", "50", "%", "done", "."]


def test_cmrc2018_f1_em():
  gold = {"q1": ["北京大学"], "q2": ["ALBERT模型", "模型"], "q3": ["1,000人"]}
  predictions = {"q1": "北京的大学", "q2": "albert模型。"}
  # q1: [北 京 的 大 学] vs [北 京 大 学]: the longest common substring is 2
  # (北京), P 2/5 R 2/4, F1 = 2(0.2)/0.9 = 4/9 (a subsequence would give
  # 8/9); EM 0.  q2: [albert 模 型] twice, F1 1; without "。" and lowercased
  # both are "albert模型": EM 1.  q3: missing, 0.
  got = sm.cmrc2018(gold, predictions)
  assert got["f1"] == pytest.approx(100.0 * (4 / 9 + 1) / 3, abs=1e-12)
  assert got["exact_match"] == got["em"] == 100.0 / 3
  assert (got["total"], got["skip"], got["missing"]) == (3, 1, 1)
  # EM keeps inner spaces, F1's tokens do not see them.
  assert sm.cmrc_em(["ALBERT模型"], "ALBERT 模型") == 0.0
  assert sm.cmrc_f1(["ALBERT模型"], "ALBERT 模型") == 1.0


# ------------------------------------------------------------------- decode v1

# "Gustave Eiffel built It  in 1889" (two spaces before "in"); word pieces
# p0..p5, "It" with its leading space as SentencePiece's "▁It" would have.
CONTEXT = "Gustave Eiffel built It  in 1889"
PIECES = [(0, 7), (8, 14), (15, 20), (20, 23), (25, 27), (28, 32)]
NONE = (-1, -1)
# Windows of 8: CLS, question, SEP, 4 pieces, SEP. A holds p0..p3, B p2..p5.
# Max context (min(left, right) + 0.01 x 4): p2 is A's (1.04 vs 0.04), p3
# is B's (1.04 vs 0.04).
SPANS_A = [NONE, NONE, NONE] + PIECES[0:4] + [NONE]
SPANS_B = [NONE, NONE, NONE] + PIECES[2:6] + [NONE]
SPANS_C = [NONE, NONE, NONE, (0, 3), NONE, NONE, NONE, NONE]
MAX_A = [0, 0, 0, 1, 1, 1, 0, 0]
MAX_B = [0, 0, 0, 0, 1, 1, 1, 0]
MAX_C = [0, 0, 0, 1, 0, 0, 0, 0]


def test_decode_v1_max_context_and_slicing():
  # Windows in the order A, C, B: example 0 has A and B, example 1 has C,
  # example 2 has none.
  start = np.array([[0, 9, 0, 1, 5, 0, 10, 0],     # A: top 3 = 6, 1, 4
                    [9, 8, 7, 0, 0, 0, 0, 0],      # C: top 3 = CLS, Q, SEP
                    [0, 9, 0, 0, 7, 0, 0, 0]],     # B: top 3 = 1, 4, 0
                   dtype=np.float32)
  end = np.array([[0, 8, 0, 0, 6, 2, 10, 0],       # A: top 3 = 6, 1, 4
                  [9, 8, 7, 6, 0, 0, 0, 0],
                  [0, 8, 0, 0, 0, 0, 9, 0]],       # B: top 3 = 6, 1, 0
                 dtype=np.float32)
  # A: start 6 is p3, not A's max context, so "It" (10 + 10) is refused;
  #   start 1 is the question; start 4 (p1) with end 6: "Eiffel built It"
  #   5 + 10 = 15, with end 4: "Eiffel" 5 + 6 = 11.
  # B: start 4 (p3, B's) with end 6 (p5): "It  in 1889" 7 + 9 = 16.
  # C: every top-3 start is outside the context: no candidate.
  predictions, nbest = span_decode.decode_v1(
      start, end, example_index=[0, 1, 0],
      piece_spans=[SPANS_A, SPANS_C, SPANS_B],
      is_max_context=np.array([MAX_A, MAX_C, MAX_B], dtype=bool),
      contexts=[CONTEXT, "abc", "xyz"], qas_ids=["q0", "q1", "q2"],
      n_best_size=3)
  assert predictions == {"q0": "It  in 1889", "q1": "", "q2": ""}
  total = 1 + math.exp(-1) + math.exp(-5)
  assert nbest["q0"] == [
      {"text": "It  in 1889", "probability": pytest.approx(1 / total),
       "start_logit": 7.0, "end_logit": 9.0, "start": 21, "end": 32},
      {"text": "Eiffel built It", "probability":
       pytest.approx(math.exp(-1) / total), "start_logit": 5.0,
       "end_logit": 10.0, "start": 8, "end": 23},
      {"text": "Eiffel", "probability": pytest.approx(math.exp(-5) / total),
       "start_logit": 5.0, "end_logit": 6.0, "start": 8, "end": 14}]
  for entry in nbest["q0"]:
    assert CONTEXT[entry["start"]:entry["end"]] == entry["text"]
  empty = {"text": "", "probability": 1.0, "start_logit": 0.0,
           "end_logit": 0.0, "start": -1, "end": -1}
  assert nbest["q1"] == nbest["q2"] == [empty]
  # max_answer_length 2 refuses the 3-piece answers: "Eiffel" is left.
  short, _ = span_decode.decode_v1(
      start, end, [0, 1, 0], [SPANS_A, SPANS_C, SPANS_B],
      np.array([MAX_A, MAX_C, MAX_B], dtype=bool), [CONTEXT, "abc", "xyz"],
      ["q0", "q1", "q2"], n_best_size=3, max_answer_length=2)
  assert short["q0"] == "Eiffel"


def test_decode_rejects_a_span_outside_its_context():
  # "Gustave" holds p0 (0, 7) but not p1 (8, 14), at position 4.
  with pytest.raises(span_decode.DecodeError,
                     match=r"window 0 \(question 'q1'\) position 4: piece "
                           r"span \[8, 14\), expected one inside the "
                           r"context's 7 characters"):
    span_decode.decode_v1(np.zeros((1, 8)), np.zeros((1, 8)), [0],
                          [SPANS_A], [MAX_A], ["Gustave"], ["q1"])


# ------------------------------------------------------------------- decode v2

def test_decode_v2_beam_layout_and_null_odds():
  # One context "New York City", pieces at positions 3, 4, 5 of 6.
  spans = [NONE, NONE, NONE, (0, 3), (4, 8), (9, 13)]
  # Two windows of q0 with the same pieces; the second is no piece's max
  # context, so only its cls_logits count. q1 has no window.
  max_context = np.array([[0, 0, 0, 1, 1, 1], [0] * 6], dtype=bool)
  start_lp = [[-0.5, -1.0]] * 2
  start_ix = [[3, 4]] * 2
  # k1 = k2 = 2, start-major: [beam0/end0, beam0/end1, beam1/end0, beam1/end1].
  end_lp = [[-0.2, -1.5, -0.1, -0.3]] * 2
  end_ix = [[5, 3, 4, 3]] * 2
  # Candidates: (3, 5) -0.7 "New York City"; (3, 3) -2.0 "New"; (4, 4)
  # -1.1 "York"; (4, 3) ends before it starts. Read end-major instead,
  # start 3 would pair with end 4 at -0.6 ("New York") and win.
  predictions, nbest, null_odds = span_decode.decode_v2(
      start_lp, start_ix, end_lp, end_ix, cls_logits=[2.5, -1.0],
      example_index=[0, 0], piece_spans=[spans, spans],
      is_max_context=max_context, contexts=["New York City", "Boston"],
      qas_ids=["q0", "q1"])
  assert predictions == {"q0": "New York City", "q1": ""}
  assert [(e["text"], e["start_log_prob"], e["end_log_prob"], e["start"],
           e["end"]) for e in nbest["q0"]] == [
               ("New York City", -0.5, -0.2, 0, 13),
               ("York", -1.0, -0.1, 4, 8), ("New", -0.5, -1.5, 0, 3)]
  total = 1 + math.exp(-0.4) + math.exp(-1.3)
  assert [e["probability"] for e in nbest["q0"]] == pytest.approx(
      [1 / total, math.exp(-0.4) / total, math.exp(-1.3) / total])
  assert nbest["q1"] == [{"text": "", "probability": 1.0,
                          "start_log_prob": -1e6, "end_log_prob": -1e6,
                          "start": -1, "end": -1}]
  # The least over q0's windows; q1 keeps the original's starting 1e6.
  assert null_odds == {"q0": -1.0, "q1": 1e6}
  with pytest.raises(span_decode.DecodeError, match=r"\[n, k1 \* k2\]"):
    span_decode.decode_v2(start_lp, start_ix, [[0.0] * 3] * 2,
                          [[3] * 3] * 2, [0.0, 0.0], [0, 0], [spans, spans],
                          max_context, ["New York City", "Boston"],
                          ["q0", "q1"])


def test_write_outputs_round_trip(tmp_path):
  predictions = {"q1": "北京大学", "q2": ""}
  nbest = {"q1": [{"text": "北京大学", "probability": 1.0, "start": 0,
                   "end": 4}], "q2": []}
  null_odds = {"q1": -3.5, "q2": 1e6}
  out = tmp_path / "out"
  paths = span_decode.write_outputs(str(out), predictions, nbest, null_odds)
  assert paths == [str(out / name) for name in (
      "predictions.json", "nbest_predictions.json", "null_odds.json")]
  assert sorted(os.listdir(out)) == [
      "nbest_predictions.json", "null_odds.json", "predictions.json"]
  text = (out / "predictions.json").read_text(encoding="utf-8")
  assert text == '{\n  "q1": "北京大学",\n  "q2": ""\n}\n'
  assert json.loads((out / "nbest_predictions.json").read_text(
      encoding="utf-8")) == nbest
  assert json.loads((out / "null_odds.json").read_text()) == null_odds
  # Without null odds (v1) only two files are (re)written.
  other = tmp_path / "v1"
  span_decode.write_outputs(str(other), predictions, nbest)
  assert sorted(os.listdir(other)) == [
      "nbest_predictions.json", "predictions.json"]
