"""The statistics and the report of benchmarks.learning_curves: per labelled
budget, each model's accuracy over the seeds, the significance tests, the
markdown table and the plot."""

import json
import os
import platform
import statistics

INITS = ("pretrained", "random_init")
MODELS = INITS + ("tfidf",)


# ------------------------------------------------------------------ stats
def paired_t(a, b):
  """Two-sided paired t-test p-value of a vs b; None with fewer than 2
  pairs. Differences that are all the same (to 1e-9; accuracies are counts
  over one test set, so this happens) have no variance: p = 1 when they
  are 0, else 0 (the same sign and size on every seed)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  diffs = [x - y for x, y in zip(a, b)]
  if len(diffs) < 2:
    return None
  if max(diffs) - min(diffs) < 1e-9:
    return 1.0 if abs(diffs[0]) < 1e-9 else 0.0
  return float(stats.ttest_rel(a, b).pvalue)


def mcnemar(gold, predictions_a, predictions_b):
  """(a right & b wrong, a wrong & b right, exact two-sided McNemar p)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  only_a = sum(pa == g != pb for g, pa, pb in
               zip(gold, predictions_a, predictions_b))
  only_b = sum(pb == g != pa for g, pa, pb in
               zip(gold, predictions_a, predictions_b))
  if only_a + only_b == 0:
    return only_a, only_b, 1.0
  p = stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
  return only_a, only_b, float(p)


def summarise(runs, gold, sizes, seeds, alpha=0.05):
  """Per n: mean/sd/per-seed test accuracy of each model, and the tests."""
  rows = []
  for n in sizes:
    row = {"n": n, "train_examples": runs[(n, seeds[0], "tfidf")]["n_train"]}
    for model in MODELS:
      accs = [runs[(n, s, model)]["test_accuracy"] for s in seeds]
      row[model] = {"mean": statistics.mean(accs),
                    "sd": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                    "per_seed": accs}
      if model in INITS:
        row[model]["best_steps"] = [runs[(n, s, model)]["best_step"]
                                    for s in seeds]
        row[model]["dev_accuracy"] = [runs[(n, s, model)]["dev_accuracy"]
                                      for s in seeds]
    row["steps"] = runs[(n, seeds[0], "pretrained")]["steps"]
    for other in ("random_init", "tfidf"):
      a = row["pretrained"]["per_seed"]
      b = row[other]["per_seed"]
      pooled_gold = gold * len(seeds)
      pa = sum((runs[(n, s, "pretrained")]["predictions"] for s in seeds), [])
      pb = sum((runs[(n, s, other)]["predictions"] for s in seeds), [])
      only_a, only_b, p_mcnemar = mcnemar(pooled_gold, pa, pb)
      p_t = paired_t(a, b)
      diff = statistics.mean(a) - statistics.mean(b)
      row[f"vs_{other}"] = {
          "difference": diff, "paired_t_p": p_t,
          "mcnemar_only_pretrained": only_a, "mcnemar_only_other": only_b,
          "mcnemar_p": p_mcnemar,
          "significant": p_t is not None and p_t < alpha,
          "verdict": ("above" if diff > 0 else "below")
                     if p_t is not None and p_t < alpha else "level"}
    rows.append(row)
  return rows


# ------------------------------------------------------------------ report
def cpu_line():
  """The CPU model and whether it has bf16 units (amx_bf16, avx512_bf16)."""
  cpu, cpu_flags = platform.processor() or "cpu", set()
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
          cpu_flags = set(line.split(":", 1)[1].split())
          break
  except OSError:
    pass
  units = [f for f in ("amx_bf16", "avx512_bf16") if f in cpu_flags]
  return (f"{cpu}, {os.cpu_count()} cores, bf16 units: "
          f"{', '.join(units) if units else 'none'}")


def _p(value):
  return "n/a" if value is None else f"{value:.2g}" if value < 0.01 else (
      f"{value:.2f}")


def markdown(summary):
  s = summary
  lines = [
      f"Review sentiment test accuracy ({s['test_examples']:,} test reviews) "
      f"vs labelled train reviews; mean ± sd over seeds {s['seeds']} (each "
      "seed its own stratified labelled subset, the same for all three "
      "models). Significance: paired t-test across seeds, p < "
      f"{s['alpha']} (exact McNemar on the pooled test predictions beside "
      "it).", "",
      "| labelled reviews | fine-tuning steps | TF-IDF + LR | ALBERT random "
      "init | ALBERT pretrained | pretrained − random (t p / McNemar p) | "
      "pretrained − TF-IDF (t p / McNemar p) |",
      "|---|---|---|---|---|---|---|"]
  for row in s["rows"]:
    cells = [f"{row['train_examples']:,}" + (" (all)" if not row["n"] else ""),
             str(row["steps"])]
    for model in ("tfidf", "random_init", "pretrained"):
      cells.append(f"{row[model]['mean']:.3f} ± {row[model]['sd']:.3f}")
    for other in ("random_init", "tfidf"):
      v = row[f"vs_{other}"]
      mark = {"above": " **above**", "below": " **below**",
              "level": " level"}[v["verdict"]]
      cells.append(f"{v['difference']:+.3f}{mark} ({_p(v['paired_t_p'])} / "
                   f"{_p(v['mcnemar_p'])})")
    lines.append("| " + " | ".join(cells) + " |")
  r = s["recipe"]
  lines += ["", f"Budget: pretrained checkpoint `{s['pretrained']}` "
            f"({s['pretraining']}); fine-tuning {r['epochs']} epochs of the "
            f"labelled set at batch {r['batch_size']}, clipped to "
            f"[{r['min_steps']}, {r['max_steps']}] steps, AdamW lr "
            f"{r['learning_rate']}, warmup {r['warmup_proportion']:.0%}, "
            f"seq {r['max_seq_length']}, {r['evals']} dev evals (dev as large "
            f"as train, at most {r['max_dev_examples']}), best dev checkpoint "
            f"scored. CPU: {s['cpu']}; {s['workers']} runs side by side, "
            f"{s['wall_minutes']:.1f} min for the whole table."]
  return "\n".join(lines) + "\n"


def plot(rows, path):
  """Writes a PNG of test accuracy by labelled reviews (pretrained init,
  random init, TF-IDF + LR: means over the seeds, bars from the lowest to
  the highest seed) to `path`, atomically; returns path, or None without
  matplotlib or without a size row."""
  rows = [r for r in rows if r["train_examples"]]
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  if not rows:
    return None
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4))
  sizes = [r["train_examples"] for r in rows]
  for key, label in (("pretrained", "pretrained init"),
                     ("random_init", "random init"), ("tfidf", "TF-IDF + LR")):
    if key not in rows[0]:
      continue
    means = [r[key]["mean"] for r in rows]
    spans = [(r[key]["mean"] - min(r[key]["per_seed"]),
              max(r[key]["per_seed"]) - r[key]["mean"]) for r in rows]
    ax.errorbar(sizes, means, yerr=list(zip(*spans)), marker="o",
                capsize=3, label=label)
  ax.set_xscale("log")
  ax.set_xlabel("labelled reviews")
  ax.set_ylabel("test accuracy")
  ax.set_title("review sentiment: does pretraining pay?")
  ax.legend()
  from albert_tf.training import plots  # pylint: disable=g-import-not-at-top
  return plots.save_png(fig, path)


def pretraining_note(pretrained):
  """What the checkpoint is: its config shape and step, from its files."""
  note = []
  given_as_directory = os.path.isdir(pretrained)
  if not given_as_directory:  # a checkpoint prefix
    note.append(f"fine-tuned from {os.path.basename(pretrained)}")
    pretrained = os.path.dirname(pretrained)
  config_path = os.path.join(pretrained, "albert_config.json")
  if os.path.exists(config_path):
    with open(config_path, encoding="utf-8") as f:
      c = json.load(f)
    note.append(f"H{c['hidden_size']}/L{c['num_hidden_layers']}/"
                f"I{c['intermediate_size']}/E{c['embedding_size']}, vocab "
                f"{c['vocab_size']:,}")
  results = os.path.join(pretrained, "eval_results.json")
  if os.path.exists(results):
    with open(results, encoding="utf-8") as f:
      r = json.load(f)
    if "global_step" in r:
      note.append(f"{r['global_step']} pretraining steps")
    if "masked_lm_accuracy" in r:
      note.append(f"held-out MLM accuracy {r['masked_lm_accuracy']:.3f}")
  best = os.path.join(pretrained, "best", "best.json")
  if os.path.exists(best) and given_as_directory:
    # A directory restores best/ (checkpoints.latest_checkpoint), not the
    # last step: say which weights the runs started from.
    with open(best, encoding="utf-8") as f:
      b = json.load(f)
    note.append(f"fine-tuned from its best/ checkpoint, step {b['step']} "
                f"(held-out MLM accuracy "
                f"{b.get('masked_lm_accuracy', float('nan')):.3f})")
  return ", ".join(note) or "no albert_config.json beside it"
