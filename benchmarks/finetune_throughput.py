r"""Fine-tuning throughput: the trainer vs the former loop, and the CPU fast path.

    python -m benchmarks.finetune_throughput                 # tiny_zh, seq 128, batch 32
    python -m benchmarks.finetune_throughput --rounds=1 --window=5   # quick
    python -m benchmarks.finetune_throughput --fast_path     # plain vs fast path
    python -m benchmarks.finetune_throughput --fast_path --seeds=1 --train_step=60

Trainer vs loop. run_classifier used to train with its own `tf.function`
step fed one numpy batch per call (no strategy, no resume). It now runs
through `albert_tf.training.trainer` (Keras `fit` over a tf.data pipeline,
steps_per_execution, checkpoints, logs). This measures both on the same
model, batch and text, in one process, alternating `--rounds` times:

  trainer: run_classifier's own path (TSV -> ClassificationTask -> Trainer)
    for (windows + 1) x --window steps; examples/s of each logged window
    after the first (which holds the trace) from train_log.jsonl.
  loop: the former loop, reproduced below as the reference: same model,
    AdamW + schedule, one tf.function step per numpy batch; the same
    windows after one warm-up window.

Reported: median examples/s of each and the ratio trainer / loop.

--fast_path: `python -m albert_tf.run_classifier` on the demo's reviews
(demo_output/corpus/sentiment, `make demo`'s corpus stage; the demo's
SentencePiece model), albert_tiny_zh's shape from random weights, seq 128,
batch 32, once per --seeds and path, each run in its own process (TF's
thread pools are set once per process), the two paths taking turns:

  plain: --mixed_precision=none --length_buckets=0 --micro_batches=1
  fast:  --fast_flags (default --mixed_precision=auto --length_buckets=8
         --micro_batches=auto)
  --paths=plain,fast,bfloat16,buckets,micro,float32_fast adds the fast
  path's parts alone (float32_fast: buckets and micro-batches, what auto
  gives on a CPU without bf16 units).

Reported per run: median examples/s of the logged windows after the first
(which holds the traces), the command's wall time, dev and test accuracy
(dev: the best checkpoint's; random weights, so seeds differ a lot);
then each path's ratio to plain of the medians over every window of every
seed (and per seed, the two runs made next to each other), and its
accuracy mean and standard deviation over the seeds. Written to
--output (JSON). Speed is never asserted in tests; compare ratios from one
run only.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from albert_tf.core import features as F  # noqa: E402
from albert_tf.training import optimization  # noqa: E402
from albert_tf import run_classifier  # noqa: E402
from albert_tf.core.config import AlbertConfig  # noqa: E402
from albert_tf.modeling.models import AlbertClassifier  # noqa: E402
from albert_tf.tasks.classification import ClassificationTask  # noqa: E402
from albert_tf.data.classifier_data import get_task  # noqa: E402
from albert_tf.data.tokenization import load_tokenizer  # noqa: E402
from benchmarks.common import machine, summary  # noqa: E402

# Characters of the CJK block: one token each with a WordPiece vocabulary.
CHARS = [chr(c) for c in range(0x4E00, 0x4E00 + 4000)]


def write_data(root, num_examples, seq, seed=0):
  """A vocab.txt of CJK characters, train/dev TSVs of random reviews."""
  rng = np.random.default_rng(seed)
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + CHARS
  with open(os.path.join(root, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")
  for split, n in (("train", num_examples), ("dev", 32)):
    with open(os.path.join(root, f"{split}.tsv"), "w", encoding="utf-8") as f:
      for i in range(n):
        text = "".join(rng.choice(CHARS, size=seq))  # truncated to seq - 2
        f.write(f"{i % 2}\t{text}\n")


def trainer_windows(root, config_file, batch, window, windows, seed):
  """examples/s of each logged window after the first, via run_classifier."""
  out = tempfile.mkdtemp(dir=root)
  run_classifier.run(
      task_name="sentiment", data_dir=root, output_dir=out,
      vocab_file=os.path.join(root, "vocab.txt"),
      albert_config_file=config_file, max_seq_length=128,
      train_batch_size=batch, learning_rate=1e-4, classifier_dropout=0.1,
      train_step=window * (windows + 1),
      eval_every_steps=window * (windows + 1), log_every_steps=window,
      iterations_per_loop=window, do_train=True, do_eval=False, seed=seed)
  with open(os.path.join(out, "train_log.jsonl"), encoding="utf-8") as f:
    rates = [json.loads(line)["examples_per_second"] for line in f]
  shutil.rmtree(out)
  return rates[1:]


def loop_windows(root, config, batch, window, windows, seed):
  """The former run_classifier loop: one tf.function call per numpy batch."""
  spec = get_task("sentiment")
  tokenizer = load_tokenizer(vocab_file=os.path.join(root, "vocab.txt"))
  task = ClassificationTask(spec, tokenizer, root, 128)
  train = task.load_split("train")[1]
  model = AlbertClassifier(config, 2, classifier_dropout=0.1)
  steps = window * (windows + 1)
  schedule = optimization.WarmupPolynomialDecay(1e-4, steps, steps // 10)
  optimizer = optimization.create_optimizer("adamw", schedule)
  optimization.exclude_layer_norm_and_bias(optimizer, model)
  optimizer.build(model.trainable_variables)
  batch_spec = {k: tf.TensorSpec([None, None], tf.int32)
                for k in F.ENCODER_INPUTS}

  @tf.function(input_signature=[batch_spec, tf.TensorSpec([None], tf.int32)],
               autograph=False)
  def train_step(features, labels):
    with tf.GradientTape() as tape:
      logits = model(features, training=True)["logits"]
      loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply(grads, model.trainable_variables)
    return loss

  rng = np.random.default_rng(seed)
  n = len(train[F.LABEL_IDS])
  order = np.concatenate([rng.permutation(n) for _ in range(
      -(-steps * batch // n))])
  rates = []
  for w in range(windows + 1):
    start = time.perf_counter()
    for s in range(w * window, (w + 1) * window):
      idx = order[s * batch:(s + 1) * batch]
      loss = train_step({k: train[k][idx] for k in F.ENCODER_INPUTS},
                        train[F.LABEL_IDS][idx])
    float(loss)
    if w:  # the first window holds the trace
      rates.append(window * batch / (time.perf_counter() - start))
  return rates


PLAIN = "--mixed_precision=none --length_buckets=0 --micro_batches=1"
FAST = "--mixed_precision=auto --length_buckets=8 --micro_batches=auto"
# --paths: the fast path's parts alone (what each brings, and what auto
# gives on a CPU without bf16 units: float32_fast).
PARTS = {
    "bfloat16": "--mixed_precision=auto --length_buckets=0 --micro_batches=1",
    "buckets": "--mixed_precision=none --length_buckets=8 --micro_batches=1",
    "micro": "--mixed_precision=none --length_buckets=0 --micro_batches=auto",
    "float32_fast": "--mixed_precision=none --length_buckets=8 "
                    "--micro_batches=auto"}


def _jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def classifier_run(name, flags, seed, args, work):
  """One run_classifier command in its own process; its figures."""
  out = os.path.join(work, f"{name}_{seed}")
  shutil.rmtree(out, ignore_errors=True)
  command = [
      sys.executable, "-m", "albert_tf.run_classifier", "--task_name=sentiment",
      f"--data_dir={os.path.abspath(args.data_dir)}",
      f"--spm_model_file={os.path.abspath(args.spm_model_file)}",
      f"--preset={args.preset}", "--max_seq_length=128",
      f"--train_batch_size={args.batch}", "--eval_batch_size=64",
      f"--learning_rate={args.learning_rate}",
      f"--train_step={args.train_step}", f"--log_every_steps={args.window}",
      f"--iterations_per_loop={args.window}", f"--seed={seed}",
      "--do_train", "--do_eval", "--do_predict", "--nobaseline",
      f"--output_dir={out}", *flags]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=os.path.dirname(os.path.dirname(
                 os.path.abspath(__file__))))
  start = time.perf_counter()
  with open(out + ".log", "w", encoding="utf-8") as log:
    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT,
                   env=env)
  wall = time.perf_counter() - start
  windows = [r["examples_per_second"] for r in
             _jsonl(os.path.join(out, "train_log.jsonl"))][1:]
  with open(os.path.join(out, "eval_results.json"), encoding="utf-8") as f:
    results = json.load(f)
  with open(out + ".log", encoding="utf-8") as f:
    said = [line.strip() for line in f if "--mixed_precision=auto" in line
            or "--micro_batches=" in line]
  return {"seed": seed, "flags": flags, "wall_seconds": round(wall, 1),
          "examples_per_second": round(statistics.median(windows), 1),
          "windows": windows, "dev_accuracy": results["accuracy"],
          "test_accuracy": results["test_accuracy"],
          "load_average": os.getloadavg(), "said": said}


def fast_path_main(args):
  """--paths (plain and fast by default), --seeds runs each, taking turns
  (see the module docstring)."""
  if not os.path.exists(os.path.join(args.data_dir, "train.tsv")):
    sys.exit(f"error: --data_dir={args.data_dir} has no train.tsv: run "
             "`make demo` first (its corpus stage)")
  flags = {"plain": PLAIN, "fast": args.fast_flags, **PARTS}
  names = args.paths.split(",")
  unknown = [n for n in names if n not in flags]
  if unknown:
    sys.exit(f"error: --paths: unknown {unknown}; known: {sorted(flags)}")
  work = tempfile.mkdtemp(prefix="finetune_fast_path_")
  runs = {name: [] for name in names}
  try:
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
      # Each seed starts with another path: load drifting over the run
      # hits them alike.
      for name in names[i % len(names):] + names[:i % len(names)]:
        r = classifier_run(name, flags[name].split(), seed, args, work)
        runs[name].append(r)
        print(f"{name:12s} seed {seed}: {r['examples_per_second']:6.1f} "
              f"examples/s, wall {r['wall_seconds']:6.1f} s, dev "
              f"{r['dev_accuracy']:.4f}, test {r['test_accuracy']:.4f}, "
              f"load {r['load_average'][0]:.1f}", flush=True)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  with open("/proc/cpuinfo", encoding="utf-8") as f:
    words = next((line.split() for line in f if line.startswith("flags")),
                 [])
  results = {"machine": machine(), "bf16_units": [
      u for u in ("amx_bf16", "avx512_bf16") if u in words],
             "preset": args.preset, "seq": 128, "batch": args.batch,
             "train_step": args.train_step,
             "learning_rate": args.learning_rate, "data_dir": args.data_dir,
             "flags": {n: flags[n] for n in names}, "runs": runs,
             "paths": {}}
  sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
  for name, rs in runs.items():
    windows = [w for r in rs for w in r["windows"]]
    dev = [r["dev_accuracy"] for r in rs]
    test = [r["test_accuracy"] for r in rs]
    results["paths"][name] = {
        "examples_per_second": round(statistics.median(windows), 1),
        "spread": round(summary(windows)[1], 3),
        "wall_seconds": [r["wall_seconds"] for r in rs],
        "dev_accuracy_mean": round(statistics.mean(dev), 4),
        "dev_accuracy_sd": round(sd(dev), 4),
        "test_accuracy_mean": round(statistics.mean(test), 4),
        "test_accuracy_sd": round(sd(test), 4)}
    if "plain" in runs and name != "plain":
      results["paths"][name]["ratio_vs_plain"] = round(
          results["paths"][name]["examples_per_second"]
          / results["paths"]["plain"]["examples_per_second"], 2)
      # Same seed, run next to each other.
      results["paths"][name]["ratio_vs_plain_per_seed"] = [
          round(r["examples_per_second"] / p["examples_per_second"], 2)
          for p, r in zip(runs["plain"], rs)]
  print(f"{results['machine']}; bf16 units: "
        f"{', '.join(results['bf16_units']) or 'none'}")
  print(f"{args.preset}, seq 128, batch {args.batch}, {args.train_step} "
        f"steps, lr {args.learning_rate:g}, seeds {args.seeds}")
  for name, p in results["paths"].items():
    ratio = (f", {p['ratio_vs_plain']:.2f}x plain (per seed "
             f"{p['ratio_vs_plain_per_seed']})" if "ratio_vs_plain" in p
             else "")
    print(f"  {name:12s} {p['examples_per_second']:7.1f} examples/s (spread "
          f"{p['spread']:.0%}){ratio}, dev {p['dev_accuracy_mean']:.4f} ± "
          f"{p['dev_accuracy_sd']:.4f}, test {p['test_accuracy_mean']:.4f} "
          f"± {p['test_accuracy_sd']:.4f}  [{flags[name]}]")
  if args.output:
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)
    os.replace(args.output + ".tmp", args.output)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--preset", default="albert_tiny_zh")
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--window", type=int, default=10,
                      help="steps per timed window")
  parser.add_argument("--windows", type=int, default=3,
                      help="timed windows per round (after one warm-up)")
  parser.add_argument("--rounds", type=int, default=2,
                      help="alternating rounds of trainer and loop")
  parser.add_argument("--output", default=None, help="JSON results file")
  parser.add_argument("--fast_path", action="store_true",
                      help="plain vs the CPU fast path on the demo's reviews")
  parser.add_argument("--data_dir", default="demo_output/corpus/sentiment")
  parser.add_argument("--spm_model_file",
                      default="demo_output/vocab/spm.model")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--train_step", type=int, default=300)
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--fast_flags", default=FAST)
  parser.add_argument("--paths", default="plain,fast",
                      help="comma-separated: plain, fast, and the fast "
                      f"path's parts alone: {', '.join(PARTS)}")
  args = parser.parse_args()
  if args.fast_path:
    fast_path_main(args)
    return

  root = tempfile.mkdtemp(prefix="finetune_bench_")
  try:
    write_data(root, args.batch * args.window * 2, 128)
    config = AlbertConfig.from_preset(args.preset).replace(
        vocab_size=5 + len(CHARS))
    config_file = os.path.join(root, "albert_config.json")
    config.to_json_file(config_file)
    rates = {"trainer": [], "loop": []}
    for r in range(args.rounds):
      rates["trainer"] += trainer_windows(root, config_file, args.batch,
                                          args.window, args.windows, seed=r)
      rates["loop"] += loop_windows(root, config, args.batch, args.window,
                                    args.windows, seed=r)
  finally:
    shutil.rmtree(root, ignore_errors=True)
  results = {"machine": machine(), "preset": args.preset, "seq": 128,
             "batch": args.batch}
  for name, values in rates.items():
    med, spread = summary(values)
    results[name] = {"examples_per_second": med, "spread": spread,
                     "windows": values}
  results["ratio_trainer_vs_loop"] = (results["trainer"]["examples_per_second"]
                                      / results["loop"]["examples_per_second"])
  print(f"{results['machine']}\n{args.preset}, seq 128, batch {args.batch}, "
        f"{args.rounds} rounds x {args.windows} windows of {args.window} steps")
  for name in ("trainer", "loop"):
    print(f"  {name:8s} {results[name]['examples_per_second']:7.2f} examples/s "
          f"(spread {results[name]['spread']:.0%})")
  print(f"  trainer / loop: {results['ratio_trainer_vs_loop']:.2f}x")
  if args.output:
    with open(args.output, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  main()
