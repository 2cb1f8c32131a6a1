"""A CRF on character n-grams: the classic, no-pretraining NER baseline.

    python -m data_prep.corpora --corpus=peoples_daily_ner --output_dir=data/ner
    python -m benchmarks.crf_ner_baseline --data_dir=data/ner \
        --output_dir=data/ner_crf

Reads {train,dev,test}.txt in the CoNLL layout with `albert_tf.data.conll`
(any tag scheme; the CRF learns BIO tags), fits a linear-chain CRF
(`sklearn_crfsuite`, L-BFGS with L1 + L2 penalties) on train.txt and reports
entity precision/recall/F1, overall and per type, on the training sentences,
dev and test (`ner_data.entity_metrics`: seqeval, conlleval semantics). The
features of a token are those of the classic character-based Chinese NER
baselines: the token itself and its neighbours up to two positions away,
the bigrams inside that window, and a coarse class (digit, Latin letter,
punctuation, Han, other) of the token and its neighbours.

Writes OUTPUT_DIR/crf_results.json and OUTPUT_DIR/crf_test_predictions.txt
("token<TAB>gold<TAB>predicted", a blank line after each sentence, in the
test file's scheme: the layout run_ner writes). sklearn-crfsuite is a
benchmark/test dependency only.
"""

import json
import os
import time
import unicodedata

from absl import flags

from albert_tf.core import cli_errors
from albert_tf.data import conll, ner_data
from albert_tf.core.errors import CommandLineError, error_line

SPLITS = ("train", "dev", "test")


def token_class(token):
  """"D" digits, "L" letters (not Han), "P" punctuation/symbols, "H" Han,
  "M" anything else or a mix. Full-width forms count as their class."""
  classes = set()
  for c in token:
    if c.isdigit():
      classes.add("D")
    elif unicodedata.category(c)[0] in "PS":
      classes.add("P")
    elif "CJK" in unicodedata.name(c, ""):
      classes.add("H")
    elif c.isalpha():
      classes.add("L")
    else:
      classes.add("M")
  return classes.pop() if len(classes) == 1 else "M"


def sentence_features(tokens):
  """CRFsuite features of each token: a list of lists of "name=value"."""
  # Two padding tokens each side, so every token has a full window; "|"
  # keeps "ab|c" and "a|bc" apart when tokens are longer than a character.
  w = ["<s2>", "<s1>"] + list(tokens) + ["</s1>", "</s2>"]
  t = ["B"] + [token_class(token) for token in tokens] + ["B"]
  features = []
  for i in range(2, len(w) - 2):
    features.append([
        "bias",
        f"c0={w[i]}", f"c-1={w[i - 1]}", f"c+1={w[i + 1]}",
        f"c-2={w[i - 2]}", f"c+2={w[i + 2]}",
        f"c-2c-1={w[i - 2]}|{w[i - 1]}", f"c-1c0={w[i - 1]}|{w[i]}",
        f"c0c+1={w[i]}|{w[i + 1]}", f"c+1c+2={w[i + 1]}|{w[i + 2]}",
        f"c-1c+1={w[i - 1]}|{w[i + 1]}",
        f"t0={t[i - 1]}", f"t-1t0t+1={t[i - 2]}{t[i - 1]}{t[i]}",
    ])
  return features


def _read(data_dir, split):
  path = os.path.join(data_dir, f"{split}.txt")
  data = conll.read_conll(path)
  if not data.has_tags:
    raise ValueError(f"{path}: no tag column (the CRF needs gold tags in "
                     "train, dev and test)")
  return data


def run(data_dir, output_dir=None, max_iterations=100, c1=0.1, c2=0.1,
        max_train_sentences=0):
  """Fits the CRF and scores it; returns the results (also written when
  output_dir is given): per split the `entity_metrics` keys, plus timings."""
  import sklearn_crfsuite  # pylint: disable=g-import-not-at-top
  start = time.time()
  data = {split: _read(data_dir, split) for split in SPLITS}
  train = data["train"].sentences
  if max_train_sentences > 0:
    train = train[:max_train_sentences]
  gold = {split: [conll.to_bio(s, data[split].scheme)
                  for s in (train if split == "train" else d.sentences)]
          for split, d in data.items()}
  crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=c1, c2=c2,
                             max_iterations=max_iterations,
                             all_possible_transitions=True)
  fit_start = time.time()
  # Generators: CRFsuite copies each sentence's features as it is appended,
  # so the full corpus never sits in Python lists (about 19 M strings).
  crf.fit((sentence_features(s.tokens) for s in train), gold["train"])
  result = {"data_dir": data_dir, "c1": c1, "c2": c2,
            "max_iterations": max_iterations,
            "iterations": len(crf.training_log_.iterations),
            "train_sentences": len(train),
            "fit_seconds": round(time.time() - fit_start, 1)}
  predicted = {}
  for split in SPLITS:
    sentences = train if split == "train" else data[split].sentences
    predicted[split] = crf.predict(
        sentence_features(s.tokens) for s in sentences)
    result[split] = ner_data.entity_metrics(gold[split], predicted[split])
  result["wall_seconds"] = round(time.time() - start, 1)
  if output_dir:
    os.makedirs(output_dir, exist_ok=True)
    test = data["test"]
    ner_data.write_predictions(
        os.path.join(output_dir, "crf_test_predictions.txt"), test.sentences,
        predicted["test"], test.scheme, test.has_tags)
    with open(os.path.join(output_dir, "crf_results.json"), "w",
              encoding="utf-8") as f:
      json.dump(result, f, indent=2)
  return result


def summary_line(result):
  """"test entity F1 0.8123 (P 0.85 R 0.78; LOC 0.86 ORG 0.70 PER 0.79) ..."."""
  parts = []
  for split in ("dev", "test"):
    m = result[split]
    kinds = sorted(k[:-3] for k in m if k.endswith("_f1") and
                   k != "entity_f1")
    parts.append(f"{split} entity F1 {m['entity_f1']:.4f} (P "
                 f"{m['entity_precision']:.4f} R {m['entity_recall']:.4f}; "
                 + " ".join(f"{k} {m[k + '_f1']:.4f}" for k in kinds) + ")")
  return (f"CRF, {result['train_sentences']} train sentences, "
          f"{result['iterations']} iterations, {result['wall_seconds']} s: "
          + "; ".join(parts))


def _define_flags():
  flags.DEFINE_string("data_dir", None, "Directory with {train,dev,test}.txt "
                      "(CoNLL layout), e.g. from data_prep.corpora "
                      "--corpus=peoples_daily_ner.")
  flags.DEFINE_string("output_dir", None, "Writes crf_results.json and "
                      "crf_test_predictions.txt here (optional).")
  flags.DEFINE_integer("max_iterations", 100, "L-BFGS iterations at most.",
                       lower_bound=1)
  flags.DEFINE_float("c1", 0.1, "L1 penalty.", lower_bound=0)
  flags.DEFINE_float("c2", 0.1, "L2 penalty.", lower_bound=0)
  flags.DEFINE_integer("max_train_sentences", 0, "Train on the first N "
                       "sentences of train.txt (0: all).", lower_bound=0)


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  if not FLAGS.data_dir:
    raise CommandLineError(error_line("a required flag is missing",
                                      "--data_dir", "e.g. --data_dir=data/ner"))
  result = run(FLAGS.data_dir, FLAGS.output_dir, FLAGS.max_iterations,
               FLAGS.c1, FLAGS.c2, FLAGS.max_train_sentences)
  print(summary_line(result))


if __name__ == "__main__":
  _define_flags()
  cli_errors.run_main(main)
