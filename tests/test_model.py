"""The ALBERT model: numbers against NumPy and keras-hub, sharing, serialization."""

import dataclasses
import json
import zipfile

import numpy as np
import pytest
import keras
import tensorflow as tf

import albert_tf
from albert_tf import AlbertClassifier, AlbertConfig, AlbertEncoder, AlbertPretrainer
from albert_tf.params import count_params
from tests import numpy_reference
from tests.numpy_reference import assert_close_to_scale


def _inputs(config, batch=3, seq=10, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, config.vocab_size, (batch, seq)).astype("int32")
  mask = np.ones_like(ids)
  mask[1, 6:] = 0  # a padded sequence
  ids[1, 6:] = 0
  seg = np.zeros_like(ids)
  seg[:, 4:] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


def _numpy_weights(encoder):
  n = lambda v: v.numpy().astype(np.float64)  # noqa: E731
  emb = encoder.embedding
  weights = {"emb": {
      "word": n(emb.word_embeddings.embeddings), "pos": n(emb.position_embeddings),
      "type": n(emb.token_type_embeddings.embeddings),
      "ln_g": n(emb.layer_norm.gamma), "ln_b": n(emb.layer_norm.beta),
      "proj_w": n(emb.projection.kernel), "proj_b": n(emb.projection.bias)},
      "pool_w": n(encoder.pooler.kernel), "pool_b": n(encoder.pooler.bias)}
  cfg = encoder.config
  if cfg.share != "all":  # one block per layer, each its own group
    weights["groups"] = [[_block_numpy(b)] for b in encoder.blocks]
    return weights
  blocks = iter(encoder.blocks)
  weights["groups"] = [[_block_numpy(next(blocks))
                        for _ in range(cfg.inner_group_num)]
                       for _ in range(cfg.num_hidden_groups)]
  return weights


def _block_numpy(b):
  n = lambda v: v.numpy().astype(np.float64)  # noqa: E731
  a, f = b.attention, b.ffn
  return {
      "q_w": n(a.query_kernel), "q_b": n(a.query_bias),
      "k_w": n(a.key_kernel), "k_b": n(a.key_bias),
      "v_w": n(a.value_kernel), "v_b": n(a.value_bias),
      "o_w": n(a.output_dense.kernel), "o_b": n(a.output_dense.bias),
      "ln_g": n(a.layer_norm.gamma), "ln_b": n(a.layer_norm.beta),
      "i_w": n(f.intermediate_dense.kernel), "i_b": n(f.intermediate_dense.bias),
      "f_w": n(f.output_dense.kernel), "f_b": n(f.output_dense.bias),
      "ln1_g": n(f.layer_norm.gamma), "ln1_b": n(f.layer_norm.beta)}


def _randomize(model, seed=1):
  """Non-trivial LayerNorm/bias values so every weight matters in a comparison."""
  rng = np.random.default_rng(seed)
  for v in model.weights:
    v.assign(rng.normal(0, 0.2, v.shape).astype("float32") +
             (1.0 if v.path.endswith("gamma") else 0.0))


@pytest.mark.parametrize("groups, inner, act", [(1, 1, "gelu"), (2, 2, "gelu"),
                                                (1, 1, "relu")])
def test_matches_independent_numpy_forward_pass(tiny_config, groups, inner, act):
  config = tiny_config.replace(num_hidden_groups=groups, inner_group_num=inner,
                               hidden_act=act)
  encoder = AlbertEncoder(config)
  _randomize(encoder)
  feats = _inputs(config)
  out = encoder(feats)
  seq, pooled = numpy_reference.forward(
      _numpy_weights(encoder), feats["input_ids"], feats["input_mask"],
      feats["segment_ids"], config.num_hidden_layers,
      config.num_attention_heads, act)
  assert_close_to_scale(out["sequence_output"].numpy(), seq, rel=1e-5)
  assert_close_to_scale(out["pooled_output"].numpy(), pooled, rel=1e-5)


@pytest.mark.parametrize("groups, inner", [(1, 1), (2, 2)])
def test_matches_keras_hub_albert_backbone(groups, inner):
  import keras_hub
  from albert_tf.converters.keras_hub_interop import encoder_from_keras_hub, keras_hub_inputs
  backbone = keras_hub.models.AlbertBackbone(
      vocabulary_size=60, num_layers=4, num_heads=2, embedding_dim=8,
      hidden_dim=16, intermediate_dim=32, num_groups=groups,
      num_inner_repetitions=inner, max_sequence_length=32)
  _randomize(backbone, seed=3)
  encoder = encoder_from_keras_hub(backbone)
  feats = _inputs(encoder.config)
  ours, theirs = encoder(feats), backbone(keras_hub_inputs(feats))
  for key in ("sequence_output", "pooled_output"):
    assert_close_to_scale(ours[key].numpy(), theirs[key].numpy(), rel=1e-5)


def test_one_block_is_reused_for_every_layer(tiny_config):
  encoder = AlbertEncoder(tiny_config)
  assert len(encoder.blocks) == 1
  # 4 layers but the parameters of one: adding layers adds no weights.
  deeper = AlbertEncoder(tiny_config.replace(num_hidden_layers=12))
  assert count_params(deeper) == count_params(encoder)
  assert count_params(deeper) == _share_mode_counts(tiny_config)["all"]


def test_output_all_layers(tiny_config):
  encoder = AlbertEncoder(tiny_config, output_all_layers=True)
  _randomize(encoder, seed=2)
  feats = _inputs(tiny_config)
  out = encoder(feats)
  assert len(out["encoder_outputs"]) == 4
  # With one group, layer k's output is the NumPy pass cut after k layers.
  weights = _numpy_weights(encoder)
  for k, layer_output in enumerate(out["encoder_outputs"], 1):
    expected, _ = numpy_reference.forward(
        weights, feats["input_ids"], feats["input_mask"], feats["segment_ids"],
        k, tiny_config.num_attention_heads)
    assert_close_to_scale(layer_output.numpy(), expected, rel=1e-5)
  # The same tensor (the last layer's output is the sequence output): exact.
  np.testing.assert_array_equal(out["encoder_outputs"][-1],
                                out["sequence_output"])


def _share_mode_counts(c):
  """Parameters per share mode from the architecture's formulas."""
  V, E, H, I, L = (c.vocab_size, c.embedding_size, c.hidden_size,
                   c.intermediate_size, c.num_hidden_layers)
  # word + position + token type tables, LayerNorm(E), projection E->H;
  # the pooler H->H.
  fixed = (V + c.max_position_embeddings + c.type_vocab_size) * E + 2 * E + (
      E * H + H) + (H * H + H)
  attention = 4 * (H * H + H) + 2 * H  # q, k, v, output dense; LayerNorm
  ffn = (H * I + I) + (I * H + H) + 2 * H  # two dense layers; LayerNorm
  return {"all": fixed + attention + ffn,
          "attention": fixed + attention + L * ffn,
          "ffn": fixed + L * attention + ffn,
          "none": fixed + L * (attention + ffn)}


def test_share_modes_match_paper_table_4():
  base = albert_tf.PRESETS["albert_base_v2"]
  counts = {}
  for share in ("all", "attention", "ffn", "none"):
    with keras.StatelessScope(initialize_variables=False):  # shapes only
      counts[share] = count_params(AlbertEncoder(base.replace(share=share)))
    keras.backend.clear_session()
  assert counts == _share_mode_counts(base)
  assert counts == {"all": 11_683_584, "attention": 63_647_232,
                    "ffn": 37_686_528, "none": 89_650_176}
  # Paper Table 4 (ALBERT base, E=128) rounds these to 12M, 64M, 38M, 89M.
  assert [round(counts[k] / 1e6) for k in ("all", "attention", "ffn")] == [12, 64, 38]


@pytest.mark.parametrize("share", ["attention", "ffn", "none"])
def test_share_mode_shares_exactly_its_sublayer(tiny_config, share):
  config = tiny_config.replace(share=share)
  encoder = AlbertEncoder(config)
  blocks = encoder.blocks
  assert len(blocks) == config.num_hidden_layers == 4
  for kind in ("attention", "ffn"):
    layers = [getattr(b, kind) for b in blocks]
    distinct = {id(l) for l in layers}
    variables = {id(v) for l in layers for v in l.weights}
    if share == kind:  # one sub-layer object, the same variables every layer
      assert distinct == {id(layers[0])}
      assert variables == {id(v) for v in layers[0].weights}
    else:  # one per layer, no variable in common
      assert len(distinct) == 4
      assert len(variables) == 4 * len(layers[0].weights)
  assert count_params(encoder) == _share_mode_counts(config)[share]
  # The layers apply their own sub-layers in order: the NumPy pass with the
  # weights read from each layer's block gives the same output.
  _randomize(encoder, seed=5)
  feats = _inputs(config)
  seq, pooled = numpy_reference.forward(
      _numpy_weights(encoder), feats["input_ids"], feats["input_mask"],
      feats["segment_ids"], 4, config.num_attention_heads)
  out = encoder(feats)
  assert_close_to_scale(out["sequence_output"].numpy(), seq, rel=1e-5)
  assert_close_to_scale(out["pooled_output"].numpy(), pooled, rel=1e-5)


def test_padding_does_not_change_real_positions(tiny_config):
  encoder = AlbertEncoder(tiny_config)
  feats = _inputs(tiny_config)
  short = {k: v[:1, :6] for k, v in feats.items()}
  padded = {k: np.pad(v, [(0, 0), (0, 4)]) for k, v in short.items()}
  a = encoder(short)["sequence_output"].numpy()
  b = encoder(padded)["sequence_output"].numpy()[:, :6]
  assert_close_to_scale(a, b, rel=1e-5)


def test_out_of_range_token_ids_raise_in_eager(tiny_config):
  encoder = AlbertEncoder(tiny_config)
  feats = _inputs(tiny_config)
  feats["input_ids"][2, 3] = tiny_config.vocab_size
  with pytest.raises(ValueError, match=r"input_ids holds 60 at .*\[2, 3\]"):
    encoder(feats)


def test_pretrainer_outputs_and_losses(tiny_config):
  model = AlbertPretrainer(tiny_config)
  feats = _inputs(tiny_config)
  feats["masked_lm_positions"] = np.array([[1, 2], [3, 0], [4, 5]], "int32")
  # MLM output matrix is tied to the word embeddings: no extra [V, E] matrix.
  extra = count_params(model) - count_params(model.encoder)
  assert extra == (16 * 8 + 8) + 2 * 8 + 60 + (16 * 2 + 2)
  # Zero word embeddings (the tied output matrix) and a zero SOP dense: every
  # logit is the head's bias, so the losses have closed forms.
  from albert_tf.modeling.models import pretraining_losses
  word = model.encoder.embedding.word_embeddings.embeddings
  word.assign(np.zeros(word.shape, "float32"))
  for v in model.sentence_order_head.dense.weights:
    v.assign(np.zeros(v.shape, "float32"))
  labels = {"masked_lm_ids": np.array([[7, 3], [7, 9], [0, 7]]),
            "masked_lm_weights": np.array([[1, 1], [1, 0], [1, 1]], "float32"),
            "next_sentence_labels": np.array([[0], [1], [1]])}
  out = model(feats)
  assert out["mlm_logits"].shape == (3, 2, 60)
  np.testing.assert_array_equal(out["mlm_logits"], 0.0)
  np.testing.assert_array_equal(out["sop_logits"], 0.0)
  losses = pretraining_losses(out, labels)
  # Uniform logits: log V per token (5 weighted, denominator 5 + 1e-5) and
  # log 2 per example; argmax is id 0, which 1 of the 5 weighted ids is, and
  # SOP label 0, which 1 of 3 is.
  np.testing.assert_allclose(losses["masked_lm_loss"],
                             5 * np.log(60) / (5 + 1e-5), rtol=1e-6)
  np.testing.assert_allclose(losses["sentence_order_loss"], np.log(2),
                             rtol=1e-6)
  np.testing.assert_allclose(losses["masked_lm_accuracy"], 1 / 5, rtol=1e-6)
  np.testing.assert_allclose(losses["sentence_order_accuracy"], 1 / 3,
                             rtol=1e-6)
  # Bias 2 on id 7 and 1 on SOP class 1: a target 7 costs log(59 + e^2) - 2,
  # any other log(59 + e^2); label 1 costs log(1 + e) - 1, label 0 log(1 + e).
  # The weight-0 prediction (id 9) is left out.
  model.masked_lm_head.output_bias.assign(np.eye(60, dtype="float32")[7] * 2)
  model.sentence_order_head.dense.bias.assign(np.array([0, 1], "float32"))
  losses = pretraining_losses(model(feats), labels)
  z = np.log(59 + np.exp(2))
  mlm = (3 * (z - 2) + 2 * z) / (5 + 1e-5)
  sop = np.log(1 + np.e) - 2 / 3
  np.testing.assert_allclose(losses["masked_lm_loss"], mlm, rtol=1e-6)
  np.testing.assert_allclose(losses["sentence_order_loss"], sop, rtol=1e-6)
  np.testing.assert_allclose(losses["loss"], mlm + sop, rtol=1e-6)
  np.testing.assert_allclose(losses["masked_lm_accuracy"], 3 / 5, rtol=1e-6)
  np.testing.assert_allclose(losses["sentence_order_accuracy"], 2 / 3,
                             rtol=1e-6)
  assert (float(losses["masked_lm_count"]),
          float(losses["sentence_order_count"])) == (5.0, 3.0)
  # A replica's empty eval batch (tf.distribute's last batches): zeros with
  # weight 0, not NaN, which a weighted mean would keep.
  empty = pretraining_losses(
      {"mlm_logits": np.zeros([0, 2, 60], "float32"),
       "sop_logits": np.zeros([0, 2], "float32")},
      {"masked_lm_ids": np.zeros([0, 2], "int32"),
       "masked_lm_weights": np.zeros([0, 2], "float32"),
       "next_sentence_labels": np.zeros([0, 1], "int32")})
  assert {k: float(v) for k, v in empty.items()} == dict.fromkeys(empty, 0.0)


def test_pretrainer_fit_reduces_loss(tiny_config):
  rng = np.random.default_rng(0)
  n, seq, preds = 16, 12, 3
  ids = rng.integers(5, 60, (n, seq)).astype("int64")
  data = {"input_ids": ids, "input_mask": np.ones_like(ids),
          "segment_ids": np.zeros_like(ids),
          "masked_lm_positions": np.tile(np.arange(1, 1 + preds), (n, 1)),
          "masked_lm_ids": ids[:, 1:1 + preds],
          "masked_lm_weights": np.ones((n, preds), "float32"),
          "next_sentence_labels": rng.integers(0, 2, (n, 1))}
  dataset = tf.data.Dataset.from_tensor_slices(data).batch(8).repeat()
  model = AlbertPretrainer(tiny_config)
  model.compile(optimizer=keras.optimizers.Adam(3e-3))
  first = model.evaluate(dataset, steps=2, return_dict=True, verbose=0)
  model.fit(dataset, steps_per_epoch=30, epochs=1, verbose=0)
  last = model.evaluate(dataset, steps=2, return_dict=True, verbose=0)
  assert set(first) >= {"loss", "masked_lm_accuracy", "sentence_order_accuracy"}
  assert last["masked_lm_loss"] < first["masked_lm_loss"] - 0.5
  assert_close_to_scale(last["loss"], last["masked_lm_loss"] +
                        last["sentence_order_loss"], rel=1e-5)


def test_classifier_regression_and_labels(tiny_config):
  feats = _inputs(tiny_config)
  assert AlbertClassifier(tiny_config, 3)(feats)["logits"].shape == (3, 3)
  assert AlbertClassifier(tiny_config, 1)(feats)["logits"].shape == (3, 1)
  with pytest.raises(ValueError, match="num_labels"):
    AlbertClassifier(tiny_config, 0)


# The values the round trip must keep, written out: all but the vocabulary,
# embedding and position sizes differ from AlbertConfig's defaults.
ROUND_TRIP_CONFIG = {
    "vocab_size": 60, "embedding_size": 8, "hidden_size": 16,
    "num_hidden_layers": 4, "num_hidden_groups": 2, "inner_group_num": 2,
    "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "relu",
    "max_position_embeddings": 32, "share": "all"}


@pytest.mark.parametrize("kind, own_args", [
    ("encoder", {"output_all_layers": False}),
    ("pretrainer", {"sentence_order_weight": 0.5}),
    ("classifier", {"num_labels": 3, "classifier_dropout": 0.3})])
def test_keras_save_load_round_trip(tmp_path, tiny_config, kind, own_args):
  config = tiny_config.replace(num_hidden_groups=2, inner_group_num=2,
                               hidden_act="relu")
  feats = _inputs(config)
  if kind == "encoder":
    model = AlbertEncoder(config)
  elif kind == "pretrainer":
    model = AlbertPretrainer(config, sentence_order_weight=0.5)
    feats["masked_lm_positions"] = np.array([[1], [2], [3]], "int32")
  else:
    model = AlbertClassifier(config, 3, classifier_dropout=0.3)
  _randomize(model, seed=4)  # no zero bias or unit gamma hides a lost weight
  path = str(tmp_path / f"{kind}.keras")
  model.save(path)
  # The file's config.json, read as JSON: the numbers written above.
  with zipfile.ZipFile(path) as archive:
    saved = json.loads(archive.read("config.json"))["config"]
  assert {k: saved["config"][k] for k in ROUND_TRIP_CONFIG} == ROUND_TRIP_CONFIG
  assert {k: saved[k] for k in own_args} == own_args
  loaded = keras.saving.load_model(path)
  assert type(loaded) is type(model)
  loaded_config = dataclasses.asdict(loaded.config)
  assert {k: loaded_config[k] for k in ROUND_TRIP_CONFIG} == ROUND_TRIP_CONFIG
  assert {k: getattr(loaded, k) for k in own_args} == own_args
  # Same weights, same outputs; the outputs are not all alike (a model that
  # ignored its weights or inputs would pass the comparison).
  a, b = model(feats), loaded(feats)
  assert set(b) == set(a)
  for key in a:
    assert_close_to_scale(b[key], a[key], rel=1e-6)
    assert np.ptp(a[key].numpy()) > 0.1, key
  # From the config alone and the weights, without the .keras loader.
  rebuilt = type(model).from_config(saved)
  rebuilt.set_weights(model.get_weights())
  c = rebuilt(feats)
  for key in a:
    assert_close_to_scale(c[key], a[key], rel=1e-6)


def _layer_input(kind, seed=0):
  """A fixed input of each layer kind: its positional call arguments."""
  rng = np.random.default_rng(seed)
  if kind == "embedding":  # input_ids [3, 10] below vocab 60, segment_ids
    ids = rng.integers(0, 60, (3, 10)).astype("int32")
    return ids, (np.arange(10) >= 4).astype("int32")[None].repeat(3, 0)
  if kind == "block":  # x [3, 10, 16] and the bias of a row with 4 padded
    mask = np.ones((3, 10), "float32")
    mask[1, 6:] = 0
    bias = np.where(mask > 0, 0.0, -1e4).astype("float32")[:, None, None, :]
    return rng.normal(size=(3, 10, 16)).astype("float32"), bias
  return (rng.normal(size=(3, 16)).astype("float32"),)  # pooled [3, 16]


def test_layers_round_trip_through_config(tiny_config):
  from albert_tf.modeling.embedding import FactorizedEmbedding
  from albert_tf.modeling.heads import ClassificationHead, SentenceOrderHead
  from albert_tf.modeling.transformer import TransformerEncoderBlock
  # Each layer, the fixed input it takes, the config values written out
  # (every argument the test sets, several not defaults: an eps of 0.5 and
  # ReLU change the outputs if from_config drops them) and the output shape.
  cases = [
      (FactorizedEmbedding.from_albert_config(tiny_config.replace(
          layer_norm_eps=0.5)), "embedding",
       {"vocab_size": 60, "embedding_size": 8, "hidden_size": 16,
        "max_position_embeddings": 32, "type_vocab_size": 2,
        "layer_norm_eps": 0.5, "embedding_layout": "google"}, (3, 10, 16)),
      (TransformerEncoderBlock(16, 2, 32, hidden_act="relu",
                               layer_norm_eps=0.5), "block",
       {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32,
        "hidden_act": "relu", "layer_norm_eps": 0.5}, (3, 10, 16)),
      (SentenceOrderHead(num_classes=3), "pooled", {"num_classes": 3},
       (3, 3)),
      (ClassificationHead(4, 0.2), "pooled",
       {"num_labels": 4, "dropout_rate": 0.2}, (3, 4)),
  ]
  for layer, kind, expected, shape in cases:
    args = _layer_input(kind)
    layer(*args)  # builds it
    _randomize(layer, seed=6)
    want = layer(*args).numpy()
    assert want.shape == shape
    assert np.ptp(want) > 0.1, type(layer).__name__
    clone = type(layer).from_config(layer.get_config())
    config = clone.get_config()
    assert {k: config[k] for k in expected} == expected
    clone(*args)
    clone.set_weights(layer.get_weights())
    assert_close_to_scale(clone(*args).numpy(), want, rel=1e-6)


def test_mixed_bfloat16_keeps_layer_norm_and_losses_in_float32(tiny_config):
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = AlbertPretrainer(tiny_config)
    feats = _inputs(tiny_config)
    feats["masked_lm_positions"] = np.array([[1], [2], [3]], "int32")
    out = model(feats)
    block = model.encoder.blocks[0]
    assert block.attention.layer_norm.compute_dtype == "float32"
    assert block.ffn.layer_norm.compute_dtype == "float32"
    assert block.ffn.intermediate_dense.compute_dtype == "bfloat16"
    assert out["sequence_output"].dtype == tf.bfloat16
    assert out["mlm_logits"].dtype == tf.float32
    assert np.isfinite(out["mlm_logits"].numpy()).all()
  finally:
    keras.mixed_precision.set_global_policy("float32")


def test_fused_training_gelu_matches_autodiff():
  from albert_tf.modeling.transformer import fused_gelu_tanh
  x = tf.constant(np.random.default_rng(0).normal(0, 3, (64, 48)), tf.float32)
  dy = tf.constant(np.random.default_rng(1).normal(size=(64, 48)), tf.float32)
  bias = tf.constant(np.random.default_rng(2).normal(size=48), tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([x, bias])
    ours = fused_gelu_tanh(x, bias)
    ref = tf.nn.gelu(x + bias, approximate=True)
  assert_close_to_scale(ours, ref, rel=1e-5)
  for wrt in (x, bias):
    assert_close_to_scale(tape.gradient(ours, wrt, output_gradients=dy),
                          tape.gradient(ref, wrt, output_gradients=dy),
                          rel=1e-5)


def test_training_step_gradients_match_plain_autodiff(tiny_config):
  """The fused GELU and residual LayerNorm (training only) leave the model's
  gradients unchanged."""
  from albert_tf.modeling import transformer
  inputs = {"input_ids": tf.constant([[2, 7, 9, 3, 11, 3]]),
            "input_mask": tf.ones((1, 6), tf.int32),
            "segment_ids": tf.constant([[0, 0, 0, 0, 1, 1]])}
  model = AlbertEncoder(tiny_config)

  def grads():
    with tf.GradientTape() as tape:
      out = model(inputs, training=True)["sequence_output"]
      loss = tf.reduce_sum(out * tf.range(1.0, 17.0))
    return [None if g is None else tf.convert_to_tensor(g)  # pooler: None
            for g in tape.gradient(loss, model.trainable_variables)]
  fused = grads()
  sub_layers = [l for l in model._flatten_layers()
                if isinstance(l, (transformer.FeedForward,
                                  transformer.SelfAttention))]
  assert len(sub_layers) == 2 and all(l.fused_ops for l in sub_layers)
  for layer in sub_layers:
    layer.fused_ops = False
  plain = grads()
  assert sum(g is not None for g in fused) > 10
  for a, b in zip(fused, plain):
    assert (a is None) == (b is None)
    if a is not None:
      assert_close_to_scale(a, b, rel=1e-6, rtol=1e-4)


@pytest.mark.parametrize("share", ["all", "ffn"])
def test_qkv_kernels_fuse_once_per_forward_pass(tiny_config, share,
                                                monkeypatch):
  """A distinct attention sub-layer concatenates its Q/K/V kernels once per
  pass, however many layers share it; outputs and gradients are those of
  fusing in every call."""
  import contextlib
  from albert_tf.modeling import transformer
  config = tiny_config.replace(share=share)  # "ffn": 4 attention sub-layers
  model = AlbertEncoder(config)
  _randomize(model, seed=3)
  feats = {k: tf.constant(v) for k, v in _inputs(config).items()}
  distinct = len({id(b.attention) for b in model.blocks})
  assert distinct == {"all": 1, "ffn": 4}[share]

  def concats(training):
    graph = tf.function(lambda f: model(f, training=training)[
        "sequence_output"]).get_concrete_function(feats).graph
    return sum(op.type == "ConcatV2" for op in graph.get_operations())

  def run():
    with tf.GradientTape() as tape:
      out = model(feats, training=True)["sequence_output"]
      loss = tf.reduce_sum(out * tf.range(1.0, 17.0))
    grads = tape.gradient(loss, model.trainable_variables)
    return out, [tf.convert_to_tensor(g) for g in grads if g is not None]

  # Kernel and bias, once per distinct sub-layer, in inference and training.
  assert concats(False) == concats(True) == 2 * distinct
  once, once_grads = run()
  monkeypatch.setattr(transformer.SelfAttention, "one_fused_qkv",
                      lambda self: contextlib.nullcontext())
  assert concats(False) == 2 * config.num_hidden_layers
  every_call, every_call_grads = run()
  np.testing.assert_array_equal(once.numpy(), every_call.numpy())
  assert len(once_grads) == len(every_call_grads) > 10
  for a, b in zip(once_grads, every_call_grads):
    assert_close_to_scale(a, b, rel=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n", [5, 1])
def test_micro_batches_give_the_whole_batch_losses_and_gradients(tiny_config,
                                                                  n):
  """A batch run as 2 or 3 parts (training.micro_batches) has the losses and
  gradients of the whole batch: uneven parts, and a batch of 1 (an empty
  part) included."""
  rng = np.random.default_rng(4)
  seq, preds = 10, 3
  ids = rng.integers(5, 60, (n, seq)).astype("int64")
  mask = np.ones_like(ids)
  mask[:, 7:] = 0
  data = {"input_ids": ids, "input_mask": mask,
          "segment_ids": (np.arange(seq) >= 4).astype("int64")[None].repeat(n, 0),
          "masked_lm_positions": rng.integers(1, 7, (n, preds)),
          "masked_lm_ids": rng.integers(5, 60, (n, preds)),
          "masked_lm_weights": (rng.random((n, preds)) > 0.3).astype("float32"),
          "next_sentence_labels": rng.integers(0, 2, (n, 1))}
  data = {k: tf.constant(v) for k, v in data.items()}
  model = AlbertPretrainer(tiny_config)
  _randomize(model, seed=5)

  def run(parts):
    model.micro_batches = parts
    with tf.GradientTape() as tape:
      losses = model._step_losses(data, training=True)  # pylint: disable=protected-access
    grads = tape.gradient(losses["loss"], model.trainable_variables)
    return losses, [None if g is None else tf.convert_to_tensor(g)
                    for g in grads]

  whole, whole_grads = run(1)
  for parts in (2, 3):
    split, split_grads = run(parts)
    for name in whole:
      assert_close_to_scale(split[name], whole[name], rel=1e-6, rtol=1e-5)
    assert sum(g is not None for g in whole_grads) > 10
    for a, b in zip(split_grads, whole_grads):
      assert (a is None) == (b is None)
      if a is not None:
        assert_close_to_scale(a, b, rel=1e-6, rtol=1e-4)
