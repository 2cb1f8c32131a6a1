"""Per-source checkpoint readers and the dispatch table convert_checkpoint uses.

READERS maps each --source to a function (checkpoint, albert_config_file) ->
(config, pretrainer, report, heads): an AlbertPretrainer holding the imported
weights, the report dict ("assigned", "missing", "unconsumed", "notes") and
the heads complete enough to save. The TF1 and Hugging Face sources are read
into the original google-research names and loaded by original.py; keras-hub
is copied directly (keras_hub.py). BERT (bert.py) is the share="none", E == H
case: Google's TF1 release under --source=bert, HF BERT weights under
--source=huggingface (recognised by their names and config model_type).
"""

import importlib

# --source values of convert_checkpoint, without loading the readers (TF):
# the command parses its flags first. READERS (below) has one entry each.
SOURCES = ("original", "brightmart", "huggingface", "keras_hub", "bert")


def _via_original_names(read):
  """A reader returning original names -> a READERS entry (loads the model)."""

  def load(checkpoint, albert_config_file):
    from albert_tf.converters import original  # pylint: disable=g-import-not-at-top
    # (config, tensors, notes, unconsumed[, extras]): see load_original_names.
    config, tensors, notes, unconsumed, *extras = read(checkpoint,
                                                       albert_config_file)
    extras = dict(extras[0] if extras else {})
    extras.setdefault("config_file", albert_config_file)
    return original.load_original_names(checkpoint, config, tensors, notes,
                                        unconsumed, extras)

  load.__doc__ = read.__doc__
  return load


def _readers():
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters import bert
  from albert_tf.converters import huggingface
  from albert_tf.converters import keras_hub
  from albert_tf.converters import tf1
  readers = {
      "original": _via_original_names(tf1.read_original),
      "brightmart": _via_original_names(tf1.read_brightmart),
      "huggingface": _via_original_names(huggingface.read_source),
      "keras_hub": keras_hub.load_source,
      "bert": _via_original_names(bert.read_tf1_bert),
  }
  assert tuple(readers) == SOURCES
  return readers


def __getattr__(name):
  # PEP 562: READERS and the reader modules load TF, on first use only.
  if name == "READERS":
    globals()["READERS"] = _readers()
    return globals()["READERS"]
  if name in ("bert", "brightmart", "huggingface", "keras_hub",
              "keras_hub_interop", "original", "tf1"):
    return importlib.import_module(f"albert_tf.converters.{name}")
  raise AttributeError(f"module 'albert_tf.converters' has no attribute "
                       f"{name!r}")
