"""Throughput of data_prep: Beam with 1 and 2 DirectRunner workers vs a plain loop.

  python -m benchmarks.data_prep_throughput [--repetitions=3] [--dupe_factor=40]

All three do the same work on the same input: read documents, tokenize,
build SOP instances with n-gram masking, serialize and write TFRecords. The
loop calls the pipeline's own per-document functions in one process; the
Beam runs use `--direct_running_mode=multi_processing` with 1 and 2 worker
processes. Each figure is the median wall time of --repetitions runs,
including pipeline start-up and worker start (what a user waits for).
Beam's fixed cost (runner and worker start, about 3-4 s here) is paid once per
run, so the ratios depend on the work per run. The default --dupe_factor=40
is the original's (and data_prep.create_pretraining_data's) default: about
110 s of work for the loop here, 15-20 minutes for the whole benchmark.
Default input: People's Daily 1998 (`data_prep.corpora`, train split) and
the demo vocabulary if present, else one trained here into
benchmarks/results/ (cached). Results are printed and written as JSON.
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from absl import app
from absl import flags

from data_prep import beam_compat
from data_prep import instances as instances_lib
from data_prep import pipeline
from data_prep import reading
from data_prep import transforms

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Corpus glob (default: People's "
                    "Daily train.txt, written on first use).")
flags.DEFINE_string("spm_model_file", None, "Default: demo_output/vocab/"
                    "spm.model, else a model trained on first use.")
flags.DEFINE_integer("repetitions", 3, "Runs per mode; the median is shown.")
flags.DEFINE_integer("dupe_factor", 40, "Passes over the corpus (the "
                     "original's default).")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked tokens cap.")
flags.DEFINE_string("results_dir", "benchmarks/results", "Cache and output.")

_DEMO_SPM = "demo_output/vocab/spm.model"


def default_inputs(results_dir):
  """(corpus glob, spm model) of the default benchmark, made when missing."""
  from data_prep import corpora, train_vocab
  cache = os.path.join(results_dir, "data_prep_cache")
  corpus = os.path.join(cache, "corpus", "train.txt")
  if not os.path.exists(corpus):
    corpora.write_peoples_daily(os.path.dirname(corpus))
  spm_model = _DEMO_SPM
  if not os.path.exists(spm_model):
    spm_model = os.path.join(cache, "vocab", "spm.model")
    if not os.path.exists(spm_model):
      train_vocab.train_sentencepiece(corpus, spm_model[:-len(".model")],
                                      vocab_size=8000,
                                      num_threads=os.cpu_count() or 1)
  return corpus, spm_model


def run_loop(input_file, output_dir, spm_model_file, options, dupe_factor):
  """The pipeline's work in one process, no Beam; returns the record count."""
  from albert_tf.data import tokenization
  tokenizer = tokenization.load_tokenizer(spm_model_file=spm_model_file)
  vocab = instances_lib.Vocab.from_tokenizer(tokenizer)
  count = 0
  with open(os.path.join(output_dir, "loop.tfrecord"), "wb") as out:
    for path in reading.match_inputs(input_file):
      for raw in reading.read_raw_documents(path, 100_000):
        reason, document = transforms.tokenize_raw_document(tokenizer, raw)
        if reason is not None:
          continue
        records, _ = transforms.document_to_records(document, options,
                                                    vocab, dupe_factor)
        for record in records:
          # Same framing code as Beam's WriteToTFRecord.
          beam_compat.write_tfrecord(out, record)
        count += len(records)
  return count


def run_beam(input_file, output_dir, spm_model_file, options, dupe_factor,
             workers):
  summary = pipeline.run_pipeline(
      input_file, output_dir, spm_model_file=spm_model_file, options=options,
      dupe_factor=dupe_factor, num_shards=4, overwrite=True,
      pipeline_args=["--runner=DirectRunner",
                     f"--direct_num_workers={workers}",
                     "--direct_running_mode=multi_processing"])
  return summary["instances"]


def main(argv):
  del argv
  input_file, spm_model = FLAGS.input_file, FLAGS.spm_model_file
  if not input_file or not spm_model:
    default_corpus, default_spm = default_inputs(FLAGS.results_dir)
    input_file = input_file or default_corpus
    spm_model = spm_model or default_spm
  options = instances_lib.InstanceOptions(
      max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq)
  modes = {
      "plain loop (1 process)": lambda out: run_loop(
          input_file, out, spm_model, options, FLAGS.dupe_factor),
      "Beam, 1 worker": lambda out: run_beam(
          input_file, out, spm_model, options, FLAGS.dupe_factor, 1),
      "Beam, 2 workers": lambda out: run_beam(
          input_file, out, spm_model, options, FLAGS.dupe_factor, 2),
  }
  times = {name: [] for name in modes}
  counts = {}
  # Interleaved repetitions, so drifting machine load hits every mode alike.
  for _ in range(FLAGS.repetitions):
    for name, fn in modes.items():
      out = tempfile.mkdtemp(prefix="dp_bench_")
      start = time.perf_counter()
      counts[name] = fn(out)
      times[name].append(time.perf_counter() - start)
      shutil.rmtree(out)
  if len(set(counts.values())) != 1:
    raise RuntimeError(f"modes wrote different numbers of records: {counts}")
  instances = next(iter(counts.values()))
  medians = {name: statistics.median(t) for name, t in times.items()}
  loop_s, beam1_s = medians["plain loop (1 process)"], medians["Beam, 1 worker"]
  print(f"\n{instances} instances ({input_file}, dupe_factor "
        f"{FLAGS.dupe_factor}, max_seq_length {FLAGS.max_seq_length}), "
        f"median of {FLAGS.repetitions}, {os.cpu_count()} CPUs")
  print(f"{'mode':<24}{'seconds':>9}{'inst/s':>9}{'vs loop':>9}"
        f"{'vs 1 worker':>13}")
  rows = []
  for name, seconds in medians.items():
    rows.append({"mode": name, "seconds": seconds, "runs": times[name],
                 "instances_per_second": instances / seconds,
                 "speedup_vs_loop": loop_s / seconds,
                 "speedup_vs_1_worker": beam1_s / seconds})
    print(f"{name:<24}{seconds:>9.1f}{instances / seconds:>9.0f}"
          f"{loop_s / seconds:>8.2f}x{beam1_s / seconds:>12.2f}x")
  os.makedirs(FLAGS.results_dir, exist_ok=True)
  path = os.path.join(FLAGS.results_dir, "data_prep_throughput.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump({"instances": instances, "dupe_factor": FLAGS.dupe_factor,
               "repetitions": FLAGS.repetitions, "cpus": os.cpu_count(),
               "load_average_at_end": os.getloadavg(), "rows": rows}, f,
              indent=2)
  print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
