"""Span question answering: SQuAD v1.1 / v2.0, CMRC 2018 and DRCD.

The family's flags, task and serving hooks: reading and windows
`data.squad`, logits -> answers `data.span_decode`, official scores (`f1`
picks the best checkpoint) `data.squad_metrics`, the heads
`modeling.span_qa`, serve_text(question, context) `serving.span_graph`. In
v2 the null-odds threshold behind predictions.json is tuned on the predict
file when it has answers (as the original does).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, Optional, Tuple

from absl import logging
from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.options import FinetuneOptions
from albert_tf.core import lazy
from albert_tf.data import input_timeout
from albert_tf.data import span_decode
from albert_tf.data import squad
from albert_tf.data import squad_metrics
from albert_tf.core import record as record_lib
from albert_tf.tasks.base import Task, first_given
from albert_tf.tasks import scoring

span_qa = lazy.module("albert_tf.modeling.span_qa")
tf = lazy.module("tensorflow")
saved_model = lazy.module("albert_tf.serving.saved_model")
span_graph = lazy.module("albert_tf.serving.span_graph")

# --data_dir's files when --train_file / --predict_file are not given.
TRAIN_JSON, DEV_JSON = "train.json", "dev.json"
# The original run_squad's defaults (a fine-tuned model's own come first).
MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64
# The record's task_config (export and serving read it), with defaults.
CONFIG_DEFAULTS = dict(
    version_2_with_negative=False, doc_stride=DOC_STRIDE,
    max_query_length=MAX_QUERY_LENGTH, max_answer_length=30, n_best_size=20,
    start_n_top=F.START_N_TOP, end_n_top=F.END_N_TOP)


@dataclasses.dataclass
class SquadOptions(FinetuneOptions):
  """Everything `run` needs; the fields define the command-line flags."""
  task_name: str = settings.field(
      "squad", "squad (the official SQuAD evaluation), cmrc2018 or drcd "
      "(CMRC 2018's: character F1 over mixed segmentation, EM without "
      "punctuation).", choices=squad_metrics.TASK_NAMES)
  data_dir: Optional[str] = settings.field(
      None, f"Directory with {TRAIN_JSON} and {DEV_JSON}, for "
      "--train_file and --predict_file when they are not given.")
  train_file: Optional[str] = settings.field(
      None, "SQuAD JSON for training.")
  predict_file: Optional[str] = settings.field(
      None, "SQuAD JSON to predict (and to evaluate when it has answers).")
  version_2_with_negative: bool = settings.field(
      False, "SQuAD 2.0: questions may have no answer (is_impossible); the "
      "v2 head with its answer-class logit.")
  doc_stride: Optional[int] = settings.field(
      None, "Pieces between the starts of a context's windows (the step "
      "between window starts as in the original, not HF's overlap; "
      f"default: as the model was fine-tuned, else {DOC_STRIDE}).",
      lower_bound=1)
  max_query_length: Optional[int] = settings.field(
      None, "Question pieces kept; longer questions are cut and counted "
      f"(default: as the model was fine-tuned, else {MAX_QUERY_LENGTH}).",
      lower_bound=1)
  n_best_size: int = settings.field(
      20, "Answers kept per question in nbest_predictions.json.",
      lower_bound=1, group="output")
  max_answer_length: int = settings.field(
      30, "Longest answer, in pieces.", lower_bound=1, group="output")
  start_n_top: int = settings.field(F.START_N_TOP, "v2: start beams.",
                                    lower_bound=1, group="output")
  end_n_top: int = settings.field(F.END_N_TOP, "v2: end beams per start.",
                                  lower_bound=1, group="output")
  baseline: bool = settings.field(
      True, "Score the SQuAD paper's sliding-window baseline (the run of "
      "context words, as long as the train split's most frequent answer, "
      "whose neighbours share the most words and bigrams with the question) "
      "on the evaluated splits (eval_results.json's baseline_*; seconds).",
      group="training")


@registry.register_family(
    "span_qa", options=SquadOptions, command="albert-squad",
    modules=("albert_tf.run_squad", "albert_tf.data.squad",
             "albert_tf.data.span_decode",
             "albert_tf.data.squad_metrics", "albert_tf.modeling.span_qa",
             "albert_tf.serving.span_graph", "albert_tf.serving.flat"))
class SpanQATask(Task):
  """SQuAD JSON: the train split is `train_file`; "dev" and "test" are both
  `predict_file` (evaluated when it has answers, predicted always)."""

  name = "span_qa"
  best_metric = "f1"
  export_name = "span_qa"
  output_files = (span_decode.PREDICTIONS_FILE, span_decode.NBEST_FILE,
                  span_decode.NULL_ODDS_FILE)

  default_max_seq_length = MAX_SEQ_LENGTH
  random_init_warning = (
      "Training span QA from random initial weights (no --init_checkpoint): "
      "the scores will be far below ALBERT's; give a pretrained checkpoint "
      "(convert_checkpoint) to fine-tune it")

  @classmethod
  def resolve_options(cls, o: SquadOptions, info):
    def pick(given, name):
      return given or (os.path.join(o.data_dir, name) if o.data_dir else given)
    o = dataclasses.replace(o, train_file=pick(o.train_file, TRAIN_JSON),
                            predict_file=pick(o.predict_file, DEV_JSON))
    if o.do_train and not o.train_file:
      raise squad.SquadError("--do_train needs --train_file (or --data_dir "
                             f"with {TRAIN_JSON})")
    if (o.do_eval or o.do_predict) and not o.predict_file:
      raise squad.SquadError("--do_eval and --do_predict need --predict_file "
                             f"(or --data_dir with {DEV_JSON})")
    own = cls.own_config(info)
    recorded = bool(own.get("version_2_with_negative"))
    if own and recorded != o.version_2_with_negative:
      raise squad.SquadError(
          f"--init_checkpoint={o.init_checkpoint} was fine-tuned with "
          f"--version_2_with_negative={str(recorded).lower()} (another head); "
          "give the same value")
    o = super().resolve_options(o, info)
    o = dataclasses.replace(o, **{
        k: first_given(getattr(o, k), own.get(k), CONFIG_DEFAULTS[k])
        for k in ("doc_stride", "max_query_length")})
    if o.max_seq_length < o.max_query_length + 3 + 1:
      raise ValueError(f"--max_seq_length={o.max_seq_length} leaves no room "
                       f"for context after --max_query_length="
                       f"{o.max_query_length} and [CLS], [SEP], [SEP]")
    return o

  @classmethod
  def from_options(cls, o: SquadOptions, tokenizer, info, dataset):
    return cls(o.task_name, tokenizer, o.train_file, o.predict_file,
               **{k: getattr(o, k) for k in CONFIG_DEFAULTS},
               **cls.option_fields(o))

  def read_splits(self, o) -> Dict[str, dict]:
    stats = {}
    for split in self.wanted_splits(o):
      data, windows = self.load_split(split)  # counts: questions, windows
      stats[split] = {"file": data.file, **data.counts, **windows.counts}
    if o.do_eval:
      self._check_dev_answers()
    return stats

  def fingerprint(self) -> str:
    return f"{self.name}:{self.task_name}:v{2 if self.v2 else 1}"

  def __init__(self, task_name: str, tokenizer, train_file: Optional[str],
               predict_file: Optional[str], **fields):
    """fields: the task_config's (else CONFIG_DEFAULTS), Task.__init__'s."""
    names = squad_metrics.TASK_NAMES
    if task_name not in names:
      raise ValueError(f"--task_name must be one of {', '.join(names)}, "
                       f"got {task_name!r}")
    task_config = {k: fields.pop(k, v) for k, v in CONFIG_DEFAULTS.items()}
    super().__init__(tokenizer, **fields)
    self.task_name, self.task_config = task_name, task_config
    self.v2 = task_config["version_2_with_negative"]
    self.files = {"train": train_file, "dev": predict_file,
                  "test": predict_file}
    # The v2 threshold on null_odds behind predictions.json: tuned on the
    # predict file when it has answers, else the last one tuned.
    self.null_threshold = 0.0

  def load_split(self, split: str):
    """(SquadData, Windows) of a split, read and windowed once."""
    path = self.files[split]
    # dev and test share --predict_file: one copy unless their limits differ.
    key = (path, self.max_examples[split])
    if key not in self._splits:
      if not path:
        flag = "--train_file" if split == "train" else "--predict_file"
        raise squad.SquadError(f"{flag} is needed for the {split} split")
      # A hung pipe or mount: an error naming the file, not a wait forever.
      data = input_timeout.read_within(
          f"the {split} file {path}", lambda: squad.read_squad(
              path, self.v2, split == "train"), self.input_timeout_secs)
      data.examples = data.examples[:self.max_examples[split] or None]
      windows = squad.make_windows(
          data.examples, self.tokenizer, self.max_seq_length,
          self.task_config["doc_stride"], self.task_config["max_query_length"],
          is_training=split == "train", file=path)
      logging.info("[%s] %s: max_seq_length=%d, doc_stride=%d; counts %s",
                   split, path, self.max_seq_length,
                   self.task_config["doc_stride"],
                   dict(data.counts, **windows.counts))
      self._splits[key] = (data, windows)
    return self._splits[key]

  def has_answers(self, split: str) -> bool:
    return any(e.answers or e.is_impossible
               for e in self.load_split(split)[0].examples)

  def train_arrays(self):
    windows = self.load_split("train")[1]
    keep = windows.trainable  # counted and warned by make_windows
    return tuple({k: windows.features[k][keep] for k in names}
                 for names in (F.ENCODER_INPUTS, span_qa.LABELS))

  def build_model(self, config):
    return self.with_micro_batches(span_qa.AlbertSpanQA(
        config, self.v2, self.task_config["start_n_top"],
        self.task_config["end_n_top"], self.classifier_dropout))

  def answers(self, model, split: str):
    """(predictions {qid: text}, nbest, null_odds or None) of a split."""
    data, windows = self.load_split(split)
    return span_decode.decode(
        self.outputs(model, windows.features, span_qa.head_outputs(self.v2)),
        windows, data.examples, self.task_config)

  def _score(self, split, predictions,
             null_odds) -> Tuple[Dict[str, float], Dict[str, str]]:
    """(official scores, the predictions scored: v2, "" above the threshold
    tuned on this split, kept as `null_threshold`)."""
    gold = squad_metrics.gold_answers(self.load_split(split)[0].examples)
    metrics = squad_metrics.official_scores(self.task_name, self.v2, gold,
                                            predictions, null_odds)
    if "null_score_diff_threshold" in metrics:
      self.null_threshold = metrics["null_score_diff_threshold"]
      predictions = squad_metrics.apply_null_threshold(
          predictions, null_odds, self.null_threshold)
    return metrics, predictions

  def baselines(self, splits):
    """`baselines.sliding_window_scores` by the official evaluation (v2: it
    always answers); the answer length from the train split, if any."""
    from albert_tf.data import baselines  # pylint: disable=g-import-not-at-top
    train, path = [], self.files["train"]
    if path and os.path.exists(path):
      key = (path, self.max_examples["train"])
      # Read, not windowed, when the run did not train: no tokenizing.
      train = (self._splits[key][0] if key in self._splits else
               squad.read_squad(path, self.v2, True)).examples
    return baselines.sliding_window_scores(
        train[:self.max_examples["train"] or None],
        {s: self.load_split(s)[0].examples for s in splits
         if self.has_answers(s)},
        lambda examples, predictions: squad_metrics.official_scores(
            self.task_name, self.v2, squad_metrics.gold_answers(examples),
            predictions))

  def _check_dev_answers(self):
    if not self.has_answers("dev"):
      raise squad.SquadError(f"{self.files['dev']}: --do_eval needs answers "
                             "in the predict file")

  def evaluate(self, model, strategy):
    self._check_dev_answers()
    predictions, _, null_odds = self.answers(model, "dev")
    metrics, scored = self._score("dev", predictions, null_odds)
    gold = squad_metrics.gold_answers(self.load_split("dev")[0].examples)
    answers = list(scored.values())
    same = answers[0] if answers else ""
    # A question agrees with one of its gold answers ("" if unanswerable).
    self.warn_if_collapsed(model, answers, [
        same if same in (gold.get(q) or [""]) else None for q in scored],
        "dev questions", shown=f"the same answer, {same!r},")
    return metrics

  def predict(self, model, output_dir):
    predictions, nbest, null_odds = self.answers(model, "test")
    metrics = {}
    if self.has_answers("test"):
      metrics, predictions = self._score("test", predictions, null_odds)
    elif null_odds is not None:
      predictions = squad_metrics.apply_null_threshold(
          predictions, null_odds, self.null_threshold)
    span_decode.write_outputs(output_dir, predictions, nbest, null_odds)
    if null_odds is not None:
      metrics["null_score_diff_threshold"] = self.null_threshold
    return metrics

  def record(self):
    return record_lib.ModelInfo(
        task=self.name, task_name=self.task_name, text_pair=True,
        max_seq_length=self.max_seq_length, task_config=dict(self.task_config),
        **record_lib.tokenizer_fields(self.tokenizer))

  @classmethod
  def export_model(cls, config, record):
    own = record.task_config
    if "version_2_with_negative" not in own:
      raise ValueError(
          f"--model=span_qa needs the {record_lib.RECORD_FILE} run_squad "
          "writes beside --checkpoint (version_2_with_negative, doc_stride); "
          "none found")
    return span_qa.AlbertSpanQA(config, own["version_2_with_negative"],
                                own.get("start_n_top", F.START_N_TOP),
                                own.get("end_n_top", F.END_N_TOP))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    if text_pair is False:
      raise ValueError("--notext_pair: span QA's serve_text takes a question "
                       "and a context")
    reader = span_graph.TextSpanReader.from_tokenizer(
        tokenizer, max_seq_length, record.task_config)

    def run(features):  # a closure: ids_signature finds the model's config
      return model(features, training=False)

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size),
            "serve_text": saved_model.signature(
                lambda t: reader(t["question"], t["context"], run),
                reader.input_specs())}

  @classmethod
  def serve_text_inputs(cls, record):
    return ("question", "context")

  @classmethod
  def encode_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """serve_text's windows of each (question, context): [n_windows, L]."""
    windows = squad.text_windows(inputs, tokenizer, max_seq_length,
                                 record.task_config)[1]
    return {k: windows.features[k] for k in F.ENCODER_INPUTS}

  @classmethod
  def truncated_inputs(cls, record, tokenizer, max_seq_length, inputs):
    """Questions cut to max_query_length (a context is read in windows)."""
    limit = record.task_config.get("max_query_length", MAX_QUERY_LENGTH)
    ids = squad.span_reader(tokenizer).encode_with_offsets(
        tf.constant(list(inputs["question"]), tf.string))[0]
    return (ids.row_lengths().numpy() > limit).tolist()

  @classmethod
  def decode_outputs(cls, record, outputs, n):
    """Per pair the dict of `span_graph.TextSpanReader.__call__`."""
    return [{"answer": outputs["answer"][i].decode(),
             **{k: (int if k in ("start", "end") else float)(outputs[k][i])
                for k in ("start", "end", "score", "no_answer_score")
                if k in outputs}} for i in range(n)]

  @classmethod
  def ids_decoder(cls, record, run, tokenizer, max_seq_length):
    return lambda inputs: span_decode.serve_text_answers(
        run, *squad.text_windows(inputs, tokenizer, max_seq_length,
                                 record.task_config),
        record.task_config)

  @classmethod
  def scorer(cls, record):
    return SpanScorer(record)

  @classmethod
  def calibration_inputs(cls, record, fields, text_column, text_b_column):
    """The context: text_column; the question: text_b_column, else the one
    before the context."""
    context = len(fields) + text_column if text_column < 0 else text_column
    question = context - 1 if text_b_column is None else text_b_column
    if question < 0:
      raise IndexError(question)
    return {"question": fields[question], "context": fields[context]}


class SpanScorer(scoring.Scorer):
  """albert-predict's exact match / F1 of gold answers (one, or a JSON list;
  "" = no answer) by the model's official evaluation."""
  gold_columns = ("answers", "answer", "label")

  def read_gold(self, value, values, where):
    return [a for a in scoring.gold_list(value, where) if a]

  def read_prediction(self, prediction, values, where):
    return prediction["answer"]

  def metrics(self):
    if not self.gold:
      return {}
    v2 = self.record.task_config.get("version_2_with_negative")
    if not (v2 or all(self.gold) or
            self.record.task_name in squad_metrics.CMRC_TASKS):
      raise scoring.PredictError(
          "span QA: a gold answer is empty (only a SQuAD 2.0 model scores "
          "'no answer')")
    scores = squad_metrics.official_scores(
        self.record.task_name, v2,
        {str(i): a for i, a in enumerate(self.gold)},
        {str(i): p for i, p in enumerate(self.predicted)})
    return {"exact_match": scores.get("exact_match", scores.get("exact")),
            "f1": scores["f1"], "total": scores["total"]}

  def lines(self, scores):
    return ([f"exact_match={scores['exact_match']:.2f} "
             f"f1={scores['f1']:.2f} on {scores['total']} questions"]
            if scores else [])
