"""Precision and distribution strategy, the same for every command (their
flags are `options.StrategySettings` and --mixed_precision, defined without
TF)."""

import contextlib
import json
import os
import signal
import socket
import threading
import time
from typing import List, Optional, Tuple

from absl import flags
from absl import logging
import keras
import tensorflow as tf

from albert_tf.core import errors
from albert_tf.core.options import PRECISIONS
from albert_tf.core.options import STRATEGIES


class RunConfigError(ValueError):
  """Flags that do not fit together; the message names the flag or file."""


# ------------------------------------------------------------ precision
AUTO = "auto"
_PRECISION_ALIASES = {"": "none", "float32": "none",
                      "mixed_bfloat16": "bfloat16",
                      "mixed_float16": "float16"}
_KERAS_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                   "float16": "mixed_float16"}


def canonical_precision(name: Optional[str], auto: bool = False) -> str:
  """none|bfloat16|float16 from any accepted spelling (None: none); auto:
  "auto" (a training command's, `training.fast_path`) is returned as is."""
  if auto and name == AUTO:
    return AUTO
  value = _PRECISION_ALIASES.get(name or "", name or "none")
  if value not in PRECISIONS:
    raise RunConfigError(
        f"--mixed_precision must be {'auto or ' if auto else ''}one of "
        f"{', '.join(PRECISIONS)} (or "
        f"{', '.join(k for k in _PRECISION_ALIASES if k)}), got {name!r}")
  return value


def cpu_bf16_units(path: str = "/proc/cpuinfo") -> List[str]:
  """The CPU's bfloat16 matmul units by their /proc/cpuinfo flags (amx_bf16,
  avx512_bf16); [] when it has none or the file cannot be read."""
  try:
    with open(path, encoding="utf-8") as f:
      words = next((line.split() for line in f
                    if line.startswith("flags")), [])
  except OSError:
    return []
  return [name for name in ("amx_bf16", "avx512_bf16") if name in words]


def auto_precision(tpu: bool = False, gpus: Optional[int] = None,
                   cpuinfo: str = "/proc/cpuinfo") -> Tuple[str, str]:
  """(precision, why) for --mixed_precision=auto: bfloat16 on a TPU and on
  a CPU with bf16 units (where a bf16 matmul runs about twice the float32
  rate), none on a GPU (float16 or bfloat16 is the user's choice there:
  float16 needs loss scaling, bfloat16 an Ampere or later) and on a CPU
  without them (bf16 is emulated there, slower than float32)."""
  if tpu:
    return "bfloat16", "a TPU"
  if gpus is None:
    gpus = len(tf.config.list_physical_devices("GPU"))
  if gpus:
    return "none", (f"{gpus} GPU(s): pass --mixed_precision=float16 or "
                    "bfloat16 to use their half-precision units")
  units = cpu_bf16_units(cpuinfo)
  if units:
    return "bfloat16", f"this CPU has bf16 units ({', '.join(units)})"
  return "none", ("this CPU has no bf16 units (no amx_bf16 or avx512_bf16 "
                  "in /proc/cpuinfo): bf16 would be emulated, slower")


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

def strategy_from_flags(distribution_strategy: str, tpu: Optional[str] = None,
                        num_gpus: int = 0, use_tpu: bool = False,
                        tpu_name: Optional[str] = None,
                        tpu_zone: Optional[str] = None,
                        gcp_project: Optional[str] = None,
                        num_tpu_cores: Optional[int] = None,
                        worker_timeout_secs: Optional[int] = None):
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
                       tpu_zone=tpu_zone, gcp_project=gcp_project,
                       worker_timeout_secs=worker_timeout_secs)


def make_strategy(name: str, tpu: Optional[str] = None, num_gpus: int = 0,
                  tpu_zone: Optional[str] = None,
                  gcp_project: Optional[str] = None,
                  worker_timeout_secs: Optional[int] = None):
  """The tf.distribute strategy for --distribution_strategy.

  mirrored without GPUs mirrors over the logical CPUs (how the tests run it);
  multi_worker_mirrored reads the cluster from TF_CONFIG, after every peer
  there accepts connections (`wait_for_workers`, within worker_timeout_secs;
  None: the command's --worker_timeout_secs flag, else the default).
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
    if worker_timeout_secs is None:
      worker_timeout_secs = (
          flags.FLAGS.worker_timeout_secs if "worker_timeout_secs" in
          flags.FLAGS and flags.FLAGS.is_parsed()
          else DEFAULT_WORKER_TIMEOUT_SECS)
    wait_for_workers(worker_timeout_secs)
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu or "", zone=tpu_zone, project=gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise RunConfigError(f"--distribution_strategy must be one of "
                       f"{', '.join(STRATEGIES)}, got {name!r}")


# ------------------------------------------------------------ workers
DEFAULT_WORKER_TIMEOUT_SECS = 600  # options.StrategySettings' default
WAIT_LOG_SECS = 5.0  # a "waiting for worker" line this often
_PROBE_SECS = 0.5    # a connect to each missing peer this often


class WorkerTimeoutError(ValueError):
  """A TF_CONFIG peer did not come up within --worker_timeout_secs."""


def tf_config_peers(tf_config: Optional[str] = None
                    ) -> Tuple[Optional[str], List[Tuple[str, str]]]:
  """(this task's "host:port" or None, [(job, "host:port") of the others])
  from TF_CONFIG (tf_config: its text; None reads the environment)."""
  text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
  try:
    config = json.loads(text or "{}")
  except json.JSONDecodeError as e:
    raise RunConfigError(f"TF_CONFIG is not JSON ({e}): expected "
                         '{"cluster": {"worker": ["host:port", ...]}, '
                         '"task": {"type": "worker", "index": 0}}') from None
  task = config.get("task") or {}
  own = None
  tasks = []
  for job, addresses in (config.get("cluster") or {}).items():
    if isinstance(addresses, dict):  # a sparse cluster: {index: address}
      addresses = [addresses[k] for k in sorted(addresses, key=int)]
    for index, address in enumerate(addresses):
      if job == task.get("type") and index == int(task.get("index", 0)):
        own = address
      else:
        tasks.append((job, address))
  return own, [(job, a) for job, a in tasks if a != own]


def _host_port(address: str) -> Tuple[str, int]:
  host, _, port = address.rpartition(":")
  return host.strip("[]"), int(port)


def _accepts(address: str, timeout: float) -> bool:
  try:
    with socket.create_connection(_host_port(address), timeout=timeout):
      return True
  except (OSError, ValueError):
    return False


def _listen_meanwhile(address: Optional[str]):
  """A socket on this task's port while it waits, so that waiting peers see
  it up (closed before TF's server takes the port); None when taken."""
  if not address:
    return None
  try:
    return socket.create_server(("", _host_port(address)[1]), backlog=128)
  except (OSError, ValueError) as e:
    logging.info("not listening on %s while waiting for the other workers: "
                 "%s", address, e)
    return None


@contextlib.contextmanager
def handling(signals, handler):
  """`handler` for `signals` during the block (in the main thread only)."""
  previous = {}
  if threading.current_thread() is threading.main_thread():
    previous = {s: signal.signal(s, handler) for s in signals}
  try:
    yield
  finally:
    for s, old in previous.items():
      signal.signal(s, old)


def wait_for_workers(timeout_secs: float, tf_config: Optional[str] = None,
                     log_every_secs: float = WAIT_LOG_SECS) -> None:
  """Returns when every other TF_CONFIG task accepts connections.

  TF's own start-up of multi_worker_mirrored waits for a peer that never
  comes up forever, silently. Here the missing ones are logged every
  log_every_secs, and after timeout_secs (<= 0: no limit) a
  WorkerTimeoutError names them and the flag. SIGTERM or Ctrl-C ends the
  wait (errors.Interrupted).
  """
  own, peers = tf_config_peers(tf_config)
  if not peers:
    return
  pending = list(peers)

  def missing():
    return ", ".join(f"{job} {address}" for job, address in pending)

  def stop(signum, frame):  # errors.Interrupted: one line, exit 143 / 130
    del frame
    name = signal.Signals(signum).name
    raise errors.Interrupted(f"stopped by {name} while waiting for "
                             f"{missing()}", name)
  listener = _listen_meanwhile(own)
  start = time.monotonic()
  next_log = start + min(log_every_secs, _PROBE_SECS * 2)
  try:
    with handling((signal.SIGTERM, signal.SIGINT), stop):
      while True:
        pending = [(job, address) for job, address in pending
                   if not _accepts(address, _PROBE_SECS)]
        if not pending:
          break
        now = time.monotonic()
        waited = now - start
        if timeout_secs > 0 and waited >= timeout_secs:
          raise WorkerTimeoutError(
              f"{missing()} (TF_CONFIG) did not come up within "
              f"--worker_timeout_secs={timeout_secs:g} seconds: "
              f"{len(pending)} of {len(peers)} peer(s) refuse connections; "
              "start them, check the addresses (and firewalls), or raise "
              "--worker_timeout_secs (0: wait forever)")
        if now >= next_log:
          logging.warning(
              "waiting for %s (%d of %d peer(s) not up; %.0f s of "
              "--worker_timeout_secs=%s)", missing(), len(pending),
              len(peers), waited, f"{timeout_secs:g}" if timeout_secs > 0
              else "0, no limit")
          next_log = now + log_every_secs
        time.sleep(_PROBE_SECS)
  finally:
    if listener is not None:
      listener.close()
  logging.info("all %d peer(s) of TF_CONFIG accept connections", len(peers))


def is_chief(strategy) -> bool:
  """Whether this process writes logs, checkpoints and results."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or (
      resolver is None or not resolver.task_type):
    return True
  return (resolver.task_type == "chief" or
          (resolver.task_type == "worker" and resolver.task_id == 0 and
           "chief" not in resolver.cluster_spec().as_dict()))


_AGREE = {}


def agree_max(strategy, value: float) -> float:
  """The largest of the workers' values: every worker of a multi-worker
  run then plans, stops and saves alike (elsewhere, the value itself)."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return value
  if id(strategy) not in _AGREE:
    @tf.function
    def reduce_max(x):
      # tf.distribute reduces by SUM or MEAN only: every worker's value
      # gathered, then the largest. Made on each replica's device (the
      # collective refuses an input from outside, which has none).
      return strategy.run(lambda: tf.reduce_max(
          tf.distribute.get_replica_context().all_gather(
              tf.reshape(tf.identity(x), [1]), axis=0)))
    _AGREE[id(strategy)] = reduce_max
  out = _AGREE[id(strategy)](tf.constant(float(value)))
  return float(strategy.experimental_local_results(out)[0])


def warn_about_cpu_only_settings(jit_compile: bool) -> List[str]:
  """Logs and returns a warning line for each setting that only pays off on
  an accelerator (float16, --jit_compile), when there is none."""
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
