"""Precision and distribution strategy, the same for every command.

* `canonical_precision` / `dtype_policy`: --mixed_precision takes
  none|bfloat16|float16 everywhere; the Keras policy names (float32,
  mixed_bfloat16, mixed_float16) are accepted as aliases.
* `make_strategy` / `is_chief`: --distribution_strategy
  (`options.StrategySettings` defines that flag, --tpu, --num_gpus and the
  original TPU flags once for the training commands, without TF).
"""

import contextlib
from typing import List, Optional

from absl import logging
import keras
import tensorflow as tf

from albert_tf.options import PRECISIONS
from albert_tf.options import STRATEGIES


class RunConfigError(ValueError):
  """Flags that do not fit together; the message names the flag or file."""


# ------------------------------------------------------------ precision
_PRECISION_ALIASES = {"": "none", "float32": "none",
                      "mixed_bfloat16": "bfloat16",
                      "mixed_float16": "float16"}
_KERAS_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                   "float16": "mixed_float16"}


def canonical_precision(name: Optional[str]) -> str:
  """none|bfloat16|float16 from any accepted spelling (None means none)."""
  value = _PRECISION_ALIASES.get(name or "", name or "none")
  if value not in PRECISIONS:
    raise RunConfigError(
        f"--mixed_precision must be one of {', '.join(PRECISIONS)} (or "
        f"{', '.join(k for k in _PRECISION_ALIASES if k)}), got {name!r}")
  return value


@contextlib.contextmanager
def dtype_policy(precision: Optional[str]):
  """Sets the global Keras dtype policy for a run and restores it after."""
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(_KERAS_POLICIES[canonical_precision(precision)])
  try:
    yield
  finally:
    keras.config.set_dtype_policy(previous)


# ------------------------------------------------------------ strategy
# The strategy flags and their choices are defined without TF in
# training/options.py, so that a command parses them before TF loads.


ORIGINAL_TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project",
                      "num_tpu_cores")


def strategy_from_flags(distribution_strategy: str, tpu: Optional[str] = None,
                        num_gpus: int = 0, use_tpu: bool = False,
                        tpu_name: Optional[str] = None,
                        tpu_zone: Optional[str] = None,
                        gcp_project: Optional[str] = None,
                        num_tpu_cores: Optional[int] = None):
  """make_strategy, with the original --use_tpu/--tpu_name/... folded in."""
  if use_tpu:
    if distribution_strategy not in ("default", "tpu"):
      raise RunConfigError(f"--use_tpu and --distribution_strategy="
                           f"{distribution_strategy} contradict each other")
    distribution_strategy = "tpu"
  if num_tpu_cores:
    logging.info("--num_tpu_cores=%d is ignored: the TPU strategy uses every "
                 "core of the TPU it connects to", num_tpu_cores)
  return make_strategy(distribution_strategy, tpu or tpu_name, num_gpus,
                       tpu_zone=tpu_zone, gcp_project=gcp_project)


def make_strategy(name: str, tpu: Optional[str] = None, num_gpus: int = 0,
                  tpu_zone: Optional[str] = None,
                  gcp_project: Optional[str] = None):
  """The tf.distribute strategy for --distribution_strategy.

  mirrored without GPUs mirrors over the logical CPUs (how the tests run it);
  multi_worker_mirrored reads the cluster from TF_CONFIG.
  """
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":
    devices = None
    if num_gpus:
      devices = [f"/gpu:{i}" for i in range(num_gpus)]
    elif not tf.config.list_logical_devices("GPU"):
      devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  if name == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu or "", zone=tpu_zone, project=gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise RunConfigError(f"--distribution_strategy must be one of "
                       f"{', '.join(STRATEGIES)}, got {name!r}")


def is_chief(strategy) -> bool:
  """Whether this process writes logs, checkpoints and results."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or (
      resolver is None or not resolver.task_type):
    return True
  return (resolver.task_type == "chief" or
          (resolver.task_type == "worker" and resolver.task_id == 0 and
           "chief" not in resolver.cluster_spec().as_dict()))


def warn_about_cpu_only_settings(jit_compile: bool) -> List[str]:
  """One warning line each for settings that only pay off on an
  accelerator, when there is none; returns the lines.

  float16 (Keras's mixed_float16 policy): a CPU has no float16 matmul units,
  so the step is slower than float32. --jit_compile: XLA compiles the step
  for the CPU, minutes for a large model, and seldom speeds it up there.
  """
  if (tf.config.list_logical_devices("GPU") or
      tf.config.list_logical_devices("TPU")):
    return []
  lines = []
  if keras.config.dtype_policy().name == "mixed_float16":
    lines.append("--mixed_precision=float16 without a GPU: CPUs have no "
                 "float16 matmul units, so every step is slower than "
                 "float32; use --mixed_precision=none (or bfloat16 on a CPU "
                 "with AMX or avx512_bf16)")
  if jit_compile:
    lines.append("--jit_compile without a GPU or TPU: XLA compiles the step "
                 "for the CPU (minutes for a large model) and seldom makes "
                 "it faster there; leave --jit_compile out")
  for line in lines:
    logging.warning("%s", line)
  return lines
