"""albert_tf.training.callbacks: MetricsLogger's window means, read through the
public metric API, and the log-file helpers a resumed run uses."""

import json
import math
import types

import keras
import pytest
import tensorflow as tf

from albert_tf.training import callbacks


def _records(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


@pytest.fixture
def logged(tmp_path):
  """A MetricsLogger (log_steps=2) on a stand-in model: a loss tracker and a
  weighted accuracy inside a container, as Keras compiles `metrics=`."""
  loss = keras.metrics.Mean(name="loss")
  accuracy = keras.metrics.Mean(name="masked_lm_accuracy")
  container = types.SimpleNamespace(name="compile_metrics", metrics=[accuracy])
  step = tf.Variable(0, dtype=tf.int64)
  model = types.SimpleNamespace(metrics=[loss, container],
                                optimizer=types.SimpleNamespace(iterations=step))
  logger = callbacks.MetricsLogger(
      str(tmp_path), lambda s: 0.5, log_steps=2, batch_size=4,
      num_train_steps=8, seq_length=16, write=True)
  logger.set_model(model)
  logger.on_train_begin()
  logger.on_epoch_begin(0)

  def run_step(losses, correct=None, weights=None):
    loss.update_state(losses)
    if correct is not None:
      accuracy.update_state(correct, sample_weight=weights)
    step.assign_add(1)
    logger.on_train_batch_end(int(step.numpy()) - 1)
  return logger, run_step, tmp_path / callbacks.TRAIN_LOG


def test_window_means_are_over_the_steps_since_the_last_line(logged):
  logger, run_step, path = logged
  run_step([1.0, 3.0], [1.0, 0.0], [1.0, 1.0])
  run_step([5.0], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0])  # line at step 2
  run_step([10.0], [1.0], [3.0])
  run_step([20.0, 30.0])                            # line at step 4
  logger.on_epoch_begin(1)  # Keras resets the metrics here
  for tracker in logger.model.metrics[:1] + logger.model.metrics[1].metrics:
    tracker.reset_state()
  run_step([7.0], [0.0], [1.0])
  run_step([9.0], [1.0], [1.0])                     # line at step 6
  records = _records(path)
  assert [r["step"] for r in records] == [2, 4, 6]
  assert records[0]["loss"] == pytest.approx(3.0)   # (1 + 3 + 5) / 3
  # Weighted: (1 + 2 + 1) / (1 + 1 + 2 + 1 + 1).
  assert records[0]["masked_lm_accuracy"] == pytest.approx(4 / 6)
  assert records[1]["loss"] == pytest.approx(20.0)  # (10 + 20 + 30) / 3
  assert records[1]["masked_lm_accuracy"] == pytest.approx(1.0)
  assert records[2]["loss"] == pytest.approx(8.0)   # after the reset
  assert records[2]["masked_lm_accuracy"] == pytest.approx(0.5)
  assert records[0]["learning_rate"] == 0.5
  assert records[0]["tokens_per_second"] == pytest.approx(
      records[0]["examples_per_second"] * 16)


def test_a_metric_no_step_updated_is_nan(logged):
  _, run_step, path = logged
  run_step([2.0])
  run_step([4.0])
  record, = _records(path)
  assert record["loss"] == pytest.approx(3.0)
  assert math.isnan(record["masked_lm_accuracy"])


def test_drop_log_lines_after_keeps_the_steps_up_to_the_checkpoint(tmp_path):
  path = tmp_path / "eval_log.jsonl"
  path.write_text("".join(json.dumps({"global_step": s, "x": s}) + "\n"
                          for s in (0, 10, 20, 30)), encoding="utf-8")
  callbacks.drop_log_lines_after(str(path), 20, key="global_step")
  assert [r["global_step"] for r in _records(path)] == [0, 10, 20]


def test_remove_stale_temporaries_leaves_checkpoints(tmp_path):
  (tmp_path / "ckpt-2.index").write_text("")
  (tmp_path / "ckpt-4_temp").mkdir()
  (tmp_path / "best").mkdir()
  (tmp_path / "best" / "best.json.tmp").write_text("{}")
  (tmp_path / "best" / "ckpt-2_temp_abc.index").write_text("")
  callbacks.remove_stale_temporaries(str(tmp_path))
  left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
  assert left == ["best", "ckpt-2.index"]
