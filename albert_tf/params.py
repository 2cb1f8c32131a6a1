"""Parameter table of the presets: `python -m albert_tf.params [--json]`.

    python -m albert_tf.params --presets=albert_base_v2,albert_tiny_zh

Counts distinct variables (a shared block counts once, however many layers
use it). "encoder" = embeddings + projection + Transformer parameters +
pooler, the figure the paper, HF and keras-hub report; "pretrainer" adds the
MLM head (its output matrix is tied to the word embeddings) and the SOP head.
"""

import dataclasses
import json
import math
import sys
from typing import List, Optional

from albert_tf.core import settings
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.core.config import PRESETS, AlbertConfig


@dataclasses.dataclass
class ParamsSettings:
  """The command line of `python -m albert_tf.params`; fields are flags."""
  json: bool = settings.field(False, "Print {preset: {encoder, pretrainer}} "
                              "JSON.", group="output")
  presets: Optional[List[str]] = settings.field(
      None, "Only these presets (comma-separated names of "
      "albert_tf.core.config.PRESETS; default: all).")


def count_params(model):
  """Number of scalars in the distinct variables of a built model."""
  distinct = {id(v): v for v in model.weights}.values()
  return sum(math.prod(int(d) for d in v.shape) for v in distinct)


def preset_param_counts(config: AlbertConfig):
  """{"encoder": N, "pretrainer": M} for one config (builds the model)."""
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertPretrainer  # pylint: disable=g-import-not-at-top
  # Inside a StatelessScope Keras creates the variables with their shapes but
  # defers drawing initial values: the real model classes, counted in seconds
  # instead of minutes for the 335M-parameter bert_large.
  with keras.StatelessScope(initialize_variables=False):
    pretrainer = AlbertPretrainer(config)
    counts = {"encoder": count_params(pretrainer.encoder),
              "pretrainer": count_params(pretrainer)}
  del pretrainer
  keras.backend.clear_session()
  return counts


def parameter_table(names=None):
  """{preset: {"encoder": N, "pretrainer": M}} for `names` (default: all).

  Raises CommandLineError (a ValueError) naming an unknown preset before
  anything is built.
  """
  names = names or sorted(PRESETS)
  unknown = [name for name in names if name not in PRESETS]
  if unknown:
    raise CommandLineError(error_line(
        f"unknown preset {unknown[0]!r}", "--presets",
        "one of " + ", ".join(sorted(PRESETS))))
  return {name: preset_param_counts(PRESETS[name]) for name in names}


def main(argv):
  del argv
  values = settings.from_flags(ParamsSettings)
  table = parameter_table(values.presets)
  if values.json:
    json.dump(table, sys.stdout, indent=2)
    print()
    return
  print(f"{'preset':<20} {'encoder':>15} {'with MLM+SOP heads':>20}")
  for name, counts in table.items():
    print(f"{name:<20} {counts['encoder']:>15,} {counts['pretrainer']:>20,}")


if __name__ == "__main__":
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  # Only when run as a script, so that importing count_params (tests,
  # benchmarks) defines no flags.
  settings.define_flags(ParamsSettings)
  cli_errors.run_main(main)
