"""The analysis and the markdown report of benchmarks/long_parity.py."""

import json
import re

import numpy as np

from benchmarks.long_parity_train import EVAL_KEYS
from benchmarks.long_parity_train import TRAIN_KEYS

SHOWN = (("masked_lm_accuracy", "held-out MLM accuracy", 4),
         ("masked_lm_loss", "held-out MLM loss", 4),
         ("sentence_order_accuracy", "held-out SOP accuracy", 4))
THRESHOLDS = (1e-6, 1e-4, 1e-2, 1e-1)
# Held-out differences below this (relative to max(1, |value|)) count as
# none: ours accumulates its eval means in float32 Keras metrics, the peer
# in float64 sums (one masked token of the held-out set is 5.6e-5).
EQUAL = 1e-5


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.abs(a - b) / np.maximum(np.abs(b), 1e-30)


def first_over(values, threshold):
  over = np.nonzero(np.asarray(values) > threshold)[0]
  return int(over[0]) if len(over) else None


def analyse(result):
  """Adds per-step differences, eval agreement and the resume check."""
  args = result["args"]
  seeds = result["seeds"]
  for s in seeds:
    ours, hf = s["ours"]["rows"], s["hf"]["rows"]
    s["loss_rel_diff"] = _rel(ours["loss"], hf["loss"]).tolist()
    s["masked_lm_loss_rel_diff"] = _rel(ours["masked_lm_loss"],
                                        hf["masked_lm_loss"]).tolist()
    s["sentence_order_loss_rel_diff"] = _rel(
        ours["sentence_order_loss"], hf["sentence_order_loss"]).tolist()
    s["max_lr_diff"] = float(np.max(np.abs(
        np.asarray(s["ours"]["lr"]) - np.asarray(s["hf"]["lr"]))))
    s["first_step_over"] = {f"{t:g}": first_over(s["loss_rel_diff"], t)
                            for t in THRESHOLDS}
    if s.get("hf_sdpa"):
      s["floor_loss_rel_diff"] = _rel(s["hf_sdpa"]["rows"]["loss"],
                                      hf["loss"]).tolist()
      s["floor_first_step_over"] = {
          f"{t:g}": first_over(s["floor_loss_rel_diff"], t)
          for t in THRESHOLDS}
    windows = []
    every = args["eval_every"]
    for start in range(0, args["steps"], every):
      part = slice(start, start + every)
      window = {"steps": [start, min(start + every, args["steps"])],
                "rel_diff_median": float(np.median(
                    s["loss_rel_diff"][part])),
                "rel_diff_max": float(np.max(s["loss_rel_diff"][part])),
                "loss_ours": float(np.mean(ours["loss"][part])),
                "loss_hf": float(np.mean(hf["loss"][part]))}
      if s.get("hf_sdpa"):
        window["floor_median"] = float(np.median(
            s["floor_loss_rel_diff"][part]))
        window["floor_max"] = float(np.max(s["floor_loss_rel_diff"][part]))
        window["loss_hf_sdpa"] = float(np.mean(
            s["hf_sdpa"]["rows"]["loss"][part]))
      windows.append(window)
    s["windows"] = windows
    if s.get("resumed"):
      r = s["resumed"]
      first = r["first_step"]
      diffs = {k: float(np.max(np.abs(
          np.asarray(r["rows"][k]) - np.asarray(ours[k][first:]))))
               for k in TRAIN_KEYS}
      eval_diffs = {k: max(abs(r["evals"][step][k] - s["ours"]["evals"][step][k])
                           for step in r["evals"]) for k in EVAL_KEYS}
      unequal = [first + i for i, (a, b) in enumerate(zip(
          r["rows"]["loss"], ours["loss"][first:])) if a != b]
      s["resume_check"] = {
          "resumed_at": first, "steps": len(r["rows"]["loss"]),
          "max_abs_diff_train": diffs, "max_abs_diff_eval": eval_diffs,
          "eval_steps": sorted(int(k) for k in r["evals"]),
          "first_step_loss_differs": unequal[0] if unequal else None,
          "steps_loss_differs": len(unequal),
          "bitwise_equal": not unequal and not any(eval_diffs.values())}

  # Eval agreement within the seed spread.
  points = []
  if len(seeds) >= 2:
    a, b = seeds[0], seeds[1]
    for step in a["ours"]["evals"]:
      point = {"step": int(step), "metrics": {}}
      for key, _, _ in SHOWN:
        o1, o2 = a["ours"]["evals"][step][key], b["ours"]["evals"][step][key]
        h1, h2 = a["hf"]["evals"][step][key], b["hf"]["evals"][step][key]
        cross = max(abs(o1 - h1), abs(o2 - h2))
        spread_ours, spread_hf = abs(o1 - o2), abs(h1 - h2)
        equal = EQUAL * max(1.0, abs(h1), abs(h2))
        m = {"ours": [o1, o2], "hf": [h1, h2],
             "cross": [abs(o1 - h1), abs(o2 - h2)],
             "spread_ours": spread_ours, "spread_hf": spread_hf,
             "strict": cross <= max(min(spread_ours, spread_hf), equal),
             "lenient": cross <= max(spread_ours, spread_hf, equal)}
        if a.get("hf_sdpa"):
          m["floor"] = abs(a["hf_sdpa"]["evals"][step][key] - h1)
        point["metrics"][key] = m
      point["strict"] = all(m["strict"] for m in point["metrics"].values())
      point["lenient"] = all(m["lenient"] for m in point["metrics"].values())
      points.append(point)
    points.sort(key=lambda p: p["step"])
  result["eval_points"] = points
  result["agree_strict"] = bool(points) and all(p["strict"] for p in points)
  result["agree_lenient"] = bool(points) and all(p["lenient"] for p in points)
  result["first_eval_apart"] = next(
      (p["step"] for p in points if not p["strict"]), None)
  return result


def _fmt_step(value):
  return "never" if value is None else str(value)


def report(result):
  args, cpu = result["args"], result["cpu"]
  seeds = result["seeds"]
  names = [f"seed {s['seed']}" for s in seeds]
  lines = [
      "# Long-run training parity: albert_tf vs HF torch + the original's "
      "LAMB", "",
      f"`{result['command']}`, {result['date']}, commit {result['commit']}, "
      f"{cpu['model']} ({', '.join(cpu['flags'])}; amx_bf16: "
      f"{'yes' if 'amx_bf16' in cpu['flags'] else 'no'}; "
      f"`grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo`: "
      f"{cpu.get('bf16_grep') or '(nothing)'}), {result['cpu_count']} cores "
      f"shared with other jobs (load average {result['load_start'][0]:.2f} "
      f"at the start, {result['load_end'][0]:.2f} at the end), torch "
      f"{result['torch_threads']} thread(s); "
      + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
      + f"; {result['seconds'] / 60:.1f} min in all.", ""]
  if result.get("uncommitted_at_start"):
    lines += ["The working tree's albert_tf/ differed from that commit when "
              "the run started (`git status --porcelain -- albert_tf`: "
              + "; ".join(f"`{l.strip()}`"
                          for l in result["uncommitted_at_start"])
              + "): the run measured that code.", ""]
  lines += [note + "\n" for note in result.get("notes") or ()]
  lines += [
      f"Model: {result['model']}. Data: {result['data']}. Schedule: "
      f"{result['schedule']}. float32 on both sides, dropout 0. Held-out: "
      f"{result['eval_set']}.", ""]

  # Verdict.
  points = result["eval_points"]
  if points:
    strict, lenient = result["agree_strict"], result["agree_lenient"]
    verdict = (
        f"**Verdict: the sides {'agree' if strict else 'do not agree'} "
        f"within the seed spread at every eval point** (strict: for held-out "
        "MLM accuracy, MLM loss and SOP accuracy, |ours − HF| of both seeds "
        "≤ the smaller of the two sides' |seed 1 − seed 2|, differences below "
        f"{EQUAL:g} × max(1, |value|) counting as none)")
    if not strict:
      failing = [p for p in points if not p["strict"]]
      verdict += (
          f"; {len(failing)} of {len(points)} points miss it, the first at "
          f"step {failing[0]['step']} ("
          + "; ".join(
              f"step {p['step']}: " + ", ".join(
                  f"{k} |ours−HF| {max(m['cross']):.4f} vs spread "
                  f"{min(m['spread_ours'], m['spread_hf']):.4f}"
                  for k, m in p["metrics"].items() if not m["strict"])
              for p in failing[:4]) + ")"
          + (f"; against the larger spread (lenient) they "
             f"{'agree at every point' if lenient else 'still part'}"))
    verdict += "."
    lines += [verdict, ""]
  for s in seeds:
    over = s["first_step_over"]
    text = (f"Per-step training loss, {'seed ' + str(s['seed'])}: relative "
            "difference |ours − HF| / |HF| first above "
            + ", ".join(f"{t} at step {_fmt_step(v)}" for t, v in over.items())
            + f"; median over the last {args['eval_every']} steps "
            f"{s['windows'][-1]['rel_diff_median']:.1e}")
    if s.get("floor_first_step_over"):
      text += ("; the noise floor (HF eager vs HF SDPA, the same seed) first "
               "above " + ", ".join(
                   f"{t} at step {_fmt_step(v)}"
                   for t, v in s["floor_first_step_over"].items())
               + f", median over the last {args['eval_every']} steps "
               f"{s['windows'][-1]['floor_median']:.1e}")
    lines += [text + ". Schedules agree to "
              f"{s['max_lr_diff']:.1e}.", ""]
  for s in seeds:
    if s.get("resume_check"):
      r = s["resume_check"]
      lines += [
          f"Resume (seed {s['seed']}): the trainer's checkpoint saved at step "
          f"{r['resumed_at']}, a new Trainer restored it and trained steps "
          f"{r['resumed_at']}–{args['steps'] - 1}: "
          + ("**bitwise identical** to the uninterrupted run (every per-step "
             "loss and metric, and the eval figures at steps "
             + ", ".join(map(str, r["eval_steps"])) + ")"
             if r["bitwise_equal"] else
             "max |resumed − uninterrupted|: training loss "
             f"{r['max_abs_diff_train']['loss']:.2e}, MLM loss "
             f"{r['max_abs_diff_train']['masked_lm_loss']:.2e}; held-out "
             + ", ".join(f"{k} {v:.2e}"
                         for k, v in r["max_abs_diff_eval"].items())
             + f"; the per-step losses differ at {r['steps_loss_differs']} "
             f"steps, the first {_fmt_step(r['first_step_loss_differs'])}")
          + ".", ""]

  # Eval tables.
  floor = bool(seeds and seeds[0].get("hf_sdpa"))
  for key, title, digits in SHOWN:
    head = (f"| step | ours {names[0]} | ours {names[1]} | HF {names[0]} | "
            f"HF {names[1]} | \\|ours−HF\\| {names[0]} | \\|ours−HF\\| "
            f"{names[1]} | seed spread ours | seed spread HF |"
            + (f" \\|HF−HF SDPA\\| {names[0]} |" if floor else "")
            + " within spread |") if len(names) >= 2 else None
    if head is None:
      continue
    lines += [f"### {title}", "", head,
              "|" + "---|" * (10 + floor)]
    for p in points:
      m = p["metrics"][key]
      lines.append(
          f"| {p['step']} | " + " | ".join(
              f"{v:.{digits}f}" for v in m["ours"] + m["hf"]) + " | "
          + " | ".join(f"{v:.1e}" for v in m["cross"]) + " | "
          f"{m['spread_ours']:.{digits}f} | {m['spread_hf']:.{digits}f} |"
          + (f" {m['floor']:.1e} |" if floor else "")
          + f" {'yes' if m['strict'] else ('lenient only' if m['lenient'] else '**no**')} |")
    lines.append("")

  # Per-window training loss and divergence.
  lines += ["### Training loss and per-step divergence per window", "",
            "Mean training loss of the window's steps (each side's own "
            "batches-of-the-step loss), and the median / max of the per-step "
            "relative loss difference |ours − HF| / |HF|"
            + (" and of the noise floor |HF SDPA − HF| / |HF| (first seed)"
               if floor else "") + ".", ""]
  head = "| steps |"
  rule = "|---|"
  for n in names:
    head += f" loss ours {n} | loss HF {n} | rel. diff median {n} | max {n} |"
    rule += "---|---|---|---|"
  if floor:
    head += " floor median | floor max |"
    rule += "---|---|"
  lines += [head, rule]
  for w in range(len(seeds[0]["windows"])):
    first = seeds[0]["windows"][w]
    line = f"| {first['steps'][0]}–{first['steps'][1] - 1} |"
    for s in seeds:
      x = s["windows"][w]
      line += (f" {x['loss_ours']:.4f} | {x['loss_hf']:.4f} | "
               f"{x['rel_diff_median']:.1e} | {x['rel_diff_max']:.1e} |")
    if floor:
      line += f" {first['floor_median']:.1e} | {first['floor_max']:.1e} |"
    lines.append(line)
  lines.append("")

  # Data: the mix of sources per seed, and held-out overlap.
  if seeds[0].get("mix"):
    dirs = [k for k in seeds[0]["mix"][0] if k != "steps" and (
        k != "none" or any(w["none"] for s in seeds for w in s["mix"]))]
    lines += ["### The training stream", "",
              "Fraction of each window's examples whose text (the token ids "
              "with the masked ones put back) occurs among the records of "
              "exactly these --input_file directories: with the demo's "
              "records, `train` holds People's Daily and the unlabelled "
              "reviews once, `reviews` the same reviews 9 more times (other "
              "masks and pairings), so `reviews + train` is review text and "
              "`train` alone mostly news. The task shuffles the file list, "
              "reads 4 files round robin and shuffles records in a buffer of "
              "1,000, so which files feed a stretch of steps depends on the "
              "seed.", "",
              "| steps | " + " | ".join(f"{d} {n}" for n in names
                                        for d in dirs) + " |",
              "|---|" + "---|" * (len(dirs) * len(names))]
    for w in range(len(seeds[0]["mix"])):
      x0 = seeds[0]["mix"][w]
      lines.append(f"| {x0['steps'][0]}–{x0['steps'][1] - 1} | " + " | ".join(
          f"{s['mix'][w][d]:.2f}" for s in seeds for d in dirs) + " |")
    lines.append("")
  if result.get("heldout_overlap") is not None:
    o = result["heldout_overlap"]
    lines += [f"Held-out examples whose unmasked token ids occur among the "
              f"training records: {o['in_train']} of {o['examples']}.", ""]

  # Times.
  lines += ["### Wall time", "",
            "| seed | read batches s | ours s (train only) | HF eager s "
            "(train only) | HF SDPA s (train only) | resume leg s |",
            "|---|---|---|---|---|---|"]
  for s in seeds:
    sdpa = s.get("hf_sdpa")
    res = s.get("resumed")
    lines.append(
        f"| {s['seed']} | {s['read_seconds']} | {s['ours']['seconds']} "
        f"({s['ours']['train_seconds']}) | {s['hf']['seconds']} "
        f"({s['hf']['train_seconds']}) | "
        + (f"{sdpa['seconds']} ({sdpa['train_seconds']})" if sdpa else "—")
        + f" | {res['seconds'] if res else '—'} |")
  lines += ["", f"Excluded from weight decay and the trust ratio: the same "
            f"{len(seeds[0]['exclusions']['ours'])} variables on both sides "
            "(asserted through the converter's name map). The training loss of "
            "every step of every run, the peer's gradient norms and the "
            "relative loss differences of every step are in the .json.", ""]
  return "\n".join(lines)


def compact(result):
  """Keeps of the per-step series what the .json promises (every run's
  training loss, float32-exact; the peer's gradient norm; the relative
  loss differences), the report's summaries being computed already."""
  for s in result["seeds"]:
    for name in ("ours", "hf", "hf_sdpa", "resumed"):
      run = s.get(name)
      if not run or "rows" not in run:
        continue
      rows = run.pop("rows")
      run.pop("lr", None)
      run["loss"] = [float(f"{v:.9g}") for v in rows["loss"]]
      if "grad_global_norm" in rows:
        run["grad_global_norm"] = [float(f"{v:.5g}")
                                   for v in rows["grad_global_norm"]]
    for key in ("masked_lm_loss_rel_diff", "sentence_order_loss_rel_diff"):
      if isinstance(s.get(key), list):
        s["max_" + key] = max(s.pop(key))
    for key in ("loss_rel_diff", "floor_loss_rel_diff"):
      if key in s:
        s[key] = [float(f"{v:.3g}") for v in s[key]]
  return result


def dumps(result):
  """JSON with each list of numbers on one line."""
  text = json.dumps(result, indent=1)
  return re.sub(r"\[\s*(-?[0-9][-0-9.eE+,\s]*?)\s*\]",
                lambda m: "[" + "".join(m.group(1).split()) + "]", text)
