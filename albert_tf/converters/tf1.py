"""TF1 name-based checkpoints: the original google-research and brightmart releases.

`read_original` and `read_brightmart` are the --source=original and
--source=brightmart readers of the same kind of file; brightmart's own
layout is renamed (brightmart.py), and refused under --source=original so
that the error names the right --source.
"""

import os
import re

import numpy as np
import tensorflow as tf

from albert_tf.core.config import AlbertConfig
from albert_tf.converters import brightmart
from albert_tf.converters import shared
from albert_tf.converters.errors import ConversionError

_OPTIMIZER_SLOT = re.compile(r"(/adam_[mv]|/lamb_[mv]|/Momentum|/Adam(_1)?)$")
_BOOKKEEPING = ("global_step", "good_steps", "loss_scale")


def read_tf1_checkpoint(path):
  """(tensors by their TF1 names, the names skipped: optimizer slots and
  bookkeeping) of a TF1 checkpoint (prefix or directory)."""
  if os.path.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise FileNotFoundError(f"No TF checkpoint in directory {path}")
    path = latest
  try:
    reader = tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
    raise FileNotFoundError(f"Cannot read TF checkpoint {path}: {e}") from None
  tensors, skipped = {}, []
  for name in sorted(reader.get_variable_to_shape_map()):
    if (_OPTIMIZER_SLOT.search(name) or name in _BOOKKEEPING or
        name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")):
      skipped.append(name)
      continue
    tensors[name] = np.asarray(reader.get_tensor(name))
  return tensors, skipped


def _read_tf1_source(source, checkpoint, albert_config_file):
  """Returns (config, tensors in original names, notes, unconsumed)."""
  notes, unconsumed = [], []
  config = (AlbertConfig.from_json_file(albert_config_file)
            if albert_config_file else None)
  tensors, skipped = read_tf1_checkpoint(checkpoint)
  notes.append(f"skipped {len(skipped)} optimizer slot / bookkeeping "
               f"variable(s) (adam_m, adam_v, global_step, ...)")
  if config is None:
    raise ValueError(f"--source={source} needs --albert_config_file")
  if shared.is_bert_layout(tensors):
    raise ConversionError(f"{checkpoint} is a BERT checkpoint (bert/encoder/"
                          "layer_N/...): use --source=bert")
  if not any(n.startswith(("bert/encoder/transformer/",
                           "bert/encoder/layer_shared/")) for n in tensors):
    raise ConversionError(
        f"{checkpoint}: neither ALBERT nor BERT variables (no bert/encoder/"
        f"transformer/ or bert/encoder/layer_N/; first names: "
        f"{sorted(tensors)[:3]})")
  if shared.is_brightmart_layout(tensors):
    if source != "brightmart":
      raise ConversionError(
          f"{checkpoint} uses brightmart's own layout (bert/encoder/"
          "layer_shared, word_embeddings_2): use --source=brightmart")
    tensors, unconsumed = brightmart.brightmart_to_original(tensors)
    config = config.replace(embedding_layout="brightmart")
    notes.append("brightmart own layout: embedding_layout='brightmart' "
                 "(projection E->H first, position/type embeddings of "
                 "width H; masked-LM transform H->H, then the transposed "
                 "projection)")
  return config, tensors, notes, unconsumed


def read_original(checkpoint, albert_config_file):
  """--source=original: Google's release (also brightmart's *_google ones)."""
  return _read_tf1_source("original", checkpoint, albert_config_file)


def read_brightmart(checkpoint, albert_config_file):
  """--source=brightmart: Google's layout or brightmart's own (layer_shared)."""
  return _read_tf1_source("brightmart", checkpoint, albert_config_file)
