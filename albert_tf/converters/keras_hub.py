"""keras-hub AlbertBackbone presets saved in a local folder.

A keras-hub backbone is copied layer by layer (keras_hub_interop), not through
the original names, and carries no MLM/SOP heads: `load_source` returns the
same (config, pretrainer, report, heads) as the other sources with the encoder
only. keras_hub is imported only when this source is used, so the other
converters work without it installed.
"""

import os

from albert_tf import keras_hub_interop
from albert_tf.config import AlbertConfig
from albert_tf.converters.errors import ConversionError
from albert_tf.models import AlbertPretrainer


def read_keras_hub(checkpoint):
  """A keras-hub AlbertBackbone from a local preset dir (config.json + weights)."""
  import keras_hub  # pylint: disable=g-import-not-at-top
  if not os.path.isdir(checkpoint):
    raise FileNotFoundError(
        f"--source=keras_hub needs a local preset directory (config.json + "
        f"model.weights.h5, as written by backbone.save_to_preset), got "
        f"{checkpoint}")
  return keras_hub.models.AlbertBackbone.from_preset(checkpoint)


def load_source(checkpoint, albert_config_file):
  """Returns (config, pretrainer, report, heads) for --source=keras_hub.

  --albert_config_file, if given, must describe the backbone (dropout rates
  aside, which a preset does not pin down); it is then used as written.
  """
  backbone = read_keras_hub(checkpoint)
  config = keras_hub_interop.config_from_keras_hub(backbone)
  if albert_config_file:
    given = AlbertConfig.from_json_file(albert_config_file)
    if given.replace(hidden_dropout_prob=config.hidden_dropout_prob,
                     attention_probs_dropout_prob=config.
                     attention_probs_dropout_prob) != config:
      raise ConversionError(
          f"{albert_config_file} does not describe the keras-hub backbone "
          f"in {checkpoint}: {given} vs {config}")
    config = given
  pretrainer = AlbertPretrainer(config)
  keras_hub_interop.copy_from_keras_hub(backbone, pretrainer.encoder)
  report = {"assigned": [w.path for w in backbone.weights], "missing": [],
            "unconsumed": [], "notes": ["a keras-hub AlbertBackbone has no "
                                        "MLM/SOP heads: encoder only"]}
  return config, pretrainer, report, []
