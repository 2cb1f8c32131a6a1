r"""The scale-out plan on paper: FLOPs, memory, step time, input rate per preset.

    python -m benchmarks.scaling_table            # docs/scaling.md's tables
    python -m benchmarks.scaling_table --measure  # measure this CPU first

The tables are arithmetic on the configs (`albert_tf.core.config.PRESETS`, the
parameter counts of `albert_tf.params`) and on figures measured on a CPU:
the float32 2048^2 matmul rate ("peak"), the FLOP rate of our own training
step (AlbertPretrainer + LAMB under Keras `fit`, sequence 512), the peak
memory TF allocates in that step, and the records/s of
`pretraining_dataset.make_dataset` on one core. Without --measure the
figures recorded in MEASURED are used (docs/scaling.md says where and under
what load they were taken); with it they are measured first and printed, and
the tables use them. The accelerator figures (peak, memory, host cores) are
published ones, their MFU an assumption (ASSUMED_MFU).
"""

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import common

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The original recipe (google-research/albert run_pretraining.py).
BATCH, SEQ, PRED, STEPS = 4096, 512, 20, 125000
PRESET_NAMES = ("albert_base_v2", "albert_large_v2", "albert_xlarge_v2",
                "albert_xxlarge_v2", "albert_tiny_zh")
# BERT-shaped rows (E = H, nothing shared) show that sharing saves
# parameters, not compute.
COMPARE = ("bert_base", "bert_large")
ASSUMED_MFU = (0.40, 0.55)
GB = 1e9

# `--measure` on 2026-12-01 23:37 UTC (docs/scaling.md): the quietest of four
# runs, the one whose three step timings agree to 0.02%.
MEASURED = {
    "cpu": "AMD EPYC (family 25 model 1: Zen 3), 2 cores, AVX2 + FMA, no "
           "AVX-512, no AMX; TF 2.21.0, no GPU",
    "load": "loadavg 0.58 before, 1.29 after (1 min)",
    "matmul_gflops": 96.0,
    "step": {"preset": "albert_base_v2", "batch": 2, "gflops": 56.6,
             "mfu": 0.609},
    "decode_records_per_core_s": 26459.0,
    "step_memory": {"batches": [1, 3], "per_sequence": 543997056.0},
}


@dataclasses.dataclass(frozen=True)
class Setup:
  """An accelerator setup; the figures are the vendors' published ones."""
  name: str
  replicas: int             # tf.distribute replicas (GPUs, TPU cores/chips)
  replica_tflops: float     # dense bf16 peak per replica
  replica_gb: float         # accelerator memory per replica
  hosts: int
  host_cpus: int            # vCPUs (or cores) per host


SETUPS = (
    # A100 SXM 80 GB, 312 TFLOP/s bf16 dense; DGX A100 host: 2 x 64 cores.
    Setup("8xA100", 8, 312.0, 80.0, 1, 128),
    # v3-8: 420 TFLOP/s bf16 per board = 8 cores x 52.5, 16 GB HBM per core;
    # one TPU VM of 96 vCPUs.
    Setup("TPU v3-8", 8, 52.5, 16.0, 1, 96),
    # v4-32: 16 chips (one replica each, megacore) x 275 TFLOP/s, 32 GB HBM;
    # 4 TPU VMs of 240 vCPUs.
    Setup("TPU v4-32", 16, 275.0, 32.0, 4, 240),
)


# ---------------------------------------------------------------- arithmetic
def weights_per_token(config):
  """Multiply-adds per token of the encoder's matmuls (embedding lookups
  free): every layer runs the shared block's 4H^2 + 2HI weights again."""
  h, i, e = config.hidden_size, config.intermediate_size, config.embedding_size
  projection = e * h if e != h else 0
  return config.num_hidden_layers * (4 * h * h + 2 * h * i) + projection


def train_flops_per_sequence(config, seq=SEQ, pred=PRED):
  """{dense, attention, heads, total}: FLOPs of one training sequence.

  Forward: 2 FLOPs per multiply-add; backward twice the forward (input and
  weight gradients), so training is 3x forward. Attention's QK^T and
  probs x V are 2 L s^2 H multiply-adds; the MLM head runs on the `pred`
  gathered positions only (H -> E transform, E -> V logits), SOP on [CLS].
  """
  h, e, v = config.hidden_size, config.embedding_size, config.vocab_size
  dense = 3 * 2 * seq * weights_per_token(config)
  attention = 3 * 2 * 2 * config.num_hidden_layers * seq * seq * h
  heads = 3 * 2 * (pred * (h * e + e * v) + h * h + 2 * h)
  return {"dense": dense, "attention": attention, "heads": heads,
          "total": dense + attention + heads}


def activation_bytes_per_sequence(config, seq=SEQ, pred=PRED, dtype_bytes=2):
  """Bytes kept for the backward pass of one sequence, without
  rematerialisation, no dropout (v2 configs), fused GELU (it keeps its input
  only); `dtype_bytes` of the compute dtype (2 bf16, 4 float32).

  Per layer: block input, Q K V, context and FFN input (6sH), GELU input and
  output (2sI) in the compute dtype; two float32 LayerNorm inputs (8sH);
  the float32 softmax output (4as^2) and, under bf16, its bf16 copy (2as^2).
  Plus the embeddings (float32 LayerNorm input and projection input, 6sE)
  and the float32 MLM logits and their gradient (8PV).
  """
  h, i, a = (config.hidden_size, config.intermediate_size,
             config.num_attention_heads)
  probs = 4 + (dtype_bytes if dtype_bytes != 4 else 0)
  layer = (dtype_bytes * seq * (6 * h + 2 * i) + 8 * seq * h
           + probs * a * seq * seq)
  return (config.num_hidden_layers * layer + 6 * seq * config.embedding_size
          + 8 * pred * config.vocab_size)


def memory_per_replica(config, params):
  """{static, casts, casts_no_xla, per_sequence} bytes: float32 weights, 2
  LAMB slots and gradients (16 bytes/parameter); the bf16 copies of the
  weights, one under XLA (it merges the L layers' identical casts of the
  shared block: checked on a toy graph's optimized HLO) and L of the shared
  block without it (each layer call's cast lives until its backward);
  activations per sequence."""
  h, i = config.hidden_size, config.intermediate_size
  block = 4 * h * h + 2 * h * i + 9 * h + i  # + biases and 2 LayerNorms
  return {"static": 16 * params, "casts": 2 * params,
          "casts_no_xla": 2 * (params + (config.num_hidden_layers - 1)
                               * block),
          "per_sequence": activation_bytes_per_sequence(config)}


def max_batch(memory, replica_gb, overhead=1.0, headroom=0.9):
  """Largest power-of-2 per-replica batch (0 if none) whose memory under XLA
  fits `headroom` of the replica's, the activations times `overhead` (the
  measured step peak over the formula: the backward pass's own buffers)."""
  room = headroom * replica_gb * GB - memory["static"] - memory["casts"]
  per_sequence = overhead * memory["per_sequence"]
  batch = 0
  while room >= (2 * batch or 1) * per_sequence:
    batch = 2 * batch or 1
  return batch


# ----------------------------------------------------------------- tables
def flops_table(configs, params):
  rows = ["| preset | distinct parameters | weights run per token | "
          "TFLOP per sequence (dense + attention + heads) | PFLOP per step "
          f"({BATCH} x {SEQ}) |", "|---|---:|---:|---|---:|"]
  for name, config in configs.items():
    f = train_flops_per_sequence(config)
    rows.append(
        f"| {name} | {params[name] / 1e6:.1f}M | "
        f"{weights_per_token(config) / 1e6:.1f}M | {f['total'] / 1e12:.3f} "
        f"({f['dense'] / 1e12:.3f} + {f['attention'] / 1e12:.3f} + "
        f"{f['heads'] / 1e12:.4f}) | {BATCH * f['total'] / 1e15:.2f} |")
  return "\n".join(rows)


def memory_table(configs, params, overhead):
  head = " | ".join(f"batch/replica {s.name} ({s.replica_gb:.0f} GB)"
                    for s in SETUPS)
  rows = [f"| preset | weights + LAMB slots + grads | bf16 weight copies, "
          f"XLA (without) | activations per sequence | {head} |",
          "|---|---:|---:|---:|" + "---:|" * len(SETUPS)]
  for name, config in configs.items():
    m = memory_per_replica(config, params[name])
    fits = " | ".join(str(max_batch(m, s.replica_gb, overhead))
                      for s in SETUPS)
    rows.append(f"| {name} | {m['static'] / GB:.2f} GB | "
                f"{m['casts'] / GB:.2f} ({m['casts_no_xla'] / GB:.2f}) GB | "
                f"{m['per_sequence'] / GB:.3f} GB | {fits} |")
  return "\n".join(rows)


def step_seconds(config, setup, mfu):
  return BATCH * train_flops_per_sequence(config)["total"] / (
      setup.replicas * setup.replica_tflops * 1e12 * mfu)


def _duration(seconds):
  hours = seconds / 3600
  return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} d"


def step_time_table(configs, cpu_mfu):
  lo, hi = ASSUMED_MFU
  rows = [f"| preset | setup | s/step at CPU MFU {cpu_mfu:.0%} | s/step at "
          f"{lo:.0%}-{hi:.0%} MFU | {STEPS // 1000}k steps at "
          f"{lo:.0%}-{hi:.0%} |", "|---|---|---:|---:|---:|"]
  for name, config in configs.items():
    for setup in SETUPS:
      slow, fast = (step_seconds(config, setup, m) for m in (lo, hi))
      rows.append(
          f"| {name} | {setup.name} | "
          f"{step_seconds(config, setup, cpu_mfu):.2f} | {fast:.2f}-{slow:.2f}"
          f" | {_duration(fast * STEPS)} - {_duration(slow * STEPS)} |")
  return "\n".join(rows)


def input_table(configs, records_per_core_s):
  hi = ASSUMED_MFU[1]
  rows = [f"| preset | setup | records/s needed at {hi:.0%} MFU | input "
          f"cores needed (at {records_per_core_s:,.0f} records/s/core) | "
          "vCPUs per host |", "|---|---|---:|---:|---:|"]
  for name, config in configs.items():
    for setup in SETUPS:
      needed = BATCH / step_seconds(config, setup, hi)
      cores = needed / records_per_core_s
      rows.append(f"| {name} | {setup.name} | {needed:,.0f} | {cores:.2f} "
                  f"({cores / setup.hosts:.2f} per host) | "
                  f"{setup.host_cpus} |")
  return "\n".join(rows)


# ---------------------------------------------------------------- measuring
def write_records(path, num, seed=0):
  """`num` pretraining records of SEQ tokens, 10% shorter. The ids are
  spread over the smallest preset vocabulary (21128), as real ids are:
  their varint sizes decide the parse cost."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.core import features  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(num):
      n = SEQ if rng.random() > 0.1 else int(rng.integers(2 * PRED, SEQ))
      pad = lambda a: np.pad(a, (0, SEQ - len(a)))
      positions = np.sort(rng.choice(np.arange(1, n - 1), PRED, False))
      writer.write(features.make_pretraining_example(
          input_ids=pad(rng.integers(5, 21128, n)),
          input_mask=pad(np.ones(n, np.int64)),
          segment_ids=pad((np.arange(n) > n // 2).astype(np.int64)),
          token_boundary=pad(np.ones(n, np.int64)),
          masked_lm_positions=positions,
          masked_lm_ids=rng.integers(5, 21128, PRED),
          masked_lm_weights=np.ones(PRED, np.float32),
          next_sentence_label=int(rng.integers(0, 2))).SerializeToString())
  return path


def decode_rate(files, batches=150, batch_size=128):
  """Records/s of the training input pipeline over `files` (this process's
  cores), after 20 warm-up batches fill the shuffle buffer."""
  from albert_tf.data import pretraining_dataset  # pylint: disable=g-import-not-at-top
  dataset = pretraining_dataset.make_dataset(
      files, batch_size, SEQ, PRED, is_training=True, seed=0)
  it = iter(dataset)
  times = common.time_calls(lambda: next(it), batches, warmup=20)
  return batches * batch_size / sum(times)


def _child(flag, value, **kwargs):
  """Runs this script with `flag value` (a hidden flag); its last line."""
  out = subprocess.run(
      [sys.executable, "-m", "benchmarks.scaling_table", flag, value],
      check=True, capture_output=True, text=True, **kwargs)
  return float(out.stdout.strip().splitlines()[-1])


def _pretrainer(preset, batch, files):
  """(compiled AlbertPretrainer, its make_dataset input, FLOPs per step)."""
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  from albert_tf.data import pretraining_dataset  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertPretrainer  # pylint: disable=g-import-not-at-top
  from albert_tf.training import optimization  # pylint: disable=g-import-not-at-top
  keras.mixed_precision.set_global_policy("float32")
  config = AlbertConfig.from_preset(preset)
  model = AlbertPretrainer(config)
  model.compile(optimizer=optimization.create_optimizer(
      "lamb", optimization.WarmupPolynomialDecay(1e-4, 10**6, 10)),
                jit_compile=False)
  data = pretraining_dataset.make_dataset(files, batch, SEQ, PRED, seed=0)
  return model, data, batch * train_flops_per_sequence(config)["total"]


def train_step_and_peak(preset, batch, files, rounds=3):
  """[(our training step's GFLOP/s, matmul peak GFLOP/s)] per round.

  The step is ours as the CPU configs run it (float32, no XLA): Keras `fit`
  of AlbertPretrainer with LAMB over make_dataset. Each round times one step
  and then the float32 2048^2 matmul (best of 10), so that the other
  processes of a shared machine slow both alike and their ratio holds.
  """
  model, data, flops = _pretrainer(preset, batch, files)
  model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)  # trace, build
  results = []
  for _ in range(rounds):
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    step = flops / (time.perf_counter() - start) / 1e9
    results.append((step, common.matmul_peak_gflops("float32",
                                                    repetitions=10)))
  return results


def _memory_child(spec):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  preset, batch, *files = spec.split(",")
  model, data, _ = _pretrainer(preset, int(batch), files)
  model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)  # trace, build
  tf.config.experimental.reset_memory_stats("CPU:0")
  model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
  print(tf.config.experimental.get_memory_info("CPU:0")["peak"])


def measure(step_preset, step_batch, memory_batches):
  """MEASURED's fields, measured on this machine now."""
  with open("/proc/loadavg") as f:
    load = f.read().split()[:3]
  folder = tempfile.mkdtemp(prefix="scaling_table_")
  try:
    files = [write_records(os.path.join(folder, f"part-{i}.tfrecord"), 1024,
                           i) for i in range(4)]
    rounds = train_step_and_peak(step_preset, step_batch, files)
    # decode_rate in a child pinned to one CPU: TF sizes its thread pools
    # to the CPUs it may run on.
    decode = _child("--decode_files", ",".join(files), preexec_fn=lambda: (
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})))
    small, large = memory_batches
    # The peak bytes of one step, in a child whose CPU allocator is TF's BFC
    # allocator (it keeps the statistics).
    peak_bytes = [
        _child("--memory_child", f"{step_preset},{b},{','.join(files)}",
               env={**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true"})
        for b in (small, large)]
  finally:
    shutil.rmtree(folder, ignore_errors=True)
  with open("/proc/loadavg") as f:
    load += f.read().split()[:3]
  return {"cpu": common.machine(), "load": f"loadavg before {load[:3]}, "
          f"after {load[3:]}",
          "matmul_gflops": max(peak for _, peak in rounds),
          "step": {"preset": step_preset, "batch": step_batch,
                   "gflops": max(step for step, _ in rounds),
                   "mfu": statistics.median(s / p for s, p in rounds),
                   "rounds": rounds},
          "decode_records_per_core_s": decode,
          "step_memory": {"batches": [small, large], "peak_bytes": peak_bytes,
                          "per_sequence": (peak_bytes[1] - peak_bytes[0])
                                          / (large - small)}}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--measure", action="store_true",
                      help="measure matmul peak, train step and decode rate")
  parser.add_argument("--step_preset", default="albert_base_v2")
  parser.add_argument("--step_batch", type=int, default=2)
  parser.add_argument("--memory_batches", default="1,3",
                      help="two batches whose peak memory is compared")
  parser.add_argument("--decode_files", help=argparse.SUPPRESS)
  parser.add_argument("--memory_child", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.decode_files:  # the pinned child of measure
    print(decode_rate(args.decode_files.split(",")))
    return
  if args.memory_child:  # a child of measure
    _memory_child(args.memory_child)
    return
  measured = MEASURED
  if args.measure:
    measured = measure(args.step_preset, args.step_batch,
                       [int(b) for b in args.memory_batches.split(",")])
  print(json.dumps(measured, indent=2))
  cpu_mfu = measured["step"]["mfu"]
  print(f"\nCPU MFU ({measured['step']['preset']}, seq {SEQ}, batch "
        f"{measured['step']['batch']}): {cpu_mfu:.1%}")
  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import PRESETS
  from albert_tf.params import parameter_table
  memory = measured["step_memory"]
  # The measured float32 step peak per sequence over the formula's.
  overhead = memory["per_sequence"] / activation_bytes_per_sequence(
      PRESETS[measured["step"]["preset"]], dtype_bytes=4)
  print(f"Peak TF memory of a step per extra sequence (float32, batches "
        f"{memory['batches']}): {memory['per_sequence'] / GB:.3f} GB, "
        f"x{overhead:.2f} the formula's at 4 bytes (applied to the batch "
        "columns)\n")
  params = {name: c["pretrainer"] for name, c in
            parameter_table(PRESET_NAMES + COMPARE).items()}
  configs = {name: PRESETS[name] for name in PRESET_NAMES}
  print(flops_table({name: PRESETS[name] for name in PRESET_NAMES + COMPARE},
                    params), "\n")
  print(memory_table(configs, params, overhead), "\n")
  print(step_time_table(configs, cpu_mfu), "\n")
  print(input_table(configs, measured["decode_records_per_core_s"]))


if __name__ == "__main__":
  main()
