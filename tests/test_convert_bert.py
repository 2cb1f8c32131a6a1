"""convert_checkpoint on BERT: Google's TF1 bert_model.ckpt and HF BERT safetensors.

Each test writes tiny random weights under the names and orientation the
real release uses (Google: bert/encoder/layer_N/..., kernels [in, out]; HF:
encoder.layer.N...., torch Linear weights [out, in]), converts them with
`convert_checkpoint.convert`, restores the result into a fresh model and
compares its outputs with a NumPy BERT forward pass that reads the *source*
arrays by their source names (erf GELU, as BERT's "gelu" is).
"""

import json
import os

import numpy as np
import pytest
import safetensors.numpy

import tensorflow as tf

from albert_tf import convert_checkpoint as cc
from albert_tf.core.config import AlbertConfig
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.training import checkpoints
from tests import cli_runner
from tests.numpy_reference import BERT_NORM_ROLES as NORMS
from tests.numpy_reference import BertHfSource as HfSource
from tests.numpy_reference import BertTf1Source as Tf1Source
from tests.numpy_reference import assert_close_to_scale
from tests.numpy_reference import bert_forward
from tests.test_convert_checkpoint import make_inputs  # [2, 7], 3 positions
from tests.test_convert_checkpoint import write_tf1_checkpoint
from tests.test_cli_errors import _TF_RUNTIME_LINE as TF_RUNTIME_LINE

V, H, HEADS, I, LAYERS, MAX_POS = 50, 16, 2, 32, 2, 32
# Converted model vs. NumPy float64: float32 rounding only; the absolute
# slack is REL times the largest magnitude compared (assert_close_to_scale).
REL = 1e-5
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# ------------------------------------------------------- source layouts
DENSE = {"q": (H, H), "k": (H, H), "v": (H, H), "att_out": (H, H),
         "inter": (H, I), "out": (I, H), "pool": (H, H), "mlm": (H, H)}
TABLES = {"word": (V, H), "pos": (MAX_POS, H), "type": (2, H)}
LAYER_ROLES = ("q", "k", "v", "att_out", "att_ln", "inter", "out", "out_ln")


def numpy_bert(src, inputs, heads=True):
  return bert_forward(src, inputs, LAYERS, HEADS, heads=heads)


# ----------------------------------------------------------- source writers
def _r(rng, *shape):
  return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def random_source(src, rng, heads=True):
  """Fills `src` (Tf1Source or HfSource) with random weights; returns src.t."""
  t = src.t
  for role, shape in TABLES.items():
    t[src.keys(role)] = _r(rng, *shape)
  roles = [(r, None) for r in ("emb_ln", "pool")] + [
      (r, n) for n in range(LAYERS) for r in LAYER_ROLES]
  if heads:
    roles += [("mlm", None), ("mlm_ln", None)]
    t[src.keys("mlm_bias")] = _r(rng, V)
    t[src.keys("nsp_w")], t[src.keys("nsp_b")] = _r(rng, 2, H), _r(rng, 2)
  for role, n in roles:
    first, second = src.keys(role, n)
    if role in NORMS:
      t[first], t[second] = 1 + _r(rng, H), _r(rng, H)
    else:
      shape = DENSE[role]
      t[first] = np.ascontiguousarray(src.kernel_layout(_r(rng, *shape)))
      t[second] = _r(rng, shape[1])
  return t


def tf1_bert_tensors(rng, heads=True):
  """Random weights under Google's TF1 BERT names, kernels [in, out]."""
  return random_source(Tf1Source(), rng, heads)


def hf_bert_state(rng, prefix, heads):
  """Random HF BertModel (heads=False) / BertForPreTraining state dict."""
  t = random_source(HfSource(prefix=prefix), rng, heads)
  t[prefix + "embeddings.position_ids"] = np.arange(MAX_POS)[None].astype(
      np.int64)
  if heads:  # Tied to the word embeddings and cls.predictions.bias.
    t["cls.predictions.decoder.weight"] = t[prefix + "embeddings."
                                            "word_embeddings.weight"]
    t["cls.predictions.decoder.bias"] = t["cls.predictions.bias"]
  return t


def write_vocab(directory, size=V):
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(SPECIAL + [f"w{i}" for i in range(size - 5)]) + "\n")
  return path


def google_bert_config(**changes):
  """bert_config.json as Google publishes it (no layer_norm_eps, no E)."""
  values = {"attention_probs_dropout_prob": 0.1, "directionality": "bidi",
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": H, "initializer_range": 0.02,
            "intermediate_size": I, "max_position_embeddings": MAX_POS,
            "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
            "pooler_fc_size": H, "pooler_num_attention_heads": 12,
            "pooler_num_fc_layers": 3, "pooler_size_per_head": 128,
            "pooler_type": "first_token_transform", "type_vocab_size": 2,
            "vocab_size": V}
  values.update(changes)
  return values


def hf_bert_config(architecture):
  return {"architectures": [architecture], "model_type": "bert",
          "attention_probs_dropout_prob": 0.1, "classifier_dropout": None,
          "gradient_checkpointing": False, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": H,
          "initializer_range": 0.02, "intermediate_size": I,
          "layer_norm_eps": 1e-12, "max_position_embeddings": MAX_POS,
          "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
          "pad_token_id": 0, "position_embedding_type": "absolute",
          "transformers_version": "4.8.2", "type_vocab_size": 2,
          "use_cache": True, "vocab_size": V}


def write_google_release(directory, tensors, **config_changes):
  """bert_model.ckpt + bert_config.json + vocab.txt, as Google ships them."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "bert_config.json"), "w") as f:
    json.dump(google_bert_config(**config_changes), f)
  write_vocab(directory)
  # With adam_m/adam_v slots and global_step, as a training run leaves them.
  return write_tf1_checkpoint(tensors,
                              os.path.join(directory, "bert_model.ckpt"))


# -------------------------------------------------------------- the model
def converted_outputs(output_dir):
  """Restores the conversion into a fresh AlbertPretrainer and runs it."""
  config = AlbertConfig.from_json_file(
      os.path.join(output_dir, "albert_config.json"))
  model = AlbertPretrainer(config)
  restore = checkpoints.restore_weights(output_dir, model)
  out = model(make_inputs(), training=False)
  return config, {k: np.asarray(v) for k, v in out.items()}, restore


def assert_outputs_close(out, ref):
  for key in ref:
    try:
      assert_close_to_scale(out[key], ref[key], rel=REL, rtol=1e-5)
    except AssertionError as e:
      raise AssertionError(f"{key}: {e}") from None


def quiet(_):
  pass


# ------------------------------------------------------------------ tests
def test_google_tf1_bert(tmp_path):
  tensors = tf1_bert_tensors(np.random.default_rng(1))
  prefix = write_google_release(str(tmp_path / "bert"), tensors)
  out_dir = str(tmp_path / "out")
  report = cc.convert("bert", prefix, out_dir, log=quiet)

  assert report["missing"] == [] and report["unconsumed"] == []
  assert report["heads"] == ["masked_lm_head", "sentence_order_head"]
  assert any("skipped 7" in n for n in report["notes"])  # 3x2 slots + step
  # Reported under Google's names: 5 + 16 per layer + 2 + 7 head tensors.
  assert len(report["assigned"]) == 5 + 16 * LAYERS + 2 + 7
  assert "bert/encoder/layer_1/output/LayerNorm/gamma" in report["assigned"]
  config, out, restore = converted_outputs(out_dir)
  assert restore["missing"] == []
  assert (config.share, config.embedding_size, config.hidden_act,
          config.layer_norm_eps, config.max_position_embeddings,
          config.type_vocab_size, config.initializer_range) == (
              "none", H, "gelu_exact", 1e-12, MAX_POS, 2, 0.02)
  assert_outputs_close(out, numpy_bert(Tf1Source(tensors), make_inputs()))
  # The vocab.txt beside the checkpoint is copied for --vocab_file.
  vocab = os.path.join(out_dir, "vocab.txt")
  assert report["vocab_file"] == vocab
  assert open(vocab).read() == open(tmp_path / "bert" / "vocab.txt").read()
  tok = load_tokenizer(vocab_file=vocab, do_lower_case=True)
  assert tok.encode("W3 w7") == [8, 12]


def test_tanh_gelu_would_differ(tmp_path):
  """The erf/tanh distinction is visible at this tolerance: a config that
  said "gelu_new" (tanh) gives outputs the erf reference rejects."""
  tensors = tf1_bert_tensors(np.random.default_rng(2), heads=False)
  prefix = write_google_release(str(tmp_path / "bert"), tensors,
                                hidden_act="gelu_new")
  report = cc.convert("bert", prefix, str(tmp_path / "out"), log=quiet)
  assert report["heads"] == []
  config, out, _ = converted_outputs(str(tmp_path / "out"))
  assert config.hidden_act == "gelu"
  with pytest.raises(AssertionError):
    assert_outputs_close(out, numpy_bert(Tf1Source(tensors), make_inputs(),
                                         heads=False))


@pytest.mark.parametrize("architecture,prefix,heads", [
    ("BertModel", "", False), ("BertForPreTraining", "bert.", True)])
def test_huggingface_bert(tmp_path, architecture, prefix, heads):
  state = hf_bert_state(np.random.default_rng(3), prefix, heads)
  hf_dir = tmp_path / "hf"
  hf_dir.mkdir()
  safetensors.numpy.save_file(state, str(hf_dir / "model.safetensors"))
  (hf_dir / "config.json").write_text(json.dumps(hf_bert_config(
      architecture)))
  (hf_dir / "tokenizer_config.json").write_text('{"do_lower_case": true}')
  write_vocab(str(hf_dir))
  out_dir = str(tmp_path / "out")
  report = cc.convert("huggingface", str(hf_dir), out_dir, log=quiet)

  assert report["unconsumed"] == []
  assert f"skipped buffer {prefix}embeddings.position_ids" in report["notes"]
  assert any("do_lower_case=True" in n for n in report["notes"])
  assert f"{prefix}encoder.layer.1.output.dense.weight" in report["assigned"]
  if heads:
    assert report["missing"] == []
    assert report["heads"] == ["masked_lm_head", "sentence_order_head"]
  else:  # A BertModel has no MLM/NSP heads: named as HF would name them.
    assert report["heads"] == []
    assert report["missing"] == [
        "cls.predictions.bias", "cls.predictions.transform.LayerNorm.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.dense.weight",
        "cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    assert ("masked_lm_head not converted (missing tensors)"
            in report["notes"])
  config, out, restore = converted_outputs(out_dir)
  assert (config.share, config.hidden_act) == ("none", "gelu_exact")
  assert restore["missing"] == ([] if heads else ["masked_lm_head",
                                                  "sentence_order_head"])
  ref = numpy_bert(HfSource(state, prefix), make_inputs(), heads=heads)
  assert_outputs_close(out, ref)


def _one_line_error(error, *parts):
  message = str(error.value)
  assert "\n" not in message, message
  for part in parts:
    assert part in message, message


def test_bad_inputs_are_one_line_errors_naming_file_and_variable(tmp_path):
  rng = np.random.default_rng(4)
  tensors = tf1_bert_tensors(rng)
  out = str(tmp_path / "out")

  # A missing encoder tensor: named as the BERT file names it.
  broken = dict(tensors)
  del broken["bert/encoder/layer_1/attention/output/dense/bias"]
  prefix = write_google_release(str(tmp_path / "missing"), broken)
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, out, log=quiet)
  _one_line_error(error, prefix,
                  "['bert/encoder/layer_1/attention/output/dense/bias']")

  # A shape that does not fit the config.
  prefix = write_google_release(str(tmp_path / "shape"), tensors,
                                intermediate_size=2 * I)
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, out, log=quiet)
  _one_line_error(error, prefix, "variable bert/encoder/layer_0/intermediate/"
                  f"dense/bias has shape [{I}]", f"needs [{2 * I}]")

  # Neither ALBERT nor BERT.
  prefix = write_google_release(str(tmp_path / "other"), {
      "model/dense/kernel": _r(rng, H, H), "model/dense/bias": _r(rng, H)})
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, out, log=quiet)
  _one_line_error(error, prefix, "neither ALBERT nor BERT",
                  "model/dense/bias")
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("original", prefix, out,
               str(tmp_path / "other" / "bert_config.json"), log=quiet)
  _one_line_error(error, prefix, "neither ALBERT nor BERT")

  # The wrong --source either way.
  prefix = write_google_release(str(tmp_path / "ok"), tensors)
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("original", prefix, out,
               str(tmp_path / "ok" / "bert_config.json"), log=quiet)
  _one_line_error(error, prefix, "use --source=bert")
  albert = {"bert/encoder/transformer/group_0/inner_group_0/LayerNorm/gamma":
                np.ones([H], np.float32)}
  prefix = write_google_release(str(tmp_path / "albert"), albert)
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, out, log=quiet)
  _one_line_error(error, prefix, "use --source=original")

  # A vocab.txt with more entries than vocab_size is not this model's.
  write_vocab(str(tmp_path / "ok"), size=V + 1)
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", str(tmp_path / "ok" / "bert_model.ckpt"), out,
               log=quiet)
  _one_line_error(error, str(tmp_path / "ok" / "vocab.txt"),
                  f"{V + 1} tokens but vocab_size={V}")
  assert not os.path.exists(out)  # nothing written by any of them

  # HF weights of another model type.
  hf_dir = tmp_path / "roberta"
  hf_dir.mkdir()
  safetensors.numpy.save_file(hf_bert_state(rng, "", False),
                              str(hf_dir / "model.safetensors"))
  (hf_dir / "config.json").write_text(json.dumps(
      dict(hf_bert_config("RobertaModel"), model_type="roberta")))
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("huggingface", str(hf_dir), out, log=quiet)
  _one_line_error(error, str(hf_dir / "config.json"), "model_type='roberta'",
                  "neither albert nor bert")


def test_command_line(tmp_path):
  """The command converts, and a missing tensor is one stderr line."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  tensors = tf1_bert_tensors(np.random.default_rng(5), heads=False)
  prefix = write_google_release(str(tmp_path / "bert"), tensors)
  proc = cli_runner.run_module([
      "albert_tf.convert_checkpoint", "--source=bert",
      f"--checkpoint={prefix}", f"--output_dir={tmp_path / 'out'}"], env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert f"--vocab_file={tmp_path / 'out' / 'vocab.txt'}" in proc.stdout
  del tensors["bert/pooler/dense/kernel"]
  prefix = write_google_release(str(tmp_path / "broken"), tensors)
  proc = cli_runner.run_module([
      "albert_tf.convert_checkpoint", "--source=bert",
      f"--checkpoint={prefix}", f"--output_dir={tmp_path / 'out2'}"],
                                 env=env)
  lines = [line for line in proc.stderr.splitlines()  # TF's C++ log aside
           if line.strip() and not TF_RUNTIME_LINE.match(line)]
  assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-2000:]
  assert lines[0].startswith(f"error: {prefix}: 1 encoder tensor(s)")
  assert "['bert/pooler/dense/kernel']" in lines[0]
