"""CoNLL sentences as model windows; tags from logits, entity scores, the
predictions file, the baselines and serve_text's held-out texts.

    data = conll.read_conll("data/ner/train.txt")
    tagger = tagging_graph.TextTagger.from_tokenizer(tokenizer, 128, ...)
    windows, stats = encode_split(data, "train", label_list, tagger, 64)

Windows: a token's pieces come from the tagger's graph preprocessor
(`tagging_graph.TextTagger.piece_ids`, serve_text's own); only the first
carries its label (the others `IGNORE`, out of the loss). A sentence longer
than a window is cut every `doc_stride` pieces (serve_text reads the first
window); each token is predicted from the window where it has the most
context on its shorter side (as the original run_squad scores a token).
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core.file_io import atomic_writer
from albert_tf.data import conll, input_timeout

# serve_text's splitting of raw text (TF Text), for held_out_texts only.
tagging_graph = lazy.module("albert_tf.serving.tagging_graph")

IGNORE = -1  # the label of a position that is not a token's first piece
SPLIT_FILES = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}


def bio_label_list(entity_types: Sequence[str]) -> List[str]:
  """The model's tags: O, then B-/I- of each type (sorted)."""
  return ["O"] + [f"{p}-{t}" for t in sorted(entity_types) for p in "BI"]


# ------------------------------------------------------------------ windows
@dataclasses.dataclass
class Windows:
  """features: int32 [num_windows, max_seq_length] encoder inputs and
  `label_ids`; owner[s][t]: the (window, position) of token t of sentence s."""
  features: Dict[str, np.ndarray]
  owner: List[List[Tuple[int, int]]]
  num_windows: int
  long_sentences: int
  unknown_tokens: int  # tokens that normalise to nothing: one [UNK] piece


def window_starts(num_pieces: int, max_pieces: int, doc_stride: int
                  ) -> List[int]:
  """Starts of windows of max_pieces that cover num_pieces, doc_stride apart."""
  return list(range(0, max(num_pieces - max_pieces, 0) + doc_stride,
                    doc_stride))


def encode_sentences(sentences: Sequence[conll.Sentence], tagger,
                     label_map: Optional[Dict[str, int]], doc_stride: int,
                     scheme: str = "BIO",
                     cache: Optional[dict] = None) -> Windows:
  """Windows of [CLS] pieces [SEP] (the length of `tagger.encoder`'s
  max_seq_length) of every sentence. cache: token -> piece ids, kept."""
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
  rows = {k: [] for k in (F.INPUT_IDS, F.INPUT_MASK, F.LABEL_IDS)}
  owner, long_sentences = [], 0
  for sentence in sentences:
    piece_ids, first_piece = [], []
    for token in sentence.tokens:
      first_piece.append(len(piece_ids))
      piece_ids.extend(cache[token])
    # Not strict: stray gold tags are read as the dev metric reads them.
    labels = None if label_map is None or sentence.tags is None else [
        label_map[t] for t in conll.to_bio(sentence, scheme)]
    starts = window_starts(len(piece_ids), max_pieces, doc_stride)
    long_sentences += len(starts) > 1
    best = [(-1.0, -1, -1)] * len(sentence.tokens)
    for start in starts:
      w = len(rows[F.INPUT_IDS])
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
      rows[F.LABEL_IDS].append(label_row)
    owner.append([(w, pos) for _, w, pos in best])
  features = {k: np.asarray(v, np.int32).reshape([-1, max_seq_length])
              for k, v in rows.items()}
  features[F.SEGMENT_IDS] = np.zeros_like(features[F.INPUT_IDS])
  return Windows(features, owner, len(features[F.INPUT_IDS]), long_sentences,
                 unknown)


def tags_from_logits(windows: Windows, logits: np.ndarray,
                     label_list: Sequence[str]) -> List[List[str]]:
  """Predicted BIO tags per sentence, each token from its owner window."""
  ids = np.asarray(logits).argmax(-1)
  return [[label_list[ids[w, p]] for w, p in s] for s in windows.owner]


# ------------------------------------------------------------------ metrics
def entity_metrics(gold: Sequence[Sequence[str]],
                   predicted: Sequence[Sequence[str]]) -> Dict[str, float]:
  """seqeval's entity_precision/_recall/_f1 (exact span and type) and
  <TYPE>_precision/_recall/_f1/_support, token_accuracy, num_sentences,
  num_tokens, num_gold_entities, num_predicted_entities of BIO tag lists."""
  from seqeval import metrics  # pylint: disable=g-import-not-at-top
  from seqeval.metrics.sequence_labeling import get_entities  # pylint: disable=g-import-not-at-top
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
  flat = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
  result.update(num_gold_entities=result.pop("entity_support"),
                token_accuracy=(float(np.mean([g == p for g, p in flat]))
                                if flat else 0.0),
                num_sentences=len(gold), num_tokens=len(flat),
                num_predicted_entities=len(get_entities(predicted)))
  return result


def write_predictions(path: str, sentences: Sequence[conll.Sentence],
                      predicted_bio: Sequence[Sequence[str]], scheme: str,
                      has_tags: bool) -> None:
  """token \\t gold \\t predicted (token \\t predicted without gold), in the
  file's scheme; a blank line after each sentence."""
  with atomic_writer(path) as f:
    for sentence, bio in zip(sentences, predicted_bio):
      predicted = conll.convert(bio, "BIO", scheme, strict=False)
      for i, token in enumerate(sentence.tokens):
        gold = f"{sentence.tags[i]}\t" if has_tags else ""
        f.write(f"{token}\t{gold}{predicted[i]}\n")
      f.write("\n")


def read_split(data_dir: str, split: str, tag_scheme: Optional[str],
               strict_tags: bool, max_examples: int,
               timeout_secs: float) -> conll.ConllData:
  """data_dir's file of `split` (`conll.read_conll`), its first max_examples
  sentences (0: all). A read that stalls past timeout_secs (a named pipe
  without a writer, a hung mount) is an error, not a wait."""
  path = os.path.join(data_dir, SPLIT_FILES[split])
  if not os.path.exists(path):
    raise conll.DataError(f"{path}: no such file (--data_dir needs "
                          f"{SPLIT_FILES[split]} for the {split} split)")
  data = input_timeout.read_within(
      f"the {split} file {path}",
      lambda: conll.read_conll(path, tag_scheme, strict_tags), timeout_secs)
  data.sentences = data.sentences[:max_examples or None]
  return data


def encode_split(data: conll.ConllData, split: str,
                 label_list: Optional[Sequence[str]], tagger, doc_stride: int,
                 cache: Optional[dict] = None):
  """(windows, stats) of a split (`encode_sentences`), logged in one line;
  its tags (if any) must be of the model's entity types (`label_list`)."""
  label_map = None
  if data.has_tags:
    label_map = {t: i for i, t in enumerate(label_list)}
    known = {t[2:] for t in label_list if t != "O"}
    for s in data.sentences:
      for i, tag in enumerate(s.tags):
        if tag != "O" and tag[2:] not in known:
          raise conll.DataError(
              f"{data.file}:{s.line + i}: entity type {tag[2:]!r} is "
              f"not among the model's ({', '.join(sorted(known))})")
  windows = encode_sentences(data.sentences, tagger, label_map, doc_stride,
                             data.scheme, cache=cache)
  stats = {"file": data.file, "sentences": len(data.sentences),
           "tokens": sum(len(s.tokens) for s in data.sentences),
           "windows": windows.num_windows,
           "long_sentences": windows.long_sentences,
           "unknown_tokens": windows.unknown_tokens,
           "docstarts_skipped": data.docstarts,
           "stray_tags": data.stray_tags,
           "scheme": data.scheme if data.has_tags else None}
  logging.info(
      "[%s] %s: %d sentences, %d tokens (%s), %d windows of "
      "max_seq_length=%d (%d sentences longer than one window, "
      "doc_stride=%d); %d tokens with no piece read as unknown", split,
      data.file, stats["sentences"], stats["tokens"],
      stats["scheme"] or "no tags", stats["windows"],
      tagger.encoder.max_seq_length, stats["long_sentences"], doc_stride,
      stats["unknown_tokens"])
  return windows, stats


def baseline_tags(train: Optional[conll.ConllData],
                  sentences: Sequence[Sequence[str]]) -> Dict[str, list]:
  """{baseline: BIO tags of each token list of `sentences`}: all_o (no
  entity) and, when `train` has tags, dictionary
  (`data.baselines.EntityDictionary` fitted on them)."""
  from albert_tf.data import baselines  # pylint: disable=g-import-not-at-top
  out = {"all_o": [["O"] * len(t) for t in sentences]}
  if train is not None and train.has_tags:
    dictionary = baselines.EntityDictionary.fit(
        [s.tokens for s in train.sentences],
        [conll.to_bio(s, train.scheme) for s in train.sentences])
    out["dictionary"] = [dictionary.tag(t) for t in sentences]
  return out


def held_out_texts(path: str, scheme: Optional[str], token_level: str,
                   max_examples: int):
  """(texts, their BIO tags or None) of up to max_examples sentences of a
  CoNLL file, each tokens joined as serve_text splits them back (none for
  "char", a space for "word"; a sentence that does not is left out)."""
  data = conll.read_conll(path, scheme)
  texts = [("" if token_level == "char" else " ").join(s.tokens)
           for s in data.sentences]
  split = tagging_graph.split_texts(texts, token_level)
  kept = [i for i, s in enumerate(data.sentences)
          if [t for t, _, _ in split[i]] == s.tokens][:max_examples]
  return ([texts[i] for i in kept],
          [conll.to_bio(data.sentences[i], data.scheme) for i in kept]
          if data.has_tags else None)


def entity_tags(tokens, entities) -> List[str]:
  """BIO tags of tokens [(token, start, end)] from entities [{"type",
  "start", "end"}] (the same offsets): a token inside an entity is in it."""
  tags = ["O"] * len(tokens)
  for entity in entities:
    inside = [i for i, (_, s, e) in enumerate(tokens)
              if s >= entity["start"] and e <= entity["end"]]
    for n, i in enumerate(inside):
      tags[i] = ("B-" if n == 0 else "I-") + entity["type"]
  return tags


def one_tag_per_sentence(predicted, gold):
  """(predicted, gold, how the prediction reads) for
  `Task.warn_if_collapsed`: per non-empty sentence its one tag (any: O, or
  I-n in a file without O), or a value no other sentence shares (mixed)."""
  kept = [i for i, tags in enumerate(predicted) if tags]
  one = lambda tags, i: tags[0] if len(set(tags)) == 1 else ("mixed", i)
  said = [one(predicted[i], i) for i in kept]
  tag = said[0] if said else None
  return (said, [one(gold[i], i) for i in kept],
          "only O tags (no entity)" if tag == "O" else f"only {tag!r} tags")


def window_f1(labels: Sequence[str], gold, positions):
  """(fn(outputs) -> entity F1 of the model's `logits` at each text's
  first-piece `positions` (serve_text's one window; tokens past it are O,
  as albert-predict reads them), rows scored) for the rows with gold."""
  rows = [i for i, g in enumerate(gold) if g is not None]

  def entity_f1(outputs):
    ids = outputs[F.LOGITS].argmax(-1)
    predicted = [[labels[ids[i, p]] for p in positions[i]] +
                 ["O"] * (len(gold[i]) - len(positions[i])) for i in rows]
    return entity_metrics([gold[i] for i in rows], predicted)["entity_f1"]
  return entity_f1, len(rows)
