"""What a task declares; the trainer (`albert_tf.training.trainer`) does the rest.

The shape of Model Garden's `official/core/base_task.py`. A family says in
its one file its model (whose `checkpoint_items` name what checkpoints
hold), inputs, loss, metrics, dev evaluation and test predictions; its
record (`record()`, task_record.json); and its export and serving, the
`albert_tf.tasks.serving.ServingTask` half. Strategy, checkpoints, resume,
logs and the best checkpoint are the trainer's, written once for every task.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, Optional, Sequence, Tuple

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.data import input_timeout
from albert_tf.data import length_buckets as length_buckets_lib
from albert_tf.core.record import ModelInfo
from albert_tf.tasks.serving import ServingTask

keras = lazy.module("keras")
tf = lazy.module("tensorflow")


class Task(ServingTask):
  """A task family: its training and record (export, serving: ServingTask)."""

  #: The registered name (`albert_tf.tasks.registry.register_family`).
  name: str = ""
  #: The dev metric (higher is better) that picks the best checkpoint.
  best_metric: Optional[str] = None
  #: What `predict` writes in output_dir: --overwrite deletes these along
  #: with the trainer's files (`albert_tf.training.output_dir.run_files()`).
  output_files: Tuple[str, ...] = ()
  #: --input_timeout_secs: how long a split file's read may stall.
  input_timeout_secs: float = input_timeout.DEFAULT_SECS
  _train_tensors = None  # build_inputs' tensors, made once
  _predict_model = None  # the model `outputs` traced its function for

  def __init__(self, tokenizer, max_seq_length: int,
               eval_batch_size: int = 64, classifier_dropout: float = 0.1,
               seed: int = 12345, max_train_examples: int = 0,
               max_eval_examples: int = 0, max_predict_examples: int = 0,
               input_timeout_secs: float = input_timeout.DEFAULT_SECS):
    """The fields of a family fine-tuned on in-memory splits (a family of
    its own need not call it). max_*_examples: 0 reads every example."""
    self.tokenizer = tokenizer
    self.max_seq_length = max_seq_length
    self.eval_batch_size = eval_batch_size
    self.classifier_dropout = classifier_dropout
    self.seed = seed
    self.max_examples = {"train": max_train_examples,
                         "dev": max_eval_examples,
                         "test": max_predict_examples}
    self.input_timeout_secs = input_timeout_secs
    self._splits = {}

  @staticmethod
  def option_fields(o) -> dict:
    """`Task.__init__`'s fields from the shared flags (FinetuneOptions o)."""
    return dict(max_seq_length=o.max_seq_length,
                eval_batch_size=o.eval_batch_size,
                classifier_dropout=o.classifier_dropout, seed=o.seed,
                max_train_examples=o.max_train_examples,
                max_eval_examples=o.max_eval_examples,
                max_predict_examples=o.max_predict_examples,
                input_timeout_secs=o.input_timeout_secs)

  @staticmethod
  def wanted_splits(o) -> Tuple[str, ...]:
    """The splits a run reads: train, dev, test as --do_train/eval/predict."""
    return tuple(split for split, wanted in zip(
        ("train", "dev", "test"), (o.do_train, o.do_eval, o.do_predict))
                 if wanted)

  @classmethod
  def dataset_output_files(cls, dataset) -> Tuple[str, ...]:
    """What `predict` writes for a registered dataset beyond `output_files`
    (a submission file); --overwrite deletes these too."""
    return ()

  # Fine-tuning: `albert_tf.finetune` calls these, in this order, for the
  # family --task names (the options are its registered dataclass).
  #: --max_seq_length when neither the flag nor the fine-tuned model says.
  default_max_seq_length: int = 128
  #: Model parts not restored from --init_checkpoint (set by a family whose
  #: head there was fine-tuned on other labels).
  init_skip_parts: Tuple[str, ...] = ()
  #: What a random-init training run warns about (None: nothing).
  random_init_warning: Optional[str] = None
  #: --length_buckets and --micro_batches as `training.fast_path` decided
  #: them (for `step_indexed_inputs` and `with_micro_batches`).
  length_buckets: int = 0
  micro_batches: int = 1

  @classmethod
  def resolve_options(cls, o, info: Optional[ModelInfo]):
    """o with what is left to the model filled in: each such flag, else the
    value recorded beside the checkpoint (`info`), else the family's
    default. Families add their own fields with `own_config(info)`.
    Raises ValueError for options that exclude each other."""
    return dataclasses.replace(
        o, max_seq_length=first_given(
            o.max_seq_length, info and info.max_seq_length,
            cls.default_max_seq_length),
        do_lower_case=first_given(o.do_lower_case,
                                  info and info.do_lower_case, None))

  @classmethod
  def own_config(cls, info: Optional[ModelInfo]) -> dict:
    """The recorded task_config of this family ({} for another's record)."""
    return dict(info.task_config) if info and info.task == cls.name else {}

  @classmethod
  def from_options(cls, o, tokenizer, info: Optional[ModelInfo],
                   dataset) -> "Task":
    """The task of resolved options o (`dataset`: the registry's Dataset
    --task or --task_name named, or None)."""
    raise NotImplementedError

  def read_splits(self, o) -> Dict[str, dict]:
    """{split: stats} of every split the run needs, read before anything
    is written. Raises, naming the file, for a split that lacks labels."""
    raise NotImplementedError

  def fingerprint(self) -> str:
    """What makes two runs of this family the same task (the run
    fingerprint refuses an output_dir of another)."""
    return self.name

  def baselines(self, splits) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{split: {baseline name: its metrics}} of the simplest models fitted
    on the train split, for each labelled split of `splits`; {}: none."""
    del splits
    return {}

  def build_model(self, config) -> keras.Model:
    """The Keras model of this task (random weights; the trainer restores)."""
    raise NotImplementedError

  def with_micro_batches(self, model: keras.Model) -> keras.Model:
    """model, its train step run in `micro_batches` parts (if it can)."""
    model.micro_batches = self.micro_batches
    return model

  def build_losses(self):
    """The `compile(loss=)` argument; None: the model's train_step's."""
    return None

  def build_metrics(self):
    """The `compile(metrics=)` argument (training-time metrics)."""
    return None

  #: Labels per position ([n, ..., L], a tagger's) that --length_buckets
  #: cuts with the inputs (what is cut is padding).
  position_labels: Tuple[str, ...] = ()

  def train_arrays(self):
    """(model inputs, `fit` targets by output name), each {name: numpy
    [n, ...]}, of the train split: what the default `build_inputs` batches."""
    raise NotImplementedError

  def steps_per_epoch(self, global_batch_size: int) -> int:
    """Steps of one pass over the train split (--num_train_epochs)."""
    n = len(next(iter(self.train_arrays()[0].values())))
    return max(1, -(-n // global_batch_size))

  def build_inputs(self, split: str, strategy: tf.distribute.Strategy,
                   global_batch_size: int, start_step: int = 0,
                   num_steps: int = 0):
    """A distributed dataset of `split` ("train") from `start_step`.

    Training batches must be a function of the step, so that a resumed run
    continues with the data an uninterrupted one would have seen (or, for
    streams too large to index, new data). Default: `step_indexed_inputs`
    of `train_arrays`."""
    if split != "train":
      raise ValueError(f"build_inputs: only the train split is distributed, "
                       f"got {split!r}")
    if self._train_tensors is None:  # once, not per checkpoint interval
      self._train_tensors = tuple({k: tf.constant(v) for k, v in d.items()}
                                  for d in self.train_arrays())
    return step_indexed_inputs(*self._train_tensors, strategy,
                               global_batch_size, start_step, num_steps,
                               self.seed, self.length_buckets,
                               self.position_labels)

  def outputs(self, model: keras.Model, features,
              names=(F.LOGITS,)) -> Dict[str, np.ndarray]:
    """{name: the model's output as numpy} for `names`, every row of
    features ([batch, seq] or [batch, choices, seq]) in order, floats as
    float32; run in eval_batch_size batches by a function traced once per
    model and rank, outside the strategy (every worker holds every weight;
    a partial last batch needs no padding)."""
    if self._predict_model is not model:
      self._forward, self._predict_model = {}, model
    rank = np.ndim(features[F.INPUT_IDS])
    if rank not in self._forward:
      spec = {k: tf.TensorSpec([None] * rank, tf.int32)
              for k in F.ENCODER_INPUTS}
      self._forward[rank] = tf.function(
          lambda batch: {k: v for k, v in model(batch, training=False).items()
                         if k in names},
          input_signature=[spec], autograph=False)
    size = self.eval_batch_size
    chunks = [self._forward[rank]({k: features[k][i:i + size]
                                   for k in F.ENCODER_INPUTS})
              for i in range(0, len(features[F.INPUT_IDS]), size)]
    out = {}
    for name in names:
      # No rows: an empty array the caller reshapes to its outputs' shape.
      values = [c[name].numpy() for c in chunks]
      value = np.concatenate(values) if values else np.zeros([0], np.float32)
      out[name] = (value.astype(np.float32)
                   if np.issubdtype(value.dtype, np.floating) else value)
    return out

  def evaluate(self, model: keras.Model,
               strategy: tf.distribute.Strategy) -> Dict[str, float]:
    """Dev metrics of `model` (including `best_metric`)."""
    raise NotImplementedError

  def predict(self, model: keras.Model, output_dir: str) -> Dict[str, float]:
    """Writes test predictions into output_dir; test metrics if labelled."""
    return {}

  def record(self) -> ModelInfo:
    """What serving and later runs need: task_record.json (`RECORD_FILE`)."""
    return ModelInfo(task=self.name)

  def guard_input_errors(self, fn: Callable):
    """Runs fn (a fit/evaluate call); may turn input errors into clear ones."""
    return fn()

  def warn_if_collapsed(self, model: keras.Model, predicted: Sequence,
                        gold: Sequence, noun: str,
                        shown: Optional[str] = None) -> bool:
    """Warns once when a dev eval finds the model collapsed: the same
    prediction for every example (one value each) while the gold values are
    not all that one. The step-0 eval (the untrained head) is remembered,
    not judged, to tell a model that never moved. shown: how the prediction
    reads (default its repr). Returns whether it warned."""
    same = one_prediction(predicted, gold)
    optimizer = getattr(model, "optimizer", None)
    step = int(optimizer.iterations.numpy()) if optimizer is not None else 0
    if step == 0:
      self._untrained_prediction = same
      return False
    if same is None:
      return False
    untrained = getattr(self, "_untrained_prediction", None)
    logging.warning("%s", collapse_line(
        model, step, len(predicted), noun,
        shown if shown is not None else repr(same[0]),
        untrained is not None and untrained == same))
    return True


def one_prediction(predicted: Sequence,
                   gold: Sequence) -> Optional[tuple]:
  """(the prediction,) of every example of two or more, the gold values not
  all it; else None."""
  values = set(predicted)
  if len(predicted) < 2 or len(values) != 1:
    return None
  (value,) = values
  if set(gold) <= {value}:  # the gold answer of every example: no collapse
    return None
  return (value,)


# The rules of --optimizer whose first steps have no bias correction
# (`training.optimization`'s classes; named, not imported: tasks do not
# import the training code).
_ORIGINAL_RULES = {"AdamWeightDecay": "adamw", "Lamb": "lamb"}


def collapse_line(model, step: int, n: int, noun: str, shown: str,
                  as_untrained: bool = False) -> str:
  """`Task.warn_if_collapsed`'s line: the step, the prediction (`shown`) of
  all n examples, the likely cause and the flags to change, with the
  optimizer's values. as_untrained: step 0 predicted the same too (the rate
  may be too small)."""
  optimizer = getattr(model, "optimizer", None)
  inner = getattr(optimizer, "inner_optimizer", optimizer)  # loss scaling
  schedule = getattr(inner, "_learning_rate", None)
  rate = getattr(schedule, "initial_learning_rate", None)
  warmup = getattr(schedule, "num_warmup_steps", None)
  rule = _ORIGINAL_RULES.get(type(inner).__name__)
  now = f" (now {rate:g})" if rate else ""
  flags = [f"a lower --learning_rate{now}",
           f"a longer --warmup_step"
           f"{f' (now {warmup} steps)' if warmup is not None else ''}"]
  cause = "a learning rate too large for the first steps"
  if rule is not None:
    flags.append(f"--optimizer=keras_{rule}")
    cause += (f" of --optimizer={rule}, the original's rule, whose first "
              f"steps have no bias correction and are 2-6x larger than "
              f"Keras's (a rate tuned under keras_{rule} is too large here)")
  head = (f"Dev eval at step {step}: the model predicts {shown} for every "
          f"one of the {n} {noun}")
  fix = f"{', '.join(flags[:-1])} or {flags[-1]}"
  if as_untrained:
    return (f"{head}, as the untrained head did at step 0, though the gold "
            f"answers are not all that: fine-tuning has not moved it off "
            f"one prediction. Likely cause: a --learning_rate{now} too small "
            f"to train (or too few steps); or {cause}: then pass {fix}")
  return (f"{head}, though the gold answers are not all that: fine-tuning "
          f"has collapsed. Likely cause: {cause}; pass {fix}")


def first_given(*values):
  """The first value that is not None (`0` and `False` are given)."""
  return next((v for v in values if v is not None), None)


def step_indexed_inputs(columns: Dict[str, tf.Tensor],
                        labels: Dict[str, tf.Tensor],
                        strategy: tf.distribute.Strategy,
                        global_batch_size: int, start_step: int,
                        num_steps: int, seed: int, length_buckets: int = 0,
                        position_labels: Tuple[str, ...] = ()):
  """Training batches of in-memory examples as a pure function of the step.

  Epoch e is permutation(seed, e) of the n examples and step s takes
  examples [s*B, (s+1)*B) of that stream, so a resumed run trains on the
  batches an uninterrupted one would have. Under tf.distribute each input
  pipeline takes its slice of every global batch.

  With length_buckets > 1 each window of `length_buckets.WINDOW_STEPS`
  steps takes its examples sorted by length, and each batch is cut to the
  smallest of `bucket_widths` that holds its longest row (the encoder
  inputs and `position_labels`, [n, ..., L], lose padding only).

  Args:
    columns: model inputs, each [n, ...] (the encoder inputs [n, ..., L]).
    labels: the `fit` targets by output name, each [n, ...].
  """
  n = int(next(iter(columns.values())).shape[0])
  window = length_buckets_lib.WINDOW_STEPS if length_buckets > 1 else 1
  # Whole windows: a resumed run regroups the window it starts in as the
  # first run did.
  first_row = start_step // window * window
  last_row = -(-num_steps // window) * window
  first_epoch = first_row * global_batch_size // n
  last_epoch = math.ceil(last_row * global_batch_size / n)
  order = np.concatenate([
      np.random.default_rng([seed, e]).permutation(n)
      for e in range(first_epoch, last_epoch)])
  offset = first_epoch * n
  order = order[first_row * global_batch_size - offset:
                last_row * global_batch_size - offset].reshape(
                    [-1, global_batch_size]).astype(np.int32)
  cut = None
  if length_buckets > 1:
    mask = np.asarray(columns[F.INPUT_MASK])
    lengths = mask.reshape([n, -1, mask.shape[-1]]).sum(-1).max(-1)
    order = length_buckets_lib.window_sorted(order, lengths, first_row, seed)
    widths = length_buckets_lib.bucket_widths(mask.shape[-1], length_buckets)
    names = tuple(F.ENCODER_INPUTS) + tuple(position_labels)

    def cut(features, targets):
      width = length_buckets_lib.width_of(features[F.INPUT_MASK], widths)
      return (length_buckets_lib.cut_to_width(features, width, names),
              length_buckets_lib.cut_to_width(targets, width, names))
  order = order[start_step - first_row:num_steps - first_row]

  def dataset_fn(context: tf.distribute.InputContext):
    per_replica = context.get_per_replica_batch_size(global_batch_size)
    per_pipeline = global_batch_size // context.num_input_pipelines
    first = context.input_pipeline_id * per_pipeline
    mine = order[:, first:first + per_pipeline].reshape([-1])
    ds = tf.data.Dataset.from_tensor_slices(mine).batch(
        per_replica, drop_remainder=True)
    ds = ds.map(lambda idx: ({k: tf.gather(v, idx) for k, v in columns.items()},
                             {k: tf.gather(v, idx) for k, v in labels.items()}))
    if cut is not None:
      ds = ds.map(cut)
    return ds.prefetch(tf.data.AUTOTUNE)

  return strategy.distribute_datasets_from_function(dataset_fn)
