"""Span question answering: SQuAD v1.1 / v2.0, CMRC 2018 and DRCD.

Reading, windows and answer offsets are `albert_tf.data.squad`, logits ->
answers `albert_tf.data.span_decode`, the official scores
`albert_tf.data.squad_metrics`; this file is what the trainer needs on top:

  * inputs: every window of the train file in memory, batched as a pure
    function of (seed, step) (`tasks.base.step_indexed_inputs`), labelled
    with start/end piece positions ([CLS] when the window does not hold the
    answer) and is_impossible;
  * model: `AlbertSpanQA`, v1's start/end head or v2's XLNet-style head with
    its answer-class logit (`modeling.span_qa`); its own train_step computes
    the original's losses;
  * metrics: the official SQuAD v1.1 (exact_match, f1) or v2.0 (exact, f1,
    HasAns_*, NoAns_*, best_* with thresholds) evaluation, or CMRC 2018's
    (`--task_name=cmrc2018|drcd`); `f1` picks the best checkpoint;
  * predictions: predictions.json, nbest_predictions.json and, in v2,
    null_odds.json; the v2 threshold is tuned on the predict file when it
    has answers (as the original does) and recorded in eval_results.json;
  * record: version_2_with_negative, doc_stride, max_query_length,
    max_answer_length, n_best_size and the v2 beams, in task_config;
  * export (`--model=span_qa`): serving_default returns the head's logits;
    serve_text(question, context) the answer text with its character span
    (`albert_tf.serving.span_graph`).
"""

from typing import Dict, Optional, Tuple

from absl import logging

from albert_tf import features as F
from albert_tf.data import span_decode
from albert_tf.data import squad
from albert_tf.data import squad_metrics
from albert_tf.modeling import span_qa
from albert_tf.serving import saved_model
from albert_tf.tasks import record as record_lib
from albert_tf.tasks.base import Task, batched_outputs, step_indexed_inputs

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


class SpanQATask(Task):
  """A SQuAD-JSON train file and predict (dev) file, one tokenizer.

  The train split is `train_file`; "dev" and "test" are both
  `predict_file` (the original's --predict_file: evaluated when it has
  answers, predicted always).
  """

  name = "span_qa"
  best_metric = "f1"
  export_name = "span_qa"
  output_files = (PREDICTIONS_FILE, NBEST_FILE, NULL_ODDS_FILE)

  def __init__(self, task_name: str, tokenizer, train_file: Optional[str],
               predict_file: Optional[str], max_seq_length: int = 384,
               doc_stride: int = 128, max_query_length: int = 64,
               version_2_with_negative: bool = False, n_best_size: int = 20,
               max_answer_length: int = 30, start_n_top: int = 5,
               end_n_top: int = 5, eval_batch_size: int = 64,
               classifier_dropout: float = 0.1, seed: int = 12345,
               max_train_examples: int = 0, max_eval_examples: int = 0,
               max_predict_examples: int = 0):
    if task_name not in squad_metrics.TASK_NAMES:
      raise ValueError(f"--task_name must be one of "
                       f"{', '.join(squad_metrics.TASK_NAMES)}, "
                       f"got {task_name!r}")
    self.task_name = task_name
    self.tokenizer = tokenizer
    self.files = {"train": train_file, "dev": predict_file,
                  "test": predict_file}
    self.max_seq_length = max_seq_length
    self.doc_stride = doc_stride
    self.max_query_length = max_query_length
    self.version_2_with_negative = version_2_with_negative
    self.n_best_size = n_best_size
    self.max_answer_length = max_answer_length
    self.start_n_top = start_n_top
    self.end_n_top = end_n_top
    self.eval_batch_size = eval_batch_size
    self.classifier_dropout = classifier_dropout
    self.seed = seed
    self.max_examples = {"train": max_train_examples,
                         "dev": max_eval_examples,
                         "test": max_predict_examples}
    # The v2 threshold on null_odds behind predictions.json: tuned on the
    # predict file when it has answers, else the last one tuned.
    self.null_threshold = 0.0
    self._splits = {}
    self._train_tensors = None
    self._predict_fn = self._predict_model = None

  # --------------------------------------------------------- data
  def load_split(self, split: str):
    """(SquadData, Windows) of a split, read and windowed once."""
    path = self.files[split]
    # dev and test read the same --predict_file: one copy unless their
    # example limits differ.
    key = (path, self.max_examples[split])
    if key not in self._splits:
      if not path:
        flag = "--train_file" if split == "train" else "--predict_file"
        raise squad.SquadError(f"{flag} is needed for the {split} split")
      data = squad.read_squad(path, self.version_2_with_negative,
                              is_training=split == "train")
      if self.max_examples[split]:
        data.examples = data.examples[:self.max_examples[split]]
      windows = squad.make_windows(
          data.examples, self.tokenizer, self.max_seq_length,
          self.doc_stride, self.max_query_length,
          is_training=split == "train", file=path)
      logging.info("[%s] %s: %d questions, %d windows of max_seq_length=%d "
                   "(doc_stride=%d); counts %s", split, path,
                   len(data.examples), len(windows.example_index),
                   self.max_seq_length, self.doc_stride,
                   dict(data.counts, **windows.counts))
      self._splits[key] = (data, windows)
    return self._splits[key]

  def has_answers(self, split: str) -> bool:
    data = self.load_split(split)[0]
    return bool(data.examples) and any(e.answers or e.is_impossible
                                       for e in data.examples)

  def stats(self, split: str) -> dict:
    data, windows = self.load_split(split)
    return {"file": data.file, "questions": len(data.examples),
            "windows": int(len(windows.example_index)),
            **data.counts, **windows.counts}

  def steps_per_epoch(self, global_batch_size: int) -> int:
    n = int(self.load_split("train")[1].trainable.sum())
    return max(1, -(-n // global_batch_size))

  def build_inputs(self, split, strategy, global_batch_size, start_step=0,
                   num_steps=0):
    if split != "train":
      raise ValueError(f"build_inputs: only the train split is distributed, "
                       f"got {split!r}")
    if self._train_tensors is None:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      windows = self.load_split("train")[1]
      keep = windows.trainable  # counted and warned by make_windows
      self._train_tensors = (
          {k: tf.constant(windows.features[k][keep])
           for k in F.ENCODER_INPUTS},
          {k: tf.constant(windows.features[k][keep])
           for k in span_qa.LABELS})
    return step_indexed_inputs(*self._train_tensors, strategy,
                               global_batch_size, start_step, num_steps,
                               self.seed)

  # --------------------------------------------------------- model
  def build_model(self, config):
    return span_qa.AlbertSpanQA(
        config, self.version_2_with_negative, self.start_n_top,
        self.end_n_top, classifier_dropout=self.classifier_dropout)

  # --------------------------------------------------------- eval / predict
  def answers(self, model, split: str):
    """(predictions {qid: text}, nbest, null_odds or None) of a split."""
    data, windows = self.load_split(split)
    names = ((span_qa.START_LOGITS, span_qa.END_LOGITS)
             if not self.version_2_with_negative else
             (span_qa.START_TOP_LOG_PROBS, span_qa.START_TOP_INDEX,
              span_qa.END_TOP_LOG_PROBS, span_qa.END_TOP_INDEX,
              span_qa.CLS_LOGITS))
    if self._predict_model is not model:
      self._predict_fn = batched_outputs(model, names)
      self._predict_model = model
    out = self._predict_fn(windows.features, self.eval_batch_size)
    where = (windows.example_index, windows.piece_spans,
             windows.is_max_context, [e.context for e in data.examples],
             [e.qas_id for e in data.examples])
    if not self.version_2_with_negative:
      predictions, nbest = span_decode.decode_v1(
          out[span_qa.START_LOGITS], out[span_qa.END_LOGITS], *where,
          n_best_size=self.n_best_size,
          max_answer_length=self.max_answer_length)
      return predictions, nbest, None
    return span_decode.decode_v2(
        *(out[name] for name in names), *where,
        n_best_size=self.n_best_size,
        max_answer_length=self.max_answer_length)

  def _score(self, split, predictions,
             null_odds) -> Tuple[Dict[str, float], Dict[str, str]]:
    """(the official metrics, the predictions they score). v2: the
    threshold is tuned on this split (best_f1_thresh, as the original), and
    the predictions answer "" where null_odds exceed it."""
    data = self.load_split(split)[0]
    gold = squad_metrics.gold_answers(data.examples)
    if self.task_name in ("cmrc2018", "drcd"):
      return squad_metrics.cmrc2018(gold, predictions), predictions
    if not self.version_2_with_negative:
      return squad_metrics.squad_v1(gold, predictions), predictions
    tuned = squad_metrics.squad_v2(gold, predictions, null_odds)
    self.null_threshold = float(tuned["best_f1_thresh"])
    thresholded = squad_metrics.apply_null_threshold(
        predictions, null_odds, self.null_threshold)
    metrics = squad_metrics.squad_v2(gold, thresholded)
    metrics.update({k: v for k, v in tuned.items() if k.startswith("best_")})
    metrics["null_score_diff_threshold"] = self.null_threshold
    return metrics, thresholded

  def evaluate(self, model, strategy):
    if not self.has_answers("dev"):
      raise squad.SquadError(f"{self.files['dev']}: --do_eval needs answers "
                             "in the predict file")
    predictions, _, null_odds = self.answers(model, "dev")
    return self._score("dev", predictions, null_odds)[0]

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

  # --------------------------------------------------------- record / export
  def record(self):
    return record_lib.ModelInfo(
        task=self.name, task_name=self.task_name,
        max_seq_length=self.max_seq_length,
        text_pair=True,
        task_config={
            "version_2_with_negative": self.version_2_with_negative,
            "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
            "max_answer_length": self.max_answer_length,
            "n_best_size": self.n_best_size,
            "start_n_top": self.start_n_top, "end_n_top": self.end_n_top},
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
                                own.get("start_n_top", 5),
                                own.get("end_n_top", 5))

  @classmethod
  def export_signatures(cls, model, record, tokenizer, max_seq_length,
                        text_pair):
    if text_pair is False:
      raise ValueError("--notext_pair: span QA's serve_text takes a question "
                       "and a context")
    # Imported here: only export needs TF Text (the in-graph tokenizer).
    from albert_tf.serving.span_graph import TextSpanReader  # pylint: disable=g-import-not-at-top
    reader = TextSpanReader.from_tokenizer(tokenizer, max_seq_length,
                                           record.task_config)

    def run(features):
      return model(features, training=False)

    return {"serving_default": saved_model.ids_signature(
                run, vocab_size=model.config.vocab_size),
            "serve_text": saved_model.signature(
                lambda t: reader(t["question"], t["context"], run),
                reader.input_specs())}

