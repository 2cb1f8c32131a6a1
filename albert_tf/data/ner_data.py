"""CoNLL sentences as model windows; tags from logits, entity scores.

    data = conll.read_conll("data/ner/train.txt")
    tagger = tagging_graph.TextTagger.from_tokenizer(tokenizer, 128, ...)
    windows = encode_sentences(data.sentences, tagger, label_map,
                               doc_stride=64)

Reading the files and their tag schemes are `albert_tf.data.conll`.

Tokens are split into pieces by the tagger's graph preprocessor
(`albert_tf.serving.tagging_graph.TextTagger.piece_ids`: each token on its
own, never empty), the one serve_text runs. Only a token's first piece
carries its label; the other positions are -1 (`IGNORE`) and do not count in
the loss. A sentence longer than max_seq_length - 2 pieces is cut into
windows that start every `doc_stride` pieces (serve_text reads the first);
each token is predicted from the window where it has the most context on
its shorter side (as the original run_squad scores a token), so every token
is predicted exactly once.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from seqeval import metrics
from seqeval.metrics.sequence_labeling import get_entities

from albert_tf.core import features as F
from albert_tf.core.file_io import atomic_writer
from albert_tf.data.conll import Sentence, convert

IGNORE = -1


def bio_label_list(entity_types: Sequence[str]) -> List[str]:
  """The model's tags: O, then B-/I- of each type (sorted)."""
  return ["O"] + [f"{p}-{t}" for t in sorted(entity_types) for p in "BI"]


# ------------------------------------------------------------------ windows
@dataclasses.dataclass
class Windows:
  """Encoded windows of a list of sentences.

  features: int32 arrays [num_windows, max_seq_length] (`input_ids`,
    `input_mask`, `segment_ids`, `label_ids` with IGNORE off first pieces).
  owner: for sentence s, token t → (window, position) it is predicted from.
  """
  features: Dict[str, np.ndarray]
  owner: List[List[Tuple[int, int]]]
  window_sentence: np.ndarray
  long_sentences: int
  unknown_tokens: int  # tokens that normalise to nothing: one [UNK] piece

  @property
  def num_windows(self) -> int:
    return len(self.window_sentence)


def window_starts(num_pieces: int, max_pieces: int, doc_stride: int
                  ) -> List[int]:
  """Starts of windows of max_pieces that cover num_pieces, doc_stride apart."""
  starts = [0]
  while starts[-1] + max_pieces < num_pieces:
    starts.append(starts[-1] + doc_stride)
  return starts


def encode_sentences(sentences: Sequence[Sentence], tagger,
                     label_map: Optional[Dict[str, int]], doc_stride: int,
                     scheme: str = "BIO",
                     cache: Optional[dict] = None) -> Windows:
  """Windows of [CLS] pieces [SEP] for every sentence (see module doc).

  tagger: a `tagging_graph.TextTagger`; its encoder's max_seq_length is the
  windows' length. cache: token -> piece ids, kept between calls (splits).
  """
  encoder = tagger.encoder
  max_seq_length = encoder.max_seq_length
  max_pieces = max_seq_length - 2
  if max_pieces < 1:
    raise ValueError(f"max_seq_length must be at least 3, got "
                     f"{max_seq_length}")
  if not 0 < doc_stride <= max_pieces:
    raise ValueError(f"--doc_stride must be in [1, max_seq_length - 2 = "
                     f"{max_pieces}], got {doc_stride}")
  cache = {} if cache is None else cache
  # The graph is run once over the distinct tokens not seen before.
  new = list(dict.fromkeys(t for s in sentences for t in s.tokens
                           if t not in cache))
  pieces, unknown = tagger.piece_ids(new)
  cache.update(zip(new, pieces))
  rows = {k: [] for k in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS,
                          F.LABEL_IDS)}
  owner, window_sentence = [], []
  long_sentences = 0
  for s_index, sentence in enumerate(sentences):
    piece_ids, first_piece = [], []
    for token in sentence.tokens:
      first_piece.append(len(piece_ids))
      piece_ids.extend(cache[token])
    labels = None
    if label_map is not None and sentence.tags is not None:
      # Not strict: conll.read_conll has checked the tags and let stray
      # ones through, to be read as the dev metric reads them. Well-formed
      # BIO reads as itself (and skips seqeval's slow reading).
      tags = sentence.tags
      if scheme != "BIO" or any(t[0] == "I" and p[1:] != t[1:] for p, t in
                                zip(["O"] + tags, tags)):
        tags = convert(tags, scheme, "BIO", strict=False)
      labels = [label_map[t] for t in tags]
    starts = window_starts(len(piece_ids), max_pieces, doc_stride)
    long_sentences += len(starts) > 1
    best = [(-1.0, -1, -1)] * len(sentence.tokens)
    for start in starts:
      w = len(window_sentence)
      end = min(start + max_pieces, len(piece_ids))
      ids = [encoder.cls_id] + piece_ids[start:end] + [encoder.sep_id]
      label_row = [IGNORE] * max_seq_length
      for t, p in enumerate(first_piece):
        if start <= p < end:
          # As run_squad's max-context score: the shorter side, and a
          # slight preference for the longer window.
          score = min(p - start, end - 1 - p) + 0.01 * (end - start)
          if score > best[t][0]:
            best[t] = (score, w, p - start + 1)
          if labels is not None:
            label_row[p - start + 1] = labels[t]
      pad = max_seq_length - len(ids)
      rows[F.INPUT_IDS].append(ids + [encoder.pad_id] * pad)
      rows[F.INPUT_MASK].append([1] * len(ids) + [0] * pad)
      rows[F.SEGMENT_IDS].append([0] * max_seq_length)
      rows[F.LABEL_IDS].append(label_row)
      window_sentence.append(s_index)
    owner.append([(w, pos) for _, w, pos in best])
  features = {k: np.asarray(v, np.int32).reshape([-1, max_seq_length])
              for k, v in rows.items()}
  return Windows(features, owner, np.asarray(window_sentence, np.int32),
                 long_sentences, unknown)


def tags_from_logits(windows: Windows, logits: np.ndarray,
                     label_list: Sequence[str]) -> List[List[str]]:
  """Predicted BIO tags per sentence, each token from its owner window."""
  ids = np.asarray(logits).argmax(-1)
  return [[label_list[ids[w, p]] for w, p in sentence_owner]
          for sentence_owner in windows.owner]


# ------------------------------------------------------------------ metrics
def entity_metrics(gold: Sequence[Sequence[str]],
                   predicted: Sequence[Sequence[str]]) -> Dict[str, float]:
  """Entity precision/recall/F1 (exact span and type; conlleval semantics).

  Both arguments are BIO (or IOB1/BIOES) tag lists per sentence; seqeval
  computes the figures. Keys: entity_precision, entity_recall, entity_f1,
  and <TYPE>_precision/_recall/_f1/_support per type; token_accuracy;
  num_sentences, num_tokens, num_gold_entities, num_predicted_entities.
  """
  gold, predicted = [list(g) for g in gold], [list(p) for p in predicted]
  if [len(g) for g in gold] != [len(p) for p in predicted]:
    raise ValueError("gold and predicted tags differ in length")
  report = metrics.classification_report(gold, predicted, output_dict=True,
                                         zero_division=0)
  result = {}
  for kind, values in report.items():
    if kind.endswith(" avg") and kind != "micro avg":
      continue
    kind = "entity" if kind == "micro avg" else kind
    for key in ("precision", "recall", "f1-score", "support"):
      name = "f1" if key == "f1-score" else key
      result[f"{kind}_{name}"] = (int(values[key]) if key == "support" else
                                  float(values[key]))
  result["num_gold_entities"] = result.pop("entity_support")
  flat_gold = [t for g in gold for t in g]
  flat_pred = [t for p in predicted for t in p]
  result["token_accuracy"] = (float(np.mean([a == b for a, b in zip(
      flat_gold, flat_pred)])) if flat_gold else 0.0)
  result["num_sentences"] = len(gold)
  result["num_tokens"] = len(flat_gold)
  result["num_predicted_entities"] = len(get_entities(predicted))
  return result


def write_predictions(path: str, sentences: Sequence[Sentence],
                      predicted_bio: Sequence[Sequence[str]], scheme: str,
                      has_tags: bool) -> None:
  """token \\t gold \\t predicted (token \\t predicted without gold), in the
  file's scheme; a blank line after each sentence."""
  with atomic_writer(path) as f:
    for sentence, bio in zip(sentences, predicted_bio):
      predicted = convert(bio, "BIO", scheme, strict=False)
      for i, token in enumerate(sentence.tokens):
        if has_tags:
          f.write(f"{token}\t{sentence.tags[i]}\t{predicted[i]}\n")
        else:
          f.write(f"{token}\t{predicted[i]}\n")
      f.write("\n")
