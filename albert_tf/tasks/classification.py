"""Sentence(-pair) classification and regression: sentiment, lcqmc, GLUE, tsv.

The TSV readers, the metrics and the prediction files are
`albert_tf.data.classifier_data`. Each split is encoded once by serve_text's
own graph (`encode_examples`: [CLS] a [SEP] (b [SEP])) and trained on by
`Task.build_inputs`; the loss is softmax cross-entropy, or squared error for
regression; `classifier_data.compute_metrics`' `eval_metric` picks the best
checkpoint. Predictions: test_results.tsv and a benchmark's submission file
(CLUE, FewCLUE: `albert_tf.data.clue`). Export (`--model=classifier`):
serving_default and serve_text return `logits` and softmax `probabilities`
(regression: `logits`, the score).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Dict, Optional

from absl import logging
import numpy as np

from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.data import classifier_data as cd
from albert_tf.data import input_timeout
from albert_tf.core.options import FinetuneOptions
from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core import record as record_lib
from albert_tf.tasks.base import Task

keras = lazy.module("keras")
tf = lazy.module("tensorflow")
models = lazy.module("albert_tf.modeling.models")
saved_model = lazy.module("albert_tf.serving.saved_model")

PREDICTIONS_FILE = "test_results.tsv"
# task_config key: a tsv task's columns and header, to read its dev split back.
TSV_READING = "tsv_reading"


@dataclasses.dataclass
class ClassifierOptions(FinetuneOptions):
  """The classification family's flags (run_classifier's, the original's)."""
  task_name: str = settings.field(
      None, "A registered dataset (sentiment, lcqmc, GLUE's cola, sst-2, "
      "mrpc, sts-b, qqp, mnli, qnli, rte; CLUE's; `albert-finetune --help` "
      "lists them) or tsv", required=True)
  data_dir: str = settings.field(
      None, "Directory with the dataset's {train,dev,test} files.",
      required=True)
  # The generic `tsv` task.
  text_a_column: Optional[str] = settings.field(
      None, "tsv task: text_a column (header name or 0-based index).")
  text_b_column: Optional[str] = settings.field(
      None, "tsv task: text_b column.")
  label_column: Optional[str] = settings.field(
      None, "tsv task: label column.")
  label_list: Optional[str] = settings.field(
      None, "tsv task: comma-separated labels (default: the distinct labels "
      "of the train split).")
  regression: Optional[bool] = settings.field(
      None, "tsv task: the label column holds scores (default: when the "
      "labels are non-integer numbers).")
  has_header: Optional[bool] = settings.field(
      None, "tsv task: first line is a header (default: when a column is "
      "given by name).")
  baseline: bool = settings.field(
      True, "Score the majority class and a char n-gram TF-IDF + logistic "
      "regression, fitted on train, on the evaluated splits "
      "(eval_results.json's baseline_*; seconds).", group="training")


@registry.register_family("classification", options=ClassifierOptions,
                          command="albert-classify", aliases=("regression",),
                          modules=("albert_tf.run_classifier",
                                   "albert_tf.data.classifier_data",
                                   "albert_tf.data.clue"))
class ClassificationTask(Task):
  """Sentence(-pair) classification or regression (a `classifier_data.TaskSpec`)."""

  best_metric = "eval_metric"
  export_name = "classifier"
  keras_hub_text_classifier = True
  decodes_serving_default = True

  @classmethod
  def dataset_output_files(cls, dataset):
    sub = getattr(dataset.spec, "submission", None)
    return (sub.file_name, cd.partial_file_name(sub.file_name)) if sub else ()
  output_files = (PREDICTIONS_FILE,)

  @classmethod
  def legacy_record_task(cls, file_name, values):
    if file_name != record_lib.CLASSIFIER_CONFIG:
      return None
    return "regression" if values.get("is_regression") else "classification"

  @classmethod
  def read_dataset(cls, dataset, data_dir):
    found = {}
    for split in dataset.spec.files:
      with contextlib.suppress(FileNotFoundError):
        found[split] = cd.read_examples(dataset.spec, data_dir, split)
    return found

  def __init__(self, spec: cd.TaskSpec, tokenizer, data_dir: str,
               max_seq_length: int, **fields):
    """fields: `Task.__init__`'s."""
    super().__init__(tokenizer, max_seq_length, **fields)
    self.spec, self.data_dir = spec, data_dir
    self.name = "regression" if spec.is_regression else "classification"

  # --------------------------------------------------------- fine-tuning
  @classmethod
  def from_options(cls, o: ClassifierOptions, tokenizer, info, dataset):
    spec = read_spec(o.task_name, o.text_a_column, o.text_b_column,
                     o.label_column, o.label_list, o.has_header, o.regression,
                     o.data_dir, info.label_list if info and
                     info.task_name == "tsv" else None,
                     input_timeout_secs=o.input_timeout_secs)
    spec, skip = _labels_as_recorded(spec, o, info)
    task = cls(spec, tokenizer, o.data_dir, **cls.option_fields(o))
    task.init_skip_parts = skip
    return task

  def read_splits(self, o) -> Dict[str, dict]:
    stats = {}
    for split in self.wanted_splits(o):
      _, _, stats[split], has_labels = self.load_split(split)
      if split != "test" and not has_labels:
        raise cd.DataError(f"{stats[split]['file']}: the {split} split "
                           "needs labels")
    submission = self.spec.submission
    if o.do_predict and submission and submission.split != "test":
      # The benchmark's own test file (FewCLUE's test.json), read now so
      # that a bad line stops the run before training.
      try:
        stats[submission.split] = self.load_split(submission.split)[2]
      except FileNotFoundError as e:
        logging.warning("%s: %s is not written", e, submission.file_name)
    return stats

  def fingerprint(self) -> str:
    return f"{self.name}:{self.spec.name}"

  # --------------------------------------------------------- data
  def load_split(self, split: str):
    """(examples, features, stats, has_labels) of a split, read once."""
    if split not in self._splits:
      path = cd.find_split_file(self.spec, self.data_dir, split)
      # A named pipe without a writer, a hung mount: an error, not a wait.
      examples, read_stats = input_timeout.read_within(
          f"the {split} file {path}", lambda: cd.read_examples(
              self.spec, self.data_dir, split,
              # A benchmark's submission split is predicted as the test split.
              max_examples=self.max_examples.get(
                  split, self.max_examples["test"]) or None),
          self.input_timeout_secs)
      features, enc_stats = encode_examples(
          examples, self.tokenizer, self.max_seq_length, self.spec,
          name_truncated=3)
      stats = dict(read_stats, **{k: v for k, v in enc_stats.items()
                                  if k != "examples"})
      # A cut text warns, saying where (a longer --max_seq_length, or fix it).
      where = stats["truncated_at"]
      logging.log(
          logging.WARNING if where else logging.INFO,
          "[%s] %s: %d examples, %d empty line(s) skipped, %d truncated to "
          "max_seq_length=%d (%d tokens removed%s)", split, stats["file"],
          stats["examples"], stats["empty_lines_skipped"], stats["truncated"],
          self.max_seq_length, stats["tokens_removed"],
          f"; the first at {', '.join(where)}" if where else "")
      # A test file's no-consensus lines (CMNLI's "-") are predicted and
      # not scored: the split is labelled if every other line is.
      labelled = sum(e.label is not None for e in examples)
      has_labels = labelled > 0 and labelled + stats.get(
          "no_consensus_kept", 0) == len(examples)
      self._splits[split] = (examples, features, stats, has_labels)
    return self._splits[split]

  def train_arrays(self):
    features = self.load_split("train")[1]
    labels = features[F.LABEL_IDS]
    # Regression labels as [b, 1], the shape of the single logit.
    return ({k: features[k] for k in F.ENCODER_INPUTS},
            {F.LOGITS: labels[:, None] if self.spec.is_regression else labels})

  # --------------------------------------------------------- model
  def build_model(self, config):
    return self.with_micro_batches(models.AlbertClassifier(
        config, self.spec.num_labels,
        classifier_dropout=self.classifier_dropout))

  def build_losses(self):
    return {F.LOGITS: keras.losses.MeanSquaredError() if self.spec.is_regression
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True)}

  def build_metrics(self):
    return None if self.spec.is_regression else {F.LOGITS: [
        keras.metrics.SparseCategoricalAccuracy(name="accuracy")]}

  # --------------------------------------------------------- eval / predict
  def logits(self, model, features) -> np.ndarray:
    """Model logits [n, num_labels] for encoded features, in order."""
    return self.outputs(model, features)[F.LOGITS].reshape(
        [-1, self.spec.num_labels])

  def evaluate(self, model, strategy):
    _, features, stats, has_labels = self.load_split("dev")
    if not has_labels:
      raise cd.DataError(f"{stats['file']}: the dev split needs labels for "
                         "--do_eval")
    logits = self.logits(model, features)
    if not self.spec.is_regression:
      labels = self.spec.label_list
      self.warn_if_collapsed(
          model, [labels[int(i)] for i in logits.argmax(-1)],
          [labels[int(i)] for i in features[F.LABEL_IDS]], "dev examples")
    return cd.compute_metrics(self.spec, features[F.LABEL_IDS], logits)

  def baselines(self, splits):
    """Majority class and char n-gram TF-IDF + logistic regression
    (`data.baselines`), fitted on the train split, scored as the model is;
    none for regression."""
    from albert_tf.data import baselines  # pylint: disable=g-import-not-at-top
    if self.spec.is_regression:
      return {}
    train, train_features, _, has_labels = self.load_split("train")
    if not has_labels or not train:
      return {}
    wanted = []
    for split in splits:
      examples, features, _, labelled = self.load_split(split)
      if labelled and examples:
        scored = _scored(examples)
        wanted.append((split, [e for e, s in zip(examples, scored) if s],
                       features[F.LABEL_IDS][scored]))
    if not wanted:
      return {}
    train_ids = train_features[F.LABEL_IDS]
    tfidf = baselines.tfidf(
        ([e.text_a for e in train], [e.text_b for e in train], train_ids),
        [([e.text_a for e in ex], [e.text_b for e in ex])
         for _, ex, _ in wanted], seed=self.seed)
    out = {}
    for (split, examples, labels), tfidf_ids in zip(wanted, tfidf):
      one_hot = lambda ids: np.eye(self.spec.num_labels)[ids]
      out[split] = {
          "majority": cd.compute_metrics(self.spec, labels, one_hot(
              baselines.majority(train_ids, len(labels)))),
          "tfidf": cd.compute_metrics(self.spec, labels, one_hot(tfidf_ids))}
    return out

  def predict(self, model, output_dir):
    examples, features, stats, has_labels = self.load_split("test")
    logits = self.logits(model, features)
    cd.write_predictions(os.path.join(output_dir, PREDICTIONS_FILE), self.spec,
                      logits)
    if self.spec.submission is not None:
      self._write_submission(model, output_dir, examples, logits, stats)
    if not has_labels:
      return {}
    scored = _scored(examples)
    return cd.compute_metrics(self.spec, features[F.LABEL_IDS][scored],
                           logits[scored])

  def _write_submission(self, model, output_dir, examples, logits, stats):
    """The benchmark's prediction file (CLUE's `<task>_predict.json`) of
    its submission split: the test split's predictions (examples, logits,
    stats), or another file's (FewCLUE's test.json beside the labelled
    test_public.json)."""
    submission = self.spec.submission
    if submission.split != "test":
      test_file = stats["file"]
      try:
        examples, features, stats, _ = self.load_split(submission.split)
      except FileNotFoundError as e:
        logging.warning("%s: %s is not written", e, submission.file_name)
        return
      if stats["file"] != test_file:
        logits = self.logits(model, features)
    labels = [self.spec.label_list[int(i)] for i in
              np.asarray(logits).argmax(-1)]
    path = cd.submission_path(output_dir, submission.file_name, len(labels),
                              stats.get("not_read", 0), stats["file"],
                              self.max_examples["test"])
    cd.write_submission(path, examples, labels)
    logging.info("%s: %d predictions (the benchmark's submission file)",
                 path, len(labels))

  # --------------------------------------------------------- record / export
  def record(self):
    spec = self.spec
    own = {}
    if spec.name == "tsv":  # how to read the dev split back (an export's check)
      a, b, label = spec.columns["dev"]
      own[TSV_READING] = {"text_a_column": a, "text_b_column": b,
                          "label_column": label,
                          "has_header": spec.has_header}
    return record_lib.ModelInfo(
        task=self.name, task_name=spec.name, num_labels=spec.num_labels,
        task_config=own, label_list=list(spec.label_list or []),
        max_seq_length=self.max_seq_length,
        text_pair=spec.columns["train"][1] is not None,
        **record_lib.tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    if not record.num_labels:
      raise ValueError("--model=classifier needs --num_labels (or the "
                       f"{record_lib.RECORD_FILE} run_classifier writes "
                       "beside the checkpoint)")
    return models.AlbertClassifier(config, record.num_labels)

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair, length_buckets=None):
    """length_buckets: the lengths serve_text pads a batch to (the smallest
    that holds its longest row; `text_graph.TextEncoder`); default: always
    max_seq_length."""
    # Imported here: only export needs TF Text (the in-graph tokenizer).
    from albert_tf.serving.text_graph import TextEncoder  # pylint: disable=g-import-not-at-top
    text_pair = record.text_pair if text_pair is None else text_pair
    encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length,
                                         length_buckets=length_buckets)
    regression = record.task == "regression" or model.num_labels == 1

    def run(features):
      return cls.export_outputs(model(features, training=False), regression)

    # serve_text also names the most probable class: `label` [batch]
    # (string), from the task's labels as fine-tuned.
    label_names = (tf.constant(list(record.label_list), tf.string)
                   if record.label_list and not regression else None)

    def run_text(t):
      outputs = run(encoder(t["text"], t.get("text_b")))
      if label_names is not None:
        outputs["label"] = tf.gather(
            label_names, tf.argmax(outputs[F.PROBABILITIES], axis=-1))
      return outputs

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size),
            "serve_text": saved_model.signature(
                run_text, saved_model.text_specs(text_pair))}

  @staticmethod
  def export_outputs(outputs, regression=False):
    """Serving outputs: `logits`, and `probabilities` unless regression."""
    logits = tf.cast(outputs[F.LOGITS], tf.float32)
    return {F.LOGITS: logits} if regression else {  # the logit is the score
        F.LOGITS: logits, F.PROBABILITIES: tf.nn.softmax(logits, axis=-1)}

  # --------------------------------------------- serving from raw inputs
  # (Task's encode_inputs, tflite_input_shapes and calibration: the default
  # [CLS] a [SEP] (b [SEP]) packing.)
  @classmethod
  def held_out_inputs(cls, record, max_examples):
    """The recorded dev file (`record.training`), read with the task's own
    reader: a named benchmark's layout, or a `tsv` task's columns as the
    record keeps them (`TSV_READING`)."""
    training = record.training or {}
    data_dir = training.get("data_dir")
    if not data_dir or "dev" not in (training.get("data") or {}):
      return None
    if (record.task_name or "").lower() == "tsv":
      reading = record.task_config.get(TSV_READING)
      if not reading:
        return None  # a record from before the columns were kept
      spec = cd.get_task("tsv", label_list=list(record.label_list) or None,
                         **reading)
    else:
      spec = read_spec(record.task_name)
    examples, stats = cd.read_examples(spec, data_dir, "dev",
                                       max_examples=max_examples)
    if not examples:
      return None
    inputs = {"text": [e.text_a for e in examples]}
    if record.text_pair:
      inputs["text_b"] = [e.text_b or "" for e in examples]
    gold = [e.label for e in examples]
    labelled = all(g is not None for g in gold) and not spec.is_regression
    return (inputs, gold if labelled else None,
            f"the run's dev split, {stats['file']} ({len(examples)} examples)")

  @classmethod
  def decode_outputs(cls, record, outputs, n):
    """{"label", "probabilities": {label: p}}; regression {"score"}."""
    if record.task == "regression" or F.PROBABILITIES not in outputs:
      return [{"score": float(outputs[F.LOGITS][i, 0])} for i in range(n)]
    probs = outputs[F.PROBABILITIES]
    labels = list(record.label_list) or list(map(str, range(probs.shape[-1])))
    return [{"label": labels[int(p.argmax())],
             "probabilities": dict(zip(labels, map(float, p)))}
            for p in probs[:n]]


def encode_examples(examples, tokenizer, max_seq_length, spec,
                    name_truncated: int = 0):
  """(features, stats) of examples, encoded by serve_text's own graph
  (`text_graph.encode_texts`): int32 `input_ids`, `input_mask`,
  `segment_ids` [n, max_seq_length] and `label_ids` [n] (class index, -1
  unlabelled; float32 for regression); stats count the `truncated` examples
  and `tokens_removed`, and `truncated_at` names the first name_truncated.
  """
  from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
  if max_seq_length < 3 + any(e.text_b is not None for e in examples):
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for text")
  features, removed = text_graph.encode_texts(
      text_graph.shared_encoder(tokenizer, max_seq_length),
      [e.text_a for e in examples], [e.text_b for e in examples])
  features[F.LABEL_IDS] = np.asarray(
      [cd.label_to_value(spec, e.label) for e in examples],
      np.float32 if spec.is_regression else np.int32).reshape([-1])
  stats = {"examples": len(examples), "truncated": int((removed > 0).sum()),
           "tokens_removed": int(removed.sum())}
  if name_truncated:
    stats["truncated_at"] = [examples[i].source for i in
                             np.flatnonzero(removed)[:name_truncated]]
  return features, stats


def _scored(examples) -> np.ndarray:
  """Which examples have a gold label (bool [n]): a labelled test file's
  no-consensus lines are predicted but not scored."""
  return np.asarray([e.label is not None for e in examples], bool)


def _labels_as_recorded(spec: cd.TaskSpec, o, info):
  """(spec, parts not to restore from --init_checkpoint): the label order is
  part of the model.

  The model in --output_dir (resumed, evaluated, predicted with) keeps its
  labels: the same labels in another order are remapped by name (the
  recorded order is the model's), another set is refused with both. A
  classifier fine-tuned on other labels given as --init_checkpoint: the
  same set is remapped too; another set (or scores against classes) gets a
  new classifier head, said in one line.
  """
  families = ("classification", "regression")
  task = "regression" if spec.is_regression else "classification"
  mine = list(spec.label_list or ())
  names = lambda labels: ",".join(labels) or "(scores)"
  model = where = None
  if not o.overwrite and tf.io.gfile.exists(
      os.path.join(o.output_dir, record_lib.RECORD_FILE)):
    model = registry.read_record(o.output_dir)
    where = f"the model in --output_dir={o.output_dir}"
  if model is None or model.task not in families:
    model = info if o.init_checkpoint else None
    where = f"--init_checkpoint={o.init_checkpoint}"
  if model is None or model.task not in families:
    return spec, ()
  if (model.task, sorted(model.label_list)) != (task, sorted(mine)):
    if where.startswith("the model"):
      raise cd.DataError(
          f"--output_dir={o.output_dir} holds a {model.task} model of labels "
          f"{names(model.label_list)}; this run's are {names(mine)}: give the "
          "same labels (--label_list), or --overwrite to start over")
    logging.warning(
        "--init_checkpoint=%s is a %s of labels %s; this run's are %s: its "
        "classifier head is not restored (a new one is trained)",
        o.init_checkpoint, model.task, names(model.label_list), names(mine))
    return spec, ("classifier_head",)
  if model.label_list != mine:
    logging.warning("Labels in the order of %s (%s), not this run's (%s): "
                    "remapped by name", where, ",".join(model.label_list),
                    ",".join(mine))
    return dataclasses.replace(spec, label_list=tuple(model.label_list)), ()
  return spec, ()


def read_spec(task_name: str, text_a_column=None, text_b_column=None,
              label_column=None, label_list=None, has_header=None,
              regression: Optional[bool] = None, data_dir: Optional[str] = None,
              known_labels=None,
              input_timeout_secs=input_timeout.DEFAULT_SECS) -> cd.TaskSpec:
  """The TaskSpec of --task_name (`tsv` from the column flags).

  A `tsv` task without --label_list takes `known_labels` (those of the
  checkpoint being fine-tuned further or evaluated), else the labels of the
  train split in data_dir (`classifier_data.infer_tsv_labels`, read within
  input_timeout_secs).
  """
  if task_name.lower() != "tsv":
    known = registry.datasets("classification").get(task_name)
    if known is not None and known.spec is not None:
      return known.spec
    return cd.get_task(task_name)
  labels = [x.strip() for x in (label_list or "").split(",") if x.strip()]
  if regression and labels:
    raise ValueError("--regression and --label_list exclude each other")
  if not labels and not regression and known_labels:
    labels = list(known_labels)
  spec = cd.get_task("tsv", text_a_column=text_a_column,
                     text_b_column=text_b_column, label_column=label_column,
                     label_list=labels or None, has_header=has_header)
  if labels or data_dir is None:
    return spec
  names = [os.path.join(data_dir, n) for n in spec.files["train"]]
  train = next((p for p in names if os.path.exists(p)), names[0])
  spec, note = input_timeout.read_within(
      f"the train file {train}",
      lambda: cd.infer_tsv_labels(spec, data_dir, regression),
      input_timeout_secs)
  if note:
    logging.info("%s", note)
  return spec
