"""A checked runner of an exported .onnx (`albert_tf.export_onnx`).

    runner = OnnxRunner("onnx/sentiment.onnx")
    outputs = runner(input_ids=ids, input_mask=mask, segment_ids=segments)

The contract is `NAME.onnx.json` beside the model: every input it names, int32,
of its rank (any batch and length), no longer than max_position_embeddings,
token ids in [0, vocab_size). The SavedModel checks ids in its graph; the
converted graph has no such Assert (ONNX Runtime's Gather fails on an id out
of range with a message naming no input), so the checks run here and an
OnnxInputError (a ValueError) names the input, what it got and what the
model takes. ONNX Runtime is imported here only: without it, one line
names the `[onnx]` extra.
"""

import json
import os

import numpy as np

from albert_tf.serving.tflite_runner import check_token_ids, sidecar_json


class OnnxInputError(ValueError):
  """An input the .onnx would read wrongly, or fail on without a name."""


class OnnxRunner:
  """serving_default of a .onnx exported by albert_tf.export_onnx."""

  def __init__(self, onnx_path, num_threads=None):
    try:
      import onnxruntime as ort  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise ImportError(f"{onnx_path}: serving an .onnx needs onnxruntime: "
                        "pip install 'albert_tf[onnx]'") from None
    self.path = onnx_path
    with open(sidecar_json(onnx_path), encoding="utf-8") as f:
      self.info = json.load(f)
    self.inputs = {spec["name"]: spec for spec in self.info["inputs"]}
    config = self.info.get("albert_config") or {}
    self.vocab_size = config.get("vocab_size")
    self.max_positions = config.get("max_position_embeddings")
    options = ort.SessionOptions()
    if num_threads:
      options.intra_op_num_threads = num_threads
      options.inter_op_num_threads = 1
    self._session = ort.InferenceSession(
        onnx_path, options, providers=["CPUExecutionProvider"])
    self.output_names = [o.name for o in self._session.get_outputs()]

  def check(self, features):
    """Raises OnnxInputError for the first input outside the contract."""
    unknown = sorted(set(features) - set(self.inputs))
    if unknown:
      raise OnnxInputError(f"{unknown[0]}: not an input of {self.path} (it "
                           f"takes {', '.join(sorted(self.inputs))})")
    for name, spec in self.inputs.items():
      if name not in features:
        raise OnnxInputError(f"{name}: missing (the inputs of {self.path} "
                             f"are {', '.join(sorted(self.inputs))})")
      rank = np.ndim(features[name])
      if rank != len(spec["shape"]):
        raise OnnxInputError(
            f"{name}: rank {rank} (shape {list(np.shape(features[name]))}), "
            f"but {self.path} takes {spec['shape']} (None: any size)")
    ids = np.asarray(features["input_ids"])
    length = ids.shape[-1] if ids.ndim else 0
    if self.max_positions and length > self.max_positions:
      raise OnnxInputError(
          f"input_ids: {length} positions, longer than "
          f"max_position_embeddings={self.max_positions} (the model's "
          "position table)")
    check_token_ids(ids, self.vocab_size, OnnxInputError)

  def __call__(self, **features):
    """{output name: numpy array} of serving_default on the features."""
    self.check(features)
    feed = {name: np.asarray(value, np.dtype(self.inputs[name]["dtype"]))
            for name, value in features.items()}
    return dict(zip(self.output_names, self._session.run(None, feed)))
