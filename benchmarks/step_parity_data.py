"""The fixed random batches of benchmarks/step_parity.py: random token ids,
padded rows (input_mask), two segments, masked positions with some slots
padded (weight 0), SOP labels."""

import numpy as np

MASK_ID = 4  # any id: the masked tokens' input ids


def pretraining_batches(rng, steps, batch, seq, vocab, predictions):
  """{feature: array [steps, batch, ...]} of the pretraining TFRecords'
  features: padded rows, segments A/B, masked slots with weight 0 padding."""
  ids = np.zeros([steps, batch, seq], np.int32)
  mask = np.zeros_like(ids)
  segments = np.zeros_like(ids)
  positions = np.zeros([steps, batch, predictions], np.int32)
  lm_ids = np.zeros_like(positions)
  weights = np.zeros([steps, batch, predictions], np.float32)
  for s in range(steps):
    for b in range(batch):
      length = int(rng.integers(seq // 2, seq + 1))
      ids[s, b, :length] = rng.integers(5, vocab, length)
      ids[s, b, 0], ids[s, b, length - 1] = 2, 3  # [CLS] ... [SEP]
      mask[s, b, :length] = 1
      segments[s, b, int(rng.integers(2, length - 1)):length] = 1
      count = min(int(rng.integers(predictions // 2, predictions + 1)),
                  length - 2)
      chosen = np.sort(rng.choice(np.arange(1, length - 1), count,
                                  replace=False))
      positions[s, b, :count] = chosen
      lm_ids[s, b, :count] = ids[s, b, chosen]
      ids[s, b, chosen] = MASK_ID
      weights[s, b, :count] = 1.0
  labels = rng.integers(0, 2, [steps, batch, 1]).astype(np.int32)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
          "masked_lm_positions": positions, "masked_lm_ids": lm_ids,
          "masked_lm_weights": weights, "next_sentence_labels": labels}


def classification_batches(rng, steps, batch, seq, vocab):
  data = pretraining_batches(rng, steps, batch, seq, vocab, 2)
  features = {k: data[k] for k in ("input_ids", "input_mask", "segment_ids")}
  return features, rng.integers(0, 2, [steps, batch]).astype(np.int32)


def torch_inputs(data, step):
  import torch  # pylint: disable=g-import-not-at-top
  return {"input_ids": torch.from_numpy(data["input_ids"][step].astype(np.int64)),
          "attention_mask": torch.from_numpy(
              data["input_mask"][step].astype(np.int64)),
          "token_type_ids": torch.from_numpy(
              data["segment_ids"][step].astype(np.int64))}
