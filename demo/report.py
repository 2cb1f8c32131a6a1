"""demo_output/report/report.md and its PNG plots, from the stages' own logs."""

import json
import os


def _jsonl(path):
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _plot_pretraining(demo, out):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  train = _jsonl(demo.path("pretrain", "train_log.jsonl"))
  evals = _jsonl(demo.path("pretrain", "eval_log.jsonl"))
  if not train:
    return None
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
  steps = [r["step"] for r in train]
  for key in ("loss", "masked_lm_loss", "sentence_order_loss"):
    if key in train[0]:
      ax1.plot(steps, [r[key] for r in train], label=f"train {key}")
  ax1.set_xlabel("step")
  ax1.set_title("pretraining loss")
  ax1.legend()
  source = evals if evals else train
  for key in ("masked_lm_accuracy", "sentence_order_accuracy"):
    if key in source[0]:
      ax2.plot([r.get("step", r.get("global_step")) for r in source],
               [r[key] for r in source], marker="o" if evals else None,
               label=("held-out " if evals else "train ") + key)
  ax2.set_xlabel("step")
  ax2.set_ylim(0, 1)
  ax2.set_title("MLM / SOP accuracy")
  ax2.legend()
  fig.tight_layout()
  path = os.path.join(out, "pretraining.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def minutes_by_step(run_dir):
  """{step: minutes since the command started} of a pretraining run, from
  the times in its train_log.jsonl; {} without them. A budgeted run's plan
  says how far into its budget it was when its first timed step ended;
  otherwise the first logged step counts from 0."""
  train = [r for r in _jsonl(os.path.join(run_dir, "train_log.jsonl"))
           if "time" in r]
  if not train:
    return {}
  offset = 0.0
  fingerprint = os.path.join(run_dir, "run_fingerprint.json")
  if os.path.exists(fingerprint):
    with open(fingerprint, encoding="utf-8") as f:
      plan = json.load(f).get("budget_plan")
    if plan:  # the time at the plan, from the first logged step back
      offset = plan["planned_after_seconds"] + (
          train[0]["step"] - plan["probe_steps"]) * plan["seconds_per_step"]
  start = train[0]["time"] - offset
  return {r["step"]: (r["time"] - start) / 60 for r in train}


def _plot_mlm_minutes(demo, out):
  """Held-out MLM accuracy by minutes of the pretraining command, beside
  the most-frequent-piece baseline."""
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  run_dir = demo.path("pretrain")
  import numpy as np  # pylint: disable=g-import-not-at-top
  minutes = minutes_by_step(run_dir)
  evals = {r["global_step"]: r
           for r in _jsonl(os.path.join(run_dir, "eval_log.jsonl"))}
  evals = [evals[step] for step in sorted(evals)]
  if len(evals) < 2 or len(minutes) < 2:
    return None
  # Evals fall between the logged steps: their minutes by interpolation,
  # at the ends by the logged rate (step 0: before any step, about 0).
  steps = sorted(minutes)
  rate = (steps[-1] - steps[0]) / (minutes[steps[-1]] - minutes[steps[0]])
  steps = [steps[0] - minutes[steps[0]] * rate] + steps + [steps[-1] + rate]
  times = [0.0] + [minutes[k] for k in steps[1:-1]] + [
      minutes[steps[-2]] + 1.0]
  fig, ax = plt.subplots(figsize=(6, 4))
  x = [max(0.0, float(np.interp(r["global_step"], steps, times,
                                right=times[-2] + (r["global_step"] -
                                                   steps[-2]) / rate)))
       for r in evals]
  ax.plot(x, [r["masked_lm_accuracy"] for r in evals], marker="o",
          label="held-out MLM accuracy")
  if "masked_lm_accuracy_baseline" in evals[-1]:
    ax.axhline(evals[-1]["masked_lm_accuracy_baseline"], color="gray",
               linestyle="--", label="most frequent masked piece")
  ax.set_xlabel("minutes since the command started (2-core CPU)")
  ax.set_ylim(bottom=0)
  ax.set_title("pretraining: held-out masked LM accuracy")
  ax.legend()
  fig.tight_layout()
  path = os.path.join(out, "mlm_minutes.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def _plot_learning_curves(demo, out):
  """Test accuracy by labelled reviews (benchmarks.learning_curves.plot),
  from curves/learning_curves.json."""
  from benchmarks import learning_curves  # pylint: disable=g-import-not-at-top
  data = demo.path("curves", "learning_curves.json")
  if not os.path.exists(data):
    return None
  with open(data, encoding="utf-8") as f:
    rows = json.load(f)["rows"]
  return learning_curves.plot(rows, os.path.join(out, "learning_curves.png"))


def _plot_fine_tuning_curves(demo, out, stage, metric, label, baseline,
                             baseline_label, title, filename):
  """Dev `metric` by step for both inits of a stage; the baseline's test
  figure (demo.figures[stage][baseline]["test_" + metric]) as a line
  (`albert_tf.training.plots.plot_panels`, as a fine-tuning run's curves.png)."""
  from albert_tf.training import plots  # pylint: disable=g-import-not-at-top
  series = []
  for run in ("pretrained", "random_init"):
    rows = [r for r in _jsonl(demo.path(stage, run, "eval_log.jsonl"))
            if metric in r]
    if rows:
      series.append((f"dev {label}, {run.replace('_', ' ')}",
                     [r["global_step"] for r in rows],
                     [r[metric] for r in rows]))
  if not series:
    return None
  reference = demo.figures.get(stage, {}).get(baseline, {})
  lines = ([(f"{baseline_label} (test)", reference[f"test_{metric}"])]
           if f"test_{metric}" in reference else [])
  return plots.plot_panels(os.path.join(out, filename), [
      {"title": title, "series": series, "lines": lines}])


def _plot_albert_vs_bert(results, out):
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  names = list(results)
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
  ax1.bar(names, [results[n]["params"] / 1e6 for n in names], color="#4C72B0")
  ax1.set_ylabel("parameters (M)")
  ax1.set_title("encoder parameters")
  ax2.bar(names, [results[n]["seq_per_s"] for n in names], color="#DD8452")
  ax2.set_ylabel("sequences / s (seq 128, float32)")
  ax2.set_title("CPU inference throughput")
  for ax in (ax1, ax2):
    ax.tick_params(axis="x", rotation=15)
  fig.tight_layout()
  path = os.path.join(out, "albert_vs_bert.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


# What the stage table shows (suffixes of the flattened figure names).
KEY_FIGURES = {
    "corpus": ("train.txt", "heldout.txt", "sentences", "sentiment_train",
               "sentiment_dev", "sentiment_test"),
    "tfrecords": ("train.instances", "reviews.instances", "train.masked_lm_rate",
                  "train.next_sentence_label_1_fraction", "heldout.instances",
                  "documents.used"),
    "pretrain": ("masked_lm_accuracy", "sentence_order_accuracy", "global_step"),
    "eval": ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
             "sentence_order_loss"),
    "finetune": ("pretrained.test_accuracy", "random_init.test_accuracy",
                 "tfidf.test_accuracy", "pretrained.accuracy",
                 "random_init.accuracy"),
    "curves": (".pretrained", ".random_init", ".tfidf", ".vs_random_init",
               ".vs_random_init_p"),
    "ner": ("pretrained.test_entity_f1", "random_init.test_entity_f1",
            "crf.test_entity_f1", "pretrained.entity_f1",
            "random_init.entity_f1"),
    "reading": ("pretrained.span_test_exact_match",
                "random_init.span_test_exact_match",
                "span_em_most_frequent", "pretrained.choice_test_accuracy",
                "random_init.choice_test_accuracy",
                "mc_accuracy_most_frequent", "mc_accuracy_chance"),
}


def _fmt(value):
  if isinstance(value, float):
    return f"{value:.4f}" if abs(value) < 10 else f"{value:,.1f}"
  if isinstance(value, int):
    return f"{value:,}"
  return str(value)


def flatten_figures(prefix, value, rows):
  """Appends (dotted name, scalar) for every scalar in nested dict `value`."""
  if isinstance(value, dict):
    for key, inner in value.items():
      flatten_figures(f"{prefix}.{key}" if prefix else key, inner, rows)
  elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
    rows.append((prefix, value))


def _sizes(rows, verdict, key):
  return ", ".join(f"{r['train_examples']:,}" for r in rows
                   if r[key]["verdict"] == verdict) or "none"


def learning_curve_section(curves_dir):
  """The learning-curve table (curves/learning_curves.md) and, from its
  JSON, where pretraining is significantly above, level with or below
  random init and TF-IDF; [] when the stage did not run."""
  md = os.path.join(curves_dir, "learning_curves.md")
  data = os.path.join(curves_dir, "learning_curves.json")
  if not (os.path.exists(md) and os.path.exists(data)):
    return []
  with open(md, encoding="utf-8") as f:
    table = f.read().strip()
  with open(data, encoding="utf-8") as f:
    summary = json.load(f)
  rows = summary["rows"]
  why = []
  if any(r["vs_tfidf"]["verdict"] != "above" for r in rows):
    why = [
        "Where ALBERT is not above TF-IDF + LR, the reason is the budget: "
        f"the encoder ({summary['pretraining']}) has learnt little beyond "
        "which pieces are frequent (docs/demo_report_full.md, \"Why\"), so "
        "fine-tuning must learn the sentiment words from the labelled "
        "reviews alone, which TF-IDF + LR reads off directly.", ""]
  return [
      "## Does pretraining pay? Labelled reviews vs test accuracy", "",
      table, "",
      "Pretrained init vs random init (same config, recipe and labelled "
      f"subsets), by labelled reviews: significantly above at "
      f"{_sizes(rows, 'above', 'vs_random_init')}; level at "
      f"{_sizes(rows, 'level', 'vs_random_init')}; significantly below at "
      f"{_sizes(rows, 'below', 'vs_random_init')}. Against TF-IDF + LR on "
      f"the same reviews: above at {_sizes(rows, 'above', 'vs_tfidf')}; level "
      f"at {_sizes(rows, 'level', 'vs_tfidf')}; below at "
      f"{_sizes(rows, 'below', 'vs_tfidf')}.", ""] + why


def write_report(demo, out):
  """Writes report.md + plots into `out`; returns the headline figures."""
  from benchmarks.albert_vs_bert import compare  # pylint: disable=g-import-not-at-top
  from benchmarks.common import machine  # pylint: disable=g-import-not-at-top
  plots = [
      _plot_pretraining(demo, out),
      _plot_mlm_minutes(demo, out),
      _plot_learning_curves(demo, out),
      _plot_fine_tuning_curves(demo, out, "finetune", "accuracy", "accuracy",
                               "tfidf", "TF-IDF + LR",
                               "fine-tuning on review sentiment",
                               "finetuning.png"),
      _plot_fine_tuning_curves(demo, out, "ner", "entity_f1", "entity F1",
                               "crf", "CRF, char n-grams",
                               "People's Daily NER (PER/LOC/ORG)", "ner.png")]
  bench = compare(["albert_tiny_zh", "albert_base_v2", "bert_base"],
                  batch_size=demo.budget["bench_batch"],
                  repetitions=demo.budget["bench_repetitions"])
  plots.append(_plot_albert_vs_bert(bench, out))
  speedup = bench["albert_tiny_zh"]["seq_per_s"] / bench["bert_base"]["seq_per_s"]

  lines = [f"# ALBERT demo report ({demo.mode})", "",
           f"Machine: {machine()}", ""]
  lines += learning_curve_section(demo.path("curves"))
  times = {}
  for name, _ in demo.STAGES:
    marker = demo.path(name, "_STAGE_DONE.json")
    if os.path.exists(marker):
      with open(marker, encoding="utf-8") as f:
        times[name] = json.load(f)["seconds"]
  lines += ["## Stages", "", "| stage | seconds | key figures |", "|---|---|---|"]
  for name, title in demo.STAGES[:-1]:
    rows = []
    flatten_figures("", demo.figures.get(name, {}), rows)
    keys = KEY_FIGURES.get(name)
    if keys:
      rows = [(k, v) for k, v in rows if any(k.endswith(key) for key in keys)]
    shown = "; ".join(f"{k} = {_fmt(v)}" for k, v in rows[:12])
    lines.append(f"| {name}: {title} | {_fmt(times.get(name, 0.0))} | {shown} |")
  lines += ["", "## albert_tiny_zh vs albert_base_v2 vs bert_base (this implementation)",
            "", "| model | parameters | sequences/s | spread |", "|---|---|---|---|"]
  for name, r in bench.items():
    lines.append(f"| {name} | {r['params']:,} | {r['seq_per_s']:.1f} | {r['spread']:.0%} |")
  lines += ["", f"albert_tiny_zh is {speedup:.1f}x faster than bert_base here "
            "(the albert_tiny release claims about 10x).", "", "## Plots", ""]
  for path in plots:
    if path:
      lines.append(f"![{os.path.basename(path)}]({os.path.basename(path)})")
  path = os.path.join(out, "report.md")
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  os.replace(path + ".tmp", path)
  return {"tiny_vs_bert_base_speedup": round(speedup, 2),
          "plots": [os.path.basename(p) for p in plots if p]}
