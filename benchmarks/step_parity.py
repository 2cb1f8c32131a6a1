r"""Training-step parity of albert_tf with HF torch and an independent port of
the original optimizers (issue 37, part 2). Not part of `make test`.

    python -m benchmarks.step_parity [--steps=25] [--warmup_steps=5] \
        [--learning_rate=1e-3] [--vocab_size=21128] [--batch_size=8] \
        [--diagnostic=auto|always|never] [--noise_floor=finetuning]

Two phases, float32, the same weights, batches and schedule on both sides:

* pretraining: ours is `AlbertPretrainer` compiled with
  `create_optimizer("lamb", WarmupPolynomialDecay(...))` and
  `exclude_layer_norm_and_bias`, as the trainer does, and trained by Keras
  `fit` (the model's own train_step: MLM weighted by masked_lm_weights over
  sum(weights) + 1e-5, plus SOP). The peer is HF `AlbertForPreTraining`
  (eager attention, gelu_new = the original's tanh "gelu") whose loss is
  computed here as the original does: prediction_logits gathered at
  masked_lm_positions, cross-entropy weighted by masked_lm_weights over
  sum(weights) + 1e-5, plus the SOP cross-entropy of sop_logits; and whose
  optimizer is `OriginalRule` below, a torch port of google-research/albert's
  LAMBOptimizer written from its equations (no bias correction, decay inside
  the update, trust ratio; "LayerNorm", "layer_norm", "bias" searched in HF's
  parameter names) after the original's global-norm clip to 1.0, written
  here as tf.clip_by_global_norm computes it (g * c / max(norm, c)), not
  torch.nn.utils.clip_grad_norm_ (c / (norm + 1e-6)).
* fine-tuning: ours is `AlbertClassifier` built by `ClassificationTask`
  (classifier dropout 0) with the task's loss and
  `create_optimizer("adamw", ...)`, trained by `fit`; the peer is HF
  `AlbertForSequenceClassification` (classifier dropout 0) with the mean
  softmax cross-entropy of its logits and `OriginalRule` as
  AdamWeightDecayOptimizer.

Weights: a random albert_tiny_zh (4 layers, H 312, E 128, dropout 0 as in
v2) made by Keras, copied into the HF model through the HF converter's name
map (`huggingface_to_original` + `original_variable_map`, as
benchmarks/serving_latency.py does). Batches: fixed random token ids, padded
rows (input_mask), two segments, masked positions with some slots padded
(weight 0), SOP labels. Schedule: lr(t) = peak t/W during warmup, then
peak (1 - t/N), t the 0-based step (lr(0) = 0: the first step moves only
the moments). Before training, both sides' decay/adaptation exclusion sets
are printed and asserted to be the same variables.

Reports per step both losses and |ours - HF| / |HF| (target <= 1e-4 at
every step), and per variable after the last step max|ours - HF| /
max|HF| and how far the variable moved (max|HF_N - HF_0| / max|HF_N|).
Two controls: `--noise_floor` phases also train a second HF model with SDPA
attention in lockstep (rounding alone; fine-tuning by default), and a phase
that misses the target runs again with our IndexedSlices gradients made
dense before the optimizer (`--diagnostic`): Keras's global-norm clip
squares a gather's gradient slices before summing repeated rows (as TF's
tf.clip_by_global_norm does for the original off TPU), which is not the
dense norm of the documented rule and of the original on TPU (see the
report's "Finding"); the diagnostic reuses the peer's run. 3.4 minutes
(75 s of CPU) on 2 cores under a load average of 10. Writes
benchmarks/results/step_parity_<cpu-tag>.{md,json} (tmp + replace); exits
1 when a phase misses the target.
Peers: `pip install -r benchmarks/requirements-peers.txt`.
"""

import argparse
import datetime
import json
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1e-4
# google-research/albert's exclude_from_weight_decay (and, by default, its
# exclude_from_layer_adaptation), searched in the parameter names.
ORIGINAL_EXCLUDE = ("LayerNorm", "layer_norm", "bias")
PHASES = ("pretraining", "finetuning")
ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")
MASK_ID = 4  # any id: the masked tokens' input ids


# ------------------------------------------------------------ the reference
def original_lr(step, peak, num_train_steps, num_warmup_steps):
  """The original schedule: peak t/W during warmup, else peak (1 - t/N)."""
  if step < num_warmup_steps:
    return peak * step / num_warmup_steps
  return peak * (1.0 - min(step, num_train_steps) / num_train_steps)


class OriginalRule:
  """google-research/albert's LAMBOptimizer ("lamb") or
  AdamWeightDecayOptimizer ("adamw") on torch parameters, from the update
  equations; the global-norm clip of the original's training op first."""

  def __init__(self, named_parameters, rule, weight_decay_rate=0.01,
               beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0,
               exclude=ORIGINAL_EXCLUDE):
    import torch  # pylint: disable=g-import-not-at-top
    self.torch = torch
    self.params = list(named_parameters)
    self.rule = rule
    self.weight_decay_rate = weight_decay_rate
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.clip_norm = clip_norm
    self.excluded = {n for n, _ in self.params
                     if any(re.search(p, n) for p in exclude)}
    self.slots = {n: (torch.zeros_like(p), torch.zeros_like(p))
                  for n, p in self.params}

  def zero_grad(self):
    for _, p in self.params:
      p.grad = None

  def step(self, lr):
    torch = self.torch
    with torch.no_grad():
      grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p))
               for n, p in self.params}
      # tf.clip_by_global_norm: g * clip / max(global_norm, clip).
      global_norm = torch.sqrt(sum(torch.sum(g * g) for g in grads.values()))
      scale = self.clip_norm / torch.maximum(
          global_norm, torch.tensor(self.clip_norm))
      for name, w in self.params:
        g = grads[name] * scale
        m, v = self.slots[name]
        m = self.beta_1 * m + (1.0 - self.beta_1) * g
        v = self.beta_2 * v + (1.0 - self.beta_2) * g * g
        self.slots[name] = (m, v)
        update = m / (torch.sqrt(v) + self.epsilon)
        excluded = name in self.excluded
        if self.weight_decay_rate and not excluded:
          update = update + self.weight_decay_rate * w
        ratio = 1.0
        if self.rule == "lamb" and not excluded:
          w_norm, u_norm = torch.linalg.norm(w), torch.linalg.norm(update)
          if w_norm > 0 and u_norm > 0:
            ratio = w_norm / u_norm
        w.sub_(ratio * lr * update)
      return float(global_norm)


# ------------------------------------------------------------ weights
def parameter_pairs(model, hf_model):
  """[(HF parameter name, our variable, transposed)] over HF's trainable
  parameters (tied ones once), named through the HF converter's map:
  HF name -> original name (`huggingface_to_original`) -> our variable
  (`original_variable_map`); the classifier's dense layer by hand (the
  original has no such name). `transposed`: the torch layout is our
  variable's transpose."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.huggingface import huggingface_to_original
  from albert_tf.converters.original import original_variable_map
  originals = original_variable_map(model)
  pairs = []
  for name, param in hf_model.named_parameters():
    if name == "classifier.weight":
      pairs.append((name, model.classifier_head.dense.kernel, True))
      continue
    if name == "classifier.bias":
      pairs.append((name, model.classifier_head.dense.bias, False))
      continue
    converted = huggingface_to_original(
        {name: param.detach().numpy()})[0]
    if len(converted) != 1:
      raise ValueError(f"HF {name}: no original name")
    (original,) = converted
    variable, transform = originals[original]
    # Kernels are stored [in, out] in the original (HF: [out, in]); the SOP
    # output_weights are stored as HF's [2, H] and used transposed by us.
    transposed = original.endswith("/kernel") != (transform is np.transpose)
    if tuple(variable.shape) != tuple(
        param.shape[::-1] if transposed else param.shape):
      raise ValueError(f"HF {name} {tuple(param.shape)} vs {variable.path} "
                       f"{tuple(variable.shape)}")
    pairs.append((name, variable, transposed))
  mapped = [id(v) for _, v, _ in pairs]
  unmapped = [v.path for v in model.trainable_variables if id(v) not in mapped]
  if unmapped or len(set(mapped)) != len(mapped):
    raise ValueError(f"not one HF parameter per variable: {unmapped}")
  return pairs


def copy_ours_to_hf(pairs, hf_model):
  import torch  # pylint: disable=g-import-not-at-top
  params = dict(hf_model.named_parameters())
  with torch.no_grad():
    for name, variable, transposed in pairs:
      value = np.asarray(variable.numpy())
      params[name].copy_(torch.from_numpy(np.ascontiguousarray(
          value.T if transposed else value)))


def hf_values(pairs, hf_model):
  """{HF name: array in our layout}."""
  params = dict(hf_model.named_parameters())
  out = {}
  for name, _, transposed in pairs:
    value = params[name].detach().numpy().copy()
    out[name] = value.T if transposed else value
  return out


def exclusion_check(pairs, optimizer, reference):
  """Both sides' excluded variables, asserted to be the same: ours from the
  built optimizer's own sets (by variable), HF's by the regexes on HF names."""
  # pylint: disable=protected-access
  no_decay = optimizer._no_decay
  no_adaptation = optimizer._no_adaptation
  ours = sorted(v.path for _, v, _ in pairs
                if optimizer._var_key(v) in no_decay)
  ours_adapt = sorted(v.path for _, v, _ in pairs
                      if optimizer._var_key(v) in no_adaptation)
  theirs = sorted(reference.excluded)
  theirs_as_ours = sorted(v.path for n, v, _ in pairs
                          if n in reference.excluded)
  print(f"  excluded, ours ({len(ours)}): {', '.join(ours)}")
  print(f"  excluded, HF   ({len(theirs)}): {', '.join(theirs)}")
  if ours != theirs_as_ours:
    raise AssertionError(
        f"exclusion sets differ: only ours {set(ours) - set(theirs_as_ours)}, "
        f"only HF {set(theirs_as_ours) - set(ours)}")
  if ours_adapt != ours:
    raise AssertionError(f"our layer-adaptation exclusions {ours_adapt} are "
                         f"not the decay exclusions")
  return {"ours": ours, "hf": theirs, "same_variables": True}


# ------------------------------------------------------------ data
def pretraining_batches(rng, steps, batch, seq, vocab, predictions):
  """{feature: array [steps, batch, ...]} of the pretraining TFRecords'
  features: padded rows, segments A/B, masked slots with weight 0 padding."""
  ids = np.zeros([steps, batch, seq], np.int32)
  mask = np.zeros_like(ids)
  segments = np.zeros_like(ids)
  positions = np.zeros([steps, batch, predictions], np.int32)
  lm_ids = np.zeros_like(positions)
  weights = np.zeros([steps, batch, predictions], np.float32)
  for s in range(steps):
    for b in range(batch):
      length = int(rng.integers(seq // 2, seq + 1))
      ids[s, b, :length] = rng.integers(5, vocab, length)
      ids[s, b, 0], ids[s, b, length - 1] = 2, 3  # [CLS] ... [SEP]
      mask[s, b, :length] = 1
      segments[s, b, int(rng.integers(2, length - 1)):length] = 1
      count = min(int(rng.integers(predictions // 2, predictions + 1)),
                  length - 2)
      chosen = np.sort(rng.choice(np.arange(1, length - 1), count,
                                  replace=False))
      positions[s, b, :count] = chosen
      lm_ids[s, b, :count] = ids[s, b, chosen]
      ids[s, b, chosen] = MASK_ID
      weights[s, b, :count] = 1.0
  labels = rng.integers(0, 2, [steps, batch, 1]).astype(np.int32)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
          "masked_lm_positions": positions, "masked_lm_ids": lm_ids,
          "masked_lm_weights": weights, "next_sentence_labels": labels}


def classification_batches(rng, steps, batch, seq, vocab):
  data = pretraining_batches(rng, steps, batch, seq, vocab, 2)
  features = {k: data[k] for k in ("input_ids", "input_mask", "segment_ids")}
  return features, rng.integers(0, 2, [steps, batch]).astype(np.int32)


def torch_inputs(data, step):
  import torch  # pylint: disable=g-import-not-at-top
  return {"input_ids": torch.from_numpy(data["input_ids"][step].astype(np.int64)),
          "attention_mask": torch.from_numpy(
              data["input_mask"][step].astype(np.int64)),
          "token_type_ids": torch.from_numpy(
              data["segment_ids"][step].astype(np.int64))}


# ------------------------------------------------------------ phases
class _EpochLogs:
  """Keras callback keeping each epoch's logs (one step per epoch)."""

  def __init__(self):
    import keras  # pylint: disable=g-import-not-at-top

    class Recorder(keras.callbacks.Callback):

      def __init__(self, rows):
        super().__init__()
        self.rows = rows

      def on_epoch_end(self, epoch, logs=None):
        self.rows.append({k: float(v) for k, v in (logs or {}).items()})

    self.rows = []
    self.callback = Recorder(self.rows)


def _hf_config(config, attention="eager", **extra):
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.AlbertConfig(
      **{k: getattr(config, k) for k in (
          "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
          "num_hidden_groups", "inner_group_num", "num_attention_heads",
          "intermediate_size", "layer_norm_eps", "max_position_embeddings",
          "type_vocab_size")},
      hidden_act={"gelu": "gelu_new", "gelu_exact": "gelu"}.get(
          config.hidden_act, config.hidden_act),
      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
      classifier_dropout_prob=0.0, attn_implementation=attention, **extra)


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
    data = pretraining_batches(rng, steps, args.batch_size, args.seq_length,
                               config.vocab_size, args.predictions)
    model = AlbertPretrainer(config)
    loss, metrics = None, None
    dataset = tf.data.Dataset.from_tensor_slices(data)
    batch0 = {k: v[0] for k, v in data.items()}
    loss_fn = lambda m, b: pretraining_losses(
        m({k: b[k] for k in (*ENCODER_INPUTS, "masked_lm_positions")}),
        b)["loss"]
    hf_model = transformers.AlbertForPreTraining(_hf_config(config))
  else:
    features, labels = classification_batches(
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
        _hf_config(config, num_labels=2))
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

  pairs = parameter_pairs(model, hf_model)
  copy_ours_to_hf(pairs, hf_model)
  initial = hf_values(pairs, hf_model)
  if peer_run is not None:
    for name in initial:
      if not np.array_equal(initial[name], peer_run["initial"][name]):
        raise AssertionError(f"initial {name} differs from the reused run's")
  for name, variable, _ in pairs:
    if not np.array_equal(initial[name], variable.numpy()):
      raise AssertionError(f"copy of {variable.path} to {name} differs")
  reference = OriginalRule(hf_model.named_parameters(), rule)
  mode = "dense gradients (diagnostic)" if dense_gradients else "as shipped"
  print(f"{phase}, {mode}: {len(pairs)} variables, rule {rule}", flush=True)
  exclusions = exclusion_check(pairs, model.optimizer, reference)
  first = first_step_gradients(model, batch0, loss_fn)

  start = time.perf_counter()
  logs = _EpochLogs()
  model.fit(dataset, epochs=steps, steps_per_epoch=1, verbose=0,
            shuffle=False, callbacks=[logs.callback])
  ours_seconds = time.perf_counter() - start
  ours_lrs = [float(schedule(t)) for t in range(steps)]

  def hf_step(hf, rule_, t):
    """One step of the peer on batch t: {"loss", ...}, then its update."""
    out = hf(**torch_inputs(data, t))
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
    row["lr"] = original_lr(t, args.learning_rate, steps, warmup)
    row["grad_global_norm"] = rule_.step(row["lr"])
    rule_.zero_grad()
    return row

  # The noise floor: the same peer with PyTorch's SDPA attention instead of
  # the eager one, a change of rounding only, trained in lockstep.
  floor = None
  if phase in args.noise_floor.split(",") and not dense_gradients:
    floor_model = type(hf_model)(_hf_config(
        config, attention="sdpa",
        **({} if pretraining else {"num_labels": 2})))
    floor_model.load_state_dict(hf_model.state_dict())
    floor_model.train()
    floor = (floor_model, OriginalRule(floor_model.named_parameters(), rule))

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
    ours, theirs = logs.rows[t], hf_rows[t]
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

  final = (hf_values(pairs, hf_model) if peer_run is None
           else peer_run["final"])
  floor_final = hf_values(pairs, floor[0]) if floor else None
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


# ------------------------------------------------------------ report
KEY_BIAS_NOTE = (
    "The attention key bias gets a gradient that is analytically 0 (it adds "
    "q.b_k to every score of a query, which the softmax cancels), so both "
    "sides move it by float noise only: its values stay below 1e-7 (max|HF| "
    "column) and its relative difference says nothing; the worst variable "
    "is therefore also given without it.")


NOISE_FLOOR_NOTE = (
    "The noise floor trains a second HF model in lockstep with the first, "
    "the same weights, batches and optimizer port, with PyTorch's SDPA "
    "attention instead of the eager one: a change of rounding only. How "
    "far its losses drift from the eager model's is how far float32 "
    "rounding alone carries two correct implementations apart in that phase "
    "(fine-tuning at this learning rate is unstable: the loss jumps "
    "between steps and differences grow by up to 10x a step).")


def _headline_row(run):
  worst = run["worst_variable_except_key_bias"]
  return (f"{run['max_loss_rel_diff']:.2e} "
          f"({'met' if run['met'] else 'not met'}"
          + (f", from step {run['first_step_over_target']}"
             if run["first_step_over_target"] is not None else "")
          + f") | `{worst['ours']}` {worst['rel_diff']:.1e}")


def _finding(result):
  """The defect paragraph, when the shipped path misses the target and the
  dense-gradient diagnostic meets it."""
  pairs = [(real, dense) for real, dense in zip(
      result["phases"], result.get("diagnostic") or []) if dense]
  if not pairs or not any(not real["met"] and dense["met"]
                          for real, dense in pairs):
    return []
  lines = ["## Finding: the clip's global norm of IndexedSlices gradients", ""]
  text = (
      "Our gradients of the embedding tables read with a gather are "
      "tf.IndexedSlices with one slice per token, so a row read k times has "
      "k slices. Keras 3's `clip_by_global_norm` (what `global_clipnorm` "
      "runs; `keras.src.optimizers.base_optimizer.global_norm`) squares the "
      "slices' values before they are summed into rows (`ops.square` maps "
      "IndexedSlices values), so a row adds sum_k |g_k|^2 instead of "
      "|sum_k g_k|^2: the clip scale is not 1 / the norm of the gradient. "
      "The reference clips by the dense gradient's norm, as the documented "
      "rule says (and `tests/numpy_reference.original_step` does), and as "
      "the original computes it on TPU (`use_one_hot_embeddings = use_tpu`: "
      "one-hot matmuls, dense gradients). The original run off TPU "
      "gathers too, and TF's `tf.clip_by_global_norm` squares "
      "`IndexedSlices.values` the same way, so this is the original's "
      "CPU/GPU behaviour, not its TPU one. With our gradients made dense "
      "before our optimizer (nothing else changed), the steps agree to "
      "float rounding; as shipped they drift apart. At the first batch:")
  lines += [text, ""]
  for real, dense in pairs:
    first = real["first_step_gradients"]
    slices = ", ".join(f"`{s['variable']}` {s['slices']} slices over "
                       f"{s['rows']} rows" for s in first["indexed_slices"])
    lines.append(
        f"- {real['phase']}: Keras's clip norm {first['keras_clip_norm']:.4f}, "
        f"the dense gradient's {first['dense_norm']:.4f} (HF's "
        f"{first['hf_norm']:.4f}); IndexedSlices: {slices or 'none'}; max "
        f"relative loss difference {real['max_loss_rel_diff']:.2e} as "
        f"shipped, {dense['max_loss_rel_diff']:.2e} with dense gradients.")
  lines += ["", "If the dense norm is the intended rule, the fix belongs in "
            "`albert_tf/training/optimization.py` (e.g. `_OriginalRule` "
            "making IndexedSlices dense before the clip; not made here). "
            "Without a clip (`global_clipnorm=0`) the second moment has the "
            "same fault: `ops.square(g)` of the slices, summed by row, is "
            "sum_k g_k^2, not (sum_k g_k)^2.", ""]
  return lines


def _phase_section(run, title):
  pretraining = run["phase"] == "pretraining"
  worst, other = run["worst_variable"], run["worst_variable_except_key_bias"]
  lines = [
      f"## {title}", "",
      f"Ours: {run['ours']}. Peer: {run['peer']}. Max relative loss "
      f"difference over {len(run['steps'])} steps: "
      f"**{run['max_loss_rel_diff']:.2e}** "
      f"({'met' if run['met'] else 'NOT met'}). After the last step the "
      f"worst variable is `{worst['ours']}` (max|diff| / max|HF| = "
      f"{worst['rel_diff']:.2e}, max|HF| {worst['max_abs_hf']:.1e}); "
      f"without the key bias, `{other['ours']}` (HF `{other['hf']}`) "
      f"{other['rel_diff']:.2e}. Schedules agree to "
      f"{run['max_lr_diff']:.1e}. Wall: ours {run['seconds']['ours']} s "
      f"(with tracing), HF {run['seconds']['hf']} s"
      + (" (the peer's run of the as-shipped section, reused: its steps do "
         "not depend on ours)" if run.get("peer_reused") else "") + "."
      + (f" Noise floor (HF eager vs SDPA): losses {run['noise_floor']:.2e}; "
         f"worst variable without the key bias `"
         f"{run['noise_floor_worst_variable_except_key_bias']['ours']}` "
         f"{run['noise_floor_worst_variable_except_key_bias']['noise_floor_rel_diff']:.2e}"
         " (column \"floor\" below)."
         if run.get("noise_floor") is not None else ""), ""]
  if not run["dense_gradients"]:
    lines += [
        f"Excluded from weight decay{' and the trust ratio' if pretraining else ''}"
        f": the same {len(run['exclusions']['ours'])} variables on both sides "
        "(asserted through the name map) — ours: "
        + ", ".join(f"`{n}`" for n in run["exclusions"]["ours"])
        + "; HF: " + ", ".join(f"`{n}`" for n in run["exclusions"]["hf"])
        + ".", ""]
  head = "| step | lr | loss ours | loss HF | rel. diff |"
  rule = "|---|---|---|---|---|"
  floor = run.get("noise_floor") is not None
  if floor:
    head += " loss HF SDPA | rel. diff HF eager vs SDPA |"
    rule += "---|---|"
  detail = pretraining and not run["dense_gradients"]
  if detail:
    head += " MLM ours | MLM HF | SOP ours | SOP HF |"
    rule += "---|---|---|---|"
  lines += [head, rule]
  for r in run["steps"]:
    line = (f"| {r['step']} | {r['lr']:.2e} | {r['loss_ours']:.7f} | "
            f"{r['loss_hf']:.7f} | {r['loss_rel_diff']:.2e} |")
    if floor:
      line += f" {r['loss_hf_sdpa']:.7f} | {r['noise_floor_rel_diff']:.2e} |"
    if detail:
      line += (f" {r['masked_lm_loss_ours']:.7f} | "
               f"{r['masked_lm_loss_hf']:.7f} | "
               f"{r['sentence_order_loss_ours']:.7f} | "
               f"{r['sentence_order_loss_hf']:.7f} |")
    lines.append(line)
  lines += ["", "After the last step, per variable: max|ours - HF| / max|HF| "
            "(rel. diff), max|HF|, and max|HF_N - HF_0| / max|HF_N| (moved)"
            + (", and max|HF SDPA - HF| / max|HF| (floor)" if floor else "")
            + ", worst first:", "",
            "| variable (ours) | HF parameter | excluded | rel. diff | max\\|HF\\| "
            "| moved |" + (" floor |" if floor else ""),
            "|---|---|---|---|---|---|" + ("---|" if floor else "")]
  shown = run["variables"] if not run["dense_gradients"] else run[
      "variables"][:5]
  for v in shown:
    lines.append(f"| `{v['ours']}` | `{v['hf']}` | "
                 f"{'yes' if v['excluded'] else 'no'} | {v['rel_diff']:.2e} "
                 f"| {v['max_abs_hf']:.1e} | {v['moved']:.2e} |"
                 + (f" {v['noise_floor_rel_diff']:.2e} |" if floor else ""))
  if run["dense_gradients"]:
    lines.append(f"| ({len(run['variables']) - 5} more in the .json) "
                 "| | | | | |")
  lines.append("")
  return lines


def report(result):
  cpu = result["cpu"]
  lines = [
      "# Training-step parity: albert_tf vs HF torch + the original's "
      "optimizers", "",
      f"`{result['command']}`, {result['date']}, {cpu['model']} "
      f"({', '.join(cpu['flags'])}; amx_bf16: "
      f"{'yes' if 'amx_bf16' in cpu['flags'] else 'no'}), "
      f"{result['cpu_count']} cores shared with other jobs (load average "
      f"{result['load_start'][0]:.2f} at the start), torch "
      f"{result['torch_threads']} thread(s); "
      + ", ".join(f"{k} {v}" for k, v in result["versions"].items())
      + f"; {result['seconds']} s in all.", "",
      f"Model: {result['model']}. Batches: {result['batches']}. Schedule: "
      f"{result['schedule']}. float32 on both sides. Target: relative loss "
      f"difference |ours - HF| / |HF| <= {TARGET:g} at every step.", "",
      "| phase | optimizer | steps | max rel. loss diff, as shipped "
      "| worst variable (without key bias) | noise floor: HF eager vs SDPA "
      + ("| with dense gradients (diagnostic) | worst variable |"
         if result.get("diagnostic") else "|"),
      "|---|---|---|---|---|---|" + ("---|---|" if result.get("diagnostic")
                                     else "")]
  for i, real in enumerate(result["phases"]):
    floor = real.get("noise_floor")
    line = (f"| {real['phase']} | {real['rule']} | {len(real['steps'])} | "
            + _headline_row(real) + " | "
            + (f"{floor:.2e}" if floor is not None else "not run") + " |")
    if result.get("diagnostic"):
      dense = result["diagnostic"][i]
      line += (" " + _headline_row(dense) + " |" if dense
               else " not run (met as shipped) | |")
    lines.append(line)
  lines += ["", KEY_BIAS_NOTE, "", NOISE_FLOOR_NOTE, ""]
  lines += _finding(result)
  for run in result["phases"]:
    lines += _phase_section(
        run, f"{run['phase'].capitalize()} ({run['rule']}), as shipped")
  for run in [d for d in result.get("diagnostic") or [] if d]:
    lines += _phase_section(
        run, f"{run['phase'].capitalize()} ({run['rule']}), diagnostic: "
        "IndexedSlices gradients made dense before our optimizer")
  return "\n".join(lines)


def write_atomically(path, text):
  tmp = f"{path}.tmp{os.getpid()}"
  with open(tmp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(tmp, path)


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
