"""benchmarks/paper_ablations.py: its verdicts and tables on hand-worked
numbers, and run_pretraining's --sentence_order_loss_weight (Table 5 "none")."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from albert_tf import run_pretraining as rp
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.models import AlbertPretrainer, pretraining_losses
from benchmarks import ablation_design as design
from benchmarks import ablation_tables as tables
from benchmarks import common
from tests.pretraining_fixtures import tiny_argv

REPO = pathlib.Path(__file__).resolve().parents[1]


# ------------------------------------------------------------ verdicts
def test_verdict_needs_every_seed_on_one_side():
  assert tables.verdict([0.62, 0.60], [0.55, 0.50]) == "reproduces"
  assert tables.verdict([0.50, 0.52], [0.60, 0.61]) == "reversed"
  assert tables.verdict([0.50, 0.60], [0.55, 0.58]) == "unclear"
  # A tie at the edge of the ranges is no direction.
  assert tables.verdict([0.60, 0.70], [0.50, 0.60]) == "unclear"
  assert tables.verdict([], [0.5]) == "not run"


def test_summarize():
  assert tables.summarize([0.1, 0.2, 0.6]) == pytest.approx(
      {"mean": 0.3, "min": 0.1, "max": 0.6, "n": 3})
  assert tables.summarize([]) is None
  assert (tables.fmt({"mean": 0.3, "min": 0.1, "max": 0.6})
          == "30.0 (10.0–60.0)")
  assert tables.fmt(None) == "—"


def _results():
  return {
      "base": {"1": {"mlm": 0.10, "sop": 0.80, "nsp": 0.60,
                     "curve": [[0, 0.0], [250, 0.05]]},
               "2": {"mlm": 0.12, "sop": 0.70, "nsp": 0.64,
                     "curve": [[0, 0.0], [250, 0.07]]}},
      "loss_nsp": {"1": {"mlm": 0.11, "sop": 0.50, "nsp": 0.90},
                   "2": {"mlm": 0.13, "sop": 0.52, "nsp": 0.86}}}


def test_tables_and_directions_on_hand_worked_numbers():
  text = tables.markdown_tables(_results(), {"base": 1_234_567}, "Budget: x.",
                            chance={"sop": 0.505, "nsp": 0.624})
  lines = text.splitlines()
  assert lines[0] == "Budget: x."
  # Means and (min–max) in %, beside the paper's figures.
  assert ("| SOP | 11.0 (10.0–12.0) | 54.0 | 62.0 (60.0–64.0) | 78.9 | "
          "75.0 (70.0–80.0) | 86.5 |") in lines
  assert ("| NSP | 12.0 (11.0–13.0) | 54.5 | 88.0 (86.0–90.0) | 90.5 | "
          "51.0 (50.0–52.0) | 52.0 |") in lines
  assert "| none | — | 54.9 | — | 52.4 | — | 53.3 |" in lines
  assert "| majority class | | | 62.4 | | 50.5 | |" in lines
  assert ("| all | 1.23M | 12M | 11.0 (10.0–12.0) | 75.0 (70.0–80.0) | "
          "80.1 |") in lines
  assert "| attention | — | 64M | — | — | 81.7 |" in lines
  # The §4.9 curve: per step over the seeds; no dropout run given.
  assert "| 250 | 6.0 (5.0–7.0) | — |" in lines
  # 2048 pairs at chance 0.624: two standard errors are 2.14 points.
  rows = {r["claim"]: r for r in tables.direction_rows(
      _results(), {"sop": 0.505, "nsp": 0.624}, 2048)}
  # SOP 0.70–0.80 vs 0.50–0.52: apart, the paper's way round.
  assert rows["SOP-trained beats NSP-trained on SOP"]["verdict"] == "reproduces"
  assert rows["NSP-trained beats SOP-trained on NSP"]["verdict"] == "reproduces"
  # MLM 0.11–0.13 vs 0.10–0.12 overlap.
  assert rows["NSP: slightly higher MLM accuracy than SOP"][
      "verdict"] == "unclear"
  assert rows["not-shared beats all-shared"]["verdict"] == "not run"
  # Against chance: SOP 0.70 > 0.505 + 0.022; NSP-trained on SOP 0.52 is
  # not above 0.527; SOP-trained on NSP 0.60–0.64 straddles 0.624 ± 0.021;
  # NSP-trained on NSP 0.86 > 0.645.
  assert rows["SOP-trained solves SOP"]["verdict"] == "reproduces"
  assert rows["NSP-trained does not solve SOP (not above chance)"][
      "verdict"] == "reproduces"
  assert rows["SOP-trained solves NSP reasonably (above chance)"][
      "verdict"] == "unclear"
  assert rows["NSP-trained solves NSP"]["verdict"] == "reproduces"
  text = tables.markdown_tables(_results(), {}, "Budget: x.",
                            chance={"sop": 0.505, "nsp": 0.624}, pairs=2048)
  assert ("| table5 | SOP-trained solves NSP reasonably (above chance) | nsp "
          "| 62.0 (60.0–64.0) vs chance 62.4 ± 2.1 | 78.9 vs 52.4 | "
          "unclear |") in text.splitlines()


def test_chance_verdicts():
  assert tables.chance_margin(0.5, 10000) == pytest.approx(0.01)
  assert tables.chance_verdict([0.6, 0.7], 0.5, 0.05) == "reproduces"
  assert tables.chance_verdict([0.4, 0.44], 0.5, 0.05) == "reversed"
  assert tables.chance_verdict([0.5, 0.6], 0.5, 0.05) == "unclear"
  assert tables.chance_verdict([0.3, 0.55], 0.5, 0.05,
                               above=False) == "reproduces"
  assert tables.chance_verdict([0.56, 0.6], 0.5, 0.05,
                               above=False) == "reversed"
  assert tables.chance_verdict([0.5, 0.6], 0.5, 0.05, above=False) == "unclear"
  assert tables.chance_verdict([], 0.5, 0.05) == "not run"


def test_each_variant_changes_only_its_field():
  base = design.variant_config("base", 5000)
  for name in design.VARIANTS:
    config = design.variant_config(name, 5000)
    AlbertConfig.from_dict(config)  # a valid config
    changed = {k for k in config if config[k] != base[k]}
    expected = {"share_attention": {"share"}, "share_ffn": {"share"},
                "share_none": {"share"}, "e64": {"embedding_size"},
                "e256": {"embedding_size"},
                "dropout": {"hidden_dropout_prob",
                            "attention_probs_dropout_prob"}}.get(name, set())
    assert changed == expected, name


def test_cpu_label_and_units():
  amd = ("processor\t: 0\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n"
         "flags\t\t: fpu sse avx2 avx512f avx512_bf16\n")
  assert common.cpu_label(amd) == "amd-epyc-avx512"
  assert common.cpu_units(amd) == "AVX-512, avx512_bf16, no AMX"
  intel = ("model name\t: Intel(R) Xeon(R) Platinum 8488C\n"
           "flags\t\t: avx2 avx512f avx512_bf16 amx_bf16\n")
  assert common.cpu_label(intel) == "intel-xeon-amx"
  assert (common.cpu_units("model name\t: X\nflags\t\t: avx2\n")
          == "AVX2, no AMX")


def test_write_doc_keeps_the_prose_around_the_tables(tmp_path):
  doc = tmp_path / "ablations.md"
  doc.write_text(f"intro\n{tables.BEGIN}\nold\n{tables.END}\noutro\n")
  tables.write_doc(str(doc), "new\n")
  assert doc.read_text() == f"intro\n{tables.BEGIN}\nnew\n{tables.END}\noutro\n"
  assert not os.path.exists(str(doc) + ".tmp")


# ------------------------------------------------------------ the flag
def test_sentence_loss_weight_in_the_loss_and_its_gradients(tiny_config):
  # Zero logits: MLM costs log V per weighted token, the sentence head log 2.
  outputs = {"mlm_logits": tf.zeros([1, 2, 60]), "sop_logits": tf.zeros([1, 2])}
  features = {"masked_lm_ids": np.array([[3, 4]]),
              "masked_lm_weights": np.array([[1.0, 1.0]], "float32"),
              "next_sentence_labels": np.array([[1]])}
  mlm = 2 * np.log(60) / (2 + 1e-5)
  for weight, loss in ((1.0, mlm + np.log(2)), (0.5, mlm + 0.5 * np.log(2)),
                       (0.0, mlm)):
    np.testing.assert_allclose(
        pretraining_losses(outputs, features, weight)["loss"], loss,
        rtol=1e-6)
  # Weight 0: the sentence head and the pooler get no gradient.
  rng = np.random.default_rng(0)
  inputs = {"input_ids": rng.integers(5, 60, (3, 8)).astype("int32"),
            "input_mask": np.ones((3, 8), "int32"),
            "segment_ids": np.zeros((3, 8), "int32"),
            "masked_lm_positions": np.array([[1, 2]] * 3, "int32")}
  features = {"masked_lm_ids": np.array([[7, 9]] * 3),
              "masked_lm_weights": np.ones((3, 2), "float32"),
              "next_sentence_labels": np.array([[0], [1], [1]])}
  for weight in (0.0, 1.0):
    model = AlbertPretrainer(tiny_config, sentence_order_weight=weight)
    with tf.GradientTape() as tape:
      loss = pretraining_losses(model(inputs), features,
                                model.sentence_order_weight)["loss"]
    head = (model.sentence_order_head.trainable_variables +
            model.encoder.pooler.trainable_variables)
    norm = sum(float(tf.reduce_sum(tf.abs(g))) for g in tape.gradient(
        loss, head))
    assert (norm == 0.0) == (weight == 0.0), (weight, norm)
  restored = AlbertPretrainer.from_config(
      AlbertPretrainer(tiny_config, sentence_order_weight=0.0).get_config())
  assert restored.sentence_order_weight == 0.0


def test_flag_zero_trains_mlm_alone(tmp_path):
  with pytest.raises(flags.IllegalFlagValueError):
    rp.params_from_argv(["--sentence_order_loss_weight=-1"])
  assert rp.params_from_argv([]).sentence_order_loss_weight == 1.0
  rp.run(rp.params_from_argv(tiny_argv(
      tmp_path, "--sentence_order_loss_weight=0", "--num_train_steps=3")))
  with open(tmp_path / "out" / "train_log.jsonl", encoding="utf-8") as f:
    log = [json.loads(line) for line in f if line.strip()]
  assert log
  for row in log:  # every batch has the same counts: the means are alike
    np.testing.assert_allclose(row["loss"], row["masked_lm_loss"], rtol=1e-6)
    assert row["sentence_order_loss"] > 0.5  # computed, not trained on


# ------------------------------------------------------------ end to end
@pytest.mark.slow
def test_smoke_runs_then_resumes(tmp_path):
  """--smoke on two variants and one seed; the rerun redoes nothing."""
  results = tmp_path / "results.json"
  cmd = [sys.executable, "-m", "benchmarks.paper_ablations", "--smoke",
         "--variants=base,loss_none", "--seeds=3",
         f"--output_dir={tmp_path / 'out'}", f"--results_file={results}",
         f"--doc={tmp_path / 'ablations.md'}"]
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=600)
  assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
  saved = json.loads(results.read_text())
  assert sorted(saved["runs"]) == ["base", "loss_none"]
  for variant in ("base", "loss_none"):
    run = saved["runs"][variant]["3"]
    assert run["global_step"] == 4
    assert 0.0 <= run["nsp"] <= 1.0 and 0.0 <= run["sop"] <= 1.0
  # base evaluates at each checkpoint (the §4.9 curve): steps 0, 2, 4.
  assert [s for s, _ in saved["runs"]["base"]["3"]["curve"]] == [0, 2, 4]
  assert "### Table 5" in (tmp_path / "ablations.md").read_text()
  second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
  assert second.returncode == 0, second.stderr[-3000:]
  assert "runs: 2 (2 done before)" in second.stdout
  assert second.stdout.count("done, skipped") == 6
  assert "run_pretraining" not in second.stdout
