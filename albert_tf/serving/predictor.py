"""What `albert_tf.load` returns: a model that predicts on raw strings.

`Predictor.predict` runs the family's serve_text (or, for a model without
one, encodes in Python with `Task.encode_inputs` and runs serving_default
on the ids; or calls the family's `Task.ids_decoder`) and decodes with
`Task.decode_outputs`; `encode` and `embed` give the family's Python
encoding and the encoder's outputs on it. `albert_tf.inference` builds one
for each kind of model folder or file.
"""

import contextlib
import dataclasses
import itertools
import time

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.core import lazy
from albert_tf.core import quiet_logs
from albert_tf.core.record import ModelInfo

tf = lazy.module("tensorflow")

BATCH_SIZE = 64
OPTIONAL = "text_b"  # the one serve_text input a caller may leave out


class LoadError(ValueError):
  """A path load() cannot read, or a request its model cannot answer."""


class Predictor:
  """What `load` returns.

  Attributes:
    kind: the registered family's name, "fill_mask" or "encoder".
    task: the family's Task subclass (`albert_tf.tasks.base.Task` for an
      encoder or fill-mask model: `albert_tf.inference` passes it); record:
      its ModelInfo.
    inputs: the names of the inputs predict() takes, in order.
    labels: the record's label_list (class names, BIO tags, choice names).
    max_seq_length, tokenizer, text_pair, token_level: how texts are read.
    checkpoint: the prefix the weights came from; model: the Keras model
      (None for a SavedModel).
  """

  def __init__(self, path, kind, tokenizer, max_seq_length, record=None,
               task=None, inputs=None, checkpoint=None, model=None,
               serve_text=None, fill=None, encoder=None, keep=None,
               what=None, ids_fn=None, raw_fn=None):
    self.path, self.kind, self.tokenizer = path, kind, tokenizer
    self.what = what or f"the {kind} model there"
    self.max_seq_length = max_seq_length
    self.record = record or ModelInfo()
    self.task = task  # the base Task for an encoder or fill-mask model
    self.labels = list(self.record.label_list)
    self.inputs = tuple(inputs or self.task.serve_text_inputs(
        dataclasses.replace(self.record, text_pair=True)))
    self.text_pair = "text_b" in self.inputs
    self.token_level = self.record.task_config.get("token_level")
    self.checkpoint, self.model = checkpoint, model
    self._serve_text, self._fill, self._encoder = serve_text, fill, encoder
    # A family whose export has no serve_text (C3, CHID): predict encodes
    # as training did (`Task.encode_inputs`) and runs serving_default on the
    # ids.
    self._ids_fn = ids_fn
    # A family decoded in Python around a runner of serving_default (an
    # .onnx tagger or span QA model): raw inputs -> results.
    self._raw_fn = raw_fn
    self._keep = keep  # the loaded SavedModel its functions belong to

  def predict(self, texts, texts_b=None, *more, top_k=5, **named):
    """One result per example (the module docstring says which)."""
    if self.kind == "fill_mask":
      if texts_b is not None or more or named:
        raise LoadError(f"{self.path}: fill-mask takes no texts_b")
      return self._fill(_strings(texts, "texts"), top_k)
    if self._raw_fn is not None:
      return self._raw_fn(self._columns(texts, texts_b, more, named, False))
    if self._serve_text is None and self._ids_fn is None and (
        self.path.endswith((".onnx", ".tflite"))):
      raise LoadError(f"{self.path}: predict() on an .onnx or .tflite "
                      f"cannot decode this {self.kind} model's outputs (its "
                      "Task neither decodes_serving_default nor has an "
                      "ids_decoder for them); serving.onnx_runner.OnnxRunner "
                      "runs its serving_default, export_saved_model serves "
                      "its text")
    if self._serve_text is None and self._ids_fn is None:
      raise LoadError(f"{self.path}: {self.what} has no classifier, tagger "
                      "or MLM head for predict(); embed() gives its encoder "
                      "outputs")
    inputs = self._columns(texts, texts_b, more, named, optional=False)
    n = len(inputs[self.inputs[0]])
    results, untagged = [], []
    for start in range(0, n, BATCH_SIZE):
      batch = {k: v[start:start + BATCH_SIZE] for k, v in inputs.items()}
      if self._serve_text is not None:
        out = self._serve_text(**{k: tf.constant(v, tf.string)
                                  for k, v in batch.items()})
      else:
        out = self._ids_fn({k: tf.constant(v) for k, v in
                            self.task.encode_inputs(
                                self.record, self.tokenizer,
                                self.max_seq_length, batch).items()})
      out = {k: v.numpy() for k, v in out.items()}
      size = min(BATCH_SIZE, n - start)
      results += self.task.decode_outputs(self.record, out, size)
      if "num_untagged_chars" in out:
        untagged += [start + i for i in np.flatnonzero(
            out["num_untagged_chars"])]
    if untagged:
      logging.warning(
          "%d of %d texts are longer than the %d pieces the tagger reads: "
          "their tails are not tagged (texts %s); split them first",
          len(untagged), n, self.max_seq_length - 2,
          ", ".join(map(str, untagged[:3])))
    return results

  def _columns(self, texts, texts_b, more, named, optional):
    """{input name: list} of predict's (serve_text's inputs) or encode's
    (the family's, text_b optional) arguments."""
    given = [texts] + ([texts_b] if texts_b is not None or more else []) + [
        *more]
    names = self.inputs if not optional else tuple(
        self.task.serve_text_inputs(
            dataclasses.replace(self.record, text_pair=True)))
    unknown = sorted(set(named) - set(names))
    if unknown:
      raise LoadError(f"{self.path}: no input {unknown[0]!r} (the "
                      f"{self.kind} model takes {', '.join(names)})")
    if (len(given) == 1 and not named and len(names) > 1 and
        not isinstance(texts, (str, bytes))):
      rows = list(texts)
      if rows and all(isinstance(r, (tuple, list)) and
                      len(r) == len(names) for r in rows):
        given = [list(c) for c in zip(*rows)]  # a list of tuples
    if len(given) > len(names):
      raise LoadError(f"{self.path}: a single-text model takes no texts_b"
                      if names == ("text",) else
                      f"{self.path}: the {self.kind} model takes "
                      f"{len(names)} inputs ({', '.join(names)}), got "
                      f"{len(given)}")
    values = dict(zip(names, given), **named)
    missing = [k for k in names if k not in values and
               not (optional and k == OPTIONAL)]
    if missing:
      raise LoadError(f"{self.path}: a sentence-pair model takes texts_b"
                      if missing == [OPTIONAL] else
                      f"{self.path}: the {self.kind} model takes "
                      f"{', '.join(names)} (one list each); "
                      f"{', '.join(missing)} missing")
    first = _strings(values[names[0]], names[0])
    out = {names[0]: first}
    for k in names[1:]:
      if k in values:
        out[k] = _strings(values[k], k, len(first), names[0])
    return out

  def encode(self, texts, texts_b=None, *more, **named):
    """The family's Python encoding of the inputs (`Task.encode_inputs`):
    {name: int32 [n, length]} ([n, choices, length] for multiple choice,
    [n_windows, length] for span QA).

    The text families' are serve_text's own encoder's
    (`text_graph.encode_texts`: [CLS] a [SEP] (b [SEP])).
    """
    inputs = self._columns(texts, texts_b, more, named, optional=True)
    return self.task.encode_inputs(self.record, self.tokenizer,
                                   self.max_seq_length, inputs)

  def embed(self, texts, texts_b=None, *more, **named):
    """The encoder's float32 `sequence_output` [n, length, hidden] and
    `pooled_output` [n, hidden] on the rows of `encode(...)` (each choice
    of a multiple-choice question, each window of span QA, one row)."""
    if self._encoder is None:
      raise LoadError(f"{self.path}: this SavedModel serves the {self.kind} "
                      "outputs only; load the output_dir it was exported "
                      "from to embed")
    features = self.encode(texts, texts_b, *more, **named)
    features = {k: v.reshape([-1, v.shape[-1]]) for k, v in features.items()}
    n = len(features[F.INPUT_IDS])
    chunks = [self._encoder({k: tf.constant(v[i:i + BATCH_SIZE])
                             for k, v in features.items()})
              for i in range(0, max(n, 1), BATCH_SIZE)]
    return {k: np.concatenate([np.asarray(c[k], np.float32) for c in chunks])
            for k in F.ENCODER_OUTPUTS}


def _strings(values, name, length=None, first="texts"):
  if isinstance(values, (str, bytes)):
    raise LoadError(f"{name} must be a list of strings, got one string")
  values = list(values)
  if length is not None and len(values) != length:
    raise LoadError(f"{name} has {len(values)} strings, {first} {length}")
  for i, value in enumerate(values):
    _check_string(value, f"{name}[{i}]")
  return values


def _check_string(value, where):
  """LoadError naming `where` unless value is a str UTF-8 can encode (a
  list or tuple of them: multiple choice's options per question).

  Without it None, a number or bytes fail in a TF conversion or deep in
  the tokenizer, and a lone surrogate ("\\ud800") in an encode, none of
  them naming the input.
  """
  if isinstance(value, np.ndarray) and value.ndim == 0:
    value = value.item()
  if isinstance(value, (list, tuple, np.ndarray)):
    for j, item in enumerate(value):
      _check_string(item, f"{where}[{j}]")
    return
  if isinstance(value, (bytes, bytearray)):
    raise LoadError(f"{where} is bytes, not a string (decode it first: "
                    f"{bytes(value[:20])!r})")
  if not isinstance(value, str):
    raise LoadError(f"{where} is {value!r} ({type(value).__name__}), not a "
                    "string")
  try:
    value.encode("utf-8")
  except UnicodeEncodeError as e:
    raise LoadError(
        f"{where} holds an unpaired surrogate {value[e.start]!r} at "
        f"character {e.start} (not text UTF-8 can encode)") from None


def predict_batches(predictor, rows, batch_size, interval):
  """Yields (number, values, gold, prediction, cut) of each (number,
  values, gold) of rows, predicted batch_size at a time, with a progress
  line (rows, rows/s) every `interval` seconds."""
  start = last = time.monotonic()
  done, batch = 0, []
  for row in itertools.chain(rows, [None]):
    if row is not None:
      batch.append(row)
    if not batch or row is not None and len(batch) < batch_size:
      continue
    columns = [[values[n] for _, values, _ in batch] for n in predictor.inputs]
    # The first batch runs TF's kernels for the first time: oneDNN's
    # "supports DT_INT64 only on platforms with AVX-512" note, hidden.
    with (quiet_logs.cpp_lines_hidden() if not done else
          contextlib.nullcontext()):
      results = predictor.predict(*columns)
    truncated = predictor.task.truncated_inputs(
        predictor.record, predictor.tokenizer, predictor.max_seq_length,
        dict(zip(predictor.inputs, columns))) or [False] * len(batch)
    for (number, values, gold), prediction, is_cut in zip(batch, results,
                                                          truncated):
      yield number, values, gold, prediction, is_cut
    done += len(batch)
    batch = []
    now = time.monotonic()
    if row is not None and now - last >= interval:
      last = now
      logging.info("predict: %d rows, %.1f rows/s", done,
                   done / max(now - start, 1e-9))
