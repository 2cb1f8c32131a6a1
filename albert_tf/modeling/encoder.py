"""ALBERT idea 2: cross-layer parameter sharing, in `AlbertEncoder`.

The encoder applies `num_hidden_layers` Transformer layers, but owns only
`num_hidden_groups` groups of `inner_group_num` blocks. Layer i runs group
int(i * G / L) (the original modeling.py rule); with the ALBERT default
G = 1 a single `TransformerEncoderBlock` is called L times. `share` selects
the paper's ablation: share both sub-layers ("all"), only "attention", only
the "ffn", or "none" (BERT).
"""

import contextlib
import types

import keras

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.embedding import FactorizedEmbedding
from albert_tf.modeling.ops import truncated_normal
from albert_tf.modeling.transformer import (
    AttentionBias, FeedForward, SelfAttention, TransformerEncoderBlock)


def encoder_inputs():
  """Symbolic int32 [batch, seq] inputs, named as in the original ALBERT."""
  return {name: keras.Input(shape=(None,), dtype="int32", name=name)
          for name in F.ENCODER_INPUTS}


def build_layer_stack(config: AlbertConfig, dtype=None):
  """(blocks, schedule): the distinct blocks, and `schedule[i]` the blocks
  layer i applies in order (the same objects where layers share)."""
  L = config.num_hidden_layers
  if config.share == "all":
    groups = [[TransformerEncoderBlock.from_albert_config(
                   config, dtype=dtype, name=f"group_{g}_inner_group_{i}")
               for i in range(config.inner_group_num)]
              for g in range(config.num_hidden_groups)]
    blocks = [b for group in groups for b in group]
    return blocks, [groups[config.group_of_layer(i)] for i in range(L)]

  def sublayers(kind):
    def make(i):
      layer = SelfAttention if kind == "attention" else FeedForward
      return layer.from_albert_config(config, dtype=dtype,
                                      name=f"{kind}_1_layer_{i}")
    shared = config.share == kind
    first = make("shared" if shared else 0)
    return [first if shared or i == 0 else make(i) for i in range(L)]

  attentions, ffns = sublayers("attention"), sublayers("ffn")
  blocks = [TransformerEncoderBlock.from_albert_config(
      config, attention=attentions[i], ffn=ffns[i], dtype=dtype,
      name=f"layer_{i}") for i in range(L)]
  return blocks, [[b] for b in blocks]


def model_config(model, **fields):
  """get_config of the models: the AlbertConfig as a dict, the model's own
  constructor arguments, name, trainable and the dtype policy."""
  return {"config": model.config.to_dict(), **fields, "name": model.name,
          "trainable": model.trainable,
          "dtype": keras.dtype_policies.serialize(model.dtype_policy)}


def model_kwargs(config):
  """Constructor kwargs from `model_config`'s dict (the policy restored)."""
  config = dict(config)
  if isinstance(config.get("dtype"), dict):
    config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
  return config


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertEncoder(keras.Model):
  """ALBERT encoder: factorized embedding, shared Transformer layers, pooler.

  Inputs: dict of int32 [batch, seq] `input_ids`, `input_mask`, `segment_ids`.
  Outputs: dict with `sequence_output` [batch, seq, H] and `pooled_output`
  [batch, H] (tanh dense on the first token); with `output_all_layers=True`
  also `encoder_outputs`, the list of every layer's output.

  Example:
    >>> import numpy as np, albert_tf
    >>> cfg = albert_tf.AlbertConfig.from_preset("albert_tiny_zh")
    >>> enc = albert_tf.AlbertEncoder(cfg)
    >>> ids = np.array([[2, 812, 3, 0]], "int32")
    >>> out = enc({"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
    ...            "segment_ids": np.zeros_like(ids)})
    >>> out["sequence_output"].shape
    TensorShape([1, 4, 312])
  """

  def __init__(self, config: AlbertConfig, output_all_layers=False,
               dtype=None, **kwargs):
    if isinstance(config, dict):
      config = AlbertConfig.from_dict(config)
    # === Layers ===
    embedding = FactorizedEmbedding.from_albert_config(
        config, dtype=dtype, name="embeddings")
    blocks, schedule = build_layer_stack(config, dtype=dtype)
    mask_to_bias = AttentionBias(dtype=dtype, name="attention_bias")
    pooler = keras.layers.Dense(
        config.hidden_size, activation="tanh",
        kernel_initializer=truncated_normal(config.initializer_range),
        dtype=dtype, name="pooler")

    # === Functional model ===
    inputs = encoder_inputs()
    x = embedding(inputs[F.INPUT_IDS], inputs[F.SEGMENT_IDS])
    bias = mask_to_bias(inputs[F.INPUT_MASK])
    layer_outputs = []
    for layer_blocks in schedule:  # L applications of the shared blocks
      for block in layer_blocks:
        x = block(x, bias)
      layer_outputs.append(x)
    outputs = {F.SEQUENCE_OUTPUT: x, F.POOLED_OUTPUT: pooler(x[:, 0, :])}
    if output_all_layers:
      outputs["encoder_outputs"] = layer_outputs
    super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

    # === Config ===
    self.config = config
    self.output_all_layers = output_all_layers
    self.embedding = embedding
    self.blocks = blocks
    self.pooler = pooler

  def call(self, inputs, training=None, mask=None, **kwargs):
    # One forward pass: each distinct attention sub-layer fuses its Q/K/V
    # kernels once, not once per layer that shares it (`SelfAttention`).
    with contextlib.ExitStack() as stack:
      for attention in {id(b.attention): b.attention
                        for b in self.blocks}.values():
        stack.enter_context(attention.one_fused_qkv())
      return super().call(inputs, training=training, mask=mask, **kwargs)

  @property
  def checkpoint_items(self):
    """{checkpoint object name: trackable} (`training.checkpoints`).

    Read-only: Keras's .keras loader walks every dict an attribute returns,
    and a plain dict holding the encoder itself sends it round in a loop.
    """
    return types.MappingProxyType({"encoder": self})

  def get_config(self):
    return model_config(self, output_all_layers=self.output_all_layers)

  @classmethod
  def from_config(cls, config):
    return cls(**model_kwargs(config))
