"""TensorFlow's and the converters' log lines kept out of a command's output.

    import_tensorflow_quietly()   # before a command's main (cli_errors.run_main)

TF prints start-up lines from C++ before its logging is initialised (the
CUDA stub, cuInit, oneDNN, the CPU feature guard), which no environment
variable silences, and INFO lines from its Python (the SavedModel builder,
the saver); tf2onnx and ONNX Runtime's quantizer add their own. A command
says what it did itself; `--verbose` (run_main skips this) keeps them all.
"""

import contextlib
import logging as pylogging
import os
import sys
import warnings

from absl import logging as absl_logging


@contextlib.contextmanager
def _stderr_to_devnull():
  sys.stderr.flush()
  saved = os.dup(2)
  devnull = os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


def import_tensorflow_quietly():
  """Imports TensorFlow and finds its devices with fd 2 at /dev/null (an
  import error still shows: Python reports it after fd 2 is back)."""
  if "tensorflow" in sys.modules:
    return
  with _stderr_to_devnull():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.list_physical_devices()
  # TF's Python INFO lines ("Assets written to", ...) come through its
  # "tensorflow" logger and absl's; tf2onnx's and ONNX Runtime's reach
  # absl's handler through the root logger, which logs the quantizer's own.
  pylogging.getLogger("tensorflow").setLevel(pylogging.WARNING)
  absl_logging.get_absl_logger().addFilter(_drop_tensorflow_info)
  absl_logging.get_absl_handler().addFilter(_drop_tensorflow_info)
  pylogging.getLogger().addFilter(_drop_tensorflow_info)
  # TF's converter calibrates int8 models with the deprecated
  # tf.lite.Interpreter, which warns (our runners use ai_edge_litert's).
  warnings.filterwarnings("ignore", message=_LITE_INTERPRETER_WARNING)


_LITE_INTERPRETER_WARNING = r"\s*Warning: tf\.lite\.Interpreter is deprecated"


@contextlib.contextmanager
def cpp_lines_hidden():
  """TF's C++ log lines (oneDNN's "supports DT_INT64 only on platforms
  with AVX-512" the first time a kernel runs) hidden for the block when
  `import_tensorflow_quietly` ran (no --verbose); errors still raise."""
  if _drop_tensorflow_info not in absl_logging.get_absl_logger().filters:
    yield
    return
  with _stderr_to_devnull():
    yield


# Libraries whose INFO lines a command replaces with its own: TensorFlow,
# and the converters export_onnx runs (tf2onnx's "Using opset", "After
# optimization: Cast -23 ..."; ONNX Runtime's quantizer, a line per
# tensor).
_CHATTY = tuple(f"{os.sep}{name}{os.sep}" for name in
                ("tensorflow", "tf2onnx", "onnxruntime"))
# ...and its warnings too: the quantizer's advice to pre-process the model
# (shape inference for its own optimisations), which a user cannot act on.
_ADVICE_ONLY = (f"{os.sep}onnxruntime{os.sep}quantization{os.sep}",)


def _drop_tensorflow_info(record) -> bool:
  """False for an INFO (or lower) record logged from inside TensorFlow or
  the ONNX converters, and for the ONNX quantizer's warnings."""
  path = record.pathname or ""
  if record.levelno < pylogging.ERROR and any(m in path for m in _ADVICE_ONLY):
    return False
  return record.levelno >= pylogging.WARNING or not any(
      m in path for m in _CHATTY)
