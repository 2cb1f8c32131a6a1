"""Token tagging (NER): People's Daily 1998 NER and any CoNLL file.

Reading and tag schemes are `albert_tf.data.conll`, windows and the entity
metric `albert_tf.data.ner_data`. Every window of the train split is kept
in memory for `Task.build_inputs`; `AlbertTagger` (a dense layer over
sequence_output) is trained on BIO tags whatever the file's scheme, with
softmax cross-entropy over each token's first piece (other positions carry
`ner_data.IGNORE`); seqeval's entity F1 (conlleval semantics) picks the
best checkpoint. Predictions: `test_predictions.txt`, a line per token
(token, gold tag if any, predicted tag) in the file's scheme. Export
(`--model=tagger`): serving_default returns `logits` and `tag_ids`;
serve_text takes raw text and returns entities with character offsets
(`albert_tf.serving.tagging_graph.TextTagger`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence

from absl import logging

from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.options import FinetuneOptions
from albert_tf.core import lazy
from albert_tf.data import conll, input_timeout, ner_data
from albert_tf.data.conll import TASK_NAMES
from albert_tf.core import record as record_lib
from albert_tf.tasks.base import Task, first_given
from albert_tf.tasks import scoring

keras = lazy.module("keras")
tf = lazy.module("tensorflow")
models = lazy.module("albert_tf.modeling.models")
saved_model = lazy.module("albert_tf.serving.saved_model")
# Only what runs the preprocessor needs TF Text (the in-graph tokenizer).
tagging_graph = lazy.module("albert_tf.serving.tagging_graph")

PREDICTIONS_FILE = "test_predictions.txt"
SPLIT_FILES = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}


@dataclasses.dataclass
class NerOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      None, "peoples_daily_ner (data_prep.corpora's BIO files) or conll (any "
      "CoNLL files).", choices=TASK_NAMES, required=True)
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
      "sentence start, an entity BIOES leaves open), naming file:line. "
      "Without it such tags are read as conlleval and seqeval read them (an "
      "inside tag that continues no entity starts one), counted, and named "
      "in one warning per file.")
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
  """CoNLL {train,dev,test}.txt in data_dir, encoded with one tokenizer.

  label_list: the model's BIO tags (from a fine-tuned checkpoint); default:
  O plus B-/I- of every entity type of the train split. strict_tags: a
  stray gold tag (`conll.stray_tags`) is an error, not a counted warning.
  """

  name = "tagging"
  best_metric = "entity_f1"
  export_name = "tagger"
  output_files = (PREDICTIONS_FILE,)
  # The tags are per position: cut with the inputs (their padding IGNORE).
  position_labels = (F.LOGITS,)

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
    own = info if info and info.task == cls.name else None
    return cls(o.task_name, tokenizer, o.data_dir, doc_stride=o.doc_stride,
               label_list=own.label_list if own else None,
               tag_scheme=o.tag_scheme, strict_tags=o.strict_tags,
               **cls.option_fields(o))

  def read_splits(self, o) -> Dict[str, dict]:
    # The splits are read first: the train split's tags are the model's.
    stats = {}
    for split in self.wanted_splits(o):
      data, _, stats[split] = self.load_split(split)
      if split != "test" and not data.has_tags:
        raise conll.DataError(f"{data.file}: the {split} split needs tags")
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
    return os.path.join(self.data_dir, SPLIT_FILES[split])

  def read_split(self, split: str) -> conll.ConllData:
    path = self.split_file(split)
    if not os.path.exists(path):
      raise conll.DataError(f"{path}: no such file (--data_dir needs "
                            f"{SPLIT_FILES[split]} for the {split} split)")
    # A named pipe without a writer, a hung mount: an error, not a wait.
    data = input_timeout.read_within(
        f"the {split} file {path}",
        lambda: conll.read_conll(path, self.tag_scheme, self.strict_tags),
        self.input_timeout_secs)
    if self.max_examples[split]:
      data.sentences = data.sentences[:self.max_examples[split]]
    return data

  @property
  def label_list(self) -> List[str]:
    if self._label_list is None:
      if not os.path.exists(self.split_file("train")):
        # An eval- or predict-only run from a checkpoint that is not a
        # run_ner output: nothing says which tags the model has.
        raise conll.DataError(
            f"{self.split_file('train')}: no such file, and no "
            f"{record_lib.RECORD_FILE} beside --init_checkpoint: the tags "
            "come from the train split or from a run_ner output_dir")
      train = self.load_split("train")[0]
      if not train.has_tags:
        raise conll.DataError(f"{train.file}: the train split needs tags")
      self._label_list = ner_data.bio_label_list(train.entity_types)
    return self._label_list

  @property
  def scheme(self) -> str:
    """The scheme predictions are written in: the files' own."""
    if self.tag_scheme:
      return self.tag_scheme
    for split in ("train", "dev", "test"):
      if split in self._splits and self._splits[split][0].has_tags:
        return self._splits[split][0].scheme
    return "BIO"

  def load_split(self, split: str):
    """(data, windows, stats) of a split, read and encoded once."""
    if split not in self._splits:
      data = self.read_split(split)
      # Read before encoding: the train split's tags define label_list.
      self._splits[split] = (data, None, None)
      label_map = None
      if data.has_tags:
        label_map = {t: i for i, t in enumerate(self.label_list)}
        known = {t[2:] for t in self.label_list if t != "O"}
        for s in data.sentences:
          for i, tag in enumerate(s.tags):
            if tag != "O" and tag[2:] not in known:
              raise conll.DataError(
                  f"{data.file}:{s.line + i}: entity type {tag[2:]!r} is "
                  f"not among the model's ({', '.join(sorted(known))})")
      windows = ner_data.encode_sentences(
          data.sentences, _tagger(None, self.tokenizer, self.max_seq_length),
          label_map, self.doc_stride, data.scheme, cache=self._pieces)
      stats = {"file": data.file, "sentences": len(data.sentences),
               "tokens": sum(len(s.tokens) for s in data.sentences),
               "windows": windows.num_windows,
               "long_sentences": windows.long_sentences,
               "unknown_tokens": windows.unknown_tokens,
               "docstarts_skipped": data.docstarts,
               "stray_tags": data.stray_tags,
               "scheme": data.scheme if data.has_tags else None}
      logging.info(
          "[%s] %s: %d sentences, %d tokens (%s), %d windows of "
          "max_seq_length=%d (%d sentences longer than one window, "
          "doc_stride=%d); %d tokens with no piece read as unknown", split,
          data.file, stats["sentences"], stats["tokens"],
          stats["scheme"] or "no tags", stats["windows"], self.max_seq_length,
          stats["long_sentences"], self.doc_stride, stats["unknown_tokens"])
      self._splits[split] = (data, windows, stats)
    return self._splits[split]

  def token_level(self) -> str:
    """"char" when every token read so far is one character, else "word"
    (serve_text splits raw text the same way)."""
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
    """all_o (no entity) and dictionary (`data.baselines.EntityDictionary`
    fitted on the train split's tags; none without them), scored as the
    model is, for each split of `splits` that has tags."""
    from albert_tf.data import baselines  # pylint: disable=g-import-not-at-top
    keys = ("entity_precision", "entity_recall", "entity_f1",
            "token_accuracy")
    dictionary = None
    if os.path.exists(self.split_file("train")):
      # Read, not encoded: a predict-only run has no use for the windows.
      train = (self._splits["train"][0] if "train" in self._splits
               else self.read_split("train"))
      if train.has_tags:
        dictionary = baselines.EntityDictionary.fit(
            [s.tokens for s in train.sentences],
            [conll.to_bio(s, train.scheme) for s in train.sentences])
    out = {}
    for split in splits:
      data = self.load_split(split)[0]
      if not data.has_tags or not data.sentences:
        continue
      tokens = [s.tokens for s in data.sentences]
      predicted = {"all_o": [["O"] * len(t) for t in tokens]}
      if dictionary is not None:
        predicted["dictionary"] = [dictionary.tag(t) for t in tokens]
      out[split] = {name: {k: v for k, v in self._metrics(split, tags).items()
                           if k in keys}
                    for name, tags in predicted.items()}
    return out

  def evaluate(self, model, strategy):
    data = self.load_split("dev")[0]
    if not data.has_tags:
      raise conll.DataError(f"{data.file}: the dev split needs tags for "
                            "--do_eval")
    predicted = self.predicted_tags(model, "dev")
    metrics = self._metrics("dev", predicted)
    # Collapsed: one tag (any: O, or I-n in a file without O) for every
    # token. A sentence of mixed tags is a value no other sentence shares.
    kept = [i for i, tags in enumerate(predicted) if tags]
    one_tag = lambda tags, i: tags[0] if len(set(tags)) == 1 else ("mixed", i)
    said = [one_tag(predicted[i], i) for i in kept]
    tag = said[0] if said else None
    self.warn_if_collapsed(
        model, said, [one_tag(self._gold["dev"][i], i) for i in kept],
        "dev sentences", shown=("only O tags (no entity)" if tag == "O"
                                else f"only {tag!r} tags"))
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
    level = record.task_config.get("token_level")
    if level not in tagging_graph.TOKEN_LEVELS:
      raise ValueError(f"{record_lib.RECORD_FILE} beside --checkpoint: "
                       f"token_level must be one of "
                       f"{tagging_graph.TOKEN_LEVELS}, got {level!r}")
    return models.AlbertTagger(config, len(record.label_list))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair, length_buckets=None):
    """length_buckets: the lengths serve_text pads the model inputs to (the
    smallest that holds the batch's longest row); default: always
    max_seq_length."""
    if text_pair:
      raise ValueError("--text_pair: a tagger's serve_text takes one text")
    tagger = tagging_graph.TextTagger.from_tokenizer(
        tokenizer, max_seq_length, record.task_config["token_level"],
        record.label_list, length_buckets=length_buckets)

    def run(features):
      return cls.export_outputs(model(features, training=False))

    # Raw text -> tokens -> the model's tags -> entities with offsets.
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
  def serve_text_inputs(cls, record):
    return ("text",)

  @classmethod
  def encode_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """serve_text's one window of each text (`TextTagger.encode`), [n,
    max_seq_length]."""
    return _tagger(record, tokenizer, max_seq_length).encode_batch(
        inputs["text"])[0]

  @classmethod
  def truncated_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """Texts with tokens after the one window: untagged."""
    _, tokens, positions = _tagger(record, tokenizer, max_seq_length
                                   ).encode_batch(inputs["text"])
    return [len(p) < len(t) for t, p in zip(tokens, positions)]

  @classmethod
  def held_out_inputs(cls, record, max_examples):
    """The recorded dev file's sentences as raw texts (tokens joined as
    serve_text splits them back: none for "char", a space for "word"; a
    sentence that does not split back is left out) and their BIO tags."""
    level = record.task_config.get("token_level")
    dev = (((record.training or {}).get("data") or {}).get("dev") or {}
           ).get("file")
    if level not in ("char", "word") or not dev or not os.path.exists(dev):
      return None
    data = conll.read_conll(dev, record.task_config.get("tag_scheme"))
    texts = [("" if level == "char" else " ").join(s.tokens)
             for s in data.sentences]
    split = tagging_graph.split_texts(texts, level)
    kept = [i for i, s in enumerate(data.sentences)
            if [t for t, _, _ in split[i]] == s.tokens][:max_examples]
    texts = [texts[i] for i in kept]
    if not texts:
      return None
    return ({"text": texts}, [conll.to_bio(data.sentences[i], data.scheme)
                              for i in kept] if data.has_tags else None,
            f"the run's dev split, {dev} ({len(texts)} sentence"
            f"{'s' if len(texts) > 1 else ''})")

  @classmethod
  def held_out_metric(cls, record, tokenizer, max_seq_length, inputs, gold):
    """Entity F1 of serving_default's tags on the texts (`encode_inputs`'
    one window; tokens past it are O, as albert-predict reads them) against
    the gold tags of the rows that have them."""
    labels = list(record.label_list)
    rows = [i for i, g in enumerate(gold) if g is not None]
    at_rows = _tagger(record, tokenizer, max_seq_length).encode_batch(
        inputs["text"])[2]
    positions = [at_rows[i] for i in rows]

    def entity_f1(outputs):
      ids = outputs[F.LOGITS].argmax(-1)
      predicted = [[labels[ids[i, p]] for p in at] +
                   ["O"] * (len(gold[i]) - len(at))
                   for i, at in zip(rows, positions)]
      return ner_data.entity_metrics([gold[i] for i in rows],
                                     predicted)["entity_f1"]

    return "entity_f1", entity_f1, len(rows)

  @classmethod
  def decode_outputs(cls, record, outputs, n):
    """Per text its entities [{"type", "text", "start", "end"}] (code
    points: text[start:end] is the entity)."""
    return [[{"type": outputs["entity_types"][i, j].decode(),
              "text": outputs["entity_texts"][i, j].decode(),
              "start": int(outputs["entity_starts"][i, j]),
              "end": int(outputs["entity_ends"][i, j])}
             for j in range(int(outputs["num_entities"][i]))]
            for i in range(n)]

  @classmethod
  def calibration_inputs(cls, record, fields, text_column, text_b_column):
    return {"text": fields[text_column]}  # a tagger takes no text_b

  @classmethod
  def legacy_record_task(cls, file_name, values):
    return cls.name if file_name == record_lib.TAGGER_CONFIG else None

  @classmethod
  def ids_decoder(cls, record, run, tokenizer, max_seq_length):
    """serve_text around the model's tag_ids: `TextTagger.encode_batch`,
    `run`, `TextTagger.tag_batch`."""
    tagger = _tagger(record, tokenizer, max_seq_length)

    def predict(inputs):
      features = tagger.encode_batch(inputs["text"])[0]
      return cls.decode_outputs(record, tagger.tag_batch(
          inputs["text"], run(**features)[F.TAG_IDS]), len(inputs["text"]))
    return predict

  @classmethod
  def scorer(cls, record):
    return TagScorer(record)


def _tagger(record, tokenizer, max_seq_length):
  """The recorded tagger's serve_text preprocessor (`TextTagger`), one per
  arguments in a process (`text_graph.kept`); record None: fine-tuning's,
  whose pieces need no level nor tags."""
  level, labels = ((record.task_config.get("token_level"),
                    tuple(record.label_list)) if record else ("char", ("O",)))
  return tagging_graph.text_graph.kept(
      ("tagger", tokenizer.fingerprint, max_seq_length, level, labels),
      lambda: tagging_graph.TextTagger.from_tokenizer(
          tokenizer, max_seq_length, level, labels))


class TagScorer(scoring.Scorer):
  """albert-predict's entity precision/recall/F1 (seqeval): gold tags one
  per token of the text (`tagging_graph.split_texts` at the model's level;
  space-separated or a JSON list) against the predicted entities' BIO
  tags."""
  gold_columns = ("tags", "label")
  verify_metric = "entity F1"

  def __init__(self, record):
    super().__init__(record)
    self.token_level = record.task_config.get("token_level") or "char"

  def read_gold(self, value, values, where):
    tags = (scoring.gold_list(value, where) if isinstance(value, list) or
            str(value).startswith("[") else str(value).split())
    tokens = len(tagging_graph.split_texts([values["text"]],
                                           self.token_level)[0])
    if len(tags) != tokens:
      raise scoring.PredictError(
          f"{where}: {len(tags)} gold tags, the text has {tokens} tokens "
          f"(one tag per {'character' if self.token_level == 'char' else 'token'}"
          ", whitespace skipped)")
    return tags

  def read_prediction(self, prediction, values, where):
    """BIO tags per token of the text of the predicted entities (code-point
    offsets)."""
    tokens = tagging_graph.split_texts([values["text"]], self.token_level)[0]
    tags = ["O"] * len(tokens)
    for entity in prediction:
      inside = [i for i, (_, s, e) in enumerate(tokens)
                if s >= entity["start"] and e <= entity["end"]]
      for n, i in enumerate(inside):
        tags[i] = ("B-" if n == 0 else "I-") + entity["type"]
    return tags

  def metrics(self):
    if not self.gold:
      return {}
    scores = ner_data.entity_metrics(self.gold, self.predicted)
    return {k: scores[k] for k in (
        "entity_precision", "entity_recall", "entity_f1", "token_accuracy",
        "num_sentences", "num_gold_entities", "num_predicted_entities")}

  def lines(self, scores):
    if not scores:
      return []
    return [f"entity_precision={scores['entity_precision']:.4f} "
            f"entity_recall={scores['entity_recall']:.4f} "
            f"entity_f1={scores['entity_f1']:.4f} on "
            f"{scores['num_sentences']} texts"]

  def fields(self, prediction):
    return {"entities": prediction}
