"""The two sides' training runs of benchmarks/long_parity.py: ours through
the Trainer and Keras `fit`, the peer HF torch with the original's losses
and LAMB."""

import collections
import time

import numpy as np

from benchmarks.long_parity_data import FEATURES
from benchmarks.parity_reference import OriginalRule
from benchmarks.parity_reference import original_lr

TRAIN_KEYS = ("loss", "masked_lm_loss", "sentence_order_loss",
              "masked_lm_accuracy", "sentence_order_accuracy")
EVAL_KEYS = ("masked_lm_accuracy", "masked_lm_loss",
             "sentence_order_accuracy", "sentence_order_loss")


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
