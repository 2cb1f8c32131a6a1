"""Multiple-choice reading comprehension: RACE, CLUE's C3 and CHID.

Reading is `albert_tf.data.race`; the `[CLS] article [SEP] question+option
[SEP]` sequences are `albert_tf.serving.choice_graph`'s one encoder, run
over each split for fine-tuning and saved in serve_text. Another dataset
(a `race.ChoiceSpec` registered as its spec: `albert_tf.data.clue_choice`'s
C3 and CHID) gives its reader, number of choices (fewer options padded and
masked), submission file and, if it packs otherwise, encoder. On top:

  * inputs: each split encoded once ([n, 4, L] per input), the train split
    batched as a pure function of (seed, step);
  * model: `AlbertMultipleChoice` (`modeling.multiple_choice`), a softmax
    over dense(1) of each choice's pooled output; softmax cross-entropy;
  * metrics: accuracy overall and per middle/high (`race.accuracy_by_level`);
  * predictions: test_predictions.tsv (id, level, the predicted letter, the
    probability of each option) and the dataset's submission file;
  * export: serving_default takes ids [b, 4, L], serve_text(article,
    question, options [b, 4]); both return logits and probabilities.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.options import FinetuneOptions
from albert_tf.core import lazy
from albert_tf.data import classifier_data as cd
from albert_tf.data import input_timeout
from albert_tf.data import race
from albert_tf.core.file_io import atomic_writer
from albert_tf.core import record as record_lib
from albert_tf.tasks.base import Task
from albert_tf.tasks import scoring

keras = lazy.module("keras")
tf = lazy.module("tensorflow")
choice_model = lazy.module("albert_tf.modeling.multiple_choice")
saved_model = lazy.module("albert_tf.serving.saved_model")
choice_graph = lazy.module("albert_tf.serving.choice_graph")

PREDICTIONS_FILE = "test_predictions.tsv"


@dataclasses.dataclass
class RaceOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      "race", "race (RACE's layout) or a registered multiple-choice "
      "dataset (CLUE's c3, chid).")
  data_dir: str = settings.field(
      None, "RACE/ (train, dev, test, each with middle/ and high/), or the "
      "directory that holds it; c3, chid: the directory of CLUE's files.",
      required=True)
  max_seq_length: Optional[int] = settings.field(
      None, "Tokens per choice incl. [CLS]/[SEP]; the article is cut from "
      "its end (default: as the model was fine-tuned, else 512).")
  max_qa_length: int = settings.field(
      128, "Question+option pieces kept (its last ones, as the original).",
      lower_bound=1)
  learning_rate: float = settings.field(1e-5, "Peak AdamW learning rate.")
  train_step: int = settings.field(12000, "Training steps; 0: epochs.")
  warmup_step: int = settings.field(
      1000, "Warmup steps; -1: --warmup_proportion of training.")
  eval_batch_size: int = settings.field(8, "Eval/predict batch size "
                                        "(questions, 4 sequences each).")


@registry.register_family(
    "multiple_choice", options=RaceOptions, command="albert-race",
    modules=("albert_tf.run_race", "albert_tf.data.race",
             "albert_tf.data.clue_choice", "albert_tf.modeling.multiple_choice",
             "albert_tf.serving.choice_graph"))
class MultipleChoiceTask(Task):
  """RACE's {train,dev,test} splits under data_dir, one tokenizer."""

  name = "multiple_choice"
  best_metric = "accuracy"
  export_name = "multiple_choice"
  decodes_serving_default = True
  output_files = (PREDICTIONS_FILE,)

  @classmethod
  def dataset_output_files(cls, dataset):
    name = getattr(dataset.spec, "submission_file", None)
    return (name, cd.partial_file_name(name)) if name else ()

  # --------------------------------------------------------- fine-tuning
  default_max_seq_length = 512
  random_init_warning = (
      "Training RACE from random initial weights (no --init_checkpoint): "
      "expect accuracy near chance (0.25); give a pretrained checkpoint")

  @classmethod
  def resolve_options(cls, o: RaceOptions, info):
    known = sorted(registry.datasets(cls.name))
    if o.task_name not in known:  # before any file or model is read
      raise ValueError(f"--task_name must be one of {', '.join(known)}, got "
                       f"{o.task_name!r}")
    o = super().resolve_options(o, info)
    if o.max_qa_length > o.max_seq_length - 4:
      raise ValueError(f"--max_qa_length={o.max_qa_length} leaves no room "
                       f"for the article in --max_seq_length="
                       f"{o.max_seq_length}")
    return o

  @classmethod
  def from_options(cls, o: RaceOptions, tokenizer, info, dataset):
    return cls(o.task_name, tokenizer, o.data_dir, max_qa_length=
               o.max_qa_length, spec=dataset and dataset.spec,
               **cls.option_fields(o))

  def read_splits(self, o) -> Dict[str, dict]:
    stats = {}
    for split in self.wanted_splits(o):
      stats[split] = self.load_split(split)[2]
      if split != "test" and not self.has_labels(split):
        raise race.RaceError(f"{stats[split]['source']}: the {split} split "
                             "needs answers")
    return stats

  def fingerprint(self) -> str:
    return f"{self.name}:{self.task_name}"

  def __init__(self, task_name: str, tokenizer, data_dir: str,
               max_seq_length: int = 512, max_qa_length: int = 128,
               spec: Optional[race.ChoiceSpec] = None,
               eval_batch_size: int = 8, **fields):
    """fields: `Task.__init__`'s."""
    datasets = registry.datasets(self.name)
    spec = spec or (race.RACE if task_name in race.TASK_NAMES else getattr(
        datasets.get(task_name), "spec", None))
    if spec is None:
      names = sorted({*race.TASK_NAMES, *datasets})
      raise ValueError(f"--task_name must be one of {', '.join(names)}, "
                       f"got {task_name!r}")
    super().__init__(tokenizer, max_seq_length,
                     eval_batch_size=eval_batch_size, **fields)
    self.spec, self.task_name, self.data_dir = spec, task_name, data_dir
    self.max_qa_length = max_qa_length

  # --------------------------------------------------------- data
  def load_split(self, split: str):
    """(RaceData, features, stats) of a split, read and encoded once."""
    if split not in self._splits:
      # A stalled network file: an error after --input_timeout_secs.
      data = input_timeout.read_within(
          f"the {split} split in --data_dir {self.data_dir}",
          lambda: self.spec.read(self.data_dir, split),
          self.input_timeout_secs)
      not_read = 0
      if self.max_examples[split]:
        not_read = max(0, len(data.examples) - self.max_examples[split])
        data.examples = data.examples[:self.max_examples[split]]
      features, counts = choice_graph.encode_questions(
          data.examples, self.tokenizer, self.max_seq_length,
          self.max_qa_length, self.spec)
      stats = dict(data.counts, **counts, source=data.source,
                   not_read=not_read)
      # A cut text is a warning that says where (longer lengths, or fix it).
      where = counts.pop("truncated_at", None)
      cut = any(v for k, v in counts.items() if k.endswith("_truncated"))
      logging.log(
          logging.WARNING if cut else logging.INFO,
          "[%s] %s: %d questions (max_seq_length=%d, max_qa_length=%d): %s%s",
          split, data.source, len(data.examples), self.max_seq_length,
          self.max_qa_length, ", ".join(f"{k} {v}" for k, v in counts.items()),
          f"; the first cut: {', '.join(map(str, where))}" if where else "")
      self._splits[split] = (data, features, stats)
    return self._splits[split]

  def has_labels(self, split: str) -> bool:
    examples = self.load_split(split)[0].examples
    return bool(examples) and all(q.label is not None for q in examples)

  def train_arrays(self):
    features = self.load_split("train")[1]
    return ({k: features[k] for k in F.ENCODER_INPUTS},
            {F.LOGITS: features[F.LABEL_IDS]})

  # --------------------------------------------------------- model
  def build_model(self, config):
    return self.with_micro_batches(choice_model.AlbertMultipleChoice(
        config, self.spec.num_choices,
        classifier_dropout=self.classifier_dropout))

  def build_losses(self):
    return {F.LOGITS: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)}

  def build_metrics(self):
    return {F.LOGITS: [keras.metrics.SparseCategoricalAccuracy(
        name="accuracy")]}

  # --------------------------------------------------------- eval / predict
  def logits(self, model, split: str) -> np.ndarray:
    """[n, num_choices] logits of a split's questions, in order."""
    return self.outputs(model, self.load_split(split)[1])[F.LOGITS].reshape(
        [-1, self.spec.num_choices])

  def _metrics(self, split: str, logits) -> Dict[str, float]:
    data = self.load_split(split)[0]
    result = race.accuracy_by_level(data.examples, logits.argmax(-1))
    result["num_examples"] = len(data.examples)
    return result

  def evaluate(self, model, strategy):
    if not self.has_labels("dev"):
      raise race.RaceError(f"{self.load_split('dev')[0].source}: the dev "
                           "split needs answers for --do_eval")
    logits = self.logits(model, "dev")
    predicted = [int(i) for i in logits.argmax(-1)]
    self.warn_if_collapsed(
        model, predicted, [q.label for q in self.load_split("dev")[0].examples],
        "dev questions", shown=f"choice {predicted[0] if predicted else 0}")
    return self._metrics("dev", logits)

  def predict(self, model, output_dir):
    data = self.load_split("test")[0]
    logits = self.logits(model, "test")
    probs = tf.nn.softmax(logits, axis=-1).numpy()
    names = self.spec.choice_names
    with atomic_writer(os.path.join(output_dir, PREDICTIONS_FILE)) as f:
      f.write("id\tlevel\tprediction\t" + "\t".join(
          f"prob_{name}" for name in names) + "\n")
      for question, row in zip(data.examples, probs):
        f.write(f"{question.id}\t{question.level}\t"
                f"{names[int(row.argmax())]}\t" +
                "\t".join(f"{p:.6f}" for p in row) + "\n")
    if self.spec.submission_file:
      self.spec.write_submission(cd.submission_path(
          output_dir, self.spec.submission_file, len(data.examples),
          self.load_split("test")[2]["not_read"], data.source,
          self.max_examples["test"]), data.examples, logits.argmax(-1))
    return self._metrics("test", logits) if self.has_labels("test") else {}

  # --------------------------------------------------------- record / export
  def record(self):
    return record_lib.ModelInfo(
        task=self.name, task_name=self.task_name,
        num_labels=self.spec.num_choices,
        label_list=list(self.spec.choice_names),
        max_seq_length=self.max_seq_length, text_pair=True,
        task_config={"max_qa_length": self.max_qa_length,
                     "num_choices": self.spec.num_choices},
        **record_lib.tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    return choice_model.AlbertMultipleChoice(config, cls.num_choices(record))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    if text_pair is False:
      raise ValueError("--notext_pair: multiple choice's serve_text takes "
                       "an article, a question and its options")
    spec = cls.dataset_spec(record)

    def run(features):
      logits = tf.cast(model(features, training=False)[F.LOGITS], tf.float32)
      return {F.LOGITS: logits,
              F.PROBABILITIES: tf.nn.softmax(logits, axis=-1)}

    signatures = {"serving_default": saved_model.ids_signature(
        run, vocab_size=model.config.vocab_size,
        shape=(None, model.num_choices, None))}
    if spec.encode is not None or spec.pad_choices:
      # serve_text packs exactly num_choices options as RACE: not CHID's
      # window, nor C3's padded choices.
      logging.warning(
          "%s: no serve_text (encoded otherwise); serving_default takes ids, "
          "albert_tf.load(...).predict raw inputs", record.task_name)
      return signatures
    encoder = choice_graph.ChoiceEncoder.from_tokenizer(
        tokenizer, max_seq_length, record.task_config.get("max_qa_length", 128))
    signatures["serve_text"] = saved_model.signature(
        lambda t: run(encoder(t["article"], t["question"], t["options"])),
        encoder.input_specs(model.num_choices))
    return signatures

  # --------------------------------------------- serving from raw inputs
  @classmethod
  def dataset_spec(cls, record) -> race.ChoiceSpec:
    """The recorded dataset's ChoiceSpec (how it was encoded); RACE's for
    a record of another or no dataset."""
    spec = getattr(registry.datasets(cls.name).get(record.task_name), "spec",
                   None)
    return spec if isinstance(spec, race.ChoiceSpec) else race.RACE

  @classmethod
  def num_choices(cls, record) -> int:
    return int(record.task_config.get("num_choices", race.NUM_CHOICES))

  @classmethod
  def serve_text_inputs(cls, record):
    return ("article", "question", "options")

  @classmethod
  def encode_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """The recorded dataset's encoding (`choice_graph.encode_questions`) of
    each (article, question, options): int32 [n, num_choices, L]."""
    return cls._encoded(record, tokenizer, max_seq_length, inputs)[0]

  @classmethod
  def truncated_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """Questions the dataset's encoding cuts (one at a time)."""
    return [any(v for k, v in cls._encoded(
        record, tokenizer, max_seq_length,
        {k: [v[i]] for k, v in inputs.items()})[1].items()
                if k.endswith("_truncated"))
            for i in range(len(inputs["article"]))]

  @classmethod
  def _encoded(cls, record, tokenizer, max_seq_length, inputs):
    examples = [race.Question(str(i), "", a, q, list(o), None)
                for i, (a, q, o) in enumerate(zip(
                    inputs["article"], inputs["question"], inputs["options"]))]
    if not examples:
      return {k: np.zeros([0, cls.num_choices(record), max_seq_length],
                          np.int32) for k in F.ENCODER_INPUTS}, {}
    features, counts = choice_graph.encode_questions(
        examples, tokenizer, max_seq_length,
        record.task_config.get("max_qa_length", 128), cls.dataset_spec(record))
    return {k: features[k] for k in F.ENCODER_INPUTS}, counts

  @classmethod
  def decode_outputs(cls, record, outputs, n):
    """Per question {"label" (the most probable choice's name), "choice"
    (its index), "probabilities" [one per option, in order]}."""
    probs = outputs[F.PROBABILITIES]
    names = list(record.label_list) or [
        chr(ord("A") + i) for i in range(probs.shape[-1])]
    return [{"label": names[int(p.argmax())], "choice": int(p.argmax()),
             "probabilities": [float(x) for x in p]} for p in probs[:n]]

  @classmethod
  def scorer(cls, record):
    """Accuracy of the gold choice: its label name or 0-based index."""
    return scoring.LabelScorer(record, list(record.label_list) or [
        str(i) for i in range(cls.num_choices(record))], by_index=True)

  @classmethod
  def tflite_input_shapes(cls, record, max_seq_length, input_names,
                          max_predictions):
    """One question: [1, num_choices, max_seq_length] each."""
    return {n: [1, cls.num_choices(record), max_seq_length]
            for n in input_names}

  @classmethod
  def calibration_inputs(cls, record, fields, text_column, text_b_column):
    """A line is article \t question \t its num_choices options (the
    column flags are not read)."""
    end = 2 + cls.num_choices(record)
    if len(fields) < end:
      raise IndexError(end)
    return {"article": fields[0], "question": fields[1],
            "options": fields[2:end]}

