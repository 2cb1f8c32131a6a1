"""`AlbertConfig`: the fields of the original `albert_config.json`, presets, validation.

A config read from an original google-research or brightmart
`albert_config.json` is accepted unchanged; `to_json_file` writes the same
format back. Fields that the original code never reads are accepted and
dropped; fields that would change the math and are not supported are errors.
"""

import copy
import dataclasses
import json
from typing import Optional

from albert_tf.core.file_io import atomic_writer

SHARE_MODES = ("all", "attention", "ffn", "none")
# "gelu" is the tanh approximation, as in the original modeling.py (HF calls it
# gelu_new); "gelu_exact"/"gelu_python" use erf.
HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_exact", "gelu_python", "relu", "tanh",
               "linear")
EMBEDDING_LAYOUTS = ("google", "brightmart")

# Fields of original configs that the original code ignores (or that only
# select an initialisation option): accepted, not stored.
_IGNORED_FIELDS = ("down_scale_factor", "gap_size", "net_structure_type",
                   "num_memory_blocks", "layers_to_keep", "model_type",
                   "architectures", "bos_token_id", "eos_token_id",
                   "pad_token_id", "classifier_dropout_prob",
                   "position_embedding_type", "transformers_version",
                   "output_past", "directionality", "pooler_fc_size",
                   "pooler_num_attention_heads", "pooler_num_fc_layers",
                   "pooler_size_per_head", "pooler_type")


# The fields that make two configs the same network (the rest are
# training settings such as dropout): checkpoints and fingerprints compare
# these.
ARCHITECTURE_FIELDS = ("vocab_size", "embedding_size", "hidden_size",
                       "num_hidden_layers", "num_hidden_groups",
                       "inner_group_num", "num_attention_heads",
                       "intermediate_size", "hidden_act",
                       "max_position_embeddings", "type_vocab_size",
                       "layer_norm_eps", "share", "embedding_layout")

@dataclasses.dataclass
class AlbertConfig:
  """Hyperparameters of an ALBERT (share="none", E == H: BERT) encoder, the
  fields named as in the original `albert_config.json`.

  `share`, the paper's Table 4 ablation: "all" (ALBERT), "attention" or
  "ffn" (that sub-layer only), "none". `embedding_layout`: "google"
  (position/type embeddings of width E, before the E->H projection) or
  "brightmart" (its albert_zh releases: the projection first, width H).
  """
  vocab_size: int = 30000
  embedding_size: int = 128
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_hidden_groups: int = 1
  inner_group_num: int = 1
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.0
  attention_probs_dropout_prob: float = 0.0
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02
  layer_norm_eps: float = 1e-12
  share: str = "all"
  embedding_layout: str = "google"

  def __post_init__(self):
    self.validate()

  # ---------------------------------------------------------------- checks
  def validate(self):
    """Raises ValueError/TypeError naming the field that is wrong."""
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      expected = {"int": int, "float": float, "str": str}[
          field.type if isinstance(field.type, str) else field.type.__name__]
      if expected is float and isinstance(value, int) and not isinstance(
          value, bool):
        value = float(value)
        setattr(self, field.name, value)
      if isinstance(value, bool) or not isinstance(value, expected):
        raise TypeError(
            f"AlbertConfig.{field.name} must be {expected.__name__}, got "
            f"{value!r} ({type(value).__name__})")
    for name in ("vocab_size", "embedding_size", "hidden_size",
                 "num_hidden_layers", "num_hidden_groups", "inner_group_num",
                 "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size"):
      if getattr(self, name) <= 0:
        raise ValueError(f"AlbertConfig.{name} must be positive, got "
                         f"{getattr(self, name)}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"hidden_size ({self.hidden_size}) must be divisible by "
          f"num_attention_heads ({self.num_attention_heads})")
    if self.num_hidden_layers % self.num_hidden_groups:
      raise ValueError(
          f"num_hidden_layers ({self.num_hidden_layers}) must be divisible by "
          f"num_hidden_groups ({self.num_hidden_groups})")
    if self.hidden_act not in HIDDEN_ACTS:
      raise ValueError(f"Unknown hidden_act {self.hidden_act!r}; known: "
                       f"{', '.join(HIDDEN_ACTS)}")
    if self.share not in SHARE_MODES:
      raise ValueError(f"Unknown share {self.share!r}; known: "
                       f"{', '.join(SHARE_MODES)}")
    if self.share != "all" and (self.num_hidden_groups != 1 or
                                self.inner_group_num != 1):
      raise ValueError(
          f"share={self.share!r} needs num_hidden_groups=1 and "
          "inner_group_num=1 (groups only make sense with share='all')")
    if self.embedding_layout not in EMBEDDING_LAYOUTS:
      raise ValueError(f"Unknown embedding_layout {self.embedding_layout!r}; "
                       f"known: {', '.join(EMBEDDING_LAYOUTS)}")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      if not 0.0 <= getattr(self, name) < 1.0:
        raise ValueError(f"AlbertConfig.{name} must be in [0, 1), got "
                         f"{getattr(self, name)}")

  # ---------------------------------------------------------------- derived
  @property
  def head_size(self):
    return self.hidden_size // self.num_attention_heads

  def group_of_layer(self, layer_index):
    """The group used by layer `layer_index`, as in the original modeling.py."""
    return int(layer_index / self.num_hidden_layers * self.num_hidden_groups)

  # ---------------------------------------------------------------- io
  @classmethod
  def from_dict(cls, values, source="<dict>"):
    """Builds a config from original-format keys; `source` names it in errors."""
    values = dict(values)
    ln_type = values.pop("ln_type", "postln")
    if ln_type not in ("postln", None):
      raise ValueError(
          f"{source}: ln_type={ln_type!r} is not supported: albert_tf "
          "implements the original post-LayerNorm block only (brightmart's "
          "preln xxlarge release changes the math).")
    for key in _IGNORED_FIELDS:
      values.pop(key, None)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"{source}: unknown config field(s) {unknown}; known "
                       f"fields: {sorted(known)}")
    required = ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size")
    missing = [k for k in required if k not in values]
    if missing:
      raise ValueError(f"{source}: missing required field(s) {missing}")
    if "embedding_size" not in values:
      # BERT configs have no embedding_size: the embedding is as wide as H.
      values["embedding_size"] = values["hidden_size"]
    try:
      return cls(**values)
    except (TypeError, ValueError) as e:
      raise type(e)(f"{source}: {e}") from None

  @classmethod
  def from_json_file(cls, path):
    """Reads an original google-research / brightmart / HF albert_config.json."""
    try:
      with open(path, encoding="utf-8") as f:
        values = json.load(f)
    except FileNotFoundError:
      raise FileNotFoundError(f"Config file not found: {path}") from None
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(values, dict):
      raise ValueError(f"{path}: expected a JSON object")
    return cls.from_dict(values, source=str(path))

  def to_dict(self):
    return dataclasses.asdict(self)

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def to_json_file(self, path):
    with atomic_writer(path) as f:
      f.write(self.to_json_string())

  def replace(self, **changes):
    return dataclasses.replace(self, **changes)

  @classmethod
  def from_preset(cls, name):
    """Returns a copy of a named preset (see `PRESETS`)."""
    if name not in PRESETS:
      raise ValueError(f"Unknown preset {name!r}; known presets: "
                       f"{', '.join(sorted(PRESETS))}")
    return copy.deepcopy(PRESETS[name])


def _english(hidden, intermediate, heads, layers, dropout):
  return AlbertConfig(vocab_size=30000, embedding_size=128, hidden_size=hidden,
                      intermediate_size=intermediate,
                      num_attention_heads=heads, num_hidden_layers=layers,
                      hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


def _build_presets():
  presets = {}
  shapes = {"base": (768, 3072, 12, 12, 0.1), "large": (1024, 4096, 16, 24, 0.1),
            "xlarge": (2048, 8192, 16, 24, 0.1),
            "xxlarge": (4096, 16384, 64, 12, 0.0)}
  for size, (h, i, a, l, p) in shapes.items():
    presets[f"albert_{size}_v1"] = _english(h, i, a, l, p)
    presets[f"albert_{size}_v2"] = _english(h, i, a, l, 0.0)
  # brightmart/albert_zh: BERT's Chinese WordPiece vocab of 21128, E=128.
  for name, (h, i, l) in {"albert_tiny_zh": (312, 1248, 4),
                          "albert_small_zh": (384, 1536, 6)}.items():
    presets[name] = AlbertConfig(vocab_size=21128, embedding_size=128,
                                 hidden_size=h, intermediate_size=i,
                                 num_attention_heads=12, num_hidden_layers=l)
  # Not a release: the shape `make demo` pretrains on 2 CPU cores (a sixth
  # of albert_tiny_zh's encoder FLOPs at seq 64; 296 vs 90 pretraining
  # examples/s at batch 32, float32, on the AMD EPYC of
  # docs/demo_report_full.md). The BERT miniatures' rules (Turc et al.
  # 2019): H/64 heads, I = 4H; E = H = 128, so no E->H projection.
  presets["albert_zh_l4_h128"] = AlbertConfig(
      vocab_size=21128, embedding_size=128, hidden_size=128,
      intermediate_size=512, num_attention_heads=2, num_hidden_layers=4)
  for name, (h, i, a, l) in {"bert_base": (768, 3072, 12, 12),
                             "bert_large": (1024, 4096, 16, 24)}.items():
    presets[name] = AlbertConfig(vocab_size=30000, embedding_size=h,
                                 hidden_size=h, intermediate_size=i,
                                 num_attention_heads=a, num_hidden_layers=l,
                                 hidden_dropout_prob=0.1,
                                 attention_probs_dropout_prob=0.1,
                                 share="none")
  return presets


PRESETS = _build_presets()


def resolve_config(preset: Optional[str] = None,
                   albert_config_file: Optional[str] = None):
  """Config from exactly one of a preset name or a JSON file (for entry points)."""
  if bool(preset) == bool(albert_config_file):
    raise ValueError("Give exactly one of --preset or --albert_config_file")
  if preset:
    return AlbertConfig.from_preset(preset)
  return AlbertConfig.from_json_file(albert_config_file)
