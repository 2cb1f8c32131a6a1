r"""Long-run training parity of albert_tf with HF torch and the original's LAMB
(issue 49, part 1). Not part of `make test`; no test imports it.

    python -m benchmarks.long_parity [--steps=2000] [--seeds=12345,54321] \
        [--eval_every=250] [--resume_at=1000] [--noise_floor_seeds=12345] \
        [--input_file=demo_output/tfrecords/train/*.tfrecord,demo_output/tfrecords/reviews/*.tfrecord] \
        [--eval_input_file=demo_output/tfrecords/heldout/*.tfrecord]
    python -m benchmarks.long_parity --from_json=benchmarks/results/long_parity_<cpu>.json

`benchmarks/step_parity.py` checks 25 steps of random batches to float
rounding; this trains long enough for the curves to mean something: the
demo's model and recipe on the demo's own records, on both sides, from the
same initial weights and batches, and asks whether the held-out curves
agree within the spread that the seed alone makes.

Per seed (the seed sets the initial weights and the order of the batches;
within one seed both sides share both):

* the batches: `--steps` training batches of 32 x 64 (10 prediction slots)
  read once through the project's pretraining task
  (`registry.family("pretraining").task(...).build_inputs("train", ...)`:
  `pretraining_dataset.make_distributed_dataset`, shuffle buffer 1000,
  task seed = the seed, as `run_pretraining` builds it) from the records
  data prep wrote (static masks, masked_lm_weights 0 on empty slots, SOP
  labels), after `record_checks.check_records_dirs` checked their
  manifests against --spm_model_file; the same numpy batches are fed to
  both sides. The held-out batches: the task's eval input (the first
  `--eval_batches` batches of `--eval_batch_size` of --eval_input_file, in
  file order), identical for every seed and side.
* ours: `Trainer(task, config, TrainerSettings(optimizer="lamb", ...))`
  builds the model (`AlbertPretrainer`, preset albert_zh_l4_h128, vocab
  size from --spm_model_file), the schedule (`WarmupPolynomialDecay`), the
  optimizer (`create_optimizer("lamb")`, `exclude_layer_norm_and_bias`),
  compiles it and makes the checkpoint object, and `trainer.restore()`
  runs; then Keras `fit` trains the model on the numpy batches, one step
  per epoch so that each step's loss is logged exactly (the trainer's own
  `train()` reads the files itself, with one epoch per checkpoint
  interval), and `trainer.evaluate()` (the task's eval: Keras `evaluate`
  on the held-out files) runs at step 0 and every `--eval_every` steps.
* the peer: HF `AlbertForPreTraining` (eager attention, gelu_new, dropout
  0) with the initial weights copied from ours through the HF converter's
  name map (`step_parity.parameter_pairs`); the loss computed as the
  original does (the sequence output gathered at masked_lm_positions, then
  the MLM head, cross-entropy weighted by masked_lm_weights over
  sum(weights) + 1e-5, plus the mean SOP cross-entropy); the update is
  `step_parity.OriginalRule("lamb")`, a torch port of google-research/
  albert's LAMBOptimizer after its global-norm clip to 1.0, at the
  original schedule (`step_parity.original_lr`). Eval: the same held-out
  batches, MLM accuracy and loss weighted by masked_lm_weights over the
  whole set, SOP accuracy and loss over its examples.
* the noise floor (`--noise_floor_seeds`): a second HF model with PyTorch's
  SDPA attention instead of the eager one, trained in lockstep with the
  first: a change of float rounding only. How far it drifts from the eager
  model is how far rounding alone carries two correct implementations apart
  over this run.

Resume leg (the first seed, `--resume_at`): the uninterrupted run saves the
trainer's checkpoint (`trainer.manager`: encoder, heads, optimizer
variables, step) at `--resume_at`; afterwards a new Trainer is built on the
same output directory under another Keras seed, `restore()` resumes from
that checkpoint, and fit continues on the same batches from there. The
report gives the largest difference of its per-step losses and eval
figures from the uninterrupted run's. (The trainer's real `train()` would
read new batches after a resume: the task re-seeds its input by the step.)

Report: per eval point the three held-out figures of both sides and seeds,
the cross-side differences |ours - HF| (same seed) and the seed spread
|seed 1 - seed 2| (same side); the sides agree at a point when, for each
figure, the cross-side difference of both seeds is no larger than the
smaller of the two sides' seed spreads (strict), else when no larger than
the larger one (lenient). The per-step relative loss difference
|ours - HF| / |HF| of every step is in the .json, and the first step where
it exceeds 1e-6, 1e-4, 1e-2 and 1e-1 (and the noise floor's) in the .md.
Also the mix of the two record directories in each seed's stream, and
whether held-out sequences occur among the training records. Writes
benchmarks/results/long_parity_<cpu-tag>.{md,json} (tmp + replace);
`--from_json` rewrites the .md from a .json. Exits 1 when the sides do not
agree within the seed spread (strict) at some eval point.
Peers: `pip install -r benchmarks/requirements-peers.txt`.
"""

import argparse
import collections
import datetime
import importlib.metadata
import json
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

from benchmarks import step_parity
from benchmarks.step_parity import OriginalRule
from benchmarks.step_parity import copy_ours_to_hf
from benchmarks.step_parity import exclusion_check
from benchmarks.step_parity import original_lr
from benchmarks.step_parity import parameter_pairs
from benchmarks.step_parity import write_atomically

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_INPUT = ("demo_output/tfrecords/train/*.tfrecord,"
                 "demo_output/tfrecords/reviews/*.tfrecord")
DEFAULT_EVAL = "demo_output/tfrecords/heldout/*.tfrecord"
FEATURES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
            "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
TRAIN_KEYS = ("loss", "masked_lm_loss", "sentence_order_loss",
              "masked_lm_accuracy", "sentence_order_accuracy")
EVAL_KEYS = ("masked_lm_accuracy", "masked_lm_loss",
             "sentence_order_accuracy", "sentence_order_loss")
SHOWN = (("masked_lm_accuracy", "held-out MLM accuracy", 4),
         ("masked_lm_loss", "held-out MLM loss", 4),
         ("sentence_order_accuracy", "held-out SOP accuracy", 4))
THRESHOLDS = (1e-6, 1e-4, 1e-2, 1e-1)
# Held-out differences below this (relative to max(1, |value|)) count as
# none: ours accumulates its eval means in float32 Keras metrics, the peer
# in float64 sums (one masked token of the held-out set is 5.6e-5).
EQUAL = 1e-5


# ------------------------------------------------------------ data
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
      for row in _text_rows(batch):
        index[row] = index.get(row, 0) | (1 << d)
  return index, dirs


def _text_rows(batch):
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
  sources = np.array([[index.get(r, 0) for r in _text_rows(
      {k: data[k][s] for k in data})] for s in range(len(data["input_ids"]))])
  labels = {0: "none", **mix_labels(dirs)}
  out = []
  for start in range(0, len(sources), window):
    part = sources[start:start + window]
    out.append({"steps": [start, start + len(part)], **{
        label: float(np.mean(part == m)) for m, label in labels.items()}})
  return out


# ------------------------------------------------------------ ours
def trainer_settings(args, output_dir):
  from albert_tf.training.trainer import TrainerSettings  # pylint: disable=g-import-not-at-top
  return TrainerSettings(
      output_dir=output_dir, num_train_steps=args.steps,
      train_batch_size=args.batch_size,
      checkpoint_steps=args.resume_at or args.steps, keep_checkpoint_max=2,
      iterations_per_loop=1, log_steps=args.eval_every,
      eval_at_checkpoints=False, seq_length=args.seq_length,
      optimizer="lamb", learning_rate=args.learning_rate,
      num_warmup_steps=args.warmup_steps)


def make_trainer(args, config, task, strategy, output_dir, keras_seed):
  """Trainer built and restored as run_pretraining does (resumes when
  output_dir holds a checkpoint)."""
  # pylint: disable=g-import-not-at-top
  import keras
  from albert_tf.training.trainer import Trainer
  keras.utils.set_random_seed(keras_seed)
  trainer = Trainer(task, config, trainer_settings(args, output_dir),
                    strategy)
  trainer.restore(None, training=True)
  return trainer


def train_ours(trainer, data, args, save_at=None, label=""):
  """fit from the trainer's step to args.steps on data's batches, one step
  per epoch; trainer.evaluate() every args.eval_every steps; the trainer's
  checkpoint saved at step save_at."""
  # pylint: disable=g-import-not-at-top
  import keras
  import tensorflow as tf
  start, steps = trainer.step, args.steps
  rows = {k: [] for k in TRAIN_KEYS}
  evals, timer = {}, {"eval": 0.0, "saved": None}

  def evaluate():
    began = time.perf_counter()
    results = trainer.evaluate()
    timer["eval"] += time.perf_counter() - began
    evals[trainer.step] = {k: float(results[k]) for k in EVAL_KEYS}
    print(f"  ours {label} step {trainer.step}: " + ", ".join(
        f"{k} {v:.4f}" for k, v in evals[trainer.step].items()), flush=True)

  class Recorder(keras.callbacks.Callback):

    def on_epoch_end(self, epoch, logs=None):
      for k in TRAIN_KEYS:
        rows[k].append(float(logs[k]))
      step = trainer.step
      if save_at is not None and step == save_at:
        timer["saved"] = trainer.manager.save(checkpoint_number=step)
      if step % args.eval_every == 0 or step == steps:
        evaluate()

  if start % args.eval_every == 0:
    evaluate()
  dataset = tf.data.Dataset.from_tensor_slices(
      {k: v[start:steps] for k, v in data.items()})
  began = time.perf_counter()
  trainer.model.fit(dataset, initial_epoch=start, epochs=steps,
                    steps_per_epoch=1, verbose=0, shuffle=False,
                    callbacks=[Recorder()])
  seconds = time.perf_counter() - began
  if trainer.step != steps or len(rows["loss"]) != steps - start:
    raise AssertionError(f"ours stopped at step {trainer.step}")
  lrs = np.asarray(trainer.schedule(tf.range(start, steps)))
  return {"first_step": start, "rows": rows, "lr": lrs.tolist(),
          "evals": {str(k): v for k, v in sorted(evals.items())},
          "seconds": round(seconds, 1),
          "train_seconds": round(seconds - timer["eval"], 1),
          "checkpoint": timer["saved"]}


# ------------------------------------------------------------ the peer
def _torch_batch(data, t=None):
  import torch  # pylint: disable=g-import-not-at-top
  take = (lambda k: data[k]) if t is None else (lambda k: data[k][t])
  return {k: torch.from_numpy(np.ascontiguousarray(take(k)).astype(
      np.float32 if k == "masked_lm_weights" else np.int64)) for k in FEATURES}


def hf_outputs(hf, batch):
  """Per-token MLM cross-entropy and hits [b, P], SOP cross-entropy and
  hits [b] of one batch, as the original computes them: the sequence
  output gathered at the masked positions before the MLM head."""
  import torch  # pylint: disable=g-import-not-at-top
  out = hf.albert(input_ids=batch["input_ids"],
                  attention_mask=batch["input_mask"],
                  token_type_ids=batch["segment_ids"])
  sequence, pooled = out.last_hidden_state, out.pooler_output
  positions = batch["masked_lm_positions"]
  gathered = torch.gather(sequence, 1, positions[:, :, None].expand(
      -1, -1, sequence.shape[-1]))
  logits = hf.predictions(gathered)
  log_probs = torch.log_softmax(logits, dim=-1)
  ids = batch["masked_lm_ids"]
  per_token = -torch.gather(log_probs, -1, ids[:, :, None])[:, :, 0]
  labels = batch["next_sentence_labels"].reshape(-1)
  sop_logits = hf.sop_classifier(pooled)
  return {"per_token": per_token,
          "mlm_hits": (torch.argmax(logits, -1) == ids).float(),
          "sop": torch.nn.functional.cross_entropy(sop_logits, labels,
                                                   reduction="none"),
          "sop_hits": (torch.argmax(sop_logits, -1) == labels).float()}


def hf_evaluate(hf, eval_data):
  """The held-out figures over all eval batches: MLM weighted by
  masked_lm_weights over the whole set, SOP over its examples."""
  import torch  # pylint: disable=g-import-not-at-top
  hf.eval()
  sums = collections.Counter()
  with torch.no_grad():
    for b in range(len(eval_data["input_ids"])):
      batch = _torch_batch(eval_data, b)
      out = hf_outputs(hf, batch)
      weights = batch["masked_lm_weights"]
      sums["ce"] += float(torch.sum(out["per_token"].double() * weights))
      sums["hits"] += float(torch.sum(out["mlm_hits"].double() * weights))
      sums["weight"] += float(torch.sum(weights.double()))
      sums["sop"] += float(torch.sum(out["sop"].double()))
      sums["sop_hits"] += float(torch.sum(out["sop_hits"].double()))
      sums["examples"] += len(weights)
  hf.train()  # dropout is 0 everywhere: train() only for the record
  return {"masked_lm_accuracy": sums["hits"] / sums["weight"],
          "masked_lm_loss": sums["ce"] / sums["weight"],
          "sentence_order_accuracy": sums["sop_hits"] / sums["examples"],
          "sentence_order_loss": sums["sop"] / sums["examples"]}


def train_hf(models, data, eval_data, args, label=""):
  """Trains the HF models ({name: model}) in lockstep on data's batches:
  the original's loss and OriginalRule("lamb") at the original schedule;
  evaluates at step 0 and every args.eval_every steps."""
  runs = {name: {"model": m, "rule": OriginalRule(
      Trainable(m).named_parameters(), "lamb"),
                 "rows": {k: [] for k in TRAIN_KEYS + ("grad_global_norm",)},
                 "lr": [], "evals": {}, "seconds": 0.0, "eval_seconds": 0.0}
          for name, m in models.items()}

  def evaluate(step):
    for name, run in runs.items():
      began = time.perf_counter()
      run["evals"][str(step)] = hf_evaluate(run["model"], eval_data)
      run["eval_seconds"] += time.perf_counter() - began
      print(f"  HF {name} {label} step {step}: " + ", ".join(
          f"{k} {v:.4f}" for k, v in run["evals"][str(step)].items()),
            flush=True)

  import torch  # pylint: disable=g-import-not-at-top
  evaluate(0)
  for t in range(args.steps):
    lr = original_lr(t, args.learning_rate, args.steps, args.warmup_steps)
    batch = _torch_batch(data, t)
    weights = batch["masked_lm_weights"]
    for run in runs.values():
      began = time.perf_counter()
      out = hf_outputs(run["model"], batch)
      mlm = torch.sum(out["per_token"] * weights) / (torch.sum(weights) + 1e-5)
      sop = torch.mean(out["sop"])
      total = mlm + sop
      total.backward()
      norm = run["rule"].step(lr)
      run["rule"].zero_grad()
      run["seconds"] += time.perf_counter() - began
      rows = run["rows"]
      rows["loss"].append(total.item())
      rows["masked_lm_loss"].append(mlm.item())
      rows["sentence_order_loss"].append(sop.item())
      rows["masked_lm_accuracy"].append(float(
          torch.sum(out["mlm_hits"] * weights) / torch.sum(weights)))
      rows["sentence_order_accuracy"].append(float(
          torch.mean(out["sop_hits"])))
      rows["grad_global_norm"].append(norm)
      run["lr"].append(lr)
    if (t + 1) % args.eval_every == 0 or t + 1 == args.steps:
      evaluate(t + 1)
  return {name: {"first_step": 0, "rows": run["rows"], "lr": run["lr"],
                 "evals": run["evals"],
                 "seconds": round(run["seconds"] + run["eval_seconds"], 1),
                 "train_seconds": round(run["seconds"], 1),
                 "attention": run["model"].config._attn_implementation}  # pylint: disable=protected-access
          for name, run in runs.items()}


class Trainable:
  """A torch model seen through its trainable parameters only (what
  parameter_pairs, copy_ours_to_hf and OriginalRule read)."""

  def __init__(self, module):
    self.module = module

  def named_parameters(self):
    return [(n, p) for n, p in self.module.named_parameters()
            if p.requires_grad]


def fix_projection(hf, config):
  """With embedding_size == hidden_size ours has no embedding-to-hidden
  projection, as the original (`embedding_hidden_mapping_in` only when the
  widths differ); HF always has one: it is made the identity (exact in
  float32: x * 1 + sum of zeros) and frozen. Returns Trainable(hf)."""
  import torch  # pylint: disable=g-import-not-at-top
  if config.embedding_size == config.hidden_size:
    projection = hf.albert.encoder.embedding_hidden_mapping_in
    with torch.no_grad():
      projection.weight.copy_(torch.eye(config.hidden_size))
      projection.bias.zero_()
    projection.requires_grad_(False)
  return Trainable(hf)


# ------------------------------------------------------------ one seed
def run_seed(args, config, strategy, seed, eval_data, work_dir, floor, index,
             dirs):
  # pylint: disable=g-import-not-at-top
  import transformers
  print(f"seed {seed}: reading {args.steps} batches", flush=True)
  task = make_task(args, seed)
  began = time.perf_counter()
  data = read_batches(task.build_inputs("train", strategy, args.batch_size),
                      args.steps)
  read_seconds = time.perf_counter() - began
  output_dir = os.path.join(work_dir, f"ours_seed{seed}")
  trainer = make_trainer(args, config, task, strategy, output_dir, seed)
  if trainer.step:
    raise AssertionError(f"{output_dir} already holds step {trainer.step}")

  # The peer starts from our initial weights.
  models = {"eager": transformers.AlbertForPreTraining(
      step_parity._hf_config(config))}  # pylint: disable=protected-access
  trainable = fix_projection(models["eager"], config)
  pairs = parameter_pairs(trainer.model, trainable)
  copy_ours_to_hf(pairs, trainable)
  initial = step_parity.hf_values(pairs, trainable)
  for name, variable, _ in pairs:
    if not np.array_equal(initial[name], variable.numpy()):
      raise AssertionError(f"copy of {variable.path} to {name} differs")
  exclusions = exclusion_check(pairs, trainer.model.optimizer, OriginalRule(
      trainable.named_parameters(), "lamb"))
  if floor:
    models["sdpa"] = transformers.AlbertForPreTraining(
        step_parity._hf_config(config, attention="sdpa"))  # pylint: disable=protected-access
    models["sdpa"].load_state_dict(models["eager"].state_dict())
    fix_projection(models["sdpa"], config)
  for m in models.values():
    m.train()

  print(f"seed {seed}: ours", flush=True)
  save_at = args.resume_at if seed == args.seeds[0] and args.resume_at else None
  ours = train_ours(trainer, data, args, save_at=save_at, label=f"seed {seed}")
  print(f"seed {seed}: HF ({', '.join(models)})", flush=True)
  peers = train_hf(models, data, eval_data, args, label=f"seed {seed}")
  result = {"seed": seed, "read_seconds": round(read_seconds, 1),
            "ours": ours, "hf": peers["eager"],
            "hf_sdpa": peers.get("sdpa"), "exclusions": exclusions,
            "mix": stream_mix(data, index, dirs, args.eval_every)
            if index is not None else None}
  if save_at:
    print(f"seed {seed}: resume from step {save_at}", flush=True)
    resumed = make_trainer(args, config, task, strategy, output_dir,
                           seed + 1000003)
    if resumed.step != save_at:
      raise AssertionError(f"resumed at step {resumed.step}, not {save_at}")
    result["resumed"] = train_ours(resumed, data, args,
                                   label=f"seed {seed} resumed")
    result["resumed"]["checkpoint"] = ours["checkpoint"]
  return result


# ------------------------------------------------------------ analysis
def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.abs(a - b) / np.maximum(np.abs(b), 1e-30)


def first_over(values, threshold):
  over = np.nonzero(np.asarray(values) > threshold)[0]
  return int(over[0]) if len(over) else None


def analyse(result):
  """Adds per-step differences, eval agreement and the resume check."""
  args = result["args"]
  seeds = result["seeds"]
  for s in seeds:
    ours, hf = s["ours"]["rows"], s["hf"]["rows"]
    s["loss_rel_diff"] = _rel(ours["loss"], hf["loss"]).tolist()
    s["masked_lm_loss_rel_diff"] = _rel(ours["masked_lm_loss"],
                                        hf["masked_lm_loss"]).tolist()
    s["sentence_order_loss_rel_diff"] = _rel(
        ours["sentence_order_loss"], hf["sentence_order_loss"]).tolist()
    s["max_lr_diff"] = float(np.max(np.abs(
        np.asarray(s["ours"]["lr"]) - np.asarray(s["hf"]["lr"]))))
    s["first_step_over"] = {f"{t:g}": first_over(s["loss_rel_diff"], t)
                            for t in THRESHOLDS}
    if s.get("hf_sdpa"):
      s["floor_loss_rel_diff"] = _rel(s["hf_sdpa"]["rows"]["loss"],
                                      hf["loss"]).tolist()
      s["floor_first_step_over"] = {
          f"{t:g}": first_over(s["floor_loss_rel_diff"], t)
          for t in THRESHOLDS}
    windows = []
    every = args["eval_every"]
    for start in range(0, args["steps"], every):
      part = slice(start, start + every)
      window = {"steps": [start, min(start + every, args["steps"])],
                "rel_diff_median": float(np.median(
                    s["loss_rel_diff"][part])),
                "rel_diff_max": float(np.max(s["loss_rel_diff"][part])),
                "loss_ours": float(np.mean(ours["loss"][part])),
                "loss_hf": float(np.mean(hf["loss"][part]))}
      if s.get("hf_sdpa"):
        window["floor_median"] = float(np.median(
            s["floor_loss_rel_diff"][part]))
        window["floor_max"] = float(np.max(s["floor_loss_rel_diff"][part]))
        window["loss_hf_sdpa"] = float(np.mean(
            s["hf_sdpa"]["rows"]["loss"][part]))
      windows.append(window)
    s["windows"] = windows
    if s.get("resumed"):
      r = s["resumed"]
      first = r["first_step"]
      diffs = {k: float(np.max(np.abs(
          np.asarray(r["rows"][k]) - np.asarray(ours[k][first:]))))
               for k in TRAIN_KEYS}
      eval_diffs = {k: max(abs(r["evals"][step][k] - s["ours"]["evals"][step][k])
                           for step in r["evals"]) for k in EVAL_KEYS}
      unequal = [first + i for i, (a, b) in enumerate(zip(
          r["rows"]["loss"], ours["loss"][first:])) if a != b]
      s["resume_check"] = {
          "resumed_at": first, "steps": len(r["rows"]["loss"]),
          "max_abs_diff_train": diffs, "max_abs_diff_eval": eval_diffs,
          "eval_steps": sorted(int(k) for k in r["evals"]),
          "first_step_loss_differs": unequal[0] if unequal else None,
          "steps_loss_differs": len(unequal),
          "bitwise_equal": not unequal and not any(eval_diffs.values())}

  # Eval agreement within the seed spread.
  points = []
  if len(seeds) >= 2:
    a, b = seeds[0], seeds[1]
    for step in a["ours"]["evals"]:
      point = {"step": int(step), "metrics": {}}
      for key, _, _ in SHOWN:
        o1, o2 = a["ours"]["evals"][step][key], b["ours"]["evals"][step][key]
        h1, h2 = a["hf"]["evals"][step][key], b["hf"]["evals"][step][key]
        cross = max(abs(o1 - h1), abs(o2 - h2))
        spread_ours, spread_hf = abs(o1 - o2), abs(h1 - h2)
        equal = EQUAL * max(1.0, abs(h1), abs(h2))
        m = {"ours": [o1, o2], "hf": [h1, h2],
             "cross": [abs(o1 - h1), abs(o2 - h2)],
             "spread_ours": spread_ours, "spread_hf": spread_hf,
             "strict": cross <= max(min(spread_ours, spread_hf), equal),
             "lenient": cross <= max(spread_ours, spread_hf, equal)}
        if a.get("hf_sdpa"):
          m["floor"] = abs(a["hf_sdpa"]["evals"][step][key] - h1)
        point["metrics"][key] = m
      point["strict"] = all(m["strict"] for m in point["metrics"].values())
      point["lenient"] = all(m["lenient"] for m in point["metrics"].values())
      points.append(point)
    points.sort(key=lambda p: p["step"])
  result["eval_points"] = points
  result["agree_strict"] = bool(points) and all(p["strict"] for p in points)
  result["agree_lenient"] = bool(points) and all(p["lenient"] for p in points)
  result["first_eval_apart"] = next(
      (p["step"] for p in points if not p["strict"]), None)
  return result


# ------------------------------------------------------------ report
def _fmt_step(value):
  return "never" if value is None else str(value)


def report(result):
  args, cpu = result["args"], result["cpu"]
  seeds = result["seeds"]
  names = [f"seed {s['seed']}" for s in seeds]
  lines = [
      "# Long-run training parity: albert_tf vs HF torch + the original's "
      "LAMB", "",
      f"`{result['command']}`, {result['date']}, commit {result['commit']}, "
      f"{cpu['model']} ({', '.join(cpu['flags'])}; amx_bf16: "
      f"{'yes' if 'amx_bf16' in cpu['flags'] else 'no'}; "
      f"`grep -o -m1 -E 'amx_bf16|avx512_bf16' /proc/cpuinfo`: "
      f"{cpu.get('bf16_grep') or '(nothing)'}), {result['cpu_count']} cores "
      f"shared with other jobs (load average {result['load_start'][0]:.2f} "
      f"at the start, {result['load_end'][0]:.2f} at the end), torch "
      f"{result['torch_threads']} thread(s); "
      + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
      + f"; {result['seconds'] / 60:.1f} min in all.", ""]
  if result.get("uncommitted_at_start"):
    lines += ["The working tree's albert_tf/ differed from that commit when "
              "the run started (`git status --porcelain -- albert_tf`: "
              + "; ".join(f"`{l.strip()}`"
                          for l in result["uncommitted_at_start"])
              + "): the run measured that code.", ""]
  lines += [note + "\n" for note in result.get("notes") or ()]
  lines += [
      f"Model: {result['model']}. Data: {result['data']}. Schedule: "
      f"{result['schedule']}. float32 on both sides, dropout 0. Held-out: "
      f"{result['eval_set']}.", ""]

  # Verdict.
  points = result["eval_points"]
  if points:
    strict, lenient = result["agree_strict"], result["agree_lenient"]
    verdict = (
        f"**Verdict: the sides {'agree' if strict else 'do not agree'} "
        f"within the seed spread at every eval point** (strict: for held-out "
        "MLM accuracy, MLM loss and SOP accuracy, |ours − HF| of both seeds "
        "≤ the smaller of the two sides' |seed 1 − seed 2|, differences below "
        f"{EQUAL:g} × max(1, |value|) counting as none)")
    if not strict:
      failing = [p for p in points if not p["strict"]]
      verdict += (
          f"; {len(failing)} of {len(points)} points miss it, the first at "
          f"step {failing[0]['step']} ("
          + "; ".join(
              f"step {p['step']}: " + ", ".join(
                  f"{k} |ours−HF| {max(m['cross']):.4f} vs spread "
                  f"{min(m['spread_ours'], m['spread_hf']):.4f}"
                  for k, m in p["metrics"].items() if not m["strict"])
              for p in failing[:4]) + ")"
          + (f"; against the larger spread (lenient) they "
             f"{'agree at every point' if lenient else 'still part'}"))
    verdict += "."
    lines += [verdict, ""]
  for s in seeds:
    over = s["first_step_over"]
    text = (f"Per-step training loss, {'seed ' + str(s['seed'])}: relative "
            "difference |ours − HF| / |HF| first above "
            + ", ".join(f"{t} at step {_fmt_step(v)}" for t, v in over.items())
            + f"; median over the last {args['eval_every']} steps "
            f"{s['windows'][-1]['rel_diff_median']:.1e}")
    if s.get("floor_first_step_over"):
      text += ("; the noise floor (HF eager vs HF SDPA, the same seed) first "
               "above " + ", ".join(
                   f"{t} at step {_fmt_step(v)}"
                   for t, v in s["floor_first_step_over"].items())
               + f", median over the last {args['eval_every']} steps "
               f"{s['windows'][-1]['floor_median']:.1e}")
    lines += [text + ". Schedules agree to "
              f"{s['max_lr_diff']:.1e}.", ""]
  for s in seeds:
    if s.get("resume_check"):
      r = s["resume_check"]
      lines += [
          f"Resume (seed {s['seed']}): the trainer's checkpoint saved at step "
          f"{r['resumed_at']}, a new Trainer restored it and trained steps "
          f"{r['resumed_at']}–{args['steps'] - 1}: "
          + ("**bitwise identical** to the uninterrupted run (every per-step "
             "loss and metric, and the eval figures at steps "
             + ", ".join(map(str, r["eval_steps"])) + ")"
             if r["bitwise_equal"] else
             "max |resumed − uninterrupted|: training loss "
             f"{r['max_abs_diff_train']['loss']:.2e}, MLM loss "
             f"{r['max_abs_diff_train']['masked_lm_loss']:.2e}; held-out "
             + ", ".join(f"{k} {v:.2e}"
                         for k, v in r["max_abs_diff_eval"].items())
             + f"; the per-step losses differ at {r['steps_loss_differs']} "
             f"steps, the first {_fmt_step(r['first_step_loss_differs'])}")
          + ".", ""]

  # Eval tables.
  floor = bool(seeds and seeds[0].get("hf_sdpa"))
  for key, title, digits in SHOWN:
    head = (f"| step | ours {names[0]} | ours {names[1]} | HF {names[0]} | "
            f"HF {names[1]} | \\|ours−HF\\| {names[0]} | \\|ours−HF\\| "
            f"{names[1]} | seed spread ours | seed spread HF |"
            + (f" \\|HF−HF SDPA\\| {names[0]} |" if floor else "")
            + " within spread |") if len(names) >= 2 else None
    if head is None:
      continue
    lines += [f"### {title}", "", head,
              "|" + "---|" * (10 + floor)]
    for p in points:
      m = p["metrics"][key]
      lines.append(
          f"| {p['step']} | " + " | ".join(
              f"{v:.{digits}f}" for v in m["ours"] + m["hf"]) + " | "
          + " | ".join(f"{v:.1e}" for v in m["cross"]) + " | "
          f"{m['spread_ours']:.{digits}f} | {m['spread_hf']:.{digits}f} |"
          + (f" {m['floor']:.1e} |" if floor else "")
          + f" {'yes' if m['strict'] else ('lenient only' if m['lenient'] else '**no**')} |")
    lines.append("")

  # Per-window training loss and divergence.
  lines += ["### Training loss and per-step divergence per window", "",
            "Mean training loss of the window's steps (each side's own "
            "batches-of-the-step loss), and the median / max of the per-step "
            "relative loss difference |ours − HF| / |HF|"
            + (" and of the noise floor |HF SDPA − HF| / |HF| (first seed)"
               if floor else "") + ".", ""]
  head = "| steps |"
  rule = "|---|"
  for n in names:
    head += f" loss ours {n} | loss HF {n} | rel. diff median {n} | max {n} |"
    rule += "---|---|---|---|"
  if floor:
    head += " floor median | floor max |"
    rule += "---|---|"
  lines += [head, rule]
  for w in range(len(seeds[0]["windows"])):
    first = seeds[0]["windows"][w]
    line = f"| {first['steps'][0]}–{first['steps'][1] - 1} |"
    for s in seeds:
      x = s["windows"][w]
      line += (f" {x['loss_ours']:.4f} | {x['loss_hf']:.4f} | "
               f"{x['rel_diff_median']:.1e} | {x['rel_diff_max']:.1e} |")
    if floor:
      line += f" {first['floor_median']:.1e} | {first['floor_max']:.1e} |"
    lines.append(line)
  lines.append("")

  # Data: the mix of sources per seed, and held-out overlap.
  if seeds[0].get("mix"):
    dirs = [k for k in seeds[0]["mix"][0] if k != "steps" and (
        k != "none" or any(w["none"] for s in seeds for w in s["mix"]))]
    lines += ["### The training stream", "",
              "Fraction of each window's examples whose text (the token ids "
              "with the masked ones put back) occurs among the records of "
              "exactly these --input_file directories: with the demo's "
              "records, `train` holds People's Daily and the unlabelled "
              "reviews once, `reviews` the same reviews 9 more times (other "
              "masks and pairings), so `reviews + train` is review text and "
              "`train` alone mostly news. The task shuffles the file list, "
              "reads 4 files round robin and shuffles records in a buffer of "
              "1,000, so which files feed a stretch of steps depends on the "
              "seed.", "",
              "| steps | " + " | ".join(f"{d} {n}" for n in names
                                        for d in dirs) + " |",
              "|---|" + "---|" * (len(dirs) * len(names))]
    for w in range(len(seeds[0]["mix"])):
      x0 = seeds[0]["mix"][w]
      lines.append(f"| {x0['steps'][0]}–{x0['steps'][1] - 1} | " + " | ".join(
          f"{s['mix'][w][d]:.2f}" for s in seeds for d in dirs) + " |")
    lines.append("")
  if result.get("heldout_overlap") is not None:
    o = result["heldout_overlap"]
    lines += [f"Held-out examples whose unmasked token ids occur among the "
              f"training records: {o['in_train']} of {o['examples']}.", ""]

  # Times.
  lines += ["### Wall time", "",
            "| seed | read batches s | ours s (train only) | HF eager s "
            "(train only) | HF SDPA s (train only) | resume leg s |",
            "|---|---|---|---|---|---|"]
  for s in seeds:
    sdpa = s.get("hf_sdpa")
    res = s.get("resumed")
    lines.append(
        f"| {s['seed']} | {s['read_seconds']} | {s['ours']['seconds']} "
        f"({s['ours']['train_seconds']}) | {s['hf']['seconds']} "
        f"({s['hf']['train_seconds']}) | "
        + (f"{sdpa['seconds']} ({sdpa['train_seconds']})" if sdpa else "—")
        + f" | {res['seconds'] if res else '—'} |")
  lines += ["", f"Excluded from weight decay and the trust ratio: the same "
            f"{len(seeds[0]['exclusions']['ours'])} variables on both sides "
            "(asserted through the converter's name map). The training loss of "
            "every step of every run, the peer's gradient norms and the "
            "relative loss differences of every step are in the .json.", ""]
  return "\n".join(lines)


# ------------------------------------------------------------ main
def _commit():
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True, check=True
                          ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def _uncommitted():
  """`git status --porcelain` lines of albert_tf/ (the code that ran, when
  it is not the commit's)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    return subprocess.run(
        ["git", "status", "--porcelain", "--", "albert_tf"], cwd=ROOT,
        capture_output=True, text=True, check=True).stdout.splitlines()
  except (OSError, subprocess.CalledProcessError):
    return None


def _bf16_grep():
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        for flag in ("amx_bf16", "avx512_bf16"):
          if f" {flag}" in line:
            return flag
  except OSError:
    pass
  return ""


def compact(result):
  """Keeps of the per-step series what the .json promises (every run's
  training loss, float32-exact; the peer's gradient norm; the relative
  loss differences), the report's summaries being computed already."""
  for s in result["seeds"]:
    for name in ("ours", "hf", "hf_sdpa", "resumed"):
      run = s.get(name)
      if not run or "rows" not in run:
        continue
      rows = run.pop("rows")
      run.pop("lr", None)
      run["loss"] = [float(f"{v:.9g}") for v in rows["loss"]]
      if "grad_global_norm" in rows:
        run["grad_global_norm"] = [float(f"{v:.5g}")
                                   for v in rows["grad_global_norm"]]
    for key in ("masked_lm_loss_rel_diff", "sentence_order_loss_rel_diff"):
      if isinstance(s.get(key), list):
        s["max_" + key] = max(s.pop(key))
    for key in ("loss_rel_diff", "floor_loss_rel_diff"):
      if key in s:
        s[key] = [float(f"{v:.3g}") for v in s[key]]
  return result


def dumps(result):
  """JSON with each list of numbers on one line."""
  text = json.dumps(result, indent=1)
  return re.sub(r"\[\s*(-?[0-9][-0-9.eE+,\s]*?)\s*\]",
                lambda m: "[" + "".join(m.group(1).split()) + "]", text)


def write_results(result, results_dir):
  os.makedirs(results_dir, exist_ok=True)
  stem = os.path.join(results_dir, f"long_parity_{result['cpu']['tag']}")
  markdown = report(result)
  write_atomically(stem + ".json", dumps(result) + "\n")
  write_atomically(stem + ".md", markdown)
  return stem, markdown


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--steps", type=int, default=2000,
      help="Training steps per run; also the schedule's num_train_steps.")
  add("--warmup_steps", type=int, default=300)
  add("--learning_rate", type=float, default=0.01, help="Peak lr (LAMB).")
  add("--batch_size", type=int, default=32)
  add("--seq_length", type=int, default=64)
  add("--predictions", type=int, default=10,
      help="max_predictions_per_seq of the records.")
  add("--seeds", default="12345,54321",
      help="Comma-separated; each sets the initial weights and the batch "
      "order (the task's shuffle seed); the report compares the first two.")
  add("--eval_every", type=int, default=250)
  add("--eval_batches", type=int, default=30)
  add("--eval_batch_size", type=int, default=64)
  add("--resume_at", type=int, default=1000,
      help="The first seed's run saves the trainer's checkpoint here and a "
      "second run resumes from it (0: no resume leg).")
  add("--noise_floor_seeds", default=None,
      help="Seeds whose peer also trains an SDPA-attention HF model in "
      "lockstep (default: the first seed; 'none' for none).")
  add("--preset", default="albert_zh_l4_h128")
  add("--spm_model_file", default="demo_output/vocab/spm.model",
      help="Sets vocab_size (8000 for the demo's) and is checked against "
      "the records' manifests.")
  add("--input_file", default=DEFAULT_INPUT)
  add("--eval_input_file", default=DEFAULT_EVAL)
  add("--shuffle_buffer_size", type=int, default=1000)
  add("--source_mix", default=True, action=argparse.BooleanOptionalAction,
      help="Report the mix of --input_file directories per window of steps "
      "and the held-out examples found among the training records (one "
      "pass over the training records).")
  add("--threads", type=int, default=1, help="torch intra-op threads.")
  add("--work_dir", default=None,
      help="Where the trainer's checkpoints go (default: a temporary "
      "directory, removed at the end).")
  add("--results_dir", default=os.path.join(ROOT, "benchmarks", "results"))
  add("--from_json", default=None,
      help="Only rewrite the .md (beside it) from this .json.")
  args = parser.parse_args(argv)

  if args.from_json:
    with open(args.from_json, encoding="utf-8") as f:
      result = json.load(f)
    markdown = report(result)
    write_atomically(os.path.splitext(args.from_json)[0] + ".md", markdown)
    print(markdown)
    return 0 if result["agree_strict"] else 1

  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.chdir(ROOT)
  args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  floor_seeds = ([args.seeds[0]] if args.noise_floor_seeds is None else
                 [] if args.noise_floor_seeds == "none" else
                 [int(s) for s in args.noise_floor_seeds.split(",")])
  if args.resume_at and not 0 < args.resume_at < args.steps:
    parser.error("--resume_at must lie between 0 and --steps")

  # pylint: disable=g-import-not-at-top
  import torch
  from albert_tf.data import record_checks
  from albert_tf.training import resolution
  from albert_tf.training import runtime
  from benchmarks.serving_latency import cpu_info
  torch.set_num_threads(args.threads)
  cpu = cpu_info()
  cpu["bf16_grep"] = _bf16_grep()
  commit, uncommitted = _commit(), _uncommitted()  # the code that runs
  load_start = os.getloadavg()
  started = time.perf_counter()
  strategy = runtime.make_strategy("default")
  config, _ = resolution.resolve_model(
      args.preset, spm_model_file=args.spm_model_file,
      require_tokenizer=False)
  resolution.check_seq_length(args.seq_length, config)
  for pattern, flag in ((args.input_file, "--input_file"),
                        (args.eval_input_file, "--eval_input_file")):
    record_checks.check_records_dirs(
        expand(pattern), args.seq_length, args.predictions,
        spm_model_file=args.spm_model_file, flag=flag)
  eval_data = read_batches(make_task(args, args.seeds[0]).build_inputs(
      "eval", strategy, args.eval_batch_size))
  if len(eval_data["input_ids"]) != args.eval_batches or any(
      len(b) != args.eval_batch_size for b in eval_data["input_ids"]):
    raise ValueError(f"the held-out input gave {len(eval_data['input_ids'])} "
                     f"batches, {args.eval_batches} full ones wanted")
  index = dirs = overlap = None
  if args.source_mix:
    index, dirs = source_index(args)
    rows = [r for b in range(args.eval_batches) for r in _text_rows(
        {k: eval_data[k][b] for k in eval_data})]
    overlap = {"examples": len(rows),
               "in_train": int(sum(r in index for r in rows))}

  work_dir = args.work_dir or tempfile.mkdtemp(prefix="long_parity_")
  seeds = []
  try:
    for seed in args.seeds:
      seeds.append(run_seed(args, config, strategy, seed, eval_data,
                            work_dir, seed in floor_seeds, index, dirs))
  finally:
    if not args.work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)

  argv_shown = " ".join(argv if argv is not None else sys.argv[1:])
  weights = float(eval_data["masked_lm_weights"].sum())
  result = {
      "command": f"python -m benchmarks.long_parity {argv_shown}".strip(),
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "commit": commit, "uncommitted_at_start": uncommitted, "cpu": cpu, "cpu_count": os.cpu_count(),
      "load_start": load_start, "load_end": os.getloadavg(),
      "versions": {d: importlib.metadata.version(d) for d in (
          "tensorflow", "keras", "torch", "transformers", "numpy")},
      "torch_threads": torch.get_num_threads(),
      "args": {k: v for k, v in vars(args).items()},
      "model": (f"preset {args.preset} (L{config.num_hidden_layers} sharing "
                f"one block, H {config.hidden_size}, E "
                f"{config.embedding_size}, {config.num_attention_heads} "
                f"heads, FFN {config.intermediate_size}, tanh GELU), vocab "
                f"{config.vocab_size} from {args.spm_model_file}; a random "
                "Keras initialisation per seed, copied into HF"),
      "data": (f"{args.steps} batches of {args.batch_size} × "
               f"{args.seq_length} tokens ({args.predictions} prediction "
               f"slots) per seed from {args.input_file}, read once by the "
               "pretraining task's input (shuffle buffer "
               f"{args.shuffle_buffer_size}, task seed = the seed) and fed "
               "to both sides"),
      "schedule": (f"LAMB, peak lr {args.learning_rate:g}, linear warmup over "
                   f"{args.warmup_steps} steps then linear decay to 0 at "
                   f"step {args.steps}; weight decay 0.01, global-norm clip "
                   "1.0, beta 0.9 / 0.999, epsilon 1e-6"),
      "eval_set": (f"the first {args.eval_batches} batches of "
                   f"{args.eval_batch_size} of {args.eval_input_file} "
                   f"({args.eval_batches * args.eval_batch_size} examples, "
                   f"{weights:.0f} masked tokens), at step 0 and every "
                   f"{args.eval_every} steps"),
      "heldout_overlap": overlap,
      "seconds": round(time.perf_counter() - started, 1),
      "seeds": seeds}
  compact(analyse(result))
  stem, markdown = write_results(result, args.results_dir)
  print(markdown)
  print(f"wrote {stem}.json and {stem}.md")
  return 0 if result["agree_strict"] else 1


if __name__ == "__main__":
  sys.exit(main())
