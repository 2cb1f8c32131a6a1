"""--train_budget_minutes: a learning-rate schedule that belongs to a
wall-clock budget, not to a step count (the cramming setting: Geiping &
Goldstein 2022 found a budget-tied schedule the first thing that matters
on a fixed budget).

    probe -> plan -> train to the plan -> save -> eval, inside the budget

The probe times the first steps at learning rate 0 (`Probe`); the plan
(`make_plan`) fills the time left, less a reserve for the checkpoints and
evals, and is recorded in run_fingerprint.json for the resumes; `Deadline`
stops a run that slowed down at the budget. docs/pretraining.md ("A budget
instead of a step count") tells each stage. The budget counts from the
command's start (`started`): the imports, the records' checks and the model
build too.
"""

import collections
import dataclasses
import math
import os
import time
from typing import Optional

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf.training import callbacks
from albert_tf.training import output_dir as output_dir_lib
from albert_tf.training.runtime import RunConfigError, agree_max

PLAN_KEY = "budget_plan"  # its section of run_fingerprint.json
# The probe: at least this many timed calls after the traced one, and at
# least PROBE_SHARE of the budget (within PROBE_SECONDS).
PROBE_CALLS = 2
PROBE_SHARE = 0.02
PROBE_SECONDS = (2.0, 30.0)


@dataclasses.dataclass
class Plan:
  """What a budgeted run trains: written once, kept by every resume."""
  budget_minutes: float
  warmup_fraction: float
  probe_steps: int
  num_train_steps: int
  num_warmup_steps: int
  seconds_per_step: float
  planned_after_seconds: float  # of the budget, when the plan was made
  reserve_seconds: float        # for checkpoints and evals

  def line(self) -> str:
    minutes = self.budget_minutes
    train = self.num_train_steps - self.probe_steps
    return (f"--train_budget_minutes={minutes:g}: {self.num_train_steps} "
            f"steps ({self.probe_steps} timed at learning rate 0, then "
            f"{self.num_warmup_steps} of warmup and {train - self.num_warmup_steps} "
            f"of linear decay to 0) at {self.seconds_per_step * 1000:.1f} "
            f"ms/step; {self.planned_after_seconds:.0f} s of the budget were "
            f"used before the plan, {self.reserve_seconds:.0f} s are kept for "
            "checkpoints and evals")


def check_budget(minutes: float, warmup_fraction: float) -> None:
  if not minutes > 0 or math.isinf(minutes):
    raise ValueError(f"--train_budget_minutes must be a positive number of "
                     f"minutes, got {minutes}")
  if not 0 <= warmup_fraction < 1:
    raise ValueError(f"--budget_warmup_fraction must be in [0, 1), got "
                     f"{warmup_fraction}")


def read_plan(output_dir: str) -> Optional[Plan]:
  """The plan recorded in output_dir's fingerprint, or None."""
  recorded = output_dir_lib.recorded_section(output_dir, PLAN_KEY)
  if recorded is None:
    return None
  try:
    return Plan(**recorded)
  except TypeError as e:
    raise RunConfigError(
        f"{os.path.join(output_dir, output_dir_lib.FINGERPRINT_FILE)}: its "
        f"{PLAN_KEY} is not a plan ({e}): pass --overwrite to start "
        "over") from None


def make_plan(minutes: float, warmup_fraction: float, *, used: float,
              probe_steps: int, seconds_per_step: float,
              steps_per_call: int, final_seconds: float,
              checkpoint_steps: int, checkpoint_seconds: float) -> Plan:
  """The plan whose steps, checkpoints (each `checkpoint_seconds`, with its
  eval) and last save and eval (`final_seconds`) end at the budget; `used`:
  seconds gone. RunConfigError when nothing is left to train."""
  left = minutes * 60 - used - final_seconds
  # Each step also carries its share of the checkpoints on the way.
  per_step = seconds_per_step + checkpoint_seconds / checkpoint_steps
  calls = int(left / (per_step * steps_per_call))
  if calls < 1:
    raise RunConfigError(no_time_to_train(
        minutes, used, final_seconds, steps_per_call,
        seconds_per_step * steps_per_call, calls_to_come=1))
  train = calls * steps_per_call
  total = probe_steps + train
  reserve = (final_seconds +
             (total // checkpoint_steps) * checkpoint_seconds)
  return Plan(budget_minutes=minutes, warmup_fraction=warmup_fraction,
              probe_steps=probe_steps, num_train_steps=total,
              num_warmup_steps=int(round(warmup_fraction * train)),
              seconds_per_step=seconds_per_step, planned_after_seconds=used,
              reserve_seconds=reserve)


def no_time_to_train(minutes: float, used: float, final_seconds: float,
                     steps_per_call: int, call_seconds: float,
                     calls_to_come: int) -> str:
  """The line of a budget that cannot train, with the budget that would."""
  needed = used + final_seconds + calls_to_come * call_seconds
  return (f"--train_budget_minutes={minutes:g} leaves no time to train: "
          f"{used:.0f} s went to the start (imports, the input checks, the "
          f"model build, the step-0 eval) and the timed steps, "
          f"{final_seconds:.0f} s are needed for the last checkpoint and "
          f"eval, and one call of {steps_per_call} steps takes "
          f"{call_seconds:.1f} s: give at least "
          f"--train_budget_minutes={math.ceil(needed / 60) + 1} on this "
          "machine as loaded now")


@keras.saving.register_keras_serializable(package="albert_tf")
class PlannedSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """0 for the probe's steps, then linear warmup to `peak` and polynomial
  decay to 0 at the plan's last step; variables, so that `set_plan` works
  after the train step has been traced."""

  def __init__(self, peak: float, power: float = 1.0):
    self.peak = float(peak)
    self.power = float(power)
    # Until a plan is set, every step is a probe step.
    self.probe = tf.Variable(2.0**31, trainable=False, dtype=tf.float32,
                             name="budget_probe_steps")
    self.total = tf.Variable(2.0**31 + 1, trainable=False, dtype=tf.float32,
                             name="budget_train_steps")
    self.warmup = tf.Variable(0.0, trainable=False, dtype=tf.float32,
                              name="budget_warmup_steps")

  def set_plan(self, plan: Plan) -> None:
    self.probe.assign(plan.probe_steps)
    self.total.assign(plan.num_train_steps)
    self.warmup.assign(plan.num_warmup_steps)

  def __call__(self, step):
    step = tf.cast(step, tf.float32) - self.probe
    span = tf.maximum(self.total - self.probe, 1.0)
    progress = tf.clip_by_value(step / span, 0.0, 1.0)
    decayed = self.peak * tf.pow(1.0 - progress, self.power)
    warmup = self.peak * step / tf.maximum(self.warmup, 1.0)
    rate = tf.where(step < self.warmup, warmup, decayed)
    return tf.where(step < 0, 0.0, rate)

  def get_config(self):
    return {"peak": self.peak, "power": self.power}


class Probe(keras.callbacks.Callback):
  """Stops fit once enough step calls after the first (traced) one are
  timed; `seconds_per_step` then holds the slowest worker's third quartile
  of the calls. Calls vary by 10-20% over a minute on a shared CPU:
  one-minute plans made from the median ran out before their schedule
  ended in 2 of 3 runs, from the third quartile in 1 of 6 (AMD EPYC,
  tests/test_budget.py's run). A budget that cannot hold the rest of the
  probe, one call that trains and the last save and eval (`final_seconds`)
  is refused at the first timed call."""

  def __init__(self, minutes: float, strategy, started: Optional[float] = None,
               final_seconds: float = 0.0):
    super().__init__()
    self.strategy = strategy
    self.minutes = minutes
    self.started = started
    self.final_seconds = final_seconds
    low, high = PROBE_SECONDS
    self.seconds = min(max(PROBE_SHARE * minutes * 60, low), high)
    self.marks = []  # (time, step) at the end of each call
    self.seconds_per_step = None

  def on_train_batch_end(self, batch, logs=None):
    self.marks.append((time.perf_counter(), callbacks.step_of(self.model)))
    (t0, s0), (t1, s1) = self.marks[0], self.marks[-1]
    done = len(self.marks) > PROBE_CALLS and t1 - t0 >= self.seconds
    if agree_max(self.strategy, float(done)):
      times, steps = (np.diff(column) for column in zip(*self.marks))
      self.seconds_per_step = agree_max(
          self.strategy, float(np.percentile(times / steps, 75)))
      self.model.stop_training = True
    elif self.started is not None and len(self.marks) > 1:
      self._refuse_if_out_of_time((t1 - t0) / (len(self.marks) - 1),
                                  (s1 - s0) // (len(self.marks) - 1))

  def _refuse_if_out_of_time(self, call_seconds: float, steps_per_call: int):
    used = time.time() - self.started
    to_come = max(PROBE_CALLS + 1 - len(self.marks), 0) + 1
    needed = used + self.final_seconds + to_come * call_seconds
    if agree_max(self.strategy, float(needed > self.minutes * 60)):
      raise RunConfigError(no_time_to_train(
          self.minutes, agree_max(self.strategy, used), self.final_seconds,
          steps_per_call, agree_max(self.strategy, call_seconds), to_come))


class Deadline(keras.callbacks.Callback):
  """Stops fit when the next call (the last calls' median), and the
  checkpoint and eval that may end it, would cross into the reserve; fit
  then ends its epoch, so the CheckpointSaver saves this step. The reserve
  grows to the longest checkpoint seen: a machine that slowed after the
  plan still ends inside the budget. `ended`: when the last call ended."""

  def __init__(self, deadline: float, reserve_seconds: float, strategy, *,
               checkpoint_steps: int, checkpoint_seconds: float):
    super().__init__()
    self.strategy = strategy
    self.deadline = deadline
    self.reserve_seconds = reserve_seconds
    self.checkpoint_steps = checkpoint_steps
    self.checkpoint_seconds = checkpoint_seconds
    self.hit_at = None
    self.ended = None
    self._calls = collections.deque(maxlen=20)  # the last calls' seconds

  def on_train_batch_begin(self, batch, logs=None):
    self._began = time.time()

  def on_train_batch_end(self, batch, logs=None):
    now = self.ended = time.time()
    self._calls.append(now - self._began)
    step = callbacks.step_of(self.model)
    calls = self.model.steps_per_execution or 1
    ends_epoch = (step + calls) // self.checkpoint_steps > (
        step // self.checkpoint_steps)
    # The median: a fit's first call (its input's start) is no measure.
    coming = float(np.median(self._calls)) + (
        self.checkpoint_seconds if ends_epoch else 0.0)
    late = now + coming + self.reserve_seconds >= self.deadline
    if agree_max(self.strategy, float(late)):
      self.hit_at = step
      self.model.stop_training = True

  def on_epoch_end(self, epoch, logs=None):
    # After the CheckpointSaver's save and eval (it is earlier in the list).
    if self.ended is not None and not self.model.stop_training:
      took = time.time() - self.ended
      self.checkpoint_seconds = max(self.checkpoint_seconds, took)
      self.reserve_seconds = max(self.reserve_seconds, took)


def plan_with_probe(trainer, eval_seconds: float, logger) -> "Deadline":
  """Times a Trainer's first steps at learning rate 0 (logged by `logger`),
  plans and records the rest of its budget; the Deadline to train with."""
  s = trainer.settings
  probe = Probe(s.budget_minutes, trainer.strategy, started=s.started,
                final_seconds=eval_seconds)
  trainer.fit_from_step(
      epochs=1, steps_per_epoch=s.num_train_steps - trainer.step,
      callbacks=[callbacks.StopOnNonFiniteLoss(trainer.schedule,
                                               trainer.manager), logger,
                 probe],
      verbose=0)
  if probe.seconds_per_step is None:
    raise RunConfigError(
        f"the training input ended after {trainer.step} steps, before "
        "--train_budget_minutes could time them")
  # A checkpoint's write, timed (then removed): the second, as the first
  # also traces the save.
  scratch = os.path.join(trainer.ckpt_dir, ".budget_probe")
  for _ in range(2):
    began = time.time()
    trainer.checkpoint.write(os.path.join(scratch, "ckpt"))
    save_seconds = time.time() - began
  tf.io.gfile.rmtree(scratch)
  save_seconds = agree_max(trainer.strategy, save_seconds)
  eval_seconds = agree_max(trainer.strategy, eval_seconds)
  final_seconds = save_seconds + (eval_seconds if s.final_eval else 0.0)
  checkpoint_seconds = save_seconds + (
      eval_seconds if s.eval_at_checkpoints else 0.0)
  trainer.plan = make_plan(
      s.budget_minutes, s.budget_warmup_fraction,
      used=agree_max(trainer.strategy, time.time() - s.started),
      probe_steps=trainer.step, seconds_per_step=probe.seconds_per_step,
      steps_per_call=trainer.steps_per_execution, final_seconds=final_seconds,
      checkpoint_steps=s.checkpoint_steps,
      checkpoint_seconds=checkpoint_seconds)
  trainer.schedule.set_plan(trainer.plan)
  if trainer.chief:
    output_dir_lib.record_section(trainer.output_dir, PLAN_KEY,
                                  dataclasses.asdict(trainer.plan))
  logging.info("%s", trainer.plan.line())
  trainer.settings = dataclasses.replace(
      s, num_train_steps=trainer.plan.num_train_steps)
  return Deadline(s.started + s.budget_minutes * 60, final_seconds,
                  trainer.strategy, checkpoint_steps=s.checkpoint_steps,
                  checkpoint_seconds=checkpoint_seconds)
