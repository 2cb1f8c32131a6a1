"""The simplest models a fine-tuned model must beat, on the same split.

    ids = tfidf((train_a, train_b, train_ids), [(dev_a, dev_b)])[0]
    tags = EntityDictionary.fit(train_tokens, train_bio).tag(dev_tokens)
    text = sliding_window_answer(question, context, answer_words=2)

Classification (`majority`, `tfidf`: character n-grams and logistic
regression, fitted on the train split in seconds), tagging (all-O and
`EntityDictionary`) and span QA (`sliding_window_answer`, the SQuAD
paper's). Each gives predictions (label ids, BIO tags, answer texts) that
the family scores with its own metric (`sliding_window_scores` takes it).
Why here: the libraries have the models but no "baseline for this split"
rule; the numbers sit beside the model's in eval_results.json
(`baseline_*`).
"""

import collections
import re
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# Joins text_a and text_b: a character that no text holds (Unicode
# noncharacter), so the n-grams of the two never run into each other.
_SEP = "\ufdd0"


def majority(train_labels: Sequence[int], n: int) -> np.ndarray:
  """n copies of the train split's most frequent label id (the smallest id
  among ties)."""
  counts = collections.Counter(int(x) for x in train_labels)
  return np.full([n], min(counts, key=lambda k: (-counts[k], k)), np.int64)


def tfidf(train: Tuple[Sequence[str], Sequence[Optional[str]], Sequence[int]],
          splits: List[Tuple[Sequence[str], Sequence[Optional[str]]]],
          seed: int = 0) -> List[np.ndarray]:
  """Label ids predicted for each of `splits` ((text_a, text_b) lists) by
  char 1-3-gram TF-IDF + logistic regression fitted on `train` (text_a,
  text_b, label ids); a single-class train split predicts that class. A
  pair's texts are joined by a separator no text holds, and the share of
  text_a's characters found in text_b (matching pairs overlap) is one
  more feature."""
  # pylint: disable=g-import-not-at-top
  from scipy import sparse
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  texts_a, texts_b, labels = train
  pairs = any(b is not None for b in texts_b)

  vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3),
                               sublinear_tf=True, min_df=1)

  def features(a_list, b_list, fit=False):
    x = (vectorizer.fit_transform if fit else vectorizer.transform)(
        [a if not pairs else f"{a}{_SEP}{b or ''}"
         for a, b in zip(a_list, b_list)])
    if not pairs:
      return x
    overlap = [[len(set(a) & set(b)) / max(1, len(set(a))) if b else 0.0]
               for a, b in zip(a_list, b_list)]
    return sparse.hstack([x, sparse.csr_matrix(
        np.array(overlap, np.float64))]).tocsr()

  labels = np.asarray(labels, np.int64)
  if len(set(labels.tolist())) < 2:
    return [np.full([len(a)], labels[0] if len(labels) else 0, np.int64)
            for a, _ in splits]
  model = LogisticRegression(max_iter=1000, C=10.0, random_state=seed)
  model.fit(features(texts_a, texts_b, fit=True), labels)
  return [model.predict(features(a, b)).astype(np.int64) if len(a) else
          np.zeros([0], np.int64) for a, b in splits]


# ------------------------------------------------------------------ tagging
class EntityDictionary:
  """Entity strings (token tuples) of a train split -> their most frequent
  type; `tag` marks the longest known string at each place, left to right."""

  def __init__(self, types: Dict[Tuple[str, ...], str]):
    self.types = types
    self.longest = max((len(k) for k in types), default=0)

  @classmethod
  def fit(cls, sentences: Sequence[Sequence[str]],
          bio_tags: Sequence[Sequence[str]]) -> "EntityDictionary":
    """From tokens and their BIO tags (an I-X after O or another type starts
    an entity, as seqeval reads it); ties: the type first in sorted order."""
    counts = collections.defaultdict(collections.Counter)
    for tokens, tags in zip(sentences, bio_tags):
      start, kind = None, None
      for i, tag in enumerate(list(tags) + ["O"]):
        if kind is not None and (tag == "O" or tag.startswith("B-") or
                                 tag[2:] != kind):
          counts[tuple(tokens[start:i])][kind] += 1
          start, kind = None, None
        if tag != "O" and kind is None:
          start, kind = i, tag[2:]
    return cls({words: min(c, key=lambda t: (-c[t], t))
                for words, c in counts.items()})

  def tag(self, tokens: Sequence[str]) -> List[str]:
    """BIO tags of one sentence."""
    tags, i = ["O"] * len(tokens), 0
    while i < len(tokens):
      for n in range(min(self.longest, len(tokens) - i), 0, -1):
        kind = self.types.get(tuple(tokens[i:i + n]))
        if kind is not None:
          tags[i:i + n] = [f"B-{kind}"] + [f"I-{kind}"] * (n - 1)
          i += n
          break
      else:
        i += 1
    return tags


# ------------------------------------------------------------------ span QA
# Sentence ends: . ! ? followed by a space, and the CJK full stops.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？!?])")


def _words(text: str, offset: int = 0) -> List[Tuple[str, int, int]]:
  """(key, start, end) of each word: whitespace-separated runs, each Han
  character one word (as CMRC's mixed segmentation cuts Chinese); the key is
  the word lowercased without punctuation (words that are only punctuation
  are dropped)."""
  out = []
  for match in re.finditer(r"[\u3400-\u4dbf\u4e00-\u9fff]|[^\s\u3400-\u4dbf"
                           r"\u4e00-\u9fff]+", text):
    key = "".join(c for c in match.group().lower()
                  if not unicodedata.category(c).startswith("P"))
    if key:
      out.append((key, offset + match.start(), offset + match.end()))
  return out


def _grams(keys: Sequence[str]) -> set:
  return set(keys) | set(zip(keys, keys[1:]))


def sliding_window_answer(question: str, context: str,
                          answer_words: int) -> str:
  """The sliding-window baseline of the SQuAD paper (Rajpurkar et al. 2016,
  after Richardson et al. 2013): every run of `answer_words` words of the
  context holding no question word is a candidate; it scores the distinct
  question unigrams and bigrams found among the words of its own sentence
  within len(question words) of it on either side (itself excluded; the
  bigrams within each side). The best candidate's text, the first on ties;
  "" when there is none. Words: `_words` (Han characters one by one)."""
  q_keys = [k for k, _, _ in _words(question)]
  q_grams, q_set, reach = _grams(q_keys), set(q_keys), len(q_keys)
  best, answer = -1, ""
  offset = 0
  for sentence in _SENTENCE_END.split(context):
    offset = context.index(sentence, offset)
    words = _words(sentence, offset)
    offset += len(sentence)
    keys = [k for k, _, _ in words]
    for i in range(len(words) - answer_words + 1):
      if q_set & set(keys[i:i + answer_words]):
        continue
      left = keys[max(0, i - reach):i]
      right = keys[i + answer_words:i + answer_words + reach]
      score = len(q_grams & (_grams(left) | _grams(right)))
      if score > best:
        best = score
        answer = context[words[i][1]:words[i + answer_words - 1][2]]
  return answer


def answer_words(answers: Sequence[str]) -> int:
  """The most frequent length in words (`_words`) of the answers, the
  shortest on ties; 1 when there are none."""
  counts = collections.Counter(len(_words(a)) for a in answers if _words(a))
  return min(counts, key=lambda n: (-counts[n], n)) if counts else 1


def sliding_window_scores(train_examples, splits: Dict[str, Sequence],
                          score) -> Dict[str, Dict[str, Dict[str, float]]]:
  """{split: {"sliding_window": its exact match and f1}} of
  `sliding_window_answer` on each split's `squad.Example`s, answering in
  the train examples' most frequent first-answer length (`answer_words`),
  scored by score(examples, {qas_id: text}) -> the official metrics."""
  length = answer_words([e.answers[0][0] for e in train_examples if e.answers])
  out = {}
  for split, examples in splits.items():
    metrics = score(examples, {e.qas_id: sliding_window_answer(
        e.question, e.context, length) for e in examples})
    out[split] = {"sliding_window": {k: v for k, v in metrics.items()
                                     if k in ("exact_match", "exact", "f1")}}
  return out
