"""Nothing silent, round 4 (issue 50): conversion, task modules, corrupt
files, Ctrl-C and export defaults. One test per row of docs/faults.md;
each fails with its fix taken out."""

import json
import os

import numpy as np
import pytest

from albert_tf import convert_checkpoint as cc
from tests import test_convert_bert as bert_fixtures


def _one_line(message, *parts):
  message = str(message)
  assert "\n" not in message, message
  for part in parts:
    assert part in message, message


# ------------------------------------------------------------ conversion
def test_bert_config_with_fewer_layers_than_the_checkpoint_is_refused(
    tmp_path):
  """Row 5: a 2-layer bert_model.ckpt, bert_config.json saying 1 layer."""
  tensors = bert_fixtures.tf1_bert_tensors(np.random.default_rng(1))
  prefix = bert_fixtures.write_google_release(str(tmp_path / "bert"), tensors,
                                              num_hidden_layers=1)
  out = tmp_path / "out"
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet)
  _one_line(error.value, f"{prefix} holds 2 layers but "
            f"{tmp_path / 'bert' / 'bert_config.json'} says "
            "num_hidden_layers=1: bert/encoder/layer_1/attention/output/"
            "LayerNorm/beta and 15 more tensor(s) would be left out")
  assert not out.exists()


def test_vocab_with_fewer_tokens_than_vocab_size_is_refused_unless_padded(
    tmp_path):
  """Row 15: a 30-token vocab.txt for vocab_size=50."""
  tensors = bert_fixtures.tf1_bert_tensors(np.random.default_rng(2),
                                           heads=False)
  release = tmp_path / "bert"
  prefix = bert_fixtures.write_google_release(str(release), tensors)
  bert_fixtures.write_vocab(str(release), size=30)
  out = tmp_path / "out"
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet)
  _one_line(error.value, f"{release / 'vocab.txt'}: 30 tokens but "
            "vocab_size=50 in the config: the embedding rows of ids 30 to "
            "49 are never used", "--allow_padded_vocab")
  assert not out.exists()
  # Padded on purpose: converted, the padding named in the report.
  report = cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet,
                      allow_padded_vocab=True)
  assert report["heads"] == []
  assert (f"{release / 'vocab.txt'}: 30 tokens but vocab_size=50 "
          "(--allow_padded_vocab): the embedding rows of ids 30 to 49 are "
          "never used") in report["notes"]
  assert (out / "vocab.txt").read_text() == (release / "vocab.txt").read_text()

