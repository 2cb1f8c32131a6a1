"""Length buckets: training batches cut to the width their rows need.

    widths = bucket_widths(128, 4)                  # [32, 64, 96, 128]
    order = window_sorted(order, lengths, first_step=0, seed=1)
    batch = cut_to_width(batch, width_of(batch[F.INPUT_MASK], widths),
                         F.ENCODER_INPUTS)

A batch padded to max_seq_length spends most of its step on padding when
the texts are short. Cut to the smallest of a few widths that holds its
longest row, it computes the same outputs at the real positions (the
attention mask already kept the padding out), in a fraction of the time;
a few widths, not every length, so that a traced step meets few shapes.

Pretraining's stream batches by bucket
(`pretraining_dataset.group_by_length`); fine-tuning's step-indexed batches
(`tasks.base.step_indexed_inputs`) are regrouped by `window_sorted`.
"""

from typing import Dict, Sequence

import numpy as np

from albert_tf.core import lazy

tf = lazy.module("tensorflow")

# Steps whose examples are sorted by length together (fine-tuning).
WINDOW_STEPS = 16


def bucket_widths(max_seq_length: int, length_buckets: int):
  """The widths batches are cut to: max_seq_length split in length_buckets
  equal steps, rounded up to a multiple of 8 (the last is max_seq_length)."""
  step = -(-max_seq_length // length_buckets)
  step = -(-step // 8) * 8
  return sorted({min(step * (i + 1), max_seq_length)
                 for i in range(length_buckets)})


def window_sorted(order: np.ndarray, lengths: np.ndarray, first_step: int,
                  seed: int, window_steps: int = WINDOW_STEPS) -> np.ndarray:
  """The step-indexed batches `order` [steps, batch] (example indices, from
  step first_step, a multiple of window_steps) with each window of
  window_steps steps regrouped: its examples sorted by length (stable, so
  equal lengths keep their shuffled order) and cut into batches again, the
  batches in an order drawn from (seed, window). A window holds the same
  examples as before; only which step takes which changes.
  """
  if first_step % window_steps:
    raise ValueError(f"window_sorted: first_step={first_step} is not a "
                     f"multiple of window_steps={window_steps}")
  out = np.empty_like(order)
  for start in range(0, len(order), window_steps):
    rows = order[start:start + window_steps]
    flat = rows.reshape([-1])
    flat = flat[np.argsort(lengths[flat], kind="stable")]
    window = (first_step + start) // window_steps
    shuffle = np.random.default_rng([seed, window, 1]).permutation(len(rows))
    out[start:start + len(rows)] = flat.reshape(rows.shape)[shuffle]
  return out


def width_of(input_mask, widths: Sequence[int]):
  """The smallest of widths (ascending, the last max_seq_length) that holds
  every row of input_mask [..., L] (int32 scalar tensor)."""
  length = tf.reduce_max(tf.reduce_sum(tf.cast(input_mask, tf.int32), -1))
  widths = tf.constant(list(widths), tf.int32)
  index = tf.searchsorted(widths, tf.reshape(length, [1]))[0]
  return widths[tf.minimum(index, tf.size(widths) - 1)]


def cut_to_width(features: Dict[str, "tf.Tensor"], width,
                 names: Sequence[str]) -> Dict[str, "tf.Tensor"]:
  """features with the last axis of each of `names` cut to width (the
  others, per example or per masked position, as they are)."""
  return {name: value[..., :width] if name in names else value
          for name, value in features.items()}
