r"""Training-step parity of albert_tf with HF torch and an independent port of
the original optimizers (issue 37, part 2). Not part of `make test`.

    python -m benchmarks.step_parity [--steps=25] [--warmup_steps=5] \
        [--learning_rate=1e-3] [--vocab_size=21128] [--batch_size=8] \
        [--diagnostic=auto|always|never] [--noise_floor=finetuning]

Two phases, float32, the same weights, batches and schedule on both sides:

* pretraining: ours is `AlbertPretrainer` compiled with
  `create_optimizer("lamb", WarmupPolynomialDecay(...))` and
  `exclude_layer_norm_and_bias`, as the trainer does, and trained by Keras
  `fit` (the model's own train_step). The peer is HF `AlbertForPreTraining`
  (eager attention, gelu_new = the original's tanh "gelu") whose loss is
  computed here as the original does: prediction_logits gathered at
  masked_lm_positions, cross-entropy weighted by masked_lm_weights over
  sum(weights) + 1e-5, plus the SOP cross-entropy; its optimizer is
  `parity_reference.OriginalRule`, a torch port of google-research/albert's
  LAMBOptimizer written from its equations, after the original's
  global-norm clip to 1.0.
* fine-tuning: ours is `AlbertClassifier` built by `ClassificationTask`
  (classifier dropout 0) with the task's loss and
  `create_optimizer("adamw", ...)`, trained by `fit`; the peer is HF
  `AlbertForSequenceClassification` (classifier dropout 0) with the mean
  softmax cross-entropy of its logits and `OriginalRule` as
  AdamWeightDecayOptimizer.

Weights: a random albert_tiny_zh (4 layers, H 312, E 128, dropout 0 as in
v2) made by Keras, copied into the HF model through the HF converter's name
map (`parity_reference.parameter_pairs`). Batches: `step_parity_data`.
Schedule: `original_lr` (lr(0) = 0: the first step moves only the moments).
Before training, both sides' decay/adaptation exclusion sets are printed and
asserted to be the same variables.

Reports per step both losses and |ours - HF| / |HF| (target <= 1e-4 at
every step), and per variable after the last step max|ours - HF| /
max|HF| and how far the variable moved (max|HF_N - HF_0| / max|HF_N|).
Two controls: `--noise_floor` phases also train a second HF model with SDPA
attention in lockstep (rounding alone; fine-tuning by default), and a phase
that misses the target runs again with our IndexedSlices gradients made
dense before the optimizer (`--diagnostic`; see the report's "Finding");
the diagnostic reuses the peer's run. 3.4 minutes (75 s of CPU) on 2
cores under a load average of 10. Writes
benchmarks/results/step_parity_<cpu-tag>.{md,json} (tmp + replace); exits 1
when a phase misses the target.
Peers: `pip install -r benchmarks/requirements-peers.txt`.
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

from benchmarks import parity_reference as ref
from benchmarks import step_parity_data
from benchmarks.common import write_atomically
from benchmarks.step_parity_report import TARGET
from benchmarks.step_parity_report import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("pretraining", "finetuning")
ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")


# ------------------------------------------------------------ phases
def first_step_gradients(model, batch, loss_fn):
  """Our gradients at the first batch: the global norm as Keras's clip
  computes it from them (`base_optimizer.global_norm`, what
  global_clipnorm uses), the norm of the same gradients made dense, and the
  variables whose gradient is a tf.IndexedSlices (slices, distinct rows)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from keras.src.optimizers.base_optimizer import global_norm
  with tf.GradientTape() as tape:
    loss = loss_fn(model, batch)
  grads = tape.gradient(loss, model.trainable_variables)
  dense = [tf.convert_to_tensor(g) for g in grads]
  sparse = [{"variable": v.path, "slices": int(g.values.shape[0]),
             "rows": int(tf.size(tf.unique(g.indices)[0]))}
            for g, v in zip(grads, model.trainable_variables)
            if isinstance(g, tf.IndexedSlices)]
  return {"keras_clip_norm": float(global_norm(grads)),
          "dense_norm": float(global_norm(dense)), "indexed_slices": sparse}


def run_phase(phase, config, args, dense_gradients=False, peer_run=None):
  """Trains ours and the reference on the same batches; returns (the
  phase's result dict, the peer's run). dense_gradients: the diagnostic
  (see --help). peer_run: a previous call's peer run on the same batches
  and initial weights, reused instead of training the peer again (its
  steps do not depend on ours; the initial weights are checked equal)."""
  # pylint: disable=g-import-not-at-top
  import keras
  import tensorflow as tf
  import torch
  import transformers
  from albert_tf.data import classifier_data as cd
  from albert_tf.modeling.models import AlbertPretrainer, pretraining_losses
  from albert_tf.tasks.classification import ClassificationTask
  from albert_tf.training import optimization

  pretraining = phase == "pretraining"
  rule = "lamb" if pretraining else "adamw"
  steps, warmup = args.steps, args.warmup_steps
  # The same batches and initial weights in every mode of a phase.
  rng = np.random.default_rng([args.seed, PHASES.index(phase)])
  keras.utils.set_random_seed(args.seed + PHASES.index(phase))
  if pretraining:
    data = step_parity_data.pretraining_batches(
        rng, steps, args.batch_size, args.seq_length, config.vocab_size,
        args.predictions)
    model = AlbertPretrainer(config)
    loss, metrics = None, None
    dataset = tf.data.Dataset.from_tensor_slices(data)
    batch0 = {k: v[0] for k, v in data.items()}
    loss_fn = lambda m, b: pretraining_losses(
        m({k: b[k] for k in (*ENCODER_INPUTS, "masked_lm_positions")}),
        b)["loss"]
    hf_model = transformers.AlbertForPreTraining(ref.hf_config(config))
  else:
    features, labels = step_parity_data.classification_batches(
        rng, steps, args.batch_size, args.seq_length, config.vocab_size)
    data = dict(features)
    task = ClassificationTask(
        cd.TaskSpec(name="parity", files={}, columns={},
                    label_list=("0", "1")),
        tokenizer=None, data_dir="", max_seq_length=args.seq_length,
        classifier_dropout=0.0)
    model = task.build_model(config)
    loss, metrics = task.build_losses(), task.build_metrics()
    dataset = tf.data.Dataset.from_tensor_slices(
        (features, {"logits": labels}))
    batch0 = {**{k: v[0] for k, v in features.items()}, "label": labels[0]}
    loss_fn = lambda m, b: loss["logits"](
        b["label"], m({k: b[k] for k in ENCODER_INPUTS})["logits"])
    hf_model = transformers.AlbertForSequenceClassification(
        ref.hf_config(config, num_labels=2))
  hf_model.train()  # dropout is 0 everywhere: train() only for the record

  # Ours: the trainer's optimizer set-up (trainer.py), one step per epoch so
  # that every step's loss is logged on its own.
  schedule = optimization.WarmupPolynomialDecay(
      args.learning_rate, steps, warmup)
  optimizer = optimization.create_optimizer(rule, schedule)
  optimization.exclude_layer_norm_and_bias(optimizer, model)
  model.compile(optimizer=optimizer, loss=loss, metrics=metrics,
                steps_per_execution=1, jit_compile=False)
  model.optimizer.build(model.trainable_variables)
  if dense_gradients:
    apply = model.optimizer.apply
    model.optimizer.apply = lambda grads, variables=None: apply(
        [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
         for g in grads], variables)

  pairs = ref.parameter_pairs(model, hf_model)
  initial = ref.copy_ours_to_hf(pairs, hf_model)
  if peer_run is not None:
    for name in initial:
      if not np.array_equal(initial[name], peer_run["initial"][name]):
        raise AssertionError(f"initial {name} differs from the reused run's")
  reference = ref.OriginalRule(hf_model.named_parameters(), rule)
  mode = "dense gradients (diagnostic)" if dense_gradients else "as shipped"
  print(f"{phase}, {mode}: {len(pairs)} variables, rule {rule}", flush=True)
  exclusions = ref.exclusion_check(pairs, model.optimizer, reference)
  first = first_step_gradients(model, batch0, loss_fn)

  start = time.perf_counter()
  logs = []  # one step per epoch: each step's own loss
  model.fit(dataset, epochs=steps, steps_per_epoch=1, verbose=0,
            shuffle=False, callbacks=[keras.callbacks.LambdaCallback(
                on_epoch_end=lambda epoch, l: logs.append(
                    {k: float(v) for k, v in (l or {}).items()}))])
  ours_seconds = time.perf_counter() - start
  ours_lrs = [float(schedule(t)) for t in range(steps)]

  def hf_step(hf, rule_, t):
    """One step of the peer on batch t: {"loss", ...}, then its update."""
    out = hf(**step_parity_data.torch_inputs(data, t))
    row = {}
    if pretraining:
      # The original's MLM loss: logits gathered at the masked positions,
      # cross-entropy weighted by masked_lm_weights / (sum + 1e-5).
      positions = torch.from_numpy(
          data["masked_lm_positions"][t].astype(np.int64))
      ids = torch.from_numpy(data["masked_lm_ids"][t].astype(np.int64))
      weights = torch.from_numpy(data["masked_lm_weights"][t])
      vocab = out.prediction_logits.shape[-1]
      gathered = torch.gather(out.prediction_logits, 1,
                              positions[:, :, None].expand(-1, -1, vocab))
      log_probs = torch.log_softmax(gathered, dim=-1)
      per_token = -torch.gather(log_probs, -1, ids[:, :, None])[:, :, 0]
      mlm = torch.sum(per_token * weights) / (torch.sum(weights) + 1e-5)
      sop = torch.nn.functional.cross_entropy(
          out.sop_logits, torch.from_numpy(
              data["next_sentence_labels"][t][:, 0].astype(np.int64)))
      total = mlm + sop
      row.update(masked_lm_loss=mlm.item(), sentence_order_loss=sop.item())
    else:
      total = torch.nn.functional.cross_entropy(
          out.logits, torch.from_numpy(labels[t].astype(np.int64)))
    row["loss"] = total.item()
    total.backward()
    row["lr"] = ref.original_lr(t, args.learning_rate, steps, warmup)
    row["grad_global_norm"] = rule_.step(row["lr"])
    rule_.zero_grad()
    return row

  # The noise floor: the same peer with PyTorch's SDPA attention instead of
  # the eager one, a change of rounding only, trained in lockstep.
  floor = None
  if phase in args.noise_floor.split(",") and not dense_gradients:
    floor_model = type(hf_model)(ref.hf_config(
        config, attention="sdpa",
        **({} if pretraining else {"num_labels": 2})))
    floor_model.load_state_dict(hf_model.state_dict())
    floor_model.train()
    floor = (floor_model,
             ref.OriginalRule(floor_model.named_parameters(), rule))

  hf_rows, floor_rows, hf_seconds = [], [], 0.0
  for t in range(steps if peer_run is None else 0):
    start = time.perf_counter()
    hf_rows.append(hf_step(hf_model, reference, t))
    hf_seconds += time.perf_counter() - start
    if floor:
      floor_rows.append(hf_step(*floor, t))
  if peer_run is not None:
    hf_rows, hf_seconds = peer_run["rows"], peer_run["seconds"]
  first["hf_norm"] = hf_rows[0]["grad_global_norm"]

  rows = []
  for t in range(steps):
    ours, theirs = logs[t], hf_rows[t]
    row = {"step": t, "lr": theirs["lr"], "lr_ours": ours_lrs[t],
           "grad_global_norm_hf": theirs["grad_global_norm"]}
    for key in ("loss", "masked_lm_loss", "sentence_order_loss"):
      if key in theirs:
        row[f"{key}_ours"], row[f"{key}_hf"] = ours[key], theirs[key]
        row[f"{key}_rel_diff"] = (abs(ours[key] - theirs[key]) /
                                  abs(theirs[key]))
    if floor:
      row["loss_hf_sdpa"] = floor_rows[t]["loss"]
      row["noise_floor_rel_diff"] = (abs(floor_rows[t]["loss"] -
                                         theirs["loss"]) / abs(theirs["loss"]))
    rows.append(row)

  final = (ref.hf_values(pairs, hf_model) if peer_run is None
           else peer_run["final"])
  floor_final = ref.hf_values(pairs, floor[0]) if floor else None
  variables = []
  for name, variable, _ in pairs:
    a, b, b0 = variable.numpy().astype(np.float64), final[name], initial[name]
    scale = float(np.max(np.abs(b))) or 1.0
    variables.append({
        "ours": variable.path, "hf": name, "shape": list(variable.shape),
        "excluded": name in reference.excluded, "max_abs_hf": scale,
        "max_abs_diff": float(np.max(np.abs(a - b))),
        "rel_diff": float(np.max(np.abs(a - b))) / scale,
        "moved": float(np.max(np.abs(b - b0))) / scale})
    if floor:
      variables[-1]["noise_floor_rel_diff"] = float(
          np.max(np.abs(floor_final[name] - b))) / scale
  ranked = sorted(variables, key=lambda v: -v["rel_diff"])
  max_loss = max(r["loss_rel_diff"] for r in rows)
  peer = {"initial": initial, "rows": hf_rows, "final": final,
          "seconds": hf_seconds}
  return {
      "phase": phase, "rule": rule, "dense_gradients": dense_gradients,
      "peer_reused": peer_run is not None,
      "ours": (f"{type(model).__name__}, create_optimizer({rule!r}, "
               "WarmupPolynomialDecay), exclude_layer_norm_and_bias, "
               "Keras fit" + (", IndexedSlices gradients made dense before "
                              "the optimizer" if dense_gradients else "")),
      "peer": (f"transformers.{type(hf_model).__name__} (eager attention) + "
               f"OriginalRule({rule!r}) (torch port in this script)"),
      "attention": [hf_model.config._attn_implementation] + (  # pylint: disable=protected-access
          [floor[0].config._attn_implementation] if floor else []),  # pylint: disable=protected-access
      "exclusions": exclusions, "first_step_gradients": first,
      "steps": rows, "variables": ranked,
      "max_loss_rel_diff": max_loss,
      "first_step_over_target": next(
          (r["step"] for r in rows if r["loss_rel_diff"] > TARGET), None),
      "worst_variable": ranked[0],
      "worst_variable_except_key_bias": next(
          v for v in ranked if not v["ours"].endswith("key_bias")),
      "noise_floor": (max(r["noise_floor_rel_diff"] for r in rows)
                      if floor else None),
      "noise_floor_worst_variable_except_key_bias": (max(
          (v for v in ranked if not v["ours"].endswith("key_bias")),
          key=lambda v: v["noise_floor_rel_diff"]) if floor else None),
      "max_lr_diff": max(abs(r["lr"] - r["lr_ours"]) for r in rows),
      "seconds": {"ours": round(ours_seconds, 1), "hf": round(hf_seconds, 1)},
      "met": max_loss <= TARGET}, peer


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--steps", type=int, default=25,
      help="Steps per phase; also the schedule's num_train_steps.")
  add("--warmup_steps", type=int, default=5)
  add("--learning_rate", type=float, default=1e-3, help="Peak lr.")
  add("--vocab_size", type=int, default=21128,
      help="albert_tiny_zh's 21128 unless smaller.")
  add("--batch_size", type=int, default=8)
  add("--seq_length", type=int, default=128)
  add("--predictions", type=int, default=20, help="Masked slots per row.")
  add("--phases", default=",".join(PHASES))
  add("--seed", type=int, default=12345)
  add("--threads", type=int, default=1,
      help="torch intra-op threads; 1 by default: torch's OpenMP threads "
      "spinning beside TF's pool on 2 shared cores made the HF steps 4x "
      "slower.")
  add("--diagnostic", default="auto", choices=("auto", "always", "never"),
      help="Also run a phase with our IndexedSlices gradients made dense "
      "before the optimizer (all else the same): auto = when the phase "
      "misses the target.")
  add("--noise_floor", default="finetuning",
      help="Phases (comma-separated, or none) whose peer also trains in "
      "lockstep with SDPA attention instead of eager: how far rounding alone "
      "moves the losses apart.")
  add("--results_dir", default=os.path.join(ROOT, "benchmarks", "results"))
  args = parser.parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

  # pylint: disable=g-import-not-at-top
  import importlib.metadata
  import torch
  from albert_tf.core.config import AlbertConfig
  from benchmarks.serving_latency import cpu_info
  torch.set_num_threads(args.threads)
  cpu = cpu_info()
  load_start = os.getloadavg()
  config = AlbertConfig.from_preset("albert_tiny_zh").replace(
      vocab_size=args.vocab_size)
  started = time.perf_counter()
  phases, diagnostic = [], []
  for phase in [p.strip() for p in args.phases.split(",") if p.strip()]:
    if phase not in PHASES:
      parser.error(f"--phases: {phase!r} is not one of {PHASES}")
    result, peer = run_phase(phase, config, args)
    phases.append(result)
    wanted = args.diagnostic == "always" or (args.diagnostic == "auto" and
                                             not phases[-1]["met"])
    diagnostic.append(run_phase(phase, config, args, dense_gradients=True,
                                peer_run=peer)[0] if wanted else None)
  if not any(diagnostic):
    diagnostic = []
  argv_shown = " ".join(argv if argv is not None else sys.argv[1:])
  result = {
      "command": f"python -m benchmarks.step_parity {argv_shown}".strip(),
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "cpu": cpu, "cpu_count": os.cpu_count(), "load_start": load_start,
      "versions": {d: importlib.metadata.version(d) for d in (
          "tensorflow", "keras", "torch", "transformers", "numpy")},
      "torch_threads": torch.get_num_threads(),
      "model": (f"albert_tiny_zh shape (4 layers sharing one block, H 312, "
                f"E 128, 12 heads, FFN 1248, tanh GELU, dropout 0), vocab "
                f"{config.vocab_size}"
                + (" (smaller than the preset's 21128)"
                   if config.vocab_size != 21128 else " (the preset's)")
                + ", random Keras initialisation copied into HF"),
      "batches": (f"{args.steps} fixed random batches per phase of "
                  f"{args.batch_size} x {args.seq_length} tokens, rows padded "
                  f"to lengths {args.seq_length // 2}-{args.seq_length}, two "
                  f"segments; pretraining: {args.predictions} masked slots per "
                  f"row of which {args.predictions // 2}-{args.predictions} "
                  "real (the rest weight 0), random SOP labels; fine-tuning: "
                  "2 random labels"),
      "schedule": (f"peak lr {args.learning_rate:g}, linear warmup over "
                   f"{args.warmup_steps} steps then linear decay to 0 at "
                   f"step {args.steps}; weight decay 0.01, global-norm clip "
                   "1.0, beta 0.9 / 0.999, epsilon 1e-6"),
      "target_rel_loss_diff": TARGET,
      "seconds": round(time.perf_counter() - started, 1), "phases": phases,
      "diagnostic": diagnostic}
  markdown = report(result)
  print(markdown)
  os.makedirs(args.results_dir, exist_ok=True)
  stem = os.path.join(args.results_dir, f"step_parity_{cpu['tag']}")
  write_atomically(stem + ".json", json.dumps(result, indent=2) + "\n")
  write_atomically(stem + ".md", markdown)
  print(f"wrote {stem}.json and {stem}.md")
  return 0 if all(p["met"] for p in phases) else 1


if __name__ == "__main__":
  sys.exit(main())
