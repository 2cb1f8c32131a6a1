"""One trainer for every task: Keras `fit` under any tf.distribute strategy.

    trainer = Trainer(task, config, settings, strategy)
    trainer.restore(init_checkpoint)        # resume, else initial weights
    trainer.train()                         # fit, checkpoint, eval, keep best
    metrics = trainer.evaluate()

What is the trainer's, written once (a task brings model, inputs, loss,
metrics, predictions):
  * model + optimizer (warmup + polynomial decay, LAMB/AdamW, no weight decay
    on LayerNorm and bias) built under the strategy's scope, compiled with
    steps_per_execution and optional XLA;
  * checkpoints of weights, optimizer state and step through
    tf.train.CheckpointManager in output_dir (the latest `keep` of them). A
    SIGKILL at any moment loses at most the steps since the last one; the
    same command resumes there, at the same learning rate;
  * one Keras "epoch" is one checkpoint interval, so the progress bar counts
    the steps to the next checkpoint; the log line adds the run's ETA;
  * eval at checkpoints (when the settings ask), and the best checkpoint by
    the task's dev metric kept in output_dir/best/ with best.json;
  * the same logs for every task: TensorBoard events (train/, eval/),
    train_log.jsonl, eval_log.jsonl.

Non-chief workers of a multi-worker run write their (identical) checkpoints
to a scratch directory output_dir/.worker_N, removed at the end: every
worker must take part in a save.
"""

import dataclasses
import datetime
import json
import math
import os
import shutil
import time
from typing import Dict, List, Optional

from absl import logging
import keras
import tensorflow as tf

from albert_tf.training import checkpoints
from albert_tf.training import optimization
from albert_tf.training.runtime import is_chief

BEST_DIR = checkpoints.BEST_DIR
BEST_FILE = checkpoints.BEST_FILE
TRAIN_LOG = "train_log.jsonl"
EVAL_LOG = "eval_log.jsonl"


@dataclasses.dataclass
class TrainerSettings:
  """How to train; the CLIs fill it from their flags."""
  output_dir: str
  num_train_steps: int
  train_batch_size: int
  checkpoint_steps: int
  keep_checkpoint_max: int = 5
  iterations_per_loop: int = 1
  log_steps: int = 100
  eval_at_checkpoints: bool = False
  jit_compile: bool = False
  seq_length: int = 0            # for tokens/s in the logs
  optimizer: str = "lamb"
  learning_rate: float = 0.00176
  num_warmup_steps: int = 0
  poly_power: float = 1.0
  weight_decay: float = optimization.WEIGHT_DECAY

  def optimizer_fingerprint(self) -> dict:
    return {"name": self.optimizer, "learning_rate": self.learning_rate,
            "num_warmup_steps": self.num_warmup_steps,
            "poly_power": self.poly_power, "weight_decay": self.weight_decay}


def segments(start: int, total: int, every: int) -> List[List[int]]:
  """[steps_per_epoch, epochs] chunks from `start` to `total`, cut at checkpoints."""
  out, step = [], start
  if step % every and step < total:
    first = min(every - step % every, total - step)
    out.append([first, 1])
    step += first
  if (total - step) // every:
    out.append([every, (total - step) // every])
    step += every * out[-1][1]
  if step < total:
    out.append([total - step, 1])
  return out


# ------------------------------------------------------------ Keras gaps
def _fit_under_any_strategy(model, strategy):
  """Two Keras 3.15 gaps under tf.distribute that no public hook covers.

  1. fit/evaluate begin with a "symbolic build" that pulls one batch from
     the training iterator and all-reduces it: the run then skips a batch
     that the default strategy trains on, and MultiWorkerMirrored fails on
     dict batches. Our models and optimizers are built before fit, so the
     build has nothing to do: it is skipped.
  2. Step outputs are reduced across workers with axis=0, which fails on
     scalar metrics: under MultiWorkerMirrored they are handed over as
     [1]-vectors (the reduction returns scalars).
  Tested by tests/test_trainer.py and tests/test_run_pretraining.py (losses
  equal to the default strategy's under mirrored and multi-worker).
  """
  if not tf.distribute.has_strategy():  # the default strategy (in scope)
    return
  if not callable(getattr(keras.Model, "_maybe_symbolic_build", None)):
    # Loud, not silent: without the override every strategy but the default
    # would skip (mirrored) or fail on (multi-worker) the first batch.
    raise RuntimeError(
        f"Keras {keras.__version__} has no Model._maybe_symbolic_build: "
        "albert_tf.training.trainer._fit_under_any_strategy (written for Keras 3.15) "
        "must be updated for it")
  model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None  # pylint: disable=protected-access
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    for name in ("train_step", "test_step"):
      step_fn = getattr(model, name)
      setattr(model, name, lambda data, fn=step_fn: tf.nest.map_structure(
          lambda v: tf.reshape(v, [1]), fn(data)))


# ------------------------------------------------------------ logging
def write_scalars(writer, step: int, values: Dict[str, float]):
  """Scalars for TensorBoard's scalars dashboard."""
  with writer.as_default(step=step):
    for key, value in values.items():
      tf.summary.scalar(key, value)
  writer.flush()


def _metric_trackers(model):
  """The model's mean-type metrics (those with total/count), flattened."""
  found = []

  def visit(metric):
    if hasattr(metric, "total") and hasattr(metric, "count"):
      found.append(metric)
    for inner in getattr(metric, "metrics", []) or []:
      visit(inner)
  for metric in model.metrics:
    visit(metric)
  return found


class MetricsLogger(keras.callbacks.Callback):
  """Every `log_steps`: a log line with the ETA, TensorBoard and train_log.jsonl.

  Losses and metrics are means over the steps since the previous line
  (differences of the trackers' totals and counts, which Keras resets each
  epoch; the progress bar keeps showing the epoch means).
  """

  def __init__(self, output_dir, schedule, settings: TrainerSettings, write):
    super().__init__()
    self.schedule = schedule
    self.settings = settings
    self.write = write
    self.jsonl_path = os.path.join(output_dir, TRAIN_LOG)
    self.writer = (tf.summary.create_file_writer(
        os.path.join(output_dir, "train")) if write else None)
    self._last_step = self._last_time = self._start_step = self._start = None
    self._last_sums = {}

  def _step(self):
    return int(self.model.optimizer.iterations.numpy())

  def _window_means(self):
    trackers = _metric_trackers(self.model)
    values = tf.stack([tf.cast(v, tf.float32) for m in trackers
                       for v in (m.total, m.count)]).numpy().tolist()
    means = {}
    for i, metric in enumerate(trackers):
      total, count = values[2 * i], values[2 * i + 1]
      last_total, last_count = self._last_sums.get(metric.name, (0.0, 0.0))
      if count < last_count:  # Keras reset the tracker at an epoch start
        last_total, last_count = 0.0, 0.0
      means[metric.name] = ((total - last_total) / (count - last_count)
                            if count > last_count else float("nan"))
      self._last_sums[metric.name] = (total, count)
    return means

  def on_train_begin(self, logs=None):
    if self._start is None:
      self._start_step, self._start = self._step(), time.time()
    self._last_step, self._last_time = self._step(), time.time()

  def on_epoch_begin(self, epoch, logs=None):
    self._last_sums = {}

  def on_train_batch_end(self, batch, logs=None):
    step = self._step()
    if step - self._last_step < self.settings.log_steps:
      return
    now = time.time()
    record = {"step": step, **self._window_means()}
    record["learning_rate"] = float(self.schedule(step - 1))
    record["examples_per_second"] = (
        (step - self._last_step) * self.settings.train_batch_size /
        max(now - self._last_time, 1e-9))
    if self.settings.seq_length:
      record["tokens_per_second"] = (record["examples_per_second"] *
                                     self.settings.seq_length)
    record["time"] = now
    self._last_step, self._last_time = step, now
    total = self.settings.num_train_steps
    eta = (now - self._start) / max(step - self._start_step, 1) * (total - step)
    logging.info("step %d/%d (%.0f%%) loss %.4f, %.1f examples/s, ETA %s",
                 step, total, 100 * step / total, record.get("loss", math.nan),
                 record["examples_per_second"],
                 datetime.timedelta(seconds=round(eta)))
    if not self.write:
      return
    write_scalars(self.writer, step, {k: v for k, v in record.items()
                                      if k not in ("step", "time")})
    with open(self.jsonl_path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")


class CheckpointSaver(keras.callbacks.Callback):
  """Saves at the end of every Keras epoch (= every checkpoint interval)."""

  def __init__(self, manager, on_save=None):
    super().__init__()
    self.manager = manager
    self.on_save = on_save

  def on_epoch_end(self, epoch, logs=None):
    step = int(self.model.optimizer.iterations.numpy())
    latest = self.manager.latest_checkpoint
    if latest and latest.endswith(f"-{step}"):
      return
    path = self.manager.save(checkpoint_number=step)
    logging.info("Saved checkpoint %s", path)
    if self.on_save:
      self.on_save(step)


def _drop_log_lines_after(path: str, step: int, key: str = "step"):
  """A resumed run re-logs the steps after its checkpoint: drop the old ones."""
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    lines = [l for l in f if l.strip()]
  kept = [l for l in lines if json.loads(l).get(key, 0) <= step]
  if len(kept) != len(lines):
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(kept)


def _remove_stale_temporaries(directory: str):
  """A save killed midway leaves `<prefix>_temp*` files or folders (TF
  writes there, then renames); they are garbage at the next start."""
  for pattern in ("*_temp*", os.path.join(BEST_DIR, "*_temp*"),
                  os.path.join(BEST_DIR, BEST_FILE + ".tmp")):
    for path in tf.io.gfile.glob(os.path.join(directory, pattern)):
      logging.warning("Removing %s, left by a run killed while saving", path)
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)


# ------------------------------------------------------------ the trainer
class Trainer:
  """Runs one task's training, checkpoints and evaluation (see module doc)."""

  def __init__(self, task, config, settings: TrainerSettings, strategy):
    self.task = task
    self.settings = settings
    self.strategy = strategy
    self.chief = is_chief(strategy)
    self.output_dir = settings.output_dir
    self.ckpt_dir = self.output_dir if self.chief else os.path.join(
        self.output_dir, f".worker_{strategy.cluster_resolver.task_id}")
    tf.io.gfile.makedirs(self.ckpt_dir)
    _remove_stale_temporaries(self.ckpt_dir)

    existing = tf.train.latest_checkpoint(self.ckpt_dir)
    start = int(existing.rsplit("-", 1)[1]) if existing else 0
    plan = segments(start, settings.num_train_steps, settings.checkpoint_steps)
    # steps_per_execution must divide every fit chunk.
    self.steps_per_execution = math.gcd(settings.iterations_per_loop,
                                        *[s for s, _ in plan])
    if plan and self.steps_per_execution != settings.iterations_per_loop:
      logging.info("iterations_per_loop=%d does not divide the checkpoint "
                      "intervals %s; using %d steps per call",
                      settings.iterations_per_loop, plan,
                      self.steps_per_execution)

    with strategy.scope():
      self.model = task.build_model(config)
      self.schedule = optimization.WarmupPolynomialDecay(
          settings.learning_rate, settings.num_train_steps,
          settings.num_warmup_steps, power=settings.poly_power)
      optimizer = optimization.create_optimizer(
          settings.optimizer, self.schedule,
          weight_decay=settings.weight_decay)
      optimization.exclude_layer_norm_and_bias(optimizer, self.model)
      self.model.compile(optimizer=optimizer, loss=task.build_losses(),
                         metrics=task.build_metrics(),
                         steps_per_execution=self.steps_per_execution,
                         jit_compile=settings.jit_compile)
      # Slots exist before a restore looks for them, and before fit traces.
      self.model.optimizer.build(self.model.trainable_variables)
      _fit_under_any_strategy(self.model, strategy)
      # The optimizer is saved as the list of its own variables (moments,
      # loss scale), not as the Keras object: that also references every
      # model weight, which would then be named optimizer/... in the file.
      optimizer_state = tf.__internal__.tracking.AutoTrackable()
      optimizer_state.variables = list(self.model.optimizer.variables)
      self.checkpoint = checkpoints.make_checkpoint(
          self.model, optimizer=optimizer_state,
          step=self.model.optimizer.iterations)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self.ckpt_dir,
        max_to_keep=settings.keep_checkpoint_max, checkpoint_name="ckpt")
    self._eval_writer = None
    # step -> eval results: read from eval_log.jsonl at restore (the same on
    # every worker), then added to by evaluate(). Decisions to evaluate are
    # taken from it, never from the file the chief is writing.
    self.evaluated = {}
    self._best_value = None

  @property
  def step(self) -> int:
    return int(self.model.optimizer.iterations.numpy())

  # --------------------------------------------------------- restore
  def restore(self, init_checkpoint: Optional[str] = None,
              training: bool = True) -> int:
    """Resumes from output_dir's latest readable checkpoint, else loads init
    weights. Without training there must be weights to evaluate."""
    # Read before this process evaluates anything (the same on every worker).
    self.evaluated = self._logged_evals()
    best = self.best()
    self._best_value = best.get(self.task.best_metric) if best else None
    resumed = self._restore_latest_readable()
    if resumed:
      logging.info("Resumed from %s", resumed)
      if self.chief:
        for name in (TRAIN_LOG, EVAL_LOG):
          _drop_log_lines_after(os.path.join(self.output_dir, name), self.step,
                                key="step" if name == TRAIN_LOG
                                else "global_step")
    elif init_checkpoint:
      try:
        report = checkpoints.restore_weights(init_checkpoint, self.model)
      except (ValueError, TypeError) as e:
        raise ValueError(
            f"--init_checkpoint={init_checkpoint} does not fit the model "
            f"config: {e}") from None
      logging.info("Initialised weights from %s: %s", init_checkpoint, report)
    elif not training:
      raise ValueError(
          f"--output_dir={self.output_dir} holds no checkpoint and no "
          "--init_checkpoint is given: there are no weights to evaluate or "
          "predict with (a mistyped --output_dir?)")
    return self.step

  def _restore_latest_readable(self) -> Optional[str]:
    """The newest checkpoint that restores; an unreadable one (a truncated
    file, a disk that filled up) is skipped with a warning naming it."""
    for prefix in reversed(self.manager.checkpoints):
      try:
        self.checkpoint.restore(prefix).assert_existing_objects_matched()
        return prefix
      except (tf.errors.OpError, ValueError, IndexError, AssertionError) as e:
        logging.warning("Checkpoint %s is unreadable (%s): falling back to "
                        "the one before it", prefix,
                        " ".join(str(e).split())[:200])
    if self.manager.checkpoints:
      raise ValueError(
          f"No checkpoint in --output_dir={self.output_dir} is readable "
          f"({', '.join(self.manager.checkpoints)}): remove them or pass "
          "--overwrite to start over")
    return None

  def restore_best(self) -> Optional[int]:
    """Loads the best checkpoint's weights (if one was kept); its step."""
    best = self.best()
    if best is None:
      return None
    checkpoints.make_checkpoint(self.model).read(
        best["checkpoint"]).expect_partial()
    return best["step"]

  def best(self) -> Optional[dict]:
    path = os.path.join(self.output_dir, BEST_DIR, BEST_FILE)
    if not tf.io.gfile.exists(path):
      return None
    with tf.io.gfile.GFile(path) as f:
      best = json.loads(f.read())
    best["checkpoint"] = os.path.join(self.output_dir, BEST_DIR,
                                      best["checkpoint"])
    return best

  # --------------------------------------------------------- train
  def train(self):
    s = self.settings
    if self.step >= s.num_train_steps:
      logging.warning("Nothing to train: --output_dir=%s is at step %d, "
                      "--num_train_steps=%d (raise it to train further)",
                      self.output_dir, self.step, s.num_train_steps)
      return
    # At step 0, and after a kill between a checkpoint and its eval.
    if s.eval_at_checkpoints and self.step not in self.evaluated:
      self.evaluate()
    log_steps = math.ceil(s.log_steps / self.steps_per_execution) * (
        self.steps_per_execution)
    callbacks = [
        MetricsLogger(self.output_dir, self.schedule,
                      dataclasses.replace(s, log_steps=log_steps), self.chief),
        CheckpointSaver(self.manager, on_save=(
            lambda step: self.evaluate()) if s.eval_at_checkpoints else None),
    ]
    for steps_per_epoch, epochs in segments(self.step, s.num_train_steps,
                                            s.checkpoint_steps):
      dataset = self.task.build_inputs(
          "train", self.strategy, s.train_batch_size, start_step=self.step,
          num_steps=s.num_train_steps)
      epoch0 = self.step // s.checkpoint_steps
      self.task.guard_input_errors(lambda: self.model.fit(
          dataset, initial_epoch=epoch0, epochs=epoch0 + epochs,
          steps_per_epoch=steps_per_epoch, callbacks=callbacks,
          verbose=1 if self.chief else 0, shuffle=False))

  # --------------------------------------------------------- eval
  def _logged_evals(self) -> Dict[int, dict]:
    path = os.path.join(self.output_dir, EVAL_LOG)
    if not os.path.exists(path):
      return {}
    with open(path, encoding="utf-8") as f:
      records = [json.loads(l) for l in f if l.strip()]
    return {r.get("global_step"): r for r in records}

  def evaluate(self) -> Dict[str, float]:
    """The task's dev metrics at this step; logged, and the best one kept."""
    step = self.step
    results = dict(self.task.evaluate(self.model, self.strategy))
    results["global_step"] = step
    logging.info("Eval at step %d: %s", step, results)
    # The best checkpoint first: a kill between the two then re-evaluates
    # this step on resume instead of skipping a best it never kept.
    self._keep_if_best(results, step)
    self.evaluated[step] = results
    if self.chief:
      if self._eval_writer is None:
        self._eval_writer = tf.summary.create_file_writer(
            os.path.join(self.output_dir, "eval"))
      write_scalars(self._eval_writer, step, {
          k: v for k, v in results.items()
          if k != "global_step" and isinstance(v, (int, float))})
      with open(os.path.join(self.output_dir, EVAL_LOG), "a",
                encoding="utf-8") as f:
        f.write(json.dumps(results) + "\n")
    return results

  def _keep_if_best(self, results, step):
    name = self.task.best_metric
    if not name or name not in results or not self.settings.eval_at_checkpoints:
      return
    # In memory, the same on every worker (all must join the write).
    if self._best_value is not None and not results[name] > self._best_value:
      return
    self._best_value = results[name]
    best_dir = os.path.join(self.ckpt_dir, BEST_DIR)
    tf.io.gfile.makedirs(best_dir)
    weights = checkpoints.make_checkpoint(self.model)
    prefix = weights.write(os.path.join(best_dir, f"ckpt-{step}"))
    if not self.chief:
      return
    record = {"step": step, name: results[name],
              "checkpoint": os.path.basename(prefix), "metrics": results}
    tmp = os.path.join(best_dir, BEST_FILE + ".tmp")
    with tf.io.gfile.GFile(tmp, "w") as f:
      f.write(json.dumps(record, indent=2))
    # best.json is the record (checkpoints.latest_checkpoint reads it); the
    # state file follows for tools that read only that.
    tf.io.gfile.rename(tmp, os.path.join(best_dir, BEST_FILE), overwrite=True)
    tf.compat.v1.train.update_checkpoint_state(best_dir, prefix)
    # The previous best goes only after best.json names the new one.
    for old in tf.io.gfile.glob(os.path.join(best_dir, "ckpt-*")):
      if not os.path.basename(old).startswith(os.path.basename(prefix) + "."):
        tf.io.gfile.remove(old)
    logging.info("New best %s=%.4f at step %d", name, results[name], step)

  def finish(self):
    """Removes a non-chief worker's scratch checkpoints."""
    if not self.chief:
      shutil.rmtree(self.ckpt_dir, ignore_errors=True)
