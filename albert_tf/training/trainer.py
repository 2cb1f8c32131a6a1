"""One trainer for every task: Keras `fit` under any tf.distribute strategy.

    trainer = Trainer(task, config, settings, strategy)
    trainer.restore(init_checkpoint)        # resume, else initial weights
    trainer.train()                         # fit, checkpoint, eval, keep best
    metrics = trainer.evaluate()

A task brings model, inputs, loss, metrics and predictions; the trainer
owns the rest: the optimizer (warmup + polynomial decay, no weight decay on
LayerNorm and bias) under the strategy's scope; checkpoints of weights,
optimizer state and step in output_dir (a kill loses at most the steps since
the last; a SIGTERM saves first; the same command resumes); a non-finite
loss stops the run, and non-finite weights are never saved nor restored;
one Keras "epoch" per checkpoint interval; eval at checkpoints, the best
kept in output_dir/best/; the logs of `callbacks`. Non-chief workers save
to a scratch output_dir/.worker_N (every worker must join a save).
"""

import dataclasses
import json
import math
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

from absl import logging
import tensorflow as tf

from albert_tf.core import errors
from albert_tf.training import budget
from albert_tf.training import callbacks
from albert_tf.training import checkpoints
from albert_tf.training import optimization
from albert_tf.training import runtime
from albert_tf.training import step_loop
from albert_tf.training.runtime import is_chief


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
  seq_length: float = 0          # tokens per example, for tokens/s
  flops_per_example: float = 0.0  # with peak_flops (FLOP/s): MFU in the logs
  peak_flops: float = 0.0
  optimizer: str = "lamb"
  learning_rate: float = 0.00176
  num_warmup_steps: int = 0
  poly_power: float = 1.0
  weight_decay: float = optimization.WEIGHT_DECAY
  steps_flag: str = "num_train_steps"  # named when nothing is left to train
  # A wall-clock budget (training.budget) instead of num_train_steps and
  # num_warmup_steps: minutes from `started` (time.time()) to the end of
  # training, its checkpoints and, with final_eval, the eval after it.
  budget_minutes: float = 0.0
  budget_warmup_fraction: float = 0.1
  started: float = 0.0
  final_eval: bool = False

  def optimizer_fingerprint(self) -> dict:
    # "rule" tells the original's lamb/adamw from older runs' Keras rules.
    fingerprint = {"name": self.optimizer,
                   "rule": optimization.update_rule(self.optimizer),
                   "learning_rate": self.learning_rate,
                   "num_warmup_steps": self.num_warmup_steps,
                   "poly_power": self.poly_power,
                   "weight_decay": self.weight_decay}
    if self.budget_minutes:  # the plan (recorded later) sets the warmup
      fingerprint.update(num_warmup_steps=None,
                         train_budget_minutes=self.budget_minutes,
                         budget_warmup_fraction=self.budget_warmup_fraction)
    return fingerprint


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


# ------------------------------------------------------------ the trainer
class Trainer:
  """Runs one task's training, checkpoints and evaluation (see module doc)."""

  def __init__(self, task, config, settings: TrainerSettings, strategy):
    self.task = task
    self.strategy = strategy
    # A budget's plan (a resumed run reads its first run's), its Deadline.
    self.plan = self.deadline = None
    if settings.budget_minutes:
      self.plan = budget.read_plan(settings.output_dir)
      settings = dataclasses.replace(settings, num_train_steps=(
          self.plan.num_train_steps if self.plan
          # Until the probe has planned: whole checkpoint intervals.
          else settings.checkpoint_steps * 10**6))
    self.settings = settings
    self.chief = is_chief(strategy)
    self.output_dir = settings.output_dir
    self.ckpt_dir = self.output_dir if self.chief else os.path.join(
        self.output_dir, f".worker_{strategy.cluster_resolver.task_id}")
    tf.io.gfile.makedirs(self.ckpt_dir)
    callbacks.remove_stale_temporaries(self.ckpt_dir)
    # The ckpt-N files decide, not only the `checkpoint` index.
    checkpoints.reconcile_state(self.ckpt_dir)

    existing = tf.train.latest_checkpoint(self.ckpt_dir)
    start = int(existing.rsplit("-", 1)[1]) if existing else 0
    chunks = segments(start, settings.num_train_steps,
                      settings.checkpoint_steps)
    # steps_per_execution must divide every fit chunk.
    self.steps_per_execution = math.gcd(settings.iterations_per_loop,
                                        *[s for s, _ in chunks])
    if chunks and self.steps_per_execution != settings.iterations_per_loop:
      spans = sorted({size for size, _ in chunks}, reverse=True)
      logging.info(
          "%d steps per call (--iterations_per_loop=%d): a call must end at "
          "every checkpoint and at the last step, which are %s steps apart "
          "in this run", self.steps_per_execution,
          settings.iterations_per_loop, " and ".join(map(str, spans)))

    runtime.warn_about_cpu_only_settings(settings.jit_compile)
    with strategy.scope():
      self.model = task.build_model(config)
      if settings.budget_minutes:
        self.schedule = budget.PlannedSchedule(settings.learning_rate,
                                               power=settings.poly_power)
        if self.plan:
          self.schedule.set_plan(self.plan)
      else:
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
      step_loop.install(self.model)
      # The optimizer's own variables (moments, loss scale), not the Keras
      # object, which would also save every weight as optimizer/...; a
      # tf.train.Checkpoint keeps the path optimizer/variables/N.
      optimizer_state = tf.train.Checkpoint(
          variables=list(self.model.optimizer.variables))
      self.checkpoint = checkpoints.make_checkpoint(
          self.model, optimizer=optimizer_state,
          step=self.model.optimizer.iterations)
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, self.ckpt_dir,
        max_to_keep=settings.keep_checkpoint_max, checkpoint_name="ckpt")
    self._eval_writer = None
    # step -> eval results: eval_log.jsonl's at restore, then evaluate()'s;
    # the same on every worker (not the file the chief is writing).
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
    self.evaluated = {r.get("global_step"): r for r in callbacks.read_jsonl(
        os.path.join(self.output_dir, callbacks.EVAL_LOG))}
    best = self.best()
    self._best_value = best.get(self.task.best_metric) if best else None
    resumed = self._restore_latest_readable()
    if resumed:
      logging.info("Resumed from %s", resumed)
      if self.chief:
        for name in (callbacks.TRAIN_LOG, callbacks.EVAL_LOG):
          callbacks.drop_log_lines_after(
              os.path.join(self.output_dir, name), self.step,
              key="step" if name == callbacks.TRAIN_LOG else "global_step")
    elif init_checkpoint:
      try:
        # A part the task will not take from --init_checkpoint (a head
        # fine-tuned on other labels) keeps its initial weights.
        skip = set(getattr(self.task, "init_skip_parts", ()))
        report = checkpoints.restore_weights(
            init_checkpoint, self.model,
            parts=[p for p in checkpoints.model_parts(self.model)
                   if p not in skip] if skip else None)
      except (ValueError, TypeError) as e:
        raise ValueError(
            f"--init_checkpoint={init_checkpoint} does not fit the model "
            f"config: {e}") from None
      logging.info("Initialised weights from %s: %s", init_checkpoint, report)
    if resumed or init_checkpoint:
      checkpoints.check_finite(
          self.model.trainable_variables,
          resumed or f"--init_checkpoint={init_checkpoint}")
    elif not training:
      raise ValueError(
          f"--output_dir={self.output_dir} holds no checkpoint and no "
          "--init_checkpoint is given: there are no weights to evaluate or "
          "predict with (a mistyped --output_dir?)")
    return self.step

  def _restore_latest_readable(self) -> Optional[str]:
    # An unreadable checkpoint (a cut file, a full disk) is skipped, named.
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
    """best/best.json, its "checkpoint" a path; None without one."""
    return checkpoints.read_best_record(self.output_dir)

  # --------------------------------------------------------- train
  def train(self):
    s = self.settings
    if self.step >= s.num_train_steps:
      logging.warning("Nothing to train: --output_dir=%s is at step %d, "
                      "--%s=%d (raise it to train further)",
                      self.output_dir, self.step, s.steps_flag,
                      s.num_train_steps)
      # Stopped between its last checkpoint and that one's eval: make it.
      if (s.eval_at_checkpoints and self.step
          and self.step not in self.evaluated):
        logging.info("Step %d has no eval in %s: evaluating it", self.step,
                     os.path.join(self.output_dir, callbacks.EVAL_LOG))
        self.evaluate()
      return
    # A budget not yet planned: its step-0 eval is timed for the plan.
    planning = bool(s.budget_minutes) and self.plan is None
    began = time.time()
    # At step 0, and after a kill between a checkpoint and its eval (not at
    # a SIGTERM's save, which lies between two checkpoint intervals).
    if ((s.eval_at_checkpoints or (planning and s.final_eval))
        and self.step not in self.evaluated
        and self.step % s.checkpoint_steps == 0):
      self.evaluate()
    elif planning and s.final_eval:  # logged before a kill in the probe
      self.task.evaluate(self.model, self.strategy)
    log_steps = math.ceil(s.log_steps / self.steps_per_execution) * (
        self.steps_per_execution)
    # Keras's bar on a terminal; in a file (where its redraws pile up), a
    # log line every log_steps.
    bar = self.chief and sys.stdout.isatty()
    # A budget's timed first steps log as the planned ones will: at one
    # line every few steps, the lines cost as much as the steps.
    logger = callbacks.MetricsLogger(
        self.output_dir, self.schedule, log_steps=log_steps,
        batch_size=s.train_batch_size,
        num_train_steps=0 if planning else s.num_train_steps,
        seq_length=s.seq_length, write=self.chief, show=not bar,
        flops_per_example=s.flops_per_example, peak_flops=s.peak_flops)
    deadline = None
    if planning:
      deadline = self.deadline = budget.plan_with_probe(
          self, time.time() - began, logger)
      s = self.settings
      logger.num_train_steps = s.num_train_steps
    on_signal = callbacks.SaveOnSignal(self.manager, self.strategy)
    fit_callbacks = [
        # First: a non-finite loss stops before the step is logged or saved.
        callbacks.StopOnNonFiniteLoss(self.schedule, self.manager),
        on_signal,
        logger,
        callbacks.CheckpointSaver(
            self.manager, schedule=self.schedule, on_save=(
                lambda step: self.evaluate()) if s.eval_at_checkpoints
            else None),
    ] + ([deadline] if deadline else [])
    with on_signal.watch():
      for steps_per_epoch, epochs in segments(self.step, s.num_train_steps,
                                              s.checkpoint_steps):
        epoch0 = self.step // s.checkpoint_steps
        self.fit_from_step(initial_epoch=epoch0, epochs=epoch0 + epochs,
                  steps_per_epoch=steps_per_epoch, callbacks=fit_callbacks,
                  verbose=1 if bar else 0)
        if self.step >= s.num_train_steps:
          break
        if deadline and deadline.hit_at is not None:
          logging.warning(
              "--train_budget_minutes=%g ran out at step %d of the plan's %d "
              "(the steps ran slower than the timed ones): saved there, with "
              "the learning rate at %g, not yet at the end of its schedule; "
              "the same command continues the plan", s.budget_minutes,
              self.step, s.num_train_steps, float(self.schedule(self.step)))
          break
        if (on_signal.received and not on_signal.saved and not isinstance(
            self.strategy, tf.distribute.MultiWorkerMirroredStrategy)):
          on_signal.on_train_batch_end(None)  # it came between two fit calls
        if on_signal.saved:
          raise errors.Interrupted(
              f"stopped by {on_signal.received} at step {self.step} of "
              f"{s.num_train_steps}: saved {on_signal.saved}; the same "
              "command resumes there",
              signal_name=on_signal.received)

  def fit_from_step(self, **fit_args):
    """model.fit on the training inputs from this step on."""
    s = self.settings
    dataset = self.task.build_inputs(
        "train", self.strategy, s.train_batch_size, start_step=self.step,
        num_steps=s.num_train_steps)
    self.task.guard_input_errors(
        lambda: self.model.fit(dataset, shuffle=False, **fit_args))

  # --------------------------------------------------------- eval
  def evaluate(self) -> Dict[str, float]:
    """The task's dev metrics at this step; logged, and the best one kept."""
    step = self.step
    results = dict(self.task.evaluate(self.model, self.strategy))
    results["global_step"] = step
    logging.info("Eval at step %d: %s", step, results)
    # The best first: a kill between the two re-evaluates on resume.
    self._keep_if_best(results, step)
    self.evaluated[step] = results
    if self.chief:
      if self._eval_writer is None:
        self._eval_writer = tf.summary.create_file_writer(
            os.path.join(self.output_dir, "eval"))
      callbacks.write_scalars(self._eval_writer, step, {
          k: v for k, v in results.items()
          if k != "global_step" and isinstance(v, (int, float))})
      with open(os.path.join(self.output_dir, callbacks.EVAL_LOG), "a",
                encoding="utf-8") as f:
        f.write(json.dumps(results) + "\n")
    return results

  def _keep_if_best(self, results, step):
    name = self.task.best_metric
    # Step 0 (an untrained head) is never kept: on a small dev set it could
    # win by luck. Among trained steps the first to reach the best is kept;
    # the value in memory is the same on every worker (all join the write).
    if (not name or name not in results or step == 0
        or not self.settings.eval_at_checkpoints
        or (self._best_value is not None
            and not results[name] > self._best_value)):
      return
    self._best_value = results[name]
    checkpoints.write_best(self.model, self.ckpt_dir, step, name, results,
                           chief=self.chief)
    if self.chief:
      logging.info("New best %s=%.4f at step %d", name, results[name], step)

  def finish(self):
    """Removes a non-chief worker's scratch checkpoints."""
    if not self.chief:
      shutil.rmtree(self.ckpt_dir, ignore_errors=True)
