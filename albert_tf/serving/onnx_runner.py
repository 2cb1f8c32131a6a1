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

import numpy as np

from albert_tf.serving.tflite_runner import CheckedRunner


class OnnxInputError(ValueError):
  """An input the .onnx would read wrongly, or fail on without a name."""


class OnnxRunner(CheckedRunner):
  """serving_default of a .onnx exported by albert_tf.export_onnx."""

  error = OnnxInputError

  def __init__(self, onnx_path, num_threads=None):
    try:
      import onnxruntime as ort  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise ImportError(f"{onnx_path}: serving an .onnx needs onnxruntime: "
                        "pip install 'albert_tf[onnx]'") from None
    super().__init__(onnx_path)
    config = self.info.get("albert_config") or {}
    self.vocab_size = config.get("vocab_size")
    self.max_positions = config.get("max_position_embeddings")
    options = ort.SessionOptions()
    if num_threads:
      options.intra_op_num_threads = num_threads
      options.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx_path, options,
                                   providers=["CPUExecutionProvider"])
    self.output_names = [o.name for o in session.get_outputs()]
    self.run = lambda feed: dict(zip(self.output_names,
                                     session.run(None, feed)))

  def check_shape(self, name, value):
    spec = self.inputs[name]["shape"]
    if np.ndim(value) != len(spec):
      raise OnnxInputError(
          f"{name}: rank {np.ndim(value)} (shape {list(np.shape(value))}), "
          f"but {self.path} takes {spec} (None: any size)")
