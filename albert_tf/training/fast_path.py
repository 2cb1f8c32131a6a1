"""The CPU fast path's flags, checked and decided once for every training command.

    fast_path.check("auto", 4, "auto")            # before anything runs
    decided = fast_path.resolve("auto", 4, "auto", output_dir="out",
                                overwrite=False, tpu=False, num_gpus=0,
                                strategy="default", batch_size=32)
    decided.mixed_precision, decided.length_buckets, decided.micro_batches

The rules are the flags' help (`albert_tf.core.options`): a resumed run
keeps the precision its run_fingerprint.json records (its checkpoints and
loss-scale state belong to it); a TPU, which compiles one static shape,
takes no length buckets; TF's thread pools are set here for the
micro-batches. One log line says what each became and why. run_pretraining
and every fine-tuning family (`albert_tf.finetune`) call `check` and
`resolve_options`.
"""

import dataclasses
from typing import Optional

from absl import logging

from albert_tf.training import micro_batches as micro_batches_lib
from albert_tf.training import output_dir as output_dir_lib
from albert_tf.training import runtime


@dataclasses.dataclass(frozen=True)
class FastPath:
  """What the three flags came to for this run."""
  mixed_precision: str  # none|bfloat16|float16
  length_buckets: int   # 0 or 1: every batch at max_seq_length
  micro_batches: int    # parts per batch, >= 1


def check(mixed_precision: str, length_buckets: int,
          micro_batches: str) -> None:
  """ValueError naming the flag for a value one of the three refuses."""
  if length_buckets < 0:
    raise ValueError(f"--length_buckets must be 0 or more, got "
                     f"{length_buckets}")
  runtime.canonical_precision(mixed_precision, auto=True)
  micro_batches_lib.parse(micro_batches)


def say_length_buckets(length_buckets: int, max_seq_length: int) -> None:
  """Logs the widths --length_buckets gives at this length (a warning when
  they are fewer than asked: they are multiples of 8)."""
  if length_buckets <= 1:
    return
  from albert_tf.data.length_buckets import bucket_widths  # pylint: disable=g-import-not-at-top
  widths = bucket_widths(max_seq_length, length_buckets)
  line = (f"--length_buckets={length_buckets}: batches cut to the widths "
          f"{', '.join(map(str, widths))}")
  if len(widths) < length_buckets:
    logging.warning("%s, %d bucket(s), not %d: widths are multiples of 8 up "
                    "to --max_seq_length=%d", line, len(widths),
                    length_buckets, max_seq_length)
  else:
    logging.info("%s", line)


def resolve(mixed_precision: str, length_buckets: int, micro_batches: str,
            *, output_dir: Optional[str], overwrite: bool, tpu: bool,
            num_gpus: int, strategy: str, batch_size: int,
            cpuinfo: str = "/proc/cpuinfo") -> FastPath:
  """The flags decided for this machine and output_dir, each logged; TF's
  thread pools set for the micro-batches."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = max(num_gpus, len(tf.config.list_physical_devices("GPU")))
  if mixed_precision == runtime.AUTO:
    recorded = None if overwrite or not output_dir else (
        output_dir_lib.recorded_precision(output_dir))
    if recorded:
      precision, why = recorded, f"as the run in --output_dir={output_dir}"
    else:
      precision, why = runtime.auto_precision(tpu=tpu, gpus=gpus,
                                              cpuinfo=cpuinfo)
    logging.info("--mixed_precision=auto: %s (%s)", precision, why)
  else:
    precision = runtime.canonical_precision(mixed_precision)
  if length_buckets > 1 and tpu:
    logging.warning("--length_buckets=%d ignored: a TPU compiles one static "
                    "sequence length", length_buckets)
    length_buckets = 0
  count, why = micro_batches_lib.resolve(
      micro_batches, tpu=tpu, gpus=gpus, strategy=strategy,
      batch_size=batch_size)
  logging.info("--micro_batches=%s: %d (%s)", micro_batches, count, why)
  line = micro_batches_lib.configure_threads(count)
  if line:
    logging.info("%s", line)
  return FastPath(precision, length_buckets, count)


def resolve_options(o):
  """A training command's options with the three flags decided."""
  decided = resolve(
      o.mixed_precision, o.length_buckets, o.micro_batches,
      output_dir=o.output_dir, overwrite=o.overwrite,
      tpu=o.use_tpu or o.distribution_strategy == "tpu", num_gpus=o.num_gpus,
      strategy=o.distribution_strategy, batch_size=o.train_batch_size)
  return dataclasses.replace(o, mixed_precision=decided.mixed_precision,
                             length_buckets=decided.length_buckets,
                             micro_batches=str(decided.micro_batches))
