"""A checked runner of an exported .tflite: its input contract in one place.

    runner = TFLiteRunner("tflite/sentiment_dynamic.tflite")
    outputs = runner(input_ids=ids, input_mask=mask, segment_ids=segments)

The contract (`NAME.tflite.json` beside the model, written by export_tflite):
every input named in its "inputs", int32, of exactly its shape ([1,
max_seq_length]: one sequence, padded to the export length), no longer
than max_position_embeddings (the position table), token ids in
[0, vocab_size). The SavedModel checks the ids in its graph
(`serving.saved_model.checked_ids`); the TFLite converter drops those Assert
ops, and the interpreter reads a negative id as another row of the table
and fails a wrong length with XNNPack's "failed to reshape". So the checks
run here, in Python, before invoking: a TFLiteInputError (a ValueError)
names the input, what it got and what the model takes.
"""

import json
import os

import numpy as np


def sidecar_json(model_path):
  """The JSON of an exported .tflite/.onnx: PATH.json (m.tflite.json), or
  PATH's stem + .json (m.json) as exports before 2026-12-06 named it."""
  path = model_path + ".json"
  return path if os.path.exists(path) else (
      os.path.splitext(model_path)[0] + ".json")


class TFLiteInputError(ValueError):
  """An input the .tflite would read wrongly, or fail on without a name."""


class CheckedRunner:
  """A runner of an exported file's serving_default that checks its inputs
  against NAME.json's contract first (`check`), raising `error` (a
  ValueError class) naming the input. Subclasses set error, run and
  length_note, and may add a shape check (`check_shape`)."""

  error = ValueError
  length_note = ""  # after "(the model's position table"

  def __init__(self, path):
    self.path = path
    with open(sidecar_json(path), encoding="utf-8") as f:
      self.info = json.load(f)
    self.inputs = {spec["name"]: spec for spec in self.info["inputs"]}

  def check_shape(self, name, value):
    """Raises error when input `name` has a shape the model cannot take."""

  def check(self, features):
    """Raises error for the first input outside the contract."""
    takes = ", ".join(sorted(self.inputs))
    unknown = sorted(set(features) - set(self.inputs))
    if unknown:
      raise self.error(f"{unknown[0]}: not an input of {self.path} (it "
                       f"takes {takes})")
    for name in self.inputs:
      if name not in features:
        raise self.error(f"{name}: missing (the inputs of {self.path} are "
                         f"{takes})")
    length = (np.shape(features["input_ids"]) or [0])[-1]
    if self.max_positions and length > self.max_positions:
      raise self.error(
          f"input_ids: {length} positions, longer than "
          f"max_position_embeddings={self.max_positions} (the model's "
          f"position table{self.length_note})")
    for name in self.inputs:
      self.check_shape(name, features[name])
    ids = np.asarray(features["input_ids"])
    for what, bad in (("a negative token id", ids < 0), (
        f"a token id >= vocab_size={self.vocab_size}",
        ids >= (self.vocab_size or np.inf))):
      if bad.any():
        first = np.argwhere(bad)[0]
        raise self.error(f"input_ids: {what} ({int(ids[tuple(first)])} at "
                         f"position {first.tolist()})")

  def __call__(self, **features):
    """{output name: numpy array} of serving_default on the features."""
    self.check(features)
    return self.run({
        name: np.asarray(value, np.dtype(self.inputs[name]["dtype"]))
        for name, value in features.items()})


class TFLiteRunner(CheckedRunner):
  """serving_default of a .tflite exported by albert_tf.export_tflite."""

  error = TFLiteInputError

  def __init__(self, tflite_path, num_threads=None):
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
    super().__init__(tflite_path)
    self.vocab_size = self.info.get("vocab_size")
    # Absent from the .json of an older export: its fixed shape still holds
    # the length to what the model was exported with.
    self.max_positions = self.info.get("max_position_embeddings")
    runner = Interpreter(
        model_path=tflite_path, num_threads=num_threads).get_signature_runner(
            self.info.get("signature", "serving_default"))
    self.run = lambda feed: runner(**feed)

  @property
  def length_note(self):
    return f"; {self.path} takes {self.inputs['input_ids']['shape']}"

  def check_shape(self, name, value):
    shape, spec = list(np.shape(value)), self.inputs[name]
    if shape != spec["shape"]:
      raise TFLiteInputError(
          f"{name}: shape {shape}, but {self.path} takes {spec['shape']} "
          f"(one sequence, padded or cut to its max_seq_length="
          f"{self.info.get('max_seq_length')})")


def one_at_a_time(runner):
  """fn(**features [n, ...]) -> outputs [n, ...] of runner(**one example),
  called once per example (a .tflite's inputs are fixed at one)."""
  def run(**features):
    n = len(next(iter(features.values())))
    rows = [runner(**{k: np.asarray(v)[i:i + 1] for k, v in features.items()})
            for i in range(n)]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
  return run
