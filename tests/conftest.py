"""Shared pytest setup: quiet TF, the repo on sys.path, tiny configs."""

import logging
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
  from albert_tf.core.config import AlbertConfig
  return AlbertConfig(vocab_size=60, embedding_size=8, hidden_size=16,
                      num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


# The longest files first (wall seconds summed per file under `-n 2`, AMD
# EPYC AVX2, 2026-12-02; fast tier / slow tier). `-n 2 --dist loadfile`
# runs each file on one worker, and xdist would hand out the files with the
# most tests first: the longest ones here have few tests, so they ran last,
# one worker alone at the end. Files not named keep their place after these.
LONGEST_FIRST = (
    "test_demo_chain.py",        # - / 455: the smoke demo, then the docs
    "test_export_fidelity.py",   # - / 215: two models trained, every export
    "test_trainer.py",           # 44 / 190
    "test_run_pretraining.py",   # 66 / 180
    "test_reading_comprehension.py",  # - / 134
    "test_faults.py",            # 116
    "test_export.py",            # 95
    "test_sharding_simulation.py",  # - / 90
    "test_export_options.py",    # 79
    "test_family_serving.py",    # 30 / 75: five families exported, TFLite twice
    "test_scratch_family.py",    # - / 50: two commands, export, TFLite
    "test_faults_output_dir.py",  # 75
    "test_tflite.py",            # - / 63
    "test_tagger_export.py",     # 62 / 28
    "test_quickstart.py",        # - / 53
    "test_fill_mask.py",         # 8 / 50
    "test_faults_atomic.py",     # 8 / 49
    "test_faults_data.py",       # 47
    "test_legacy_outputs.py",    # 14 / 35
    "test_model.py",             # 42
    "test_inference.py",         # 41
    "test_data_prep_cli.py",     # 41
    "test_model_harness.py",     # 40
    "test_faults_nan.py",        # 40
    "test_run_classifier.py",    # 37
    "test_cli_errors.py",        # 1 / 25
    "test_params.py",            # - / 20
)

# Files that time themselves against the wall clock (a one-minute budget
# run must end within 6 s of its minute): `python -m tests.by_file` runs
# them after the others, one at a time, so that no other test file shares
# the two cores with them. Under a neighbour, the CI saw 1.41 minutes.
RUN_ALONE = ("test_budget.py",)


def pytest_configure(config):
  # xdist's own order (most tests first) would undo the one below.
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


@pytest.fixture
def absl_log():
  """Messages of absl's logger at INFO and above, whatever handlers or
  propagation earlier tests in this process left on it (caplog sees only
  what propagates to the root logger)."""
  messages = []
  handler = logging.Handler(logging.INFO)
  handler.emit = lambda record: messages.append(record.getMessage())
  logger = logging.getLogger("absl")
  level = logger.level
  logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  yield messages
  logger.removeHandler(handler)
  logger.setLevel(level)
