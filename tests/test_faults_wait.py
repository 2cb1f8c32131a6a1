"""Every wait is bounded (issue 39 item 9): a read or a start-up that would
wait forever ends within its flag's limit with one line saying what it
waited for and which flag sets the limit.

  * fine-tuning whose train file is a named pipe without a writer (or a
    hung network file): `--input_timeout_secs` (run_classifier, with and
    without the label set read from train.tsv; run_ner; run_squad);
  * multi_worker_mirrored whose TF_CONFIG peer never comes up:
    "waiting for worker host:port" lines, then one line after
    `--worker_timeout_secs`; SIGTERM ends the wait (exit 143).

Each command runs through tests/cli_runner.py (forked, TF imported once);
the model is a two-layer toy config, which is never reached.
"""

import json
import os
import pathlib
import signal
import socket
import time

import pytest

from albert_tf.core.config import AlbertConfig
from tests import cli_runner

REPO = pathlib.Path(__file__).resolve().parents[1]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"]
# The commands' start-up (flags, config, tokenizer) on a loaded machine,
# beside the limit itself.
START_UP_SECS = 40

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"),
                                reason="no named pipes on this platform")


def _env(**extra):
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  env.pop("TF_CONFIG", None)
  env.update(extra)
  return env


@pytest.fixture
def model(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n",
                                      encoding="utf-8")
  AlbertConfig(vocab_size=len(VOCAB), embedding_size=8, hidden_size=16,
               num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=32
               ).to_json_file(tmp_path / "config.json")
  return [f"--vocab_file={tmp_path / 'vocab.txt'}",
          f"--albert_config_file={tmp_path / 'config.json'}",
          f"--output_dir={tmp_path / 'out'}", "--max_seq_length=16"]


def _run(argv, timeout=START_UP_SECS + 60, **env):
  start = time.monotonic()
  proc = cli_runner.run_module(argv, cwd=REPO, env=_env(**env),
                               timeout=timeout)
  return proc, time.monotonic() - start


def _error_lines(stderr):
  return [l for l in stderr.splitlines() if l.startswith("error: ")]


# ------------------------------------------------------------ input files
FIFO_CASES = {
    # a known task: the pipe is opened by the split's read
    "classifier": ("albert_tf.run_classifier", "train.tsv",
                   ["--task_name=sentiment", "--do_train"]),
    # tsv without --label_list: the labels are read from train.tsv first
    "classifier_labels": ("albert_tf.run_classifier", "train.tsv",
                          ["--task_name=tsv", "--text_a_column=0",
                           "--label_column=1", "--do_train"]),
    "ner": ("albert_tf.run_ner", "train.txt",
            ["--task_name=conll", "--do_train"]),
    "squad": ("albert_tf.run_squad", "train.json",
              ["--task_name=squad", "--do_train", "--max_query_length=4"]),
}


@needs_fifo
@pytest.mark.parametrize("case", sorted(FIFO_CASES))
def test_fifo_train_file_ends_within_input_timeout(case, model, tmp_path):
  module, name, flags = FIFO_CASES[case]
  data = tmp_path / "data"
  data.mkdir()
  fifo = data / name
  os.mkfifo(fifo)  # no writer: open() blocks for ever
  where = ([f"--train_file={fifo}", f"--data_dir={data}"]
           if case == "squad" else [f"--data_dir={data}"])
  proc, wall = _run([module, *flags, *where, *model,
                     "--input_timeout_secs=3"])
  errors = _error_lines(proc.stderr)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert len(errors) == 1, proc.stderr[-3000:]
  assert str(fifo) in errors[0] and "--input_timeout_secs=3" in errors[0], (
      errors)
  assert 3 <= wall < 3 + START_UP_SECS, wall


# ------------------------------------------------------------ workers
def _free_port():
  """A port nobody listens on (bound, then let go)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _cluster_argv(model, tmp_path, *extra):
  """run_classifier as worker 0 of two, the peer never started."""
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.tsv").write_text("a b\t1\nb c\t0\n", encoding="utf-8")
  peer = f"127.0.0.1:{_free_port()}"
  tf_config = json.dumps({
      "cluster": {"worker": [f"127.0.0.1:{_free_port()}", peer]},
      "task": {"type": "worker", "index": 0}})
  argv = ["albert_tf.run_classifier", "--task_name=sentiment",
          f"--data_dir={data}", "--do_train", *model,
          "--distribution_strategy=multi_worker_mirrored", *extra]
  return argv, tf_config, peer


def test_missing_worker_ends_within_worker_timeout(model, tmp_path):
  argv, tf_config, peer = _cluster_argv(model, tmp_path,
                                        "--worker_timeout_secs=3")
  proc, wall = _run(argv, TF_CONFIG=tf_config)
  errors = _error_lines(proc.stderr)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert len(errors) == 1, proc.stderr[-3000:]
  assert f"worker {peer}" in errors[0], errors
  assert "--worker_timeout_secs=3" in errors[0], errors
  assert f"waiting for worker {peer} (1 of 1 peer(s) not up" in proc.stderr
  assert 3 <= wall < 3 + START_UP_SECS, wall


def test_sigterm_ends_the_wait_for_a_worker(model, tmp_path):
  argv, tf_config, peer = _cluster_argv(model, tmp_path)  # 600 s default
  proc = cli_runner.start_module(argv, cwd=REPO,
                                 env=_env(TF_CONFIG=tf_config))
  try:
    deadline = time.monotonic() + START_UP_SECS + 30
    while f"waiting for worker {peer}" not in proc.output()[1]:
      assert proc.poll() is None, proc.output()[1][-3000:]
      assert time.monotonic() < deadline, proc.output()[1][-3000:]
      time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stderr = proc.communicate(timeout=30)[1]
  finally:
    proc.kill()
  assert proc.returncode == 143, stderr[-3000:]
  assert _error_lines(stderr) == [
      f"error: stopped by SIGTERM while waiting for worker {peer}"], (
          stderr[-3000:])
