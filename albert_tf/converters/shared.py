"""What the per-source readers share (BERT's layer names, layout tests,
config readers); it imports none of them. The readers import each other one
way only: tf1 -> brightmart, bert -> tf1, huggingface -> bert.
"""

import json
import re

from albert_tf.core.config import AlbertConfig
from albert_tf.converters.errors import ConversionError

# Modules of one BERT layer (Google's names) -> the original ALBERT block's.
# brightmart's layer_shared releases use these BERT names too.
BERT_LAYER_MODULES = {
    "attention/self/query": "attention_1/self/query",
    "attention/self/key": "attention_1/self/key",
    "attention/self/value": "attention_1/self/value",
    "attention/output/dense": "attention_1/output/dense",
    "attention/output/LayerNorm": "LayerNorm",
    "intermediate/dense": "ffn_1/intermediate/dense",
    "output/dense": "ffn_1/intermediate/output/dense",
    "output/LayerNorm": "LayerNorm_1",
}
BERT_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/(.+)/([^/]+)$")


def is_bert_layout(names):
  """True when the names hold Google's BERT layers (bert/encoder/layer_N/)."""
  return any(BERT_LAYER.match(n) for n in names)


def is_brightmart_layout(tensors):
  """True when the names hold brightmart's own layout (layer_shared,
  word_embeddings_2)."""
  return any(n.startswith("bert/encoder/layer_shared/") or
             n == "bert/embeddings/word_embeddings_2" for n in tensors)


def read_json(path):
  """The JSON object in `path` (a config file); a ValueError naming it."""
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f"{path}: cannot read it as JSON ({e})") from None
  if not isinstance(values, dict):
    raise ValueError(f"{path}: expected a JSON object")
  return values


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
