"""The README's Quick start, run as written, on an English corpus and a TSV of text labels.

The test reads the bash block under "## Quick start" in README.md and runs
every command in it, in order, in a fresh directory (with `configs/` linked
in, as a user runs from the repository). Under `make test` it appends
small-budget overrides (steps, batch, sequence length) so that the chain
takes seconds. `make quickstart` (QUICKSTART_AS_WRITTEN=1) runs the
commands exactly as written, only the corpus (about 1 MB of English text)
and the TSV (2,000 text-label rows) being the user's, and prints how long
it took. The exports must load and run either way. If the README changes,
this test runs the new commands; a command that does not run fails it.
Step 3 is run once more as its comment says for a pair task
(`--text_b_column=answer`, into clf_pair), and then the README's Python
block runs as written on these folders. The fine-tuning prints its
baselines: `baseline_*` in eval_results.json, and at the small budget (two
steps) "below the baseline", since the TSV's label is one keyword away for
TF-IDF (1.0 on dev).
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from tests import cli_runner

REPO = pathlib.Path(__file__).resolve().parents[1]

# The README as written, on a user-sized corpus and TSV (make quickstart).
AS_WRITTEN = os.environ.get("QUICKSTART_AS_WRITTEN") == "1"

# Small-budget overrides per module (appended; absl takes the last value).
OVERRIDES = {} if AS_WRITTEN else {
    "data_prep.create_pretraining_data": ["--max_seq_length=64",
                                          "--dupe_factor=2"],
    "albert_tf.run_pretraining": [
        "--max_seq_length=64", "--train_batch_size=4", "--eval_batch_size=4",
        "--num_train_steps=2", "--num_warmup_steps=1",
        "--save_checkpoints_steps=2", "--iterations_per_loop=1",
        "--log_steps=1", "--max_eval_steps=1", "--nojit_compile",
        "--mixed_precision=none", "--distribution_strategy=default"],
    "albert_tf.run_classifier": [
        "--max_seq_length=32", "--train_batch_size=4", "--eval_batch_size=8",
        "--train_step=2", "--nojit_compile", "--mixed_precision=none",
        "--distribution_strategy=default"],
}

WORDS = ("the a river city morning train station teacher garden letter "
         "window market old quiet small bright cold long walked opened found "
         "closed carried watched wrote remembered near under across behind "
         "before after slowly again today tomorrow music story bridge road "
         "children doctor kitchen winter summer").split()


def quick_start_commands():
  """The commands of the README's Quick start bash block, joined lines."""
  text = (REPO / "README.md").read_text(encoding="utf-8")
  section = text.split("## Quick start", 1)[1]
  block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
  block = block.replace("\\\n", " ")
  return [line.strip() for line in block.splitlines()
          if line.strip() and not line.strip().startswith("#")]


def write_corpus(root, num_documents=40, seed=0):
  """English documents: one sentence per line, a blank line between them."""
  rng = np.random.default_rng(seed)
  (root / "my_corpus").mkdir()
  for part in range(2):
    documents = []
    for _ in range(num_documents // 2):
      sentences = [" ".join(rng.choice(WORDS, size=rng.integers(6, 14)))
                   .capitalize() + "." for _ in range(rng.integers(3, 8))]
      documents.append("\n".join(sentences))
    (root / "my_corpus" / f"part-{part}.txt").write_text(
        "\n\n".join(documents) + "\n", encoding="utf-8")


def write_tsv(root, seed=1, sizes=(("train", 24), ("dev", 8))):
  """Reviews with text labels: positive ones mention 'bright' or 'summer';
  an answer column (a question about the weather) for the pair run."""
  rng = np.random.default_rng(seed)
  (root / "my_tsv").mkdir()
  for split, n in sizes:
    rows = ["text\tlabel\tanswer"]
    for i in range(n):
      # Fillers without the keywords: the keyword alone gives the label.
      words = list(rng.choice([w for w in WORDS[:20] if w not in (
          "bright", "cold")], size=6))
      words.append("bright summer" if i % 2 else "cold winter")
      rows.append(f"{' '.join(words)}\t{'positive' if i % 2 else 'negative'}"
                  "\tis it warm?")
    (root / "my_tsv" / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                                  encoding="utf-8")


def readme_python_block():
  """The README's first Python block (albert_tf.load(...).predict)."""
  text = (REPO / "README.md").read_text(encoding="utf-8")
  return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def _with_results(code):
  """The code with the value of each top-level expression appended to
  `results`, printed as one JSON line at the end."""
  import ast  # pylint: disable=g-import-not-at-top
  tree = ast.parse(code)
  for i, node in enumerate(tree.body):
    if isinstance(node, ast.Expr):
      collect = ast.parse("results.append(None)").body[0]
      collect.value.args = [node.value]
      tree.body[i] = collect
  return ("results = []\n" + ast.unparse(ast.fix_missing_locations(tree)) +
          "\nimport json\nprint(json.dumps(results, default=lambda o: o.tolist() "
          "if hasattr(o, 'tolist') else str(o)))\n")


def test_readme_quick_start_block_is_what_this_test_runs():
  commands = quick_start_commands()
  modules = [shlex.split(c)[2] for c in commands]
  assert modules == ["data_prep.train_vocab",
                     "data_prep.create_pretraining_data",
                     "albert_tf.run_pretraining", "albert_tf.run_classifier",
                     "albert_tf.export_saved_model", "albert_tf.export_tflite",
                     "albert_tf.export_onnx"]
  assert all(shlex.split(c)[:2] == ["python", "-m"] for c in commands)


@pytest.mark.slow
def test_quick_start_runs_as_written(tmp_path):
  import time  # pylint: disable=g-import-not-at-top
  start = time.time()
  (tmp_path / "configs").symlink_to(REPO / "configs")
  if AS_WRITTEN:  # 3,600 documents: about 1 MB
    write_corpus(tmp_path, num_documents=3600)
    write_tsv(tmp_path, sizes=(("train", 2000), ("dev", 200)))
    size = sum(p.stat().st_size for p in (tmp_path / "my_corpus").iterdir())
    print(f"\ncorpus {size / 1e6:.2f} MB")
  else:
    write_corpus(tmp_path)
    write_tsv(tmp_path)
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  stderr = {}
  for command in quick_start_commands():
    argv = shlex.split(command)[2:]  # the module and its flags
    # `python -m`, forked from a process that has imported TF for the
    # albert_tf commands (tests/cli_runner says what that reproduces).
    proc = cli_runner.run_module(argv + OVERRIDES.get(argv[0], []),
                                 cwd=tmp_path, env=env, timeout=1800)
    assert proc.returncode == 0, (command, proc.stderr[-3000:])
    stderr[argv[0]] = proc.stderr
    if AS_WRITTEN:
      print(f"{time.time() - start:7.1f} s  {argv[0]}", flush=True)

  # The classes came from train.tsv's text labels, not a regression.
  import json  # pylint: disable=g-import-not-at-top
  info = json.loads((tmp_path / "clf" / "task_record.json").read_text())
  assert info["label_list"] == ["negative", "positive"]
  assert info["task"] == "classification"

  # The baselines, fitted on my_tsv/train.tsv (12 of each label: the
  # majority is the first, negative) and scored on dev.tsv (4 of each);
  # the keyword gives TF-IDF every dev row.
  results = json.loads((tmp_path / "clf" / "eval_results.json").read_text())
  if not AS_WRITTEN:
    assert results["baseline_majority_accuracy"] == 0.5
    assert results["baseline_tfidf_accuracy"] == 1.0
    assert results["accuracy"] < 1.0, results  # two steps: cannot beat it
    assert (f"dev accuracy {results['accuracy']:.3f} (majority 0.500, tfidf "
            "1.000): below the baseline") in stderr["albert_tf.run_classifier"]
  assert {"baseline_majority_accuracy", "baseline_tfidf_accuracy"} <= set(
      results)

  # Step 3 as its comment says for a pair task, then the README's Python.
  step3 = next(c for c in quick_start_commands() if "run_classifier" in c)
  assert "add --text_b_column=answer" in (REPO / "README.md").read_text(
      encoding="utf-8")
  argv = shlex.split(step3)[2:] + ["--text_b_column=answer",
                                   "--output_dir=clf_pair"]
  proc = cli_runner.run_module(argv + OVERRIDES.get(argv[0], []),
                               cwd=tmp_path, env=env, timeout=1800)
  assert proc.returncode == 0, proc.stderr[-3000:]
  proc = subprocess.run(
      [sys.executable, "-c", _with_results(readme_python_block())],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  clf, export, pair, fill = json.loads(proc.stdout.splitlines()[-1])
  for one in (clf, export, pair):
    assert len(one) == 1 and one[0]["label"] in ("negative", "positive")
    assert set(one[0]["probabilities"]) == {"negative", "positive"}
    assert sum(one[0]["probabilities"].values()) == pytest.approx(1, abs=1e-5)
  assert len(fill) == 1 and fill[0], fill

  # The SavedModel serves text; the .tflite runs in LiteRT.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  # Both against the fine-tuned Keras classifier restored from clf/, fed by
  # the Python tokenizer stored in the export.
  from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  from albert_tf.export_tflite import read_export_metadata, tokenizer_of  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertClassifier  # pylint: disable=g-import-not-at-top
  from albert_tf.training.checkpoints import restore_weights  # pylint: disable=g-import-not-at-top
  texts = ["the bright summer garden", "a cold winter road"]
  saved_model = str(tmp_path / "saved_models" / "my_clf" / "1")
  metadata = read_export_metadata(saved_model)
  tokenizer = tokenizer_of(saved_model, metadata)
  from tests import numpy_reference  # pylint: disable=g-import-not-at-top
  features = numpy_reference.packed(tokenizer, texts,
                                    length=metadata["max_seq_length"])
  model = AlbertClassifier(AlbertConfig.from_json_file(
      tmp_path / "clf" / "albert_config.json"), 2)
  model(features)  # built, so that every part is restored
  restore_weights(str(tmp_path / "clf"), model)
  keras_probs = tf.nn.softmax(model(features)["logits"]).numpy()

  loaded = tf.saved_model.load(saved_model)
  out = loaded.signatures["serve_text"](text=tf.constant(texts))
  # Float32 graphs of the same weights; the in-graph tokenizer must give the
  # Python tokenizer's ids for the probabilities to agree.
  np.testing.assert_allclose(out["probabilities"].numpy(), keras_probs,
                             atol=1e-5)

  runner = Interpreter(model_path=str(tmp_path / "my_clf.tflite")
                       ).get_signature_runner("serving_default")
  tflite_probs = np.concatenate([
      runner(**{k: v[i:i + 1] for k, v in features.items()})["probabilities"]
      for i in range(len(texts))])
  # --quantize=dynamic: int8 weights, tests/test_tflite.py's bound.
  np.testing.assert_allclose(tflite_probs, keras_probs, atol=5e-2)

  # Step 5's ONNX file, served as the README's comment says.
  import albert_tf  # pylint: disable=g-import-not-at-top
  onnx_out = albert_tf.load(str(tmp_path / "my_clf.onnx")).predict(texts)
  onnx_probs = np.array([[p["probabilities"][label]
                          for label in ("negative", "positive")]
                         for p in onnx_out])
  np.testing.assert_allclose(onnx_probs, keras_probs, atol=5e-2)
