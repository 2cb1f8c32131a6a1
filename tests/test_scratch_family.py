"""A task family in a file outside the package, with no package edit, gets
`albert-finetune --task=<it>`, training, resume, the best checkpoint, a
SavedModel with serve_text, TFLite (float and dynamic-range) with parity,
and `albert_tf.load(...).predict`.

The family ("keyword_spot": does a sentence contain --keyword?) is
docs/examples/keyword_spot.py, copied by the test into tmp_path: its options
dataclass, its reader, a model whose head is saved under a checkpoint name
no package code knows ("spot_head"), and its export. The command finds it by
--task_module; the run is stopped after a checkpoint (the family's input
pipeline fails at a step, as a kill would) and the same command resumes it.
The record names the file, so export, TFLite and `albert_tf.load` find the
family with nothing on the Python path. Its name appears nowhere in
albert_tf/.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = "keyword_spot"
CHARS = "好差很不是的电影书手机质量服务一般喜欢失望"

# The family: docs/examples/keyword_spot.py (the docs' template), copied
# into a temporary folder, as a user's own file would be.
FAMILY = ROOT / "docs" / "examples" / "keyword_spot.py"


def _rows(n, seed):
  rng = np.random.default_rng(seed)
  filler = list("很不是的电影书手机质量服务一般")
  rows = []
  for i in range(n):
    words = list(rng.choice(filler, size=int(rng.integers(3, 8))))
    words.insert(int(rng.integers(0, len(words))), "好" if i % 2 else "差")
    rows.append("".join(words))
  return rows


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
  root = tmp_path_factory.mktemp("scratch")
  (root / "keyword_spot_family.py").write_text(
      FAMILY.read_text(encoding="utf-8"), encoding="utf-8")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  AlbertConfig(vocab_size=len(vocab), embedding_size=8, hidden_size=16,
               num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=32,
               initializer_range=0.2).to_json_file(root / "config.json")
  data = root / "data"
  data.mkdir()
  for split, n, seed in (("train", 64, 0), ("dev", 16, 1), ("test", 16, 1)):
    # label \t text, as the demo's reviews (the family reads the last column)
    (data / f"{split}.tsv").write_text("".join(
        f"{i % 2}\t{t}\n" for i, t in enumerate(_rows(n, seed))),
        encoding="utf-8")
  return root


def _finetune(root, *extra, rc=0):
  argv = [sys.executable, "-m", "albert_tf.finetune", f"--task={NAME}",
          f"--task_module={root / 'keyword_spot_family.py'}",
          f"--data_dir={root / 'data'}", f"--output_dir={root / 'out'}",
          f"--vocab_file={root / 'vocab.txt'}",
          f"--albert_config_file={root / 'config.json'}",
          "--max_seq_length=16", "--train_batch_size=16", "--train_step=12",
          "--eval_every_steps=4", "--learning_rate=3e-3", "--warmup_step=2",
          "--classifier_dropout=0", "--iterations_per_loop=1",
          "--log_every_steps=1", "--do_train",
          "--do_eval", "--do_predict", *extra]
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(argv, cwd=root, env=env, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == rc, proc.stderr[-3000:]
  if rc:
    return proc.stderr
  return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _jsonl(path):
  return [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines()
          if l.strip()]


@pytest.mark.slow  # about 50 s: two commands, export, TFLite
def test_a_scratch_family_finetunes_resumes_and_exports(scratch):
  out = scratch / "out"
  # Stopped at step 6 (after the step-4 checkpoint), then the same command.
  stderr = _finetune(scratch, "--fail_at_step=6", rc=1)
  assert "input stopped at step 6" in stderr
  first_steps = [r["global_step"] for r in _jsonl(out / "eval_log.jsonl")]
  assert first_steps == [0, 4], first_steps
  assert (out / "ckpt-4.index").exists()
  result, stderr = _finetune(scratch)
  assert f"Resumed from {out / 'ckpt-4'}" in stderr, stderr[-3000:]
  assert result["num_train_steps"] == 12
  logged = {r["global_step"]: r for r in _jsonl(out / "eval_log.jsonl")}
  assert {4, 8, 12} <= set(logged), sorted(logged)
  train_steps = [r["step"] for r in _jsonl(out / "train_log.jsonl")
                 if "step" in r]
  # The log lines past the checkpoint (steps 5, 6 of the first run) were
  # dropped at the resume: one line per step.
  assert train_steps == list(range(1, 13)), train_steps

  # The best checkpoint by the family's metric, and eval_results.json.
  best = json.loads((out / "best" / "best.json").read_text())
  trained = {s: r for s, r in logged.items() if s > 0}
  best_step = max(sorted(trained), key=lambda s: trained[s]["accuracy"])
  assert best["step"] == best_step
  saved = json.loads((out / "eval_results.json").read_text())
  assert saved["accuracy"] == pytest.approx(trained[best_step]["accuracy"])
  assert saved["best_step"] == best_step
  # The keyword is learnable: the best model spots it on most test rows.
  spots = _jsonl(out / "spots.jsonl")
  want = [int("好" in r["text"]) for r in spots]
  got = [r["spot"] for r in spots]
  assert saved["test_accuracy"] == pytest.approx(
      np.mean(np.array(got) == np.array(want)))
  assert saved["test_accuracy"] >= 0.75, saved

  # The record names the module, so export finds the family on its own.
  record = json.loads((out / "task_record.json").read_text())
  assert record["task"] == NAME
  assert record["task_module"] == str(scratch / "keyword_spot_family.py")
  # Nothing on the path but the repository: the record's file is enough.
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable, "-m", "albert_tf.export_saved_model",
       f"--checkpoint={out}", f"--export_dir={scratch / 'export'}"],
      cwd=scratch, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  version = sorted((scratch / "export").iterdir())[-1]
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  the in-graph tokenizer's ops
  served = tf.saved_model.load(str(version)).signatures["serve_text"](
      text=tf.constant([r["text"] for r in spots]))
  # serve_text tokenizes in the graph; its answers are the command's.
  assert served["spot"].numpy().tolist() == got

  # TFLite (float and dynamic-range int8) of the export, by the command,
  # against the SavedModel's serving_default on the same ids.
  from tests import numpy_reference  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.tflite_runner import TFLiteRunner  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer(vocab_file=str(scratch / "vocab.txt"))
  ids = numpy_reference.packed(tokenizer, [r["text"] for r in spots],
                               length=16)
  want = tf.saved_model.load(str(version)).signatures["serving_default"](
      **{k: tf.constant(v) for k, v in ids.items()})["logits"].numpy()
  scale = float(np.abs(want).max())
  for quantize, rel in (("none", 1e-4), ("dynamic", 0.1)):
    target = scratch / f"spot_{quantize}.tflite"
    proc = subprocess.run(
        [sys.executable, "-m", "albert_tf.export_tflite",
         f"--saved_model={version}", f"--output={target}",
         f"--quantize={quantize}"], cwd=scratch, env=env,
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runner = TFLiteRunner(str(target))
    lite = np.concatenate([runner(**{k: v[i:i + 1] for k, v in ids.items()})
                           ["logits"] for i in range(len(spots))])
    np.testing.assert_allclose(lite, want, atol=rel * scale, rtol=0,
                               err_msg=quantize)


@pytest.mark.slow  # reads the test above
def test_load_predict_of_a_scratch_family(scratch):
  """albert_tf.load finds the family by the record's task_module (the
  file) and predicts from raw text with the family's default encoding: the
  same spots as the command wrote."""
  out = scratch / "out"
  if not (out / "spots.jsonl").exists():
    pytest.skip("needs test_a_scratch_family_finetunes_resumes_and_exports")
  import albert_tf  # pylint: disable=g-import-not-at-top
  spots = _jsonl(out / "spots.jsonl")
  for source in (out, sorted((scratch / "export").iterdir())[-1]):
    got = albert_tf.load(str(source)).predict([r["text"] for r in spots])
    assert [g["spot"] for g in got] == [r["spot"] for r in spots], source


def test_the_package_does_not_name_the_scratch_family():
  found = [str(p.relative_to(ROOT)) for p in (ROOT / "albert_tf").rglob("*")
           if p.is_file() and p.suffix == ".py"
           and NAME in p.read_text(encoding="utf-8")]
  assert found == []
