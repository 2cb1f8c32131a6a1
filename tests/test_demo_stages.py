"""`make demo` stage bookkeeping: a rerun skips complete stages, never uses a
partial output, and lets pretraining resume in place."""

import json
import os
import re

import pytest

from benchmarks import commands
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


def test_side_by_side_labels_lines_and_stops_the_others_on_failure(
    tmp_path, monkeypatch, capsys):
  """A run that fails ends its stage at once: the run beside it (here one
  that would sleep 10 minutes) is terminated, and the failure raised names
  the failing command. Each console line says which run printed it."""
  procs = []
  start = commands._start

  def recording_start(cmd, env):
    proc = start(cmd, env)
    procs.append((cmd, proc))
    return proc

  monkeypatch.setattr(commands, "_start", recording_start)
  with pytest.raises(run_demo.StageError, match="no_such_module_here"):
    commands.run_side_by_side(
        ("timeit", ["-n", "1", "-r", "1", "import time; time.sleep(600)"],
         str(tmp_path / "sleeper.log")),
        ("no_such_module_here", [f"--output_dir={tmp_path / 'broken'}"],
         str(tmp_path / "broken.log")))
  sleeper = next(proc for cmd, proc in procs if "timeit" in cmd)
  assert sleeper.returncode is not None and sleeper.returncode < 0
  out = capsys.readouterr().out
  assert "[timeit] $ -m timeit" in out
  assert re.search(r"\[broken\] \S*python\S*: No module named no_such", out)


@pytest.mark.parametrize("line, shown", [
    ("WARNING:__main__:No semi_persistent_directory found:  User registered "
     "objects may not be effective\n", False),
    ("WARNING:apache_beam.options.pipeline_options:Discarding unparseable "
     "args: ['--direct_runner_use_stacked_bundle']\n", False),
    ("I1204 03:21:34.762231 139696 squad.py:438] 1449 questions cut\n", False),
    ("step 20/40 (50%) loss 4.0039, 8.2 examples/s, ETA 0:01:18\n", True),
    ("error: --train_file=x.json: not SQuAD JSON\n", True),
])
def test_console_shows_progress_and_errors_not_library_chatter(line, shown):
  assert commands._worth_showing(line) == shown


def test_hour_mode_runs_the_budgeted_recipe(tmp_path, monkeypatch):
  """`make pretrain-hour`: a vocabulary of characters, 10 masks of each
  text, pretraining on configs/pretrain_cpu_hour.flags with a 60-minute
  budget, then only the curves and the report."""
  commands = []
  monkeypatch.setattr(run_demo, "run_module",
                      lambda module, *args, **kw: commands.append(
                          (module, list(args))))
  demo = run_demo.Demo(str(tmp_path / "hour"), mode="hour")
  os.makedirs(demo.path("vocab"))
  with open(demo.path("vocab", "spm.vocab"), "w", encoding="utf-8") as f:
    f.write("<pad>\t0\n<unk>\t0\n")
  assert demo.stage_vocab(demo.path("vocab")) == {"vocab_size": 2}
  module, args = commands[-1]
  assert module == "data_prep.train_vocab"
  assert "--max_piece_length=1" in args and "--nohard_vocab_limit" in args
  args = demo._pretrain_args(demo.path("pretrain"))  # pylint: disable=protected-access
  assert args[0] == "--flagfile=configs/pretrain_cpu_hour.flags"
  assert "--train_budget_minutes=60" in args
  assert "--noeval_every_checkpoint" not in args
  assert run_demo.MODE_STAGES["hour"] == (
      "corpus", "vocab", "tfrecords", "pretrain", "eval", "curves", "report")
  assert run_demo.BUDGETS["hour"]["dupe_factor"] == 10
  # `make demo`: the same recipe on a 10-minute budget; FAST and the
  # tests' smoke mode keep their step counts and piece lengths.
  full = run_demo.Demo(str(tmp_path / "full"), mode="full")
  args = full._pretrain_args(full.path("pretrain"))  # pylint: disable=protected-access
  assert args[0] == "--flagfile=configs/pretrain_cpu_hour.flags"
  assert "--train_budget_minutes=10" in args
  assert (run_demo.BUDGETS["full"]["max_piece_length"],
          run_demo.BUDGETS["full"]["dupe_factor"]) == (1, 10)
  for mode in ("fast", "smoke"):
    other = run_demo.Demo(str(tmp_path / mode), mode=mode)
    args = other._pretrain_args(other.path("pretrain"))  # pylint: disable=protected-access
    assert args[0] == "--flagfile=configs/pretrain_albert_tiny_zh_demo.flags"
    assert not any(a.startswith("--train_budget_minutes") for a in args)
    assert run_demo.BUDGETS[mode]["max_piece_length"] == 16
