"""The mixed_bfloat16 graph: casts (at most keras-hub's), float32 islands, numerics.

Graphs are traced, not run, on a tiny config (batch 2 x seq 128, the shapes
of benchmarks/bf16_report.py); the op counts are those that report prints.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer

pytest.importorskip("keras_hub")
from benchmarks import bf16_report  # noqa: E402  (imports keras_hub)

# keras-hub's AlbertBackbone in benchmarks/pretrain_throughput.py is built
# for seq 128, so the config has room for it.
TINY = AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16,
                    num_hidden_layers=3, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=128,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _under_policy(policy, fn):
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy(policy)
  try:
    return fn()
  finally:
    keras.mixed_precision.set_global_policy(previous)


@pytest.fixture(scope="module")
def bf16_graphs():
  """{function: {side: FuncGraph}} of both sides under mixed_bfloat16."""
  def trace():
    sides, batch = bf16_report.build_sides(TINY, batch_size=2)
    return {function: {side: fns[i].get_concrete_function(batch).graph
                       for side, fns in sides.items()}
            for i, function in enumerate(("forward", "train_step"))}
  return _under_policy("mixed_bfloat16", trace)


@pytest.mark.parametrize("function", ["forward", "train_step"])
def test_no_more_casts_than_keras_hub(bf16_graphs, function):
  counts = {side: bf16_report.graph_op_counts(g)
            for side, g in bf16_graphs[function].items()}
  ours, theirs = counts["albert_tf"]["Cast"], counts["keras_hub"]["Cast"]
  assert theirs["ops"] > 0  # the count sees casts at all
  assert ours["ops"] <= theirs["ops"], (ours, theirs)
  # Not by casting bigger tensors instead: no more elements cast either.
  assert ours["elements"] <= theirs["elements"], (ours, theirs)


@pytest.mark.parametrize("function", ["forward", "train_step"])
def test_no_cast_undoes_a_cast(bf16_graphs, function):
  """x -> float32 -> x round trips (a float32 LayerNorm layer's output, cast
  back by its caller) change no value; none are left."""
  counts = bf16_report.graph_op_counts(bf16_graphs[function]["albert_tf"])
  assert counts["casts_f32_bf16"] > 0
  assert counts["round_trip_casts"] == 0


def test_layer_norm_statistics_and_softmax_in_float32(bf16_graphs):
  graph = bf16_graphs["forward"]["albert_tf"]
  ops = graph.get_operations()
  means = [op for op in ops if op.type == "Mean"
           and bf16_report.op_kind(op.type, op.name) == "LayerNorm"]
  # mean and variance of the embedding LayerNorm ...
  assert len(means) == 2
  assert {op.outputs[0].dtype for op in means} == {tf.float32}
  # ... and of the layers' two residual LayerNorms each, in the XLA
  # functions they run as (ops.residual_layer_norm): called 2 L times,
  # their Means in float32 too.
  library = {f.signature.name: f
             for f in graph.as_graph_def().library.function}
  calls = [op for op in ops if op.type in ("PartitionedCall",
                                           "StatefulPartitionedCall")
           and "LayerNorm" in op.name]
  assert len(calls) == 2 * TINY.num_hidden_layers
  called = {op.get_attr("f").name for op in calls}
  mean_types = {node.attr["T"].type for name in called
                for node in library[name].node_def if node.op == "Mean"}
  assert mean_types == {tf.float32.as_datatype_enum}
  softmaxes = [op for op in ops if op.type == "Softmax"]
  assert len(softmaxes) == TINY.num_hidden_layers
  assert {op.outputs[0].dtype for op in softmaxes} == {tf.float32}
  # ... while the residual stream between them is bfloat16.
  matmuls = [op for op in ops if op.type == "MatMul"]
  assert matmuls and {op.outputs[0].dtype for op in matmuls} == {tf.bfloat16}


def test_float32_graph_has_no_float_casts():
  """The cast-saving code paths add nothing to a float32 model."""
  def trace():
    sides, batch = bf16_report.build_sides(TINY, batch_size=2)
    return [fn.get_concrete_function(batch).graph
            for fn in sides["albert_tf"]]
  for graph in _under_policy("float32", trace):
    float_casts = [op.name for op in graph.get_operations()
                   if op.type == "Cast" and op.inputs[0].dtype.is_floating
                   and op.outputs[0].dtype.is_floating]
    assert not float_casts


def test_bfloat16_outputs_close_to_float32():
  """Same weights, both policies: bfloat16 keeps 8 significant bits, so a
  six-layer forward pass lands within about 1% (rms) of float32. The bounds
  leave about 3x room over the observed errors (benchmarks/README.md,
  "Numerical figures behind test bounds") for other kernels (AMX) and
  seeds."""
  config = AlbertConfig(vocab_size=300, embedding_size=16, hidden_size=64,
                        num_hidden_layers=6, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 300, (4, 48)).astype("int32")
  mask = np.ones_like(ids)
  mask[1, 30:] = 0
  feats = {"input_ids": ids, "input_mask": mask,
           "segment_ids": np.repeat((np.arange(48) >= 20)[None], 4, 0).astype(
               "int32"),
           "masked_lm_positions": rng.integers(0, 48, (4, 6)).astype("int32")}
  weights = None
  outputs = {}
  for policy in ("float32", "mixed_bfloat16"):
    def run():
      model = AlbertPretrainer(config)
      model(feats)
      if weights is None:  # LayerNorm gains away from 1: every weight counts
        for v in model.weights:
          v.assign(rng.normal(0, 0.1, v.shape).astype("float32")
                   + (1.0 if "gamma" in v.path else 0.0))
      else:
        model.set_weights(weights)
      out = tf.function(lambda f: model(f))(feats)
      return model.get_weights(), {
          k: tf.cast(out[k], tf.float32).numpy()
          for k in ("sequence_output", "mlm_logits")}
    weights, outputs[policy] = _under_policy(policy, run)
  for key in ("sequence_output", "mlm_logits"):
    ref, bf16 = outputs["float32"][key], outputs["mixed_bfloat16"][key]
    scale = float(np.max(np.abs(ref)))
    rms = float(np.sqrt(np.mean((bf16 - ref) ** 2) / np.mean(ref ** 2)))
    assert rms < 0.03, (key, rms)
    np.testing.assert_allclose(bf16, ref, atol=0.08 * scale, rtol=0)
    assert not np.array_equal(bf16, ref)  # it did run in bfloat16


def test_fused_gelu_rounds_a_float32_result_to_bfloat16():
  """On bfloat16 the fused GELU and its gradient compute in float32 and round
  once: within one bfloat16 unit in the last place (2^-7 relative) of the
  float32 GELU of the same inputs. (Computed in bfloat16 they were off by
  whole units near zero.)"""
  from albert_tf.modeling.transformer import fused_gelu_tanh
  rng = np.random.default_rng(0)
  x = tf.cast(rng.normal(0, 3, (64, 48)), tf.bfloat16)
  dy = tf.cast(rng.normal(size=(64, 48)), tf.bfloat16)
  x32, dy32 = tf.cast(x, tf.float32), tf.cast(dy, tf.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([x, x32])
    ours = fused_gelu_tanh(x, tf.zeros([48], tf.float32))
    ref = tf.nn.gelu(x32, approximate=True)
  grad = tape.gradient(ours, x, output_gradients=dy)
  ref_grad = tape.gradient(ref, x32, output_gradients=dy32)
  assert ours.dtype == grad.dtype == tf.bfloat16
  ulp = 2.0 ** -7
  for got, want, floor in ((ours, ref, 1e-3), (grad, ref_grad, 1e-2)):
    want = want.numpy()
    np.testing.assert_array_less(
        np.abs(tf.cast(got, tf.float32).numpy() - want),
        ulp * np.maximum(np.abs(want), floor))
