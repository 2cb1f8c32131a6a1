"""Weights both ways between `keras_hub.models.AlbertBackbone` and `AlbertEncoder`.

keras-hub keeps attention kernels per head ([H, heads, head_size]), ours
[H, H]: copying is a reshape. One list of pairs, `_paired_weights`, serves
both directions; keras_hub itself is imported by the callers, never here.
`backbone_kwargs` refuses what AlbertBackbone fixes otherwise (the tanh GELU,
LayerNorm epsilon 1e-12, the google embedding layout, share="all").
"""

import keras
import numpy as np

from albert_tf.core import features as F
from albert_tf.core.config import AlbertConfig

# keras-hub's TransformerEncoder uses gelu_approximate (tanh): our "gelu".
_KERAS_HUB_ACTS = ("gelu", "gelu_new")
_KERAS_HUB_LAYER_NORM_EPS = 1e-12


# AlbertConfig field -> AlbertBackbone argument (and attribute), both ways.
_FIELD_NAMES = {
    "vocab_size": "vocabulary_size",
    "embedding_size": "embedding_dim",
    "hidden_size": "hidden_dim",
    "num_hidden_layers": "num_layers",
    "num_hidden_groups": "num_groups",
    "inner_group_num": "num_inner_repetitions",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_dim",
    "max_position_embeddings": "max_sequence_length",
    "type_vocab_size": "num_segments",
}


def config_from_keras_hub(backbone, hidden_act="gelu"):
  """The `AlbertConfig` of the same shape as a keras-hub AlbertBackbone."""
  return AlbertConfig(
      **{ours: getattr(backbone, theirs)
         for ours, theirs in _FIELD_NAMES.items()},
      hidden_act=hidden_act,
      hidden_dropout_prob=float(backbone.dropout),
      attention_probs_dropout_prob=float(backbone.dropout))


def backbone_kwargs(config):
  """`keras_hub.models.AlbertBackbone(**kwargs)` arguments for `config`.

  keras-hub has one dropout rate for both places; hidden_dropout_prob is
  used (dropout changes training only, not the outputs).
  Raises ValueError listing every field keras-hub cannot express.
  """
  problems = []
  if config.embedding_layout != "google":
    problems.append(f"embedding_layout={config.embedding_layout!r} (keras-hub "
                    "adds position/type embeddings before the E->H "
                    "projection: the google layout only)")
  if config.share != "all":
    problems.append(f"share={config.share!r} (keras-hub shares attention and "
                    "FFN within each group: share='all' only)")
  if config.hidden_act not in _KERAS_HUB_ACTS:
    problems.append(f"hidden_act={config.hidden_act!r} (keras-hub uses the "
                    "tanh GELU, 'gelu', only)")
  if config.layer_norm_eps != _KERAS_HUB_LAYER_NORM_EPS:
    problems.append(f"layer_norm_eps={config.layer_norm_eps} (keras-hub fixes "
                    f"{_KERAS_HUB_LAYER_NORM_EPS})")
  if problems:
    raise ValueError("keras-hub's AlbertBackbone cannot express "
                     + "; ".join(problems))
  kwargs = {theirs: getattr(config, ours)
            for ours, theirs in _FIELD_NAMES.items()}
  return dict(kwargs, dropout=config.hidden_dropout_prob)


# pylint: disable=protected-access
def _paired_weights(backbone, encoder):
  """[(keras-hub variable, albert_tf variable)] for every weight of both."""
  cfg = encoder.config
  if (cfg.num_hidden_groups != backbone.num_groups or
      cfg.inner_group_num != backbone.num_inner_repetitions or
      cfg.share != "all" or cfg.embedding_layout != "google"):
    raise ValueError(
        "Encoder layout does not match the keras-hub backbone (groups "
        f"{backbone.num_groups}, inner {backbone.num_inner_repetitions}, "
        f"share 'all', google embeddings) vs ({cfg.num_hidden_groups}, "
        f"{cfg.inner_group_num}, {cfg.share!r}, {cfg.embedding_layout!r})")
  emb = encoder.embedding
  pairs = [
      (backbone.token_embedding.embeddings, emb.word_embeddings.embeddings),
      (backbone.position_embedding.position_embeddings,
       emb.position_embeddings),
      (backbone.segment_embedding.embeddings,
       emb.token_type_embeddings.embeddings),
      (backbone.embeddings_layer_norm.gamma, emb.layer_norm.gamma),
      (backbone.embeddings_layer_norm.beta, emb.layer_norm.beta),
  ]
  # E == H: ours has no E->H projection; keras-hub's always has one, which
  # `_copy_projection` sets to (or checks is) the identity.
  if emb.projection is not None:
    pairs += [(backbone.embeddings_projection.kernel, emb.projection.kernel),
              (backbone.embeddings_projection.bias, emb.projection.bias)]
  ours = iter(encoder.blocks)  # groups x inner, in keras-hub's order
  for group in backbone.transformer_layers:
    for theirs in group:
      block = next(ours)
      mha, att = theirs._self_attention_layer, block.attention
      for part in ("query", "key", "value"):
        dense = getattr(mha, f"_{part}_dense")
        pairs += [(dense.kernel, getattr(att, f"{part}_kernel")),
                  (dense.bias, getattr(att, f"{part}_bias"))]
      pairs += [
          (mha._output_dense.kernel, att.output_dense.kernel),
          (mha._output_dense.bias, att.output_dense.bias),
          (theirs._self_attention_layer_norm.gamma, att.layer_norm.gamma),
          (theirs._self_attention_layer_norm.beta, att.layer_norm.beta),
          (theirs._feedforward_intermediate_dense.kernel,
           block.ffn.intermediate_dense.kernel),
          (theirs._feedforward_intermediate_dense.bias,
           block.ffn.intermediate_dense.bias),
          (theirs._feedforward_output_dense.kernel,
           block.ffn.output_dense.kernel),
          (theirs._feedforward_output_dense.bias, block.ffn.output_dense.bias),
          (theirs._feedforward_layer_norm.gamma, block.ffn.layer_norm.gamma),
          (theirs._feedforward_layer_norm.beta, block.ffn.layer_norm.beta),
      ]
  pairs += [(backbone.pooled_dense.kernel, encoder.pooler.kernel),
            (backbone.pooled_dense.bias, encoder.pooler.bias)]
  return pairs
# pylint: enable=protected-access


def _copy(pairs, to_keras_hub):
  for theirs, ours in pairs:
    source, target = (ours, theirs) if to_keras_hub else (theirs, ours)
    value = keras.ops.convert_to_numpy(source)
    # Per-head [H, heads, d] and [H, H] hold the same numbers in the same
    # (row-major) order, so a reshape to the target's shape is the copy.
    if value.size != int(np.prod(target.shape)):
      raise ValueError(f"{source.path} {tuple(value.shape)} does not fit "
                       f"{target.path} {tuple(target.shape)}")
    target.assign(value.reshape(target.shape).astype(target.dtype))


def _identity_projection(backbone, encoder, to_keras_hub):
  """keras-hub's E->H projection, which an encoder with E == H lacks: made
  the identity, and on the way back required to be (else it is lost)."""
  if encoder.embedding.projection is not None:
    return
  kernel = backbone.embeddings_projection.kernel
  bias = backbone.embeddings_projection.bias
  identity = np.eye(*kernel.shape, dtype=np.float32)
  if to_keras_hub:
    kernel.assign(identity.astype(kernel.dtype))
    bias.assign(np.zeros(bias.shape, bias.dtype))
    return
  if not (np.array_equal(keras.ops.convert_to_numpy(kernel), identity) and
          not np.any(keras.ops.convert_to_numpy(bias))):
    raise ValueError(
        f"{kernel.path}: the backbone's embedding projection is not the "
        "identity, but an encoder with embedding_size == hidden_size has no "
        "projection to hold it")


def copy_from_keras_hub(backbone, encoder):
  """Copies every weight of a keras-hub AlbertBackbone into `encoder`.

  Both must have the same shape (see `config_from_keras_hub`). Returns
  `encoder`.
  """
  _identity_projection(backbone, encoder, to_keras_hub=False)
  _copy(_paired_weights(backbone, encoder), to_keras_hub=False)
  return encoder


def copy_to_keras_hub(encoder, backbone):
  """Copies every weight of `encoder` into a keras-hub AlbertBackbone built
  with `backbone_kwargs(encoder.config)`. Returns `backbone`."""
  _copy(_paired_weights(backbone, encoder), to_keras_hub=True)
  _identity_projection(backbone, encoder, to_keras_hub=True)
  return backbone


def encoder_from_keras_hub(backbone):
  """A new `AlbertEncoder` holding the weights of a keras-hub AlbertBackbone."""
  from albert_tf.modeling.encoder import AlbertEncoder  # pylint: disable=g-import-not-at-top
  return copy_from_keras_hub(backbone, AlbertEncoder(
      config_from_keras_hub(backbone)))


def keras_hub_inputs(features):
  """Our input dict -> the input names keras-hub's AlbertBackbone expects."""
  return {"token_ids": features[F.INPUT_IDS],
          "segment_ids": features[F.SEGMENT_IDS],
          "padding_mask": features[F.INPUT_MASK]}
