"""Sentence(-pair) classification and regression: sentiment, lcqmc, GLUE, tsv.

Reading, encoding (serve_text's own graph), metrics and prediction files are
`albert_tf.data.classifier_data`. Loss: softmax cross-entropy (regression:
squared error). Predictions: test_results.tsv and a benchmark's submission
file (CLUE, FewCLUE: `albert_tf.data.clue`). Export (`--model=classifier`):
`logits` and softmax `probabilities` (regression: `logits`, the score).
"""

import dataclasses
import os
from typing import Dict, Optional

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core import record as record_lib
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.options import FinetuneOptions
from albert_tf.data import classifier_data as cd
from albert_tf.data import input_timeout
from albert_tf.tasks.base import Task

keras = lazy.module("keras")
tf = lazy.module("tensorflow")
models = lazy.module("albert_tf.modeling.models")
saved_model = lazy.module("albert_tf.serving.saved_model")
# Only export needs TF Text (the in-graph tokenizer).
text_graph = lazy.module("albert_tf.serving.text_graph")

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
  text_a_column: Optional[str] = settings.field(
      None, "tsv task: text_a column (header name or 0-based index).")
  text_b_column: Optional[str] = settings.field(
      None, "tsv task: text_b column.")
  label_column: Optional[str] = settings.field(None, "tsv task: label column.")
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


@registry.register_family(
    "classification", options=ClassifierOptions, command="albert-classify",
    aliases=("regression",), modules=("albert_tf.run_classifier",
                                      "albert_tf.data.classifier_data",
                                      "albert_tf.data.clue"))
class ClassificationTask(Task):
  """Sentence(-pair) classification or regression (a `cd.TaskSpec`)."""

  best_metric = "eval_metric"
  export_name = "classifier"
  keras_hub_text_classifier = True
  decodes_serving_default = True
  output_files = (PREDICTIONS_FILE,)

  @classmethod
  def dataset_output_files(cls, dataset):
    sub = getattr(dataset.spec, "submission", None)
    return (sub.file_name, cd.partial_file_name(sub.file_name)) if sub else ()

  @classmethod
  def legacy_record_task(cls, file_name, values):
    if file_name == record_lib.CLASSIFIER_CONFIG:
      return "regression" if values.get("is_regression") else "classification"
    return None

  @classmethod
  def read_dataset(cls, dataset, data_dir):
    return {split: cd.read_examples(dataset.spec, data_dir, split)
            for split, names in dataset.spec.files.items()
            if any(os.path.exists(os.path.join(data_dir, n)) for n in names)}

  def __init__(self, spec: cd.TaskSpec, tokenizer, data_dir: str,
               max_seq_length: int, **fields):  # fields: Task.__init__'s
    super().__init__(tokenizer, max_seq_length, **fields)
    self.spec, self.data_dir = spec, data_dir
    self.name = "regression" if spec.is_regression else "classification"

  # --------------------------------------------------------- fine-tuning
  @classmethod
  def from_options(cls, o: ClassifierOptions, tokenizer, info, dataset):
    spec = cd.read_spec(o.task_name, o.text_a_column, o.text_b_column,
                        o.label_column, o.label_list, o.has_header,
                        o.regression, o.data_dir, info.label_list if info and
                        info.task_name == "tsv" else None,
                        input_timeout_secs=o.input_timeout_secs,
                        named=_named_spec(o.task_name))
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
      # FewCLUE's test.json, read now: a bad line stops the run before training.
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
    if split in self._splits:
      return self._splits[split]
    path = cd.find_split_file(self.spec, self.data_dir, split)
    examples, read_stats = input_timeout.read_within(  # a hung read: error
        f"the {split} file {path}", lambda: cd.read_examples(
            self.spec, self.data_dir, split,
            # A benchmark's submission split is predicted as the test split.
            max_examples=self.max_examples.get(
                split, self.max_examples["test"]) or None),
        self.input_timeout_secs)
    features, enc_stats = cd.encode_examples(
        examples, self.tokenizer, self.max_seq_length, self.spec,
        name_truncated=3)
    stats = {**read_stats, **enc_stats, "examples": read_stats["examples"]}
    where = stats["truncated_at"]  # a cut text warns, saying where
    logging.log(
        logging.WARNING if where else logging.INFO,
        "[%s] %s: %d examples, %d empty line(s) skipped, %d truncated to "
        "max_seq_length=%d (%d tokens removed%s)", split, stats["file"],
        stats["examples"], stats["empty_lines_skipped"], stats["truncated"],
        self.max_seq_length, stats["tokens_removed"],
        f"; the first at {', '.join(where)}" if where else "")
    # A test file's no-consensus lines (CMNLI's "-") are predicted and not
    # scored: the split is labelled if every other line is.
    labelled = sum(e.label is not None for e in examples)
    self._splits[split] = (examples, features, stats, labelled > 0 and (
        labelled + stats.get("no_consensus_kept", 0) == len(examples)))
    return self._splits[split]

  def train_arrays(self):
    features = self.load_split("train")[1]
    labels = features[F.LABEL_IDS]  # regression: [b, 1], as the logit
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
  def logits(self, model, features) -> np.ndarray:  # [n, num_labels]
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
    """Majority class and char n-gram TF-IDF + logistic regression fitted on
    train (`data.baselines`), scored as the model is; none for regression."""
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
        scored = cd.scored(examples)
        wanted.append((split, [e for e, s in zip(examples, scored) if s],
                       features[F.LABEL_IDS][scored]))
    if not wanted:
      return {}
    train_ids = train_features[F.LABEL_IDS]
    texts = lambda ex: ([e.text_a for e in ex], [e.text_b for e in ex])
    tfidf = baselines.tfidf((*texts(train), train_ids),
                            [texts(ex) for _, ex, _ in wanted], seed=self.seed)
    score = lambda labels, ids: cd.compute_metrics(
        self.spec, labels, np.eye(self.spec.num_labels)[ids])
    return {split: {"majority": score(labels, baselines.majority(
                        train_ids, len(labels))),
                    "tfidf": score(labels, tfidf_ids)}
            for (split, _, labels), tfidf_ids in zip(wanted, tfidf)}

  def predict(self, model, output_dir):
    examples, features, stats, has_labels = self.load_split("test")
    logits = self.logits(model, features)
    cd.write_predictions(os.path.join(output_dir, PREDICTIONS_FILE),
                         self.spec, logits)
    if self.spec.submission is not None:
      self._write_submission(model, output_dir, examples, logits, stats)
    if not has_labels:
      return {}
    scored = cd.scored(examples)
    return cd.compute_metrics(self.spec, features[F.LABEL_IDS][scored],
                              logits[scored])

  def _write_submission(self, model, output_dir, examples, logits, stats):
    """The benchmark's prediction file (CLUE's `<task>_predict.json`): of
    the test split (examples, logits, stats) or of its submission split's
    file (FewCLUE's test.json beside the labelled test_public.json)."""
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
    labels = [self.spec.label_list[i] for i in np.argmax(logits, -1)]
    path = cd.submission_path(output_dir, submission.file_name, len(labels),
                              stats.get("not_read", 0), stats["file"],
                              self.max_examples["test"])
    cd.write_submission(path, examples, labels)
    logging.info("%s: %d predictions (the benchmark's submission file)",
                 path, len(labels))

  # --------------------------------------------------------- record / export
  def record(self):
    spec = self.spec
    a, b, label = spec.columns["dev"]
    # A tsv task's columns: how to read the dev split back (export's check).
    own = {TSV_READING: {"text_a_column": a, "text_b_column": b,
                         "label_column": label, "has_header": spec.has_header}
           } if spec.name == "tsv" else {}
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
    """Both signatures return `logits`, and softmax `probabilities` unless
    regression. length_buckets: `text_graph.TextEncoder`'s."""
    text_pair = record.text_pair if text_pair is None else text_pair
    encoder = text_graph.TextEncoder.from_tokenizer(
        tokenizer, max_seq_length, length_buckets=length_buckets)
    regression = record.task == "regression" or model.num_labels == 1
    names = list(record.label_list) if not regression else []

    def run(features):
      logits = tf.cast(model(features, training=False)[F.LOGITS], tf.float32)
      return {F.LOGITS: logits} if regression else {  # the logit is the score
          F.LOGITS: logits, F.PROBABILITIES: tf.nn.softmax(logits, axis=-1)}

    def run_text(t):
      outputs = run(encoder(t["text"], t.get("text_b")))
      if names:  # `label` [batch]: the most probable class's name
        outputs["label"] = tf.gather(tf.constant(names, tf.string), tf.argmax(
            outputs[F.PROBABILITIES], axis=-1))
      return outputs

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size),
            "serve_text": saved_model.signature(
                run_text, saved_model.text_specs(text_pair))}

  # ------------------- serving from raw inputs (the rest: Task's defaults)
  @classmethod
  def held_out_inputs(cls, record, max_examples):
    """The recorded dev file (`record.training`), read with the task's own
    reader (a `tsv` task's columns as recorded, `TSV_READING`)."""
    training = record.training or {}
    data_dir = training.get("data_dir")
    tsv = (record.task_name or "").lower() == "tsv"
    reading = record.task_config.get(TSV_READING) if tsv else {}
    if not data_dir or "dev" not in (training.get("data") or {}) or (
        tsv and not reading):  # a record from before the columns were kept
      return None
    spec = cd.read_spec(record.task_name, known_labels=record.label_list,
                        named=_named_spec(record.task_name), **reading)
    examples, stats = cd.read_examples(spec, data_dir, "dev",
                                       max_examples=max_examples)
    if not examples:
      return None
    inputs = {"text": [e.text_a for e in examples]}
    if record.text_pair:
      inputs["text_b"] = [e.text_b or "" for e in examples]
    gold = [e.label for e in examples]
    return (inputs, None if None in gold or spec.is_regression else gold,
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


def _named_spec(task_name):  # a registered data set's spec, or None
  known = registry.datasets("classification").get(task_name)
  return known.spec if known else None


def _labels_as_recorded(spec: cd.TaskSpec, o, info):
  """(spec, parts not to restore from --init_checkpoint), the label order
  the model's: a model in --output_dir keeps its labels (the same set
  remapped by name, another refused); --init_checkpoint's with another set
  (or scores against classes) gets a new classifier head, said in a line."""
  families = ("classification", "regression")
  task = families[spec.is_regression]
  mine = list(spec.label_list or ())
  names = lambda labels: ",".join(labels) or "(scores)"
  model, where = None, f"the model in --output_dir={o.output_dir}"
  if not o.overwrite and tf.io.gfile.exists(
      os.path.join(o.output_dir, record_lib.RECORD_FILE)):
    model = registry.read_record(o.output_dir)
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
