"""Span question answering data (SQuAD v1.1/v2.0, CMRC 2018, DRCD): read, window.

    data = read_squad("train-v2.0.json", version_2_with_negative=True,
                      is_training=True)
    windows = make_windows(data.examples, tokenizer, is_training=True,
                           file=data.file)
    windows.features["input_ids"]        # [n, max_seq_length] int32

`read_squad` reads the SQuAD JSON layout, which CMRC 2018 and DRCD share
(ids read as str); bad input is one SquadError naming the file and the
question or paragraph. An answer not at its answer_start moves to the
nearest occurrence of its text (if any); an empty question is skipped when
training, answered "" otherwise; each counted and named in one warning.

`make_windows` builds the original run_squad windows `[CLS] question [SEP]
context [SEP]`, one every doc_stride pieces (the step, as the original).
Context pieces carry their character spans (`char_spans`), so answers
become pieces exactly and predicted pieces paragraph text. A piece that
straddles an answer boundary ("北京" for the answer "京") is labelled whole:
the text read back is longer (`round_trip_mismatches`).
"""

import dataclasses
import json
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from albert_tf import features as F
from albert_tf.data import char_spans

P_MASK = "p_mask"
START_POSITIONS = "start_positions"
END_POSITIONS = "end_positions"
IS_IMPOSSIBLE = "is_impossible"
FEATURES = (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS, P_MASK,
            START_POSITIONS, END_POSITIONS, IS_IMPOSSIBLE)
_LAYOUT = '{"data": [{"paragraphs": [...]}]}'


class SquadError(ValueError):
  """Bad span QA data; the message names the file and the question."""


@dataclasses.dataclass
class Example:
  qas_id: str
  question: str
  context: str                    # the paragraph
  answers: List[Tuple[str, int]]  # (text, answer_start in code points)
  is_impossible: bool
  title: str


@dataclasses.dataclass
class SquadData:
  file: str
  examples: List[Example]
  counts: Dict[str, int]  # the keys of read_squad's `counts`


def _layout_error(path, got):
  return SquadError(f"{path}: not SQuAD JSON (expected {_LAYOUT}), got {got}")


def _get(obj, key, kind, path, where):
  if not isinstance(obj, dict) or not isinstance(obj.get(key), kind):
    what = "a list" if kind is list else "a string"
    raise _layout_error(path, f"{where} without {key!r} as {what}")
  return obj[key]


def _locate(context, text, start):
  """(start, how): how is "ok", "fixed" (nearest occurrence) or "missing"."""
  if text and context[start:start + len(text)] == text and start >= 0:
    return start, "ok"
  found = [m.start() for m in re.finditer(f"(?={re.escape(text)})", context)
           ] if text else []
  if not found:
    return start, "missing"
  return min(found, key=lambda a: (abs(a - start), a)), "fixed"


def _read_answers(path, qid, qa, where):
  answers = qa.get("answers", [])
  if not isinstance(answers, list):
    raise _layout_error(path, f"{where} (question {qid!r}) with 'answers' "
                        "that is not a list")
  out = []
  for answer in answers:
    text = answer.get("text") if isinstance(answer, dict) else None
    start = answer.get("answer_start") if isinstance(answer, dict) else None
    if (not isinstance(text, str) or not isinstance(start, int) or
        isinstance(start, bool)):
      raise _layout_error(path, f"question {qid!r} with an answer that is "
                          f"not {{'text': str, 'answer_start': int}}: "
                          f"{str(answer)[:60]}")
    out.append((text, start))
  return out


def read_squad(path: str, version_2_with_negative: bool, is_training: bool
               ) -> SquadData:
  """Reads a SQuAD-layout JSON file (see the module docstring)."""
  try:
    with open(path, encoding="utf-8-sig") as f:
      root = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise _layout_error(path, f"unreadable JSON ({e})") from e
  except OSError as e:
    raise SquadError(f"{path}: cannot read the file ({e.strerror})") from e
  data = _get(root, "data", list, path, "the top level")
  counts = dict(paragraphs=0, questions=0, impossible=0, answers=0)
  places = {"answer_start_fixed": [], "answers_not_found": [],
            "empty_questions": []}  # counted at the end
  examples, seen = [], {}
  for i, article in enumerate(data):
    paragraphs = _get(article, "paragraphs", list, path, f"data[{i}]")
    title = str(article.get("title", ""))
    for j, paragraph in enumerate(paragraphs):
      where_p = f"data[{i}].paragraphs[{j}]"
      context = _get(paragraph, "context", str, path, where_p)
      qas = _get(paragraph, "qas", list, path, where_p)
      if not context.strip():
        raise SquadError(f"{path}: paragraph {j} of {title!r} (data[{i}]) "
                         "has an empty context")
      counts["paragraphs"] += 1
      for k, qa in enumerate(qas):
        where = f"{where_p}.qas[{k}]"
        if not isinstance(qa, dict) or "id" not in qa:
          raise _layout_error(path, f"{where} without an 'id'")
        qid = str(qa["id"])
        question = _get(qa, "question", str, path, f"{where} ({qid!r})")
        if qid in seen:
          raise SquadError(f"{path}: question id {qid!r} appears twice, at "
                           f"{seen[qid]} and {where}")
        seen[qid] = where
        impossible = qa.get("is_impossible", False)
        if impossible not in (True, False):  # also 0 and 1
          raise _layout_error(path, f"question {qid!r} with is_impossible "
                              f"{impossible!r} (expected true or false)")
        impossible = bool(impossible)
        answers = _read_answers(path, qid, qa, where)
        if impossible and not version_2_with_negative:
          raise SquadError(
              f"{path}: question {qid!r} is_impossible (a SQuAD 2.0 file); "
              "pass --version_2_with_negative to read it")
        if impossible and answers:
          raise SquadError(f"{path}: question {qid!r} is_impossible but has "
                           f"{len(answers)} answers (expected none; "
                           "SQuAD 2.0 keeps them as plausible_answers)")
        if is_training and not impossible and not answers:
          raise SquadError(f"{path}: training question {qid!r} has no "
                           "answers (expected at least one"
                           + (", or is_impossible true)"
                              if version_2_with_negative else ")"))
        if not question.strip():
          places["empty_questions"].append(qid)
          if is_training:
            continue
        located = []
        for text, start in answers:
          start, how = _locate(context, text, start)
          if how != "ok":
            places["answer_start_fixed" if how == "fixed"
                   else "answers_not_found"].append(qid)
          located.append((text, start))
        counts["questions"] += 1
        counts["impossible"] += impossible
        counts["answers"] += len(answers)
        examples.append(Example(qid, question, context, located, impossible,
                                title))
  counts.update({key: len(qids) for key, qids in places.items()})
  if places["answer_start_fixed"] or places["answers_not_found"]:
    logging.warning(
        "%s: %d answers not at their answer_start moved to the nearest "
        "occurrence of their text (first: %s); %d answers whose text is not "
        "in the context give no training label (first: %s)", path,
        counts["answer_start_fixed"],
        ", ".join(places["answer_start_fixed"][:3]) or "-",
        counts["answers_not_found"],
        ", ".join(places["answers_not_found"][:3]) or "-")
  _warn(path, counts, places, "empty_questions", "empty or whitespace-only "
        "question(s) " + ("skipped: a training question needs its text"
                          if is_training else 'answered "": each keeps its '
                          "entry in predictions.json"))
  return SquadData(path, examples, counts)


# ------------------------------------------------------------------ windows
@dataclasses.dataclass
class Windows:
  """n windows of max_seq_length L.

  features: int32 [n, L] `input_ids`, `input_mask`, `segment_ids`, `p_mask`
    (1 where no answer can be); int32 [n] `start_positions`,
    `end_positions`, `is_impossible` (zeros when not is_training).
  example_index, window_start: [n] int32, its example, its first piece.
  piece_spans: [n, L, 2] int32 [start, end) code points in the context of
    the piece at each position; -1 -1 off the context.
  is_max_context: [n, L] bool, where a context piece is predicted from.
  trainable: [n] bool, False for a training question whose answer maps to
    no piece (counts' labels_missing), left out as the original skips it.
  """
  features: Dict[str, np.ndarray]
  example_index: np.ndarray
  window_start: np.ndarray
  piece_spans: np.ndarray
  is_max_context: np.ndarray
  counts: Dict[str, int]
  trainable: Optional[np.ndarray] = None

  @property
  def num_windows(self) -> int:
    return len(self.example_index)


def window_spans(num_pieces: int, window_length: int, doc_stride: int
                 ) -> List[Tuple[int, int]]:
  """(start, length) of the original's windows over num_pieces pieces: one
  every doc_stride pieces (no gap) until one reaches the end (an empty
  context has one of length 0)."""
  spans, start = [], 0
  while True:
    length = min(num_pieces - start, window_length)
    spans.append((start, length))
    if start + length >= num_pieces:
      return spans
    start += min(length, doc_stride)


def max_context_owner(spans: Sequence[Tuple[int, int]], num_pieces: int
                      ) -> np.ndarray:
  """For each piece, the window (index into spans) it is predicted from:
  the original's best min(left, right context) + 0.01 × window length, ties
  to the earlier window."""
  owner = np.full(num_pieces, -1, np.int64)
  best = np.full(num_pieces, -np.inf)
  for w, (start, length) in enumerate(spans):
    idx = np.arange(start, start + length)
    score = np.minimum(idx - start, start + length - 1 - idx) + 0.01 * length
    better = score > best[idx]
    owner[idx[better]] = w
    best[idx[better]] = score[better]
  return owner


def char_span_to_pieces(spans: Sequence[Tuple[int, int]], start: int,
                        end: int) -> Optional[Tuple[int, int]]:
  """(first, last) of the pieces (not zero-width) that overlap the
  characters [start, end), straddling ones included; None if none does
  (e.g. the span is only whitespace)."""
  hits = [i for i, (s, e) in enumerate(spans) if s < e and e > start and
          s < end]
  return (hits[0], hits[-1]) if hits else None


def answer_round_trip(tokenizer, context: str, answer_text: str,
                      answer_start: int, spans=None) -> str:
  """The context characters of the pieces the answer maps to: answer_text
  when its boundaries are piece boundaries, longer when a piece straddles
  one, "" when it covers none. spans: the context's, if already known."""
  if spans is None:
    _, spans = char_spans.encode_with_offsets(tokenizer, context)
  hit = char_span_to_pieces(spans, answer_start,
                            answer_start + len(answer_text))
  return context[spans[hit[0]][0]:spans[hit[1]][1]] if hit else ""


def round_trip_mismatches(examples: Sequence[Example], tokenizer
                          ) -> List[Tuple[str, str, str]]:
  """(qas_id, answer, read back) for each answer that does not round-trip
  (answers whose text is not at answer_start are not checked)."""
  out, cache = [], {}
  for ex in examples:
    if ex.context not in cache:
      cache[ex.context] = char_spans.encode_with_offsets(tokenizer,
                                                         ex.context)[1]
    for text, start in ex.answers:
      if ex.context[start:start + len(text)] == text:
        back = answer_round_trip(tokenizer, ex.context, text, start,
                                 cache[ex.context])
        if back != text:
          out.append((ex.qas_id, text, back))
  return out


def _label(ex: Example, spans, places) -> Optional[Tuple[int, int]]:
  """Pieces (first, last) of the first answer that has pieces."""
  label = None
  for text, start in ex.answers:
    if ex.context[start:start + len(text)] != text or not text:
      continue
    hit = char_span_to_pieces(spans, start, start + len(text))
    if hit is None:
      places["answers_unmapped"].append(ex.qas_id)
    elif label is None:
      label = hit
  return label


def _warn(where, counts, places, key, what):
  if places[key]:
    counts[key] = len(places[key])
    logging.warning("%s: %d %s (first: %s)", where, len(places[key]), what,
                    ", ".join(places[key][:3]))


def make_windows(examples: Sequence[Example], tokenizer,
                 max_seq_length: int = 384, doc_stride: int = 128,
                 max_query_length: int = 64, is_training: bool = False,
                 file: str = "") -> Windows:
  """Encodes examples into `[CLS] question [SEP] context-window [SEP]`.

  Labels (is_training): the first answer at its answer_start that covers a
  piece gives start/end positions; windows without the whole answer and
  impossible questions get start = end = 0 ([CLS]) and is_impossible 1.
  Questions without such an answer are labels_missing, warned, and their
  windows not `trainable`. An empty question has no piece in
  is_max_context, so decoding answers it "". Raises ValueError when
  max_seq_length leaves a question no context, or doc_stride < 1.
  """
  if doc_stride < 1:
    raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
  where = file or "<examples>"
  counts = dict(questions=len(examples), windows=0, questions_truncated=0,
                answers_unmapped=0, labels_missing=0)
  places = {"answers_unmapped": [], "labels_missing": []}
  # The pieces and windows of every question first: then the arrays' size
  # is known (SQuAD's training set: ~130k windows of 384).
  cache, plans = {}, []
  for ex in examples:
    question = tokenizer.encode(ex.question)
    counts["questions_truncated"] += len(question) > max_query_length
    question = question[:max_query_length]
    if max_seq_length - len(question) - 3 < 1:
      raise ValueError(
          f"{where}: question {ex.qas_id!r} has {len(question)} pieces: "
          f"max_seq_length {max_seq_length} leaves no room for the context "
          f"(lower max_query_length below {max_seq_length - 3})")
    if ex.context not in cache:
      ids, spans = char_spans.encode_with_offsets(tokenizer, ex.context)
      cache[ex.context] = (np.asarray(ids, np.int32),
                           np.asarray(spans, np.int32).reshape(-1, 2))
    ids, spans = cache[ex.context]
    label = _label(ex, spans.tolist(), places)
    missing = is_training and not ex.is_impossible and label is None
    if missing:
      places["labels_missing"].append(ex.qas_id)
    windows = window_spans(len(ids), max_seq_length - len(question) - 3,
                           doc_stride)
    plans.append((question, ids, spans, windows, label, missing))
  n, L = sum(len(p[3]) for p in plans), max_seq_length  # pylint: disable=invalid-name
  feats = {name: np.zeros((n, L), np.int32) for name in FEATURES[:4]}
  feats.update({name: np.zeros(n, np.int32) for name in FEATURES[4:]})
  feats[F.INPUT_IDS][:] = tokenizer.pad_id
  feats[P_MASK][:] = 1
  example_index, window_start = np.zeros(n, np.int32), np.zeros(n, np.int32)
  piece_spans = np.full((n, L, 2), -1, np.int32)
  is_max_context = np.zeros((n, L), bool)
  trainable = np.ones(n, bool)
  k = 0
  for e, (question, ids, spans, windows, label, missing) in enumerate(plans):
    owner = max_context_owner(windows, len(ids))
    offset = len(question) + 2  # [CLS] question [SEP]
    for w, (start, length) in enumerate(windows):
      ctx = slice(offset, offset + length)
      feats[F.INPUT_IDS][k, :offset] = ([tokenizer.cls_id] + question +
                                        [tokenizer.sep_id])
      feats[F.INPUT_IDS][k, ctx] = ids[start:start + length]
      feats[F.INPUT_IDS][k, offset + length] = tokenizer.sep_id
      feats[F.INPUT_MASK][k, :offset + length + 1] = 1
      feats[F.SEGMENT_IDS][k, offset:offset + length + 1] = 1
      feats[P_MASK][k, 0] = 0
      feats[P_MASK][k, ctx] = 0
      piece_spans[k, ctx] = spans[start:start + length]
      is_max_context[k, ctx] = ((owner[start:start + length] == w) &
                                bool(examples[e].question.strip()))
      if (is_training and label is not None and
          not examples[e].is_impossible and
          start <= label[0] and label[1] < start + length):
        feats[START_POSITIONS][k] = label[0] - start + offset
        feats[END_POSITIONS][k] = label[1] - start + offset
      feats[IS_IMPOSSIBLE][k] = is_training and not feats[START_POSITIONS][k]
      trainable[k] = not missing
      example_index[k], window_start[k] = e, start
      k += 1
  _warn(where, counts, places, "answers_unmapped",
        "answers cover no context piece (e.g. only whitespace)")
  _warn(where, counts, places, "labels_missing",
        "training questions have no answer in their context that covers a "
        "piece; their windows are left out of training")
  if counts["questions_truncated"]:
    logging.info("%s: %d questions cut to max_query_length %d pieces", where,
                 counts["questions_truncated"], max_query_length)
  counts["windows"] = n
  return Windows(feats, example_index, window_start, piece_spans,
                 is_max_context, counts, trainable)
