r"""Fine-tuning step throughput: the trainer (Keras fit) vs the former hand-written loop.

    python -m benchmarks.finetune_throughput                 # tiny_zh, seq 128, batch 32
    python -m benchmarks.finetune_throughput --rounds=1 --window=5   # quick

run_classifier used to train with its own `tf.function` step fed one numpy
batch per call (no strategy, no resume). It now runs through
`albert_tf.training.trainer` (Keras `fit` over a tf.data pipeline, steps_per_execution,
checkpoints, logs). This measures both on the same model, batch and text,
in one process, alternating `--rounds` times:

  trainer: run_classifier's own path (TSV -> ClassificationTask -> Trainer)
    for (windows + 1) x --window steps; examples/s of each logged window
    after the first (which holds the trace) from train_log.jsonl.
  loop: the former loop, reproduced below as the reference: same model,
    AdamW + schedule, one tf.function step per numpy batch; the same
    windows after one warm-up window.

Reported: median examples/s of each and the ratio trainer / loop. Speed is
never asserted in tests; compare ratios from one run only.
"""

import argparse
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from albert_tf import features as F  # noqa: E402
from albert_tf.training import optimization  # noqa: E402
from albert_tf import run_classifier  # noqa: E402
from albert_tf.config import AlbertConfig  # noqa: E402
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
  args = parser.parse_args()

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
