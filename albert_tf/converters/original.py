"""Original google-research TF1 names -> an AlbertPretrainer.

The one name map from checkpoint tensors to the model: every source that is
not keras-hub is first renamed to these names (bert/embeddings/...,
bert/encoder/transformer/group_G/inner_group_I/..., cls/predictions/...,
cls/seq_relationship/..., kernels [in, out]), so a new source needs a map to
these names only, never to the model's variables. `load_original_names`
builds the model from a reader's output and decides which heads are complete
enough to save.
"""

import re

import numpy as np

from albert_tf.converters.errors import ConversionError
from albert_tf.modeling.models import AlbertPretrainer

_HEAD_PREFIXES = {"masked_lm_head": "cls/predictions/",
                  "sentence_order_head": "cls/seq_relationship/"}


def _dense(prefix, layer):
  return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _layer_norm(prefix, layer):
  return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def original_variable_map(pretrainer):
  """{original TF1 name: (keras variable, transform to its layout)} of an
  AlbertPretrainer (or a lone AlbertEncoder: no heads); the transform is
  the identity except for the SOP output_weights, stored [2, H]."""
  encoder = getattr(pretrainer, "encoder", pretrainer)
  config = encoder.config
  if config.share not in ("all", "none"):
    raise ConversionError(
        f"config share={config.share!r}: original checkpoints store layers as "
        "group_G/inner_group_I, which needs share='all' (use num_hidden_groups "
        "to un-share) or 'none' (layer N = group_N/inner_group_0, BERT)")
  identity = lambda x: x
  emb = encoder.embedding
  names = {
      "bert/embeddings/word_embeddings": emb.word_embeddings.embeddings,
      "bert/embeddings/token_type_embeddings":
          emb.token_type_embeddings.embeddings,
      "bert/embeddings/position_embeddings": emb.position_embeddings,
  }
  names.update(_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm))
  if emb.projection is not None:  # None when E == H (BERT), as originally
    names["bert/encoder/embedding_hidden_mapping_in/kernel"] = (
        emb.projection.kernel)
    if emb.projection.use_bias:
      names["bert/encoder/embedding_hidden_mapping_in/bias"] = (
          emb.projection.bias)
  # share="none" has one block per layer and inner_group_num 1: block N is
  # group_N/inner_group_0, the names of an ALBERT with num_hidden_groups = L.
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


def assign_original_weights(pretrainer, tensors, source="checkpoint",
                            source_name=None):
  """Copies {original name: array} into the model; returns the name lists
  {"assigned", "missing", "unconsumed"}. A shape mismatch is a
  ConversionError naming it as the file does (`source_name`)."""
  source_name = source_name or (lambda name: name)
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
          f"{source}: variable {source_name(name)} has shape "
          f"{list(value.shape)} (after "
          f"layout transform) but the config needs {list(variable.shape)} "
          f"for {variable.path}; is --albert_config_file the config of this "
          "checkpoint?")
    variable.assign(value.astype(variable.dtype))
    assigned.append(name)
  return {"assigned": assigned, "missing": missing, "unconsumed": unconsumed}


_BLOCK = re.compile(
    r"^bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/")


def load_original_names(checkpoint, config, tensors, notes, unconsumed,
                        extras=None):
  """An AlbertPretrainer from a reader's (config, tensors, notes, unconsumed).

  `extras`: "source_name" (original name -> the source file's, in errors
  and the report), "vocab_file" (the source's tokenizer, which convert
  copies), "config_file" (named in errors). Returns (config, pretrainer,
  report, heads whose tensors were all found). Raises ConversionError when
  encoder tensors are missing or the checkpoint has more layers (groups)
  than the config.
  """
  extras = extras or {}
  shown = extras.get("source_name") or (lambda name: name)
  pretrainer = AlbertPretrainer(config)
  report = assign_original_weights(pretrainer, tensors, source=checkpoint,
                                   source_name=shown)
  # Layers (groups, inner groups) the config has no place for: the model
  # written would be a shallower one, the rest of the checkpoint dropped.
  left_out = sorted(n for n in report["unconsumed"] if _BLOCK.match(n))
  if left_out:
    blocks = [tuple(map(int, _BLOCK.match(n).groups())) for n in tensors
              if _BLOCK.match(n)]
    groups = max(g for g, _ in blocks) + 1
    inner = max(i for _, i in blocks) + 1
    if config.share == "none":
      found, wanted = (f"{groups} layers",
                       f"num_hidden_layers={config.num_hidden_layers}")
    elif inner > config.inner_group_num:
      found, wanted = (f"{inner} inner groups per group",
                       f"inner_group_num={config.inner_group_num}")
    else:
      found, wanted = (f"{groups} hidden groups",
                       f"num_hidden_groups={config.num_hidden_groups}")
    raise ConversionError(
        f"{checkpoint} holds {found} but "
        f"{extras.get('config_file') or 'the config'} says {wanted}: "
        f"{shown(left_out[0])} and {len(left_out) - 1} more tensor(s) would "
        "be left out of the converted model (is --albert_config_file the "
        "config of this checkpoint?)")
  report["unconsumed"] = sorted(set(map(shown, report["unconsumed"])) |
                                set(unconsumed))
  report["notes"] = notes
  encoder_missing = [shown(n) for n in report["missing"]
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
      report["unconsumed"] = sorted(report["unconsumed"] +
                                    [shown(n) for n in dropped])
      report["notes"].append(f"{part} not converted (missing tensors)")
  report["assigned"] = [shown(n) for n in report["assigned"]]
  report["missing"] = [shown(n) for n in report["missing"]]
  if extras.get("vocab_file"):
    report["vocab_source"] = extras["vocab_file"]
  return config, pretrainer, report, heads
