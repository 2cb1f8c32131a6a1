"""albert-predict's reading of a family's gold values and predictions.

A family's `Task.scorer(record)` returns a `Scorer`: where a row's gold is
looked for, how one gold value and one prediction are read, the metrics of
the rows seen, the lines printed and the output columns of a prediction.
The base Task's is `LabelScorer` (one label name per example) for a model
with labels, else the base `Scorer`, which says in one line why none.
"""

import collections
import json

from albert_tf.data.rows import PredictError


class Scorer:
  """Gold and predictions of the rows read so far, and their metrics; this
  base scores nothing and its `lines` say why (`reason`)."""
  #: Where gold values are looked for when --label_column is not given.
  gold_columns = ("label",)
  #: Whether an empty string is no gold (a label) or a gold value (an answer).
  blank_is_unlabelled = False
  #: What an export's check scores on its held-out gold (`serving.verify`).
  verify_metric = "accuracy"

  def __init__(self, record, reason=""):
    self.record, self.reason = record, reason
    self.gold, self.predicted = [], []

  def read_gold(self, value, values, where):
    """One row's gold (its model inputs `values`) as scored; PredictError
    naming `where` when it cannot be read."""
    del values, where
    return value

  def read_prediction(self, prediction, values, where):
    """One prediction as `metrics` compares it with the gold."""
    del values, where
    return prediction

  def add(self, values, gold, prediction, where):
    if gold is not None:
      self.gold.append(self.read_gold(gold, values, where))
      self.predicted.append(self.read_prediction(prediction, values, where))

  def metrics(self):
    """{name: value} of the gold seen (empty without any)."""
    return {}

  def lines(self, scores):
    """The lines printed for `metrics()`."""
    del scores
    return ([f"{len(self.gold)} gold value(s) not scored: {self.reason}"]
            if self.gold else [])

  def fields(self, prediction):
    """The output columns of one prediction."""
    return dict(prediction)


def gold_list(value, where):
  """A JSON list (or a list) of strings, else the value as one string."""
  if isinstance(value, str) and value.startswith("["):
    try:
      value = json.loads(value)
    except json.JSONDecodeError:
      return [value]
  if isinstance(value, list):
    if not all(isinstance(v, str) for v in value):
      raise PredictError(f"{where}: gold {value!r} is not a list of strings")
    return value
  return [str(value)]


class LabelScorer(Scorer):
  """One label name per example (by_index: or its 0-based index): accuracy,
  macro-F1, the confusion matrix and the majority class."""
  blank_is_unlabelled = True

  def __init__(self, record, labels=None, by_index=False):
    super().__init__(record)
    self.labels = list(labels or record.label_list)
    self.by_index = by_index

  def read_gold(self, value, values, where):
    if isinstance(value, bool) or value is None:
      raise PredictError(f"{where}: gold label {value!r} is not a label")
    text = str(value).strip()
    if text in self.labels:
      return text
    if self.by_index and text.lstrip("-").isdigit() and (
        0 <= int(text) < len(self.labels)):
      return self.labels[int(text)]
    raise PredictError(f"{where}: gold label {text!r} is not one of the "
                       f"model's labels ({', '.join(self.labels)})")

  def read_prediction(self, prediction, values, where):
    if not isinstance(prediction, dict) or "label" not in prediction:
      raise PredictError(f"{where}: the {self.record.task} model's prediction "
                         "has no 'label' to score (its Task.scorer says how "
                         "to score it)")
    return prediction["label"]

  def metrics(self):
    return (classifier_metrics(self.gold, self.predicted, self.labels)
            if self.gold else {})

  def lines(self, scores):
    if not scores:
      return []
    return [
        f"accuracy={scores['accuracy']:.4f} macro_f1={scores['macro_f1']:.4f}"
        f" on {scores['examples']} labelled examples",
        f"majority class of this file ({scores['majority_label']!r}, not of "
        f"a train split): accuracy={scores['majority_accuracy']:.4f} "
        f"macro_f1={scores['majority_macro_f1']:.4f}",
        "confusion matrix (rows: gold, columns: predicted):",
    ] + format_confusion_matrix(scores["confusion_matrix"], scores["labels"])


def classifier_metrics(gold, predicted, labels):
  """accuracy, macro_f1, confusion_matrix (rows gold, columns predicted, in
  `labels` order) and the majority class of these gold labels scored the
  same way (majority_label, majority_accuracy, majority_macro_f1)."""
  from sklearn import metrics  # pylint: disable=g-import-not-at-top
  counts = collections.Counter(gold)
  top = max(counts.values())
  majority = next(l for l in labels if counts.get(l) == top)  # first of ties
  baseline = [majority] * len(gold)
  return {
      "examples": len(gold),
      "accuracy": float(metrics.accuracy_score(gold, predicted)),
      "macro_f1": float(metrics.f1_score(gold, predicted, labels=labels,
                                         average="macro", zero_division=0)),
      "confusion_matrix": metrics.confusion_matrix(
          gold, predicted, labels=labels).tolist(),
      "labels": list(labels),
      "majority_label": majority,
      "majority_accuracy": float(metrics.accuracy_score(gold, baseline)),
      "majority_macro_f1": float(metrics.f1_score(
          gold, baseline, labels=labels, average="macro", zero_division=0)),
  }


def format_confusion_matrix(matrix, labels):
  """Lines of the matrix: a header of predicted labels, a row per gold."""
  width = max([len("gold\\pred")] + [len(str(l)) for l in labels] +
              [len(str(v)) for row in matrix for v in row])
  lines = ["  " + "gold\\pred".ljust(width) + " " + " ".join(
      str(l).rjust(width) for l in labels)]
  for label, row in zip(labels, matrix):
    lines.append("  " + str(label).ljust(width) + " " + " ".join(
        str(v).rjust(width) for v in row))
  return lines
