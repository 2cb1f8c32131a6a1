"""What a task family serves: its export and its serving from raw inputs.

`albert_tf.tasks.base.Task` is a `ServingTask`; the methods here are
classmethods, called through the registry with the record beside the
checkpoint (task_record.json, or an export's albert_export.json), without
data: export_saved_model calls `export_model` and `export_signatures`;
`albert_tf.load(...).predict/encode`, albert-predict, export_tflite and
export_onnx the rest. The defaults are sentence (pair) classification's; a
family overrides them beside its export code.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core.record import ModelInfo

keras = lazy.module("keras")


class ServingTask:
  """The export and serving half of a `Task`."""

  #: export_saved_model's --model value that means this family.
  export_name: str = ""
  #: Whether export_keras_hub writes the whole model as keras-hub's
  #: AlbertTextClassifier (head included); else the backbone only.
  keras_hub_text_classifier: bool = False
  #: Whether `decode_outputs` reads serving_default's own outputs (so an
  #: export_onnx `.onnx`, which has no serve_text, predicts through it);
  #: else `albert_tf.load` decodes an .onnx or .tflite only through the
  #: family's `ids_decoder`.
  decodes_serving_default: bool = False

  @classmethod
  def legacy_record_task(cls, file_name: str, values: dict) -> Optional[str]:
    """The family name of an older output's record file of this family
    (`albert_tf.core.record.LEGACY_RECORD_FILES`, its parsed `values`); None
    for another's (the default)."""
    del file_name, values
    return None

  @classmethod
  def read_dataset(cls, dataset, data_dir: str):
    """`albert-predict --task=<dataset>`: {split: (examples, stats)} of the
    dataset's files found in data_dir, read by its own reader (ids kept);
    None when this family's datasets are read by fine-tuning only."""
    del dataset, data_dir
    return None

  @classmethod
  def export_model(cls, config, record: ModelInfo) -> keras.Model:
    """The model to restore and serve (random weights until restored).

    Raises ValueError, naming what is missing, when the record cannot say
    (no labels, say).
    """
    raise NotImplementedError

  @classmethod
  def export_signatures(cls, model: keras.Model, record: ModelInfo,
                        tokenizer, max_seq_length: int,
                        text_pair: Optional[bool]) -> Dict[str, Callable]:
    """{signature name: tf.function with an input_signature} to serve.

    Must hold "serving_default" (int32 ids in, core TF ops only); may hold
    "serve_text" (strings in, tokenized in the graph by max_seq_length).
    text_pair: whether serve_text takes `text_b`; None: the family's
    default (the record's). Raises ValueError for a request it cannot serve.
    A family may also take `length_buckets` (a sorted list of lengths
    ending at max_seq_length): its serve_text then pads each batch to the
    smallest that holds the longest row (export_saved_model passes it only
    to families whose export_signatures accept it).
    """
    raise NotImplementedError

  # Serving from raw inputs.
  #: predict() fills [MASK]s (`training.export.fill_mask`) instead of
  #: calling serve_text.
  fills_masks: bool = False

  @classmethod
  def serve_text_inputs(cls, record: ModelInfo) -> Tuple[str, ...]:
    """The string inputs of serve_text, in the order predict() takes them:
    `text`, and `text_b` for a pair task."""
    return ("text", "text_b") if record.text_pair else ("text",)

  @classmethod
  def encode_inputs(cls, record: ModelInfo, tokenizer, max_seq_length: int,
                    inputs: Dict[str, list]) -> Dict[str, np.ndarray]:
    """serve_text's encoding, run from Python (for runtimes without TF
    Text: ONNX, TFLite): {name: int32 array} of the model inputs
    (`F.ENCODER_INPUTS`) for the raw inputs {serve_text input name: one
    value per example}. Default: `text_graph.encode_texts` ([CLS] a [SEP]
    (b [SEP])), [n, max_seq_length]."""
    return cls._encoded_texts(tokenizer, max_seq_length, inputs)[0]

  @classmethod
  def truncated_inputs(cls, record: ModelInfo, tokenizer, max_seq_length: int,
                       inputs: Dict[str, list]) -> Optional[list]:
    """Which examples `encode_inputs` cuts (one bool each; albert-predict
    counts them, as training counts its own); None when the family encodes
    its own way and does not say. Default: the cut of `encode_texts`."""
    if getattr(cls.encode_inputs, "__func__", None) is not (
        ServingTask.encode_inputs.__func__):
      return None
    return [bool(n) for n in
            cls._encoded_texts(tokenizer, max_seq_length, inputs)[1]]

  @staticmethod
  def _encoded_texts(tokenizer, max_seq_length, inputs):
    from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
    return text_graph.encode_texts(
        text_graph.shared_encoder(tokenizer, max_seq_length),
        inputs["text"], inputs.get("text_b") or None)

  @classmethod
  def decode_outputs(cls, record: ModelInfo, outputs: Dict[str, np.ndarray],
                     n: int) -> list:
    """serve_text's outputs for a batch of n examples (numpy) -> one
    Python value per example. Default: {output name: its row}."""
    return [{k: v[i].tolist() for k, v in outputs.items()} for i in range(n)]

  @classmethod
  def ids_decoder(cls, record: ModelInfo, run: Callable, tokenizer,
                  max_seq_length: int) -> Optional[Callable]:
    """predict() of an .onnx or .tflite whose `decode_outputs` reads
    serve_text's outputs (`decodes_serving_default` false): fn({serve_text
    input name: list}) -> one result per example, encoding in Python and
    calling run(**serving_default inputs as numpy) -> {output: numpy};
    None when the family cannot (the default)."""
    del record, run, tokenizer, max_seq_length
    return None

  @classmethod
  def scorer(cls, record: ModelInfo):
    """albert-predict's scoring of this family's predictions against gold
    values (`albert_tf.tasks.scoring.Scorer`). Default: one label name per
    example for a model with labels, else none, said in one line."""
    from albert_tf.tasks import scoring  # pylint: disable=g-import-not-at-top
    if record.label_list:
      return scoring.LabelScorer(record)
    return scoring.Scorer(record, f"the {record.task} model has no labels "
                          "and its family no Task.scorer of its own")

  @classmethod
  def held_out_inputs(cls, record: ModelInfo, max_examples: int):
    """(raw inputs {serve_text name: list}, gold label names or None, a
    description) of up to max_examples of the run's own dev split, read
    back from the record, for checking an export
    (`serving.verify.held_out`); None when the family cannot say."""
    del record, max_examples
    return None

  @classmethod
  def held_out_metric(cls, record: ModelInfo, tokenizer, max_seq_length: int,
                      inputs, gold):
    """(metric name, serving_default outputs on `encode_inputs(inputs)` ->
    value, rows scored) for gold values that are not one label name per
    example (a tagger's tags per token; None: a row without gold), for
    checking an export (`serving.verify.held_out`); None: gold is one
    label per example, scored as accuracy."""
    del record, tokenizer, max_seq_length, inputs, gold
    return None

  @classmethod
  def tflite_input_shapes(cls, record: ModelInfo, max_seq_length: int,
                          input_names, max_predictions: int
                          ) -> Dict[str, list]:
    """The fixed shape of each serving_default input in a .tflite: one
    example, [1, max_seq_length] (`masked_lm_positions`: [1,
    max_predictions])."""
    return {n: [1, max_predictions if n == F.MASKED_LM_POSITIONS
                else max_seq_length] for n in input_names}

  @classmethod
  def calibration_inputs(cls, record: ModelInfo, fields, text_column: int,
                         text_b_column: Optional[int]) -> Dict[str, object]:
    """The raw inputs (serve_text's names) of one line of an int8
    calibration TSV (its fields); IndexError for a missing column.
    Default: `text` from text_column, `text_b` from text_b_column."""
    values = {"text": fields[text_column]}
    if text_b_column is not None:
      values["text_b"] = fields[text_b_column]
    return values

  @classmethod
  def calibration_examples(cls, record: ModelInfo, tokenizer,
                           max_seq_length: int, rows,
                           max_examples: int) -> list:
    """int8 calibration examples ({name: int32 array of one example,
    `tflite_input_shapes`}) of calibration_inputs' rows, at most
    max_examples."""
    if not rows:
      return []
    inputs = {k: [r.get(k) for r in rows] for k in rows[0]}
    features = cls.encode_inputs(record, tokenizer, max_seq_length, inputs)
    n = min(len(features[F.INPUT_IDS]), max_examples)
    return [{k: v[i:i + 1] for k, v in features.items()} for i in range(n)]
