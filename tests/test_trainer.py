"""The one trainer, seen through run_classifier and run_pretraining.

Fine-tuning now runs on the trainer pretraining already used, so it must
survive the same faults and run under the same strategies: SIGKILL then
resume, mirrored and multi-worker equal to the default strategy, TensorBoard
events readable by tensorboard itself, and an output_dir that refuses a
rerun with other settings without touching a byte.
"""

import json
import os
import pathlib
import signal
import socket
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import run_classifier
from albert_tf import run_pretraining as rp
from albert_tf.core.config import AlbertConfig
from tests import cli_runner
from tests.pretraining_fixtures import tiny_argv

REPO = pathlib.Path(__file__).resolve().parents[1]
CHARS = "好差很不是的电影书手机质量服务一般"


def _env(**extra):
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


def _jsonl(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _rows(n, seed):
  """label 1 iff the review contains 好."""
  rng = np.random.default_rng(seed)
  rows = []
  for i in range(n):
    words = list(rng.choice(list(CHARS[2:]), size=rng.integers(3, 8)))
    words.insert(int(rng.integers(0, len(words))), "好" if i % 2 else "差")
    rows.append(f"{i % 2}\t{''.join(words)}")
  return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("trainer")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  for name, heads, init in (("config.json", 2, 0.2),
                            ("config_8_heads.json", 8, 0.2),
                            ("config_small_init.json", 2, 0.02)):
    AlbertConfig(vocab_size=len(vocab), embedding_size=8, hidden_size=16,
                 num_hidden_layers=2, num_attention_heads=heads,
                 intermediate_size=32, max_position_embeddings=32,
                 initializer_range=init).to_json_file(root / name)
  for split, n, seed in (("train", 64, 0), ("dev", 32, 1), ("test", 16, 2)):
    (root / f"{split}.tsv").write_text(
        "\n".join(_rows(n, seed)) + "\n", encoding="utf-8")
  return root


def _argv(data, output_dir, *extra):
  return ["--task_name=sentiment", f"--data_dir={data}",
          f"--output_dir={output_dir}", f"--vocab_file={data / 'vocab.txt'}",
          f"--albert_config_file={data / 'config.json'}",
          "--max_seq_length=16", "--train_batch_size=8", "--eval_batch_size=16",
          "--learning_rate=0.003", "--warmup_step=1", "--classifier_dropout=0",
          "--seed=3", "--do_train", "--do_eval", *extra]


def _cli(argv):
  # Forked from the test zygote (tests/cli_runner.py), at its log level.
  return cli_runner.run_module(["albert_tf.run_classifier", *argv], cwd=REPO,
                               env=_env(), timeout=300)


def _start(argv, code=None, **env):
  """The command started, not waited for: a Popen-like handle."""
  return cli_runner.start_module(
      argv if code else ["albert_tf.run_classifier", *argv], cwd=REPO,
      env=_env(**env), code=code)


# ------------------------------------------------------------ kill + resume
_KILL_RUN = ["--train_step=240", "--eval_every_steps=40",
             "--iterations_per_loop=1", "--log_every_steps=20"]


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
  """The reference of the kill and SIGTERM tests: the same run, unbroken."""
  clean = tmp_path_factory.mktemp("clean")
  proc = _cli(_argv(data, clean, *_KILL_RUN))
  assert proc.returncode == 0, proc.stderr[-3000:]
  return clean


@pytest.mark.slow
@pytest.mark.parametrize("sent, code", [(signal.SIGTERM, 143),
                                        (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_classifier_sigterm_saves_the_step_and_resumes(data, tmp_path,
                                                       uninterrupted, sent,
                                                       code):
  """A SIGTERM (a scheduler) or a Ctrl-C (SIGINT) saves the step, prints
  one line and exits with the signal's code; the same command resumes."""
  argv = _argv(data, tmp_path, *_KILL_RUN)
  proc = _start(argv)
  deadline = time.time() + 120
  log_file = tmp_path / "train_log.jsonl"
  # Past the first checkpoint (40) and its eval: mid-interval.
  while not (log_file.exists() and any(r["step"] > 40
                                       for r in _jsonl(log_file))):
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline, "no step past 40 within 120 s"
    time.sleep(0.01)
  proc.send_signal(sent)
  stderr = proc.communicate(timeout=60)[1]
  assert proc.returncode == code, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  errors = [l for l in stderr.splitlines() if l.startswith("error: ")]
  assert len(errors) == 1 and (
      f"stopped by {sent.name} at step " in errors[0]), errors
  saved_step = int(errors[0].split("at step ")[1].split()[0])
  assert 40 < saved_step < 240
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith(
      f"ckpt-{saved_step}")

  proc = _cli(argv)
  assert proc.returncode == 0, proc.stderr[-3000:]
  log = _jsonl(log_file)
  ref_log = {r["step"]: r for r in _jsonl(uninterrupted / "train_log.jsonl")}
  assert [r["step"] for r in log] == sorted(ref_log)  # no step logged twice
  # Each logged loss is the mean over the steps since the last log line;
  # the first one after the resume covers only the steps after saved_step.
  boundary = -(-saved_step // 20) * 20
  for r in log:
    np.testing.assert_allclose(r["learning_rate"],
                               ref_log[r["step"]]["learning_rate"], rtol=1e-6)
    if not saved_step < r["step"] <= boundary:
      np.testing.assert_allclose(r["loss"], ref_log[r["step"]]["loss"],
                                 rtol=1e-4, atol=1e-4 * max(
                                     v["loss"] for v in ref_log.values()))
  ref = json.loads((uninterrupted / "eval_results.json").read_text())
  got = json.loads((tmp_path / "eval_results.json").read_text())
  assert (got["best_step"], got["accuracy"]) == (ref["best_step"],
                                                      ref["accuracy"])
  steps = lambda d: [r["global_step"] for r in _jsonl(d / "eval_log.jsonl")]
  assert steps(tmp_path) == steps(uninterrupted) == list(range(0, 241, 40))


@pytest.mark.slow
def test_classifier_sigkill_then_resume_matches_uninterrupted(data, tmp_path,
                                                              uninterrupted):
  common = _KILL_RUN
  clean = uninterrupted

  killed = tmp_path / "killed"
  argv = _argv(data, killed, *common)
  proc = _start(argv)
  deadline = time.time() + 120
  while not (killed / "checkpoint").exists():
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    assert time.time() < deadline, "no checkpoint within 120 s"
    time.sleep(0.01)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  saved_step = int(tf.train.load_checkpoint(str(killed)).get_tensor(
      "step/.ATTRIBUTES/VARIABLE_VALUE"))
  assert saved_step % 40 == 0 and 0 < saved_step < 240, saved_step

  proc = _cli(argv)
  assert proc.returncode == 0, proc.stderr[-3000:]
  log = _jsonl(killed / "train_log.jsonl")
  first_after = [r for r in log if r["step"] > saved_step]
  assert first_after[0]["step"] == saved_step + 20  # continued, not restarted
  ref_log = {r["step"]: r for r in _jsonl(clean / "train_log.jsonl")}
  assert [r["step"] for r in log] == sorted(ref_log)  # no step logged twice
  for r in first_after:  # same batches, same learning rate, same loss
    np.testing.assert_allclose(r["learning_rate"],
                               ref_log[r["step"]]["learning_rate"], rtol=1e-6)
    np.testing.assert_allclose(r["loss"], ref_log[r["step"]]["loss"],
                               rtol=1e-4, atol=1e-4 * max(  # the run's scale
                                   v["loss"] for v in ref_log.values()))
  ref = json.loads((clean / "eval_results.json").read_text())
  got = json.loads((killed / "eval_results.json").read_text())
  assert got["best_step"] == ref["best_step"]
  assert got["accuracy"] == ref["accuracy"]
  assert ref["accuracy"] >= 0.8  # it learnt the task, in both runs
  steps = lambda d: [r["global_step"] for r in _jsonl(d / "eval_log.jsonl")]
  assert steps(killed) == steps(clean) == list(range(0, 241, 40))


# ------------------------------------------------------------ distribution
_MIRRORED = """
import sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from absl import flags
from albert_tf import run_classifier
from albert_tf.core import settings
settings.define_flags(run_classifier.ClassifierOptions)
flags.FLAGS(["run_classifier"] + sys.argv[1:])
run_classifier.main([])
"""


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_classifier_mirrored_and_multi_worker_match_default(data, tmp_path):
  """Losses of the first three steps (step 1 at lr 0, then two updates).

  Gradients are clipped to global norm 1.0 per replica before the
  all-reduce (as Keras does, and as the original's CrossShardOptimizer
  did), so the runs agree only while no replica's gradient is clipped:
  hence the small initialisation and learning rate here.
  """
  common = ["--train_step=3", "--eval_every_steps=3", "--log_every_steps=1",
            "--iterations_per_loop=1", "--nodo_eval",
            f"--albert_config_file={data / 'config_small_init.json'}",
            "--learning_rate=0.001"]
  ports = [_free_port(), _free_port()]
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  # The mirrored run needs two logical CPUs set before TF starts: its own
  # process, as do the workers (they run side by side).
  procs = {"mirrored": _start(
      _argv(data, tmp_path / "mirrored", *common,
            "--distribution_strategy=mirrored"), code=_MIRRORED)}
  for i in range(2):
    tf_config = json.dumps({"cluster": cluster,
                            "task": {"type": "worker", "index": i}})
    procs[f"worker{i}"] = _start(
        _argv(data, tmp_path / "multi_worker", *common,
              "--distribution_strategy=multi_worker_mirrored"),
        TF_CONFIG=tf_config)
  try:
    # The reference, meanwhile: the plain command.
    proc = _cli(_argv(data, tmp_path / "default", *common))
    assert proc.returncode == 0, ("default", proc.stderr[-3000:])
    for name, proc in procs.items():
      _, err = proc.communicate(timeout=300)
      assert proc.returncode == 0, (name, err[-3000:])
  finally:
    for proc in procs.values():
      if proc.poll() is None:
        proc.kill()
  losses = {name: [r["loss"] for r in _jsonl(tmp_path / name /
                                             "train_log.jsonl")]
            for name in ("default", "mirrored", "multi_worker")}
  assert len(losses["default"]) == 3, losses
  assert losses["default"][2] != losses["default"][0]  # the updates happened
  np.testing.assert_allclose(losses["mirrored"], losses["default"], rtol=1e-5)
  np.testing.assert_allclose(losses["multi_worker"], losses["default"],
                             rtol=1e-5)
  assert not (tmp_path / "multi_worker" / ".worker_1").exists()


@pytest.mark.slow
def test_multi_worker_sigterm_to_one_worker_saves_on_both(data, tmp_path):
  """A preemption notice reaches one worker: the workers agree on it, both
  save the same step and stop; the same commands then finish the run."""
  out = tmp_path / "multi_worker"
  # 40 steps: the workers stop one step after the signal (measured: at step
  # 3), and a multi-worker step costs about 0.3 s; 200 steps spent a minute
  # on the resumed run alone.
  argv = _argv(data, out, "--train_step=40", "--eval_every_steps=10",
               "--log_every_steps=1", "--iterations_per_loop=1",
               "--nodo_eval", "--distribution_strategy=multi_worker_mirrored")
  cluster = {"worker": [f"127.0.0.1:{_free_port()}" for _ in range(2)]}

  def start():
    return [_start(argv, TF_CONFIG=json.dumps({"cluster": cluster, "task": {
        "type": "worker", "index": i}})) for i in range(2)]

  procs = start()
  try:
    deadline = time.time() + 180
    log = out / "train_log.jsonl"
    while not (log.exists() and any(r["step"] >= 2 for r in _jsonl(log))):
      assert all(p.poll() is None for p in procs), procs[0].output()[1][
          -3000:]
      assert time.time() < deadline, "no step 2 within 180 s"
      time.sleep(0.01)
    procs[1].send_signal(signal.SIGTERM)  # the non-chief worker only
    errors = []
    for proc in procs:
      stderr = proc.communicate(timeout=120)[1]
      assert proc.returncode == 143, stderr[-3000:]
      errors += [l for l in stderr.splitlines() if l.startswith("error: ")]
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  steps = {int(e.split("at step ")[1].split()[0]) for e in errors}
  assert len(errors) == 2 and len(steps) == 1, errors
  saved_step = steps.pop()
  assert 2 <= saved_step < 40
  assert "stopped by SIGTERM at step" in errors[0] + errors[1]
  assert "SIGTERM (on another worker)" in errors[0] + errors[1]
  assert tf.train.latest_checkpoint(str(out)).endswith(f"ckpt-{saved_step}")

  procs = start()
  try:
    for proc in procs:
      stderr = proc.communicate(timeout=300)[1]
      assert proc.returncode == 0, stderr[-3000:]
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  assert [r["step"] for r in _jsonl(out / "train_log.jsonl")] == list(
      range(1, 41))  # every step once: none trained twice
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-40")
  assert not (out / ".worker_1").exists()


# ------------------------------------------------------------ TensorBoard
def _scalars(event_dir):
  """{tag: [(step, value)]} read back with tensorboard's own reader."""
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  acc = event_accumulator.EventAccumulator(
      str(event_dir), size_guidance={event_accumulator.TENSORS: 0})
  acc.Reload()
  return {tag: [(e.step, float(tf.make_ndarray(e.tensor_proto)))
                for e in acc.Tensors(tag)] for tag in acc.Tags()["tensors"]}


@pytest.mark.slow
def test_tensorboard_events_from_both_clis(data, tmp_path):
  run_classifier.run(**{
      "task_name": "sentiment", "data_dir": str(data),
      "output_dir": str(tmp_path / "clf"),
      "vocab_file": str(data / "vocab.txt"),
      "albert_config_file": str(data / "config.json"), "max_seq_length": 16,
      "train_batch_size": 8, "learning_rate": 0.01, "train_step": 8,
      "eval_every_steps": 4, "log_every_steps": 2, "classifier_dropout": 0.0,
      "do_train": True, "do_eval": True})
  train = _scalars(tmp_path / "clf" / "train")
  assert [s for s, _ in train["loss"]] == [2, 4, 6, 8]
  assert all(np.isfinite(v) for _, v in train["loss"])
  assert [s for s, _ in train["learning_rate"]] == [2, 4, 6, 8]
  assert train["learning_rate"][0][1] > train["learning_rate"][-1][1] > 0
  assert "accuracy" in train
  dev = _scalars(tmp_path / "clf" / "eval")
  log = _jsonl(tmp_path / "clf" / "eval_log.jsonl")
  assert dev["accuracy"] == [(r["global_step"], pytest.approx(r["accuracy"]))
                             for r in log]
  assert [s for s, _ in dev["accuracy"]] == [0, 4, 8]

  (tmp_path / "pre").mkdir()
  rp.run(rp.params_from_argv(tiny_argv(tmp_path / "pre", "--do_eval",
                                       "--eval_every_checkpoint")))
  train = _scalars(tmp_path / "pre" / "out" / "train")
  assert {"loss", "learning_rate", "masked_lm_accuracy"} <= set(train)
  assert [s for s, _ in train["loss"]] == [3, 6]
  dev = _scalars(tmp_path / "pre" / "out" / "eval")
  assert [s for s, _ in dev["masked_lm_accuracy"]] == [0, 3, 6]


# ------------------------------------------------------------ fingerprint
def _snapshot(directory):
  return {str(p.relative_to(directory)): p.read_bytes()
          for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_rerun_with_other_config_stops_and_changes_nothing(data, tmp_path):
  out = tmp_path / "out"
  argv = _argv(data, out, "--train_step=2", "--eval_every_steps=2")
  assert _cli(argv).returncode == 0
  before = _snapshot(out)
  other = [a.replace("config.json", "config_8_heads.json") for a in argv]
  proc = _cli(other)
  assert proc.returncode != 0
  message = [l for l in proc.stderr.splitlines() if "num_attention_heads" in l]
  assert len(message) == 1, proc.stderr[-2000:]
  assert "albert_config.num_attention_heads 2 there vs 8 now" in message[0]
  assert "--overwrite" in message[0]
  assert _snapshot(out) == before  # not a byte changed

  # Another optimizer is refused the same way; --overwrite starts over.
  proc = _cli(argv + ["--learning_rate=0.02"])
  assert proc.returncode != 0 and "optimizer.learning_rate" in proc.stderr
  assert _snapshot(out) == before
  proc = _cli(other + ["--overwrite"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  saved = json.loads((out / "run_fingerprint.json").read_text())
  assert saved["albert_config"]["num_attention_heads"] == 8


# ------------------------------------------------------------ best checkpoint
def test_step_0_is_never_the_best_checkpoint(data, tmp_path, caplog):
  """A run whose dev metric never rises above step 0's (learning rate
  1e-12, as 0 is refused: every eval ties with step 0) keeps its first
  trained eval, not the untrained head, and still says that it never beat
  step 0."""
  import logging  # pylint: disable=g-import-not-at-top
  from albert_tf.training import checkpoints  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out"
  options = dict(task_name="sentiment", data_dir=str(data),
                 output_dir=str(out), vocab_file=str(data / "vocab.txt"),
                 albert_config_file=str(data / "config.json"),
                 max_seq_length=16, train_batch_size=8, eval_batch_size=16,
                 classifier_dropout=0.0, train_step=6, eval_every_steps=3,
                 iterations_per_loop=1, do_train=True, do_eval=True, seed=3)
  with caplog.at_level(logging.WARNING, logger="absl"):
    result = run_classifier.run(**options, learning_rate=1e-12)
  evals = _jsonl(out / "eval_log.jsonl")
  assert [e["global_step"] for e in evals] == [0, 3, 6]
  assert len({e["accuracy"] for e in evals}) == 1  # a three-way tie
  assert result["best_step"] == 3 and result["never_beat_step_0"]
  assert json.loads((out / "best" / "best.json").read_text())["step"] == 3
  assert checkpoints.latest_checkpoint(str(out)).endswith("best/ckpt-3")
  assert [r.getMessage() for r in caplog.records].count(
      checkpoints.NEVER_BEAT_STEP_0 % out) == 1
  # Resumed with more steps: step 0 (read back from eval_log.jsonl) is
  # still compared, and still never kept.
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="absl"):
    result = run_classifier.run(**(options | {"train_step": 9}),
                                learning_rate=1e-12)
  assert result["best_step"] == 3 and result["never_beat_step_0"]


def test_a_run_stopped_at_its_last_checkpoint_evaluates_it_when_rerun(
    data, tmp_path, monkeypatch):
  """A run stopped at its last step after the checkpoint was saved and
  before its eval (the trial's SIGTERM at step 400 of 400), run again,
  printed 'Nothing to train' and kept the best and the results of the
  step before. Now the rerun evaluates the last checkpoint and ends as the
  same run unbroken does: eval log, best checkpoint, eval_results.json and
  test predictions."""
  from albert_tf.core import errors  # pylint: disable=g-import-not-at-top
  from albert_tf.training import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  options = dict(task_name="sentiment", data_dir=str(data),
                 vocab_file=str(data / "vocab.txt"),
                 albert_config_file=str(data / "config.json"),
                 max_seq_length=16, train_batch_size=8, eval_batch_size=16,
                 classifier_dropout=0.0, train_step=6, eval_every_steps=3,
                 iterations_per_loop=1, do_train=True, do_eval=True,
                 do_predict=True, learning_rate=0.001, warmup_step=1, seed=3,
                 baseline=False)
  clean, stopped = tmp_path / "clean", tmp_path / "stopped"
  run_classifier.run(**options, output_dir=str(clean))

  evaluate = trainer_lib.Trainer.evaluate

  def stop_at_the_last_eval(self):
    if self.step == 6:
      raise errors.Interrupted("stopped by SIGTERM at step 6 of 6")
    return evaluate(self)

  monkeypatch.setattr(trainer_lib.Trainer, "evaluate", stop_at_the_last_eval)
  with pytest.raises(errors.Interrupted):
    run_classifier.run(**options, output_dir=str(stopped))
  monkeypatch.setattr(trainer_lib.Trainer, "evaluate", evaluate)
  assert (stopped / "ckpt-6.index").exists()
  assert [e["global_step"] for e in _jsonl(stopped / "eval_log.jsonl")] == [
      0, 3]
  run_classifier.run(**options, output_dir=str(stopped))
  assert [e["global_step"] for e in _jsonl(stopped / "eval_log.jsonl")] == [
      0, 3, 6]
  read = lambda out, name: json.loads((out / name).read_text())
  timeless = lambda results: {k: v for k, v in results.items()
                              if not k.endswith(("_s", "_wall_s"))}
  # Step 6 is the best (accuracy 0.656 against 0.5 at step 3), as unbroken.
  assert read(stopped, "best/best.json")["step"] == 6
  assert read(stopped, "best/best.json") == read(clean, "best/best.json")
  assert timeless(read(stopped, "eval_results.json")) == timeless(
      read(clean, "eval_results.json"))
  assert (stopped / "test_results.tsv").read_text() == (
      clean / "test_results.tsv").read_text()
