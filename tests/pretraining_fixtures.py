"""Tiny pretraining TFRecords and params for the run_pretraining tests."""

import numpy as np
import tensorflow as tf

from albert_tf.core import features

VOCAB = 100
SEQ = 16
PRED = 4
TINY_CONFIG = {
    "vocab_size": VOCAB, "embedding_size": 8, "hidden_size": 16,
    "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
    "max_position_embeddings": 64,
}


def random_example(rng, seq=SEQ, pred=PRED):
  """A well-formed record: [CLS] A [SEP] B [SEP], `pred` masked positions."""
  n = int(rng.integers(seq // 2, seq + 1))
  ids = rng.integers(5, VOCAB, size=n)
  ids[0], ids[-1] = 2, 3
  cut = int(rng.integers(2, n - 1))
  ids[cut] = 3
  segment = np.zeros(seq, np.int64)
  segment[cut + 1:n] = 1
  positions = np.sort(rng.choice(np.arange(1, n - 1), size=pred, replace=False))
  labels = ids[positions].copy()
  ids[positions] = 4
  pad = lambda a: np.pad(a, (0, seq - len(a)))
  return features.make_pretraining_example(
      input_ids=pad(ids), input_mask=pad(np.ones(n, np.int64)),
      segment_ids=segment, token_boundary=pad(np.ones(n, np.int64)),
      masked_lm_positions=positions, masked_lm_ids=labels,
      masked_lm_weights=np.ones(pred, np.float32),
      next_sentence_label=int(rng.integers(0, 2)))


def write_records(path, num, seed=0, seq=SEQ, pred=PRED):
  """Writes `num` random records to `path`; returns the path."""
  rng = np.random.default_rng(seed)
  with tf.io.TFRecordWriter(str(path)) as writer:
    for _ in range(num):
      writer.write(random_example(rng, seq, pred).SerializeToString())
  return str(path)


def write_config(path):
  import json  # pylint: disable=import-outside-toplevel
  with open(path, "w", encoding="utf-8") as f:
    json.dump(TINY_CONFIG, f)
  return str(path)


def tiny_argv(tmp_path, *extra, num_files=2, records=32):
  """Command-line args of a tiny training run on fresh records under tmp_path."""
  data = tmp_path / "data"
  data.mkdir(exist_ok=True)
  for i in range(num_files):
    write_records(data / f"part-{i}.tfrecord", records, seed=i)
  return [f"--albert_config_file={write_config(tmp_path / 'config.json')}",
          f"--input_file={data}/*.tfrecord", f"--output_dir={tmp_path / 'out'}",
          "--do_train", f"--max_seq_length={SEQ}",
          f"--max_predictions_per_seq={PRED}", "--train_batch_size=8",
          "--eval_batch_size=8", "--num_train_steps=6", "--num_warmup_steps=2",
          "--save_checkpoints_steps=3", "--iterations_per_loop=3",
          "--log_steps=1", "--learning_rate=0.01", "--max_eval_steps=2",
          # Bare records written here, not by data prep: read as records
          # written elsewhere (one warning), no flag needed.
          # float32 on every CPU kind (the default, auto, is bfloat16 on a
          # CPU with bf16 units): the same numbers on every test machine.
          "--mixed_precision=none",
          *extra]
