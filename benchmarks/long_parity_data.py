"""The batches of benchmarks/long_parity.py, read through the pretraining
task, and the mix of record directories they come from."""

import os

import numpy as np

FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
            "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def expand(pattern):
  from albert_tf.data import record_checks  # pylint: disable=g-import-not-at-top
  return record_checks.expand_input_files(pattern)


def make_task(args, seed):
  """The pretraining task as run_pretraining builds it."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  return registry.family("pretraining").task(
      expand(args.input_file), expand(args.eval_input_file),
      args.seq_length, args.predictions,
      eval_batch_size=args.eval_batch_size, max_eval_steps=args.eval_batches,
      seed=seed, shuffle_buffer_size=args.shuffle_buffer_size)


def read_batches(dataset, count=None):
  """{feature: array [batches, ...]} of the first `count` batches."""
  out = {k: [] for k in FEATURES}
  for i, batch in enumerate(dataset):
    if count is not None and i == count:
      break
    for k in FEATURES:
      out[k].append(np.asarray(batch[k]))
  if count is not None and len(out[FEATURES[0]]) < count:
    raise ValueError(f"only {len(out[FEATURES[0]])} batches, {count} wanted")
  return {k: np.stack(v) for k, v in out.items()}


def source_index(args):
  """({unmasked token-id bytes: bit mask of the directories holding the
  text}, [directories])."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.data import pretraining_dataset
  files = expand(args.input_file)
  dirs = sorted({os.path.dirname(f) for f in files})
  index = {}
  for d, directory in enumerate(dirs):
    dataset = pretraining_dataset.make_dataset(
        [f for f in files if os.path.dirname(f) == directory], 4096,
        args.seq_length, args.predictions, is_training=False)
    for batch in dataset:
      for row in text_rows(batch):
        index[row] = index.get(row, 0) | (1 << d)
  return index, dirs


def text_rows(batch):
  """The unmasked text of each example of a batch, as bytes (the masked
  slots' original ids put back at their positions)."""
  ids = np.asarray(batch["input_ids"]).copy()
  positions = np.asarray(batch["masked_lm_positions"])
  lm_ids = np.asarray(batch["masked_lm_ids"])
  real = np.asarray(batch["masked_lm_weights"]) > 0
  rows = np.broadcast_to(np.arange(ids.shape[0])[:, None], positions.shape)
  ids[rows[real], positions[real]] = lm_ids[real]
  return [r.tobytes() for r in ids]


def mix_labels(dirs):
  """{bit mask: label} of every non-empty set of directories."""
  names = [os.path.basename(d.rstrip("/")) for d in dirs]
  return {m: " + ".join(n for i, n in enumerate(names) if m >> i & 1)
          for m in range(1, 1 << len(dirs))}


def stream_mix(data, index, dirs, window):
  """Per window of steps: the fraction of examples whose text occurs in
  exactly each set of directories (0: in none, which would be a fault)."""
  sources = np.array([[index.get(r, 0) for r in text_rows(
      {k: data[k][s] for k in data})] for s in range(len(data["input_ids"]))])
  labels = {0: "none", **mix_labels(dirs)}
  out = []
  for start in range(0, len(sources), window):
    part = sources[start:start + window]
    out.append({"steps": [start, start + len(part)], **{
        label: float(np.mean(part == m)) for m, label in labels.items()}})
  return out
