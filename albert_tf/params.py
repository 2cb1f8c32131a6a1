"""Parameter table of every preset: `python -m albert_tf.params [--json]`.

Counts distinct variables (a shared block counts once, however many layers
use it). "encoder" = embeddings + projection + Transformer parameters +
pooler, the figure the paper, HF and keras-hub report; "pretrainer" adds the
MLM head (its output matrix is tied to the word embeddings) and the SOP head.
"""

import json
import sys

from absl import app
from absl import flags

from albert_tf.config import PRESETS, AlbertConfig

FLAGS = flags.FLAGS
flags.DEFINE_bool("json", False, "Print {preset: {encoder, pretrainer}} JSON.")


def count_params(model):
  """Number of scalars in the distinct variables of a built model."""
  seen = {}
  for variable in model.weights:
    seen[id(variable)] = variable
  total = 0
  for variable in seen.values():
    size = 1
    for dim in variable.shape:
      size *= int(dim)
    total += size
  return total


def preset_param_counts(config: AlbertConfig):
  """{"encoder": N, "pretrainer": M} for one config (builds the model)."""
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.models import AlbertPretrainer  # pylint: disable=g-import-not-at-top
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
  return {name: preset_param_counts(PRESETS[name])
          for name in (names or sorted(PRESETS))}


def main(argv):
  del argv
  table = parameter_table()
  if FLAGS.json:
    json.dump(table, sys.stdout, indent=2)
    print()
    return
  print(f"{'preset':<20} {'encoder':>15} {'with MLM+SOP heads':>20}")
  for name, counts in table.items():
    print(f"{name:<20} {counts['encoder']:>15,} {counts['pretrainer']:>20,}")


if __name__ == "__main__":
  app.run(main)
