"""CoNLL sentences as model windows; tags from logits, entity scores; raw text.

    data = conll.read_conll("data/ner/train.txt")
    windows = encode_sentences(data.sentences, tokenizer, label_map,
                               max_seq_length=128, doc_stride=64)

Reading the files and their tag schemes are `albert_tf.data.conll`.

Tokens are split into pieces with the project tokenizer, each token on its
own (SentencePiece's bare word-start piece "▁" in front of a token's other
pieces carries nothing and is dropped; a token that normalises to nothing
becomes one unknown piece, so no token is lost). Only a token's first piece
carries its label; the other positions are -1 (`IGNORE`) and do not count in
the loss. A sentence longer than max_seq_length - 2 pieces is cut into
windows that start every `doc_stride` pieces; each token is predicted from
the window where it has the most context on its shorter side (as the
original run_squad scores a token), so every token is predicted exactly once.

The raw-text functions at the end (`split_text`, `encode_text`, `tag_text`)
are the same encoding for one text without a CoNLL file: what serving does.
"""

import dataclasses
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from seqeval import metrics
from seqeval.metrics.sequence_labeling import get_entities

from albert_tf import features as F
from albert_tf.file_io import atomic_writer
from albert_tf.data import tokenization
from albert_tf.data.conll import Sentence, convert, spans

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


def token_pieces(tokenizer, token: str) -> List[int]:
  """Piece ids of one token (never empty)."""
  pieces = tokenizer.tokenize(token)
  # SentencePiece starts each separately encoded token with a word-start
  # marker; alone it carries no information and would double the length of
  # a character-level sentence.
  if len(pieces) > 1 and pieces[0] == "\u2581":
    pieces = pieces[1:]
  return tokenizer.convert_tokens_to_ids(pieces)


def window_starts(num_pieces: int, max_pieces: int, doc_stride: int
                  ) -> List[int]:
  """Starts of windows of max_pieces that cover num_pieces, doc_stride apart."""
  starts = [0]
  while starts[-1] + max_pieces < num_pieces:
    starts.append(starts[-1] + doc_stride)
  return starts


def encode_sentences(sentences: Sequence[Sentence], tokenizer,
                     label_map: Optional[Dict[str, int]], max_seq_length: int,
                     doc_stride: int, scheme: str = "BIO",
                     cache: Optional[dict] = None) -> Windows:
  """Windows of [CLS] pieces [SEP] for every sentence (see module doc)."""
  max_pieces = max_seq_length - 2
  if max_pieces < 1:
    raise ValueError(f"max_seq_length must be at least 3, got "
                     f"{max_seq_length}")
  if not 0 < doc_stride <= max_pieces:
    raise ValueError(f"--doc_stride must be in [1, max_seq_length - 2 = "
                     f"{max_pieces}], got {doc_stride}")
  cache = {} if cache is None else cache
  rows = {k: [] for k in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS,
                          F.LABEL_IDS)}
  owner, window_sentence = [], []
  long_sentences = unknown = 0
  for s_index, sentence in enumerate(sentences):
    piece_ids, first_piece = [], []
    for token in sentence.tokens:
      if token not in cache:
        cache[token] = token_pieces(tokenizer, token) or [tokenizer.unk_id]
        if not tokenizer.tokenize(token):
          unknown += 1
      first_piece.append(len(piece_ids))
      piece_ids.extend(cache[token])
    labels = None
    if label_map is not None and sentence.tags is not None:
      # Not strict: conll.read_conll has checked the tags and let stray
      # ones through, to be read as the dev metric reads them.
      labels = [label_map[t] for t in convert(sentence.tags, scheme, "BIO",
                                              strict=False)]
    starts = window_starts(len(piece_ids), max_pieces, doc_stride)
    long_sentences += len(starts) > 1
    best = [(-1.0, -1, -1)] * len(sentence.tokens)
    for start in starts:
      w = len(window_sentence)
      end = min(start + max_pieces, len(piece_ids))
      ids = [tokenizer.cls_id] + piece_ids[start:end] + [tokenizer.sep_id]
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
      rows[F.INPUT_IDS].append(ids + [tokenizer.pad_id] * pad)
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
  result = {
      "entity_precision": float(metrics.precision_score(
          gold, predicted, zero_division=0)),
      "entity_recall": float(metrics.recall_score(gold, predicted,
                                                  zero_division=0)),
      "entity_f1": float(metrics.f1_score(gold, predicted, zero_division=0)),
  }
  report = metrics.classification_report(gold, predicted, output_dict=True,
                                         zero_division=0)
  for kind, values in report.items():
    if kind.endswith(" avg"):
      continue
    for key in ("precision", "recall", "f1-score", "support"):
      name = "f1" if key == "f1-score" else key
      result[f"{kind}_{name}"] = (int(values[key]) if key == "support" else
                                  float(values[key]))
  flat_gold = [t for g in gold for t in g]
  flat_pred = [t for p in predicted for t in p]
  result["token_accuracy"] = (float(np.mean([a == b for a, b in zip(
      flat_gold, flat_pred)])) if flat_gold else 0.0)
  result["num_sentences"] = len(gold)
  result["num_tokens"] = len(flat_gold)
  result["num_gold_entities"] = len(get_entities(gold))
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


# ------------------------------------------------------------------ raw text
# How the tagger's serve_text signature reads raw text, in Python: the twin of
# `albert_tf.serving.tagging_graph.TextTagger` (tests compare the two), and what an app
# running the TFLite model (token ids in, tag ids out) does around it:
#
#   tokens, features, positions = encode_text(text, tokenizer, "char", 128)
#   tag_ids = runner(**features)["tag_ids"][0]
#   result = tag_text(text, tokens, [label_list[tag_ids[p]] for p in positions])
TOKEN_LEVELS = ("char", "word")


def is_word_char(char: str) -> bool:
  """True for a character that joins its neighbours into one "word" token:
  a letter, digit or combining mark (so "café" in NFD stays one word) that is
  not a CJK ideograph."""
  return ((char.isalnum() or unicodedata.category(char).startswith("M"))
          and not tokenization.is_cjk_char(char))


def split_text(text: str, token_level: str) -> List[Tuple[str, int, int]]:
  """Raw text -> tokens as (token, start, end), offsets in code points of
  `text`, end exclusive (text[start:end] == token).

  token_level "char": every non-whitespace character (not str.isspace) is a
  token, as in character-level corpora (People's Daily NER). "word": a run of
  `is_word_char` characters is one token ("iPhone", "2024", "１５"); every
  other non-whitespace character is a token alone (each CJK ideograph, each
  punctuation mark or symbol). Characters are code points, not grapheme
  clusters: an emoji with a skin-tone modifier is two tokens.
  """
  if token_level not in TOKEN_LEVELS:
    raise ValueError(f"token_level must be one of {TOKEN_LEVELS}, got "
                     f"{token_level!r}")
  tokens, i = [], 0
  while i < len(text):
    if text[i].isspace():
      i += 1
      continue
    end = i + 1
    if token_level == "word" and is_word_char(text[i]):
      while end < len(text) and is_word_char(text[end]):
        end += 1
    tokens.append((text[i:end], i, end))
    i = end
  return tokens


def encode_text(text: str, tokenizer, token_level: str, max_seq_length: int):
  """One raw text as the tagger's input: (tokens, features, positions).

  tokens: `split_text(text, token_level)`. features: int32 [1,
  max_seq_length] `input_ids`, `input_mask`, `segment_ids`: [CLS] the pieces
  of every token (`token_pieces`, [UNK] for a token without one), cut after
  max_seq_length - 2 pieces, [SEP], padding. positions: the position of the
  first piece of each tagged token; the tagged tokens are the first
  len(positions), those whose first piece is inside the cut (the model's tag
  there is the token's tag). The rest are not tagged: run_ner's overlapping
  windows are for files, this is one window.
  """
  max_pieces = max_seq_length - 2
  ids, positions = [], []
  tokens = split_text(text, token_level)
  for token, _, _ in tokens:
    if len(ids) >= max_pieces:
      break
    positions.append(len(ids) + 1)
    ids.extend(token_pieces(tokenizer, token) or [tokenizer.unk_id])
  ids = [tokenizer.cls_id] + ids[:max_pieces] + [tokenizer.sep_id]
  pad = max_seq_length - len(ids)
  features = {
      F.INPUT_IDS: np.asarray([ids + [tokenizer.pad_id] * pad], np.int32),
      F.INPUT_MASK: np.asarray([[1] * len(ids) + [0] * pad], np.int32),
      F.SEGMENT_IDS: np.zeros([1, max_seq_length], np.int32)}
  return tokens, features, positions


def tag_text(text: str, tokens: Sequence[Tuple[str, int, int]],
             token_tags: Sequence[str]) -> dict:
  """Entities and per-character tags of `text` from its tokens' BIO tags.

  tokens: `split_text(text, ...)`; token_tags: the tags of the first
  len(token_tags) of them (the others were not tagged). Returns a dict:
    entities: [(type, start, end, text)], offsets in code points of `text`
      (end exclusive), from the first character of an entity's first token
      to the last character of its last token; read as conlleval reads tags
      (an I-X that does not continue an X starts one).
    char_tags: a BIO tag per character of `text`: B-X on an entity's first
      character, I-X on its other characters (whitespace between its tokens
      too), O elsewhere, "" on the characters of tokens not tagged; so the
      char_tags read back (strict BIO) give exactly `entities`.
    num_untagged_chars: characters (whitespace excluded) not tagged.
  """
  tagged = tokens[:len(token_tags)]
  char_tags = ["O" if c.isspace() else "" for c in text]
  for (_, start, end), tag in zip(tagged, token_tags):
    char_tags[start:end] = ["O"] * (end - start)
  entities = []
  for kind, first, last in spans(list(token_tags), "BIO", strict=False):
    start, end = tagged[first][1], tagged[last - 1][2]
    entities.append((kind, start, end, text[start:end]))
    char_tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
  return {"entities": entities, "char_tags": char_tags,
          "num_untagged_chars": sum(t == "" for t in char_tags)}
