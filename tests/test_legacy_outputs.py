"""What the code before the move into subpackages wrote still works.

tests/legacy_v1/ holds an output_dir of each training command and a
classifier export, written by that code with tests/legacy_v1/make_fixture.sh
(tiny config, a few steps). Each test copies it, regenerates the input files
with the script's own lines and runs today's command line on it: the
pretraining run resumes, the classifier evaluates with its best checkpoint,
both fine-tuned dirs export, and the old export converts to TFLite. The
commands are read from make_fixture.sh, so they are the ones that wrote the
fixture, with only the flags the test changes.
"""

import gzip
import hashlib
import json
import pathlib
import shlex
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests import cli_runner

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "legacy_v1"
SCRIPT = (FIXTURE / "make_fixture.sh").read_text(encoding="utf-8")
LINES = SCRIPT.replace("\\\n", " ").splitlines()  # continuations joined

# Fixed ids in the fixture's vocab.txt: [CLS] the film was good [SEP],
# [CLS] bad plot [SEP] very dull [SEP] (a pair), [CLS] a movie is not fun
# [SEP]; padded to the export's max_seq_length, 16.
IDS = np.array([[2, 11, 8, 14, 5, 3] + [0] * 10,
                [2, 6, 9, 3, 15, 18, 3] + [0] * 9,
                [2, 12, 7, 13, 16, 17, 3] + [0] * 9], np.int32)
FEATURES = {"input_ids": IDS, "input_mask": (IDS > 0).astype(np.int32),
            "segment_ids": np.array([[0] * 16, [0] * 4 + [1] * 3 + [0] * 9,
                                     [0] * 16], np.int32)}
DEV_TEXTS = ["the film was good", "the plot was bad"]  # the script's dev.tsv


# ------------------------------------------------------------ the script
def _command(module):
  """The script's `$PY -m <module> ...` line, as argv from the module on."""
  found = [shlex.split(l) for l in LINES if l.startswith(f"$PY -m {module} ")]
  assert len(found) == 1, f"make_fixture.sh runs {module} {len(found)} times"
  return found[0][2:]


def _replace(argv, old, new):
  """argv with the flag `old` (exactly as written) replaced by `new`."""
  assert old in argv, f"make_fixture.sh's {argv[0]} has no {old}"
  return [new if a == old else a for a in argv]


def _write_records(directory, monkeypatch):
  """work/part-0.tfrecord, by the script's own Python lines (seeded); run
  here, where TensorFlow is loaded already."""
  start = SCRIPT.index("$PY - <<'P'\n") + len("$PY - <<'P'\n")
  source = SCRIPT[start:SCRIPT.index("\nP\n", start)]
  (directory / "work").mkdir(exist_ok=True)
  monkeypatch.chdir(directory)
  exec(compile(source, str(FIXTURE / "make_fixture.sh"), "exec"), {})  # pylint: disable=exec-used
  monkeypatch.undo()


def _write_tsv(directory):
  """work/tsv/{train,dev}.tsv, by the script's own shell lines."""
  first = next(i for i, l in enumerate(LINES)
               if l.startswith("mkdir -p work/tsv"))
  last = next(i for i, l in enumerate(LINES)
              if l.startswith("$PY -m albert_tf.run_classifier "))
  subprocess.run(["bash", "-euo", "pipefail", "-c",
                  "\n".join(LINES[first:last])], cwd=directory, check=True)


def _run(argv, cwd):
  proc = cli_runner.run_module(argv, cwd=cwd, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _copy(tmp_path):
  """A writable copy of the fixture, its SavedModel unzipped."""
  root = tmp_path / "legacy_v1"
  shutil.copytree(FIXTURE, root)
  packed = root / "export" / "1" / "saved_model.pb.gz"
  with gzip.open(packed, "rb") as f:
    (root / "export" / "1" / "saved_model.pb").write_bytes(f.read())
  packed.unlink()
  return root


def _md5(path):
  return hashlib.md5(path.read_bytes()).hexdigest()


def _json(path):
  return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
  """A copy read by the export tests, and the old export loaded."""
  root = _copy(tmp_path_factory.mktemp("legacy"))
  import tensorflow_text  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
  model = tf.saved_model.load(str(root / "export" / "1"))
  logits = model.signatures["serving_default"](
      **{k: tf.constant(v) for k, v in FEATURES.items()})["logits"].numpy()
  probabilities = model.signatures["serve_text"](
      text=tf.constant(DEV_TEXTS))["probabilities"].numpy()
  return {"root": root, "logits": logits, "dev_probabilities": probabilities}


# ------------------------------------------------------------ a. resume
@pytest.mark.slow
def test_pretraining_output_dir_resumes_at_its_last_checkpoint(tmp_path,
                                                              monkeypatch):
  root = _copy(tmp_path)
  _write_records(root, monkeypatch)
  out = root / "pretrain"
  old_files = sorted(out.glob("ckpt-*"))
  # (inode, mtime): a run from step 0 would write ckpt-2 and ckpt-4 again,
  # perhaps with the same bytes (the same seed and data).
  stats = [(p.stat().st_ino, p.stat().st_mtime_ns) for p in old_files]
  argv = _replace(_command("albert_tf.run_pretraining"),
                  "--num_train_steps=4", "--num_train_steps=6")
  fingerprint = (out / "run_fingerprint.json").read_bytes()
  # That run's "lamb" was Keras's rule; today's is the original's: the same
  # command stops with one line instead of switching rules mid-run.
  proc = cli_runner.run_module(argv, cwd=root, timeout=300)
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert lines[-1] == (
      "error: --output_dir=pretrain was trained with Keras's update rule "
      "(--optimizer=keras_lamb), this run asks for the original's "
      "(google-research/albert) (--optimizer=lamb): pass "
      "--optimizer=keras_lamb to continue it, or --overwrite to start over")
  assert (out / "run_fingerprint.json").read_bytes() == fingerprint
  _run(argv + ["--optimizer=keras_lamb"], root)
  assert _json(out / "run_fingerprint.json")["optimizer"] == {
      **_json(FIXTURE / "pretrain" / "run_fingerprint.json")["optimizer"],
      "name": "keras_lamb", "rule": "keras"}

  assert [(p.stat().st_ino, p.stat().st_mtime_ns) for p in old_files] == stats
  for suffix in (".index", ".data-00000-of-00001"):
    assert _md5(out / f"ckpt-4{suffix}") == _md5(
        FIXTURE / "pretrain" / f"ckpt-4{suffix}")
  state = tf.train.get_checkpoint_state(str(out))
  old_state = tf.train.get_checkpoint_state(str(FIXTURE / "pretrain"))
  assert state.all_model_checkpoint_paths == [
      str(out / f"ckpt-{s}") for s in (2, 4, 6)]
  assert list(state.all_model_checkpoint_timestamps)[:2] == list(
      old_state.all_model_checkpoint_timestamps)
  reader = tf.train.load_checkpoint(str(out / "ckpt-6"))
  assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == 6
  # The step-4 evaluation stays as the old run logged it; one line is added.
  old_log = (FIXTURE / "pretrain" / "eval_log.jsonl").read_text().splitlines()
  new_log = (out / "eval_log.jsonl").read_text().splitlines()
  assert new_log[:-1] == old_log
  assert [json.loads(l)["global_step"] for l in new_log] == [4, 6]
  assert _json(out / "eval_results.json")["global_step"] == 6


# ------------------------------------------------------------ b. evaluate
def test_classifier_output_dir_evaluates_its_best_checkpoint(tmp_path, legacy):
  root = _copy(tmp_path)
  _write_tsv(root)
  # A test split (the dev rows) too: its probabilities show which weights
  # were used, where two dev examples only give an accuracy of 0.5.
  shutil.copyfile(root / "work" / "tsv" / "dev.tsv",
                  root / "work" / "tsv" / "test.tsv")
  argv = _replace(_command("albert_tf.run_classifier"), "--do_train",
                  "--nodo_train") + ["--do_predict"]
  _run(argv, root)

  got = _json(root / "classifier" / "eval_results.json")
  expected = _json(FIXTURE / "classifier" / "eval_results.json")
  # The same figures; eval_results.json now has one schema for every
  # family (dev metrics unprefixed, test_* for the test split).
  for key, value in expected.items():
    assert got[key.removeprefix("eval_")] == pytest.approx(value,
                                                           abs=1e-6), key
  assert got["best_step"] == 0  # best/best.json's step
  # The old export was made from classifier/best/ckpt-0: the predictions
  # are that checkpoint's (ckpt-4's differ by about 0.01).
  with open(root / "classifier" / "test_results.tsv", encoding="utf-8") as f:
    rows = [line.rstrip("\n").split("\t") for line in f]
  assert rows[0] == ["index", "prediction", "prob_neg", "prob_pos"]
  probabilities = np.array([[float(p) for p in row[2:]] for row in rows[1:]])
  # Printed with 6 decimals.
  np.testing.assert_allclose(probabilities, legacy["dev_probabilities"],
                             atol=1e-6)


# ------------------------------------------------------------ c. export
@pytest.mark.slow
def test_classifier_and_tagger_output_dirs_export(tmp_path, legacy):
  root = legacy["root"]
  argv = _replace(_command("albert_tf.export_saved_model"),
                  "--export_dir=export", f"--export_dir={tmp_path / 'clf'}")
  _run(argv, root)
  _run(["albert_tf.export_saved_model", "--checkpoint=tagger",
        "--model=tagger", f"--export_dir={tmp_path / 'tagger'}"], root)

  # What apps and export_tflite read of the export is what it was.
  old = _json(root / "export" / "1" / "assets.extra" / "albert_export.json")
  new = _json(tmp_path / "clf" / "1" / "assets.extra" / "albert_export.json")
  # The normalisation prose is now written from one table of steps
  # (data/normalization.py): the same steps, one reworded.
  reworded = {"collapse every run of whitespace to one space; strip": (
      "collapse every run of whitespace (Python str.isspace) to one space; "
      "strip leading/trailing whitespace")}
  old["normalization"] = [reworded.get(r, r) for r in old["normalization"]]
  assert {k: new.get(k) for k in old} == old
  model = tf.saved_model.load(str(tmp_path / "clf" / "1"))
  logits = model.signatures["serving_default"](
      **{k: tf.constant(v) for k, v in FEATURES.items()})["logits"].numpy()
  # This barely trained model's logits are ~1e-3: the bound is below that.
  np.testing.assert_allclose(logits, legacy["logits"], atol=1e-6, rtol=0)

  info = _json(tmp_path / "tagger" / "1" / "assets.extra" /
               "albert_export.json")
  tagger_config = _json(FIXTURE / "tagger" / "tagger_config.json")
  assert {k: info.get(k) for k in tagger_config} == tagger_config
  assert info["checkpoint"] == "tagger/best/ckpt-4"
  # best/best.json: on these dev sentences the best checkpoint found both
  # PER entities and nothing else (PER precision and recall 1, LOC recall
  # 0, two entities predicted).
  tagger = tf.saved_model.load(str(tmp_path / "tagger" / "1"))
  out = tagger.signatures["serve_text"](text=tf.constant(
      ["alice lives in paris", "bob works at london"]))
  assert out["num_entities"].numpy().tolist() == [1, 1]
  assert out["entity_types"].numpy().tolist() == [[b"PER"], [b"PER"]]
  assert out["entity_texts"].numpy().tolist() == [[b"alice"], [b"bob"]]
  assert out["entity_starts"].numpy().tolist() == [[0], [0]]
  assert out["entity_ends"].numpy().tolist() == [[5], [3]]


# ------------------------------------------------------------ d. TFLite
@pytest.mark.slow
def test_legacy_export_converts_to_tflite(tmp_path, legacy):
  from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  output = tmp_path / "legacy.tflite"
  _run(["albert_tf.export_tflite",
        f"--saved_model={legacy['root'] / 'export' / '1'}",
        f"--output={output}", "--quantize=none"], legacy["root"])
  info = _json(tmp_path / "legacy.tflite.json")
  assert [(i["name"], i["shape"]) for i in info["inputs"]] == [
      (n, [1, 16]) for n in ("input_ids", "input_mask", "segment_ids")]
  assert info["label_list"] == ["neg", "pos"]
  runner = Interpreter(model_path=str(output)).get_signature_runner(
      "serving_default")
  logits = np.concatenate([
      runner(**{k: v[i:i + 1] for k, v in FEATURES.items()})["logits"]
      for i in range(len(IDS))])
  np.testing.assert_allclose(logits, legacy["logits"], atol=1e-6, rtol=0)
