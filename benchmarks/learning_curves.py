r"""Learning curves: labelled reviews vs test accuracy, pretrained vs random init vs TF-IDF.

    python -m benchmarks.learning_curves \
        --data_dir=demo_output/corpus/sentiment \
        --pretrained=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --sizes=50,200,1000,0 --seeds=1,2,3

For every labelled budget n (0 = the whole train split) and seed, the same
labelled data goes to three models:
  - ALBERT fine-tuned from --pretrained (run_classifier, in-process);
  - ALBERT of the same config from random weights, same recipe and seed;
  - TF-IDF character 1-3-grams + logistic regression (the settings of
    benchmarks/tfidf_baseline.py), fitted on the same n reviews.
The n train reviews are a stratified random sample of the train split
(`sklearn.model_selection.train_test_split`, random_state = seed); the dev
set is a stratified sample of the dev split as large as the train sample
(FewCLUE's convention for few-shot sets), at most --max_dev_examples. It
only picks the ALBERT checkpoint (`Trainer._keep_if_best`); every model is
scored on the same test split (the first --max_test_examples, 0 = all).

Fine-tuning recipe (the same for both inits): steps = --epochs passes over
the n examples at --batch_size, clipped to [--min_steps, --max_steps];
--evals dev evaluations; AdamW at --learning_rate with --warmup_proportion.

Significance, pretrained vs random init and pretrained vs TF-IDF at each n:
  - paired t-test across seeds on test accuracy (`scipy.stats.ttest_rel`;
    the seeds share the labelled subset, so pairs are matched): this is the
    test the table's "significant" column uses, because it includes the
    variance of which n reviews were labelled, which dominates at small n;
  - exact McNemar test on the pooled test predictions of all seeds
    (`scipy.stats.binomtest` on the discordant pairs): test-set sampling
    only, shown beside it.
(benchmarks/learning_curves_report.py: these tests, the table and the plot.)

Writes <output>.json, <output>.md and its plot <output>.png (each via a .tmp
file and os.replace);
runs go side by side in --workers processes, one TensorFlow thread each,
and a run whose result file exists is not redone (a killed run resumes).
"""

import concurrent.futures
import json
import multiprocessing
import os
import time

from absl import app
from absl import flags

from albert_tf.core.file_io import atomic_writer
from benchmarks.learning_curves_report import (INITS, cpu_line, markdown,
                                               plot, pretraining_note,
                                               summarise)

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "results")


# ------------------------------------------------------------------ data
def read_tsv(path):
  """[(label, text)] of a sentiment TSV ("label<TAB>text")."""
  rows = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      line = line.rstrip("\n")
      if not line.strip():
        continue
      label, sep, text = line.partition("\t")
      if not sep or label not in ("0", "1"):
        raise ValueError(f"{path}:{number}: expected 'label<TAB>text' with "
                         f"label 0 or 1, got {line[:40]!r}")
      rows.append((label, text))
  return rows


def sample(rows, n, seed):
  """A stratified random sample of n rows (all rows when n is 0 or >= len)."""
  if not n or n >= len(rows):
    return list(rows)
  from sklearn.model_selection import train_test_split  # pylint: disable=g-import-not-at-top
  picked, _ = train_test_split(rows, train_size=n, random_state=seed,
                               stratify=[label for label, _ in rows])
  return picked


def write_atomic(path, text):
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with atomic_writer(path) as f:
    f.write(text)


def write_split(path, rows):
  write_atomic(path, "".join(f"{label}\t{text}\n" for label, text in rows))


def make_subsets(data_dir, work_dir, sizes, seeds, max_dev, max_test):
  """{(n, seed): subset dir} with train/dev/test.tsv; n 0 = all of train."""
  splits = {s: read_tsv(os.path.join(data_dir, f"{s}.tsv"))
            for s in ("train", "dev", "test")}
  test = splits["test"][:max_test] if max_test else splits["test"]
  subsets = {}
  for n in sizes:
    for seed in seeds:
      train = sample(splits["train"], n, seed)
      dev_n = min(len(train), max_dev) if max_dev else len(train)
      dev = sample(splits["dev"], dev_n, seed)
      out = os.path.join(work_dir, "data", f"n{n or 'all'}_seed{seed}")
      for name, rows in (("train", train), ("dev", dev), ("test", test)):
        write_split(os.path.join(out, f"{name}.tsv"), rows)
      subsets[(n, seed)] = out
  return subsets, [int(label) for label, _ in test]


# ------------------------------------------------------------------ runs
def steps_for(n_train, recipe):
  per_epoch = -(-n_train // recipe["batch_size"])
  return max(recipe["min_steps"],
             min(recipe["max_steps"], int(recipe["epochs"] * per_epoch)))


def _init_worker(threads):
  # Before TensorFlow loads in this process.
  os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
  os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def fine_tune(job):
  """One run_classifier run; returns its figures and test predictions."""
  result_path = os.path.join(job["output_dir"], "learning_curve_run.json")
  if os.path.exists(result_path):
    with open(result_path, encoding="utf-8") as f:
      done = json.load(f)
    if done["job"] == job:
      return done
  from absl import logging  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.ERROR)
  start = time.time()
  init = ({"init_checkpoint": job["pretrained"]} if job["init"] == "pretrained"
          else {"albert_config_file": job["config"]})
  result = run_classifier.run(
      task_name="sentiment", data_dir=job["data_dir"],
      output_dir=job["output_dir"], spm_model_file=job["spm_model_file"],
      max_seq_length=job["max_seq_length"],
      train_batch_size=job["batch_size"], learning_rate=job["learning_rate"],
      warmup_proportion=job["warmup_proportion"], train_step=job["steps"],
      eval_every_steps=max(1, job["steps"] // job["evals"]),
      keep_checkpoint_max=1, log_every_steps=max(1, job["steps"]),
      do_train=True, do_eval=True, do_predict=True, seed=job["seed"],
      overwrite=True, **init)
  keras.backend.clear_session()
  predictions = []
  with open(os.path.join(job["output_dir"], "test_results.tsv"),
            encoding="utf-8") as f:
    next(f)
    predictions = [int(line.split("\t")[1]) for line in f if line.strip()]
  done = {"job": job, "test_accuracy": result["test"]["accuracy"],
          "dev_accuracy": result["eval"]["accuracy"],
          "best_step": result["best_step"], "steps": job["steps"],
          "seconds": round(time.time() - start, 1),
          "predictions": predictions}
  write_atomic(result_path, json.dumps(done))
  return done


def tfidf(data_dir, ngram_max=3, c=4.0):
  """benchmarks/tfidf_baseline.py's model, returning its test predictions."""
  from benchmarks import tfidf_baseline  # pylint: disable=g-import-not-at-top
  train = read_tsv(os.path.join(data_dir, "train.tsv"))
  test = read_tsv(os.path.join(data_dir, "test.tsv"))
  model = tfidf_baseline.make_model(ngram_max, c)
  model.fit([t for _, t in train], [int(l) for l, _ in train])
  predictions = [int(p) for p in model.predict([t for _, t in test])]
  gold = [int(l) for l, _ in test]
  return {"test_accuracy": sum(p == g for p, g in zip(predictions, gold))
                           / len(gold), "predictions": predictions}


def run(data_dir, pretrained, spm_model_file, work_dir, output, sizes, seeds,
        recipe, workers=2, max_test_examples=0, albert_config_file=None,
        pretraining=None, alpha=0.05, log=print):
  """Runs every (n, seed, model); writes output.json and output.md; returns
  the summary dict."""
  start = time.time()
  for name, path in (("--data_dir", data_dir), ("--pretrained", pretrained),
                     ("--spm_model_file", spm_model_file)):
    if not (os.path.exists(path) or os.path.exists(path + ".index")):
      raise FileNotFoundError(f"{name}={path} does not exist")
  config = albert_config_file or os.path.join(pretrained, "albert_config.json")
  if not os.path.exists(config):
    raise FileNotFoundError(f"{config} does not exist: give "
                            "--albert_config_file for the random-init runs")
  subsets, gold = make_subsets(data_dir, work_dir, sizes, seeds,
                               recipe["max_dev_examples"], max_test_examples)
  runs, jobs = {}, []
  for (n, seed), subset in subsets.items():
    n_train = len(read_tsv(os.path.join(subset, "train.tsv")))
    runs[(n, seed, "tfidf")] = tfidf(subset) | {"n_train": n_train}
    for init in INITS:
      jobs.append({
          "init": init, "n": n, "seed": seed, "data_dir": subset,
          "output_dir": os.path.join(work_dir, "runs",
                                     os.path.basename(subset), init),
          "pretrained": pretrained, "config": config,
          "spm_model_file": spm_model_file,
          "steps": steps_for(n_train, recipe),
          **{k: recipe[k] for k in ("batch_size", "learning_rate",
                                    "warmup_proportion", "evals",
                                    "max_seq_length")}})
  # Longest first, so that the two workers end together.
  jobs.sort(key=lambda j: -j["steps"])
  context = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=context, initializer=_init_worker,
      initargs=(1,)) as pool:
    futures = {pool.submit(fine_tune, job): job for job in jobs}
    for future in concurrent.futures.as_completed(futures):
      job = futures[future]
      done = future.result()
      runs[(job["n"], job["seed"], job["init"])] = done
      log(f"  n={job['n'] or 'all'} seed={job['seed']} {job['init']}: test "
          f"{done['test_accuracy']:.3f}, dev {done['dev_accuracy']:.3f}, "
          f"best step {done['best_step']}/{done['steps']}, "
          f"{done['seconds']:.0f} s")
  summary = {
      "what": "review sentiment test accuracy vs labelled train reviews",
      "data_dir": data_dir, "pretrained": pretrained,
      "pretraining": pretraining or pretraining_note(pretrained),
      "sizes": sizes, "seeds": seeds, "recipe": recipe, "alpha": alpha,
      "test_examples": len(gold), "workers": workers, "cpu": cpu_line(),
      "significance": "paired t-test across seeds (scipy.stats.ttest_rel); "
                      "exact McNemar on pooled test predictions beside it",
      "rows": summarise(runs, gold, sizes, seeds, alpha),
      "wall_minutes": (time.time() - start) / 60,
      "date": time.strftime("%Y-%m-%d")}
  write_atomic(output + ".json", json.dumps(summary, indent=2))
  png = plot(summary["rows"], output + ".png")
  write_atomic(output + ".md", markdown(summary) + (
      f"\n![learning curves]({os.path.basename(png)})\n" if png else ""))
  return summary


FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("data_dir", "demo_output/corpus/sentiment",
                      "{train,dev,test}.tsv of the review sentiment task.")
  flags.DEFINE_string("pretrained", "demo_output/pretrain",
                      "Pretrained checkpoint (directory or prefix).")
  flags.DEFINE_string("albert_config_file", None, "Config of the random-init "
                      "runs; default: albert_config.json in --pretrained.")
  flags.DEFINE_string("spm_model_file", "demo_output/vocab/spm.model",
                      "SentencePiece model of the checkpoint.")
  flags.DEFINE_string("work_dir", "/tmp/learning_curves",
                      "Subsets and fine-tuning runs go here.")
  flags.DEFINE_string("output", os.path.join(RESULTS_DIR, "learning_curves"),
                      "Writes OUTPUT.json and OUTPUT.md.")
  flags.DEFINE_list("sizes", ["50", "200", "1000", "0"],
                    "Labelled train reviews per run (0 = all).")
  flags.DEFINE_list("seeds", ["1", "2", "3"], "One labelled subset each.")
  flags.DEFINE_integer("workers", 2, "Fine-tuning runs side by side.")
  flags.DEFINE_integer("max_test_examples", 0, "First N test reviews (0 = all).")
  flags.DEFINE_integer("max_dev_examples", 500, "Dev sample cap.")
  flags.DEFINE_float("epochs", 10, "Passes over the labelled reviews.")
  flags.DEFINE_integer("min_steps", 30, "Fewest fine-tuning steps.")
  flags.DEFINE_integer("max_steps", 300, "Most fine-tuning steps.")
  flags.DEFINE_integer("batch_size", 32, "Fine-tuning batch.")
  flags.DEFINE_float("learning_rate", 5e-4, "Peak AdamW learning rate.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Warmup share of the steps.")
  flags.DEFINE_integer("evals", 5, "Dev evaluations per run.")
  flags.DEFINE_integer("max_seq_length", 64, "Pieces per review.")
  flags.DEFINE_string("pretraining", None, "What the checkpoint is, for the "
                      "table's budget line (default: read from its files).")


def recipe_from_flags():
  return {k: getattr(FLAGS, k) for k in (
      "epochs", "min_steps", "max_steps", "batch_size", "learning_rate",
      "warmup_proportion", "evals", "max_seq_length", "max_dev_examples")}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  try:
    sizes = [int(s) for s in FLAGS.sizes]
    seeds = [int(s) for s in FLAGS.seeds]
  except ValueError as e:
    raise app.UsageError(f"--sizes and --seeds take integers: {e}") from None
  summary = run(FLAGS.data_dir, FLAGS.pretrained, FLAGS.spm_model_file,
                FLAGS.work_dir, FLAGS.output, sizes, seeds,
                recipe_from_flags(), FLAGS.workers, FLAGS.max_test_examples,
                FLAGS.albert_config_file, FLAGS.pretraining)
  print(markdown(summary))
  print(f"Wrote {FLAGS.output}.json and {FLAGS.output}.md")


if __name__ == "__main__":
  define_flags()
  app.run(main)
