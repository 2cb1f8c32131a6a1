"""Multiple-choice reading comprehension: RACE and files in its layout.

Reading and the four `[CLS] article [SEP] question+option [SEP]` sequences
are `albert_tf.data.race`; this file is what the trainer needs on top:

  * inputs: the encoded train split in memory ([n, 4, L] per input),
    batched as a pure function of (seed, step);
  * model: `AlbertMultipleChoice` (dense(1) over each choice's pooled
    output, a softmax over the choices; `modeling.multiple_choice`);
  * loss: softmax cross-entropy over the choices;
  * metrics: accuracy overall and per middle/high (`race.accuracy_by_level`);
    `accuracy` picks the best checkpoint;
  * predictions: test_predictions.tsv, one line per question (id, level,
    the predicted letter, the probability of each option);
  * record: max_qa_length and the number of choices in task_config;
  * export (`--model=multiple_choice`): serving_default takes ids
    [b, 4, L] and returns logits and probabilities; serve_text(article,
    question, options [b, 4]) the choice probabilities
    (`albert_tf.serving.choice_graph`).
"""

import os
from typing import Dict

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.data import race
from albert_tf.modeling.multiple_choice import AlbertMultipleChoice
from albert_tf.serving import saved_model
from albert_tf.tasks import record as record_lib
from albert_tf.tasks.base import Task, batched_logits, step_indexed_inputs

PREDICTIONS_FILE = "test_predictions.tsv"


class MultipleChoiceTask(Task):
  """RACE's {train,dev,test} splits under data_dir, one tokenizer."""

  name = "multiple_choice"
  best_metric = "accuracy"
  export_name = "multiple_choice"
  output_files = (PREDICTIONS_FILE,)

  def __init__(self, task_name: str, tokenizer, data_dir: str,
               max_seq_length: int = 512, max_qa_length: int = 128,
               eval_batch_size: int = 8, classifier_dropout: float = 0.1,
               seed: int = 12345, max_train_examples: int = 0,
               max_eval_examples: int = 0, max_predict_examples: int = 0):
    if task_name not in race.TASK_NAMES:
      raise ValueError(f"--task_name must be one of "
                       f"{', '.join(race.TASK_NAMES)}, "
                       f"got {task_name!r}")
    self.task_name = task_name
    self.tokenizer = tokenizer
    self.data_dir = data_dir
    self.max_seq_length = max_seq_length
    self.max_qa_length = max_qa_length
    self.eval_batch_size = eval_batch_size
    self.classifier_dropout = classifier_dropout
    self.seed = seed
    self.max_examples = {"train": max_train_examples,
                         "dev": max_eval_examples,
                         "test": max_predict_examples}
    self._splits = {}
    self._train_tensors = None
    self._predict_fn = self._predict_model = None

  # --------------------------------------------------------- data
  def load_split(self, split: str):
    """(RaceData, features, stats) of a split, read and encoded once."""
    if split not in self._splits:
      data = race.read_race(self.data_dir, split)
      if self.max_examples[split]:
        data.examples = data.examples[:self.max_examples[split]]
      features, counts = race.encode_race(
          data.examples, self.tokenizer, self.max_seq_length,
          self.max_qa_length)
      stats = dict(data.counts, **counts, source=data.source)
      logging.log(
          logging.WARNING if counts["articles_truncated"] else logging.INFO,
          "[%s] %s: %d questions; %d articles cut to max_seq_length=%d, %d "
          "question+option texts cut to max_qa_length=%d", split,
          data.source, len(data.examples), counts["articles_truncated"],
          self.max_seq_length, counts["qa_truncated"], self.max_qa_length)
      self._splits[split] = (data, features, stats)
    return self._splits[split]

  def has_labels(self, split: str) -> bool:
    data = self.load_split(split)[0]
    return bool(data.examples) and all(q.label is not None
                                       for q in data.examples)

  def steps_per_epoch(self, global_batch_size: int) -> int:
    n = len(self.load_split("train")[0].examples)
    return max(1, -(-n // global_batch_size))

  def build_inputs(self, split, strategy, global_batch_size, start_step=0,
                   num_steps=0):
    if split != "train":
      raise ValueError(f"build_inputs: only the train split is distributed, "
                       f"got {split!r}")
    if self._train_tensors is None:
      features = self.load_split("train")[1]
      self._train_tensors = (
          {k: tf.constant(features[k]) for k in F.ENCODER_INPUTS},
          {F.LOGITS: tf.constant(features[F.LABEL_IDS])})
    return step_indexed_inputs(*self._train_tensors, strategy,
                               global_batch_size, start_step, num_steps,
                               self.seed)

  # --------------------------------------------------------- model
  def build_model(self, config):
    return AlbertMultipleChoice(config, race.NUM_CHOICES,
                                classifier_dropout=self.classifier_dropout)

  def build_losses(self):
    return {F.LOGITS: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)}

  def build_metrics(self):
    return {F.LOGITS: [keras.metrics.SparseCategoricalAccuracy(
        name="accuracy")]}

  # --------------------------------------------------------- eval / predict
  def logits(self, model, split: str) -> np.ndarray:
    """[n, 4] logits of a split's questions, in order."""
    features = self.load_split(split)[1]
    if self._predict_model is not model:
      self._predict_fn = batched_logits(model)
      self._predict_model = model
    return self._predict_fn(features, self.eval_batch_size).reshape(
        [-1, race.NUM_CHOICES])

  def _metrics(self, split: str, logits) -> Dict[str, float]:
    data = self.load_split(split)[0]
    result = race.accuracy_by_level(data.examples, logits.argmax(-1))
    result["num_examples"] = len(data.examples)
    return result

  def evaluate(self, model, strategy):
    if not self.has_labels("dev"):
      raise race.RaceError(f"{self.load_split('dev')[0].source}: the dev "
                           "split needs answers for --do_eval")
    return self._metrics("dev", self.logits(model, "dev"))

  def predict(self, model, output_dir):
    data = self.load_split("test")[0]
    logits = self.logits(model, "test")
    probs = tf.nn.softmax(logits, axis=-1).numpy()
    with open(os.path.join(output_dir, PREDICTIONS_FILE), "w",
              encoding="utf-8") as f:
      f.write("id\tlevel\tprediction\t" + "\t".join(
          f"prob_{letter}" for letter in race.LETTERS) + "\n")
      for question, row in zip(data.examples, probs):
        f.write(f"{question.id}\t{question.level}\t"
                f"{race.LETTERS[int(row.argmax())]}\t" +
                "\t".join(f"{p:.6f}" for p in row) + "\n")
    return self._metrics("test", logits) if self.has_labels("test") else {}

  # --------------------------------------------------------- record / export
  def record(self):
    return record_lib.ModelInfo(
        task=self.name, task_name=self.task_name,
        num_labels=race.NUM_CHOICES, label_list=list(race.LETTERS),
        max_seq_length=self.max_seq_length, text_pair=True,
        task_config={"max_qa_length": self.max_qa_length,
                     "num_choices": race.NUM_CHOICES},
        **record_lib.tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    return AlbertMultipleChoice(
        config, record.task_config.get("num_choices", race.NUM_CHOICES))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    if text_pair is False:
      raise ValueError("--notext_pair: multiple choice's serve_text takes "
                       "an article, a question and its options")
    # Imported here: only export needs TF Text (the in-graph tokenizer).
    from albert_tf.serving.choice_graph import ChoiceEncoder  # pylint: disable=g-import-not-at-top
    encoder = ChoiceEncoder.from_tokenizer(
        tokenizer, max_seq_length,
        record.task_config.get("max_qa_length", 128))

    def run(features):
      logits = tf.cast(model(features, training=False)[F.LOGITS], tf.float32)
      return {F.LOGITS: logits,
              F.PROBABILITIES: tf.nn.softmax(logits, axis=-1)}

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size,
                shape=(None, model.num_choices, None)),
            "serve_text": saved_model.signature(
                lambda t: run(encoder(t["article"], t["question"],
                                      t["options"])),
                encoder.input_specs(model.num_choices))}
