"""Hugging Face transformers ALBERT weights, read without torch.

Reads model.safetensors (the `safetensors` library's numpy API) or
pytorch_model.bin (also sharded, via the *.index.json): older checkpoints
ship only a .bin, whose unpickler here resolves just the classes a plain
state dict needs, so loading a file cannot run code. `huggingface_to_original`
renames (and transposes) the state dict to the original google-research
names; `read_source` is the --source=huggingface reader.
"""

import collections
import json
import os
import pickle
import re
import zipfile
import zlib

import numpy as np
import safetensors
import safetensors.numpy

from albert_tf.core.config import AlbertConfig
from albert_tf.converters import shared
from albert_tf.converters.errors import ConversionError


def read_safetensors(path):
  """{name: array} of a .safetensors file; bfloat16 tensors (ml_dtypes
  arrays, which float32 variables do not take) become float32. A truncated
  or corrupt file is a ValueError naming it."""
  try:
    tensors = safetensors.numpy.load_file(path)
  except safetensors.SafetensorError as e:
    raise ValueError(f"{path}: not a valid safetensors file, truncated or "
                     f"corrupt ({e})") from None
  return {name: (array if array.dtype.kind in "biuf"
                 else array.astype(np.float32))
          for name, array in tensors.items()}


def _bfloat16_to_float32(raw):
  return (raw.astype(np.uint32) << 16).view(np.float32)


_TORCH_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64,
    "HalfStorage": np.float16, "BFloat16Storage": "bfloat16",
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}


class _StorageType:

  def __init__(self, name):
    self.name = name


def _rebuild_tensor(storage, storage_offset, size, stride, *unused_args):
  if not size:
    return storage[storage_offset:storage_offset + 1].reshape(()).copy()
  itemsize = storage.dtype.itemsize
  view = np.lib.stride_tricks.as_strided(
      storage[storage_offset:], shape=tuple(size),
      strides=tuple(s * itemsize for s in stride))
  return np.array(view)


def _rebuild_parameter(data, *unused_args):
  return data


class _TorchUnpickler(pickle.Unpickler):
  """Unpickles a torch zip-format state dict into numpy, without torch
  (only the classes a state dict needs are resolved)."""

  def __init__(self, file, archive, prefix):
    super().__init__(file)
    self._archive = archive
    self._prefix = prefix

  def find_class(self, module, name):
    if module == "collections" and name == "OrderedDict":
      return collections.OrderedDict
    if module == "torch._utils" and name == "_rebuild_tensor_v2":
      return _rebuild_tensor
    if module == "torch._utils" and name == "_rebuild_parameter":
      return _rebuild_parameter
    if module == "torch" and name in _TORCH_STORAGE_DTYPES:
      return _StorageType(name)
    raise pickle.UnpicklingError(
        f"the pickle refers to {module}.{name}, which a plain state dict "
        "does not need; convert the file to safetensors instead")

  def persistent_load(self, pid):
    kind, storage_type, key, _, numel = pid[:5]
    if kind != "storage" or not isinstance(storage_type, _StorageType):
      raise pickle.UnpicklingError(f"unsupported persistent id {pid!r}")
    raw = self._archive.read(f"{self._prefix}data/{key}")
    dtype = _TORCH_STORAGE_DTYPES[storage_type.name]
    if dtype == "bfloat16":
      return _bfloat16_to_float32(np.frombuffer(raw, np.uint16))[:numel]
    return np.frombuffer(raw, dtype)[:numel]


def read_pytorch_bin(path):
  """A torch.save zip-format state dict (pytorch_model.bin) read with numpy;
  a ValueError naming a legacy, cut or corrupt file, or one whose pickle
  needs more than a state dict does."""
  if not zipfile.is_zipfile(path):
    with open(path, "rb") as f:
      starts_as_zip = f.read(4) == b"PK\x03\x04"
    if starts_as_zip:  # The central directory at the end is missing.
      raise ValueError(f"{path}: truncated or corrupt zip archive (a torch "
                       "file cut short?)")
    raise ValueError(
        f"{path} is a legacy (pre-1.6, non-zip) torch file that cannot be read "
        "without torch; convert it to safetensors (e.g. with "
        "transformers' save_pretrained(safe_serialization=True)) and pass the "
        ".safetensors file")
  try:
    with zipfile.ZipFile(path) as archive:
      pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
      if len(pickles) != 1:
        raise ValueError(f"{path}: expected one data.pkl in the archive, "
                         f"found {pickles}")
      prefix = pickles[0][:-len("data.pkl")]
      with archive.open(pickles[0]) as f:
        state = _TorchUnpickler(f, archive, prefix).load()
  except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, KeyError,
          zlib.error) as e:
    raise ValueError(f"{path}: cannot be read as a state dict "
                     f"({type(e).__name__}: {e})") from None
  if not isinstance(state, dict):
    raise ValueError(f"{path}: not a state dict (got {type(state).__name__})")
  return {k: np.asarray(v) for k, v in state.items()}


def read_huggingface(path):
  """(state dict, config.json path or None) of a model dir or a
  .safetensors/.bin file; sharded checkpoints (*.index.json) merged."""
  config_path = None
  if os.path.isdir(path):
    directory = path
    candidates = ["model.safetensors", "model.safetensors.index.json",
                  "pytorch_model.bin", "pytorch_model.bin.index.json"]
    found = [c for c in candidates if os.path.exists(os.path.join(path, c))]
    if not found:
      raise FileNotFoundError(f"{path}: no {' / '.join(candidates)}")
    path = os.path.join(path, found[0])
  else:
    directory = os.path.dirname(path)
  if os.path.exists(os.path.join(directory, "config.json")):
    config_path = os.path.join(directory, "config.json")
  if path.endswith(".index.json"):
    with open(path, encoding="utf-8") as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    state = {}
    for shard in shards:
      state.update(_read_hf_file(os.path.join(directory, shard)))
    return state, config_path
  return _read_hf_file(path), config_path


def _read_hf_file(path):
  if path.endswith(".safetensors"):
    return read_safetensors(path)
  return read_pytorch_bin(path)


_HF_LAYER_MODULES = {
    "attention.query": "attention_1/self/query",
    "attention.key": "attention_1/self/key",
    "attention.value": "attention_1/self/value",
    "attention.dense": "attention_1/output/dense",
    "attention.LayerNorm": "LayerNorm",
    "ffn": "ffn_1/intermediate/dense",
    "ffn_output": "ffn_1/intermediate/output/dense",
    "full_layer_layer_norm": "LayerNorm_1",
}
_HF_FIXED = {
    "embeddings.word_embeddings": "bert/embeddings/word_embeddings",
    "embeddings.position_embeddings": "bert/embeddings/position_embeddings",
    "embeddings.token_type_embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings.LayerNorm": "bert/embeddings/LayerNorm",
    "encoder.embedding_hidden_mapping_in":
        "bert/encoder/embedding_hidden_mapping_in",
    "pooler": "bert/pooler/dense",
    "predictions.dense": "cls/predictions/transform/dense",
    "predictions.LayerNorm": "cls/predictions/transform/LayerNorm",
}
_HF_LAYER = re.compile(
    r"^encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.(.+)$")
_HF_BUFFERS = ("embeddings.position_ids",)


def huggingface_to_original(state):
  """HF AlbertModel/ForPreTraining/ForMaskedLM names -> original names
  (Linear [out, in] -> kernel [in, out]; weight/bias -> gamma/beta).

  Returns (tensors, unconsumed, notes); the tied decoder weight/bias are
  consumed when equal to word_embeddings / predictions.bias, else noted.
  """
  tensors, unconsumed, notes = {}, [], []
  for name, value in state.items():
    key = name[len("albert."):] if name.startswith("albert.") else name
    module, _, param = key.rpartition(".")
    target = None
    match = _HF_LAYER.match(module)
    if key in _HF_BUFFERS:
      notes.append(f"skipped buffer {name}")
      continue
    if match:
      group, inner, part = match.groups()
      if part in _HF_LAYER_MODULES:
        target = (f"bert/encoder/transformer/group_{group}/inner_group_{inner}/"
                  f"{_HF_LAYER_MODULES[part]}")
    elif module in _HF_FIXED:
      target = _HF_FIXED[module]
    elif key == "predictions.bias":
      tensors["cls/predictions/output_bias"] = value
      continue
    elif module == "sop_classifier.classifier":
      # Same [2, H] orientation as the original output_weights.
      tensors["cls/seq_relationship/" + (
          "output_weights" if param == "weight" else "output_bias")] = value
      continue
    elif module == "predictions.decoder":
      continue  # Tied; checked below.
    if target is None:
      unconsumed.append(name)
      continue
    if target.endswith("LayerNorm") or target.endswith("LayerNorm_1"):
      leaf = {"weight": "gamma", "bias": "beta"}.get(param)
    elif target.startswith("bert/embeddings/"):
      leaf = None if param == "weight" else param
    else:
      leaf = {"weight": "kernel", "bias": "bias"}.get(param)
      if param == "weight":
        value = value.T
    if leaf is None and param != "weight":
      unconsumed.append(name)
      continue
    tensors[target + (f"/{leaf}" if leaf else "")] = value
  for name, tied_to in (("predictions.decoder.weight",
                         "bert/embeddings/word_embeddings"),
                        ("predictions.decoder.bias",
                         "cls/predictions/output_bias")):
    if name not in state:
      continue
    if tied_to in tensors and np.array_equal(state[name], tensors[tied_to]):
      continue
    unconsumed.append(name)
    notes.append(f"{name} is not equal to {tied_to}: ALBERT ties them, the "
                 f"value of {tied_to} is used")
  return tensors, unconsumed, notes


def read_source(checkpoint, albert_config_file):
  """(config, tensors in original names, notes, unconsumed[, extras]);
  the config: --albert_config_file, else config.json beside the weights.
  BERT weights are bert.py's (which adds `extras`)."""
  from albert_tf.converters import bert  # pylint: disable=g-import-not-at-top
  notes = []
  state, config_json = read_huggingface(checkpoint)
  hf_config = shared.read_json(config_json) if config_json else {}
  if bert.huggingface_layout(state, checkpoint, hf_config.get("model_type"),
                             config_json) == "bert":
    return bert.read_huggingface_bert(checkpoint, state, config_json,
                                      albert_config_file)
  config = (AlbertConfig.from_json_file(albert_config_file)
            if albert_config_file else None)
  if config is None:
    if config_json is None:
      raise ValueError(f"{checkpoint}: no config.json beside it; pass "
                       "--albert_config_file")
    config = shared.huggingface_config(hf_config, source=config_json)
    notes.append(f"config from {config_json}")
  tensors, unconsumed, hf_notes = huggingface_to_original(state)
  notes.extend(hf_notes)
  return config, tensors, notes, unconsumed
