r"""The demo's pretraining stage, today's settings against the CPU fast path.

    python -m benchmarks.pretrain_fast_path                 # make demo first
    python -m benchmarks.pretrain_fast_path --steps=600     # a shorter budget
    python -m benchmarks.pretrain_fast_path --before=        # no "before" run
    python -m benchmarks.pretrain_fast_path --onednn_max_cpu_isa=AVX2

Runs `python -m albert_tf.run_pretraining` with the demo's flagfile on the
demo's records (demo_output/tfrecords: People's Daily + reviews, held-out
documents for eval) four times, one after the other, on the same machine:

  before        the code and flagfile of --before (default: the commit before
                the fast path), float32, from a git worktree of it: the speed
                the fast path is measured against;
  float32       this code, --mixed_precision=none --length_buckets=0
                --micro_batches=1 (the flagfile's settings of before the fast
                path);
  fast          --mixed_precision=auto --length_buckets=4 --micro_batches=auto
                (the flagfile now);
  float32 seed2 the first with another --seed: how far two float32 runs
                differ, the noise the fast path's curve is compared with.

For each: wall time of the command, median examples/s and real tokens/s
(train_log.jsonl), held-out MLM and SOP accuracy at every checkpoint
(eval_log.jsonl), and the largest gap between its train-loss curve and the
first run's. Written to stdout and benchmarks/results/pretrain_fast_path.json.

--onednn_max_cpu_isa=AVX2 runs every command with ONEDNN_MAX_CPU_ISA=AVX2
and XLA_FLAGS=--xla_cpu_max_isa=AVX2: oneDNN (TF's matmul and softmax
kernels on CPU) and XLA's CPU code (the fused GELU and LayerNorm) then use
AVX2 and FMA only, an emulation of an AVX2-only CPU on a larger one. oneDNN's
bf16 kernels do not exist there, so the fast run is given what
--mixed_precision=auto picks on such a CPU: none. TF's own (Eigen) kernels
are not affected.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from benchmarks import common

FLAGS = "configs/pretrain_albert_tiny_zh_demo.flags"
# The last commit before --mixed_precision=auto and --length_buckets.
BEFORE = "6b2796f~1"
RUNS = {
    "before": [],
    "float32": ["--mixed_precision=none", "--length_buckets=0",
                "--micro_batches=1"],
    "fast": ["--mixed_precision=auto", "--length_buckets=4",
             "--micro_batches=auto"],
    "float32 seed2": ["--mixed_precision=none", "--length_buckets=0",
                      "--micro_batches=1", "--seed=2"],
}


def _read_jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def checkout(rev, work):
  """A detached git worktree of rev under work; `remove` it after use."""
  tree = os.path.join(work, "tree-" + rev.replace("~", "-").replace("/", "-"))
  remove(tree)
  subprocess.run(["git", "worktree", "add", "--detach", tree, rev],
                 check=True, stdout=subprocess.DEVNULL)
  return tree


def remove(tree):
  """Removes a worktree `checkout` made (and git's record of it)."""
  subprocess.run(["git", "worktree", "remove", "--force", tree],
                 check=False, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
  shutil.rmtree(tree, ignore_errors=True)
  subprocess.run(["git", "worktree", "prune"], check=False)


def run(name, extra, args, work, tree=None):
  out = os.path.join(work, name.replace(" ", "_"))
  shutil.rmtree(out, ignore_errors=True)
  records = os.path.abspath(args.records)
  spm = os.path.abspath(args.spm_model_file)
  command = [
      sys.executable, "-m", "albert_tf.run_pretraining", f"--flagfile={FLAGS}",
      f"--spm_model_file={spm}",
      f"--input_file={records}/train/*.tfrecord,{records}/reviews/*.tfrecord",
      f"--eval_input_file={records}/heldout/*.tfrecord",
      f"--output_dir={out}", f"--num_train_steps={args.steps}",
      f"--num_warmup_steps={max(1, args.steps // 10)}",
      f"--save_checkpoints_steps={max(1, args.steps // 5)}", *extra]
  start = time.perf_counter()
  with open(out + ".log", "w", encoding="utf-8") as log:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if args.onednn_max_cpu_isa:
      env["ONEDNN_MAX_CPU_ISA"] = args.onednn_max_cpu_isa
      # XLA's own CPU code (the fused GELU and LayerNorm) likewise.
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_max_isa="
                          + args.onednn_max_cpu_isa).strip()
    if tree:
      env["PYTHONPATH"] = tree
    subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT,
                   env=env, cwd=tree)
  wall = time.perf_counter() - start
  train = _read_jsonl(os.path.join(out, "train_log.jsonl"))
  evals = _read_jsonl(os.path.join(out, "eval_log.jsonl"))
  steady = train[1:] or train
  return {
      "flags": extra, "code": tree or ".", "wall_seconds": round(wall, 1),
      "examples_per_second": round(statistics.median(
          r["examples_per_second"] for r in steady), 1),
      "real_tokens_per_second": round(statistics.median(
          r["tokens_per_second"] for r in steady)),
      "mfu": round(statistics.median(r.get("mfu", 0) for r in steady), 3),
      "loss_curve": {r["step"]: round(r["loss"], 4) for r in train},
      "heldout": {r["global_step"]: {k: round(r[k], 4) for k in (
          "masked_lm_accuracy", "sentence_order_accuracy")} for r in evals},
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--records", default="demo_output/tfrecords")
  parser.add_argument("--spm_model_file", default="demo_output/vocab/spm.model")
  parser.add_argument("--steps", type=int, default=3000)
  parser.add_argument("--work", default="/tmp/albert_tf_fast_path")
  parser.add_argument("--before", default=BEFORE,
                      help="git revision of the 'before' run; empty: none")
  parser.add_argument("--onednn_max_cpu_isa", default="",
                      help="e.g. AVX2: emulate a CPU without AVX-512 and "
                      "bf16 units (see the module docstring)")
  parser.add_argument("--out", default="benchmarks/results/"
                      "pretrain_fast_path.json")
  args = parser.parse_args()
  if not os.path.isdir(os.path.join(args.records, "heldout")):
    sys.exit(f"error: --records={args.records} has no heldout/: run "
             "`make demo` first (its tfrecords stage)")
  os.makedirs(args.work, exist_ok=True)
  results = {"machine": common.machine(), "steps": args.steps,
             "before": args.before,
             "onednn_max_cpu_isa": args.onednn_max_cpu_isa, "runs": {}}
  for name, extra in RUNS.items():
    tree = None
    if name == "before":
      if not args.before:
        continue
      tree = checkout(args.before, args.work)
    if args.onednn_max_cpu_isa:  # auto's pick without bf16 units
      extra = [f.replace("--mixed_precision=auto", "--mixed_precision=none")
               for f in extra]
    try:
      results["runs"][name] = run(name, extra, args, args.work, tree)
    finally:
      if tree:
        remove(tree)
    r = results["runs"][name]
    print(f"{name:14s} wall {r['wall_seconds']:7.1f} s  "
          f"{r['examples_per_second']:6.1f} ex/s  "
          f"{r['real_tokens_per_second']:6d} tokens/s as logged  MFU {r['mfu']:.2f}"
          f"  held-out MLM {list(r['heldout'].values())[-1]}", flush=True)
  base = results["runs"]["float32"]
  before = results["runs"].get("before")
  if before:  # its tokens/s counted padding: real ones at the same records'
    before["real_tokens_per_second"] = round(  # mean length
        before["examples_per_second"] * base["real_tokens_per_second"]
        / base["examples_per_second"])
  for name, r in results["runs"].items():
    if before:
      r["speed_vs_before"] = round(
          r["examples_per_second"] / before["examples_per_second"], 2)
    common_steps = set(r["loss_curve"]) & set(base["loss_curve"])
    r["largest_loss_gap_to_float32"] = round(max(
        abs(r["loss_curve"][s] - base["loss_curve"][s])
        for s in common_steps), 4)
    r["speed_vs_float32"] = round(
        r["examples_per_second"] / base["examples_per_second"], 2)
    print(f"{name:14s} {r['real_tokens_per_second']:6d} real tokens/s, "
          f"{r['speed_vs_float32']:.2f}x examples/s of float32, "
          f"{r.get('speed_vs_before', float('nan')):.2f}x of before, largest "
          f"train-loss gap to float32 {r['largest_loss_gap_to_float32']}")
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out + ".tmp", "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
  main()
