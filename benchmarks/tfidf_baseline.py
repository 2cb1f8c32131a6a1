"""TF-IDF character n-grams + logistic regression: the no-pretraining baseline.

    python -m benchmarks.tfidf_baseline --data_dir=demo_output/sentiment \
        --output_file=demo_output/tfidf_baseline.json

Reads the same {train,dev,test}.tsv splits as run_classifier (task
`sentiment`, via albert_tf.data.classifier_data), fits on train, reports dev and
test accuracy. scikit-learn is a benchmark/test dependency only.
"""

import json
import time

from absl import app
from absl import flags

from albert_tf.data import classifier_data as cd


def make_model(ngram_max=3, c=4.0, max_features=200000):
  """The baseline, unfitted: a scikit-learn pipeline, texts -> labels."""
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  from sklearn.pipeline import make_pipeline  # pylint: disable=g-import-not-at-top
  return make_pipeline(
      TfidfVectorizer(analyzer="char", ngram_range=(1, ngram_max),
                      sublinear_tf=True, max_features=max_features),
      LogisticRegression(C=c, max_iter=2000))


def run(data_dir, task_name="sentiment", ngram_max=3, c=4.0, max_features=200000):
  """Fits the baseline; returns {"dev_accuracy", "test_accuracy", ...}."""
  spec = cd.get_task(task_name)
  start = time.time()
  splits = {s: cd.read_examples(spec, data_dir, s)[0]
            for s in ("train", "dev", "test")}

  def texts(examples):
    return [e.text_a + (" " + e.text_b if e.text_b else "") for e in examples]

  def labels(examples):
    return [cd.label_to_value(spec, e.label) for e in examples]

  model = make_model(ngram_max, c, max_features)
  model.fit(texts(splits["train"]), labels(splits["train"]))
  result = {"task": task_name, "ngram_range": [1, ngram_max], "C": c,
            "num_features": len(model[0].vocabulary_)}
  for split in ("dev", "test"):
    predictions = model.predict(texts(splits[split]))
    gold = labels(splits[split])
    result[f"{split}_accuracy"] = float(
        sum(int(p == g) for p, g in zip(predictions, gold)) / len(gold))
    result[f"{split}_examples"] = len(gold)
  result["train_examples"] = len(splits["train"])
  result["wall_s"] = round(time.time() - start, 2)
  return result


FLAGS = flags.FLAGS


def main(argv):
  del argv
  result = run(FLAGS.data_dir, FLAGS.task_name, FLAGS.ngram_max, FLAGS.c)
  print(json.dumps(result, indent=2))
  if FLAGS.output_file:
    with open(FLAGS.output_file, "w", encoding="utf-8") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  flags.DEFINE_string("data_dir", None, "Directory with {train,dev,test}.tsv.")
  flags.DEFINE_string("task_name", "sentiment", "A classifier_data task.")
  flags.DEFINE_integer("ngram_max", 3, "Character n-grams 1..ngram_max.")
  flags.DEFINE_float("c", 4.0, "Inverse L2 regularisation strength.")
  flags.DEFINE_string("output_file", None, "Optional JSON output path.")
  flags.mark_flag_as_required("data_dir")
  app.run(main)
