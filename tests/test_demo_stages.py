"""`make demo` stage bookkeeping: a rerun skips complete stages, never uses a
partial output, and lets pretraining resume in place."""

import json
import os

import pytest

from demo import run_demo


class FakeDemo(run_demo.Demo):
  STAGES = [("corpus", "first"), ("vocab", "second"), ("pretrain", "resumable")]

  def __init__(self, root, fail_in=None):
    super().__init__(root, mode="fast")
    self.fail_in = fail_in
    self.calls = []

  def _stage(self, name, out):
    self.calls.append(name)
    # Seeing a leftover file means a partial output was reused.
    leftover = os.path.exists(os.path.join(out, "part.txt"))
    with open(os.path.join(out, "part.txt"), "a") as f:
      f.write("x")
    if self.fail_in == name:
      raise run_demo.StageError(f"killed in {name}")
    return {"saw_leftover": leftover}

  def stage_corpus(self, out):
    return self._stage("corpus", out)

  def stage_vocab(self, out):
    return self._stage("vocab", out)

  def stage_pretrain(self, out):
    return self._stage("pretrain", out)


def _figures(root, name):
  with open(os.path.join(root, name, run_demo.MARKER)) as f:
    return json.load(f)["figures"]


def test_rerun_skips_done_stages_and_redoes_partial_ones(tmp_path):
  root = str(tmp_path / "demo")
  first = FakeDemo(root, fail_in="vocab")
  with pytest.raises(run_demo.StageError):
    first.run()
  assert first.calls == ["corpus", "vocab"]
  assert os.path.exists(os.path.join(root, "corpus", run_demo.MARKER))
  assert not os.path.exists(os.path.join(root, "vocab", run_demo.MARKER))

  second = FakeDemo(root)
  second.run()
  assert second.calls == ["vocab", "pretrain"]  # corpus was not redone
  assert _figures(root, "vocab") == {"saw_leftover": False}  # partial removed
  assert second.figures["corpus"] == {"saw_leftover": False}  # read from marker


def test_pretraining_output_is_kept_for_resume(tmp_path):
  root = str(tmp_path / "demo")
  with pytest.raises(run_demo.StageError):
    FakeDemo(root, fail_in="pretrain").run()
  FakeDemo(root).run()
  # run_pretraining resumes from its checkpoints, so its folder is not wiped.
  assert _figures(root, "pretrain") == {"saw_leftover": True}
