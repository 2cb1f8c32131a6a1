r"""Loss / accuracy curves of a pretraining run, as a PNG, from its logs.

    python -m albert_tf.plot_training demo_output/pretrain [--output curves.png]

Reads train_log.jsonl (and eval_log.jsonl when present) written by
run_pretraining into that directory.
"""

import argparse
import json
import os


def _read(path):
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def plot(run_dir, output=None):
  """Writes the PNG (default run_dir/training_curves.png); returns its path."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  train = _read(os.path.join(run_dir, "train_log.jsonl"))
  evals = _read(os.path.join(run_dir, "eval_log.jsonl"))
  if not train and not evals:
    raise FileNotFoundError(f"No train_log.jsonl/eval_log.jsonl in {run_dir}")
  fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
  for log, style, tag in ((train, "-", "train"), (evals, "o--", "eval")):
    if not log:
      continue
    steps = [r["step"] if "step" in r else r["global_step"] for r in log]
    for key in ("loss", "masked_lm_loss", "sentence_order_loss"):
      if key in log[0]:
        ax_loss.plot(steps, [r[key] for r in log], style, label=f"{tag} {key}")
    for key in ("masked_lm_accuracy", "sentence_order_accuracy"):
      if key in log[0]:
        ax_acc.plot(steps, [r[key] for r in log], style, label=f"{tag} {key}")
  ax_loss.set(xlabel="step", ylabel="loss", title="loss")
  ax_acc.set(xlabel="step", ylabel="accuracy", title="accuracy", ylim=(0, 1))
  for ax in (ax_loss, ax_acc):
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.tight_layout()
  output = output or os.path.join(run_dir, "training_curves.png")
  fig.savefig(output, dpi=110)
  plt.close(fig)
  return output


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("run_dir")
  parser.add_argument("--output", default=None)
  args = parser.parse_args()
  print(plot(args.run_dir, args.output))


if __name__ == "__main__":
  main()
