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


def check_token_ids(ids, vocab_size, error):
  """Raises error (a ValueError class) naming the first id < 0 or >=
  vocab_size (when known) and its position."""
  ids = np.asarray(ids)
  bad = np.argwhere(ids < 0)
  if bad.size:
    raise error(f"input_ids: a negative token id ({int(ids[tuple(bad[0])])} "
                f"at position {bad[0].tolist()})")
  if vocab_size:
    bad = np.argwhere(ids >= vocab_size)
    if bad.size:
      raise error(f"input_ids: a token id >= vocab_size={vocab_size} "
                  f"({int(ids[tuple(bad[0])])} at position {bad[0].tolist()})")


class TFLiteRunner:
  """serving_default of a .tflite exported by albert_tf.export_tflite."""

  def __init__(self, tflite_path, num_threads=None):
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
    self.path = tflite_path
    with open(sidecar_json(tflite_path), encoding="utf-8") as f:
      self.info = json.load(f)
    self.inputs = {spec["name"]: spec for spec in self.info["inputs"]}
    self.vocab_size = self.info.get("vocab_size")
    # Absent from the .json of an older export: its fixed shape still holds
    # the length to what the model was exported with.
    self.max_positions = self.info.get("max_position_embeddings")
    self._runner = Interpreter(
        model_path=tflite_path, num_threads=num_threads).get_signature_runner(
            self.info.get("signature", "serving_default"))

  def check(self, features):
    """Raises TFLiteInputError for the first input outside the contract."""
    unknown = sorted(set(features) - set(self.inputs))
    if unknown:
      raise TFLiteInputError(
          f"{unknown[0]}: not an input of {self.path} (it takes "
          f"{', '.join(sorted(self.inputs))})")
    for name, spec in self.inputs.items():
      if name not in features:
        raise TFLiteInputError(f"{name}: missing (the inputs of {self.path} "
                               f"are {', '.join(sorted(self.inputs))})")
    length = (np.shape(features["input_ids"]) or [0])[-1]
    if self.max_positions and length > self.max_positions:
      raise TFLiteInputError(
          f"input_ids: {length} positions, longer than "
          f"max_position_embeddings={self.max_positions} (the model's "
          f"position table; {self.path} takes "
          f"{self.inputs['input_ids']['shape']})")
    for name, spec in self.inputs.items():
      shape = list(np.shape(features[name]))
      if shape != spec["shape"]:
        raise TFLiteInputError(
            f"{name}: shape {shape}, but {self.path} takes {spec['shape']} "
            f"(one sequence, padded or cut to its max_seq_length="
            f"{self.info.get('max_seq_length')})")
    check_token_ids(features["input_ids"], self.vocab_size, TFLiteInputError)

  def __call__(self, **features):
    self.check(features)
    return self._runner(**{
        name: np.asarray(value, np.dtype(self.inputs[name]["dtype"]))
        for name, value in features.items()})


def one_at_a_time(runner):
  """fn(**features [n, ...]) -> outputs [n, ...] of runner(**one example),
  called once per example (a .tflite's inputs are fixed at one)."""
  def run(**features):
    n = len(next(iter(features.values())))
    rows = [runner(**{k: np.asarray(v)[i:i + 1] for k, v in features.items()})
            for i in range(n)]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
  return run
