"""`python -m albert_tf.params --json` gives the exact encoder sizes of the paper's models."""

import pytest

from albert_tf.params import parameter_table

# Exact counts that HF and keras-hub also give (the paper rounds them to
# 12M/18M/60M/235M/108M/334M); albert_*_zh from brightmart's releases.
EXPECTED_ENCODER = {
    "albert_base_v2": 11_683_584, "albert_large_v2": 17_683_968,
    "albert_xlarge_v2": 58_724_864, "albert_xxlarge_v2": 222_595_584,
    "albert_tiny_zh": 4_080_520, "albert_small_zh": 4_742_272,
    "albert_zh_l4_h128": 2_985_216,  # the demo's shape (not a release)
    "bert_base": 109_081_344, "bert_large": 334_607_360,
}


@pytest.mark.slow
def test_parameter_table_is_exact():
  table = parameter_table()
  assert {name: table[name]["encoder"] for name in EXPECTED_ENCODER} == EXPECTED_ENCODER
  for size in ("base", "large", "xlarge", "xxlarge"):
    assert table[f"albert_{size}_v1"] == table[f"albert_{size}_v2"]
  # Heads: MLM transform H*E+E, LayerNorm 2E, output bias V; SOP 2H+2.
  base = table["albert_base_v2"]
  assert base["pretrainer"] - base["encoder"] == (768 * 128 + 128) + 256 + 30000 + (2 * 768 + 2)
