"""The output_dir fingerprint: sections an earlier run left open, and
checkpoints of unknown settings (in-process, no training)."""

import json

import pytest

from albert_tf.training import output_dir
from albert_tf.training import runtime
from albert_tf.core.config import AlbertConfig

CONFIG = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16,
                      num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)
ADAMW = {"name": "adamw", "learning_rate": 1e-4, "num_warmup_steps": 0,
         "poly_power": 1.0, "weight_decay": 0.01}


def _fingerprint(optimizer, precision="none"):
  return output_dir.make_fingerprint("classification:tsv", CONFIG, None,
                                     optimizer, precision)


def test_eval_only_run_then_training_records_the_optimizer(tmp_path):
  out = str(tmp_path)
  lock = output_dir.prepare_output_dir(out, _fingerprint(None))
  lock.close()
  saved = json.loads((tmp_path / output_dir.FINGERPRINT_FILE).read_text())
  assert saved["optimizer"] is None

  # The first training run fills the open section in ...
  output_dir.check_output_dir(out, _fingerprint(ADAMW))
  output_dir.prepare_output_dir(out, _fingerprint(ADAMW)).close()
  saved = json.loads((tmp_path / output_dir.FINGERPRINT_FILE).read_text())
  assert saved["optimizer"] == ADAMW
  assert saved["mixed_precision"] == "none"
  # ... so a later one with another learning rate is compared, and refused.
  with pytest.raises(runtime.RunConfigError,
                     match="optimizer.learning_rate 0.0001 there vs 0.001 now"):
    output_dir.check_output_dir(out, _fingerprint({**ADAMW,
                                                   "learning_rate": 1e-3}))
  # An eval-only rerun (no optimizer) still fits, and changes nothing.
  output_dir.check_output_dir(out, _fingerprint(None))
  output_dir.prepare_output_dir(out, _fingerprint(None)).close()
  saved = json.loads((tmp_path / output_dir.FINGERPRINT_FILE).read_text())
  assert saved["optimizer"] == ADAMW


def test_checkpoints_without_fingerprint_are_refused(tmp_path):
  (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
  with pytest.raises(runtime.RunConfigError) as error:
    output_dir.check_output_dir(str(tmp_path), _fingerprint(ADAMW))
  message = str(error.value)
  assert "\n" not in message
  assert f"no {output_dir.FINGERPRINT_FILE}" in message
  assert "--overwrite" in message and "--init_checkpoint" in message
  # An eval-only run is not told to --overwrite (it would delete them).
  with pytest.raises(runtime.RunConfigError) as error:
    output_dir.check_output_dir(str(tmp_path), _fingerprint(None))
  assert "--overwrite" not in str(error.value)
  # --overwrite starts over; a directory without checkpoints is fine.
  output_dir.check_output_dir(str(tmp_path), _fingerprint(ADAMW),
                              overwrite=True)
  output_dir.check_output_dir(str(tmp_path / "new"), _fingerprint(ADAMW))


def test_float16_and_jit_compile_on_a_cpu_only_machine_are_named():
  """Settings that only pay off on a GPU or TPU: one warning line each on a
  machine without one (this machine has none: CUDA is not found)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  assert not tf.config.list_logical_devices("GPU")
  with runtime.dtype_policy("float16"):
    lines = runtime.warn_about_cpu_only_settings(jit_compile=True)
  assert [line.split(":")[0] for line in lines] == [
      "--mixed_precision=float16 without a GPU",
      "--jit_compile without a GPU or TPU"]
  assert "use --mixed_precision=none" in lines[0]
  with runtime.dtype_policy("bfloat16"):
    assert runtime.warn_about_cpu_only_settings(jit_compile=False) == []
