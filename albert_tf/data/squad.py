"""Span question answering data (SQuAD v1.1/v2.0, CMRC 2018, DRCD): read, window.

    data = read_squad("train-v2.0.json", True, is_training=True)  # v2
    windows = make_windows(data.examples, tokenizer, is_training=True)
    windows.features["input_ids"]        # [n, max_seq_length] int32

`read_squad` reads the SQuAD JSON layout of CMRC 2018 and DRCD too (ids
as str); bad input is one SquadError naming the file and the question or
paragraph. An answer not at its answer_start moves to the nearest
occurrence of its text; an empty question is skipped when training,
answered "" otherwise; each counted and named in one warning.

`make_windows` runs serve_text's preprocessor (`serving.span_graph`) for
the original run_squad windows `[CLS] question [SEP] context [SEP]`, one
every doc_stride pieces, labelled through the pieces' character spans. A
piece that straddles an answer boundary ("北京" for "京") is labelled
whole: the text read back is longer (`round_trip_mismatches`).
"""

import dataclasses
import json
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from albert_tf.core import features as F
from albert_tf.core import lazy

tf = lazy.module("tensorflow")
span_graph = lazy.module("albert_tf.serving.span_graph")

P_MASK = "p_mask"
FEATURES = (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS, P_MASK,
            F.START_POSITIONS, F.END_POSITIONS, F.IS_IMPOSSIBLE)
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
  piece_spans: [n, L, 2] int32 [start, end) code points of each position's
    piece in the context (-1 -1 off it).
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


def span_reader(tokenizer, max_seq_length: int = 512, doc_stride: int = 128,
                max_query_length: int = 64):
  """serve_text's `span_graph.TextSpanReader`, traced once (`alive`)."""
  return span_graph.text_graph.kept(
      ("span", tokenizer.fingerprint, max_seq_length, doc_stride,
       max_query_length), lambda: span_graph.TextSpanReader.from_tokenizer(
           tokenizer, max_seq_length, dict(doc_stride=doc_stride,
                                           max_query_length=max_query_length)))


def context_spans(tokenizer, contexts: Sequence[str], batch_size: int = 256
                  ) -> List[np.ndarray]:
  """Per context, int [pieces, 2]: the [start, end) code points each of its
  pieces covers, as the graph reader gives them (zero-width for a bare
  "▁")."""
  reader, out = span_reader(tokenizer), []
  for i in range(0, len(contexts), batch_size):
    _, starts, ends = reader.encode_with_offsets(
        tf.constant(list(contexts[i:i + batch_size]), tf.string))
    spans = np.stack([v.flat_values.numpy() for v in (starts, ends)], 1)
    out += np.split(spans, starts.row_splits.numpy()[1:-1])
  return out


def char_span_to_pieces(spans, start: int, end: int
                        ) -> Optional[Tuple[int, int]]:
  """(first, last) of the pieces (not zero-width) that overlap the
  characters [start, end), straddling ones included; None if none does
  (e.g. the span is only whitespace). spans: [pieces, 2]."""
  spans = np.asarray(spans, np.int64).reshape(-1, 2)
  hits = np.flatnonzero((spans[:, 0] < spans[:, 1]) & (spans[:, 1] > start) &
                        (spans[:, 0] < end))
  return (int(hits[0]), int(hits[-1])) if hits.size else None


def round_trip_mismatches(examples: Sequence[Example], tokenizer
                          ) -> List[Tuple[str, str, str]]:
  """(qas_id, answer, read back) for each answer that does not round-trip:
  the context characters of the pieces it maps to are longer when a piece
  straddles a boundary, "" when it covers none (answers whose text is not
  at answer_start are not checked)."""
  contexts = list(dict.fromkeys(ex.context for ex in examples))
  spans = dict(zip(contexts, context_spans(tokenizer, contexts)))
  out = []
  for ex in examples:
    for text, start in ex.answers:
      if ex.context[start:start + len(text)] == text:
        hit = char_span_to_pieces(spans[ex.context], start, start + len(text))
        back = ex.context[spans[ex.context][hit[0]][0]:
                          spans[ex.context][hit[1]][1]] if hit else ""
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


def _run_reader(reader, examples, where, batch_size):
  if not examples:  # the arrays of one example, cut to none
    return {k: v[:0] for k, v in _run_reader(
        reader, [Example("", "", "", [], False, "")], where, 1).items()}
  parts = []
  for i in range(0, len(examples), batch_size):
    chunk = examples[i:i + batch_size]
    questions = tf.constant([e.question for e in chunk], tf.string)
    # Each paragraph once: context_of gives each question its own.
    contexts = {c: k for k, c in enumerate({e.context: 0 for e in chunk})}
    try:
      got = reader.encode(questions, tf.constant(list(contexts)), tf.constant(
          [contexts[e.context] for e in chunk], tf.int64))
    except tf.errors.InvalidArgumentError as e:
      pieces = np.minimum(reader.encode_with_offsets(questions)[0]
                          .row_lengths().numpy(), reader.max_query_length)
      bad = np.flatnonzero(pieces > reader.max_seq_length - 4)
      if not bad.size:
        raise
      raise ValueError(
          f"{where}: question {chunk[bad[0]].qas_id!r} has {pieces[bad[0]]} "
          f"pieces: max_seq_length {reader.max_seq_length} leaves no room "
          f"for the context (lower max_query_length below "
          f"{reader.max_seq_length - 3})") from e
    got = {k: v.numpy() for k, v in got.items()}
    got["pair"] += i
    parts.append(got)
  return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def make_windows(examples: Sequence[Example], tokenizer,
                 max_seq_length: int = 384, doc_stride: int = 128,
                 max_query_length: int = 64, is_training: bool = False,
                 file: str = "", batch_size: int = 256) -> Windows:
  """`[CLS] question [SEP] context-window [SEP]` of each example, by
  serve_text's preprocessor (`span_graph.TextSpanReader.encode`).

  Labels (is_training): the first answer at its answer_start that covers a
  piece gives start/end positions; windows without the whole answer and
  impossible questions get start = end = 0 ([CLS]) and is_impossible 1.
  Questions without such an answer are labels_missing, warned, and their
  windows not `trainable`. An empty question has no piece in is_max_context
  (decoding answers it ""). ValueError: doc_stride < 1, or max_seq_length
  leaves a question no context.
  """
  if doc_stride < 1:
    raise ValueError(f"doc_stride must be at least 1, got {doc_stride}")
  where = file or "<examples>"
  reader = span_reader(tokenizer, max_seq_length, doc_stride, max_query_length)
  got = _run_reader(reader, list(examples), where, batch_size)
  pair, starts = got["pair"], got["window_start"]
  cut = int((got["question_pieces"] > max_query_length).sum())
  counts = dict(questions=len(examples), windows=len(pair),
                questions_truncated=cut, answers_unmapped=0, labels_missing=0)
  places = {"answers_unmapped": [], "labels_missing": []}
  # [CLS] question [SEP]
  offset = np.minimum(got["question_pieces"], max_query_length)[pair] + 2
  length = got[F.SEGMENT_IDS].sum(1) - 1  # context pieces of each window
  labels = np.full((len(examples), 2), -1, np.int64)
  missing = np.zeros(len(examples), bool)
  bounds = np.searchsorted(pair, np.arange(len(examples) + 1))
  for e, ex in enumerate(examples):
    label = None
    if ex.answers:  # the spans of all the context's pieces, from its windows
      rows = range(bounds[e], bounds[e + 1])
      spans = np.zeros((max(starts[r] + length[r] for r in rows), 2),
                       np.int32)
      for r in rows:
        spans[starts[r]:starts[r] + length[r]] = got["piece_spans"][
            r, offset[r]:offset[r] + length[r]]
      label = _label(ex, spans, places)
    labels[e] = label if label and not ex.is_impossible else (-1, -1)
    missing[e] = is_training and not ex.is_impossible and label is None
    if missing[e]:
      places["labels_missing"].append(ex.qas_id)
  first, last = labels[pair, 0], labels[pair, 1]
  held = (is_training & (first >= 0) & (starts <= first) &
          (last < starts + length))
  feats = {k: got[k] for k in F.ENCODER_INPUTS}
  feats[P_MASK] = (got["piece_spans"][:, :, 0] < 0).astype(np.int32)
  feats[P_MASK][:, 0] = 0
  for name, piece in ((F.START_POSITIONS, first), (F.END_POSITIONS, last)):
    feats[name] = np.where(held, piece - starts + offset, 0).astype(np.int32)
  feats[F.IS_IMPOSSIBLE] = (
      is_training & (feats[F.START_POSITIONS] == 0)).astype(np.int32)
  asked = np.array([bool(ex.question.strip()) for ex in examples], bool)
  is_max_context = got["is_max_context"] & asked[pair][:, None]
  _warn(where, counts, places, "answers_unmapped",
        "answers cover no context piece (e.g. only whitespace)")
  _warn(where, counts, places, "labels_missing",
        "training questions have no answer in their context that covers a "
        "piece; their windows are left out of training")
  if counts["questions_truncated"]:
    logging.info("%s: %d questions cut to max_query_length %d pieces", where,
                 counts["questions_truncated"], max_query_length)
  return Windows(feats, pair, starts, got["piece_spans"], is_max_context,
                 counts, ~missing[pair])


def text_windows(inputs, tokenizer, max_seq_length: int, task_config: dict):
  """(examples, `make_windows`) of serve_text's {"question", "context"}."""
  examples = [Example(str(i), q, c, [], False, "") for i, (q, c) in
              enumerate(zip(inputs["question"], inputs["context"]))]
  return examples, make_windows(
      examples, tokenizer, max_seq_length, **{
          k: task_config[k] for k in ("doc_stride", "max_query_length")
          if k in task_config})
