"""albert_tf: ALBERT (A Lite BERT) for TensorFlow 2 / Keras 3.

Public API:
  AlbertConfig.from_preset(name), AlbertConfig.from_json_file(path)
  AlbertEncoder(config), AlbertPretrainer(config),
  AlbertClassifier(config, num_labels), AlbertTagger(config, num_tags)
  load(path) -> a Predictor of a run_classifier / run_ner / run_pretraining
    output_dir, an export_saved_model export or a keras-hub preset:
    .predict(texts), .encode(texts), .embed(texts) (albert_tf.inference)

The model classes are imported on first use (PEP 562), so light modules
such as `albert_tf.data.tokenization` and `albert_tf.core.features` load
without Keras: Beam workers that only tokenize start in a fraction of a second.
"""

import importlib
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_LAZY = {
    "AlbertConfig": "albert_tf.core.config",
    "PRESETS": "albert_tf.core.config",
    "AlbertEncoder": "albert_tf.modeling.encoder",
    "AlbertPretrainer": "albert_tf.modeling.models",
    "AlbertClassifier": "albert_tf.modeling.models",
    "AlbertTagger": "albert_tf.modeling.models",
    "load": "albert_tf.inference",
}

__all__ = list(_LAZY)


def __getattr__(name):
  if name in _LAZY:
    return getattr(importlib.import_module(_LAZY[name]), name)
  raise AttributeError(f"module 'albert_tf' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + __all__)
