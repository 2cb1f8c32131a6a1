"""Masked LM + sentence-order prediction from TFRecord shards (the ALBERT objective).

The model (`AlbertPretrainer`) computes its losses in its own train_step:
MLM is averaged over the real masked positions of the batch and SOP over
its examples, which a per-example Keras loss cannot express. Inputs are
`albert_tf.data.pretraining_dataset` over the shards; a resumed run restarts the
stream with its shuffle seed offset by the step (the input position is not
checkpointed, as in the original), so it reads new batches rather than
replaying old ones.

Export (`--model=pretrainer`): serving_default and serve_text (+
`masked_lm_positions`) return the encoder outputs, `mlm_logits` and
`sop_logits`; serve_fill_mask predicts the pieces of each [MASK] in a text
(`albert_tf.fill_mask`).
"""

from __future__ import annotations

import re
import warnings
from typing import Dict, List, Optional

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.tasks import registry
from albert_tf.core import record as record_lib
from albert_tf.tasks.base import Task

tf = lazy.module("tensorflow")
corrupt_records = lazy.module("albert_tf.data.corrupt_records")
pretraining_dataset = lazy.module("albert_tf.data.pretraining_dataset")
record_checks = lazy.module("albert_tf.data.record_checks")
models = lazy.module("albert_tf.modeling.models")
saved_model = lazy.module("albert_tf.serving.saved_model")

EVAL_KEYS = ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
             "sentence_order_loss")


@registry.register_family(
    "pretraining",
    modules=("albert_tf.run_pretraining", "albert_tf.data.pretraining_dataset",
             "albert_tf.fill_mask", "albert_tf.serving.fill_mask_graph"))
class PretrainingTask(Task):
  """MLM + SOP over TFRecord files in the `albert_tf.core.features` format."""

  name = "pretraining"
  best_metric = "masked_lm_accuracy"
  export_name = "pretrainer"
  # albert_tf.load(...).predict fills [MASK]s with the MLM head.
  fills_masks = True

  def __init__(self, train_files: List[str], eval_files: List[str],
               max_seq_length: int, max_predictions_per_seq: int,
               eval_batch_size: int = 64, max_eval_steps: int = 100,
               seed: int = 12345, shuffle_buffer_size: int = 1000,
               skip_corrupt_records: bool = False,
               sentence_order_weight: float = 1.0, length_buckets: int = 0,
               micro_batches: int = 1):
    self.sentence_order_weight = sentence_order_weight
    self.length_buckets = length_buckets
    self.micro_batches = micro_batches
    self.train_files = train_files
    self.eval_files = eval_files
    self.eval_batch_size = eval_batch_size
    self.max_eval_steps = max_eval_steps
    self.seed = seed
    self.shuffle_buffer_size = shuffle_buffer_size
    self.data_kwargs = dict(max_seq_length=max_seq_length,
                            max_predictions_per_seq=max_predictions_per_seq,
                            skip_corrupt_records=skip_corrupt_records)

  def build_model(self, config):
    return self.with_micro_batches(models.AlbertPretrainer(
        config, sentence_order_weight=self.sentence_order_weight))

  def build_inputs(self, split, strategy, global_batch_size, start_step=0,
                   num_steps=0):
    if split == "train":
      return pretraining_dataset.make_distributed_dataset(
          strategy, self.train_files, global_batch_size, is_training=True,
          seed=self.seed + start_step,
          shuffle_buffer_size=self.shuffle_buffer_size,
          length_buckets=self.length_buckets, **self.data_kwargs)
    # TPUs need static shapes: there the last partial batch is dropped.
    # max_eval_steps limits the data: `evaluate(steps=)` runs whole
    # steps_per_execution chunks (steps=8 at 10 per call evaluated 10).
    return pretraining_dataset.make_distributed_dataset(
        strategy, self.eval_files, global_batch_size, is_training=False,
        drop_remainder=isinstance(strategy, tf.distribute.TPUStrategy),
        max_batches=self.max_eval_steps or None, **self.data_kwargs)

  def evaluate(self, model, strategy) -> Dict[str, float]:
    dataset = self.build_inputs("eval", strategy, self.eval_batch_size)
    with warnings.catch_warnings():
      # Keras 3 warns "Your input ran out of data" whenever a dataset of
      # unknown length ends, as this one is meant to.
      warnings.filterwarnings("ignore", message="Your input ran out of data")
      results = self.guard_input_errors(
          lambda: model.evaluate(dataset, verbose=0, return_dict=True),
          self.eval_files)
    if any(k not in results for k in EVAL_KEYS):
      tpu = isinstance(strategy, tf.distribute.TPUStrategy)
      files = self.eval_files
      raise record_checks.InputFileError(
          f"--eval_input_file: no eval batch could be formed from "
          f"{len(files)} file(s) ({', '.join(files[:3])}"
          f"{', ...' if len(files) > 3 else ''}): they hold no records"
          + (f", or fewer than --eval_batch_size={self.eval_batch_size} (a "
             "TPU drops a partial batch)" if tpu else ""))
    self._say_what_eval_measures(model)
    return {**{k: float(results[k]) for k in EVAL_KEYS}, **self.baselines()}

  #: Training records the baselines are counted on (the first ones read).
  BASELINE_RECORDS = 20_000

  def baselines(self) -> Dict[str, float]:
    """What the eval metrics are measured against, on the records `evaluate`
    reads, from the training records' own counts (once per run):
    masked_lm_accuracy of always predicting the piece most often masked in
    training, masked_lm_loss of predicting the training records' distribution
    of masked pieces (add-one smoothed: the unigram cross-entropy), and
    sentence_order_accuracy of always answering the training records' more
    frequent label."""
    if getattr(self, "_baselines", None) is not None:
      return self._baselines
    train = self._label_counts(self.train_files or self.eval_files,
                               self.BASELINE_RECORDS)
    held = self._label_counts(self.eval_files,
                              self.max_eval_steps * self.eval_batch_size)
    size = max(train["pieces"].size, held["pieces"].size)
    counts = np.zeros(size) + 1.0  # add-one smoothing
    counts[:train["pieces"].size] += train["pieces"]
    pieces = np.zeros(size)
    pieces[:held["pieces"].size] = held["pieces"]
    order = np.zeros(2)
    order[:held["order"].size] = held["order"][:2]
    self._baselines = {
        "masked_lm_accuracy_baseline": float(
            pieces[int(np.argmax(counts))] / max(pieces.sum(), 1.0)),
        "masked_lm_loss_baseline": float(
            -(pieces * np.log(counts / counts.sum())).sum()
            / max(pieces.sum(), 1.0)),
        "sentence_order_accuracy_baseline": float(
            order[int(np.argmax(train["order"][:2]))] / max(order.sum(), 1.0)),
    }
    return self._baselines

  def _label_counts(self, files, max_records: int) -> Dict[str, np.ndarray]:
    """Weighted counts of the masked pieces and of the sentence labels in
    the first `max_records` records of `files`."""
    batch = 256
    dataset = pretraining_dataset.make_dataset(
        files, batch, is_training=False,
        max_batches=max(1, -(-max_records // batch)), **self.data_kwargs)
    pieces, order = np.zeros(0), np.zeros(2)
    for features in dataset:
      ids = features["masked_lm_ids"].numpy().reshape(-1)
      weights = features["masked_lm_weights"].numpy().reshape(-1)
      counted = np.bincount(ids, weights=weights)
      if counted.size > pieces.size:
        pieces = np.pad(pieces, (0, counted.size - pieces.size))
      pieces[:counted.size] += counted
      labels = features["next_sentence_labels"].numpy().reshape(-1)
      order += np.bincount(labels, minlength=2)[:2]
    return {"pieces": pieces, "order": order}

  #: Mean cosine similarity of the pooled outputs of different eval
  #: examples above which the encoder is said to have collapsed.
  COLLAPSE_COSINE = 0.95

  def _say_what_eval_measures(self, model) -> None:
    """Once per run: a warning when the eval records are training records
    (the scores measure fit, not generalisation). At every eval: a warning
    when the pooled outputs of one eval batch are nearly the same vector
    (an encoder that maps every input alike transfers nothing)."""
    shared = sorted(set(self.eval_files) & set(self.train_files))
    if shared and not getattr(self, "_said_shared", False):
      self._said_shared = True
      logging.warning(
          "Evaluating on %d training record file(s) (%s%s; no "
          "--eval_input_file of held-out records): the eval scores measure "
          "fit, not generalisation", len(shared), shared[0],
          ", ..." if len(shared) > 1 else "")
    cosine = self.pooled_output_cosine(model)
    if cosine is not None and cosine > self.COLLAPSE_COSINE:
      logging.warning(
          "The pooled outputs of different eval examples are nearly the "
          "same vector (mean cosine %.3f > %.2f): the encoder has collapsed "
          "and will not transfer; train longer, lower the learning rate, or "
          "start from published weights (convert_checkpoint)", cosine,
          self.COLLAPSE_COSINE)

  def pooled_output_cosine(self, model, batch_size: int = 32):
    """Mean pairwise cosine similarity of the pooled outputs of the first
    eval batch (None with fewer than 2 examples)."""
    dataset = pretraining_dataset.make_dataset(
        self.eval_files[:1], batch_size, is_training=False, max_batches=1,
        **self.data_kwargs)
    for features in dataset.take(1):
      pooled = model.encoder({k: features[k] for k in F.ENCODER_INPUTS},
                             training=False)[F.POOLED_OUTPUT]
      return mean_pairwise_cosine(np.asarray(pooled, np.float64))
    return None

  def record(self):
    # The lengths of the records it read go in task_config: the common
    # max_seq_length is the default length of fine-tuning and export.
    return record_lib.ModelInfo(
        task=self.name, text_pair=True, task_config={
            k: self.data_kwargs[k] for k in ("max_seq_length",
                                             "max_predictions_per_seq")})

  @classmethod
  def export_model(cls, config, record):
    return models.AlbertPretrainer(config)

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    # Imported here: only export needs TF Text (the in-graph tokenizers).
    from albert_tf.serving import fill_mask_graph  # pylint: disable=g-import-not-at-top
    from albert_tf.serving.text_graph import TextEncoder  # pylint: disable=g-import-not-at-top
    # Sentence pairs by default: the model was pretrained on them (SOP).
    text_pair = True if text_pair is None else text_pair
    encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length)

    def run(features):
      return cls.export_outputs(model(features, training=False))

    def run_text(inputs):
      return run({**encoder(inputs["text"], inputs.get("text_b")),
                  F.MASKED_LM_POSITIONS: inputs[F.MASKED_LM_POSITIONS]})

    return {
        "serving_default": saved_model.ids_signature(
            run, (F.MASKED_LM_POSITIONS,), model.config.vocab_size),
        "serve_text": saved_model.signature(
            run_text, saved_model.text_specs(text_pair) +
            [saved_model.int_spec(F.MASKED_LM_POSITIONS)]),
        "serve_fill_mask": fill_mask_graph.serve_fill_mask_signature(
            model, tokenizer, max_seq_length)}

  @staticmethod
  def export_outputs(outputs):
    """Serving outputs: encoder outputs, `mlm_logits` and `sop_logits`."""
    return {n: tf.cast(outputs[n], tf.float32) for n in (
        F.SEQUENCE_OUTPUT, F.POOLED_OUTPUT, F.MLM_LOGITS, F.SOP_LOGITS)}

  def guard_input_errors(self, fn, files: Optional[List[str]] = None):
    """Runs fn; a tf.data read error is re-raised naming the corrupt file."""
    files = self.train_files + self.eval_files if files is None else files
    try:
      return fn()
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      out_of_range = re.search(
          r"= (\d+) is not in \[0, (\d+)\)|label value of (\d+) which is "
          r"outside the valid range of \[0, (\d+)\)", e.message or "")
      if out_of_range:
        raise self._ids_error(files, int(out_of_range.group(2) or
                                         out_of_range.group(4))) from e
      bad = corrupt_records.describe_corrupt_files(
          corrupt_records.scan_tfrecords(files))
      if not bad:
        # Sound frames, but records that do not parse (later in a shard
        # than the first-record check looks): name the files.
        counts = corrupt_records.count_corrupt_records(
            files, self.data_kwargs["max_seq_length"],
            self.data_kwargs["max_predictions_per_seq"])
        bad = "; ".join(c.describe() for c in counts if c.skipped)
      if not bad:
        raise
      raise record_checks.InputFileError(
          f"Corrupt TFRecord data: {bad}. Fix or remove the file(s), or pass "
          "--skip_corrupt_records to skip unreadable records.") from e

  def _ids_error(self, files, vocab_size):
    """A token id the model has no embedding for: name the files."""
    found = pretraining_dataset.files_with_ids_over(
        files, vocab_size, self.data_kwargs["max_seq_length"],
        self.data_kwargs["max_predictions_per_seq"])
    where = ", ".join(f"{path} (largest id {top})" for path, top in found[:3])
    return record_checks.InputFileError(
        f"token ids outside the model's vocabulary (vocab_size={vocab_size}) "
        f"in {where or 'the records'}: were they written with another "
        "tokenizer? Pass that tokenizer's --spm_model_file (it sets "
        "vocab_size), or --vocab_size")


def mean_pairwise_cosine(x: np.ndarray) -> Optional[float]:
  """The mean cosine similarity of the distinct pairs of rows of x [n, d]
  (None for fewer than 2 rows; a zero row counts as orthogonal)."""
  n = len(x)
  if n < 2:
    return None
  x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
  sims = x @ x.T
  return float((sims.sum() - np.trace(sims)) / (n * (n - 1)))
