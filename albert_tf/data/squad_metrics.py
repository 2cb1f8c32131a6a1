"""Answer-span metrics as the official scripts compute them.

    gold = gold_answers(examples)                 # {qas_id: [answer texts]}
    squad_v1(gold, predictions)                   # SQuAD v1.1 evaluate-v1.1.py
    squad_v2(gold, predictions, null_odds)        # SQuAD v2.0 evaluate-v2.0.py
    cmrc2018(gold, predictions)                   # CMRC 2018 and DRCD

All scores are percentages. SQuAD normalises an answer by lowercasing it,
dropping `string.punctuation`, replacing the articles a/an/the by a space and
squeezing whitespace; exact match compares normalised strings, F1 is over the
bags of whitespace tokens, and each question takes its best gold answer.

The differences between the two SQuAD scripts are kept: under v1.1 two empty
strings have F1 0, under v2.0 they have F1 1 (that is how "no answer" scores);
v2.0 reads a question whose gold answers all normalise to nothing as having
the gold answer "" (it still counts as HasAns). Where an official script only
prints a message (a question without prediction: v1.1 and CMRC score it 0)
this logs one warning with the count and the first ids; where it crashes
(v2.0 on a missing prediction, KeyError) the question scores 0 here too, in
every figure and at every threshold, and is counted in "missing".

CMRC 2018 (DRCD uses the same script) tokenises by "mixed segmentation": each
character in U+4E00..U+9FA5 and each character of the script's punctuation
list is a token, and what lies between is cut by NLTK's `word_tokenize`,
emulated here without NLTK by `_word_tokenize` (the Treebank rules of NLTK
3.x's NLTKWordTokenizer, checked against nltk 3.10 on the test strings; the
Punkt sentence split that word_tokenize runs first is not reproduced, which
only matters for a period ending a word inside a Latin run). F1 takes the
longest common *substring* (contiguous) of the two token lists, not the
longest common subsequence, with that list's punctuation removed first; EM
compares the lowercased, stripped strings with the same punctuation removed
(inner spaces kept).
"""

import collections
import difflib
import re
import string
from typing import Dict, Iterable, List, Optional, Sequence

from absl import logging

# run_squad's --task_name values; CMRC_TASKS are scored by CMRC 2018's
# evaluation (DRCD too, as the CLUE baselines do), squad by SQuAD's.
TASK_NAMES = ("squad", "cmrc2018", "drcd")
CMRC_TASKS = ("cmrc2018", "drcd")


class MetricsError(ValueError):
  """Gold answers or predictions that cannot be scored; names the question."""


# ------------------------------------------------------ SQuAD v1.1 / v2.0
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
  """SQuAD's normalisation (identical in v1.1 and v2.0)."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(gold: str, pred: str, empty_agree: bool) -> float:
  gold_tokens = normalize_answer(gold).split()
  pred_tokens = normalize_answer(pred).split()
  if empty_agree and (not gold_tokens or not pred_tokens):
    return float(gold_tokens == pred_tokens)
  same = sum((collections.Counter(gold_tokens) &
              collections.Counter(pred_tokens)).values())
  return _harmonic_f1(same, len(pred_tokens), len(gold_tokens))


def _harmonic_f1(same: int, num_pred: int, num_gold: int) -> float:
  if same == 0:
    return 0.0
  precision, recall = same / num_pred, same / num_gold
  return 2 * precision * recall / (precision + recall)


def _exact(gold: str, pred: str) -> float:
  return float(normalize_answer(gold) == normalize_answer(pred))


def _check_inputs(name, gold, predictions, answered=True):
  """The questions without a prediction; warns of them and of predictions
  of unknown questions. answered: each gold question needs an answer."""
  if not gold:
    raise MetricsError(f"{name}: no gold questions to score")
  for qid, text in predictions.items():
    if not isinstance(text, str):
      raise MetricsError(f"{name}: prediction for question {qid!r} is "
                         f"{type(text).__name__}, expected a string")
  unanswered = [qid for qid, answers in gold.items() if not answers]
  if answered and unanswered:
    raise MetricsError(f"{name}: question {unanswered[0]!r} has no gold "
                       "answer (squad_v2 scores unanswerable questions)")
  missing = [qid for qid in gold if qid not in predictions]
  unknown = [qid for qid in predictions if qid not in gold]
  for ids, what in ((missing, f"of {len(gold)} questions have no prediction "
                     "and score 0"), (unknown, "predictions are for questions "
                     "not in the gold answers and are ignored")):
    if ids:
      logging.warning("%s: %d %s (first: %s)", name, len(ids), what,
                      ", ".join(map(repr, ids[:3])))
  return missing


def squad_v1(gold: Dict[str, List[str]],
             predictions: Dict[str, str]) -> dict:
  """SQuAD v1.1 exact match and F1.

  Args:
    gold: question id -> gold answer texts (at least one each).
    predictions: question id -> predicted text.

  Returns:
    {"exact_match", "f1"} in percent over every gold question (one without
    a prediction scores 0), "total" and "missing" (questions without one).

  Raises:
    MetricsError: a question has no gold answer (v2.0 data: use squad_v2),
      a prediction is not a string, or gold is empty.
  """
  missing = _check_inputs("squad_v1", gold, predictions)
  exact = f1 = 0.0
  for qid, answers in gold.items():
    if qid in predictions:
      exact += max(_exact(a, predictions[qid]) for a in answers)
      f1 += max(_f1(a, predictions[qid], empty_agree=False) for a in answers)
  total = len(gold)
  return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total,
          "total": total, "missing": len(missing)}


def apply_null_threshold(predictions: Dict[str, str],
                         null_odds: Dict[str, float],
                         threshold: float) -> Dict[str, str]:
  """The predictions with "" where a question's null odds exceed threshold.

  Strictly greater, as evaluate-v2.0.py's `na_prob > na_prob_thresh`, so
  the `best_f1_thresh` that squad_v2 reports reproduces its best_f1 (the
  original run_squad_v2 answers "" already at equality).
  """
  out = {}
  for qid, text in predictions.items():
    if qid not in null_odds:
      raise MetricsError(f"null_odds: no entry for question {qid!r}, "
                         "expected one per prediction")
    out[qid] = "" if null_odds[qid] > threshold else text
  return out


def _best_threshold(predictions, scores, null_odds, has_ans, total):
  """evaluate-v2.0.py's find_best_thresh: answer the questions in rising
  null odds and keep the best running score; the threshold is the null odds
  of the last question answered (0.0 when answering none is best). Ties in
  null odds are not grouped, as in the official sweep."""
  current = best = sum(1 for qid in scores if not has_ans[qid])
  best_thresh = 0.0
  for qid in sorted(null_odds, key=lambda q: null_odds[q]):
    if qid not in scores:
      continue
    if has_ans[qid]:
      current += scores[qid]
    elif predictions[qid]:
      # A non-empty string loses the NoAns point even when it normalises to
      # nothing (the official tests the raw string).
      current -= 1
    if current > best:
      best, best_thresh = current, float(null_odds[qid])
  return 100.0 * best / total, best_thresh


def squad_v2(gold: Dict[str, List[str]],
             predictions: Dict[str, str],
             null_odds: Optional[Dict[str, float]] = None,
             threshold: float = 0.0) -> dict:
  """SQuAD v2.0 scores (evaluate-v2.0.py's output).

  Args:
    gold: question id -> gold answer texts; [] marks an unanswerable
      question (NoAns).
    predictions: question id -> predicted text ("" = no answer).
    null_odds: question id -> null score (null_odds.json, the script's
      --na-prob-file). With it, a question whose null odds exceed threshold
      is scored as answered "" and the best_* keys are added.
    threshold: the script's --na-prob-thresh; used only with null_odds.

  Returns:
    exact, f1, total; HasAns_exact/_f1/_total and NoAns_exact/_f1/_total
    for each group that has questions; with null_odds best_exact,
    best_exact_thresh, best_f1, best_f1_thresh; and "missing".

  Raises:
    MetricsError: null_odds lacks a predicted question, a prediction is not
      a string, or gold is empty.
  """
  missing = _check_inputs("squad_v2", gold, predictions, answered=False)
  has_ans = {qid: bool(answers) for qid, answers in gold.items()}
  exact_raw, f1_raw = {}, {}
  for qid, answers in gold.items():
    if qid not in predictions:
      continue
    answers = [a for a in answers if normalize_answer(a)] or [""]
    pred = predictions[qid]
    exact_raw[qid] = max(_exact(a, pred) for a in answers)
    f1_raw[qid] = max(_f1(a, pred, empty_agree=True) for a in answers)
  exact, f1 = exact_raw, f1_raw
  if null_odds is not None:
    lacking = [qid for qid in exact_raw if qid not in null_odds]
    if lacking:
      raise MetricsError(f"squad_v2: null_odds has no entry for {len(lacking)}"
                         f" predicted question(s), first {lacking[0]!r}")
    # The official scores a thresholded question by its gold class, not by
    # comparing "" with the gold texts (they differ only for a HasAns
    # question whose answers all normalise to nothing).
    nulled = {qid for qid in exact_raw if null_odds[qid] > threshold}
    exact, f1 = ({q: float(not has_ans[q]) if q in nulled else s
                  for q, s in raw.items()} for raw in (exact_raw, f1_raw))

  def summary(qids):
    return (100.0 * sum(exact.get(q, 0.0) for q in qids) / len(qids),
            100.0 * sum(f1.get(q, 0.0) for q in qids) / len(qids), len(qids))

  out = dict(zip(("exact", "f1", "total"), summary(list(gold))))
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    qids = [q for q in gold if has_ans[q] == wanted]
    if qids:
      out.update(zip((f"{prefix}_exact", f"{prefix}_f1", f"{prefix}_total"),
                     summary(qids)))
  if null_odds is not None:
    out["best_exact"], out["best_exact_thresh"] = _best_threshold(
        predictions, exact_raw, null_odds, has_ans, len(gold))
    out["best_f1"], out["best_f1_thresh"] = _best_threshold(
        predictions, f1_raw, null_odds, has_ans, len(gold))
  out["missing"] = len(missing)
  return out


def official_scores(task_name, v2, gold, predictions, null_odds=None):
  """The official evaluation of a --task_name: `cmrc2018` for CMRC_TASKS,
  else `squad_v1` or (v2) `squad_v2`; v2 given null_odds: of the predictions
  answered "" above the best_f1_thresh tuned on them (as the original tunes
  it on the predict file; null_score_diff_threshold), with its best_* keys."""
  if task_name in CMRC_TASKS:
    return cmrc2018(gold, predictions)
  if not v2 or null_odds is None:
    return squad_v2(gold, predictions) if v2 else squad_v1(gold, predictions)
  tuned = squad_v2(gold, predictions, null_odds)
  threshold = float(tuned["best_f1_thresh"])
  out = squad_v2(gold, apply_null_threshold(predictions, null_odds, threshold))
  out.update({k: v for k, v in tuned.items() if k.startswith("best_")},
             null_score_diff_threshold=threshold)
  return out


def gold_answers(examples: Iterable) -> Dict[str, List[str]]:
  """{qas_id: [answer text, ...]} from objects with `.qas_id` and `.answers`
  (a list of (text, char start) pairs; [] for an unanswerable question)."""
  out = {}
  for example in examples:
    if example.qas_id in out:
      raise MetricsError(f"question id {example.qas_id!r} occurs twice, "
                         "expected unique ids")
    out[example.qas_id] = [text for text, _ in example.answers]
  return out


# -------------------------------------------------------- CMRC 2018 / DRCD
# The official list. It also has "……", which never equals the single
# character it is compared with, so "…" is kept (and handed to the word
# tokenizer) there and here.
CMRC_PUNCTUATION = frozenset(
    "-:_*^/\\~`+=" "，。：？！“”；’《》·、「」（）－～『』")
_CMRC_HAN = re.compile("[\u4e00-\u9fa5]")

# NLTKWordTokenizer's substitutions, in its order: quotes that open, then
# punctuation, brackets and dashes, then (on the text padded with a space)
# quotes that close and English contractions. Each rule spaces a token off.
_OPENING = [
    (re.compile("([«“‘„]|[`]+)"), r" \1 "),
    (re.compile(r'^"'), "``"),
    (re.compile("(``)"), r" \1 "),
    (re.compile(r"([ (\[{<])(\"|'')"), r"\1 `` "),
    (re.compile(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"), r"\1 "),
]
_PUNCT_RULES = [
    (re.compile(r"([^.])(\.)([\]\)}>\"'»”’ ]*+)\s*$"), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"[;@#$%&]"), r" \g<0> "),
    (re.compile("[\u2012-\u2015]"), r" \g<0> "),
    (re.compile(r"([^.])(\.)([\]\)}>\"']*)\s*$"), r"\1 \2\3 "),
    (re.compile(r"[?!]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"[*]"), r" \g<0> "),
    (re.compile(r"[\]\[(){}<>]"), r" \g<0> "),
    (re.compile(r"--"), r" -- "),
]
_CLOSING = [
    (re.compile("([»”’])"), r" \1 "),
    (re.compile("''"), " '' "),
    (re.compile('"'), " '' "),
    (re.compile(r"\s+"), " "),
    (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
_SPLIT_WORDS = [re.compile(p) for p in (
    r"(?i)\b(can)(not)\b", r"(?i)\b(d)('ye)\b", r"(?i)\b(gim)(me)\b",
    r"(?i)\b(gon)(na)\b", r"(?i)\b(got)(ta)\b", r"(?i)\b(lem)(me)\b",
    r"(?i)\b(more)('n)\b", r"(?i)\b(wan)(na)(?=\s)", r"(?i) ('t)(is)\b",
    r"(?i) ('t)(was)\b")]


def _word_tokenize(text: str) -> List[str]:
  """NLTK word_tokenize of one run of non-Han text (see the module doc)."""
  for pattern, replacement in _OPENING + _PUNCT_RULES:
    text = pattern.sub(replacement, text)
  text = f" {text} "
  for pattern, replacement in _CLOSING:
    text = pattern.sub(replacement, text)
  for pattern in _SPLIT_WORDS:
    text = pattern.sub(r" \1 \2 ", text)
  return text.split()


def mixed_segmentation(text: str, rm_punc: bool = False) -> List[str]:
  """CMRC 2018's tokens: lowercased; each Han character and each character
  of CMRC_PUNCTUATION alone, the runs between them word-tokenized. With
  rm_punc the punctuation is dropped without ending the run around it, so
  "2018-2019" is the one token "20182019", as in the official script."""
  tokens, run = [], []
  for ch in str(text).lower().strip():
    if rm_punc and ch in CMRC_PUNCTUATION:
      continue
    if _CMRC_HAN.match(ch) or ch in CMRC_PUNCTUATION:
      if run:
        tokens.extend(_word_tokenize("".join(run)))
        run = []
      tokens.append(ch)
    else:
      run.append(ch)
  if run:
    tokens.extend(_word_tokenize("".join(run)))
  return tokens


def remove_punctuation(text: str) -> str:
  """CMRC 2018's EM form: lowercased, stripped, CMRC_PUNCTUATION removed."""
  return "".join(ch for ch in str(text).lower().strip()
                 if ch not in CMRC_PUNCTUATION)


def cmrc_f1(answers: Sequence[str], prediction: str) -> float:
  """Best F1 (0..1) of prediction over the answers, CMRC 2018's way."""
  pred = mixed_segmentation(prediction, rm_punc=True)
  f1s = []
  for gold in (mixed_segmentation(a, rm_punc=True) for a in answers):
    # The longest common substring (no junk heuristic: exact).
    same = difflib.SequenceMatcher(None, gold, pred, autojunk=False)
    f1s.append(_harmonic_f1(same.find_longest_match(
        0, len(gold), 0, len(pred)).size, len(pred), len(gold)))
  return max(f1s)


def cmrc_em(answers: Sequence[str], prediction: str) -> float:
  pred = remove_punctuation(prediction)
  return float(any(remove_punctuation(a) == pred for a in answers))


def cmrc2018(gold: Dict[str, List[str]],
             predictions: Dict[str, str]) -> dict:
  """CMRC 2018 (and DRCD) F1 and EM, as cmrc2018_evaluate.py.

  Args:
    gold: question id -> gold answer texts (at least one each).
    predictions: question id -> predicted text (the official applies str()
      to it, and so does this).

  Returns:
    "f1", "exact_match" (also as "em"), "average" (their mean, the script's
    AVERAGE), in percent over every gold question (one without a prediction
    scores 0), "total" and "skip" (the script's SKIP, also as "missing").

  Raises:
    MetricsError: a question has no gold answer, or gold is empty.
  """
  predictions = {qid: str(text) for qid, text in predictions.items()}
  missing = _check_inputs("cmrc2018", gold, predictions)
  f1 = em = 0.0
  for qid, answers in gold.items():
    if qid in predictions:
      f1 += cmrc_f1(answers, predictions[qid])
      em += cmrc_em(answers, predictions[qid])
  total = len(gold)
  f1, em = 100.0 * f1 / total, 100.0 * em / total
  return {"f1": f1, "exact_match": em, "em": em, "average": (f1 + em) / 2,
          "total": total, "skip": len(missing), "missing": len(missing)}
