"""Every exported artifact proven in the runtime that will run it, before it is handed over.

An export is checked as HF optimum checks an ONNX file: the artifact is
loaded in its own runtime (LiteRT's interpreter, ONNX Runtime, TF's
SavedModel loader), fed held-out examples, and its outputs are compared
with the float SavedModel's `serving_default` on the same ids. The figures
go into the artifact's JSON sidecar and its model card; below a floor the
export stops with one line and writes nothing at --output.

Held-out examples, in this order:
  1. --verify_data=FILE, read as `albert-predict` reads files (a TSV with a
     header, JSON lines, or plain text; gold labels from its "label"
     column when there is one, a tagger's tags per token);
  2. the run's own dev split, when the family can read it back from the
     export record (`Task.held_out_inputs`; a classifier's or a tagger's
     dev file);
  3. else sequences made of the tokenizer's own pieces: they prove that
     the runtime loads the file and computes what TF computes, not that a
     quantized model keeps its accuracy on text. A warning says so, and the
     card names the source.

What is compared (`compare`): the decision the family's output stands for
(the argmax class of `probabilities`/`logits`, a tagger's tag per real
token, span QA's start and end, the pretrainer's MLM top-1; a regression
score within 1% of the reference's scale; the pooled output's direction,
cosine >= 0.99, for an encoder), the largest probability difference, the
largest output difference relative to the reference's scale, and, with
gold labels, the accuracy of both (a tagger: entity F1,
`Task.held_out_metric`).

Floors (`Floors`; the exporters' flags change them): float32 (quantize
none) agrees on >= 99.5% of the decisions; a quantized artifact (float16
weights, int8 weights or activations) on >= 95%, and its accuracy is at
most 2 points below the float model's (a tagger's entity F1 likewise).
"""

import dataclasses
from typing import Callable, Dict, Optional

from absl import logging
import numpy as np

from albert_tf.core import features as F

FLOAT_MODES = ("none",)
ENCODER_COSINE = 0.99  # an encoder's pooled output "agrees" at or above it
REGRESSION_TOLERANCE = 0.01  # of the reference's scale
NUM_EXAMPLES = 200
# The metrics a check scores with gold labels: name in figures -> words.
METRICS = {"accuracy": "accuracy", "entity_f1": "entity F1"}


class ExportVerificationError(ValueError):
  """The artifact does not load or run in its runtime, or is below a floor."""


@dataclasses.dataclass
class Floors:
  """What an artifact must reach to be handed over.

  min_agreement: None for the mode's default (0.995 float32, 0.95
  quantized); max_metric_drop: the largest accuracy loss against the float
  model, as a fraction (0.02: 2 points).
  """
  min_agreement: Optional[float] = None
  max_metric_drop: float = 0.02

  def agreement_for(self, quantize: str) -> float:
    if self.min_agreement is not None:
      return self.min_agreement
    return 0.995 if quantize in FLOAT_MODES else 0.95


@dataclasses.dataclass
class HeldOut:
  """Encoded held-out examples: features {name: int32 [n, ...]}, the gold
  class ids (or None) and where they came from; metric: the family's own
  scoring of gold that is not one class per example (`compare`'s)."""
  features: Dict[str, np.ndarray]
  gold: Optional[np.ndarray]
  source: str
  real_text: bool
  metric: Optional[tuple] = None

  @property
  def size(self) -> int:
    return len(self.features[F.INPUT_IDS])


# ------------------------------------------------------------ held-out data
def vocabulary_texts(tokenizer, inputs, n, num_choices, seed=0):
  """Raw inputs {serve_text name: n values} of made-up text: runs of the
  tokenizer's ordinary pieces, spelled as text ("▁" a space, "##" glued)."""
  special = {tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id,
             tokenizer.sep_id, tokenizer.mask_id}
  pieces = [p for i, p in enumerate(tokenizer.convert_ids_to_tokens(
      list(range(tokenizer.vocab_size)))) if i not in special and not (
          p.startswith("[") or p.startswith("<"))]
  rng = np.random.default_rng(seed)

  def text():
    words = rng.choice(pieces, int(rng.integers(3, 40)))
    return "".join(w.replace("\u2581", " ") if not w.startswith("##")
                   else w[2:] for w in (
                       w if w.startswith(("##", "\u2581")) else " " + w
                       for w in words)).strip() or "a"

  return {name: [[text() for _ in range(num_choices)] if name == "options"
                 else text() for _ in range(n)] for name in inputs}


def held_out(record, tokenizer, task, given=None,
             max_examples=NUM_EXAMPLES) -> HeldOut:
  """The examples an artifact is checked on (module docstring's order).

  task: the family's Task class that encodes them (the base Task's
  sentence packing for an encoder or a pretrainer); given: (raw inputs,
  gold label names or None, a description) read from --verify_data by the
  command (`export_tflite.read_verify_data`), or None.
  """
  length = record.max_seq_length
  raw, gold, source = given or (None, None, None)
  real = True
  if raw is None:
    try:
      found = task.held_out_inputs(record, max_examples)
    except (OSError, ValueError) as e:
      logging.warning("The run's dev split could not be read back (%s)", e)
      found = None
    if found is not None:
      raw, gold, source = found
  if raw is None:
    n = min(64, max_examples)
    raw = vocabulary_texts(tokenizer, task.serve_text_inputs(record), n,
                            record.task_config.get("num_choices", 4))
    source = (f"{n} texts made of the vocabulary's own pieces (no held-out "
              "text: give --verify_data)")
    real = False
    logging.warning("Verifying on %s", source)
  features = task.encode_inputs(record, tokenizer, length, raw)
  labels = list(record.label_list)
  metric = (task.held_out_metric(record, tokenizer, length, raw, gold)
            if gold is not None else None)
  # -1: a row without a gold label (--verify_data may label some only).
  gold_ids = (np.array([-1 if g is None else labels.index(g) for g in gold],
                       np.int64) if gold is not None and labels
              and metric is None else None)
  return HeldOut(features, gold_ids, source, real, metric)


def with_masked_positions(features, tokenizer, max_predictions):
  """A pretrainer's serving_default inputs: up to max_predictions real
  positions after [CLS] masked (ids set to [MASK]) and their positions."""
  ids = features[F.INPUT_IDS].copy()
  real = features[F.INPUT_MASK].sum(axis=1)
  positions = np.zeros([len(ids), max_predictions], np.int32)
  for row, size in enumerate(real):
    chosen = np.arange(1, max(2, min(int(size) - 1, max_predictions + 1)))
    positions[row, :len(chosen)] = chosen
    ids[row, chosen] = tokenizer.mask_id
  return dict(features, **{F.INPUT_IDS: ids,
                           F.MASKED_LM_POSITIONS: positions})


# ------------------------------------------------------------- the outputs
def reference_outputs(loaded, features, batch_size=64):
  """The loaded float SavedModel's serving_default on features, numpy."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  fn = loaded.signatures["serving_default"]
  wanted = set(fn.structured_input_signature[1])
  return run_batched(lambda **f: {k: v.numpy() for k, v in fn(**{
      n: tf.constant(x) for n, x in f.items() if n in wanted}).items()},
                     features, batch_size)


def run_batched(fn: Callable, features, batch_size):
  """fn over features batch_size rows at a time, outputs concatenated."""
  n = len(features[F.INPUT_IDS])
  parts = [fn(**{k: v[s:s + batch_size] for k, v in features.items()})
           for s in range(0, n, batch_size)]
  return {k: np.concatenate([np.asarray(p[k]) for p in parts])
          for k in parts[0]}


def decisions(outputs, features):
  """(what is compared, [m] reference-side values per decision: a function
  of one output dict -> array, and the weights of each decision)."""
  if F.PROBABILITIES in outputs:
    return "the predicted class", lambda o: o[F.PROBABILITIES].argmax(-1), None
  if F.MLM_LOGITS in outputs:
    return "the MLM's top-1 piece", lambda o: o[F.MLM_LOGITS].argmax(-1), None
  if "start_logits" in outputs and "end_logits" in outputs:
    return ("the answer's start and end", lambda o: np.stack(
        [o["start_logits"].argmax(-1), o["end_logits"].argmax(-1)], -1),
            None)
  logits = outputs.get(F.LOGITS)
  if logits is not None and logits.ndim == 3:  # a tagger: [n, seq, tags]
    return "the tag of each real token", lambda o: o[F.LOGITS].argmax(
        -1), features[F.INPUT_MASK].astype(bool)
  if logits is not None and logits.shape[-1] > 1:
    return "the predicted class", lambda o: o[F.LOGITS].argmax(-1), None
  return None, None, None


def compare(reference, artifact, features, gold=None, metric=None) -> dict:
  """The figures of an artifact's outputs against the reference's.

  gold: class ids (-1: none) scored as accuracy; metric: (name, outputs ->
  value, rows scored), `Task.held_out_metric`'s, scored as `name`."""
  shared = [k for k in reference if k in artifact and np.issubdtype(
      np.asarray(reference[k]).dtype, np.floating)]
  figures = {"examples": int(len(features[F.INPUT_IDS]))}
  rel = 0.0
  for k in shared:
    ref, got = np.asarray(reference[k], np.float64), np.asarray(
        artifact[k], np.float64)
    if ref.shape != got.shape:
      raise ExportVerificationError(
          f"output {k}: shape {list(got.shape)}, the float model's "
          f"{list(ref.shape)}")
    if not np.all(np.isfinite(got)):
      figures["non_finite_outputs"] = int((~np.isfinite(got)).sum())
      got = np.nan_to_num(got, nan=np.inf)
    rel = max(rel, float(np.abs(got - ref).max() / max(np.abs(ref).max(),
                                                       1e-6)))
  figures["max_relative_difference"] = rel
  what, decide, weights = decisions(reference, features)
  if what is not None:
    same = decide(reference) == decide(artifact)
    if weights is not None:
      same = same[weights]
    elif same.ndim > 1:
      same = same.all(axis=tuple(range(1, same.ndim)))
    figures["compared"] = what
    figures["agreement"] = float(same.mean()) if same.size else 1.0
    ref_p = None
    if F.PROBABILITIES in reference:
      ref_p, got_p = reference[F.PROBABILITIES], artifact[F.PROBABILITIES]
    elif F.LOGITS in reference and reference[F.LOGITS].ndim == 2:
      from scipy.special import softmax  # pylint: disable=g-import-not-at-top
      ref_p, got_p = (softmax(o[F.LOGITS], axis=-1)
                      for o in (reference, artifact))
    if ref_p is not None:
      figures["max_probability_difference"] = float(np.abs(
          np.asarray(got_p, np.float64) - ref_p).max())
  elif F.POOLED_OUTPUT in reference:
    ref, got = reference[F.POOLED_OUTPUT], artifact[F.POOLED_OUTPUT]
    cos = (ref * got).sum(-1) / np.maximum(
        np.linalg.norm(ref, axis=-1) * np.linalg.norm(got, axis=-1), 1e-12)
    figures["compared"] = f"the pooled output's direction (cosine >= {ENCODER_COSINE})"
    figures["agreement"] = float((cos >= ENCODER_COSINE).mean())
    figures["min_pooled_cosine"] = float(cos.min())
  elif F.LOGITS in reference:  # regression: one score per example
    ref, got = reference[F.LOGITS], artifact[F.LOGITS]
    scale = max(float(np.abs(ref).max()), 1e-6)
    figures["compared"] = (f"the score, within {REGRESSION_TOLERANCE:.0%} of "
                           "the reference's scale")
    figures["agreement"] = float((np.abs(got - ref).max(-1)
                                  <= REGRESSION_TOLERANCE * scale).mean())
  if gold is not None and what == "the predicted class" and (gold >= 0).any():
    scored = gold >= 0
    figures["float_accuracy"] = float(
        (decide(reference)[scored] == gold[scored]).mean())
    figures["accuracy"] = float(
        (decide(artifact)[scored] == gold[scored]).mean())
    if not scored.all():
      figures["accuracy_examples"] = int(scored.sum())
  if metric is not None and metric[2]:
    name, score, scored = metric
    figures[f"float_{name}"] = float(score(reference))
    figures[name] = float(score(artifact))
    if scored < figures["examples"]:
      figures[f"{name}_examples"] = int(scored)
  return figures


# ------------------------------------------------------------- the verdict
def judge(figures, quantize, floors: Floors, artifact: str,
          instead: str) -> dict:
  """Adds "floors", "passed" and "verdict" (one line) to figures."""
  need = floors.agreement_for(quantize)
  figures["floors"] = {"min_agreement": need}
  failures = []
  if figures.get("non_finite_outputs"):
    failures.append(f"{figures['non_finite_outputs']} non-finite outputs")
  agreement = figures.get("agreement")
  if agreement is not None and agreement < need:
    failures.append(f"agrees with the float model on {agreement:.1%} of "
                    f"{figures['compared']} (floor {need:.1%})")
  metric = next((m for m in METRICS if m in figures), None)
  words = METRICS.get(metric)
  if metric and quantize not in FLOAT_MODES:
    figures["floors"]["max_metric_drop"] = floors.max_metric_drop
    drop = figures[f"float_{metric}"] - figures[metric]
    if drop > floors.max_metric_drop + 1e-12:
      failures.append(
          f"{words} {figures[metric]:.3f} against the float model's "
          f"{figures[f'float_{metric}']:.3f} ({drop * 100:.1f} points lost, "
          f"floor {floors.max_metric_drop * 100:.1f})")
  figures["passed"] = not failures
  on = f"on {figures['examples']} held-out examples" + (
      f" ({words} on the {figures[f'{metric}_examples']} labelled)"
      if f"{metric}_examples" in figures else "")
  if failures:
    figures["verdict"] = (f"{artifact} (quantize={quantize}) {'; '.join(failures)} "
                          f"{on}: {instead}")
  elif metric:
    gap = (figures[metric] - figures[f"float_{metric}"]) * 100
    figures["verdict"] = (f"{words} {figures[metric]:.3f} ({gap:+.1f} "
                          "points against the float model's "
                          f"{figures[f'float_{metric}']:.3f}); agreement "
                          f"{agreement:.1%} {on}")
  else:
    figures["verdict"] = (f"agreement {agreement:.1%} with the float model "
                          f"{on}" if agreement is not None else
                          f"outputs within {figures['max_relative_difference']:.1e} "
                          f"of the float model's scale {on}")
    unscored = {"the predicted class": "labels: accuracy",
                "the tag of each real token": "tags: entity F1"}.get(
                    figures.get("compared"))
    if quantize not in FLOAT_MODES and unscored:
      figures["verdict"] += (f" (no gold {unscored}, and --max_metric_drop, "
                             "not checked)")
  return figures


def check(artifact: str, quantize: str, run: Callable, reference, held,
          floors: Floors, allow_degraded: bool, runtime: str,
          instead: str) -> dict:
  """Runs the artifact on the held-out features, compares, judges.

  run: features -> outputs (the artifact in its runtime); it may raise
  anything the runtime raises, which becomes one line. Returns the figures
  (`judge`'s, plus "runtime", "source", "degraded"); raises
  ExportVerificationError below a floor unless allow_degraded.
  """
  try:
    outputs = run(held.features)
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise ExportVerificationError(
        f"{artifact} does not run in {runtime}: {first[:300]}") from e
  figures = compare(reference, outputs, held.features, held.gold,
                    held.metric)
  figures.update(runtime=runtime, source=held.source,
                 real_text=held.real_text)
  judge(figures, quantize, floors, artifact, instead)
  figures["degraded"] = not figures["passed"]
  if not figures["passed"]:
    if not allow_degraded:
      raise ExportVerificationError(
          figures["verdict"] + " (--allow_degraded writes it anyway)")
    logging.warning("DEGRADED, written because of --allow_degraded: %s",
                    figures["verdict"])
  return figures
