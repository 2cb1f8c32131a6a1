"""PNG plots of a run's curves; matplotlib is optional (the demo extra).

`plot_panels` draws side-by-side panels of lines against steps with
horizontal reference lines (baselines): the one helper behind a
fine-tuning run's curves.png (`finetune_curves`) and the demo report's
fine-tuning plots (demo/report.py).
"""

import os
from typing import Dict, Optional, Sequence

from absl import logging

CURVES_FILE = "curves.png"


def plot_panels(path: str, panels: Sequence[Dict], size=(6, 4)) -> str:
  """Writes a PNG of `panels` side by side, atomically; returns path.

  Each panel: {"title", "xlabel", "ylabel" (optional), "series": [(label,
  xs, ys)], "lines": [(label, y)] (horizontal, dashed), "ylim": (low,
  high) or None}.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(panels), squeeze=False,
                           figsize=(size[0] * len(panels), size[1]))
  styles = ("--", ":", "-.")
  for ax, panel in zip(axes[0], panels):
    for label, xs, ys in panel.get("series", ()):
      ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3,
              label=label)
    for n, (label, y) in enumerate(panel.get("lines", ())):
      ax.axhline(y, color="gray", linestyle=styles[n % len(styles)],
                 label=label)
    ax.set_xlabel(panel.get("xlabel", "step"))
    if panel.get("ylabel"):
      ax.set_ylabel(panel["ylabel"])
    if panel.get("ylim"):
      ax.set_ylim(*panel["ylim"])
    ax.set_title(panel.get("title", ""))
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize="small")
  return save_png(fig, path)


def save_png(fig, path: str) -> str:
  """Writes a matplotlib figure as a PNG at 110 dpi, atomically, and closes
  it; returns path. The one writer of the project's plots."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  from albert_tf.core.file_io import atomic_writer  # pylint: disable=g-import-not-at-top
  fig.tight_layout()
  try:
    with atomic_writer(path, "wb") as f:
      fig.savefig(f, format="png", dpi=110)
  finally:
    plt.close(fig)
  return path


def finetune_curves(output_dir: str, metric: str, results: Dict
                    ) -> Optional[str]:
  """output_dir/curves.png: train loss and the dev `metric` against steps,
  the baselines of `results` (eval_results.json) as lines. None, with one
  line, when matplotlib is missing or the logs hold nothing to draw."""
  from albert_tf.training import callbacks  # pylint: disable=g-import-not-at-top
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    missing = ("matplotlib is not installed: no curves.png (pip install "
               "matplotlib, or albert_tf[demo]; --noplots says nothing)")
    logging.info("%s", missing)
    print(missing)
    return None
  train = [r for r in callbacks.read_jsonl(
      os.path.join(output_dir, callbacks.TRAIN_LOG)) if "loss" in r]
  evals = [r for r in callbacks.read_jsonl(
      os.path.join(output_dir, callbacks.EVAL_LOG)) if metric in r]
  if not train and not evals:
    return None
  if evals:  # the metric under its own name (classification's eval_metric
    # is accuracy's alias, CoLA's mcc's)
    last = evals[-1]
    metric = next((k for k in ("mcc", "accuracy", "f1", "entity_f1")
                   if k != metric and last.get(k) == last[metric]), metric)
  panels = [{"title": "train loss", "series": [
      ("train loss", [r["step"] for r in train], [r["loss"] for r in train])]},
            {"title": f"dev {metric}", "series": [
                (f"dev {metric}", [r["global_step"] for r in evals],
                 [r[metric] for r in evals])],
             # eval_results.json's baseline_<name>_<metric>
             "lines": [(f"{k[len('baseline_'):-len(metric) - 1]} (dev)",
                        float(v)) for k, v in results.items()
                       if k.startswith("baseline_")
                       and k.endswith(f"_{metric}")
                       and isinstance(v, (int, float))]}]
  path = plot_panels(os.path.join(output_dir, CURVES_FILE), panels)
  logging.info("%s: train loss and dev %s against steps", path, metric)
  return path
