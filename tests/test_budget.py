"""--train_budget_minutes (albert_tf.training.budget): the plan's arithmetic,
the schedule it sets, bad values, the eval's baselines, and whole budgeted
runs (slow: a one-minute run against the clock, a resume of a plan)."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import run_pretraining as rp
from albert_tf.tasks.pretraining import PretrainingTask
from albert_tf.training import budget
from albert_tf.training.runtime import RunConfigError
from tests import cli_runner
from tests.pretraining_fixtures import PRED, SEQ, tiny_argv, write_records


def _plan(**overrides):
  fields = dict(budget_minutes=1.0, warmup_fraction=0.1, probe_steps=10,
                num_train_steps=110, num_warmup_steps=10,
                seconds_per_step=0.01, planned_after_seconds=5.0,
                reserve_seconds=2.0)
  return budget.Plan(**{**fields, **overrides})


def test_schedule_is_zero_while_timed_then_warms_up_and_decays_to_zero():
  schedule = budget.PlannedSchedule(0.01)
  assert float(schedule(0)) == 0.0 and float(schedule(10**6)) == 0.0
  # Probe 10, warmup 10, last step 110; as the original's schedule, the
  # decay counts from the first trained step and the warmup overrides it.
  schedule.set_plan(_plan())
  expected = {0: 0.0, 9: 0.0, 10: 0.0, 15: 0.005, 19: 0.009, 20: 0.009,
              65: 0.01 * (1 - 55 / 100), 109: 0.01 * (1 - 99 / 100),
              110: 0.0, 500: 0.0}
  for step, rate in expected.items():
    np.testing.assert_allclose(float(schedule(step)), rate, atol=1e-9,
                               err_msg=f"step {step}")


def test_plan_fills_the_budget_left_after_start_checkpoints_and_eval():
  # 60 s: 10 used, 5 for the last save and eval -> 45 s; each step costs
  # 0.01 s plus a 1 s checkpoint every 100 steps (0.01 s a step) -> 2,250
  # steps, whole calls of 10.
  plan = budget.make_plan(1.0, 0.2, used=10.0, probe_steps=30,
                          seconds_per_step=0.01, steps_per_call=10,
                          final_seconds=5.0, checkpoint_steps=100,
                          checkpoint_seconds=1.0)
  assert plan.num_train_steps == 30 + 2250
  assert plan.num_warmup_steps == 450  # 20% of the steps after the probe
  assert plan.reserve_seconds == 5.0 + 22 * 1.0  # 22 checkpoints on the way
  assert "2280 steps (30 timed at learning rate 0, then 450 of warmup and " \
         "1800 of linear decay to 0)" in plan.line()


def test_budget_spent_before_the_plan_is_one_line():
  with pytest.raises(RunConfigError, match=r"^--train_budget_minutes=0\.1 "
                     r"leaves no time to train: 7 s went to the start"):
    budget.make_plan(0.1, 0.1, used=7.0, probe_steps=3,
                     seconds_per_step=0.5, steps_per_call=3,
                     final_seconds=1.0, checkpoint_steps=100,
                     checkpoint_seconds=0.0)


class _Steps:
  """The part of a Keras model the Probe reads: the optimizer's step."""

  def __init__(self):
    self.optimizer = type("Optimizer", (), {})()
    self.optimizer.iterations = tf.Variable(0, dtype=tf.int64)
    self.stop_training = False


def test_probe_refuses_a_budget_it_cannot_hold_at_its_first_timed_call(
    monkeypatch):
  """A loaded machine (the newcomer trial: 379 s of a 4-minute budget gone
  before the refusal): once one call is timed, a budget that cannot hold
  the probe's last call, one call that trains and the final save and eval
  is refused then, naming a budget that would do."""
  clock = {"now": 1000.0}
  monkeypatch.setattr(budget.time, "perf_counter", lambda: clock["now"])
  monkeypatch.setattr(budget.time, "time", lambda: clock["now"])
  # 4 minutes from `started`; 200 s gone when the traced call ends.
  probe = budget.Probe(4.0, tf.distribute.get_strategy(),
                       started=800.0, final_seconds=30.0)
  probe.set_model(_Steps())
  for call in range(2):  # the traced call, then one of 50 steps in 20 s
    clock["now"] += 20.0 if call else 0.0
    probe.model.optimizer.iterations.assign_add(50)
    if call == 0:
      probe.on_train_batch_end(0)
      continue
    # 220 s used + 30 s final + 2 calls to come (the probe's last, one
    # training call) x 20 s = 290 s > 240 s
    with pytest.raises(RunConfigError, match=(
        r"^--train_budget_minutes=4 leaves no time to train: 220 s went to "
        r"the start .* one call of 50 steps takes 20\.0 s: give at least "
        r"--train_budget_minutes=6 on this machine as loaded now$")):
      probe.on_train_batch_end(1)


def test_probe_goes_on_while_the_budget_holds(monkeypatch):
  clock = {"now": 1000.0}
  monkeypatch.setattr(budget.time, "perf_counter", lambda: clock["now"])
  monkeypatch.setattr(budget.time, "time", lambda: clock["now"])
  probe = budget.Probe(10.0, tf.distribute.get_strategy(), started=990.0,
                       final_seconds=5.0)
  probe.set_model(_Steps())
  for _ in range(4):  # calls of 10 steps in 6 s: the probe's 12 s reached
    probe.model.optimizer.iterations.assign_add(10)
    probe.on_train_batch_end(0)
    clock["now"] += 6.0
  assert probe.model.stop_training
  np.testing.assert_allclose(probe.seconds_per_step, 0.6)


@pytest.mark.parametrize("flag, match", [
    ("--train_budget_minutes=-1", r"^flag --train_budget_minutes=-1: -1\.0 "
     r"is not a non-negative number$"),
    ("--budget_warmup_fraction=1.5", r"^flag --budget_warmup_fraction=1\.5: "
     r"1\.5 is not a number in the range \[0\.0, 0\.99\]$"),
])
def test_bad_flag_values_are_refused(tmp_path, flag, match):
  with pytest.raises(Exception, match=match):
    rp.params_from_argv(tiny_argv(tmp_path, flag))


def test_infinite_budget_is_one_line(tmp_path):
  p = rp.params_from_argv(tiny_argv(tmp_path, "--train_budget_minutes=inf"))
  with pytest.raises(ValueError, match=r"^--train_budget_minutes must be a "
                     r"positive number of minutes, got inf$"):
    rp.run(p)
  assert not (tmp_path / "out").exists()


def _counts(path):
  """Masked pieces and sentence labels of a record file, parsed here from
  the tf.train.Example protos (not through the project's input pipeline)."""
  pieces, labels = {}, []
  for raw in tf.data.TFRecordDataset(str(path)):
    example = tf.train.Example.FromString(raw.numpy()).features.feature
    ids = example["masked_lm_ids"].int64_list.value
    weights = example["masked_lm_weights"].float_list.value
    for i, w in zip(ids, weights):
      pieces[i] = pieces.get(i, 0.0) + w
    labels.append(example["next_sentence_labels"].int64_list.value[0])
  return pieces, labels


def test_eval_baselines_are_counted_from_the_records(tmp_path):
  train = write_records(tmp_path / "train.tfrecord", 40, seed=1)
  held = write_records(tmp_path / "held.tfrecord", 24, seed=2)
  task = PretrainingTask([train], [held], SEQ, PRED, eval_batch_size=8,
                         max_eval_steps=100)
  got = task.baselines()
  train_pieces, train_labels = _counts(train)
  held_pieces, held_labels = _counts(held)
  top = max(train_pieces, key=lambda i: (train_pieces[i], -i))
  total = sum(held_pieces.values())
  assert got["masked_lm_accuracy_baseline"] == pytest.approx(
      held_pieces.get(top, 0.0) / total)
  size = max(max(train_pieces), max(held_pieces)) + 1
  smoothed = {i: train_pieces.get(i, 0.0) + 1.0 for i in range(size)}
  norm = sum(smoothed.values())
  assert got["masked_lm_loss_baseline"] == pytest.approx(
      -sum(w * math.log(smoothed[i] / norm) for i, w in held_pieces.items())
      / total)
  majority = int(np.mean(train_labels) > 0.5)
  assert got["sentence_order_accuracy_baseline"] == pytest.approx(
      np.mean(np.array(held_labels) == majority))


def _run_cli(argv, timeout=300):
  proc = cli_runner.start_module(["albert_tf.run_pretraining", *argv])
  stdout, stderr = proc.communicate(timeout=timeout)
  return proc.returncode, stdout + stderr


def _jsonl(path):
  return [json.loads(line) for line in path.read_text().splitlines() if line]


def _fingerprint_plan(out):
  return json.loads((out / "run_fingerprint.json").read_text())["budget_plan"]


@pytest.mark.slow
def test_one_minute_budget_ends_on_time_with_the_schedule_at_its_end(
    tmp_path):
  # A log line at every call (3 steps), so that the last is the last step.
  argv = tiny_argv(tmp_path, "--train_budget_minutes=1", "--do_eval",
                   "--save_checkpoints_steps=600", "--log_steps=3",
                   "--num_train_steps=6")
  began = time.time()
  code, output = _run_cli(argv)
  seconds = time.time() - began
  assert code == 0, output[-3000:]
  # The budget runs from the command's start to the end of its last
  # checkpoint and eval, as its own last line says; the interpreter's exit
  # after it (a few seconds, more on a loaded machine) is outside.
  took = float(output.split("this command took ")[1].split()[0])
  # On a failure: the plan, the checkpoints and the last line's breakdown.
  said = "\n".join(line for line in output.splitlines()
                   if "--train_budget_minutes=1" in line or
                   "Saved checkpoint" in line or "Eval at step" in line)
  # The plan times its steps at their third quartile (budget.Probe), so a
  # run that meets its plan ends a few percent early.
  assert 0.8 <= took <= 1.1, (
      f"{took:.2f} minutes for a 1-minute budget:\n{said[-3000:]}")
  assert seconds <= 90, f"{seconds:.1f} s from start to exit"
  out = tmp_path / "out"
  plan = _fingerprint_plan(out)
  steps = plan["num_train_steps"]
  assert steps > 300  # planned from the budget, not --num_train_steps=6
  assert f"--train_budget_minutes=1: {steps} steps (" in output
  log = _jsonl(out / "train_log.jsonl")
  assert max(r["learning_rate"] for r in log) == pytest.approx(0.01, rel=0.1)
  if "--train_budget_minutes=1 ran out at step" in output:
    # The machine slowed after the timed steps (other jobs started): the
    # run stopped at the budget anyway, saved there and said so.
    steps = log[-1]["step"]
    assert steps < plan["num_train_steps"]
  else:
    assert log[-1]["step"] == steps
    # The last step's rate is the decay's last (peak / steps after warmup).
    span = steps - plan["probe_steps"] - plan["num_warmup_steps"]
    assert log[-1]["learning_rate"] <= 0.01 * 1.5 / span
  assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{steps}")
  results = json.loads((out / "eval_results.json").read_text())
  assert results["global_step"] == steps
  assert "Held-out at step %d: masked LM accuracy" % steps in output
  assert results["masked_lm_accuracy"] > results["masked_lm_accuracy_baseline"]


@pytest.mark.slow
def test_resumed_budget_run_keeps_its_plan(tmp_path):
  argv = tiny_argv(tmp_path, "--train_budget_minutes=0.5",
                   "--save_checkpoints_steps=150", "--log_steps=30",
                   "--num_train_steps=6")
  out = tmp_path / "out"
  proc = cli_runner.start_module(["albert_tf.run_pretraining", *argv])
  deadline = time.time() + 90
  while not ((out / "checkpoint").exists() and
             (out / "train_log.jsonl").exists() and
             _jsonl(out / "train_log.jsonl")[-1]["step"] > 150):
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.time() < deadline, "no checkpoint within 90 s"
    time.sleep(0.05)
  proc.send_signal(signal.SIGTERM)
  proc.communicate(timeout=60)
  assert proc.returncode == 143
  plan = _fingerprint_plan(out)
  stopped = _jsonl(out / "train_log.jsonl")[-1]["step"]
  assert stopped < plan["num_train_steps"]

  # Much later, when the budget has long gone: the same plan to its end.
  code, output = _run_cli(argv)
  assert code == 0, output[-3000:]
  assert _fingerprint_plan(out) == plan
  assert tf.train.latest_checkpoint(str(out)).endswith(
      f"ckpt-{plan['num_train_steps']}")
  log = _jsonl(out / "train_log.jsonl")
  schedule = budget.PlannedSchedule(0.01)
  schedule.set_plan(budget.Plan(**plan))
  for record in log:
    np.testing.assert_allclose(record["learning_rate"],
                               float(schedule(record["step"] - 1)),
                               rtol=1e-5, atol=1e-9)


_AGREE_MAX = """
import json, sys
import tensorflow as tf
from albert_tf.training import runtime
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(json.dumps(runtime.agree_max(strategy, float(sys.argv[1]))))
"""


@pytest.mark.slow
def test_agree_max_gives_every_worker_the_largest_value(tmp_path):
  """Two workers on 127.0.0.1 (tf.distribute has no MAX reduce: the
  budget's probe, stop and save decisions would raise AttributeError)."""
  ports = []
  for _ in range(2):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      ports.append(s.getsockname()[1])
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = [subprocess.Popen(
      [sys.executable, "-c", _AGREE_MAX, value], stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, env=dict(
          os.environ, TF_CONFIG=json.dumps(
              {"cluster": cluster, "task": {"type": "worker", "index": i}})))
           for i, value in enumerate(("1.5", "7.25"))]
  try:
    outs = [p.communicate(timeout=240) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1]) == 7.25
