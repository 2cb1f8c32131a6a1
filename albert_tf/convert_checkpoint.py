"""Import published ALBERT weights: original TF1, brightmart, Hugging Face, keras-hub.

    python -m albert_tf.convert_checkpoint --source=original \
        --checkpoint=albert_base/model.ckpt-best \
        --albert_config_file=albert_base/albert_config.json --output_dir=out/

Every source is first read into a dict keyed by the *original* google-research
TF1 variable names (bert/embeddings/word_embeddings, bert/encoder/transformer/
group_0/inner_group_0/attention_1/self/query/kernel, ... with kernels [in, out]),
then copied into an `AlbertPretrainer` by `assign_original_weights`. So there
is one name map to the model, and one map per foreign source to the original
names. The output is the project's checkpoint layout (encoder +
masked_lm_head + sentence_order_head, see checkpoints.py) plus
albert_config.json. Every tensor not consumed and every expected tensor not
found is reported; a shape mismatch is an error naming the variable.
"""

import collections
import json
import os
import pickle
import re
import struct
import zipfile

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from albert_tf import checkpoints
from albert_tf import keras_hub_interop
from albert_tf.config import AlbertConfig
from albert_tf.models import AlbertPretrainer

SOURCES = ("original", "brightmart", "huggingface", "keras_hub")


class ConversionError(ValueError):
  """A checkpoint that does not fit the config (names the variable/shapes)."""


# ======================================================================
# Readers: file -> {name: np.ndarray}
# ======================================================================
_OPTIMIZER_SLOT = re.compile(r"(/adam_[mv]|/lamb_[mv]|/Momentum|/Adam(_1)?)$")
_BOOKKEEPING = ("global_step", "good_steps", "loss_scale")


def read_tf1_checkpoint(path):
  """Reads a TF1 name-based checkpoint (prefix or directory).

  Returns (tensors, skipped): optimizer slots (adam_m/adam_v, ...) and
  global_step are skipped and listed in `skipped`.
  """
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


_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16,
                       "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _bfloat16_to_float32(raw):
  return (raw.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
  """Reads a .safetensors file with numpy: u64 header length, JSON header, data."""
  with open(path, "rb") as f:
    blob = f.read()
  if len(blob) < 8:
    raise ValueError(f"{path}: too short to be a safetensors file")
  (header_len,) = struct.unpack("<Q", blob[:8])
  if header_len > len(blob) - 8:
    raise ValueError(f"{path}: header length {header_len} exceeds file size")
  try:
    header = json.loads(blob[8:8 + header_len])
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: safetensors header is not JSON ({e})") from None
  data = memoryview(blob)[8 + header_len:]
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    begin, end = info["data_offsets"]
    dtype = info["dtype"]
    if dtype == "BF16":
      raw = np.frombuffer(data[begin:end], np.uint16)
      array = _bfloat16_to_float32(raw)
    elif dtype in _SAFETENSORS_DTYPES:
      array = np.frombuffer(data[begin:end], _SAFETENSORS_DTYPES[dtype])
    else:
      raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    tensors[name] = array.reshape(info["shape"]).copy()
  return tensors


def write_safetensors(tensors, path):
  """Writes {name: array} as .safetensors (float32/int; used by tests and tools)."""
  names = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
  header, offset, chunks = {}, 0, []
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    raw = array.tobytes()
    header[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(raw)]}
    chunks.append(raw)
    offset += len(raw)
  encoded = json.dumps(header).encode("utf-8")
  encoded += b" " * (-len(encoded) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(encoded)))
    f.write(encoded)
    for chunk in chunks:
      f.write(chunk)


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
  """Unpickles a torch zip-format state dict into numpy, without torch.

  Only the classes a state dict needs are resolved; anything else is refused,
  so a malicious pickle cannot run code.
  """

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
        f"pytorch_model.bin refers to {module}.{name}, which a plain state "
        "dict does not need; convert it to safetensors instead")

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
  """Reads a torch.save zip-format state dict (pytorch_model.bin) with numpy."""
  if not zipfile.is_zipfile(path):
    raise ValueError(
        f"{path} is a legacy (pre-1.6, non-zip) torch file that cannot be read "
        "without torch; convert it to safetensors (e.g. with "
        "transformers' save_pretrained(safe_serialization=True)) and pass the "
        ".safetensors file")
  with zipfile.ZipFile(path) as archive:
    pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if len(pickles) != 1:
      raise ValueError(f"{path}: expected one data.pkl in the archive, found "
                       f"{pickles}")
    prefix = pickles[0][:-len("data.pkl")]
    with archive.open(pickles[0]) as f:
      state = _TorchUnpickler(f, archive, prefix).load()
  if not isinstance(state, dict):
    raise ValueError(f"{path}: not a state dict (got {type(state).__name__})")
  return {k: np.asarray(v) for k, v in state.items()}


def read_huggingface(path):
  """Reads HF weights from a model dir or a .safetensors/.bin file.

  Returns (state_dict, config_json_path or None). Sharded checkpoints
  (model.safetensors.index.json / pytorch_model.bin.index.json) are merged.
  """
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


# ======================================================================
# Configs of foreign sources
# ======================================================================
def huggingface_config(values, source="config.json"):
  """Maps an HF AlbertConfig dict to AlbertConfig.

  HF's "gelu" is the exact erf GELU and "gelu_new" the tanh approximation
  that the original code calls "gelu"; the names are translated.
  """
  fields = {f for f in AlbertConfig.__dataclass_fields__}
  kept = {k: v for k, v in values.items() if k in fields}
  act = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_fast": "gelu",
         "gelu_pytorch_tanh": "gelu"}
  if "hidden_act" in kept:
    kept["hidden_act"] = act.get(kept["hidden_act"], kept["hidden_act"])
  if values.get("position_embedding_type", "absolute") != "absolute":
    raise ConversionError(
        f"{source}: position_embedding_type="
        f"{values['position_embedding_type']!r} is not supported (absolute only)")
  return AlbertConfig.from_dict(kept, source=source)


# ======================================================================
# Foreign names -> original google-research names
# ======================================================================
_HF_LAYER_PARTS = {
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
  """HF AlbertModel/AlbertForPreTraining/AlbertForMaskedLM names -> original.

  Torch Linear weights [out, in] become kernels [in, out]; LayerNorm
  weight/bias become gamma/beta; embeddings keep their shape. Returns
  (tensors, unconsumed, notes): the tied decoder weight/bias are consumed
  when they equal word_embeddings / predictions.bias (noted otherwise).
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
      if part in _HF_LAYER_PARTS:
        target = (f"bert/encoder/transformer/group_{group}/inner_group_{inner}/"
                  f"{_HF_LAYER_PARTS[part]}")
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


# brightmart's own layout: BERT-style names under layer_shared.
_BRIGHTMART_LAYER_PARTS = {
    "attention/self/query": "attention_1/self/query",
    "attention/self/key": "attention_1/self/key",
    "attention/self/value": "attention_1/self/value",
    "attention/output/dense": "attention_1/output/dense",
    "attention/output/LayerNorm": "LayerNorm",
    "intermediate/dense": "ffn_1/intermediate/dense",
    "output/dense": "ffn_1/intermediate/output/dense",
    "output/LayerNorm": "LayerNorm_1",
}
BRIGHTMART_RELEASES = (
    "brightmart albert_zh *_google releases (albert_tiny_zh_google, "
    "albert_small_zh_google, albert_base_zh_google ...) in Google's layout, "
    "and the own-layout releases with bert/encoder/layer_shared "
    "(albert_tiny_zh, albert_small_zh, albert_base_zh, albert_large_zh, "
    "albert_xlarge_zh; not the preln xxlarge)")


def is_brightmart_layout(tensors):
  return any(n.startswith("bert/encoder/layer_shared/") or
             n == "bert/embeddings/word_embeddings_2" for n in tensors)


def brightmart_to_original(tensors):
  """brightmart's own layout -> original names (embedding_layout="brightmart").

  word_embeddings_2 [E, H] (no bias) becomes the projection kernel; position
  and type embeddings [*, H] and the LayerNorm over H keep their names (the
  model's brightmart embedding expects those widths). Returns (tensors,
  unconsumed).
  """
  out, unconsumed = {}, []
  layer = "bert/encoder/layer_shared/"
  for name, value in tensors.items():
    if name == "bert/embeddings/word_embeddings_2":
      out["bert/encoder/embedding_hidden_mapping_in/kernel"] = value
    elif name.startswith(layer):
      module, _, leaf = name[len(layer):].rpartition("/")
      if module not in _BRIGHTMART_LAYER_PARTS:
        unconsumed.append(name)
        continue
      out["bert/encoder/transformer/group_0/inner_group_0/"
          f"{_BRIGHTMART_LAYER_PARTS[module]}/{leaf}"] = value
    elif re.match(r"^bert/encoder/layer_\d+/", name):
      raise ConversionError(
          f"{name}: brightmart checkpoint without layer sharing is not "
          f"supported; supported: {BRIGHTMART_RELEASES}")
    else:
      out[name] = value
  return out, unconsumed


# ======================================================================
# Original names -> model variables
# ======================================================================
def _dense(prefix, layer):
  return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _layer_norm(prefix, layer):
  return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def original_variable_map(pretrainer):
  """{original TF1 name: (keras variable, transform)} for an AlbertPretrainer.

  `transform` maps the stored array to the variable's layout (identity except
  the SOP output_weights, stored [2, H] and used transposed). Heads that the
  model lacks (e.g. an AlbertEncoder passed alone) are left out.
  """
  encoder = getattr(pretrainer, "encoder", pretrainer)
  config = encoder.config
  if config.share != "all":
    raise ConversionError(
        f"config share={config.share!r}: original checkpoints store layers as "
        "group_G/inner_group_I, which needs share='all' (use num_hidden_groups "
        "to un-share)")
  identity = lambda x: x
  emb = encoder.embedding
  names = {
      "bert/embeddings/word_embeddings": emb.word_embeddings.embeddings,
      "bert/embeddings/token_type_embeddings":
          emb.token_type_embeddings.embeddings,
      "bert/embeddings/position_embeddings": emb.position_embeddings,
  }
  names.update(_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm))
  names["bert/encoder/embedding_hidden_mapping_in/kernel"] = (
      emb.projection.kernel)
  if emb.projection.use_bias:
    names["bert/encoder/embedding_hidden_mapping_in/bias"] = (
        emb.projection.bias)
  for index, block in enumerate(encoder.blocks):
    g, i = divmod(index, config.inner_group_num)
    prefix = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
    att, ffn = block.attention, block.ffn
    for part in ("query", "key", "value"):
      names[f"{prefix}/attention_1/self/{part}/kernel"] = getattr(
          att, f"{part}_kernel")
      names[f"{prefix}/attention_1/self/{part}/bias"] = getattr(
          att, f"{part}_bias")
    names.update(_dense(f"{prefix}/attention_1/output/dense",
                        att.output_dense))
    names.update(_layer_norm(f"{prefix}/LayerNorm", att.layer_norm))
    names.update(_dense(f"{prefix}/ffn_1/intermediate/dense",
                        ffn.intermediate_dense))
    names.update(_dense(f"{prefix}/ffn_1/intermediate/output/dense",
                        ffn.output_dense))
    names.update(_layer_norm(f"{prefix}/LayerNorm_1", ffn.layer_norm))
  names.update(_dense("bert/pooler/dense", encoder.pooler))
  mapping = {k: (v, identity) for k, v in names.items()}
  mlm = getattr(pretrainer, "masked_lm_head", None)
  if mlm is not None:
    heads = _dense("cls/predictions/transform/dense", mlm.transform)
    heads.update(_layer_norm("cls/predictions/transform/LayerNorm",
                             mlm.layer_norm))
    heads["cls/predictions/output_bias"] = mlm.output_bias
    mapping.update({k: (v, identity) for k, v in heads.items()})
  sop = getattr(pretrainer, "sentence_order_head", None)
  if sop is not None:
    mapping["cls/seq_relationship/output_weights"] = (sop.dense.kernel,
                                                      np.transpose)
    mapping["cls/seq_relationship/output_bias"] = (sop.dense.bias, identity)
  return mapping


def assign_original_weights(pretrainer, tensors, source="checkpoint"):
  """Copies {original name: array} into the model.

  Returns a report dict {"assigned", "missing", "unconsumed"} (name lists).
  Raises ConversionError naming the variable and both shapes on a mismatch.
  """
  mapping = original_variable_map(pretrainer)
  missing = sorted(set(mapping) - set(tensors))
  unconsumed = sorted(set(tensors) - set(mapping))
  assigned = []
  for name, (variable, transform) in sorted(mapping.items()):
    if name not in tensors:
      continue
    value = transform(np.asarray(tensors[name]))
    if tuple(value.shape) != tuple(variable.shape):
      raise ConversionError(
          f"{source}: variable {name} has shape {list(value.shape)} (after "
          f"layout transform) but the config needs {list(variable.shape)} "
          f"for {variable.path}; is --albert_config_file the config of this "
          "checkpoint?")
    variable.assign(value.astype(variable.dtype))
    assigned.append(name)
  return {"assigned": assigned, "missing": missing, "unconsumed": unconsumed}


# ======================================================================
# Conversion
# ======================================================================
_HEAD_PREFIXES = {"masked_lm_head": "cls/predictions/",
                  "sentence_order_head": "cls/seq_relationship/"}


def _read_source(source, checkpoint, albert_config_file):
  """Returns (config, tensors in original names, notes, unconsumed)."""
  notes, unconsumed = [], []
  config = (AlbertConfig.from_json_file(albert_config_file)
            if albert_config_file else None)
  if source in ("original", "brightmart"):
    tensors, skipped = read_tf1_checkpoint(checkpoint)
    notes.append(f"skipped {len(skipped)} optimizer slot / bookkeeping "
                 f"variable(s) (adam_m, adam_v, global_step, ...)")
    if config is None:
      raise ValueError(f"--source={source} needs --albert_config_file")
    if is_brightmart_layout(tensors):
      if source != "brightmart":
        raise ConversionError(
            f"{checkpoint} uses brightmart's own layout (bert/encoder/"
            "layer_shared, word_embeddings_2): use --source=brightmart")
      tensors, unconsumed = brightmart_to_original(tensors)
      config = config.replace(embedding_layout="brightmart")
      notes.append("brightmart own layout: embedding_layout='brightmart' "
                   "(projection E->H first, position/type embeddings of "
                   "width H; masked-LM transform H->H, then the transposed "
                   "projection)")
  elif source == "huggingface":
    state, config_json = read_huggingface(checkpoint)
    if config is None:
      if config_json is None:
        raise ValueError(f"{checkpoint}: no config.json beside it; pass "
                         "--albert_config_file")
      with open(config_json, encoding="utf-8") as f:
        config = huggingface_config(json.load(f), source=config_json)
      notes.append(f"config from {config_json}")
    tensors, unconsumed, hf_notes = huggingface_to_original(state)
    notes.extend(hf_notes)
  else:
    raise ValueError(f"--source must be one of {SOURCES}, got {source!r}")
  return config, tensors, notes, unconsumed


def _read_keras_hub(checkpoint):
  """A keras-hub AlbertBackbone from a local preset dir (config.json + weights)."""
  import keras_hub  # pylint: disable=g-import-not-at-top
  if not os.path.isdir(checkpoint):
    raise FileNotFoundError(
        f"--source=keras_hub needs a local preset directory (config.json + "
        f"model.weights.h5, as written by backbone.save_to_preset), got "
        f"{checkpoint}")
  return keras_hub.models.AlbertBackbone.from_preset(checkpoint)


def convert(source, checkpoint, output_dir, albert_config_file=None,
            log=print):
  """Converts a checkpoint to the project layout in `output_dir`.

  Writes ckpt-1.* (encoder + the heads the source has), albert_config.json
  and conversion_report.json. Returns the report dict: "assigned",
  "missing", "unconsumed", "heads", "notes", "checkpoint".
  Raises ConversionError when encoder tensors are missing or a shape differs.
  """

  if source == "keras_hub":
    backbone = _read_keras_hub(checkpoint)
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
    heads = []
  else:
    config, tensors, notes, unconsumed = _read_source(
        source, checkpoint, albert_config_file)
    pretrainer = AlbertPretrainer(config)
    report = assign_original_weights(pretrainer, tensors, source=checkpoint)
    report["unconsumed"] = sorted(set(report["unconsumed"]) | set(unconsumed))
    report["notes"] = notes
    encoder_missing = [n for n in report["missing"]
                       if not n.startswith("cls/")]
    if encoder_missing:
      raise ConversionError(
          f"{checkpoint}: {len(encoder_missing)} encoder tensor(s) expected by "
          f"the config were not found: {encoder_missing}. Unconsumed tensors "
          f"in the checkpoint: {report['unconsumed']}")
    heads = [part for part, prefix in _HEAD_PREFIXES.items()
             if not any(n.startswith(prefix) for n in report["missing"])]
    # A head with missing tensors is not saved: its other tensors are then
    # not consumed either.
    for part, prefix in _HEAD_PREFIXES.items():
      if part not in heads:
        dropped = [n for n in report["assigned"] if n.startswith(prefix)]
        report["assigned"] = [n for n in report["assigned"]
                              if n not in dropped]
        report["unconsumed"] = sorted(report["unconsumed"] + dropped)
        report["notes"].append(f"{part} not converted (missing tensors)")
  parts = {"encoder": pretrainer.encoder}
  parts.update({h: getattr(pretrainer, h) for h in heads})
  os.makedirs(output_dir, exist_ok=True)
  path = tf.train.Checkpoint(**parts).save(os.path.join(output_dir, "ckpt"))
  config.to_json_file(os.path.join(output_dir, checkpoints.CONFIG_NAME))
  report.update(heads=heads, checkpoint=path, source=source,
                input=str(checkpoint))
  with open(os.path.join(output_dir, "conversion_report.json"), "w",
            encoding="utf-8") as f:
    json.dump(report, f, indent=2)
  log(f"Converted {checkpoint} ({source}) -> {path}: "
      f"{len(report['assigned'])} tensors assigned, heads {heads or 'none'}")
  for note in report["notes"]:
    log(f"  note: {note}")
  for name in report["missing"]:
    log(f"  expected but not found: {name}")
  for name in report["unconsumed"]:
    log(f"  not consumed: {name}")
  return report


def main(argv):
  del argv
  f = flags.FLAGS
  convert(f.source, f.checkpoint, f.output_dir, f.albert_config_file)


def define_flags():
  flags.DEFINE_enum("source", None, list(SOURCES), "Checkpoint format.")
  flags.DEFINE_string("checkpoint", None, "TF1 checkpoint prefix/dir, HF model "
                      "dir/.safetensors/.bin, or keras-hub preset dir.")
  flags.DEFINE_string("albert_config_file", None, "albert_config.json of the "
                      "checkpoint (HF: default config.json beside it).")
  flags.DEFINE_string("output_dir", None, "Where the converted checkpoint and "
                      "albert_config.json go.")
  flags.mark_flags_as_required(["source", "checkpoint", "output_dir"])


if __name__ == "__main__":
  define_flags()
  app.run(main)
