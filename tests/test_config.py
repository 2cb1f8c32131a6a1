import json

import pytest

from albert_tf.core.config import PRESETS, AlbertConfig, resolve_config

GOOGLE_BASE_V2 = {
    "attention_probs_dropout_prob": 0, "hidden_act": "gelu",
    "hidden_dropout_prob": 0, "embedding_size": 128, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 512, "num_attention_heads": 12,
    "num_hidden_layers": 12, "num_hidden_groups": 1, "net_structure_type": 0,
    "gap_size": 0, "num_memory_blocks": 0, "inner_group_num": 1,
    "down_scale_factor": 1, "type_vocab_size": 2, "vocab_size": 30000}

BRIGHTMART_TINY = {
    "attention_probs_dropout_prob": 0.0, "directionality": "bidi",
    "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 312,
    "embedding_size": 128, "initializer_range": 0.02,
    "intermediate_size": 1248, "max_position_embeddings": 512,
    "num_attention_heads": 12, "num_hidden_layers": 4,
    "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
    "pooler_num_fc_layers": 3, "pooler_size_per_head": 128,
    "pooler_type": "first_token_transform", "type_vocab_size": 2,
    "vocab_size": 21128, "ln_type": "postln"}


def _write(tmp_path, values, name="albert_config.json"):
  path = tmp_path / name
  path.write_text(json.dumps(values))
  return path


def test_reads_original_google_config_unchanged(tmp_path):
  config = AlbertConfig.from_json_file(_write(tmp_path, GOOGLE_BASE_V2))
  assert config == PRESETS["albert_base_v2"]


def test_reads_brightmart_config_and_round_trips(tmp_path):
  config = AlbertConfig.from_json_file(_write(tmp_path, BRIGHTMART_TINY))
  assert config == PRESETS["albert_tiny_zh"]
  out = tmp_path / "out.json"
  config.to_json_file(out)
  assert AlbertConfig.from_json_file(out) == config


def test_preln_is_rejected(tmp_path):
  values = dict(BRIGHTMART_TINY, ln_type="preln")
  with pytest.raises(ValueError, match="ln_type='preln'"):
    AlbertConfig.from_json_file(_write(tmp_path, values))


def test_missing_and_mistyped_fields_are_named(tmp_path):
  values = dict(GOOGLE_BASE_V2)
  del values["hidden_size"]
  with pytest.raises(ValueError, match=r"missing required field.*hidden_size"):
    AlbertConfig.from_json_file(_write(tmp_path, values))
  values = dict(GOOGLE_BASE_V2, num_attention_heads="12")
  with pytest.raises(TypeError, match="num_attention_heads must be int"):
    AlbertConfig.from_json_file(_write(tmp_path, values))
  values = dict(GOOGLE_BASE_V2, hidden_sise=3)
  with pytest.raises(ValueError, match="unknown config field.*hidden_sise"):
    AlbertConfig.from_json_file(_write(tmp_path, values))


@pytest.mark.parametrize("changes, message", [
    ({"num_attention_heads": 7}, "divisible by num_attention_heads"),
    ({"num_hidden_groups": 5}, "divisible by num_hidden_groups"),
    ({"hidden_act": "swish"}, "Unknown hidden_act"),
    ({"share": "some"}, "Unknown share"),
])
def test_validation_messages(changes, message):
  with pytest.raises(ValueError, match=message):
    PRESETS["albert_base_v2"].replace(**changes)


def test_unknown_preset_lists_known_ones():
  with pytest.raises(ValueError, match="albert_tiny_zh"):
    AlbertConfig.from_preset("albert_huge")


def test_presets_match_the_paper_and_brightmart():
  base_v1, base_v2 = PRESETS["albert_base_v1"], PRESETS["albert_base_v2"]
  assert base_v1.hidden_dropout_prob == 0.1 and base_v2.hidden_dropout_prob == 0
  assert PRESETS["albert_xxlarge_v1"].num_attention_heads == 64
  tiny = PRESETS["albert_tiny_zh"]
  assert (tiny.hidden_size, tiny.intermediate_size, tiny.num_hidden_layers,
          tiny.vocab_size) == (312, 1248, 4, 21128)
  assert PRESETS["bert_base"].share == "none"
  assert PRESETS["bert_base"].embedding_size == 768


def test_demo_preset_is_the_small_cpu_shape():
  """albert_zh_l4_h128 (the demo's, not a release): 4 layers of 128, 2
  heads of 64, FFN 512, E 128, brightmart's vocabulary size, shared
  layers, no dropout; 2,985,216 encoder weights, counted by hand: word
  21128x128 + position 512x128 + type 2x128 + LayerNorm 2x128 (no E->H
  projection: E equals H), one shared layer (4 x (128x128+128) attention,
  2x128 LayerNorm, 128x512+512 + 512x128+128 FFN, 2x128 LayerNorm), the
  pooler 128x128+128."""
  mini = PRESETS["albert_zh_l4_h128"]
  assert (mini.hidden_size, mini.intermediate_size, mini.num_attention_heads,
          mini.num_hidden_layers, mini.embedding_size, mini.vocab_size,
          mini.share, mini.hidden_dropout_prob) == (128, 512, 2, 4, 128,
                                                    21128, "all", 0.0)
  by_hand = (21128 * 128 + 512 * 128 + 2 * 128 + 2 * 128
             + 4 * (128 * 128 + 128) + 2 * 128
             + (128 * 512 + 512) + (512 * 128 + 128) + 2 * 128
             + (128 * 128 + 128))
  assert by_hand == 2_985_216
  from albert_tf.params import parameter_table  # pylint: disable=g-import-not-at-top
  assert parameter_table(["albert_zh_l4_h128"])["albert_zh_l4_h128"][
      "encoder"] == by_hand


def test_group_of_layer_follows_the_original_rule():
  config = AlbertConfig(num_hidden_layers=12, num_hidden_groups=3)
  assert [config.group_of_layer(i) for i in range(12)] == [0] * 4 + [1] * 4 + [2] * 4


def test_resolve_config_needs_exactly_one_source(tmp_path):
  with pytest.raises(ValueError, match="exactly one"):
    resolve_config()
  assert resolve_config(preset="albert_tiny_zh").hidden_size == 312
