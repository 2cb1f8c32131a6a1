"""Shared pytest setup: quiet TF, the repo on sys.path, tiny configs."""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import pytest  # noqa: E402


@pytest.fixture
def tiny_config():
  from albert_tf.config import AlbertConfig
  return AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16,
                      num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)
