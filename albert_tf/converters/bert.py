"""BERT checkpoints as the ALBERT special case they are: share="none", E == H.

A BERT layer N is an ALBERT group N with one inner block, so Google's TF1
names (bert/encoder/layer_N/attention/self/query/kernel, ...) are renamed to
the original ALBERT names (bert/encoder/transformer/group_N/inner_group_0/
attention_1/self/query/kernel) and loaded by the one map of original.py into
a share="none" model; the embedding has no E->H projection (E == H), as in
BERT. Hugging Face BertModel / BertForPreTraining state dicts use the same
module names with dots (encoder.layer.N.attention.self.query.weight, torch
Linear weights [out, in]): they are first renamed to Google's names, so both
sources share `bert_to_original`. Messages and the conversion report name
the tensors as the source file does (the readers pass original.py a
`source_name` function).

BERT's next-sentence head (cls/seq_relationship) has the shape of ALBERT's
sentence-order head and is kept as sentence_order_head.
"""

import os
import re

import numpy as np

from albert_tf.core.config import AlbertConfig
from albert_tf.converters import shared
from albert_tf.converters.errors import ConversionError

_TO_BERT_MODULE = {v: k for k, v in shared.BERT_LAYER_MODULES.items()}
_ALBERT_BLOCK = re.compile(
    r"^bert/encoder/transformer/group_(\d+)/inner_group_0/(.+)/([^/]+)$")
_HF_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_HF_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")


def bert_to_original(tensors):
  """Google's TF1 BERT names -> original ALBERT names (layer N = group N;
  the rest already has the original names). Returns (tensors, unconsumed).
  """
  out, unconsumed = {}, []
  for name, value in tensors.items():
    match = shared.BERT_LAYER.match(name)
    if match is None:
      out[name] = value
      continue
    layer, module, leaf = match.groups()
    if module not in shared.BERT_LAYER_MODULES:
      unconsumed.append(name)
      continue
    out[f"bert/encoder/transformer/group_{layer}/inner_group_0/"
        f"{shared.BERT_LAYER_MODULES[module]}/{leaf}"] = value
  return out, sorted(unconsumed)


def original_to_bert_name(name):
  """The inverse of `bert_to_original` for one name (used in messages)."""
  match = _ALBERT_BLOCK.match(name)
  if match is None or match.group(2) not in _TO_BERT_MODULE:
    return name
  group, module, leaf = match.groups()
  return f"bert/encoder/layer_{group}/{_TO_BERT_MODULE[module]}/{leaf}"


# --------------------------------------------------------------- Hugging Face
def _huggingface_to_bert_name(key):
  """(Google TF1 name, transpose?) of one HF BERT key without "bert.", or None.

  HF's modules are Google's with dots; LayerNorm weight/bias (gamma/beta in
  old files) are gamma/beta, embedding tables have no leaf, the other
  weights are torch Linear [out, in] -> kernel [in, out]. The NSP weight
  [2, H] has the orientation of Google's output_weights.
  """
  module, _, param = key.rpartition(".")
  if module == "cls.predictions" and param == "bias":
    return "cls/predictions/output_bias", False
  if module == "cls.seq_relationship":
    return "cls/seq_relationship/" + {"weight": "output_weights",
                                      "bias": "output_bias"}[param], False
  match = _HF_LAYER.match(module)
  if match:
    path = f"bert/encoder/layer_{match.group(1)}/" + match.group(2).replace(
        ".", "/")
  elif module.startswith(("embeddings.", "pooler.")):
    path = "bert/" + module.replace(".", "/")
  elif module.startswith("cls.predictions.transform."):
    path = module.replace(".", "/")
  else:
    return None
  if module.endswith("LayerNorm"):
    leaf = {"weight": "gamma", "gamma": "gamma", "bias": "beta",
            "beta": "beta"}.get(param)
    return (f"{path}/{leaf}", False) if leaf else None
  if module.startswith("embeddings.") and module.split(".")[1] in _HF_TABLES:
    return (path, False) if param == "weight" else None
  if param not in ("weight", "bias"):
    return None
  leaf = "kernel" if param == "weight" else "bias"
  return f"{path}/{leaf}", param == "weight"


def huggingface_bert_to_bert_names(state):
  """HF BertModel/ForPreTraining/ForMaskedLM state ("bert." prefix or not)
  -> Google's names: (tensors, unconsumed, notes, hf_name_of: Google name
  -> HF key). The tied decoder weight/bias are consumed when equal to
  word_embeddings / cls.predictions.bias, else noted."""
  tensors, unconsumed, notes, hf_name_of = {}, [], [], {}
  tied = {}
  for name, value in state.items():
    key = name[len("bert."):] if name.startswith("bert.") else name
    if key in _HF_BUFFERS:
      notes.append(f"skipped buffer {name}")
      continue
    if key in ("cls.predictions.decoder.weight",
               "cls.predictions.decoder.bias"):
      tied[name] = value
      continue
    target = _huggingface_to_bert_name(key)
    if target is None:
      unconsumed.append(name)
      continue
    bert_name, transpose = target
    tensors[bert_name] = np.ascontiguousarray(value.T) if transpose else value
    hf_name_of[bert_name] = name
  for name, value in sorted(tied.items()):
    tied_to = ("bert/embeddings/word_embeddings" if name.endswith("weight")
               else "cls/predictions/output_bias")
    if tied_to in tensors and np.array_equal(value, tensors[tied_to]):
      continue
    unconsumed.append(name)
    notes.append(f"{name} is not equal to {hf_name_of.get(tied_to, tied_to)}"
                 f": BERT ties them, the value of the latter is used")
  return tensors, sorted(unconsumed), notes, hf_name_of


def _bert_to_huggingface_name(name, prefix):
  """Google's name -> the HF key it would have (for tensors not in the file)."""
  if name == "cls/predictions/output_bias":
    return "cls.predictions.bias"
  if name.startswith("cls/seq_relationship/"):
    return "cls.seq_relationship." + (
        "weight" if name.endswith("output_weights") else "bias")
  path, _, leaf = name.rpartition("/")
  if name.startswith("bert/embeddings/") and path == "bert/embeddings":
    path, leaf = name, "weight"  # a table: bert/embeddings/word_embeddings
  leaf = {"gamma": "weight", "beta": "bias", "kernel": "weight"}.get(leaf,
                                                                      leaf)
  path = re.sub(r"layer_(\d+)", r"layer.\1", path).replace("/", ".")
  if path.startswith("bert."):
    return prefix + path[len("bert."):] + "." + leaf
  return path + "." + leaf


def huggingface_layout(state, where, model_type=None, config_path=None):
  """"albert" or "bert" for an HF state dict (and config model_type).

  Raises ConversionError naming `where` (the weights) when they are neither,
  or `config_path` when its model_type is neither or disagrees with them.
  """
  if any("albert_layer_groups." in k for k in state):
    layout = "albert"
  elif any(_HF_LAYER.match(k[len("bert."):] if k.startswith("bert.") else k)
           for k in state):
    layout = "bert"
  else:
    raise ConversionError(
        f"{where}: neither ALBERT nor BERT weights (no encoder."
        "albert_layer_groups.* or encoder.layer.N.* tensors; first names: "
        f"{sorted(state)[:3]})")
  if model_type not in (None, "albert", "bert"):
    raise ConversionError(f"{config_path}: model_type={model_type!r} is "
                          f"neither albert nor bert (weights: {where})")
  if model_type not in (None, layout):
    raise ConversionError(f"{config_path}: model_type={model_type!r} but "
                          f"the weights in {where} are {layout} ones")
  return layout


# --------------------------------------------------------------------- config
def bert_config(values, source):
  """AlbertConfig of a bert_config.json / HF BERT config.json dict.

  "gelu" in both is the exact erf GELU (gelu_exact here; this project's
  "gelu" is the tanh approximation), "gelu_new" the tanh one. Absent
  layer_norm_eps is Google's 1e-12. An albert_config.json written by this
  project (it has `share`) is taken as it is, if BERT-shaped.
  """
  if "share" in values:
    config = AlbertConfig.from_dict(values, source=source)
  else:
    if values.get("embedding_size", values.get("hidden_size")) != values.get(
        "hidden_size"):
      raise ConversionError(
          f"{source}: embedding_size={values['embedding_size']} differs from "
          f"hidden_size={values['hidden_size']}: not a BERT config")
    config = shared.huggingface_config(dict(values, share="none"),
                                       source=source)
  if config.share != "none" or config.embedding_size != config.hidden_size:
    raise ConversionError(
        f"{source}: share={config.share!r}, embedding_size="
        f"{config.embedding_size}, hidden_size={config.hidden_size}; a BERT "
        "checkpoint needs share='none' and embedding_size == hidden_size")
  return config


def vocab_beside(directory, notes):
  """The path of the vocab.txt in `directory`, or None; a ConversionError
  when it does not load (convert_checkpoint checks its size)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer
  path = os.path.join(directory or ".", "vocab.txt")
  if not os.path.isfile(path):
    return None  # convert_checkpoint warns once: no tokenizer to check
  try:
    size = load_tokenizer(vocab_file=path).vocab_size
  except ValueError as e:
    raise ConversionError(f"{path}: {e}") from None
  notes.append(f"vocab.txt ({size} tokens) copied from {path}")
  tokenizer_config = os.path.join(directory or ".", "tokenizer_config.json")
  if os.path.isfile(tokenizer_config):
    lower = shared.read_json(tokenizer_config).get("do_lower_case")
    if lower is not None:
      notes.append(f"{tokenizer_config}: do_lower_case={lower} (pass "
                   f"--{'' if lower else 'no'}do_lower_case when fine-tuning)")
  return path


def _extras(checkpoint, tensors, notes, source_name, config_file):
  """The readers' extras (see original.load_original_names)."""
  if any(n.startswith("cls/seq_relationship/") for n in tensors):
    notes.append("BERT's next-sentence head cls/seq_relationship is kept "
                 "as sentence_order_head (the same 2-way dense on "
                 "pooled_output)")
  directory = (checkpoint if os.path.isdir(checkpoint)
               else os.path.dirname(checkpoint))
  return {"source_name": source_name, "config_file": config_file,
          "vocab_file": vocab_beside(directory, notes)}


# -------------------------------------------------------------------- readers
def read_tf1_bert(checkpoint, albert_config_file):
  """--source=bert: Google's TF1 BERT (bert_model.ckpt + bert_config.json,
  by default the one beside it). Returns (config, tensors in original
  names, notes, unconsumed, extras)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters import tf1  # TensorFlow loads with it
  directory = (checkpoint if os.path.isdir(checkpoint)
               else os.path.dirname(checkpoint))
  notes = []
  if albert_config_file is None:
    albert_config_file = os.path.join(directory, "bert_config.json")
    if not os.path.isfile(albert_config_file):
      raise ValueError(f"--source=bert: no bert_config.json beside "
                       f"{checkpoint}; pass --albert_config_file")
    notes.append(f"config from {albert_config_file}")
  config = bert_config(shared.read_json(albert_config_file),
                       source=albert_config_file)
  tensors, skipped = tf1.read_tf1_checkpoint(checkpoint)
  notes.append(f"skipped {len(skipped)} optimizer slot / bookkeeping "
               f"variable(s) (adam_m, adam_v, global_step, ...)")
  if shared.is_brightmart_layout(tensors):
    raise ConversionError(f"{checkpoint} is a brightmart albert_zh checkpoint "
                          "(bert/encoder/layer_shared): use "
                          "--source=brightmart")
  if any(n.startswith("bert/encoder/transformer/") for n in tensors):
    raise ConversionError(f"{checkpoint} is an ALBERT checkpoint (bert/"
                          "encoder/transformer/group_G/...): use "
                          "--source=original")
  if not shared.is_bert_layout(tensors):
    raise ConversionError(
        f"{checkpoint}: neither ALBERT nor BERT variables (no bert/encoder/"
        f"layer_N/ or bert/encoder/transformer/; first names: "
        f"{sorted(tensors)[:3]})")
  tensors, unconsumed = bert_to_original(tensors)
  return config, tensors, notes, unconsumed, _extras(
      checkpoint, tensors, notes, original_to_bert_name, albert_config_file)


def read_huggingface_bert(checkpoint, state, config_json, albert_config_file):
  """--source=huggingface on BERT weights: as `read_tf1_bert`, the names
  in messages HF keys."""
  notes = []
  path = albert_config_file or config_json
  if path is None:
    raise ValueError(f"{checkpoint}: no config.json beside it; pass "
                     "--albert_config_file")
  config = bert_config(shared.read_json(path), source=path)
  notes.append(f"config from {path}")
  tensors, unconsumed, hf_notes, hf_name_of = huggingface_bert_to_bert_names(
      state)
  notes.extend(hf_notes)
  tensors, more = bert_to_original(tensors)
  unconsumed = sorted(unconsumed + [hf_name_of[n] for n in more])
  prefix = "bert." if any(k.startswith("bert.") for k in state) else ""

  def source_name(name):
    bert_name = original_to_bert_name(name)
    return hf_name_of.get(bert_name) or _bert_to_huggingface_name(bert_name,
                                                                   prefix)

  return config, tensors, notes, unconsumed, _extras(
      checkpoint, tensors, notes, source_name, path)
