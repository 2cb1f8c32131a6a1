"""The callbacks the trainer runs `fit` with, and the files they leave.

    MetricsLogger   every log_steps: a log line with the ETA, TensorBoard
                    scalars (output_dir/train/) and a train_log.jsonl record
    CheckpointSaver a checkpoint at the end of every Keras epoch (= every
                    checkpoint interval), of finite weights only
    StopOnNonFiniteLoss  a NaN or inf training loss stops fit with one line
    SaveOnSignal    after a SIGTERM (a scheduler's notice before preemption),
                    a checkpoint at the current step, then fit stops

plus what a resumed run does with what an interrupted one left: log lines
past its checkpoint, temporaries of a save that was killed.
"""

import datetime
import json
import math
import os
import signal
import time
from typing import Dict, List

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf.core.file_io import atomic_writer
from albert_tf.training import checkpoints
from albert_tf.training import runtime

TRAIN_LOG = "train_log.jsonl"
EVAL_LOG = "eval_log.jsonl"


def write_scalars(writer, step: int, values: Dict[str, float]):
  with writer.as_default(step=step):
    for key, value in values.items():
      tf.summary.scalar(key, value)
  writer.flush()


def mean_metrics(model: keras.Model) -> List[keras.metrics.Mean]:
  """The model's Mean metrics, out of Keras's compiled containers."""
  found = []

  def visit(metric):
    if isinstance(metric, keras.metrics.Mean):
      found.append(metric)
    for inner in getattr(metric, "metrics", []) or []:
      visit(inner)
  for metric in model.metrics:
    visit(metric)
  return found


class MetricsLogger(keras.callbacks.Callback):
  """Every `log_steps`: a log line with the ETA, TensorBoard and train_log.jsonl.

  Losses and metrics are means over the steps since the previous line: the
  result of each metric's state minus its state at that line. A Mean's state
  (weighted sum, sum of weights) adds up over steps, so that is the exact
  window mean; Keras resets the states at each epoch start, where the window
  starts again (the progress bar keeps showing the epoch means).
  """

  def __init__(self, output_dir: str, schedule, *, log_steps: int,
               batch_size: int, num_train_steps: int, seq_length: int = 0,
               write: bool = True, show: bool = True,
               flops_per_example: float = 0.0, peak_flops: float = 0.0):
    """num_train_steps (0 while a budget is planned): the progress and ETA;
    seq_length: adds tokens/s; flops_per_example and peak_flops (FLOP/s):
    add "mfu"; show: a log line per record (off under Keras's bar)."""
    super().__init__()
    self.show = show
    self.schedule = schedule
    self.log_steps = log_steps
    self.batch_size = batch_size
    self.num_train_steps = num_train_steps
    self.seq_length = seq_length
    self.flops_per_example = flops_per_example
    self.peak_flops = peak_flops
    self.write = write
    self.jsonl_path = os.path.join(output_dir, TRAIN_LOG)
    self.writer = (tf.summary.create_file_writer(
        os.path.join(output_dir, "train")) if write else None)
    self._last_step = self._last_time = self._start_step = self._start = None
    self._last_states = {}

  def _window_means(self) -> Dict[str, float]:
    # Every worker reads the same variables in the same order (a read of a
    # metric variable is an all-reduce under MultiWorkerMirrored).
    means = {}
    for metric in mean_metrics(self.model):
      state = [np.asarray(v.numpy(), np.float64) for v in metric.variables]
      last = self._last_states.get(metric.name, [0.0] * len(state))
      window = [s - l for s, l in zip(state, last)]
      self._last_states[metric.name] = state
      if not any(np.any(w != 0) for w in window):  # no step added to it
        means[metric.name] = float("nan")
        continue
      means[metric.name] = float(metric.stateless_result(
          [np.asarray(w, v.dtype) for w, v in zip(window, metric.variables)]))
    return means

  def on_train_begin(self, logs=None):
    if self._start is None:
      self._start_step, self._start = step_of(self.model), time.time()
    self._last_step, self._last_time = step_of(self.model), time.time()

  def on_epoch_begin(self, epoch, logs=None):
    self._last_states = {}

  def on_train_batch_end(self, batch, logs=None):
    step = step_of(self.model)
    # At multiples of log_steps, also after a resume between two of them
    # (a SIGTERM's save): its first window is then the shorter one.
    if step // self.log_steps == self._last_step // self.log_steps:
      return
    now = time.time()
    record = {"step": step, **self._window_means()}
    record["learning_rate"] = float(self.schedule(step - 1))
    record["examples_per_second"] = (
        (step - self._last_step) * self.batch_size /
        max(now - self._last_time, 1e-9))
    if self.seq_length:
      record["tokens_per_second"] = (record["examples_per_second"] *
                                     self.seq_length)
    if self.flops_per_example and self.peak_flops:
      record["mfu"] = (record["examples_per_second"] *
                       self.flops_per_example / self.peak_flops)
    record["time"] = now
    self._last_step, self._last_time = step, now
    total = self.num_train_steps
    if self.show:
      mfu = f", MFU {record['mfu']:.0%}" if "mfu" in record else ""
      # No total yet while a budget's first steps are timed for its plan.
      where = "" if not total else f"/{total} ({100 * step / total:.0f}%)"
      eta = "" if not total else ", ETA %s" % datetime.timedelta(seconds=round(
          (now - self._start) / max(step - self._start_step, 1) *
          (total - step)))
      logging.info("step %d%s loss %.4f, %.1f examples/s%s%s", step, where,
                   record.get("loss", math.nan), record["examples_per_second"],
                   mfu, eta)
    if not self.write:
      return
    write_scalars(self.writer, step, {k: v for k, v in record.items()
                                      if k not in ("step", "time")})
    with open(self.jsonl_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")


def step_of(model) -> int:
  return int(model.optimizer.iterations.numpy())


def _saved_at(manager, step) -> bool:
  latest = manager.latest_checkpoint
  return bool(latest and latest.endswith(f"-{step}"))


def _not_saved(manager) -> str:
  latest = manager.latest_checkpoint
  return ("stopped without saving this step; " +
          (f"the last finite checkpoint, {latest}, is kept" if latest else
           "no checkpoint was written") +
          " (a lower --learning_rate?)")


class StopOnNonFiniteLoss(keras.callbacks.TerminateOnNaN):
  """Keras's TerminateOnNaN, raising a one-line error with the step and the
  learning rate before anything saves or logs the step. The loss it reads
  is the epoch's running mean: a NaN in any step of a call shows in it.
  """

  def __init__(self, schedule, manager):
    super().__init__(raise_error=True)
    self.schedule = schedule
    self.manager = manager

  def on_batch_end(self, batch, logs=None):
    try:
      super().on_batch_end(batch, logs)
    except RuntimeError:
      step = step_of(self.model)
      calls = self.model.steps_per_execution
      where = (f"; steps {step - calls + 1}-{step} ran as one "
               "--iterations_per_loop call" if calls > 1 else "")
      loss = float(np.mean(logs["loss"]))  # [1] under MultiWorkerMirrored
      rate = float(self.schedule(step - 1))
      raise checkpoints.NonFiniteError(
          f"training loss is {loss} at step {step} (learning rate {rate:g}"
          f"{where}): {_not_saved(self.manager)}") from None


class CheckpointSaver(keras.callbacks.Callback):
  """Saves at the end of every Keras epoch (= every checkpoint interval),
  never weights that are not finite (a finite loss does not prove them so:
  the step's update comes after it)."""

  def __init__(self, manager, on_save=None, schedule=None):
    super().__init__()
    self.manager = manager
    self.on_save = on_save
    self.schedule = schedule

  def on_epoch_end(self, epoch, logs=None):
    step = step_of(self.model)
    if _saved_at(self.manager, step):
      return
    where = f"after step {step}"
    if self.schedule:
      where += f" (learning rate {float(self.schedule(step - 1)):g})"
    try:
      checkpoints.check_finite(self.model.trainable_variables, where)
    except checkpoints.NonFiniteError as e:
      raise checkpoints.NonFiniteError(
          f"{e}: {_not_saved(self.manager)}") from None
    path = self.manager.save(checkpoint_number=step)
    logging.info("Saved checkpoint %s", path)
    if self.on_save:
      self.on_save(step)


class SaveOnSignal(keras.callbacks.Callback):
  """A SIGTERM or a Ctrl-C (SIGINT) saves a checkpoint at the current step
  and stops fit; a second Ctrl-C stops at once (KeyboardInterrupt).

  What Keras's BackupAndRestore and TF's PreemptionCheckpointHandler do for
  a preemption notice, written here for this trainer's own checkpoints: the
  same command then resumes at exactly this step (the inputs skip to it).
  `watch()` installs the handler for as long as the trainer trains; the
  signal only sets a flag, read after each step execution, so a save never
  starts inside a step. Under MultiWorkerMirrored the workers agree on the
  flag first (a signal may reach one of them only), and all save together.
  """

  def __init__(self, manager, strategy,
               signals=(signal.SIGTERM, signal.SIGINT)):
    super().__init__()
    self.manager = manager
    self.strategy = strategy
    self.signals = signals
    self.received = None   # the signal's name, once one came
    self.saved = None      # the path saved after it

  def watch(self):
    return runtime.handling(self.signals, self._handle)

  def _handle(self, number, frame):
    del frame
    if self.received and number == signal.SIGINT:  # asked twice: now
      raise KeyboardInterrupt
    self.received = signal.Signals(number).name
    if number == signal.SIGINT:
      logging.warning("Ctrl-C: saving at the end of this step (press it "
                      "again to stop without saving)")

  def on_train_batch_end(self, batch, logs=None):
    if self.saved or not runtime.agree_max(
        self.strategy, float(self.received is not None)):
      return
    step = step_of(self.model)
    latest = self.manager.latest_checkpoint
    if not _saved_at(self.manager, step):
      checkpoints.check_finite(self.model.trainable_variables,
                               f"at step {step}, on {self.received}")
      latest = self.manager.save(checkpoint_number=step)
    self.saved = latest
    self.received = self.received or "SIGTERM (on another worker)"
    logging.warning("%s at step %d: saved %s", self.received, step, latest)
    self.model.stop_training = True


def read_jsonl(path: str) -> List[dict]:
  """The records of a JSONL log; a last line cut short (a kill mid-write)
  is dropped with a warning, a bad line before it is an error."""
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as f:
    lines = [(n, l) for n, l in enumerate(f, 1) if l.strip()]
  records = []
  for position, (number, line) in enumerate(lines):
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError as e:
      if position < len(lines) - 1:
        raise ValueError(
            f"{path}:{number}: not a JSON record ({e.msg}), and lines follow "
            "it: edited by hand? Fix or delete the line, or pass "
            "--overwrite to start over") from None
      logging.warning("%s:%d: the last line is cut short (%s; a run killed "
                      "while writing it): dropped", path, number, e.msg)
  return records


def drop_log_lines_after(path: str, step: int, key: str = "step"):
  """A resumed run re-logs the steps after its checkpoint: drop the old ones
  (and a last line cut short)."""
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    count = sum(1 for l in f if l.strip())
  kept = [r for r in read_jsonl(path) if r.get(key, 0) <= step]
  if len(kept) != count:  # whole or not at all: a full disk keeps the log
    with atomic_writer(path) as f:
      f.writelines(json.dumps(r) + "\n" for r in kept)


def remove_stale_temporaries(directory: str):
  """A save killed midway leaves `<prefix>_temp*` files or folders (TF
  writes there, then renames); they are garbage at the next start."""
  best_dir = checkpoints.BEST_DIR
  for pattern in ("*_temp*", os.path.join(best_dir, "*_temp*"),
                  os.path.join(best_dir, checkpoints.BEST_FILE + ".tmp")):
    for path in tf.io.gfile.glob(os.path.join(directory, pattern)):
      logging.warning("Removing %s, left by a run killed while saving", path)
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
