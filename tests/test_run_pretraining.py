"""Tests for albert_tf.run_pretraining: flags, training, resume, kill, distribution."""

import json
import os
import pathlib
import signal
import socket
import textwrap
import time
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from albert_tf.data import pretraining_dataset
from albert_tf.data import record_checks
from albert_tf import run_pretraining as rp
from albert_tf.training import optimization
from albert_tf.training import runtime
from albert_tf.core.config import AlbertConfig
from albert_tf.tasks.pretraining import PretrainingTask
from albert_tf.training.trainer import Trainer, segments
from tests import cli_runner
from tests.pretraining_fixtures import tiny_argv, write_records

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("pretrain_*.flags"))


def _log(out_dir, name="train_log.jsonl"):
  with open(os.path.join(out_dir, name), encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


def _numpy_eval(checkpoint_dir, record_file, num_records):
  """Eval figures of a file's first `num_records` records, in one batch.

  Computed in NumPy from the restored model's logits: the reference for the
  eval loop's batching and weighting (a dropped, padded or double-counted
  record moves them).
  """
  from albert_tf.modeling.models import PRETRAINER_INPUTS, AlbertPretrainer
  from albert_tf.training import checkpoints
  batch = next(iter(tf.data.TFRecordDataset(record_file).take(
      num_records).batch(num_records)))
  batch = {k: v.numpy() for k, v in pretraining_dataset.decode_record(
      batch, 16, 4).items()}
  assert len(batch["input_ids"]) == num_records
  model = AlbertPretrainer(AlbertConfig.from_json_file(
      os.path.join(checkpoint_dir, "albert_config.json")))
  inputs = {k: batch[k] for k in PRETRAINER_INPUTS}
  model(inputs)  # built, so that every part is restored
  checkpoints.restore_weights(checkpoint_dir, model)
  out = model(inputs)
  logits = out["mlm_logits"].numpy().astype(np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
  ids, w = batch["masked_lm_ids"], batch["masked_lm_weights"]
  nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
  labels = batch["next_sentence_labels"].reshape(-1)
  return {"masked_lm_loss": (nll * w).sum() / w.sum(),
          "masked_lm_accuracy": ((logits.argmax(-1) == ids) * w).sum()
                                / w.sum(),
          "sentence_order_accuracy": np.mean(
              out["sop_logits"].numpy().argmax(-1) == labels)}


def _env():
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  env.pop("TF_CONFIG", None)
  return env


def _start(argv, code=None, env=None):
  """`python -m albert_tf.run_pretraining argv` (or `python -c code argv`)
  started, not waited for: forked from the test zygote (tests/cli_runner)."""
  return cli_runner.start_module(
      argv if code else ["albert_tf.run_pretraining", *argv], cwd=REPO,
      env=env or _env(), code=code)


# ------------------------------------------------------------ flags
def test_flag_defaults_are_the_originals():
  p = rp.params_from_argv(["--preset=albert_base_v2"])
  assert (p.train_batch_size, p.eval_batch_size) == (4096, 64)
  assert (p.max_seq_length, p.max_predictions_per_seq) == (512, 20)
  assert (p.optimizer, p.learning_rate, p.poly_power) == ("lamb", 0.00176, 1.0)
  assert (p.num_train_steps, p.num_warmup_steps) == (125000, 3125)
  assert (p.save_checkpoints_steps, p.keep_checkpoint_max) == (5000, 5)
  assert (p.iterations_per_loop, p.max_eval_steps) == (1000, 100)
  assert p.do_train and not p.do_eval  # the original's do_train=True
  assert p.distribution_strategy == "default"
  # Not the original's float32 everywhere: bfloat16 where the hardware has
  # bf16 units (runtime.auto_precision; tests/test_pretraining_speed.py).
  assert p.mixed_precision == "auto" and p.length_buckets == 0


def test_flagfile_and_command_line_override(tmp_path):
  flagfile = tmp_path / "x.flags"
  flagfile.write_text("# comment\n--preset=albert_tiny_zh\n--do_train\n"
                      "--train_batch_size=32\n--optimizer=adamw\n")
  p = rp.params_from_argv([f"--flagfile={flagfile}", "--train_batch_size=64"])
  assert p.preset == "albert_tiny_zh" and p.do_train
  assert p.optimizer == "adamw" and p.train_batch_size == 64
  with pytest.raises(flags.IllegalFlagValueError,
                     match=r"^flag --distribution_strategy=horovod: value "
                     r"should be one of <default\|one_device\|mirrored\|"
                     r"multi_worker_mirrored\|tpu>$"):
    rp.params_from_argv(["--distribution_strategy=horovod"])


@pytest.mark.parametrize("path", CONFIGS, ids=[c.name for c in CONFIGS])
def test_shipped_flagfiles_parse(path):
  p = rp.params_from_argv([f"--flagfile={path}"])
  assert p.do_train and p.output_dir and p.input_file
  assert p.num_train_steps % p.save_checkpoints_steps == 0
  assert p.save_checkpoints_steps % p.iterations_per_loop == 0
  assert p.preset or p.albert_config_file


def test_bad_params_are_named(tmp_path):
  with pytest.raises(ValueError, match="do_train or --do_eval"):
    rp.run(rp.params_from_argv(["--preset=albert_base_v2", "--nodo_train",
                                f"--output_dir={tmp_path}"]))
  with pytest.raises(ValueError, match="--do_train needs --input_file"):
    rp.run(rp.params_from_argv(["--preset=albert_base_v2",
                                f"--output_dir={tmp_path}"]))
  argv = tiny_argv(tmp_path, "--max_seq_length=32")
  with pytest.raises(record_checks.InputFileError,
                     match=r"part-0\.tfrecord.*--max_seq_length=32"):
    rp.run(rp.params_from_argv(argv))


def test_corrupt_record_during_training_names_the_file(tmp_path):
  bad = write_records(tmp_path / "bad.tfrecord", 8)
  data = bytearray(open(bad, "rb").read())
  data[len(data) // 2] ^= 0xFF
  open(bad, "wb").write(bytes(data))
  ds = pretraining_dataset.make_dataset([bad], 2, 16, 4, is_training=False)
  with pytest.raises(record_checks.InputFileError,
                     match=r"bad\.tfrecord: corrupted record.*skip_corrupt"):
    PretrainingTask([bad], [], 16, 4).guard_input_errors(lambda: list(ds))


def test_segments_cut_at_checkpoints():
  seg = segments
  assert seg(0, 12, 4) == [[4, 3]]
  assert seg(0, 10, 4) == [[4, 2], [2, 1]]
  assert seg(6, 10, 4) == [[2, 1], [2, 1]]
  assert seg(10, 10, 4) == []


# ------------------------------------------------------------ training
@pytest.mark.slow
def test_train_eval_resume_and_init_checkpoint(tmp_path):
  argv = tiny_argv(tmp_path, "--do_eval")
  out = tmp_path / "out"
  results = rp.run(rp.params_from_argv(argv))
  assert results["global_step"] == 6
  names = set(os.listdir(out))
  assert {"albert_config.json", "checkpoint", "eval_results.json",
          "eval_results.txt", "train_log.jsonl", "train", "eval"} <= names
  assert tf.train.latest_checkpoint(str(out)).endswith("ckpt-6")
  saved = json.load(open(out / "eval_results.json"))
  # The figures and, beside them, what each is measured against (issue 49).
  assert set(saved) == {"masked_lm_accuracy", "masked_lm_loss",
                        "sentence_order_accuracy", "sentence_order_loss",
                        "global_step", "masked_lm_accuracy_baseline",
                        "masked_lm_loss_baseline",
                        "sentence_order_accuracy_baseline"}
  assert "global_step = 6" in (out / "eval_results.txt").read_text()
  log = _log(out)
  assert [r["step"] for r in log] == [3, 6]  # log_steps=1 -> every call of 3
  assert all(np.isfinite(r["loss"]) and r["examples_per_second"] > 0
             for r in log)
  assert os.listdir(out / "train")  # TensorBoard events
  reader = tf.train.load_checkpoint(str(out / "ckpt-6"))
  keys = reader.get_variable_to_shape_map()
  for part in ("encoder", "masked_lm_head", "sentence_order_head",
               "optimizer", "step"):
    assert any(k.startswith(part + "/") for k in keys), part
  assert reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE") == 6

  # Same command, more steps: resumes at 6 with the schedule's learning rate.
  resumed = rp.run(rp.params_from_argv(argv + ["--num_train_steps=9"]))
  assert resumed["global_step"] == 9
  last = _log(out)[-1]
  assert last["step"] == 9
  schedule = optimization.WarmupPolynomialDecay(0.01, 9, 2)
  np.testing.assert_allclose(last["learning_rate"], float(schedule(8)),
                             rtol=1e-6)

  # --init_checkpoint: weights only (step 0); same weights -> same eval.
  p = rp.params_from_argv(argv + [f"--init_checkpoint={out}",
                                  f"--output_dir={tmp_path / 'init'}",
                                  "--nodo_train"])
  evaluated = rp.run(p)
  assert evaluated["global_step"] == 0
  np.testing.assert_allclose(evaluated["masked_lm_loss"],
                             resumed["masked_lm_loss"], rtol=1e-5)


def test_eval_set_smaller_than_one_batch(tmp_path):
  """5 held-out records and --eval_batch_size=8: evaluated, not dropped."""
  write_records(tmp_path / "heldout.tfrecord", 5, seed=9)
  argv = tiny_argv(tmp_path, "--do_eval", "--num_train_steps=3",
                   f"--eval_input_file={tmp_path / 'heldout.tfrecord'}")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    results = rp.run(rp.params_from_argv(argv))
  assert results["global_step"] == 3
  # The eval set ends by design: Keras's "ran out of data" is not shown.
  assert not [w for w in caught if "ran out of data" in str(w.message)]
  # The 5 records in one batch of 5, scored in NumPy from the final weights.
  expected = _numpy_eval(str(tmp_path / "out"),
                         str(tmp_path / "heldout.tfrecord"), 5)
  for key, value in expected.items():
    np.testing.assert_allclose(results[key], value, rtol=1e-5, err_msg=key)


def test_eval_only_evaluates_the_files_it_is_given(tmp_path):
  """An eval-only command over a run whose log holds an eval of the same
  step (on other held-out files) scores the files given, not the log's."""
  write_records(tmp_path / "a.tfrecord", 16, seed=7)
  write_records(tmp_path / "b.tfrecord", 16, seed=8)
  argv = tiny_argv(tmp_path, "--num_train_steps=3", "--do_eval",
                   "--eval_every_checkpoint",
                   f"--eval_input_file={tmp_path / 'a.tfrecord'}")
  on_a = rp.run(rp.params_from_argv(argv))
  on_b = rp.run(rp.params_from_argv(argv + [
      "--nodo_train", f"--eval_input_file={tmp_path / 'b.tfrecord'}"]))
  assert on_b["global_step"] == on_a["global_step"] == 3
  expected = _numpy_eval(str(tmp_path / "out"), str(tmp_path / "b.tfrecord"),
                         16)
  for key, value in expected.items():
    np.testing.assert_allclose(on_b[key], value, rtol=1e-5, err_msg=key)
  assert on_b["masked_lm_loss"] != on_a["masked_lm_loss"]


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_max_eval_steps_holds_for_any_steps_per_call(tmp_path):
  """--max_eval_steps=2 evaluates 2 batches, also with 4 steps per call."""
  write_records(tmp_path / "heldout.tfrecord", 48, seed=7)
  argv = tiny_argv(tmp_path, "--num_train_steps=3")
  rp.run(rp.params_from_argv(argv))
  results = {}
  for per_call in (1, 4):
    results[per_call] = rp.run(rp.params_from_argv(argv + [
        "--nodo_train", "--do_eval", f"--init_checkpoint={tmp_path / 'out'}",
        f"--output_dir={tmp_path / f'eval_{per_call}'}",
        f"--eval_input_file={tmp_path / 'heldout.tfrecord'}",
        "--max_eval_steps=2", f"--iterations_per_loop={per_call}"]))
  for key in ("masked_lm_loss", "sentence_order_loss"):
    np.testing.assert_allclose(results[4][key], results[1][key], rtol=1e-6)
  # 2 batches of 8 are the file's first 16 records, scored in NumPy.
  expected = _numpy_eval(str(tmp_path / "out"),
                         str(tmp_path / "heldout.tfrecord"), 16)
  for key, value in expected.items():
    np.testing.assert_allclose(results[4][key], value, rtol=1e-5, err_msg=key)


def test_mixed_bfloat16_loss_finite_layer_norm_float32(tmp_path):
  p = rp.params_from_argv(tiny_argv(tmp_path, "--mixed_precision=bfloat16"))
  with runtime.dtype_policy("bfloat16"):
    config = AlbertConfig.from_json_file(p.albert_config_file)
    trainer = Trainer(PretrainingTask(
        record_checks.expand_input_files(p.input_file), [], 16, 4),
        config, rp.trainer_settings(p), tf.distribute.get_strategy())
    model = trainer.model
    dataset = pretraining_dataset.make_dataset(
        record_checks.expand_input_files(p.input_file), 8, 16, 4)
    history = model.fit(dataset, steps_per_epoch=2, epochs=1, verbose=0)
  assert keras.config.dtype_policy().name == "float32"  # restored
  layers = model._flatten_layers()  # pylint: disable=protected-access
  dtypes = {type(l).__name__: (l.compute_dtype, l.variable_dtype)
            for l in layers}
  assert dtypes["LayerNormalization"] == ("float32", "float32")
  assert dtypes["Dense"] == ("bfloat16", "float32")
  # Weights drawn with stddev 0.02 give near-zero logits, and the first
  # steps run at a warmup learning rate: the loss is close to that of zero
  # logits, log(V) + log(2) (V = 100), also with bfloat16 matmuls.
  np.testing.assert_allclose(history.history["loss"],
                             [np.log(100) + np.log(2)], atol=0.05)
  assert all(np.isfinite(v.numpy()).all() for v in model.trainable_variables)


# ------------------------------------------------------------ kill + resume
_KILL_RUN = ["--num_train_steps=60", "--save_checkpoints_steps=20",
             "--iterations_per_loop=10", "--log_steps=10"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """The reference of the kill and SIGTERM tests: the same run, unbroken."""
  clean = tmp_path_factory.mktemp("clean")
  assert rp.run(rp.params_from_argv(tiny_argv(clean, *_KILL_RUN)))[
      "global_step"] == 60
  return clean


@pytest.mark.slow
@pytest.mark.parametrize("sent, code", [(signal.SIGTERM, 143),
                                        (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_sigterm_saves_the_current_step_and_the_same_command_resumes(
    tmp_path, uninterrupted, sent, code):
  """A scheduler's SIGTERM, or a Ctrl-C (SIGINT), between two checkpoints:
  saved at that step, one line, the signal's exit code; the same command
  resumes there."""
  argv = tiny_argv(tmp_path, *_KILL_RUN)
  out = tmp_path / "out"
  proc = _start(argv)
  deadline = time.time() + 90
  # After ckpt-20 and a log line past it: mid-interval.
  while not ((out / "checkpoint").exists() and any(
      r["step"] > 20 for r in _log(out) if (out / "train_log.jsonl").exists())):
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.time() < deadline, "no step past 20 within 90 s"
    time.sleep(0.02)
  proc.send_signal(sent)
  stderr = proc.communicate(timeout=60)[1]
  assert proc.returncode == code, stderr[-2000:]
  assert "Traceback" not in stderr, stderr[-2000:]
  errors = [l for l in stderr.splitlines() if l.startswith("error: ")]
  assert len(errors) == 1 and f"stopped by {sent.name} at step " in errors[0]
  saved_step = int(errors[0].split("at step ")[1].split()[0])
  assert 20 < saved_step < 60 and f"ckpt-{saved_step}" in errors[0]
  latest = tf.train.latest_checkpoint(str(out))
  assert latest.endswith(f"ckpt-{saved_step}")
  assert int(tf.train.load_checkpoint(latest).get_tensor(
      "step/.ATTRIBUTES/VARIABLE_VALUE")) == saved_step

  assert rp.run(rp.params_from_argv(argv))["global_step"] == 60
  log, ref = _log(out), {r["step"]: r for r in _log(uninterrupted / "out")}
  assert [r["step"] for r in log] == sorted(ref)  # no step trained twice
  # Same steps at the same learning rate (the record stream is reshuffled
  # from a seed of the resumed step, so the losses after it differ; the
  # fine-tuning test compares those).
  for r in log:
    np.testing.assert_allclose(r["learning_rate"],
                               ref[r["step"]]["learning_rate"], rtol=1e-6)
    if r["step"] <= saved_step:  # before the signal: one run's figures
      np.testing.assert_allclose(r["loss"], ref[r["step"]]["loss"],
                                 rtol=1e-5)


@pytest.mark.slow
def test_sigkill_after_first_checkpoint_then_resume(tmp_path, uninterrupted):
  common = _KILL_RUN
  clean = uninterrupted

  killed = tmp_path / "killed"
  killed.mkdir()
  argv = tiny_argv(killed, *common)
  out = killed / "out"
  proc = _start(argv)
  deadline = time.time() + 90
  while not (out / "checkpoint").exists():
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.time() < deadline, "no checkpoint within 90 s"
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  # Readable right after the kill: the index names complete checkpoints only.
  latest = tf.train.latest_checkpoint(str(out))
  saved_step = int(tf.train.load_checkpoint(latest).get_tensor(
      "step/.ATTRIBUTES/VARIABLE_VALUE"))
  assert saved_step % 20 == 0 and 0 < saved_step < 60, saved_step

  assert rp.run(rp.params_from_argv(argv))["global_step"] == 60
  log = _log(out)
  first_after = [r for r in log if r["step"] > saved_step]
  assert first_after[0]["step"] == saved_step + 10  # continued, not restarted
  ref = {r["step"]: r for r in _log(clean / "out")}
  for r in first_after:  # same step -> same learning rate as uninterrupted
    np.testing.assert_allclose(r["learning_rate"],
                               ref[r["step"]]["learning_rate"], rtol=1e-6)
  assert sorted(os.listdir(out)) == sorted(os.listdir(clean / "out"))


# ------------------------------------------------------------ distribution
_MIRRORED_SCRIPT = textwrap.dedent("""
    import sys, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from albert_tf import run_pretraining as rp
    base, argv = sys.argv[1], sys.argv[2:]
    # Also 3 steps per call (Keras steps_per_execution): the trainer's
    # multi-step loop, and an eval through it.
    per_call = ["--iterations_per_loop=3", "--num_train_steps=6",
                "--save_checkpoints_steps=6", "--do_eval"]
    mirrored = ["--distribution_strategy=mirrored"]
    for name, extra in (("default", []), ("mirrored", mirrored),
                        ("default_3", per_call),
                        ("mirrored_3", per_call + mirrored)):
      rp.run(rp.params_from_argv(argv + extra + [f"--output_dir={base}/{name}"]))
    """)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_mirrored_and_multi_worker_match_default_strategy(tmp_path):
  """Same global batch (files read in order), same losses for three steps.

  Step 1 runs at learning rate 0 (warmup), so steps 2 and 3 also check the
  updates. Under mirrored also with 3 steps per call (iterations_per_loop):
  Keras's own multi-step loop failed there ("You must feed a value for
  placeholder tensor ..."; training.step_loop says why).
  """
  common = ["--num_train_steps=3", "--save_checkpoints_steps=3",
            "--iterations_per_loop=1", "--log_steps=1",
            "--shuffle_buffer_size=0"]
  base = tmp_path
  argv = tiny_argv(tmp_path, *common)
  out_dir = lambda name: f"--output_dir={base / name}"
  ports = [_free_port(), _free_port()]
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = [_start([str(base), *argv], code=_MIRRORED_SCRIPT)]
  for i in range(2):
    env = _env()
    env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                   "task": {"type": "worker", "index": i}})
    procs.append(_start([*argv, out_dir("multi_worker"),
                         "--distribution_strategy=multi_worker_mirrored"],
                        env=env))
  try:
    for proc in procs:
      _, err = proc.communicate(timeout=420)
      assert proc.returncode == 0, err[-3000:]
  finally:
    for proc in procs:
      if proc.poll() is None:
        proc.kill()
  losses = {name: [r["loss"] for r in _log(base / name)]
            for name in ("default", "mirrored", "multi_worker")}
  assert len(losses["default"]) == 3, losses
  # Measured: both within 3e-7 relative of the default strategy.
  np.testing.assert_allclose(losses["mirrored"], losses["default"], rtol=1e-5)
  np.testing.assert_allclose(losses["multi_worker"], losses["default"],
                             rtol=1e-5)
  per_call = {name: [r["loss"] for r in _log(base / name)]
              for name in ("default_3", "mirrored_3")}
  assert len(per_call["default_3"]) == 2, per_call  # steps 1-3 and 4-6
  np.testing.assert_allclose(per_call["mirrored_3"], per_call["default_3"],
                             rtol=1e-5)
  evals = _log(base / "mirrored_3", "eval_log.jsonl")
  assert evals and np.isfinite(evals[-1]["masked_lm_loss"]), evals
  assert not os.path.exists(base / "multi_worker" / ".worker_1")


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_rerun_with_another_sentence_loss_weight_is_refused(tmp_path):
  argv = tiny_argv(tmp_path, "--num_train_steps=3")
  rp.run(rp.params_from_argv(argv))
  fingerprint = json.loads((tmp_path / "out" / "run_fingerprint.json")
                           .read_text())
  assert fingerprint["sentence_order_loss_weight"] == 1.0
  with pytest.raises(runtime.RunConfigError) as e:
    rp.run(rp.params_from_argv(argv + ["--num_train_steps=6",
                                       "--sentence_order_loss_weight=0"]))
  assert "(sentence_order_loss_weight 1.0 there vs 0.0 now)" in str(e.value)


def test_eval_says_it_reads_training_records_and_when_the_encoder_collapsed(
    tmp_path, caplog):
  """No --eval_input_file: one warning that eval measures fit. After two
  steps from random init the [CLS] states, and so the pooled outputs, of
  different inputs are nearly one vector: the eval says the encoder has
  collapsed, with its cosine."""
  import logging  # pylint: disable=g-import-not-at-top
  argv = tiny_argv(tmp_path, "--do_eval", "--num_train_steps=2")
  with caplog.at_level(logging.WARNING):
    rp.run(rp.params_from_argv(argv))
  said = [r.getMessage() for r in caplog.records]
  assert len([m for m in said if m.startswith("Evaluating on ")]) == 1
  assert any("the eval scores measure fit, not generalisation" in m
             for m in said)
  collapsed = [m for m in said if "the encoder has collapsed" in m]
  assert collapsed, said
  cosine = float(collapsed[0].split("mean cosine ")[1].split()[0])
  assert cosine > PretrainingTask.COLLAPSE_COSINE


def test_mean_pairwise_cosine_by_hand():
  from albert_tf.tasks.pretraining import mean_pairwise_cosine  # pylint: disable=g-import-not-at-top
  # Pairs of [1,0], [0,1], [1,1]: cosines 0, 1/sqrt2, 1/sqrt2.
  assert mean_pairwise_cosine(np.array([[1., 0.], [0., 1.], [1., 1.]])) == (
      pytest.approx(2 / np.sqrt(2) / 3))
  assert mean_pairwise_cosine(np.array([[2., 1.], [4., 2.]])) == (
      pytest.approx(1.0))
  assert mean_pairwise_cosine(np.array([[1., 0.]])) is None
