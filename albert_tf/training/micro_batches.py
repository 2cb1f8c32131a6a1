"""Micro-batches on a CPU: a training batch as independent parts, one core each.

    count, why = micro_batches.resolve("auto", tpu=False, gpus=0,
                                       strategy="default", batch_size=32)
    micro_batches.configure_threads(count)   # before TF runs its first op

A small model's training step on a CPU is a chain of ops too small to
split well over several threads. Cut into `count` parts that share nothing
until the loss, it is `count` chains that TF runs side by side, each op on
cores // count threads. The loss and gradients are the whole batch's (the
parts' outputs are joined before the loss): only the order of some float
sums changes. On the demo's model on 2 cores of an AMD EPYC, 2 parts took
the step from 791-803 to 1,016-1,065 examples/s (benchmarks/README.md,
"Pretraining on a CPU").
"""

import os
from typing import Tuple


AUTO = "auto"
# Fewer examples per part than this and the per-op overhead wins.
MIN_PART = 8


def parse(value: str) -> int:
  """The count --micro_batches asks for: 0 for auto, else N >= 1."""
  if value == AUTO:
    return 0
  try:
    count = int(value)
  except ValueError:
    count = 0
  if count < 1:
    raise ValueError(f"--micro_batches must be auto or a whole number >= 1, "
                     f"got {value!r}")
  return count


def cores() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def resolve(value: str, tpu: bool, gpus: int, strategy: str,
            batch_size: int) -> Tuple[int, str]:
  """(count, why) for --micro_batches: auto is 2 on a CPU-only run of the
  default strategy with 2 or more cores and at least 2 * MIN_PART examples
  per batch, else 1."""
  count = parse(value)
  if count:
    return count, "as --micro_batches says"
  if tpu or gpus:
    return 1, "an accelerator runs the whole batch"
  if strategy not in ("default", "one_device", ""):
    return 1, f"--distribution_strategy={strategy} splits the batch already"
  if cores() < 2:
    return 1, "one core"
  if batch_size < 2 * MIN_PART:
    return 1, f"batches of {batch_size} (under {2 * MIN_PART})"
  return 2, f"a CPU run on {cores()} cores"


def configure_threads(count: int) -> str:
  """Sets TF's thread pools for `count` parts (nothing for 1); the line to
  log. After TF's first op the pools stay as they are, and it says so."""
  if count <= 1:
    return ""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  intra, inter = max(1, cores() // count), count
  try:
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
  except RuntimeError:
    return (f"{count} micro-batches per step; TF's thread pools were already "
            f"set in this process, so they stay as they are")
  return (f"{count} micro-batches per step, each op on {intra} thread(s), "
          f"{inter} ops at once")
