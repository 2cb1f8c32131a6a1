"""Token tagging (NER): People's Daily 1998 NER and any CoNLL file.

Reading and tag schemes: `albert_tf.data.conll`; windows, the entity metric
(seqeval's F1 picks the best checkpoint), `test_predictions.txt` (in the
file's scheme) and the baselines: `albert_tf.data.ner_data`. `AlbertTagger`
trains on BIO tags, cross-entropy over each token's first piece. Export
(`--model=tagger`): serving_default returns `logits` and `tag_ids`;
serve_text, raw text to entities with offsets (`tagging_graph.TextTagger`).
"""

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core import record as record_lib
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.options import FinetuneOptions
from albert_tf.data import conll, ner_data
from albert_tf.tasks import scoring
from albert_tf.tasks.base import Task, first_given

keras = lazy.module("keras")
tf = lazy.module("tensorflow")
models = lazy.module("albert_tf.modeling.models")
saved_model = lazy.module("albert_tf.serving.saved_model")
# Only what runs the preprocessor needs TF Text (the in-graph tokenizer).
tagging_graph = lazy.module("albert_tf.serving.tagging_graph")

PREDICTIONS_FILE = "test_predictions.txt"


@dataclasses.dataclass
class NerOptions(FinetuneOptions):
  """The tagging family's flags (run_ner's)."""
  task_name: str = settings.field(
      None, "peoples_daily_ner (data_prep.corpora's BIO files) or conll (any "
      "CoNLL files).", choices=conll.TASK_NAMES, required=True)
  data_dir: str = settings.field(
      None, "Directory with train.txt, dev.txt and test.txt in CoNLL layout.",
      required=True)
  doc_stride: Optional[int] = settings.field(
      None, "Pieces between the starts of the windows of a sentence longer "
      "than max_seq_length - 2 (default: half a window).")
  tag_scheme: Optional[str] = settings.field(
      None, "BIO (IOB2), IOB1, BIOES (IOBES) or BMES (default: detected from "
      "the files).")
  strict_tags: bool = settings.field(
      False, "Stop at the first gold tag that does not continue or close an "
      "entity in its scheme (an I-PER after O, an M-PER or E-PER at the "
      "sentence start, an entity BIOES leaves open), naming file:line; "
      "without it such tags are read as conlleval and seqeval read them, "
      "counted and named in one warning per file.")
  baseline: bool = settings.field(
      True, "Score all-O and a dictionary of the train split's entities "
      "(each string its most frequent type, longest match first) on the "
      "evaluated splits (eval_results.json's baseline_*; seconds).",
      group="training")


@registry.register_family(
    "tagging", options=NerOptions, command="albert-ner",
    modules=("albert_tf.run_ner", "albert_tf.data.conll",
             "albert_tf.data.ner_data", "albert_tf.serving.tagging_graph"))
class TaggingTask(Task):
  """CoNLL {train,dev,test}.txt in data_dir. label_list: the model's BIO tags
  (default: O and B-/I- of the train split's entity types); strict_tags: a
  stray gold tag (`conll.stray_tags`) is an error, not a counted warning."""

  name = "tagging"
  best_metric = "entity_f1"
  export_name = "tagger"
  output_files = (PREDICTIONS_FILE,)
  position_labels = (F.LOGITS,)  # tags per position: cut with the inputs

  # --------------------------------------------------------- fine-tuning
  @classmethod
  def resolve_options(cls, o: NerOptions, info):
    conll.canonical_scheme(o.tag_scheme)  # a bad name fails here
    o = super().resolve_options(o, info)
    return dataclasses.replace(o, doc_stride=first_given(
        o.doc_stride, cls.own_config(info).get("doc_stride"),
        max(1, (o.max_seq_length - 2) // 2)))

  @classmethod
  def from_options(cls, o: NerOptions, tokenizer, info, dataset):
    own = info and info.task == cls.name
    return cls(o.task_name, tokenizer, o.data_dir, doc_stride=o.doc_stride,
               label_list=info.label_list if own else None,
               tag_scheme=o.tag_scheme, strict_tags=o.strict_tags,
               **cls.option_fields(o))

  def read_splits(self, o) -> Dict[str, dict]:
    # The splits are read first: the train split's tags are the model's.
    stats = {}
    for split in self.wanted_splits(o):
      data, _, stats[split] = self.load_split(split)
      if split != "test":
        _needs_tags(data, f"the {split} split")
    return stats

  def fingerprint(self) -> str:
    return f"{self.name}:{self.task_name}:{','.join(self.label_list)}"

  def __init__(self, task_name: str, tokenizer, data_dir: str,
               max_seq_length: int, doc_stride: int,
               label_list: Optional[Sequence[str]] = None,
               tag_scheme: Optional[str] = None, strict_tags: bool = False,
               **fields):
    """fields: `Task.__init__`'s."""
    if task_name not in conll.TASK_NAMES:
      raise ValueError(f"--task_name must be one of "
                       f"{', '.join(conll.TASK_NAMES)}, got {task_name!r}")
    super().__init__(tokenizer, max_seq_length, **fields)
    self.task_name, self.data_dir, self.doc_stride = (task_name, data_dir,
                                                      doc_stride)
    # People's Daily NER is written in BIO by data_prep.corpora.
    self.tag_scheme = conll.canonical_scheme(
        tag_scheme or ("BIO" if task_name == "peoples_daily_ner" else None))
    self.strict_tags = strict_tags
    self._label_list = list(label_list) if label_list else None
    self._pieces = {}  # token -> piece ids, shared by the splits
    self._gold = {}    # split -> gold BIO tags per sentence

  # --------------------------------------------------------- data
  def split_file(self, split: str) -> str:
    return os.path.join(self.data_dir, ner_data.SPLIT_FILES[split])

  def read_split(self, split: str) -> conll.ConllData:
    return ner_data.read_split(self.data_dir, split, self.tag_scheme,
                               self.strict_tags, self.max_examples[split],
                               self.input_timeout_secs)

  @property
  def label_list(self) -> List[str]:
    if self._label_list is None:
      if not os.path.exists(self.split_file("train")):
        # An eval or predict of a checkpoint not run_ner's: no tags known.
        raise conll.DataError(
            f"{self.split_file('train')}: no such file, and no "
            f"{record_lib.RECORD_FILE} beside --init_checkpoint: the tags "
            "come from the train split or from a run_ner output_dir")
      train = _needs_tags(self.load_split("train")[0], "the train split")
      self._label_list = ner_data.bio_label_list(train.entity_types)
    return self._label_list

  @property
  def scheme(self) -> str:
    """The scheme predictions are written in: the files' own."""
    return self.tag_scheme or next(
        (self._splits[s][0].scheme for s in ("train", "dev", "test")
         if s in self._splits and self._splits[s][0].has_tags), "BIO")

  def load_split(self, split: str):
    """(data, windows, stats) of a split, read and encoded once."""
    if split in self._splits:
      return self._splits[split]
    data = self.read_split(split)
    # Read before encoding: the train split's tags define label_list.
    self._splits[split] = (data, None, None)
    self._splits[split] = (data, *ner_data.encode_split(
        data, split, self.label_list if data.has_tags else None,
        tagging_graph.shared(self.tokenizer, self.max_seq_length),
        self.doc_stride, cache=self._pieces))
    return self._splits[split]

  def token_level(self) -> str:
    """"char" if every token read is one character, else "word"."""
    return ("char" if all(len(t) == 1 for data, _, _ in self._splits.values()
                          for s in data.sentences for t in s.tokens)
            else "word")

  def train_arrays(self):
    features = self.load_split("train")[1].features
    return ({k: features[k] for k in F.ENCODER_INPUTS},
            {F.LOGITS: features[F.LABEL_IDS]})

  # --------------------------------------------------------- model
  def build_model(self, config):
    return self.with_micro_batches(models.AlbertTagger(
        config, len(self.label_list),
        classifier_dropout=self.classifier_dropout))

  def build_losses(self):
    return {F.LOGITS: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, ignore_class=ner_data.IGNORE)}

  # --------------------------------------------------------- eval / predict
  def predicted_tags(self, model, split: str) -> List[List[str]]:
    """BIO tags of every token of a split, each from its owner window."""
    _, windows, _ = self.load_split(split)
    return ner_data.tags_from_logits(
        windows, self.outputs(model, windows.features)[F.LOGITS],
        self.label_list)

  def _metrics(self, split: str, predicted) -> Dict[str, float]:
    if split not in self._gold:  # once per split, not at every eval
      data = self.load_split(split)[0]
      self._gold[split] = [conll.to_bio(s, data.scheme)
                           for s in data.sentences]
    return ner_data.entity_metrics(self._gold[split], predicted)

  def baselines(self, splits):
    """`ner_data.baseline_tags` (the train split's, read, not encoded),
    scored as the model is on each split of `splits` that has tags."""
    keys = ("entity_precision", "entity_recall", "entity_f1",
            "token_accuracy")
    train = ((self._splits["train"][0] if "train" in self._splits else
              self.read_split("train"))
             if os.path.exists(self.split_file("train")) else None)
    out = {}
    for split in splits:
      data = self.load_split(split)[0]
      if data.has_tags and data.sentences:
        out[split] = {name: {k: v for k, v in self._metrics(split, tags).items()
                             if k in keys}
                      for name, tags in ner_data.baseline_tags(
                          train, [s.tokens for s in data.sentences]).items()}
    return out

  def evaluate(self, model, strategy):
    _needs_tags(self.load_split("dev")[0], "the dev split", " for --do_eval")
    predicted = self.predicted_tags(model, "dev")
    metrics = self._metrics("dev", predicted)
    said, gold, shown = ner_data.one_tag_per_sentence(predicted,
                                                      self._gold["dev"])
    self.warn_if_collapsed(model, said, gold, "dev sentences", shown=shown)
    return metrics

  def predict(self, model, output_dir):
    data = self.load_split("test")[0]
    predicted = self.predicted_tags(model, "test")
    ner_data.write_predictions(os.path.join(output_dir, PREDICTIONS_FILE),
                               data.sentences, predicted, self.scheme,
                               data.has_tags)
    return self._metrics("test", predicted) if data.has_tags else {}

  # --------------------------------------------------------- record / export
  def record(self):
    return record_lib.ModelInfo(
        task=self.name, task_name=self.task_name,
        num_labels=len(self.label_list), label_list=list(self.label_list),
        max_seq_length=self.max_seq_length,
        task_config={"tag_scheme": self.scheme, "doc_stride": self.doc_stride,
                     "token_level": self.token_level()},
        **record_lib.tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    if not record.label_list:
      raise ValueError(
          f"--model=tagger needs the {record_lib.RECORD_FILE} run_ner writes "
          "beside --checkpoint (tags, max_seq_length, token_level); none "
          "found")
    try:
      tagging_graph.check_token_level(record.task_config.get("token_level"))
    except ValueError as e:
      raise ValueError(f"{record_lib.RECORD_FILE} beside --checkpoint: {e}"
                       ) from None
    return models.AlbertTagger(config, len(record.label_list))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair, length_buckets=None):
    """length_buckets: `TextTagger.from_tokenizer`'s."""
    if text_pair:
      raise ValueError("--text_pair: a tagger's serve_text takes one text")
    tagger = tagging_graph.TextTagger.from_tokenizer(
        tokenizer, max_seq_length, record.task_config["token_level"],
        record.label_list, length_buckets=length_buckets)

    def run(features):
      return cls.export_outputs(model(features, training=False))

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size),
            "serve_text": saved_model.signature(
                lambda t: tagger(t["text"], lambda f: run(f)[F.TAG_IDS]),
                saved_model.text_specs(False))}

  @staticmethod
  def export_outputs(outputs):
    """Serving outputs: per-token `logits` [b, s, T] and `tag_ids` [b, s]."""
    logits = tf.cast(outputs[F.LOGITS], tf.float32)
    return {F.LOGITS: logits,
            F.TAG_IDS: tf.argmax(logits, axis=-1, output_type=tf.int32)}

  # --------------------------------------------- serving from raw inputs
  @classmethod
  def encode_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """serve_text's one window of each text (`TextTagger.encode`)."""
    return _tagger(record, tokenizer, max_seq_length).encode_batch(
        inputs["text"])[0]

  @classmethod
  def truncated_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """Texts with tokens after the one window: untagged."""
    return _tagger(record, tokenizer, max_seq_length).truncated(inputs["text"])

  @classmethod
  def held_out_inputs(cls, record, max_examples):
    """The recorded dev file's sentences as raw texts, their BIO tags."""
    level = record.task_config.get("token_level")
    dev = (((record.training or {}).get("data") or {}).get("dev") or {}
           ).get("file")
    if level not in ("char", "word") or not dev or not os.path.exists(dev):
      return None
    texts, gold = ner_data.held_out_texts(
        dev, record.task_config.get("tag_scheme"), level, max_examples)
    return ({"text": texts}, gold, f"the run's dev split, {dev} ({len(texts)} "
            f"sentence{'s' if len(texts) > 1 else ''})") if texts else None

  @classmethod
  def held_out_metric(cls, record, tokenizer, max_seq_length, inputs, gold):
    """Entity F1 of serving_default's tags (`ner_data.window_f1`)."""
    return ("entity_f1", *ner_data.window_f1(
        list(record.label_list), gold, _tagger(
            record, tokenizer, max_seq_length).encode_batch(inputs["text"])[2]))

  @classmethod
  def decode_outputs(cls, record, outputs, n):
    return tagging_graph.entities(outputs, n)

  @classmethod
  def calibration_inputs(cls, record, fields, text_column, text_b_column):
    return {"text": fields[text_column]}  # a tagger takes no text_b

  @classmethod
  def legacy_record_task(cls, file_name, values):
    return cls.name if file_name == record_lib.TAGGER_CONFIG else None

  @classmethod
  def ids_decoder(cls, record, run, tokenizer, max_seq_length):
    return _tagger(record, tokenizer, max_seq_length).ids_predictor(run)

  @classmethod
  def scorer(cls, record):
    return TagScorer(record)


def _needs_tags(data, what, why=""):
  """data, or a DataError when it has no tags."""
  if not data.has_tags:
    raise conll.DataError(f"{data.file}: {what} needs tags{why}")
  return data


def _tagger(record, tokenizer, max_seq_length):
  """The recorded tagger's serve_text preprocessor (`tagging_graph.shared`)."""
  return tagging_graph.shared(tokenizer, max_seq_length,
                              record.task_config.get("token_level"),
                              record.label_list)


class TagScorer(scoring.Scorer):
  """albert-predict's entity scores: gold tags, one per token of the text
  (`split_texts` at the model's level; space-separated or a JSON list),
  against the predicted entities' BIO tags."""
  gold_columns = ("tags", "label")
  verify_metric = "entity F1"

  def __init__(self, record):
    super().__init__(record)
    self.token_level = record.task_config.get("token_level") or "char"

  def _tokens(self, text):
    return tagging_graph.split_texts([text], self.token_level)[0]

  def read_gold(self, value, values, where):
    tags = (scoring.gold_list(value, where) if isinstance(value, list) or
            str(value).startswith("[") else str(value).split())
    tokens = len(self._tokens(values["text"]))
    if len(tags) != tokens:
      raise scoring.PredictError(
          f"{where}: {len(tags)} gold tags, the text has {tokens} tokens "
          f"(one tag per {'character' if self.token_level == 'char' else 'token'}"
          ", whitespace skipped)")
    return tags

  def read_prediction(self, prediction, values, where):
    return ner_data.entity_tags(self._tokens(values["text"]), prediction)

  def metrics(self):
    if not self.gold:
      return {}
    scores = ner_data.entity_metrics(self.gold, self.predicted)
    return {k: scores[k] for k in (
        "entity_precision", "entity_recall", "entity_f1", "token_accuracy",
        "num_sentences", "num_gold_entities", "num_predicted_entities")}

  def lines(self, scores):
    return [f"entity_precision={scores['entity_precision']:.4f} "
            f"entity_recall={scores['entity_recall']:.4f} "
            f"entity_f1={scores['entity_f1']:.4f} on "
            f"{scores['num_sentences']} texts"] if scores else []

  def fields(self, prediction):
    return {"entities": prediction}
