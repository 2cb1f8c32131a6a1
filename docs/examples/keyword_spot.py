"""A task family of your own, in one file: does a sentence contain a word?

    python -m albert_tf.finetune --task_module=docs/examples/keyword_spot.py \
        --task=keyword_spot --help
    python -m albert_tf.finetune --task_module=docs/examples/keyword_spot.py \
        --task=keyword_spot --keyword=好 --data_dir=demo_output/corpus/sentiment \
        --output_dir=spot --init_checkpoint=demo_output/pretrain \
        --do_train --do_eval --do_predict

The template for a family the package does not have: its flags (a
dataclass of the shared fine-tuning flags plus its own), its reader, a model
whose head is saved under its own checkpoint name, its metric, predictions
and export, registered with `registry.register_family`. Nothing in albert_tf/
names it: `albert-finetune --task_module=<this file>` registers it, and the
record beside the checkpoints names this file, so export_saved_model,
export_tflite and `albert_tf.load(...).predict` find it again
(tests/test_scratch_family.py runs all of that on a copy of this file).

Data: {train,dev,test}.tsv in --data_dir, the text in the last column (any
label columns are ignored: the label is whether --keyword occurs).
"""

import dataclasses
import json
import os

import keras
import numpy as np
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.file_io import atomic_writer
from albert_tf.modeling.encoder import AlbertEncoder, encoder_inputs
from albert_tf.core.options import FinetuneOptions
from albert_tf.core.record import ModelInfo, tokenizer_fields
from albert_tf.serving import saved_model
from albert_tf.serving import text_graph
from albert_tf.tasks.base import Task

PREDICTIONS_FILE = "spots.jsonl"


@dataclasses.dataclass
class SpotOptions(FinetuneOptions):
  """The shared fine-tuning flags (inherited) and this family's own."""
  task_name: str = settings.field("spot", "The data set's name.")
  keyword: str = settings.field("好", "The word to spot.")
  fail_at_step: int = settings.field(
      0, "Stop the input at this step (a kill, for the resume test).")


class SpotModel(keras.Model):
  """The encoder and a dense head on pooled_output: `logits` [batch, 2]."""

  def __init__(self, config, **kwargs):
    encoder = AlbertEncoder(config, name="encoder")
    head = keras.layers.Dense(2, name="spot")
    inputs = encoder_inputs()
    outputs = {F.LOGITS: head(encoder(inputs)[F.POOLED_OUTPUT])}
    super().__init__(inputs=inputs, outputs=outputs, **kwargs)
    self.encoder, self.head = encoder, head

  @property
  def checkpoint_items(self):
    # What checkpoints hold, by name: "spot_head" is this family's own.
    return {"encoder": self.encoder, "spot_head": self.head}


@registry.register_family("keyword_spot", options=SpotOptions)
class SpotTask(Task):
  """Sentences of TSV files; label: the keyword occurs."""
  best_metric = "accuracy"
  export_name = "keyword_spot"
  output_files = (PREDICTIONS_FILE,)

  def __init__(self, o: SpotOptions, tokenizer):
    self.o, self.tokenizer = o, tokenizer
    self._splits = {}

  # ------------------------------------------------------- fine-tuning
  @classmethod
  def from_options(cls, o, tokenizer, info, dataset):
    return cls(o, tokenizer)

  def _split(self, split):
    """(texts, features, labels) of data_dir/<split>.tsv, read once."""
    if split not in self._splits:
      path = os.path.join(self.o.data_dir, split + ".tsv")
      with open(path, encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t")[-1] for line in f
                 if line.strip()]
      # The serve_text graph's own encoding (export_signatures below).
      features, _ = text_graph.encode_texts(text_graph.shared_encoder(
          self.tokenizer, self.o.max_seq_length), texts)
      labels = np.array([int(self.o.keyword in t) for t in texts], np.int32)
      self._splits[split] = texts, features, labels
    return self._splits[split]

  def read_splits(self, o):
    return {s: {"examples": len(self._split(s)[0])}
            for s, wanted in (("train", o.do_train), ("dev", o.do_eval),
                              ("test", o.do_predict)) if wanted}

  def steps_per_epoch(self, global_batch_size):
    return max(1, len(self._split("train")[0]) // global_batch_size)

  def build_model(self, config):
    return SpotModel(config)

  def build_losses(self):
    return {F.LOGITS: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)}

  def build_inputs(self, split, strategy, global_batch_size, start_step=0,
                   num_steps=0):
    """Batch s is rows [s*B, (s+1)*B) of the train split, cycled: a
    function of the step, so a resumed run sees the batches an
    uninterrupted one would have."""
    _, features, labels = self._split("train")
    n = len(labels)
    stop = self.o.fail_at_step or num_steps + 1

    def batch(step):
      tf.debugging.assert_less(step, tf.constant(stop, tf.int64),
                               message=f"input stopped at step {stop}")
      idx = (tf.range(global_batch_size, dtype=tf.int64)
             + step * global_batch_size) % n
      return ({k: tf.gather(v, idx) for k, v in features.items()},
              {F.LOGITS: tf.gather(labels, idx)})

    ds = tf.data.Dataset.range(start_step, num_steps).map(batch)
    return strategy.experimental_distribute_dataset(ds)

  def _accuracy(self, model, split):
    texts, features, labels = self._split(split)
    logits = model(features, training=False)[F.LOGITS].numpy()
    return texts, logits, float((logits.argmax(-1) == labels).mean())

  def evaluate(self, model, strategy):
    return {"accuracy": self._accuracy(model, "dev")[2]}

  def predict(self, model, output_dir):
    texts, logits, accuracy = self._accuracy(model, "test")
    with atomic_writer(os.path.join(output_dir, PREDICTIONS_FILE)) as f:
      for text, row in zip(texts, logits):
        f.write(json.dumps({"text": text, "spot": int(row.argmax())},
                           ensure_ascii=False) + "\n")
    return {"accuracy": accuracy}

  # ------------------------------------------------------- record / export
  def record(self):
    return ModelInfo(task="keyword_spot", task_name=self.o.task_name,
                     num_labels=2, label_list=["no", "yes"],
                     max_seq_length=self.o.max_seq_length,
                     task_config={"keyword": self.o.keyword},
                     **tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    return SpotModel(config)

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    encoder = text_graph.TextEncoder.from_tokenizer(tokenizer, max_seq_length)

    def run(features):
      logits = model(features, training=False)[F.LOGITS]
      return {F.LOGITS: logits,
              "spot": tf.argmax(logits, -1, output_type=tf.int32)}

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.encoder.config.vocab_size),
            "serve_text": saved_model.signature(
                lambda t: run(encoder(t["text"])),
                saved_model.text_specs(False))}
