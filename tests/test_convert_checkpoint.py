"""convert_checkpoint: tiny checkpoints in every source format, real names/shapes.

Each test writes a checkpoint the way the real release stores it (TF1
name-based bundle, HF safetensors / torch zip, brightmart's own layout),
converts it, restores the result into a fresh model through
checkpoints.restore_weights, and compares the outputs with an independent
NumPy forward pass written against the *source* names and orientation.
"""

import collections
import contextlib
import io
import json
import math
import os
import pickle
import sys
import types
import zipfile

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import tensorflow as tf

from albert_tf.training import checkpoints
from albert_tf import convert_checkpoint as cc
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.models import AlbertPretrainer
from tests.numpy_reference import assert_close_to_scale

V, E, H, HEADS, I, MAX_POS = 50, 8, 16, 2, 32, 512
# Converted vs. source model outputs: the same math in another graph, so
# float32 rounding differs; the absolute slack is REL times the largest
# magnitude compared (assert_close_to_scale), not a constant.
REL = 1e-5


def tiny_config(layers=2, groups=1, inner=1, **kw):
  return AlbertConfig(vocab_size=V, embedding_size=E, hidden_size=H,
                      num_hidden_layers=layers, num_hidden_groups=groups,
                      inner_group_num=inner, num_attention_heads=HEADS,
                      intermediate_size=I, max_position_embeddings=MAX_POS,
                      **kw)


# ------------------------------------------------------ NumPy reference
def gelu_tanh(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi) *
                                  (x + 0.044715 * x ** 3)))


def layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def block_forward(x, p, bias):
  """Post-LN block; p holds kernels as y = x @ W + b (W [in, out])."""
  b, s, _ = x.shape
  d = H // HEADS

  def heads(t):
    return t.reshape(b, s, HEADS, d).transpose(0, 2, 1, 3)
  q, k, v = (heads(x @ p[n] + p[n + "_b"]) for n in ("q", "k", "v"))
  scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, H)
  x = layer_norm(x + ctx @ p["o"] + p["o_b"], p["ln1_g"], p["ln1_b"])
  ffn = gelu_tanh(x @ p["ff1"] + p["ff1_b"]) @ p["ff2"] + p["ff2_b"]
  return layer_norm(x + ffn, p["ln2_g"], p["ln2_b"])


def reference_forward(w, blocks, cfg, inputs, layout="google"):
  """Independent forward pass. `w`: embedding/pooler/head arrays (y = x@W+b
  orientation), `blocks[g][i]`: block params. Returns the output dict."""
  ids, mask, seg = (inputs[k] for k in ("input_ids", "input_mask",
                                        "segment_ids"))
  s = ids.shape[1]
  if layout == "google":
    x = w["word"][ids] + w["pos"][:s] + w["type"][seg]
    x = layer_norm(x, w["emb_ln_g"], w["emb_ln_b"]) @ w["proj"] + w["proj_b"]
  else:  # brightmart: project first, then width-H position/type embeddings
    x = w["word"][ids] @ w["proj"] + w["pos"][:s] + w["type"][seg]
    x = layer_norm(x, w["emb_ln_g"], w["emb_ln_b"])
  bias = ((1.0 - mask) * -10000.0)[:, None, None, :]
  for layer in range(cfg.num_hidden_layers):
    for p in blocks[int(layer / cfg.num_hidden_layers * cfg.num_hidden_groups)]:
      x = block_forward(x, p, bias)
  pooled = np.tanh(x[:, 0] @ w["pool"] + w["pool_b"])
  out = {"sequence_output": x, "pooled_output": pooled,
         "sop_logits": pooled @ w["sop_w"].T + w["sop_b"]}
  if "mlm" in w:
    g = np.take_along_axis(x, inputs["masked_lm_positions"][..., None], 1)
    t = gelu_tanh(g @ w["mlm"] + w["mlm_b"])
    t = layer_norm(t, w["mlm_ln_g"], w["mlm_ln_b"])
    if layout == "brightmart":  # [.., H] -> [.., E] by word_embeddings_2^T
      t = t @ w["proj"].T
    out["mlm_logits"] = t @ w["word"].T + w["mlm_out_b"]
  return out


def make_inputs(batch=2, seq=7, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, V, size=(batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 5:] = 0
  ids[1, 5:] = 0
  seg = np.zeros_like(ids)
  seg[:, 3:] = 1
  positions = np.array([[1, 2, 4], [0, 3, 4]], np.int32)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": seg,
          "masked_lm_positions": positions}


def model_outputs(output_dir, cfg_expect=None):
  """Restores the converted checkpoint into a fresh pretrainer; runs it."""
  config = AlbertConfig.from_json_file(
      os.path.join(output_dir, "albert_config.json"))
  if cfg_expect is not None:
    assert config == cfg_expect
  model = AlbertPretrainer(config)
  report = checkpoints.restore_weights(output_dir, model)
  out = model(make_inputs(), training=False)
  return {k: np.asarray(v) for k, v in out.items()}, report


def assert_close(out, ref, keys):
  for key in keys:
    try:
      assert_close_to_scale(out[key], ref[key], rel=REL, rtol=1e-5)
    except AssertionError as e:
      raise AssertionError(f"{key}: {e}") from None


# ---------------------------------------------------- source writers
def random_weights(cfg, rng, layout="google"):
  """Model weights in neutral names (y = x @ W + b), random, std ~0.3."""
  def r(*shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)
  side = H if layout == "brightmart" else E
  w = {"word": r(V, E), "pos": r(MAX_POS, side), "type": r(2, side),
       "emb_ln_g": 1 + r(side), "emb_ln_b": r(side),
       "proj": r(E, H), "proj_b": r(H) if layout == "google" else None,
       "pool": r(H, H), "pool_b": r(H), "sop_w": r(2, H), "sop_b": r(2),
       "mlm": r(H, E), "mlm_b": r(E), "mlm_ln_g": 1 + r(E), "mlm_ln_b": r(E),
       "mlm_out_b": r(V)}
  blocks = [[{"q": r(H, H), "q_b": r(H), "k": r(H, H), "k_b": r(H),
              "v": r(H, H), "v_b": r(H), "o": r(H, H), "o_b": r(H),
              "ln1_g": 1 + r(H), "ln1_b": r(H), "ff1": r(H, I), "ff1_b": r(I),
              "ff2": r(I, H), "ff2_b": r(H), "ln2_g": 1 + r(H),
              "ln2_b": r(H)} for _ in range(cfg.inner_group_num)]
            for _ in range(cfg.num_hidden_groups)]
  if layout == "brightmart":
    w["proj_b"] = np.zeros([H], np.float32)
    # brightmart's MLM transform is H -> H + LayerNorm(H).
    w.update(mlm=r(H, H), mlm_b=r(H), mlm_ln_g=1 + r(H), mlm_ln_b=r(H))
  return w, blocks


def google_names(w, blocks):
  """The original google-research TF1 variable names (written by hand)."""
  t = {"bert/embeddings/word_embeddings": w["word"],
       "bert/embeddings/position_embeddings": w["pos"],
       "bert/embeddings/token_type_embeddings": w["type"],
       "bert/embeddings/LayerNorm/gamma": w["emb_ln_g"],
       "bert/embeddings/LayerNorm/beta": w["emb_ln_b"],
       "bert/encoder/embedding_hidden_mapping_in/kernel": w["proj"],
       "bert/encoder/embedding_hidden_mapping_in/bias": w["proj_b"],
       "bert/pooler/dense/kernel": w["pool"],
       "bert/pooler/dense/bias": w["pool_b"],
       "cls/predictions/transform/dense/kernel": w["mlm"],
       "cls/predictions/transform/dense/bias": w["mlm_b"],
       "cls/predictions/transform/LayerNorm/gamma": w["mlm_ln_g"],
       "cls/predictions/transform/LayerNorm/beta": w["mlm_ln_b"],
       "cls/predictions/output_bias": w["mlm_out_b"],
       "cls/seq_relationship/output_weights": w["sop_w"],
       "cls/seq_relationship/output_bias": w["sop_b"]}
  parts = {"attention_1/self/query": "q", "attention_1/self/key": "k",
           "attention_1/self/value": "v", "attention_1/output/dense": "o",
           "ffn_1/intermediate/dense": "ff1",
           "ffn_1/intermediate/output/dense": "ff2"}
  for g, group in enumerate(blocks):
    for i, p in enumerate(group):
      pre = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
      for name, key in parts.items():
        t[pre + name + "/kernel"] = p[key]
        t[pre + name + "/bias"] = p[key + "_b"]
      for ln, key in (("LayerNorm", "ln1"), ("LayerNorm_1", "ln2")):
        t[pre + ln + "/gamma"] = p[key + "_g"]
        t[pre + ln + "/beta"] = p[key + "_b"]
  return t


def write_tf1_checkpoint(tensors, prefix, with_slots=True):
  """A TF1 name-based bundle via the SaveV2 op (what tf.compat.v1 Saver writes)."""
  tensors = dict(tensors)
  if with_slots:
    for name in list(tensors)[:3]:
      tensors[name + "/adam_m"] = np.zeros_like(tensors[name])
      tensors[name + "/adam_v"] = np.ones_like(tensors[name])
    tensors["global_step"] = np.array(125000, np.int64)
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  return prefix


# -------------------------------------------------------------- tests
@pytest.mark.parametrize("source,layers,groups,inner", [
    ("original", 4, 2, 2), ("brightmart", 2, 1, 1)])
def test_original_layout(tmp_path, source, layers, groups, inner):
  """Google's TF1 names (also brightmart's *_google releases)."""
  cfg = tiny_config(layers, groups, inner)
  w, blocks = random_weights(cfg, np.random.default_rng(1))
  prefix = write_tf1_checkpoint(google_names(w, blocks),
                                str(tmp_path / "model.ckpt-best"))
  cfg_file = tmp_path / "albert_config.json"
  cfg.to_json_file(cfg_file)
  out_dir = str(tmp_path / "out")
  report = cc.convert(source, prefix, out_dir, str(cfg_file), log=lambda m: 0)
  assert report["missing"] == [] and report["unconsumed"] == []
  assert report["heads"] == ["masked_lm_head", "sentence_order_head"]
  assert any("skipped 7" in n for n in report["notes"])  # 3x2 slots + step
  out, restore = model_outputs(out_dir, cfg)
  assert restore["missing"] == []
  ref = reference_forward(w, blocks, cfg, make_inputs())
  assert_close(out, ref, ["sequence_output", "pooled_output", "mlm_logits",
                          "sop_logits"])


def brightmart_names(w, blocks):
  """brightmart's own albert_zh layout (layer_shared, word_embeddings_2)."""
  p = blocks[0][0]
  t = {"bert/embeddings/word_embeddings": w["word"],
       "bert/embeddings/word_embeddings_2": w["proj"],
       "bert/embeddings/position_embeddings": w["pos"],
       "bert/embeddings/token_type_embeddings": w["type"],
       "bert/embeddings/LayerNorm/gamma": w["emb_ln_g"],
       "bert/embeddings/LayerNorm/beta": w["emb_ln_b"],
       "bert/pooler/dense/kernel": w["pool"],
       "bert/pooler/dense/bias": w["pool_b"],
       "cls/predictions/transform/dense/kernel": w["mlm"],  # [H, H]
       "cls/predictions/transform/dense/bias": w["mlm_b"],
       "cls/predictions/transform/LayerNorm/gamma": w["mlm_ln_g"],
       "cls/predictions/transform/LayerNorm/beta": w["mlm_ln_b"],
       "cls/predictions/output_bias": w["mlm_out_b"],
       "cls/seq_relationship/output_weights": w["sop_w"],
       "cls/seq_relationship/output_bias": w["sop_b"]}
  pre = "bert/encoder/layer_shared/"
  for name, key in (("attention/self/query", "q"), ("attention/self/key", "k"),
                    ("attention/self/value", "v"),
                    ("attention/output/dense", "o"),
                    ("intermediate/dense", "ff1"), ("output/dense", "ff2")):
    t[pre + name + "/kernel"] = p[key]
    t[pre + name + "/bias"] = p[key + "_b"]
  for name, key in (("attention/output/LayerNorm", "ln1"),
                    ("output/LayerNorm", "ln2")):
    t[pre + name + "/gamma"] = p[key + "_g"]
    t[pre + name + "/beta"] = p[key + "_b"]
  return t


def test_brightmart_own_layout(tmp_path):
  cfg = tiny_config(layers=2)
  w, blocks = random_weights(cfg, np.random.default_rng(2), "brightmart")
  prefix = write_tf1_checkpoint(brightmart_names(w, blocks),
                                str(tmp_path / "albert_model.ckpt"))
  cfg.to_json_file(tmp_path / "albert_config.json")
  with pytest.raises(cc.ConversionError, match="--source=brightmart"):
    cc.convert("original", prefix, str(tmp_path / "x"),
               str(tmp_path / "albert_config.json"), log=lambda m: 0)
  out_dir = str(tmp_path / "out")
  report = cc.convert("brightmart", prefix, out_dir,
                      str(tmp_path / "albert_config.json"), log=lambda m: 0)
  assert report["heads"] == ["masked_lm_head", "sentence_order_head"]
  assert report["missing"] == [] and report["unconsumed"] == []
  out, restore = model_outputs(out_dir,
                               cfg.replace(embedding_layout="brightmart"))
  assert restore["missing"] == []
  ref = reference_forward(w, blocks, cfg, make_inputs(), layout="brightmart")
  assert_close(out, ref, ["sequence_output", "pooled_output", "mlm_logits",
                          "sop_logits"])


def hf_state_dict(w, blocks):
  """HF AlbertForPreTraining state dict; torch Linear weights are [out, in]."""
  t = {"albert.embeddings.word_embeddings.weight": w["word"],
       "albert.embeddings.position_embeddings.weight": w["pos"],
       "albert.embeddings.token_type_embeddings.weight": w["type"],
       "albert.embeddings.LayerNorm.weight": w["emb_ln_g"],
       "albert.embeddings.LayerNorm.bias": w["emb_ln_b"],
       "albert.embeddings.position_ids": np.arange(MAX_POS)[None].astype(
           np.int64),
       "albert.encoder.embedding_hidden_mapping_in.weight": w["proj"].T,
       "albert.encoder.embedding_hidden_mapping_in.bias": w["proj_b"],
       "albert.pooler.weight": w["pool"].T, "albert.pooler.bias": w["pool_b"],
       "predictions.dense.weight": w["mlm"].T,
       "predictions.dense.bias": w["mlm_b"],
       "predictions.LayerNorm.weight": w["mlm_ln_g"],
       "predictions.LayerNorm.bias": w["mlm_ln_b"],
       "predictions.bias": w["mlm_out_b"],
       "predictions.decoder.weight": w["word"],
       "predictions.decoder.bias": w["mlm_out_b"],
       "sop_classifier.classifier.weight": w["sop_w"],
       "sop_classifier.classifier.bias": w["sop_b"]}
  for g, group in enumerate(blocks):
    for i, p in enumerate(group):
      pre = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{i}."
      for name, key in (("attention.query", "q"), ("attention.key", "k"),
                        ("attention.value", "v"), ("attention.dense", "o"),
                        ("ffn", "ff1"), ("ffn_output", "ff2")):
        t[pre + name + ".weight"] = np.ascontiguousarray(p[key].T)
        t[pre + name + ".bias"] = p[key + "_b"]
      for name, key in (("attention.LayerNorm", "ln1"),
                        ("full_layer_layer_norm", "ln2")):
        t[pre + name + ".weight"] = p[key + "_g"]
        t[pre + name + ".bias"] = p[key + "_b"]
  return {k: np.ascontiguousarray(v) for k, v in t.items()}


def hf_config_json(cfg):
  return {"architectures": ["AlbertForPreTraining"], "model_type": "albert",
          "attention_probs_dropout_prob": 0, "bos_token_id": 2,
          "classifier_dropout_prob": 0.1, "embedding_size": E,
          "eos_token_id": 3, "hidden_act": "gelu_new",
          "hidden_dropout_prob": 0, "hidden_size": H,
          "initializer_range": 0.02, "inner_group_num": cfg.inner_group_num,
          "intermediate_size": I, "layer_norm_eps": 1e-12,
          "max_position_embeddings": MAX_POS, "num_attention_heads": HEADS,
          "num_hidden_groups": cfg.num_hidden_groups,
          "num_hidden_layers": cfg.num_hidden_layers, "pad_token_id": 0,
          "position_embedding_type": "absolute", "torch_dtype": "float32",
          "transformers_version": "4.44.0", "type_vocab_size": 2,
          "vocab_size": V}


def test_huggingface_safetensors(tmp_path):
  cfg = tiny_config(layers=2, groups=1, inner=1)
  w, blocks = random_weights(cfg, np.random.default_rng(3))
  state = hf_state_dict(w, blocks)
  hf_dir = tmp_path / "albert-tiny-hf"
  hf_dir.mkdir()
  safetensors.numpy.save_file(state, str(hf_dir / "model.safetensors"))
  (hf_dir / "config.json").write_text(json.dumps(hf_config_json(cfg)))
  out_dir = str(tmp_path / "out")
  report = cc.convert("huggingface", str(hf_dir), out_dir, log=lambda m: 0)
  assert report["missing"] == [] and report["unconsumed"] == []
  assert report["heads"] == ["masked_lm_head", "sentence_order_head"]
  out, _ = model_outputs(out_dir, cfg)  # gelu_new -> "gelu" (tanh approx)
  ref = reference_forward(w, blocks, cfg, make_inputs())
  assert_close(out, ref, ["sequence_output", "pooled_output", "mlm_logits",
                          "sop_logits"])


def test_hf_config_gelu_names():
  values = hf_config_json(tiny_config())
  assert cc.huggingface_config(values).hidden_act == "gelu"
  values["hidden_act"] = "gelu"  # HF "gelu" is the exact erf GELU
  assert cc.huggingface_config(values).hidden_act == "gelu_exact"


@contextlib.contextmanager
def fake_torch_modules():
  """Stand-in `torch` modules so pickle writes torch's global names."""
  torch = types.ModuleType("torch")
  utils = types.ModuleType("torch._utils")

  def _rebuild_tensor_v2(*args):
    raise AssertionError("never called")
  _rebuild_tensor_v2.__module__ = "torch._utils"
  _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
  utils._rebuild_tensor_v2 = _rebuild_tensor_v2
  for name in ("FloatStorage", "LongStorage"):
    setattr(torch, name, type(name, (), {"__module__": "torch",
                                         "__qualname__": name}))
  saved = {k: sys.modules.get(k) for k in ("torch", "torch._utils")}
  sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
  try:
    yield torch, utils
  finally:
    for k, v in saved.items():
      if v is None:
        sys.modules.pop(k, None)
      else:
        sys.modules[k] = v


def write_torch_zip(state, path):
  """A torch.save zip archive (data.pkl + data/<key>) written without torch."""
  class Storage:
    def __init__(self, key, array):
      self.key, self.array = key, array

  class Tensor:
    def __init__(self, storage, shape):
      self.storage, self.shape = storage, shape

  with fake_torch_modules() as (torch, utils):
    storage_types = {np.dtype(np.float32): torch.FloatStorage,
                     np.dtype(np.int64): torch.LongStorage}

    class Pickler(pickle.Pickler):
      def persistent_id(self, obj):
        if isinstance(obj, Storage):
          return ("storage", storage_types[obj.array.dtype], obj.key, "cpu",
                  obj.array.size)
        return None

      def reducer_override(self, obj):
        if isinstance(obj, Tensor):
          shape = tuple(obj.shape)
          stride = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
          return (utils._rebuild_tensor_v2,
                  (obj.storage, 0, shape, stride, False,
                   collections.OrderedDict()))
        return NotImplemented

    tensors = collections.OrderedDict()
    for i, (name, array) in enumerate(state.items()):
      tensors[name] = Tensor(Storage(str(i), array), array.shape)
    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump(tensors)
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("archive/data.pkl", buffer.getvalue())
    z.writestr("archive/version", "3\n")
    for i, array in enumerate(state.values()):
      z.writestr(f"archive/data/{i}", np.ascontiguousarray(array).tobytes())


def test_pytorch_bin_reader(tmp_path):
  cfg = tiny_config(layers=2)
  state = hf_state_dict(*random_weights(cfg, np.random.default_rng(4)))
  path = str(tmp_path / "pytorch_model.bin")
  write_torch_zip(state, path)
  loaded = cc.read_pytorch_bin(path)
  assert sorted(loaded) == sorted(state)
  for k in state:
    np.testing.assert_array_equal(loaded[k], state[k])
  legacy = tmp_path / "legacy.bin"
  legacy.write_bytes(pickle.dumps({"a": 1}))
  with pytest.raises(ValueError, match="safetensors"):
    cc.read_pytorch_bin(str(legacy))


def test_safetensors_bf16_becomes_float32(tmp_path):
  values = np.array([1.0, -2.5, 0.15625], np.float32)  # exact in bfloat16
  path = str(tmp_path / "bf16.safetensors")
  safetensors.numpy.save_file({"x": values.astype(ml_dtypes.bfloat16),
                               "ids": np.arange(3, dtype=np.int64)}, path)
  loaded = cc.read_safetensors(path)
  assert loaded["x"].dtype == np.float32 and loaded["ids"].dtype == np.int64
  np.testing.assert_array_equal(loaded["x"], values)
  np.testing.assert_array_equal(loaded["ids"], [0, 1, 2])


def test_damaged_weight_files_are_one_line_errors_naming_them(tmp_path):
  state = {"a": np.ones([4, 4], np.float32), "b": np.zeros([3], np.int64)}
  good = tmp_path / "model.safetensors"
  safetensors.numpy.save_file(state, str(good))
  blob = good.read_bytes()
  cases = {"truncated.safetensors": blob[:-5],
           "header_only.safetensors": blob[:6],
           "junk.safetensors": b"this is not a safetensors file at all"}
  write_torch_zip(state, str(tmp_path / "full.bin"))
  torch_blob = (tmp_path / "full.bin").read_bytes()
  cases["truncated.bin"] = torch_blob[:len(torch_blob) // 2]
  for name, data in cases.items():
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError) as error:
      cc.read_huggingface(str(tmp_path / name))
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / name) in message, message
    assert "truncated or corrupt" in message, message


def test_pytorch_bin_refuses_code(tmp_path):
  """A pickle that would call os.system is refused, naming the file."""
  class RunsCode:
    def __reduce__(self):
      return os.system, ("echo should-not-run",)
  path = tmp_path / "evil.bin"
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({"w": RunsCode()}, protocol=2))
  with pytest.raises(ValueError, match=r"evil\.bin: .*(posix|os)\.system"):
    cc.read_pytorch_bin(str(path))


def test_errors_name_the_variable(tmp_path):
  cfg = tiny_config(layers=2)
  w, blocks = random_weights(cfg, np.random.default_rng(5))
  names = google_names(w, blocks)
  names["bert/encoder/some_extra/kernel"] = np.zeros([2, 2], np.float32)
  prefix = write_tf1_checkpoint(names, str(tmp_path / "model.ckpt"),
                                with_slots=False)
  # A config of another hidden size: a clear error with both shapes.
  wrong = tmp_path / "wrong.json"
  cfg.replace(hidden_size=32, intermediate_size=64).to_json_file(wrong)
  with pytest.raises(cc.ConversionError,
                     match=r"embedding_hidden_mapping_in/bias has shape \[16\]"
                     r".*needs \[32\]"):
    cc.convert("original", prefix, str(tmp_path / "a"), str(wrong),
               log=lambda m: 0)
  # Extra tensors are reported; missing head tensors drop that head.
  del names["cls/seq_relationship/output_bias"]
  prefix = write_tf1_checkpoint(names, str(tmp_path / "model2.ckpt"),
                                with_slots=False)
  cfg.to_json_file(tmp_path / "c.json")
  report = cc.convert("original", prefix, str(tmp_path / "b"),
                      str(tmp_path / "c.json"), log=lambda m: 0)
  assert report["unconsumed"] == ["bert/encoder/some_extra/kernel",
                                  "cls/seq_relationship/output_weights"]
  assert report["missing"] == ["cls/seq_relationship/output_bias"]
  assert report["heads"] == ["masked_lm_head"]
  # A missing encoder tensor is an error listing it.
  del names["bert/pooler/dense/bias"]
  prefix = write_tf1_checkpoint(names, str(tmp_path / "model3.ckpt"),
                                with_slots=False)
  with pytest.raises(cc.ConversionError, match="bert/pooler/dense/bias"):
    cc.convert("original", prefix, str(tmp_path / "c"),
               str(tmp_path / "c.json"), log=lambda m: 0)


def test_keras_hub_backbone(tmp_path):
  """keras-hub's own AlbertBackbone is the independent reference here."""
  import keras
  import keras_hub
  keras.utils.set_random_seed(7)
  backbone = keras_hub.models.AlbertBackbone(
      vocabulary_size=V, num_layers=4, num_heads=HEADS, num_groups=2,
      num_inner_repetitions=2, embedding_dim=E, hidden_dim=H,
      intermediate_dim=I, max_sequence_length=MAX_POS)
  for w in backbone.weights:  # non-trivial LayerNorm/bias values
    w.assign(np.random.default_rng(len(w.path)).normal(
        0, 0.3, w.shape).astype(np.float32) + (1 if "gamma" in w.path else 0))
  preset = tmp_path / "albert_tiny_kh"
  backbone.save_to_preset(str(preset))
  out_dir = str(tmp_path / "out")
  report = cc.convert("keras_hub", str(preset), out_dir, log=lambda m: 0)
  assert report["heads"] == []
  out, restore = model_outputs(out_dir)
  assert restore["missing"] == ["masked_lm_head", "sentence_order_head"]
  inputs = make_inputs()
  ref = backbone({"token_ids": inputs["input_ids"],
                  "segment_ids": inputs["segment_ids"],
                  "padding_mask": inputs["input_mask"]})
  ref = {k: np.asarray(v) for k, v in ref.items()}
  mask = inputs["input_mask"][..., None].astype(bool)
  # keras-hub masks padded keys only; compare real positions (and pooled).
  assert_close_to_scale(np.where(mask, out["sequence_output"], 0),
                        np.where(mask, ref["sequence_output"], 0),
                        rel=REL, rtol=1e-5)
  assert_close_to_scale(out["pooled_output"], ref["pooled_output"],
                        rel=REL, rtol=1e-5)


def test_hf_names_without_prefix_and_extra_heads():
  """AlbertModel state dicts have no "albert." prefix; task heads are reported."""
  cfg = tiny_config(layers=2)
  state = hf_state_dict(*random_weights(cfg, np.random.default_rng(6)))
  bare = {k[len("albert."):]: v for k, v in state.items()
          if k.startswith("albert.")}
  bare["classifier.weight"] = np.zeros([3, H], np.float32)
  tensors, unconsumed, notes = cc.huggingface_to_original(bare)
  full, _, _ = cc.huggingface_to_original(state)
  assert unconsumed == ["classifier.weight"]
  assert notes == ["skipped buffer embeddings.position_ids"]
  assert sorted(tensors) == sorted(n for n in full if n.startswith("bert/"))
  np.testing.assert_array_equal(
      tensors["bert/encoder/transformer/group_0/inner_group_0/"
              "ffn_1/intermediate/dense/kernel"],
      state["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"].T)
