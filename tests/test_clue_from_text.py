"""docs/clue.md, "From the task's own text": the commands as written.

A BUSTM folder in FewCLUE's layout (train_0.json, dev_0.json,
test_public.json, test.json, unlabeled.json; sentence1, sentence2, label
"0"/"1", ids) is written at FewCLUE/datasets/bustm under a temporary
folder; the section's commands run there in order, with small step counts
appended (absl keeps the last value). Checked: the text file holds the
train and unlabeled sentences and no dev or test one, the vocabulary has
one piece per character of that text at most (plus the 5 special pieces),
both fine-tunings write eval_results.json with the baselines and the
submission file with test.json's ids.
"""

import json
import os
import random
import shlex

import pytest

from tests import cli_runner
from tests import test_demo_chain

pytestmark = pytest.mark.slow  # a chain of seven commands, Beam included

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "### From the task's own text"
OVERRIDES = {
    "data_prep.create_pretraining_data": ["--dupe_factor=2",
                                          "--num_shards=1"],
    "albert_tf.run_pretraining": [
        "--train_budget_minutes=0", "--num_train_steps=2",
        "--num_warmup_steps=1", "--save_checkpoints_steps=2",
        "--iterations_per_loop=1", "--log_steps=1"],
    "albert_tf.finetune": ["--train_step=2", "--eval_every_steps=2",
                           "--max_seq_length=32"],
}
WORDS = ["今天", "天气", "很好", "我们", "去", "公园", "明天", "下雨", "北京",
         "上海", "吃饭", "了吗", "你", "在", "哪里", "工作", "学习", "电影"]
SUBMIT_IDS = [9, 2, 14, 0, 5, 30]


def section_commands():
  with open(os.path.join(ROOT, "docs", "clue.md"), encoding="utf-8") as f:
    text = f.read()
  start = text.index(SECTION)
  end = text.index("\n### ", start + len(SECTION))
  return test_demo_chain.shell_commands(text[start:end])


def _sentence(rng, tag):
  return "".join(rng.choice(WORDS) for _ in range(rng.randint(3, 6))) + tag


def _bustm(folder):
  """FewCLUE's BUSTM layout; dev and test texts end in characters of
  their own (丙, 丁), so the text file shows whether they were read."""
  rng = random.Random(0)
  folder.mkdir(parents=True)

  def write(name, rows):
    (folder / name).write_text("".join(
        json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                               encoding="utf-8")

  def pairs(n, tag, labelled=True, ids=None):
    return [dict({"id": i, "sentence1": _sentence(rng, tag),
                  "sentence2": _sentence(rng, tag)},
                 **({"label": str(rng.randint(0, 1))} if labelled else {}))
            for i in (ids or range(n))]

  write("train_0.json", pairs(32, "。"))
  write("dev_0.json", pairs(16, "丙"))
  write("test_public.json", pairs(16, "丁"))
  write("test.json", pairs(0, "丁", labelled=False, ids=SUBMIT_IDS))
  write("unlabeled.json", [{"id": i, "sentence1": _sentence(rng, "！"),
                            "sentence2": _sentence(rng, "？")}
                           for i in range(48)])


def test_the_documented_commands_run_as_written(tmp_path):
  commands = section_commands()
  modules = [shlex.split(c)[2] for c in commands]
  assert modules == ["data_prep.task_text", "data_prep.train_vocab",
                     "albert_tf.finetune", "data_prep.create_pretraining_data",
                     "albert_tf.run_pretraining", "albert_tf.finetune"]
  _bustm(tmp_path / "FewCLUE" / "datasets" / "bustm")
  os.symlink(os.path.join(ROOT, "configs"), tmp_path / "configs")
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  printed = []
  for command, module in zip(commands, modules):
    proc = cli_runner.run_module(
        shlex.split(command)[2:] + OVERRIDES.get(module, []), cwd=tmp_path,
        env=env, timeout=900)
    assert proc.returncode == 0, (command, proc.stderr[-3000:])
    printed.append(proc.stdout)

  # The text: train and unlabeled sentences, no dev or test one.
  text = (tmp_path / "out" / "bustm" / "text.txt").read_text(encoding="utf-8")
  assert "丙" not in text and "丁" not in text
  assert "！" in text and "？" in text and "。" in text
  stats = json.loads(printed[0].splitlines()[0])
  assert stats["train"] == {"examples": 32}
  assert stats["unlabeled.json"] == {"lines": 48}
  assert stats["documents"] == 32 + 48
  assert f"holds at most {stats['characters'] + 6} pieces" in printed[0]
  # The vocabulary: the 5 special pieces, the word start, then single
  # characters, no more than the text's (normalised: ！ is read as !).
  pieces = [l.split("\t")[0] for l in (
      tmp_path / "out" / "bustm" / "vocab" / "spm.vocab").read_text(
          encoding="utf-8").splitlines()]
  assert pieces[:6] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁"]
  assert all(len(p) == 1 for p in pieces[6:]), pieces
  assert {"!", "?", "。"} <= set(pieces)
  assert stats["characters"] - 3 <= len(pieces) - 6 <= stats["characters"]

  for name in ("bustm_0", "bustm_0_pretrained"):
    out = tmp_path / "out" / name
    results = json.loads((out / "eval_results.json").read_text())
    assert 0 <= results["accuracy"] <= 1
    assert "baseline_tfidf_accuracy" in results, sorted(results)
    submission = [json.loads(l) for l in (
        out / "bustm_predict_0.json").read_text().splitlines()]
    assert [s["id"] for s in submission] == SUBMIT_IDS
    assert {s["label"] for s in submission} <= {"0", "1"}
