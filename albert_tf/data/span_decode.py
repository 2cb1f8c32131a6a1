"""The model's span scores over windows -> answer texts (predictions.json).

    predictions, nbest = decode_v1(start_logits, end_logits, *windows)
    predictions, nbest, null_odds = decode_v2(start_top_log_probs, ...)
    write_outputs(output_dir, predictions, nbest, null_odds)
    predictions, nbest, null_odds = decode(outputs, windows, examples, own)

`windows` are plain arrays over n windows of L positions:

  * example_index [n] int: the example (question) each window belongs to;
  * piece_spans [n, L, 2] int: the [start, end) characters, in that
    example's context, of the piece at each position; -1 -1 where the
    position is no context piece (CLS, question, SEP, padding);
  * is_max_context [n, L] bool: the window is the one where the piece has
    the most context (min(left, right) + 0.01 x window length);
  * contexts, qas_ids: one per example.

A candidate is a (start, end) pair of context pieces of one window with the
start in its max-context window, end >= start and at most max_answer_length
pieces; its text is the context sliced at the pieces' characters (the
original paragraph's spacing and case), stripped of surrounding whitespace,
never detokenised pieces. Candidates of all the example's windows are ranked
together by score; an n-best list keeps the first n_best_size distinct texts
with their softmax "probability" over the kept scores, and the prediction is
its first text. Every qas_id gets an entry: "" (with a single "" n-best
entry, start = end = -1) when no candidate is left, which is logged.

v1 (run_squad_v1): top n_best_size starts x top n_best_size ends of each
window by logit, over all L positions (so non-context positions use up
places, as in the original); score = start logit + end logit; n-best entries
{"text", "probability", "start_logit", "end_logit", "start", "end"} (char
offsets, context[start:end] == text).

v2 (run_squad_v2, XLNet's head): the model gives, per window, k1 start beams
(start_top_log_probs / start_top_index [n, k1]) and for each of them k2 end
beams, flattened start-major: end_top_*[w, i * k2 + j] is end beam j of
start beam i (the original reshapes [n, k1, k2] to [n, k1 * k2]).
Score = start log prob + end log prob; n-best entries use "start_log_prob"
and "end_log_prob". null_odds[qid] is the least cls_logits over the
question's windows (the original's score_null; 1e6, its starting value, for
a question without windows); the prediction is the best text whatever the
null odds: `squad_metrics.apply_null_threshold` makes it "".
"""

import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import file_io
from albert_tf.core import lazy

span_qa = lazy.module("albert_tf.modeling.span_qa")

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"
# run_squad_v2's score_null before any window lowers it.
NO_WINDOW_NULL_ODDS = 1e6


class DecodeError(ValueError):
  """Window arrays that do not fit together; names the window or question."""


class _Windows:
  """The window arrays, checked against each other and the contexts."""

  def __init__(self, example_index, piece_spans, is_max_context, contexts,
               qas_ids):
    self.example_index = np.asarray(example_index)
    self.spans = np.asarray(piece_spans)
    self.max_context = np.asarray(is_max_context, dtype=bool)
    self.contexts = list(contexts)
    self.qas_ids = list(qas_ids)
    if len(self.contexts) != len(self.qas_ids):
      raise DecodeError(f"{len(self.contexts)} contexts for "
                        f"{len(self.qas_ids)} qas_ids, expected one each")
    seen = set()
    for qid in self.qas_ids:
      if qid in seen:
        raise DecodeError(f"question id {qid!r} occurs twice, expected "
                          "unique ids")
      seen.add(qid)
    n = self.example_index.shape[0] if self.example_index.ndim == 1 else -1
    if n < 0 or self.spans.ndim != 3 or self.spans.shape[::2] != (n, 2):
      raise DecodeError(f"example_index {self.example_index.shape} and "
                        f"piece_spans {self.spans.shape}: expected [n] and "
                        "[n, L, 2]")
    self.n, self.length = n, self.spans.shape[1]
    if self.max_context.shape != (n, self.length):
      raise DecodeError(f"is_max_context {self.max_context.shape}, expected "
                        f"{(n, self.length)} like piece_spans")
    self.by_example = [[] for _ in self.qas_ids]
    for w, ex in enumerate(self.example_index.tolist()):
      if not 0 <= ex < len(self.qas_ids):
        raise DecodeError(f"window {w}: example_index {ex}, expected 0.."
                          f"{len(self.qas_ids) - 1}")
      starts, ends = self.spans[w, :, 0], self.spans[w, :, 1]
      piece = starts >= 0
      bad = piece & ((ends < starts) | (ends > len(self.contexts[ex])))
      if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise DecodeError(
            f"window {w} (question {self.qas_ids[ex]!r}) position {pos}: "
            f"piece span [{starts[pos]}, {ends[pos]}), expected one inside "
            f"the context's {len(self.contexts[ex])} characters")
      self.by_example[ex].append(w)

  def check_scores(self, name, values, shape):
    values = np.asarray(values, dtype=np.float64)
    if values.shape != shape:
      raise DecodeError(f"{name} {values.shape}, expected {shape}")
    if not np.isfinite(values).all():
      w = int(np.argwhere(~np.isfinite(values))[0][0])
      ex = int(self.example_index[w])
      raise DecodeError(f"window {w} (question {self.qas_ids[ex]!r}): {name} "
                        "is not finite, expected finite scores (mask with a "
                        "large negative number)")
    return values

  def check_positions(self, name, values, shape):
    values = np.asarray(values)
    if values.shape != shape:
      raise DecodeError(f"{name} {values.shape}, expected {shape}")
    bad = (values < 0) | (values >= self.length)
    if bad.any():
      w = int(np.argwhere(bad)[0][0])
      raise DecodeError(f"window {w}: {name} has a position outside "
                        f"0..{self.length - 1}")
    return values.astype(np.int64)

  def allowed(self, w, starts, ends, max_answer_length):
    """(i, j) of the allowed pairs (starts[i], ends[i, j]) of window w, in
    the original's loop order (start-major); ends broadcasts over starts."""
    piece = self.spans[w, :, 0] >= 0
    starts = starts[:, None]
    ok = (piece[starts] & self.max_context[w, starts] & piece[ends] &
          (ends >= starts) & (ends - starts + 1 <= max_answer_length))
    return zip(*np.nonzero(ok))

  def text(self, w, start, end):
    """(text, char start, char end) of pieces start..end of window w."""
    context = self.contexts[int(self.example_index[w])]
    char_start = int(self.spans[w, start, 0])
    char_end = int(self.spans[w, end, 1])
    raw = context[char_start:char_end]
    text = raw.lstrip()
    char_start += len(raw) - len(text)
    text = text.rstrip()
    return text, char_start, char_start + len(text)


def _softmax(scores):
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def _nbest(windows, candidates, n_best_size, keys, empty_scores):
  """Ranks (score, window, start, end, a, b) candidates; returns the n-best
  list of distinct texts, a and b stored under keys."""
  # Stable: equal scores keep window, start-beam, end-beam order (the
  # original's sort of its candidate list).
  candidates = sorted(candidates, key=lambda c: c[0], reverse=True)
  entries, seen = [], set()
  for _, w, start, end, a, b in candidates:
    if len(entries) >= n_best_size:
      break
    text, char_start, char_end = windows.text(w, start, end)
    if text in seen:
      continue
    seen.add(text)
    entries.append({"text": text, keys[0]: a, keys[1]: b,
                    "start": char_start, "end": char_end})
  if not entries:
    entries.append({"text": "", keys[0]: empty_scores, keys[1]: empty_scores,
                    "start": -1, "end": -1})
  probs = _softmax([e[keys[0]] + e[keys[1]] for e in entries])
  return [{"text": e["text"], "probability": p, keys[0]: e[keys[0]],
           keys[1]: e[keys[1]], "start": e["start"], "end": e["end"]}
          for e, p in zip(entries, probs)]


def _warn_empty(name, empty):
  if empty:
    logging.warning("%s: %d question(s) have no allowed answer span and are "
                    "answered \"\" (first: %s)", name, len(empty),
                    ", ".join(map(repr, empty[:3])))


def _top(values, k):
  # Descending and stable: ties go to the lower position, as Python's
  # sorted(..., reverse=True) in the original.
  return np.argsort(-values, kind="stable")[:k]


def decode_v1(start_logits, end_logits, example_index, piece_spans,
              is_max_context, contexts: Sequence[str], qas_ids: Sequence[str],
              n_best_size: int = 20, max_answer_length: int = 30
              ) -> Tuple[Dict[str, str], Dict[str, List[dict]]]:
  """run_squad_v1's postprocessing (the module doc) of start_logits,
  end_logits [n, L] over the windows: (predictions {qid: text}, nbest {qid:
  [entry, ...]}), in qas_ids order. n_best_size: starts and ends tried per
  window, and n-best entries kept; max_answer_length: in pieces.

  Raises:
    DecodeError: shapes that disagree, a window of an unknown example, a
      piece span outside its context, or a non-finite logit.
  """
  windows = _Windows(example_index, piece_spans, is_max_context, contexts,
                     qas_ids)
  shape = (windows.n, windows.length)
  start_logits = windows.check_scores("start_logits", start_logits, shape)
  end_logits = windows.check_scores("end_logits", end_logits, shape)
  predictions, nbest, empty = {}, {}, []
  for ex, qid in enumerate(windows.qas_ids):
    candidates = []
    for w in windows.by_example[ex]:
      starts = _top(start_logits[w], n_best_size)
      ends = _top(end_logits[w], n_best_size)
      for i, j in windows.allowed(w, starts, ends[None], max_answer_length):
        start, end = int(starts[i]), int(ends[j])
        a, b = float(start_logits[w, start]), float(end_logits[w, end])
        candidates.append((a + b, w, start, end, a, b))
    if not candidates:
      empty.append(qid)
    nbest[qid] = _nbest(windows, candidates, n_best_size,
                        ("start_logit", "end_logit"), 0.0)
    predictions[qid] = nbest[qid][0]["text"]
  _warn_empty("decode_v1", empty)
  return predictions, nbest


def decode_v2(start_top_log_probs, start_top_index, end_top_log_probs,
              end_top_index, cls_logits, example_index, piece_spans,
              is_max_context, contexts: Sequence[str], qas_ids: Sequence[str],
              n_best_size: int = 20, max_answer_length: int = 30
              ) -> Tuple[Dict[str, str], Dict[str, List[dict]],
                         Dict[str, float]]:
  """run_squad_v2's postprocessing (the module doc) of the beams: start
  [n, k1], end [n, k1 * k2] (start-major) and cls_logits [n] (higher = no
  answer): (predictions, nbest, null_odds), each keyed by qid in qas_ids
  order. n_best_size: n-best entries kept; max_answer_length: in pieces.

  Raises:
    DecodeError: shapes that disagree (end beams not a multiple of the start
      beams), a beam position outside the window, a piece span outside its
      context, or a non-finite score.
  """
  windows = _Windows(example_index, piece_spans, is_max_context, contexts,
                     qas_ids)
  n = windows.n
  start_lp = np.asarray(start_top_log_probs)
  k1 = start_lp.shape[1] if start_lp.ndim == 2 else 0
  end_lp = np.asarray(end_top_log_probs)
  if k1 == 0 or end_lp.ndim != 2 or end_lp.shape[1] % k1:
    raise DecodeError(f"start_top_log_probs {start_lp.shape} and "
                      f"end_top_log_probs {end_lp.shape}: expected [n, k1] "
                      "and [n, k1 * k2]")
  k2 = end_lp.shape[1] // k1
  start_lp = windows.check_scores("start_top_log_probs", start_lp, (n, k1))
  start_ix = windows.check_positions("start_top_index", start_top_index,
                                     (n, k1))
  end_lp = windows.check_scores("end_top_log_probs", end_lp, (n, k1 * k2))
  end_ix = windows.check_positions("end_top_index", end_top_index,
                                   (n, k1 * k2))
  cls = windows.check_scores("cls_logits", cls_logits, (n,))
  predictions, nbest, null_odds, empty = {}, {}, {}, []
  for ex, qid in enumerate(windows.qas_ids):
    candidates = []
    null = NO_WINDOW_NULL_ODDS
    for w in windows.by_example[ex]:
      null = min(null, float(cls[w]))
      ends = end_ix[w].reshape(k1, k2)
      for i, j in windows.allowed(w, start_ix[w], ends, max_answer_length):
        start, a = int(start_ix[w, i]), float(start_lp[w, i])
        end, b = int(ends[i, j]), float(end_lp[w, i * k2 + j])
        candidates.append((a + b, w, start, end, a, b))
    if not candidates:
      empty.append(qid)
    nbest[qid] = _nbest(windows, candidates, n_best_size,
                        ("start_log_prob", "end_log_prob"), -1e6)
    predictions[qid] = nbest[qid][0]["text"]
    null_odds[qid] = null
  _warn_empty("decode_v2", empty)
  return predictions, nbest, null_odds


def decode(outputs, windows, examples, task_config: dict):
  """(predictions, nbest, null_odds or None): `decode_v1` or `decode_v2`, as
  a model's task_config says, of its heads' outputs over `squad.Windows`."""
  v2 = bool(task_config.get("version_2_with_negative"))
  got = (decode_v2 if v2 else decode_v1)(
      *(outputs[name] for name in span_qa.head_outputs(v2)),
      windows.example_index, windows.piece_spans, windows.is_max_context,
      [e.context for e in examples], [e.qas_id for e in examples],
      n_best_size=task_config.get("n_best_size", 20),
      max_answer_length=task_config.get("max_answer_length", 30))
  return got if v2 else (*got, None)


def serve_text_answers(run, examples, windows, task_config: dict,
                       batch_size: int = 64) -> List[dict]:
  """serve_text's results (`span_graph.TextSpanReader.__call__`) computed in
  Python: run(**encoder inputs as numpy) -> the heads' outputs, over
  `squad.Windows` of examples, then `decode`'s best entry of each."""
  v2 = bool(task_config.get("version_2_with_negative"))
  a, b = ("start_log_prob", "end_log_prob") if v2 else ("start_logit",
                                                        "end_logit")
  got = [run(**{k: windows.features[k][i:i + batch_size]
                for k in F.ENCODER_INPUTS})
         for i in range(0, windows.num_windows, batch_size)]
  _, nbest, null_odds = decode(
      {k: np.concatenate([g[k] for g in got])
       for k in span_qa.head_outputs(v2)}, windows, examples, task_config)
  return [{"answer": best["text"], "start": best["start"],
           "end": best["end"], "score": best[a] + best[b],
           **({"no_answer_score": null_odds[e.qas_id]} if v2 else {})}
          for e, best in ((e, nbest[e.qas_id][0]) for e in examples)]


def write_outputs(output_dir: str, predictions: Dict[str, str],
                  nbest: Dict[str, List[dict]],
                  null_odds: Optional[Dict[str, float]] = None) -> List[str]:
  """Writes predictions.json, nbest_predictions.json and (given null_odds)
  null_odds.json into output_dir, each whole or not at all
  (`file_io.atomic_writer`); UTF-8, not ASCII-escaped, indent 2.

  Returns:
    The paths written.
  """
  os.makedirs(output_dir, exist_ok=True)
  outputs = [(PREDICTIONS_FILE, predictions), (NBEST_FILE, nbest)]
  if null_odds is not None:
    outputs.append((NULL_ODDS_FILE, null_odds))
  paths = []
  for name, obj in outputs:
    paths.append(os.path.join(output_dir, name))
    with file_io.atomic_writer(paths[-1]) as f:
      f.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")
  return paths
