"""`make bench`: every benchmark in one go, then one table of figures and ratios.

Each benchmark runs in its own process (one TF runtime at a time) and writes
JSON into benchmarks/results/; this script turns those into
benchmarks/results/REPORT.md: figure, value, spread, the peer it is compared
with in the same run and the ratio, plus the machine. `--quick` runs the
short variants.
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

flags.DEFINE_bool("quick", False, "Short variants of every benchmark.")
flags.DEFINE_list("only", None, "Run only these benchmarks (by name).")
flags.DEFINE_string("results_dir", "benchmarks/results", "Where JSON and REPORT.md go.")
FLAGS = flags.FLAGS


def _benchmarks(results, quick):
  q = ["--quick"] if quick else []
  return [
      ("encoder_throughput", ["benchmarks.encoder_throughput", "--bfloat16",
                              f"--repetitions={2 if quick else 5}",
                              f"--json_out={results}/encoder_throughput.json"]
       + (["--presets=albert_tiny_zh"] if quick else [])),
      ("albert_vs_bert", ["benchmarks.albert_vs_bert",
                          f"--repetitions={1 if quick else 3}",
                          f"--json_out={results}/albert_vs_bert.json"]),
      ("pretrain_throughput", ["benchmarks.pretrain_throughput",
                               f"--output={results}/pretrain_throughput.json"] + q),
      ("finetune_throughput", ["benchmarks.finetune_throughput",
                               f"--output={results}/finetune_throughput.json"]
       + (["--rounds=1"] if quick else [])),
      ("data_prep_throughput", ["benchmarks.data_prep_throughput",
                                f"--results_dir={results}"]
       + (["--repetitions=1", "--dupe_factor=1"] if quick else [])),
      ("deploy", ["benchmarks.deploy", f"--output_dir={results}/deploy"] + q),
  ]


def _load(path):
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def table_rows(results):
  """(benchmark, figure, value, spread, compared with, ratio) from the JSONs."""
  rows = []
  fine = _load(os.path.join(results, "finetune_throughput.json"))
  if fine:
    rows.append(("finetune_throughput",
                 f"{fine['preset']} trainer examples/s",
                 fine["trainer"]["examples_per_second"],
                 fine["trainer"]["spread"],
                 f"former loop {fine['loop']['examples_per_second']:.1f}",
                 fine["ratio_trainer_vs_loop"]))
  enc = _load(os.path.join(results, "encoder_throughput.json"))
  if enc:
    for r in enc["rows"]:
      rows.append(("encoder_throughput", f"{r['preset']} {r['policy']} seq/s",
                   r["albert_tf"]["seq_per_s"], r["albert_tf"]["spread"],
                   f"keras-hub AlbertBackbone {r['keras_hub']['seq_per_s']:.1f}",
                   r["ratio"]))
  avb = _load(os.path.join(results, "albert_vs_bert.json"))
  if avb:
    res = avb["results"]
    ref = res.get("bert_base")
    for name, r in res.items():
      rows.append(("albert_vs_bert", f"{name} seq/s ({r['params']:,} params)",
                   r["seq_per_s"], r["spread"],
                   f"bert_base {ref['seq_per_s']:.1f}" if ref else "",
                   r["seq_per_s"] / ref["seq_per_s"] if ref else None))
  pre = _load(os.path.join(results, "pretrain_throughput.json"))
  if pre:
    for r in pre["rows"]:
      if r["model"] != "albert_tf":
        continue
      peer = next((p for p in pre["rows"] if p["model"] == "keras_hub" and
                   (p["preset"], p["precision"], p["jit"]) ==
                   (r["preset"], r["precision"], r["jit"])), None)
      spread = ((r["examples_per_s_max"] - r["examples_per_s_min"]) /
                r["examples_per_s_median"])
      rows.append(("pretrain_throughput",
                   f"{r['preset']} {r['precision']} jit={r['jit']} train ex/s",
                   r["examples_per_s_median"], spread,
                   f"keras-hub {peer['examples_per_s_median']:.1f}" if peer else "",
                   r["examples_per_s_median"] / peer["examples_per_s_median"]
                   if peer else None))
  dp = _load(os.path.join(results, "data_prep_throughput.json"))
  if dp:
    for r in dp["rows"]:
      runs = r.get("runs", [])
      spread = (max(runs) - min(runs)) / r["seconds"] if len(runs) > 1 else 0.0
      rows.append(("data_prep_throughput", f"{r['mode']} instances/s",
                   r["instances_per_second"], spread, "plain loop",
                   r["speedup_vs_loop"]))
  dep = _load(os.path.join(results, "deploy", "deploy_results.json"))
  if dep:
    tf_lat = dep.get("tf_savedmodel", {})
    for mode, e in dep.get("tflite", {}).items():
      for t in (1, 2):
        lat, ref = e.get(f"latency_{t}t"), tf_lat.get(f"latency_{t}t")
        if isinstance(lat, dict) and isinstance(ref, dict):
          rows.append(("deploy", f"TFLite {mode} batch-1 ms, {t} thread(s) "
                       f"({e['size_mb']:.1f} MB, acc {e['accuracy']:.3f})",
                       lat["median_ms"],
                       (lat["max_ms"] - lat["min_ms"]) / lat["median_ms"],
                       f"SavedModel in TF {ref['median_ms']:.1f} ms",
                       ref["median_ms"] / lat["median_ms"]))
  return rows


def write_report(results):
  from benchmarks.common import machine  # pylint: disable=g-import-not-at-top
  lines = ["# Benchmark report", "", f"Machine: {machine()}  ",
           f"Written: {time.strftime('%Y-%m-%d %H:%M')}", "",
           "Ratios compare figures measured side by side in the same run "
           "(> 1 means this project is faster; deploy: TF latency / TFLite latency).",
           "", "| benchmark | figure | median | spread | compared with | ratio |",
           "|---|---|---|---|---|---|"]
  for bench, figure, value, spread, peer, ratio in table_rows(results):
    lines.append(f"| {bench} | {figure} | {value:.2f} | {spread:.0%} | {peer} | "
                 + (f"{ratio:.2f}x" if ratio else "") + " |")
  path = os.path.join(results, "REPORT.md")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return path


def main(argv):
  del argv
  os.makedirs(FLAGS.results_dir, exist_ok=True)
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  failed = []
  for name, args in _benchmarks(FLAGS.results_dir, FLAGS.quick):
    if FLAGS.only and name not in FLAGS.only:
      continue
    print(f"== {name}: python -m {' '.join(args)}", flush=True)
    start = time.time()
    code = subprocess.call([sys.executable, "-m", *args], env=env)
    print(f"== {name}: exit {code} after {time.time() - start:.0f} s", flush=True)
    if code:
      failed.append(name)
  path = write_report(FLAGS.results_dir)
  print(open(path, encoding="utf-8").read())
  if failed:
    print(f"failed: {', '.join(failed)}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  app.run(main)
