"""Weights between `keras_hub.models.AlbertBackbone` and `AlbertEncoder`.

keras-hub keeps attention kernels per head ([H, heads, head_size]); ours keep
the original [H, H] layout, so copying is a reshape, not a rename only.
"""

import numpy as np

from albert_tf.config import AlbertConfig


def config_from_keras_hub(backbone, hidden_act="gelu"):
  """The `AlbertConfig` of the same shape as a keras-hub AlbertBackbone."""
  return AlbertConfig(
      vocab_size=backbone.vocabulary_size,
      embedding_size=backbone.embedding_dim,
      hidden_size=backbone.hidden_dim,
      num_hidden_layers=backbone.num_layers,
      num_hidden_groups=backbone.num_groups,
      inner_group_num=backbone.num_inner_repetitions,
      num_attention_heads=backbone.num_heads,
      intermediate_size=backbone.intermediate_dim,
      hidden_act=hidden_act,
      hidden_dropout_prob=float(backbone.dropout),
      attention_probs_dropout_prob=float(backbone.dropout),
      max_position_embeddings=backbone.max_sequence_length,
      type_vocab_size=backbone.num_segments)


def _assign(target, value, name):
  value = np.asarray(value)
  if tuple(target.shape) != value.shape:
    raise ValueError(f"{name}: keras-hub shape {value.shape} does not fit "
                     f"albert_tf variable {target.path} {tuple(target.shape)}")
  target.assign(value)


def copy_from_keras_hub(backbone, encoder):
  """Copies every weight of a keras-hub AlbertBackbone into `encoder`.

  Works for any num_groups / num_inner_repetitions; both models must have
  the same shape (see `config_from_keras_hub`). Returns `encoder`.
  """
  cfg = encoder.config
  if (cfg.num_hidden_groups != backbone.num_groups or
      cfg.inner_group_num != backbone.num_inner_repetitions or
      cfg.share != "all"):
    raise ValueError("Encoder grouping does not match the keras-hub backbone "
                     f"(groups {backbone.num_groups}, inner "
                     f"{backbone.num_inner_repetitions})")
  emb = encoder.embedding
  _assign(emb.word_embeddings.embeddings,
          backbone.token_embedding.embeddings, "token_embedding")
  positions = backbone.position_embedding.position_embeddings.numpy()
  _assign(emb.position_embeddings, positions[:cfg.max_position_embeddings],
          "position_embedding")
  _assign(emb.token_type_embeddings.embeddings,
          backbone.segment_embedding.embeddings, "segment_embedding")
  _assign(emb.layer_norm.gamma, backbone.embeddings_layer_norm.gamma,
          "embeddings_layer_norm.gamma")
  _assign(emb.layer_norm.beta, backbone.embeddings_layer_norm.beta,
          "embeddings_layer_norm.beta")
  _assign(emb.projection.kernel, backbone.embeddings_projection.kernel,
          "embeddings_projection.kernel")
  _assign(emb.projection.bias, backbone.embeddings_projection.bias,
          "embeddings_projection.bias")

  h = cfg.hidden_size
  ours = iter(encoder.blocks)
  for group in backbone.transformer_layers:
    for theirs in group:
      block = next(ours)
      mha = theirs._self_attention_layer  # pylint: disable=protected-access
      att = block.attention
      for part in ("query", "key", "value"):
        dense = getattr(mha, f"_{part}_dense")
        _assign(getattr(att, f"{part}_kernel"),
                dense.kernel.numpy().reshape(h, h), f"{part}.kernel")
        _assign(getattr(att, f"{part}_bias"),
                dense.bias.numpy().reshape(h), f"{part}.bias")
      _assign(att.output_dense.kernel,
              mha._output_dense.kernel.numpy().reshape(h, h), "output.kernel")  # pylint: disable=protected-access
      _assign(att.output_dense.bias, mha._output_dense.bias, "output.bias")  # pylint: disable=protected-access
      pairs = [
          (att.layer_norm, theirs._self_attention_layer_norm),  # pylint: disable=protected-access
          (block.ffn.layer_norm, theirs._feedforward_layer_norm),  # pylint: disable=protected-access
      ]
      for mine, other in pairs:
        _assign(mine.gamma, other.gamma, other.path)
        _assign(mine.beta, other.beta, other.path)
      for mine, other in (
          (block.ffn.intermediate_dense,
           theirs._feedforward_intermediate_dense),  # pylint: disable=protected-access
          (block.ffn.output_dense, theirs._feedforward_output_dense)):  # pylint: disable=protected-access
        _assign(mine.kernel, other.kernel, other.path)
        _assign(mine.bias, other.bias, other.path)
  _assign(encoder.pooler.kernel, backbone.pooled_dense.kernel, "pooled_dense")
  _assign(encoder.pooler.bias, backbone.pooled_dense.bias, "pooled_dense")
  return encoder


def encoder_from_keras_hub(backbone):
  """A new `AlbertEncoder` holding the weights of a keras-hub AlbertBackbone."""
  from albert_tf.encoder import AlbertEncoder  # pylint: disable=g-import-not-at-top
  return copy_from_keras_hub(backbone, AlbertEncoder(
      config_from_keras_hub(backbone)))


def keras_hub_inputs(features):
  """Our input dict -> the input names keras-hub's AlbertBackbone expects."""
  return {"token_ids": features["input_ids"],
          "segment_ids": features["segment_ids"],
          "padding_mask": features["input_mask"]}
