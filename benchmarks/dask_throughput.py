"""Throughput of data_prep on Beam's DaskRunner (1, 2, 4 workers) vs the DirectRunner.

  python -m benchmarks.dask_throughput [--repetitions=2] [--dupe_factor=10]

Every mode runs `data_prep.pipeline.run_pipeline` on the same input with the
same settings and must write byte-identical shards (checked): the
DirectRunner in one process (in_memory) and with 2 worker processes
(multi_processing), and the DaskRunner on local dask.distributed clusters
(`data_prep.local_dask`: a `dask scheduler` and 1, 2 or 4 `dask worker`
processes of one thread each). The clusters are started once, before the
runs (their start-up time is shown apart), and the repetitions are
interleaved so that drifting machine load hits every mode alike. The
"fixed cost" column is the median time of a run on a 3-document input: what
a run costs whatever its size (runner start, worker processes, for Dask the
client connection, graph serialisation and the shuffles' tasks).
Default input: People's Daily 1998 train split and the demo vocabulary (or
one trained into benchmarks/results/, as benchmarks.data_prep_throughput).
"""

import contextlib
import hashlib
import json
import logging
import os
import shutil
import statistics
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import data_prep_throughput
from data_prep import instances as instances_lib
from data_prep import local_dask
from data_prep import pipeline

FLAGS = flags.FLAGS
# The flags of benchmarks.data_prep_throughput (--input_file,
# --spm_model_file, --repetitions, --dupe_factor, --max_seq_length,
# --max_predictions_per_seq, --results_dir), with smaller default runs.
FLAGS.set_default("repetitions", 2)
FLAGS.set_default("dupe_factor", 10)

DASK_WORKERS = (1, 2, 4)


def _shards_digest(output_dir):
  digest = hashlib.sha256()
  for name in sorted(os.listdir(output_dir)):
    if name.endswith(".tfrecord"):
      with open(os.path.join(output_dir, name), "rb") as f:
        digest.update(name.encode() + f.read())
  return digest.hexdigest()


def _run(input_file, spm_model, options, dupe_factor, beam_args):
  """(seconds, instances, digest of the shards) of one run."""
  out = tempfile.mkdtemp(prefix="dask_bench_")
  try:
    start = time.perf_counter()
    summary = pipeline.run_pipeline(
        input_file, os.path.join(out, "records"), spm_model_file=spm_model,
        options=options, dupe_factor=dupe_factor, num_shards=4,
        pipeline_args=beam_args)
    seconds = time.perf_counter() - start
    return seconds, summary["instances"], _shards_digest(
        os.path.join(out, "records"))
  finally:
    shutil.rmtree(out)


def _tiny_corpus(input_file, directory):
  """The first 3 documents of the input, for the fixed cost."""
  from data_prep import reading
  path = os.path.join(directory, "tiny.txt")
  with open(path, "wb") as out:
    for i, (lines, _) in enumerate(reading.read_raw_documents(
        reading.match_inputs(input_file)[0], 100_000)):
      if i == 3:
        break
      out.write(b"\n".join(lines) + b"\n\n")
  return path


def main(argv):
  del argv
  logging.getLogger("apache_beam").setLevel(logging.ERROR)
  logging.getLogger("distributed").setLevel(logging.ERROR)
  input_file, spm_model = FLAGS.input_file, FLAGS.spm_model_file
  if not input_file or not spm_model:
    corpus, spm = data_prep_throughput.default_inputs(FLAGS.results_dir)
    input_file, spm_model = input_file or corpus, spm_model or spm
  options = instances_lib.InstanceOptions(
      max_seq_length=FLAGS.max_seq_length,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq)
  modes = {
      "DirectRunner, in_memory (1 process)": [
          "--runner=DirectRunner", "--direct_running_mode=in_memory",
          "--direct_num_workers=1"],
      "DirectRunner, multi_processing, 2 workers": [
          "--runner=DirectRunner", "--direct_running_mode=multi_processing",
          "--direct_num_workers=2"],
  }
  startup = {}
  with contextlib.ExitStack() as stack:
    scratch = stack.enter_context(tempfile.TemporaryDirectory())
    tiny = _tiny_corpus(input_file, scratch)
    for workers in DASK_WORKERS:
      start = time.perf_counter()
      address = stack.enter_context(local_dask.cluster(workers))
      startup[workers] = time.perf_counter() - start
      modes[f"DaskRunner, {workers} worker{'s' * (workers > 1)}"] = [
          "--runner=DaskRunner", f"--dask_client_address={address}"]
    times = {name: [] for name in modes}
    fixed = {name: [] for name in modes}
    results = {}
    # Interleaved repetitions, so drifting machine load hits every mode alike.
    for _ in range(FLAGS.repetitions):
      for name, beam_args in modes.items():
        fixed[name].append(_run(tiny, spm_model, options, 1, beam_args)[0])
        seconds, instances, digest = _run(input_file, spm_model, options,
                                          FLAGS.dupe_factor, beam_args)
        times[name].append(seconds)
        results[name] = (instances, digest)
        print(f"{name}: {seconds:.1f} s, {instances} instances", flush=True)
  if len(set(results.values())) != 1:
    raise RuntimeError(f"modes wrote different shards: {results}")
  instances = next(iter(results.values()))[0]
  print(f"\n{instances} instances ({input_file}, dupe_factor "
        f"{FLAGS.dupe_factor}, max_seq_length {FLAGS.max_seq_length}), "
        f"median of {FLAGS.repetitions}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; byte-identical shards in every mode")
  rows = []
  print(f"{'mode':<44}{'seconds':>9}{'inst/s':>9}{'fixed cost':>12}")
  for name in modes:
    seconds = statistics.median(times[name])
    rows.append(dict(mode=name, seconds=seconds, runs=times[name],
                     instances_per_second=instances / seconds,
                     fixed_cost_seconds=statistics.median(fixed[name])))
    print(f"{name:<44}{seconds:>9.1f}{instances / seconds:>9,.0f}"
          f"{statistics.median(fixed[name]):>11.1f}s")
  print("cluster start-up (scheduler + workers, s): " + ", ".join(
      f"{w} worker(s) {s:.1f}" for w, s in startup.items()))
  os.makedirs(FLAGS.results_dir, exist_ok=True)
  path = os.path.join(FLAGS.results_dir, "dask_throughput.json")
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(dict(instances=instances, dupe_factor=FLAGS.dupe_factor,
                   rows=rows, cluster_startup_seconds=startup), f, indent=1)
  os.replace(path + ".tmp", path)
  print(f"written: {path}")


if __name__ == "__main__":
  app.run(main)
