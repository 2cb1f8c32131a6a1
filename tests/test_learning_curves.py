"""benchmarks/learning_curves.py: subsets, steps, significance and the table.

The fine-tuning runs themselves are the demo's (tests/test_demo_chain.py,
slow tier); here the parts that decide what the table says, on hand-made
cases whose answers are worked out by hand.
"""

import json
import math
import os

import pytest

from benchmarks import learning_curves as lc
from benchmarks import learning_curves_report as lc_report


def _rows(n_pos, n_neg):
  return ([("1", f"好{i}") for i in range(n_pos)]
          + [("0", f"差{i}") for i in range(n_neg)])


def test_sample_is_stratified_seeded_and_all_for_zero():
  rows = _rows(600, 400)
  a = lc.sample(rows, 50, seed=1)
  assert len(a) == 50 and sum(l == "1" for l, _ in a) == 30  # 60% of 50
  assert len(set(a)) == 50
  assert a == lc.sample(rows, 50, seed=1)
  assert set(a) != set(lc.sample(rows, 50, seed=2))
  assert lc.sample(rows, 0, seed=1) == rows
  assert lc.sample(rows, 5000, seed=1) == rows


def test_make_subsets_writes_train_dev_test(tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  for split, (p, n) in {"train": (60, 40), "dev": (30, 20),
                        "test": (12, 8)}.items():
    (data / f"{split}.tsv").write_text(
        "".join(f"{l}\t{t}\n" for l, t in _rows(p, n)), encoding="utf-8")
  subsets, gold = lc.make_subsets(str(data), str(tmp_path / "w"), [10, 0],
                                  [1, 2], max_dev=30, max_test=15)
  assert sorted(subsets) == [(0, 1), (0, 2), (10, 1), (10, 2)]
  small = subsets[(10, 1)]
  assert len(lc.read_tsv(os.path.join(small, "train.tsv"))) == 10
  # Dev as large as train, capped at max_dev; test the first max_test.
  assert len(lc.read_tsv(os.path.join(small, "dev.tsv"))) == 10
  assert len(lc.read_tsv(os.path.join(subsets[(0, 1)], "dev.tsv"))) == 30
  assert len(lc.read_tsv(os.path.join(subsets[(0, 1)], "train.tsv"))) == 100
  assert gold == [1] * 12 + [0] * 3


def test_read_tsv_names_a_bad_line(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text("1\tgood\nno tab here\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"train.tsv:2: expected 'label<TAB>"):
    lc.read_tsv(str(path))


@pytest.mark.parametrize("n,steps", [(50, 30), (200, 70), (1000, 150),
                                     (13889, 150)])
def test_steps_are_epochs_clipped(n, steps):
  recipe = {"batch_size": 32, "epochs": 10, "min_steps": 30, "max_steps": 150}
  assert lc.steps_for(n, recipe) == steps


def test_mcnemar_exact_on_discordant_pairs():
  gold = [1] * 10
  a = [1] * 10
  b = [0] * 5 + [1] * 5  # a alone right on 5, b alone right on none
  only_a, only_b, p = lc_report.mcnemar(gold, a, b)
  assert (only_a, only_b) == (5, 0)
  assert p == pytest.approx(2 * 0.5 ** 5)  # two-sided exact binomial
  assert lc_report.mcnemar(gold, a, a) == (0, 0, 1.0)


def test_paired_t_matches_the_closed_form_for_two_degrees_of_freedom():
  # Differences 0.10, 0.12, 0.14: mean 0.12, sd 0.02, t = 0.12 / (0.02 /
  # sqrt 3); with 2 degrees of freedom the two-sided p is 1 - t/sqrt(2+t^2).
  t = 0.12 / (0.02 / math.sqrt(3))
  p = lc_report.paired_t([0.80, 0.82, 0.84], [0.70, 0.70, 0.70])
  assert p == pytest.approx(1 - t / math.sqrt(2 + t * t), rel=1e-6)
  assert lc_report.paired_t([0.8], [0.7]) is None  # one pair
  # The same difference on every seed: no variance.
  assert lc_report.paired_t([0.8, 0.9], [0.7, 0.8]) == 0.0
  assert lc_report.paired_t([0.8, 0.9], [0.8, 0.9]) == 1.0


def _runs(pretrained, random_init, tfidf):
  """runs[(n, seed, model)] for n=50 and seeds 1-3 from per-seed accuracies
  on a 10-review test set (all gold labels 1: accuracy k/10 = k right)."""
  runs = {}
  for seed, accs in enumerate(zip(pretrained, random_init, tfidf), 1):
    for model, acc in zip(lc_report.MODELS, accs):
      right = round(acc * 10)
      runs[(50, seed, model)] = {
          "test_accuracy": acc, "predictions": [1] * right + [0] * (10 - right),
          "best_step": 10, "dev_accuracy": acc, "steps": 30, "n_train": 50}
  return runs


def test_summary_verdicts_and_table():
  runs = _runs([0.9, 0.8, 0.9], [0.6, 0.5, 0.7], [0.9, 0.7, 0.9])
  (row,) = lc.summarise(runs, [1] * 10, [50], [1, 2, 3])
  assert row["pretrained"]["mean"] == pytest.approx(26 / 30)
  # Pretrained - random: differences 0.3, 0.3, 0.2 -> significant, above.
  assert row["vs_random_init"]["verdict"] == "above"
  assert row["vs_random_init"]["significant"]
  # Pretrained - TF-IDF: 0, 0.1, 0 -> not significant: level.
  assert row["vs_tfidf"]["verdict"] == "level"
  assert row["vs_tfidf"]["mcnemar_only_pretrained"] == 1
  summary = {"test_examples": 10, "seeds": [1, 2, 3], "alpha": 0.05,
             "rows": [row], "pretrained": "ckpt", "pretraining": "what",
             "recipe": {"epochs": 10, "batch_size": 32, "min_steps": 30,
                        "max_steps": 150, "learning_rate": 5e-4,
                        "warmup_proportion": 0.1, "max_seq_length": 64,
                        "evals": 5, "max_dev_examples": 500},
             "cpu": "cpu", "workers": 2, "wall_minutes": 1.0}
  table = lc.markdown(summary)
  line = [l for l in table.splitlines() if l.startswith("| 50 |")][0]
  assert "| 0.833 ± 0.115 | 0.600 ± 0.100 | 0.867 ± 0.058 |" in line
  assert "+0.267 **above**" in line and "+0.033 level" in line


def test_report_leads_with_the_learning_curves(tmp_path):
  from demo import report  # pylint: disable=g-import-not-at-top
  assert report.learning_curve_section(str(tmp_path)) == []
  runs = _runs([0.5, 0.4, 0.5], [0.6, 0.5, 0.6], [0.7, 0.6, 0.7])
  rows = lc.summarise(runs, [1] * 10, [50], [1, 2, 3])
  (tmp_path / "learning_curves.json").write_text(json.dumps(
      {"rows": rows, "pretraining": "20 pretraining steps"}))
  (tmp_path / "learning_curves.md").write_text("| the table |\n")
  lines = report.learning_curve_section(str(tmp_path))
  assert lines[0].startswith("## Does pretraining pay?")
  assert "| the table |" in lines
  text = "\n".join(lines)
  # -0.1 on every seed vs random init, -0.2 vs TF-IDF: below both.
  assert "significantly above at none; level at none; significantly below " \
         "at 50." in text
  assert "Against TF-IDF + LR on the same reviews: above at none; level at " \
         "none; below at 50." in text
  # Below a baseline: the reason and the budget come with it.
  assert "the reason is the budget: the encoder (20 pretraining steps)" in text


def test_plot_draws_the_curves_as_a_png(tmp_path):
  """The learning curves as a PNG (issue 52: reports embed their plots):
  a real PNG of the figure's size, written where asked; none without a
  size row (the all-labels row alone is not a curve)."""
  import struct  # pylint: disable=g-import-not-at-top
  pytest.importorskip("matplotlib")
  rows = []
  for n in (50, 200):
    runs = _runs([0.5, 0.6, 0.7], [0.6, 0.6, 0.6], [0.7, 0.7, 0.8])
    (row,) = lc.summarise(runs, [1] * 10, [50], [1, 2, 3])
    rows.append(dict(row, train_examples=n, n=n))
  path = lc.plot(rows, str(tmp_path / "curves.png"))
  data = (tmp_path / "curves.png").read_bytes()
  assert path == str(tmp_path / "curves.png")
  assert data[:8] == b"\x89PNG\r\n\x1a\n"
  assert struct.unpack(">II", data[16:24]) == (660, 440)  # 6 x 4 in, 110 dpi
  assert lc.plot([dict(rows[0], train_examples=0, n=0)],
                 str(tmp_path / "none.png")) is None
  assert not (tmp_path / "none.png").exists()


def test_pretraining_note_names_the_weights_the_runs_start_from(tmp_path):
  (tmp_path / "albert_config.json").write_text(json.dumps(
      {"hidden_size": 128, "num_hidden_layers": 4, "intermediate_size": 512,
       "embedding_size": 128, "vocab_size": 8000}))
  (tmp_path / "eval_results.json").write_text(json.dumps(
      {"global_step": 3000, "masked_lm_accuracy": 0.0914}))
  assert lc.pretraining_note(str(tmp_path)) == (
      "H128/L4/I512/E128, vocab 8,000, 3000 pretraining steps, held-out MLM "
      "accuracy 0.091")
  # A directory with best/ restores best/, not the last step.
  (tmp_path / "best").mkdir()
  (tmp_path / "best" / "best.json").write_text(json.dumps(
      {"step": 1200, "masked_lm_accuracy": 0.1100}))
  assert lc.pretraining_note(str(tmp_path)).endswith(
      "fine-tuned from its best/ checkpoint, step 1200 (held-out MLM "
      "accuracy 0.110)")
  # A prefix is what it names.
  assert lc.pretraining_note(str(tmp_path / "ckpt-3000")).startswith(
      "fine-tuned from ckpt-3000, H128/L4")
