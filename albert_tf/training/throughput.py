"""Model FLOPs and the machine's matmul peak: MFU in pretraining's logs.

    flops = pretraining_flops(config, seq_length=64, max_predictions=10)
    peak = matmul_peak("bfloat16")          # FLOP/s, measured once
    mfu = examples_per_second * flops / peak

`pretraining_flops` counts the matrix multiplications of one training
example (forward and backward: 3x the forward's), as MFU is usually
defined (PaLM, appendix B): every layer is computed even though ALBERT
shares its weights, the attention's two products are included, and
element-wise work (LayerNorm, softmax, GELU, the optimizer) is not.
run_pretraining counts an example at the mean number of real tokens of its
records (`mean_length`): padding is work a run may skip
(`--length_buckets`), not work done for the model.

`matmul_peak` times a 2048x2048 matmul in the compute dtype, the peak every
benchmark of this project divides by (benchmarks/README.md).
"""

import time

from albert_tf.core.config import AlbertConfig


def mean_length(files, max_seq_length: int, max_predictions: int,
                records: int = 2048):
  """(mean real tokens per record, records read) over the first `records`
  of files (the input_mask's sum; max_seq_length when none is read).
  Stops at an unreadable record: saying what is wrong with it is the
  training read's job (record_checks, --skip_corrupt_records)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.core import features as F  # pylint: disable=g-import-not-at-top
  from albert_tf.data import pretraining_dataset  # pylint: disable=g-import-not-at-top
  lengths = []
  dataset = pretraining_dataset.make_dataset(
      files, 256, max_seq_length, max_predictions, is_training=False,
      max_batches=-(-records // 256))
  try:
    for batch in dataset:
      lengths.extend(np.sum(batch[F.INPUT_MASK].numpy(), axis=1).tolist())
  except tf.errors.OpError:
    pass
  lengths = lengths[:records]
  if not lengths:
    return float(max_seq_length), 0
  return float(np.mean(lengths)), len(lengths)


def pretraining_flops(config: AlbertConfig, seq_length: float,
                      max_predictions: int) -> float:
  """FLOPs of one MLM + SOP training example (see the module docstring)."""
  h, e, i, v = (config.hidden_size, config.embedding_size,
                config.intermediate_size, config.vocab_size)
  per_token_layer = 2 * (4 * h * h + 2 * h * i) + 2 * 2 * seq_length * h
  per_token = config.num_hidden_layers * per_token_layer
  if e != h:
    per_token += 2 * e * h  # the E -> H projection
  # The MLM head (dense H -> E, then the tied E x V output) on the masked
  # positions; the pooler (H x H) and the 2-way SOP output once.
  heads = max_predictions * 2 * (h * e + e * v) + 2 * (h * h + 2 * h)
  return 3.0 * (seq_length * per_token + heads)


def matmul_peak(dtype: str = "float32", size: int = 2048,
                repeats: int = 5, parallel: int = 1) -> float:
  """FLOP/s of the best of `repeats` size x size matmuls in dtype
  (float32 or bfloat16) on this machine's default device; `parallel`
  independent ones at once, as a step of that many micro-batches runs them
  (training.micro_batches: then each op has only its share of the cores)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = [tf.cast(tf.random.stateless_normal([size, size], seed=[1, 2 + i]),
               dtype) for i in range(parallel)]
  matmul = tf.function(lambda xs: [tf.matmul(x, x) for x in xs])
  [m.numpy() for m in matmul(a)]  # traced and warm
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    [m.numpy() for m in matmul(a)]
    best = min(best, time.perf_counter() - start)
  return 2.0 * parallel * size ** 3 / best
