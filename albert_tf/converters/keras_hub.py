"""keras-hub AlbertBackbone presets: a local preset folder or a preset handle.

--checkpoint is anything `keras_hub.models.AlbertBackbone.from_preset`
accepts: a local folder (config.json + model.weights.h5, as written by
`save_to_preset` or `albert_tf.export_keras_hub`), a built-in name such as
`albert_base_en_uncased`, or a `kaggle://` / `hf://` / `gs://` handle (these
download on first use; offline they fail with one line saying so).

A backbone is copied layer by layer (keras_hub_interop) and has no MLM/SOP
heads: the encoder only. keras_hub is imported only when this source is used.
"""

import os
import re

from albert_tf.converters import keras_hub_interop
from albert_tf.core.config import AlbertConfig
from albert_tf.converters.errors import ConversionError
from albert_tf.modeling.models import AlbertPretrainer

_HANDLE_SCHEMES = ("kaggle://", "hf://", "gs://", "modelscope://")


def _short(error, limit=160):
  """One short line of an exception (download errors nest long reprs)."""
  text = " ".join(str(error).split())
  host = re.search(r"host='([^']+)'", text)
  if host:  # requests/urllib3: the host says more than the retry chain
    text = f"cannot connect to {host.group(1)}"
  return f"{type(error).__name__}: " + (
      text if len(text) <= limit else text[:limit] + "...")


def read_keras_hub(checkpoint):
  """A keras-hub AlbertBackbone from a local preset dir or a preset handle;
  FileNotFoundError or ConversionError in one line naming --checkpoint."""
  import keras_hub  # pylint: disable=g-import-not-at-top
  local = os.path.isdir(checkpoint)
  builtin = checkpoint in keras_hub.models.AlbertBackbone.presets
  if not (local or builtin or checkpoint.startswith(_HANDLE_SCHEMES)):
    raise FileNotFoundError(
        f"--checkpoint={checkpoint} is neither a local keras-hub preset "
        "directory nor a preset handle (a built-in name such as "
        "albert_base_en_uncased, or kaggle://..., hf://..., gs://...)")
  try:
    return keras_hub.models.AlbertBackbone.from_preset(checkpoint)
  except Exception as e:  # pylint: disable=broad-except
    # keras-hub, kagglehub, huggingface_hub and requests each raise their
    # own types (and multi-line messages); the user needs one line.
    if local:
      raise ConversionError(
          f"--checkpoint={checkpoint} is not a keras-hub AlbertBackbone "
          f"preset directory ({_short(e)})") from e
    raise ConversionError(
        f"--checkpoint={checkpoint}: could not fetch the keras-hub preset "
        f"({_short(e)}); with no network, download it where there is one "
        "and pass its local directory") from e


def preset_file(preset, name):
  """A file of a keras-hub preset handle (assets/tokenizer/vocabulary.spm,
  fetched with it), or None when the preset has none or it is out of reach."""
  try:
    from keras_hub.src.utils import preset_utils  # pylint: disable=g-import-not-at-top
    path = preset_utils.get_file(preset, name)
  except Exception:  # pylint: disable=broad-except
    return None  # reported by convert_checkpoint as no tokenizer
  return path if path and os.path.isfile(path) else None


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
