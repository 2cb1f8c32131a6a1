"""Helpers shared by the benchmarks: machine description, timing, FLOP counts."""

import os
import platform
import statistics
import time


def machine():
  """One line naming the machine the figures were measured on."""
  cpu = platform.processor() or "cpu"
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices("GPU")
  return (f"{cpu}, {os.cpu_count()} cores, TF {tf.__version__}"
          + (f", {len(gpus)} GPU(s)" if gpus else ", no GPU"))


def time_calls(fn, repetitions, warmup=1):
  """Seconds per call of `fn` over `repetitions` timed calls (after warm-up)."""
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repetitions):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def time_alternately(fns, repetitions):
  """{name: seconds per call} of every fn in `fns` ({name: fn}), called in
  turn `repetitions` times, so that drifting machine load hits all alike."""
  times = {name: [] for name in fns}
  for _ in range(repetitions):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return times


def summary(values):
  """(median, relative spread as (max-min)/median) of a list of numbers."""
  med = statistics.median(values)
  return med, (max(values) - min(values)) / med if med else 0.0


def encoder_flops_per_sequence(config, seq_length):
  """Multiply-adds x 2 of one encoder forward pass (embedding lookups free)."""
  h, i, e = config.hidden_size, config.intermediate_size, config.embedding_size
  per_layer = 2 * seq_length * (4 * h * h + 2 * h * i) + 4 * seq_length ** 2 * h
  projection = 2 * seq_length * e * h if e != h else 0
  return config.num_hidden_layers * per_layer + projection + 2 * h * h


def matmul_peak_gflops(dtype="float32", n=2048, repetitions=5):
  """Measured GFLOP/s of an n x n matmul in TF on this machine."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.normal([n, n], dtype=tf.float32)
  a = tf.cast(a, dtype)
  fn = tf.function(lambda: tf.matmul(a, a))
  times = time_calls(lambda: fn().numpy(), repetitions, warmup=2)
  return 2 * n ** 3 / min(times) / 1e9


def cpu_bf16_features(path="/proc/cpuinfo"):
  """{"amx_bf16": bool, "avx512_bf16": bool} from the CPU flags (False if
  unknown)."""
  flags_line = ""
  try:
    with open(path, encoding="utf-8") as f:
      for line in f:
        if line.startswith("flags"):
          flags_line = line
          break
  except OSError:
    pass
  words = set(flags_line.split())
  return {name: name in words for name in ("amx_bf16", "avx512_bf16")}


def write_atomically(path, text):
  """Writes `text` to `path` whole or not at all (file_io.atomic_writer)."""
  from albert_tf.core import file_io  # pylint: disable=g-import-not-at-top
  with file_io.atomic_writer(path) as f:
    f.write(text)


def cpu_label(cpuinfo_text=None):
  """A short name for the CPU in file names: its first two model words and
  its widest matrix/vector unit, e.g. "amd-epyc-avx512"."""
  if cpuinfo_text is None:
    try:
      with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpuinfo_text = f.read()
    except OSError:
      cpuinfo_text = ""
  name, cpu_flags = platform.processor() or "cpu", set()
  for line in cpuinfo_text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "model name":
      name = value.strip()
    elif key.strip() == "flags":
      cpu_flags = set(value.split())
    if name != "cpu" and cpu_flags:
      break
  level = next((unit for unit, flag in (("amx", "amx_bf16"),
                                       ("avx512", "avx512f"),
                                       ("avx2", "avx2")) if flag in cpu_flags),
               None)
  name = name.lower().replace("(r)", "").replace("(tm)", "")
  words = [w for w in name.split() if w.isalnum()][:2]
  return "-".join(words + ([level] if level else [])) or "cpu"


def cpu_units(cpuinfo_text=None):
  """The CPU's wide units, e.g. "AVX-512, avx512_bf16, no AMX"."""
  if cpuinfo_text is None:
    try:
      with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpuinfo_text = f.read()
    except OSError:
      return "unknown units"
  cpu_flags = set()
  for line in cpuinfo_text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "flags":
      cpu_flags = set(value.split())
      break
  units = ["AVX-512" if "avx512f" in cpu_flags else
           "AVX2" if "avx2" in cpu_flags else "no AVX2"]
  if "avx512_bf16" in cpu_flags:
    units.append("avx512_bf16")
  units.append("AMX" if "amx_bf16" in cpu_flags else "no AMX")
  return ", ".join(units)

