"""The verdicts and markdown tables of benchmarks/paper_ablations (pure: no
runs, no TensorFlow)."""

import os
import statistics

from albert_tf.core.file_io import atomic_writer
from benchmarks.ablation_design import (CHANCE, CURVES, DIRECTIONS, MODEL,
                                        PAPER, SEQ)


def summarize(values):
  """{"mean", "min", "max", "n"} of per-seed values (None if there are none)."""
  if not values:
    return None
  return {"mean": statistics.fmean(values), "min": min(values),
          "max": max(values), "n": len(values)}


def verdict(ahead, behind):
  """Whether `ahead` > `behind` holds for every seed.

  "reproduces" when min(ahead) > max(behind), "reversed" when
  max(ahead) < min(behind), "unclear" when the ranges overlap, "not run"
  when a side has no value.
  """
  if not ahead or not behind:
    return "not run"
  if min(ahead) > max(behind):
    return "reproduces"
  if max(ahead) < min(behind):
    return "reversed"
  return "unclear"


def metric_values(results, variant, metric):
  """The per-seed values of one metric of one variant (seed order)."""
  runs = results.get(variant, {})
  return [runs[seed][metric] for seed in sorted(runs, key=int)
          if runs[seed].get(metric) is not None]


def fmt(summary, scale=100.0):
  """'mean (min–max)' in percent, or '—'."""
  if not summary:
    return "—"
  return (f"{summary['mean'] * scale:.1f} ({summary['min'] * scale:.1f}–"
          f"{summary['max'] * scale:.1f})")


def chance_margin(chance, pairs):
  """Two binomial standard errors of an accuracy `chance` on `pairs` pairs."""
  return 2 * (chance * (1 - chance) / pairs) ** 0.5


def chance_verdict(values, chance, margin, above=True):
  """Against the majority-class level: with above, "reproduces" when every
  seed is above chance + margin, "reversed" when every seed is below
  chance - margin; with not above, "reproduces" when no seed is above
  chance + margin, "reversed" when every seed is. Else "unclear"."""
  if not values or chance is None:
    return "not run"
  if above:
    if min(values) > chance + margin:
      return "reproduces"
    return "reversed" if max(values) < chance - margin else "unclear"
  if max(values) <= chance + margin:
    return "reproduces"
  return "reversed" if min(values) > chance + margin else "unclear"


def direction_rows(results, chance=None, pairs=None):
  """One dict per entry of DIRECTIONS with our means and the verdict.

  chance: {"sop": p, "nsp": p}, the majority-class accuracy of each held-out
  pair set; pairs: how many pairs each eval scored.
  """
  rows = []
  for table, claim, metric, ahead, behind, paper_a, paper_b in DIRECTIONS:
    a = metric_values(results, ahead, metric)
    row = {"table": table, "claim": claim, "metric": metric, "ahead": ahead,
           "behind": behind, "ours_ahead": summarize(a),
           "paper_ahead": paper_a, "paper_behind": paper_b}
    if behind == CHANCE:
      level = (chance or {}).get(metric)
      margin = chance_margin(level, pairs) if level and pairs else 0.0
      row["ours_behind"] = level
      row["margin"] = margin
      row["verdict"] = chance_verdict(a, level, margin,
                                      above="not above" not in claim)
    else:
      b = metric_values(results, behind, metric)
      row["ours_behind"] = summarize(b)
      row["verdict"] = verdict(a, b)
    rows.append(row)
  return rows


def curve_values(results, variant):
  """{step: [masked_lm_accuracy per seed]} from the runs' eval curves."""
  by_step = {}
  for seed in sorted(results.get(variant, {}), key=int):
    for step, value in results[variant][seed].get("curve", []):
      by_step.setdefault(int(step), []).append(value)
  return dict(sorted(by_step.items()))


def markdown_tables(results, params, budget_line, chance=None, pairs=None):
  """The tables of docs/ablations.md (ours beside the paper's, verdicts).

  results: {variant: {seed: {"mlm", "sop", "nsp", "curve"}}}; params:
  {variant: encoder parameters}; budget_line: one line naming the budget;
  chance: {"sop": p, "nsp": p}, the majority-class accuracy of each
  held-out pair set (the best constant answer); pairs: pairs per eval.
  """
  def cell(variant, metric):
    return fmt(summarize(metric_values(results, variant, metric)))

  lines = [budget_line, "",
           "Ours: mean (min–max) over the seeds, in %, held-out documents. "
           "Paper: ALBERT base, 125k steps × batch 4096 × seq 512.", ""]
  lines += ["### Table 5: inter-sentence loss", "",
            "| loss | MLM ours | MLM paper | NSP ours | NSP paper | SOP ours |"
            " SOP paper |", "|---|---|---|---|---|---|---|"]
  for name, variant in (("none", "loss_none"), ("NSP", "loss_nsp"),
                        ("SOP", "base")):
    paper = PAPER["table5"][name.lower()]
    lines.append(f"| {name} | {cell(variant, 'mlm')} | {paper['mlm']} | "
                 f"{cell(variant, 'nsp')} | {paper['nsp']} | "
                 f"{cell(variant, 'sop')} | {paper['sop']} |")
  if chance:
    lines.append(f"| majority class | | | {chance['nsp'] * 100:.1f} | | "
                 f"{chance['sop'] * 100:.1f} | |")
  lines += ["", "### Table 4: cross-layer sharing (E=128)", "",
            "| shared | params ours | params paper | MLM ours | SOP ours | "
            "Avg paper (downstream) |", "|---|---|---|---|---|---|"]
  for name, variant in (("all", "base"), ("attention", "share_attention"),
                        ("FFN", "share_ffn"), ("none", "share_none")):
    paper = PAPER["table4"][name.lower()]
    lines.append(f"| {name} | {_millions(params.get(variant))} | "
                 f"{paper['params']} | {cell(variant, 'mlm')} | "
                 f"{cell(variant, 'sop')} | {paper['avg']} |")
  lines += ["", "### Table 3: embedding size E (all-shared; paper H=768, ours "
            f"H={MODEL['hidden_size']})", "",
            "| E | params ours | MLM ours | SOP ours | Avg paper (downstream) |",
            "|---|---|---|---|---|"]
  for name, variant, paper_key in (("64", "e64", "64"), ("128", "base", "128"),
                                   ("256", "e256", "256")):
    lines.append(f"| {name} | {_millions(params.get(variant))} | "
                 f"{cell(variant, 'mlm')} | {cell(variant, 'sop')} | "
                 f"{PAPER['table3'][paper_key]['avg']} |")
  lines.append(f"| H | (ours: E=128 is H) | | | {PAPER['table3']['H']['avg']} "
               "(E=H=768) |")
  lines += ["", "### §4.9 / Figure 2b: dropout, held-out MLM accuracy by step",
            "", "| step | dropout 0 | dropout 0.1 |", "|---|---|---|"]
  base_curve, drop_curve = (curve_values(results, v) for v in CURVES)
  for step in sorted(set(base_curve) | set(drop_curve)):
    lines.append(f"| {step} | {fmt(summarize(base_curve.get(step, [])))} | "
                 f"{fmt(summarize(drop_curve.get(step, [])))} |")
  lines += ["", "### Directions", "",
            "| table | the paper's direction | metric | ours (ahead vs "
            "behind) | paper | verdict |", "|---|---|---|---|---|---|"]
  for row in direction_rows(results, chance, pairs):
    paper = ("—" if row["paper_ahead"] is None else
             f"{row['paper_ahead']} vs {row['paper_behind']}")
    if row["behind"] == CHANCE:
      behind = ("chance —" if row["ours_behind"] is None else
                f"chance {row['ours_behind'] * 100:.1f} ± "
                f"{row['margin'] * 100:.1f}")
    else:
      behind = fmt(row["ours_behind"])
    lines.append(
        f"| {row['table']} | {row['claim']} | {row['metric']} | "
        f"{fmt(row['ours_ahead'])} vs {behind} | {paper} | "
        f"{row['verdict']} |")
  return "\n".join(lines) + "\n"


def _millions(n):
  return "—" if n is None else f"{n / 1e6:.2f}M"


def run_times(results):
  """(minutes from the first run's start to the last one's end, list of
  each run's seconds): from the runs' `finished` stamps and seconds."""
  spans, seconds = [], []
  for runs in results.values():
    for run in runs.values():
      seconds.append(run["seconds_with_evals"])
      if run.get("finished"):
        spans.append((run["finished"] - run["seconds_with_evals"],
                      run["finished"]))
  if not spans:
    return None, seconds
  return (max(e for _, e in spans) - min(b for b, _ in spans)) / 60, seconds


def budget_line(budget, seeds, cpu, results, vocab_size):
  tokens = budget["steps"] * budget["batch"] * SEQ
  return (f"Budget: {budget['steps']} steps × batch {budget['batch']} × seq "
          f"{SEQ} ({tokens / 1e6:.2f}M tokens seen per run), LAMB lr "
          f"{budget['learning_rate']}, warmup 10%; model H="
          f"{MODEL['hidden_size']}, {MODEL['num_hidden_layers']} layers, "
          f"{MODEL['num_attention_heads']} heads, FFN "
          f"{MODEL['intermediate_size']}, vocab {vocab_size}; seeds "
          f"{', '.join(str(s) for s in seeds)}; held-out eval "
          f"{budget['eval_batches'] * budget['eval_batch']} pairs; {cpu}, "
          "2 runs side by side, 1 TF thread each, on cores shared with other "
          f"jobs; {_times(results)}.")


def _times(results):
  span, seconds = run_times(results)
  if not seconds:
    return "no runs"
  text = (f"one run (train + evals) {min(seconds) / 60:.1f}–"
          f"{max(seconds) / 60:.1f} min")
  if span is not None:
    text += f", all {len(seconds)} runs {span:.0f} min wall"
  return text


BEGIN, END = "<!-- tables -->", "<!-- /tables -->"


def write_doc(path, tables):
  """Puts the tables between the BEGIN/END markers of an existing doc (the
  prose around them stays), or writes a doc of the tables alone."""
  text = ""
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      text = f.read()
  if BEGIN in text and END in text:
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    text = f"{head}{BEGIN}\n{tables}{END}{tail}"
  else:
    text = f"{BEGIN}\n{tables}{END}\n"
  with atomic_writer(path) as f:
    f.write(text)

