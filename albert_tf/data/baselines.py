"""The simplest models a fine-tuned classifier must beat, on the same split.

    scores = text_baselines(train_texts, train_labels, [(dev_texts, dev_labels)])

Two baselines, fitted on the train split in seconds (scikit-learn):
  * majority: every example gets the train split's most frequent label;
  * tfidf: character 1-3-gram TF-IDF and logistic regression. For a pair
    the two texts are joined by a separator no text holds, and the share of
    text_a's characters found in text_b is one more feature (matching pairs
    overlap: question/answer, paraphrase).
Both return predicted label ids, which the family scores with its own metric.
Why here: scikit-learn has the models but no "baseline for this split" rule;
the numbers sit beside the model's in eval_results.json (`baseline_*`).
"""

import collections
from typing import List, Optional, Sequence, Tuple

import numpy as np

# Joins text_a and text_b: a character that no text holds (Unicode
# noncharacter), so the n-grams of the two never run into each other.
_SEP = "\ufdd0"


def _overlap(text_a: str, text_b: Optional[str]) -> float:
  """The share of text_a's distinct characters that text_b holds."""
  if not text_b:
    return 0.0
  chars = set(text_a)
  return len(chars & set(text_b)) / max(1, len(chars))


def majority(train_labels: Sequence[int], n: int) -> np.ndarray:
  """n copies of the train split's most frequent label id (the smallest id
  among ties)."""
  counts = collections.Counter(int(x) for x in train_labels)
  top = max(counts.values())
  return np.full([n], min(k for k, v in counts.items() if v == top),
                 np.int64)


def tfidf(train: Tuple[Sequence[str], Sequence[Optional[str]], Sequence[int]],
          splits: List[Tuple[Sequence[str], Sequence[Optional[str]]]],
          seed: int = 0) -> List[np.ndarray]:
  """Label ids predicted for each of `splits` ((text_a, text_b) lists) by
  char 1-3-gram TF-IDF + logistic regression fitted on `train` (text_a,
  text_b, label ids); a single-class train split predicts that class."""
  # pylint: disable=g-import-not-at-top
  from scipy import sparse
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  texts_a, texts_b, labels = train
  pairs = any(b is not None for b in texts_b)

  def joined(a_list, b_list):
    return [a if not pairs else f"{a}{_SEP}{b or ''}"
            for a, b in zip(a_list, b_list)]

  def extra(a_list, b_list):
    return sparse.csr_matrix(np.array(
        [[_overlap(a, b)] for a, b in zip(a_list, b_list)], np.float64))

  labels = np.asarray(labels, np.int64)
  if len(set(labels.tolist())) < 2:
    return [np.full([len(a)], labels[0] if len(labels) else 0, np.int64)
            for a, _ in splits]
  vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3),
                               sublinear_tf=True, min_df=1)
  x = vectorizer.fit_transform(joined(texts_a, texts_b))
  if pairs:
    x = sparse.hstack([x, extra(texts_a, texts_b)]).tocsr()
  model = LogisticRegression(max_iter=1000, C=10.0, random_state=seed)
  model.fit(x, labels)
  out = []
  for a_list, b_list in splits:
    if not len(a_list):
      out.append(np.zeros([0], np.int64))
      continue
    z = vectorizer.transform(joined(a_list, b_list))
    if pairs:
      z = sparse.hstack([z, extra(a_list, b_list)]).tocsr()
    out.append(model.predict(z).astype(np.int64))
  return out
