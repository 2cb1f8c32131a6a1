"""albert_tf: ALBERT (A Lite BERT) for TensorFlow 2 / Keras 3.

Public API:
  AlbertConfig.from_preset(name), AlbertConfig.from_json_file(path)
  AlbertEncoder(config), AlbertPretrainer(config),
  AlbertClassifier(config, num_labels)
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from albert_tf.config import AlbertConfig, PRESETS  # noqa: E402
from albert_tf.encoder import AlbertEncoder  # noqa: E402
from albert_tf.models import (AlbertClassifier, AlbertPretrainer)  # noqa: E402

__all__ = ["AlbertConfig", "PRESETS", "AlbertEncoder", "AlbertPretrainer",
           "AlbertClassifier"]
