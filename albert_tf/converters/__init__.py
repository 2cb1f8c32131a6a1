"""Per-source checkpoint readers and the dispatch table convert_checkpoint uses.

READERS maps each --source to a function (checkpoint, albert_config_file) ->
(config, pretrainer, report, heads): an AlbertPretrainer holding the imported
weights, the report dict ("assigned", "missing", "unconsumed", "notes") and
the heads complete enough to save. The TF1 and Hugging Face sources are read
into the original google-research names and loaded by original.py; keras-hub
is copied directly (keras_hub.py).
"""

from albert_tf.converters import huggingface
from albert_tf.converters import keras_hub
from albert_tf.converters import original
from albert_tf.converters import tf1


def _via_original_names(read):
  """A reader returning original names -> a READERS entry (loads the model)."""

  def load(checkpoint, albert_config_file):
    return original.load_original_names(
        checkpoint, *read(checkpoint, albert_config_file))

  load.__doc__ = read.__doc__
  return load


READERS = {
    "original": _via_original_names(tf1.read_original),
    "brightmart": _via_original_names(tf1.read_brightmart),
    "huggingface": _via_original_names(huggingface.read_source),
    "keras_hub": keras_hub.load_source,
}
SOURCES = tuple(READERS)
