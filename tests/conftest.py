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


# The longest files first (seconds summed per file, `make test` under load,
# 2026-12). `-n 2 --dist loadfile` runs each file on one worker, and xdist
# would hand out the files with the most tests first: the longest ones here
# have 1 to 4 tests, so they ran last, one worker alone at the end. Files
# not named keep their place after these.
LONGEST_FIRST = (
    "test_demo_chain.py",        # 1133 s: the smoke demo, then the docs
    "test_trainer.py",           # 397
    "test_run_pretraining.py",   # 312
    "test_tflite.py",            # 298
    "test_reading_comprehension.py",  # ~200 (new; 95-216 s alone, loaded)
    "test_legacy_outputs.py",    # 193
    "test_faults_output_dir.py",  # 149
    "test_cli_errors.py",        # 128
    "test_quickstart.py",        # 96
    "test_faults_noise.py",      # 93
    "test_tagger_export.py",     # 86
    "test_export.py",            # 82
    "test_task_contract.py",     # 80
    "test_faults_data.py",       # 78
    "test_faults.py",            # 77
    "test_fill_mask.py",         # 68
    "test_params.py",            # 67
)


def pytest_configure(config):
  # xdist's own order (most tests first) would undo the one below.
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable
