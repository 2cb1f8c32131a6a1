"""Pretraining's fast path on a CPU: --mixed_precision=auto, length buckets
(`pretraining_dataset.group_by_length`) and the MFU in the logs
(`training.throughput`).

The speed itself is a benchmark (benchmarks/README.md, "Pretraining on a
CPU with bf16 units"); these tests pin what must hold whatever the speed:
auto's choice per machine, buckets that only cut padding (the model's
outputs on a cut batch equal those on the padded one), and a FLOP count
worked by hand.
"""

import json

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf import run_pretraining as rp
from albert_tf.core.config import AlbertConfig
from albert_tf.data import pretraining_dataset
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.training import runtime
from albert_tf.training import throughput
from tests.pretraining_fixtures import PRED, TINY_CONFIG, tiny_argv

CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
           "flags\t\t: fpu sse2 avx2 avx512f {extra}\n\n")


def _cpuinfo(tmp_path, extra):
  path = tmp_path / "cpuinfo"
  path.write_text(CPUINFO.format(extra=extra), encoding="utf-8")
  return str(path)


# ------------------------------------------------------------ auto precision
@pytest.mark.parametrize("extra, expected", [
    ("avx512_bf16", ("bfloat16", "this CPU has bf16 units (avx512_bf16)")),
    ("amx_bf16 amx_tile avx512_bf16",
     ("bfloat16", "this CPU has bf16 units (amx_bf16, avx512_bf16)")),
    ("avx512_vnni", ("none", "this CPU has no bf16 units")),
])
def test_auto_precision_on_a_cpu(tmp_path, extra, expected):
  precision, why = runtime.auto_precision(gpus=0,
                                          cpuinfo=_cpuinfo(tmp_path, extra))
  assert (precision, why[:len(expected[1])]) == expected


def test_auto_precision_on_accelerators_and_without_cpuinfo(tmp_path):
  bf16_cpu = _cpuinfo(tmp_path, "avx512_bf16")
  assert runtime.auto_precision(tpu=True, cpuinfo=bf16_cpu)[0] == "bfloat16"
  # A GPU: the user's choice (float16 needs loss scaling), not the CPU's.
  assert runtime.auto_precision(gpus=1, cpuinfo=bf16_cpu)[0] == "none"
  assert runtime.auto_precision(
      gpus=0, cpuinfo=str(tmp_path / "missing"))[0] == "none"


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_auto_is_said_once_and_recorded_and_a_resume_keeps_it(
    tmp_path, monkeypatch):
  said = []
  monkeypatch.setattr(rp.logging, "info",
                      lambda msg, *a: said.append(msg % a))
  monkeypatch.setattr(runtime, "cpu_bf16_units", lambda *a: ["avx512_bf16"])
  argv = tiny_argv(tmp_path, "--mixed_precision=auto",
                   "--num_train_steps=3", "--save_checkpoints_steps=3")
  rp.run(rp.params_from_argv(argv))
  lines = [l for l in said if l.startswith("--mixed_precision=auto")]
  assert lines == ["--mixed_precision=auto: bfloat16 (this CPU has bf16 "
                   "units (avx512_bf16))"]
  fingerprint = json.loads(
      (tmp_path / "out" / "run_fingerprint.json").read_text())
  assert fingerprint["mixed_precision"] == "bfloat16"
  # Resumed on a machine without bf16 units: the run keeps its precision
  # (its fingerprint would refuse another).
  said.clear()
  monkeypatch.setattr(runtime, "cpu_bf16_units", lambda *a: [])
  rp.run(rp.params_from_argv(argv[:-2] + ["--num_train_steps=6",
                                          "--save_checkpoints_steps=3"]))
  assert [l for l in said if l.startswith("--mixed_precision=auto")] == [
      f"--mixed_precision=auto: bfloat16 (as the run in --output_dir="
      f"{tmp_path / 'out'})"]


# ------------------------------------------------------------ length buckets
def test_bucket_widths():
  assert pretraining_dataset.bucket_widths(64, 4) == [16, 32, 48, 64]
  assert pretraining_dataset.bucket_widths(128, 3) == [48, 96, 128]
  assert pretraining_dataset.bucket_widths(20, 4) == [8, 16, 20]


def _example(uid, length, seq, pred, label):
  """A record of `length` real tokens; input_ids[1] = uid identifies it."""
  ids = np.zeros(seq, np.int64)
  ids[:length] = 5 + (np.arange(length) * 7 + uid) % 90
  ids[0], ids[1], ids[length - 1] = 2, uid, 3
  mask = np.zeros(seq, np.int64)
  mask[:length] = 1
  segments = np.zeros(seq, np.int64)
  segments[length // 2:length] = 1
  positions = np.minimum(np.arange(2, 2 + pred), length - 2)
  return F.make_pretraining_example(
      input_ids=ids, input_mask=mask, segment_ids=segments,
      token_boundary=mask, masked_lm_positions=positions,
      masked_lm_ids=ids[positions], masked_lm_weights=np.ones(pred,
                                                              np.float32),
      next_sentence_label=label), ids, mask, segments


def test_buckets_cut_only_padding(tmp_path):
  seq, pred, batch = 32, 3, 4
  rng = np.random.default_rng(0)
  lengths = rng.integers(5, seq + 1, size=48)
  originals = {}
  path = str(tmp_path / "r.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for uid, length in enumerate(lengths, start=10):
      example, ids, mask, segments = _example(uid, int(length), seq, pred,
                                              uid % 2)
      originals[uid] = (int(length), ids, mask, segments)
      writer.write(example.SerializeToString())
  widths = pretraining_dataset.bucket_widths(seq, 4)
  dataset = pretraining_dataset.make_dataset(
      [path], batch, seq, pred, is_training=True, seed=1,
      shuffle_buffer_size=16, length_buckets=4)
  seen = set()
  for features in dataset.take(40):
    width = features[F.INPUT_IDS].shape[1]
    assert width in widths
    lower = max([w for w in widths if w < width], default=0)
    for row in range(batch):
      uid = int(features[F.INPUT_IDS][row, 1])
      length, ids, mask, segments = originals[uid]
      seen.add(uid)
      assert lower < length <= width  # its own bucket
      np.testing.assert_array_equal(features[F.INPUT_IDS][row], ids[:width])
      np.testing.assert_array_equal(features[F.INPUT_MASK][row], mask[:width])
      np.testing.assert_array_equal(features[F.SEGMENT_IDS][row],
                                    segments[:width])
      assert not ids[width:].any()  # what was cut is padding
      assert int(features[F.NEXT_SENTENCE_LABELS][row, 0]) == uid % 2
  assert seen == set(originals)  # every record, none lost


def test_a_cut_batch_gives_the_padded_batch_outputs():
  """Attention mask, segments and masked positions hold after the cut."""
  config = AlbertConfig(**TINY_CONFIG)
  model = AlbertPretrainer(config)
  seq, width = 32, 16
  rows = [_example(uid, length, seq, PRED, 0)[0]
          for uid, length in ((10, 16), (11, 9), (12, 12))]
  spec = F.pretraining_feature_spec(seq, PRED)
  full = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v
          for k, v in tf.io.parse_example(
              [r.SerializeToString() for r in rows], spec).items()}
  inputs = (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS, F.MASKED_LM_POSITIONS)
  full = {k: full[k] for k in inputs}
  cut = {k: v[:, :width] if k in F.SEQUENCE_FEATURES else v
         for k, v in full.items()}
  a, b = model(full, training=False), model(cut, training=False)
  for name in ("mlm_logits", "sop_logits", "pooled_output"):
    np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(a["sequence_output"][:, :width],
                             b["sequence_output"], rtol=1e-5, atol=1e-5)


def test_training_with_buckets_and_the_mfu_in_the_log(tmp_path):
  argv = tiny_argv(tmp_path, "--length_buckets=2", "--max_seq_length=16")
  rp.run(rp.params_from_argv(argv))
  records = [json.loads(l) for l in
             (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [3, 6]  # per tf.function call
  assert all(np.isfinite(r["loss"]) for r in records)
  assert all(0 < r["mfu"] < 1 for r in records), records


def test_buckets_are_off_on_a_tpu(caplog):
  p = rp.params_from_argv(["--preset=albert_base_v2", "--length_buckets=4",
                           "--distribution_strategy=tpu",
                           "--mixed_precision=none"])
  with caplog.at_level("WARNING"):
    assert rp._resolve_auto(p).length_buckets == 0  # pylint: disable=protected-access
  assert ("--length_buckets=4 ignored: a TPU compiles one static sequence "
          "length") in caplog.text
  p = rp.params_from_argv(["--preset=albert_base_v2", "--length_buckets=4",
                           "--jit_compile", "--mixed_precision=none"])
  assert rp._resolve_auto(p).length_buckets == 4  # pylint: disable=protected-access


def test_mean_length_reads_the_real_tokens(tmp_path):
  path = str(tmp_path / "r.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for uid, length in enumerate([5, 9, 16, 30], start=10):
      writer.write(_example(uid, length, 32, 3, 0)[0].SerializeToString())
  assert throughput.mean_length([path], 32, 3) == (15.0, 4)
  assert throughput.mean_length([path], 32, 3, records=2) == (7.0, 2)


# ------------------------------------------------------------ FLOPs
def test_pretraining_flops_by_hand():
  """H=4, E=2, I=8, 2 layers, V=10, seq 3, 1 prediction, counted by hand:
  per token and layer, Q K V O 4*4*4 and the FFN 2*4*8 multiply-adds
  (2 FLOPs each: 256), QK^T and AV 2*3*4 (48): 304, twice: 608; the E->H
  projection 2*2*4: 624 per token, 1872 for 3. The MLM head 2*(4*2 + 2*10)
  = 56, the pooler 2*16 and SOP 2*8: 48. Forward 1976, training 3x: 5928."""
  config = AlbertConfig(vocab_size=10, embedding_size=2, hidden_size=4,
                        num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=8)
  assert throughput.pretraining_flops(config, 3, 1) == 5928


def test_matmul_peak_is_a_rate():
  peak = throughput.matmul_peak("float32", size=256, repeats=2)
  # 256^3 * 2 FLOPs take well under a second on any CPU and over a
  # nanosecond: between 1e6 and 1e15 FLOP/s.
  assert 1e6 < peak < 1e15
