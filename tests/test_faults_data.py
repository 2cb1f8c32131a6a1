"""Faults on the data path, one table row each: data prep -> pretraining.

Each row makes one fault (a truncated .gz corpus, a killed data prep run, a
hidden partial shard, a manifest of other lengths, empty, corrupt or
blocking shards, ...) and states what the user must see: an error whose text names the file
or directory and the flag that changes it, or a counted skip. Tiny inputs:
60 made-up documents, a 60-piece SentencePiece model trained here,
--dupe_factor=1, --max_seq_length=32, and pretraining steps of a 2-layer
model. Rows marked "cli" run the command line and want exactly one
`error:` line on stderr and a non-zero exit; the others call the Python API.
"""

import dataclasses
import gzip
import json
import logging
import os
import pathlib
import random
import re
import shutil
import struct
import subprocess
import sys
import zlib
from typing import Callable, Optional

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data import input_timeout
from albert_tf.data import pretraining_dataset
from albert_tf.data import record_checks
from albert_tf.data import tokenization
from albert_tf import run_pretraining as rp
from data_prep import instances as inst
from data_prep import outputs
from data_prep import pipeline
from tests import cli_runner
from tests.fixtures_data import fault_rows
from tests.pretraining_fixtures import random_example, write_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ, PRED = 32, 5
NUM_DOCUMENTS = 60
SUBPROCESS_TIMEOUT = 120  # a hang (e.g. training on empty shards) fails


# ------------------------------------------------------------ shared inputs
def _documents(seed=7, num=NUM_DOCUMENTS):
  rng = random.Random(seed)
  syllables = ["ka", "to", "ri", "mo", "su", "ne", "la", "pi", "do", "ve",
               "zu", "ha", "me", "no", "ba", "ti"]
  words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
           for _ in range(150)]
  sentence = lambda: " ".join(rng.choice(words)
                              for _ in range(rng.randint(4, 12))) + "."
  return [[sentence() for _ in range(rng.randint(2, 8))] for _ in range(num)]


def _corpus_text(documents):
  return "\n\n".join("\n".join(d) for d in documents) + "\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  """Corpus, SentencePiece models and one complete data prep output."""
  directory = tmp_path_factory.mktemp("faults_data")
  corpus = directory / "corpus.txt"
  corpus.write_text(_corpus_text(_documents()), encoding="utf-8")
  from data_prep import train_vocab
  spm = train_vocab.train_sentencepiece(
      str(corpus), str(directory / "spm"), vocab_size=60,
      character_coverage=1.0, num_threads=1)
  other_spm = train_vocab.train_sentencepiece(
      str(corpus), str(directory / "other"), vocab_size=50,
      character_coverage=1.0, num_threads=1)
  records = directory / "records"
  summary = _data_prep(str(corpus), str(records), spm)
  return dict(dir=directory, corpus=str(corpus), spm=spm, other_spm=other_spm,
              records=str(records), summary=summary,
              config=write_config(directory / "config.json"))


def _data_prep(input_file, output_dir, spm, **kwargs):
  return pipeline.run_pipeline(
      input_file, output_dir, spm_model_file=spm,
      options=inst.InstanceOptions(max_seq_length=SEQ,
                                   max_predictions_per_seq=PRED),
      dupe_factor=1, num_shards=2, pipeline_args=["--runner=DirectRunner"],
      **kwargs)


def _run_cli(module, *args, fresh=False):
  # `python -m`, forked from a zygote that imported TF (tests/cli_runner.py)
  # unless fresh.
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  return cli_runner.run_module([module, *map(str, args)], cwd=ROOT, env=env,
                               timeout=SUBPROCESS_TIMEOUT, fresh=fresh)


def _data_prep_argv(input_file, output_dir, spm, *extra):
  return [f"--input_file={input_file}", f"--output_dir={output_dir}",
          f"--spm_model_file={spm}", f"--max_seq_length={SEQ}",
          f"--max_predictions_per_seq={PRED}", "--dupe_factor=1",
          "--num_shards=2", *extra]


def _pretrain_argv(b, input_glob, out, *extra, seq=SEQ, pred=PRED):
  return [f"--albert_config_file={b['config']}", f"--input_file={input_glob}",
          f"--output_dir={out}", "--do_train", f"--max_seq_length={seq}",
          f"--max_predictions_per_seq={pred}", "--train_batch_size=4",
          "--num_train_steps=1", "--num_warmup_steps=1",
          "--save_checkpoints_steps=1", "--iterations_per_loop=1",
          "--log_steps=1", *extra]


def _copy_records(b, tmp_path):
  target = tmp_path / "records"
  shutil.copytree(b["records"], target)
  return target


def _shards(directory):
  return sorted(str(p) for p in directory.glob("pretrain-*.tfrecord"))


# ---------------------------------------------------------------- the rows
@dataclasses.dataclass
class Outcome:
  """What a row's action gave: an exception, a CLI result, logs, values."""
  error: Optional[BaseException] = None
  cli: Optional[subprocess.CompletedProcess] = None
  logs: str = ""
  value: object = None
  context: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Fault:
  name: str
  how: str  # how the fault is made
  must_see: str  # what the user must see
  act: Callable  # (base, tmp_path, caplog) -> Outcome
  error: Optional[str] = None  # regex the error text must match
  check: Optional[Callable] = None  # (base, tmp_path, Outcome) -> None


def _api(fn):
  """act() for a Python call: its exception (if any), logs and value."""
  def act(b, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    outcome = Outcome()
    try:
      outcome.value = fn(b, tmp_path, outcome.context)
    except ValueError as e:
      outcome.error = e
    outcome.logs = caplog.text
    return outcome
  return act


def _cli(make_argv, fresh=False):
  """fresh: a new interpreter even for albert_tf (how the process ends is
  part of the row)."""
  def act(b, tmp_path, caplog):  # pylint: disable=unused-argument
    outcome = Outcome()
    module, argv = make_argv(b, tmp_path, outcome.context)
    outcome.cli = _run_cli(module, *argv, fresh=fresh)
    return outcome
  return act


# --- 1. truncated .gz input
def _truncated_gz(b, tmp_path, context):
  data = gzip.compress(open(b["corpus"], "rb").read())
  truncated = data[:len(data) // 2]
  path = tmp_path / "part-1.txt.gz"
  path.write_bytes(truncated)
  context["truncated"] = str(path)
  # What is left: the complete documents in the decompressible prefix.
  prefix = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(truncated)
  context["complete_documents"] = prefix.count(b"\n\n")
  context["out"] = tmp_path / "out"
  return f"{b['corpus']},{path}"


def _truncated_gz_cli(b, tmp_path, context):
  inputs = _truncated_gz(b, tmp_path, context)
  return "data_prep.create_pretraining_data", _data_prep_argv(
      inputs, context["out"], b["spm"])


def _no_markers(b, tmp_path, outcome):  # pylint: disable=unused-argument
  out = outcome.context["out"]
  assert not os.path.exists(os.path.join(out, F.SUCCESS_FILE))
  assert not os.path.exists(os.path.join(out, F.MANIFEST_FILE))


def _skip_bad_inputs(b, tmp_path, context):
  inputs = _truncated_gz(b, tmp_path, context)
  return _data_prep(inputs, str(context["out"]), b["spm"],
                    skip_bad_inputs=True)


def _check_skip_counted(b, tmp_path, outcome):  # pylint: disable=unused-argument
  ctx = outcome.context
  with open(os.path.join(ctx["out"], F.MANIFEST_FILE)) as f:
    manifest = json.load(f)
  assert os.path.exists(os.path.join(ctx["out"], F.SUCCESS_FILE))
  assert manifest["inputs_skipped"] == 1
  entry = {i["path"]: i for i in manifest["inputs"]}[ctx["truncated"]]
  assert "EOFError" in entry["error"]
  assert entry["documents"] == ctx["complete_documents"] > 0
  assert entry["bytes"] == os.path.getsize(ctx["truncated"])
  assert manifest["documents"]["read"] == (NUM_DOCUMENTS +
                                           ctx["complete_documents"])
  assert ctx["truncated"] in outcome.logs and "skip" in outcome.logs


# --- 3. zero instances
def _zero_instances_cli(b, tmp_path, context):
  corpus = tmp_path / "one_sentence_each.txt"
  # One sentence per document: no sentence pair, no instance.
  corpus.write_text(_corpus_text([d[:1] for d in _documents()]),
                    encoding="utf-8")
  context["out"] = tmp_path / "out"
  return "data_prep.create_pretraining_data", _data_prep_argv(
      corpus, context["out"], b["spm"])


def _empty_corpus(b, tmp_path, context):
  corpus = tmp_path / "empty.txt"
  corpus.write_text("", encoding="utf-8")
  context["out"] = tmp_path / "out"
  return _data_prep(str(corpus), str(context["out"]), b["spm"])


# --- 4. a corpus without blank lines: one huge document
def _long_document(b, tmp_path, context):
  corpus = tmp_path / "no_blank_lines.txt"
  documents = _documents()
  corpus.write_text(_corpus_text(documents[:20]) + "\n\n" + "\n".join(
      s for d in documents[20:] for s in d) + "\n", encoding="utf-8")
  context["out"] = tmp_path / "out"
  return _data_prep(str(corpus), str(context["out"]), b["spm"],
                    max_sentences_per_document=50)


def _check_long_document(b, tmp_path, outcome):  # pylint: disable=unused-argument
  with open(os.path.join(outcome.context["out"], F.MANIFEST_FILE)) as f:
    assert json.load(f)["documents_over_max_sentences"] == 1
  assert "--max_sentences_per_document=50" in outcome.logs
  assert "blank line" in outcome.logs


# --- 5. killed data prep: shards, no _SUCCESS / manifest
def _killed_data_prep_cli(b, tmp_path, context):
  records = _copy_records(b, tmp_path)
  os.remove(records / F.SUCCESS_FILE)
  os.remove(records / F.MANIFEST_FILE)
  context["records"] = str(records)
  return "albert_tf.run_pretraining", _pretrain_argv(
      b, f"{records}/*.tfrecord", tmp_path / "pretrain",
      f"--spm_model_file={b['spm']}")


def _killed_before_manifest(b, tmp_path, context):  # pylint: disable=unused-argument
  records = _copy_records(b, tmp_path)
  os.remove(records / F.MANIFEST_FILE)  # killed between the two markers
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{records}/*.tfrecord", tmp_path / "pretrain")))


# --- 6. a hidden partial shard next to the complete ones
def _hidden_tmp_shard(b, tmp_path, context):
  records = _copy_records(b, tmp_path)
  shard = _shards(records)[0]
  data = open(shard, "rb").read()
  hidden = records / f".tmp-0123abcd-{os.path.basename(shard)}"
  hidden.write_bytes(data[:len(data) // 2 + 7])  # cut mid-record
  context["hidden"] = str(hidden)
  context["files"] = record_checks.expand_input_files(f"{records}/*.tfrecord")
  context["out"] = tmp_path / "pretrain"
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{records}/*.tfrecord", context["out"],
      f"--spm_model_file={b['spm']}")))


def _check_hidden_not_globbed(b, tmp_path, outcome):  # pylint: disable=unused-argument
  assert outcome.value["global_step"] == 1
  files = outcome.context["files"]
  assert outcome.context["hidden"] not in files
  assert [os.path.basename(f) for f in files] == [
      "pretrain-00000-of-00002.tfrecord", "pretrain-00001-of-00002.tfrecord"]


# --- 7-9. the manifest disagrees with the run or with the files
def _seq_length_mismatch(b, tmp_path, context):  # pylint: disable=unused-argument
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{b['records']}/*.tfrecord", tmp_path / "pretrain", seq=64)))


def _max_predictions_mismatch(b, tmp_path, context):  # pylint: disable=unused-argument
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{b['records']}/*.tfrecord", tmp_path / "pretrain", pred=PRED + 1)))


def _tokenizer_mismatch(b, tmp_path, context):  # pylint: disable=unused-argument
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{b['records']}/*.tfrecord", tmp_path / "pretrain",
      f"--spm_model_file={b['other_spm']}")))


def _shard_changed(b, tmp_path, context):  # pylint: disable=unused-argument
  records = _copy_records(b, tmp_path)
  shard = _shards(records)[1]
  data = open(shard, "rb").read()
  with open(shard, "wb") as f:  # truncated at a record boundary: readable
    f.write(data[:_record_offsets(data)[3]])
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{records}/*.tfrecord", tmp_path / "pretrain")))


def _record_offsets(data):
  offsets, offset = [], 0
  while offset < len(data):
    offsets.append(offset)
    offset += 16 + struct.unpack("<Q", data[offset:offset + 8])[0]
  return offsets


# --- 10. all-empty shards (what data prep wrote for a zero-instance corpus)
def _all_empty_shards_cli(b, tmp_path, context):  # pylint: disable=unused-argument
  records = tmp_path / "records"
  records.mkdir()
  for i in range(2):
    (records / f"pretrain-0000{i}-of-00002.tfrecord").write_bytes(b"")
  return "albert_tf.run_pretraining", _pretrain_argv(
      b, f"{records}/*.tfrecord", tmp_path / "pretrain",
      "--allow_incomplete_input")


# --- a shard whose reads block: a named pipe that no one writes
def _blocking_shard_cli(b, tmp_path, context):
  records = tmp_path / "records"
  records.mkdir()
  pipe = records / "pretrain-00000-of-00001.tfrecord"
  os.mkfifo(pipe)  # no writer: opening it for reading blocks for ever
  context["pipe"] = str(pipe)
  return "albert_tf.run_pretraining", _pretrain_argv(
      b, f"{records}/*.tfrecord", tmp_path / "pretrain",
      "--allow_incomplete_input", "--input_timeout_secs=2")


# --- an --output_dir that is a file
def _output_dir_is_a_file_cli(b, tmp_path, context):
  (tmp_path / "out").write_text("notes\n")
  context["out"] = tmp_path / "out"
  return "data_prep.create_pretraining_data", _data_prep_argv(
      b["corpus"], tmp_path / "out", b["spm"])


def _file_untouched(b, tmp_path, outcome):  # pylint: disable=unused-argument
  assert outcome.context["out"].read_text() == "notes\n"


# --- a data prep input whose reads block: a named pipe that no one writes
def _blocking_corpus_cli(b, tmp_path, context):
  pipe = tmp_path / "corpus-part-2.txt"
  os.mkfifo(pipe)
  context["pipe"] = str(pipe)
  context["out"] = tmp_path / "out"
  return "data_prep.create_pretraining_data", _data_prep_argv(
      f"{b['corpus']},{pipe}", context["out"], b["spm"]) + [
          "--input_timeout_secs=2"]


def _check_pipe_named_nothing_written(b, tmp_path, outcome):  # pylint: disable=unused-argument
  assert outcome.context["pipe"] in outcome.cli.stderr
  assert not os.path.exists(outcome.context["out"])


def _check_pipe_named(b, tmp_path, outcome):  # pylint: disable=unused-argument
  assert outcome.context["pipe"] in outcome.cli.stderr
  assert not (tmp_path / "pretrain" / "train").exists()


# --- a data prep run really killed (SIGKILL), then pretraining on its folder
def _sigkilled_data_prep(b, tmp_path, context):
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  out = tmp_path / "records"
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  child = subprocess.Popen(
      [sys.executable, "-m", "data_prep.create_pretraining_data",
       *_data_prep_argv(b["corpus"], out, b["spm"])], cwd=ROOT, env=env,
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
      start_new_session=True)  # its own group: Beam workers die with it
  try:
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT
    while not out.exists():  # made before the pipeline starts
      assert child.poll() is None, child.stderr.read().decode()[-2000:]
      assert time.monotonic() < deadline
      time.sleep(0.005)
  finally:
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
  context["returncode"] = child.returncode
  context["left"] = sorted(os.listdir(out))
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, f"{out}/*.tfrecord", tmp_path / "pretrain")))


def _check_killed(b, tmp_path, outcome):  # pylint: disable=unused-argument
  assert outcome.context["returncode"] == -9, outcome.context
  assert F.MANIFEST_FILE not in outcome.context["left"]


# --- 11-12. --skip_corrupt_records: records that do not parse, or cannot
# be read, in files of another tool (no manifest)
FIX_SEQ, FIX_PRED = 16, 4


def _corrupt_records(tmp_path, context):
  """Two files with a known number of bad records; returns the glob."""
  records = tmp_path / "foreign"
  records.mkdir()
  rng = np.random.default_rng(0)
  unparsable = [
      tf.train.Example().SerializeToString(),  # no features
      b"\xff\xfe not a tf.train.Example",
      random_example(rng, seq=FIX_SEQ * 2).SerializeToString(),  # lengths
  ]
  a = records / "a.tfrecord"
  with tf.io.TFRecordWriter(str(a)) as w:
    for i in range(20):
      w.write(random_example(rng, FIX_SEQ, FIX_PRED).SerializeToString())
      if i in (4, 9, 14):
        w.write(unparsable[(i - 4) // 5])
  b_file = records / "b.tfrecord"
  with tf.io.TFRecordWriter(str(b_file)) as w:
    for _ in range(16):
      w.write(random_example(rng, FIX_SEQ, FIX_PRED).SerializeToString())
  data = bytearray(b_file.read_bytes())
  data[_record_offsets(bytes(data))[10] + 20] ^= 0xFF  # record 10's data
  b_file.write_bytes(bytes(data))
  # a: 23 records, 3 unparsable; b: 16 records, 6 from the damaged one on.
  context["expected"] = {str(a): (23, 3), str(b_file): (16, 6)}
  return f"{records}/*.tfrecord"


def _skip_corrupt(b, tmp_path, context, *extra):
  pattern = _corrupt_records(tmp_path, context)
  context["out"] = tmp_path / "pretrain"
  return rp.run(rp.params_from_argv(_pretrain_argv(
      b, pattern, context["out"], "--skip_corrupt_records",
      "--allow_incomplete_input", *extra, seq=FIX_SEQ, pred=FIX_PRED)))


def _check_skip_corrupt_counted(b, tmp_path, outcome):  # pylint: disable=unused-argument
  ctx = outcome.context
  assert outcome.value["global_step"] == 1
  with open(ctx["out"] / F.SKIPPED_RECORDS_FILE) as f:
    report = json.load(f)
  got = {p: (r["records"], r["skipped"]) for p, r in report["files"].items()}
  assert got == ctx["expected"]
  assert (report["records"], report["skipped"]) == (39, 9)
  for path, (records, skipped) in ctx["expected"].items():
    # The count is what the training input really drops.
    kept = pretraining_dataset.make_dataset([path], 1, FIX_SEQ, FIX_PRED, is_training=False,
                           skip_corrupt_records=True)
    assert sum(1 for _ in kept) == records - skipped
    assert f"{path}: {skipped} of {records} records skipped" in outcome.logs
  # And in TensorBoard, read back with tensorboard's own reader.
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  acc = event_accumulator.EventAccumulator(str(ctx["out"] / "train"))
  acc.Reload()
  events = acc.Tensors("skipped_records")
  assert [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in events
          ] == [(0, 9.0)]


FAULTS = [
    Fault("truncated_gz",
          "a .gz corpus cut in half, next to a good file (cli)",
          "error naming the file and --skip_bad_inputs; no _SUCCESS/manifest",
          _cli(_truncated_gz_cli),
          error=r"part-1\.txt\.gz' is truncated or corrupt \(EOFError.*"
                r"--skip_bad_inputs", check=_no_markers),
    Fault("skip_bad_inputs",
          "the same with --skip_bad_inputs",
          "a counted skip: manifest inputs_skipped=1 with the file, its "
          "error and the complete documents kept; a log line",
          _api(_skip_bad_inputs), check=_check_skip_counted),
    Fault("zero_instances",
          "a corpus of one-sentence documents (cli)",
          "error: no instances ...; no _SUCCESS/manifest",
          _cli(_zero_instances_cli),
          error=r"no instances from the 60 document\(s\) read \(skipped: 60 "
                r"single_sentence\)", check=_no_markers),
    Fault("empty_corpus",
          "an empty corpus file",
          "error: no instances: no documents ...; no _SUCCESS/manifest",
          _api(_empty_corpus),
          error=r"no instances: no documents in 1 input file\(s\) .*empty\.txt"
                r".*the input is empty", check=_no_markers),
    Fault("no_blank_lines",
          "40 documents without blank lines between them",
          "a warning suggesting blank lines; counted in the manifest",
          _api(_long_document), check=_check_long_document),
    Fault("killed_data_prep",
          "shards without _SUCCESS and manifest.json (cli)",
          "one line naming the directory and the missing markers",
          _cli(_killed_data_prep_cli),
          error=r"records: no _SUCCESS and no manifest\.json \(the files "
                r"data prep writes last\) beside data prep's "
                r"pretrain-00000-of-00002\.tfrecord, .* killed, failed or is "
                r"still writing.*--allow_incomplete_input to read the files "
                r"as they are$"),
    Fault("killed_before_manifest",
          "shards and _SUCCESS, no manifest.json",
          "error naming the directory and manifest.json",
          _api(_killed_before_manifest),
          error=r"records: no manifest\.json \("),
    Fault("hidden_tmp_shard",
          "a partial .tmp-* shard next to the complete ones",
          "not globbed: training reads the two listed shards",
          _api(_hidden_tmp_shard), check=_check_hidden_not_globbed),
    Fault("seq_length_mismatch",
          "records of --max_seq_length=32, pretraining with 64",
          "error naming manifest.json and both lengths",
          _api(_seq_length_mismatch),
          error=r"manifest\.json: the records were written with "
                r"--max_seq_length=32 but this run has --max_seq_length=64"),
    Fault("max_predictions_mismatch",
          "records of --max_predictions_per_seq=5, pretraining with 6",
          "error naming manifest.json and both values",
          _api(_max_predictions_mismatch),
          error=r"manifest\.json: the records were written with "
                r"--max_predictions_per_seq=5 but this run has "
                r"--max_predictions_per_seq=6"),
    Fault("tokenizer_mismatch",
          "pretraining with another --spm_model_file",
          "error naming manifest.json and the two models",
          _api(_tokenizer_mismatch),
          error=r"manifest\.json: the records were tokenized with .*spm\.model"
                r".*not with --spm_model_file=.*other\.model"),
    Fault("shard_changed",
          "a shard cut short after data prep",
          "error naming the shard, its size and the manifest's",
          _api(_shard_changed),
          error=r"pretrain-00001-of-00002\.tfrecord has \d+ bytes but .*"
                r"manifest\.json says \d+"),
    Fault("all_empty_shards",
          "empty shards only, --allow_incomplete_input (cli, with timeout)",
          "one line: no records at all (not a hang)",
          _cli(_all_empty_shards_cli),
          error=r"no records at all in the 2 file\(s\) of --input_file"),
    Fault("blocking_shard",
          "a named pipe without a writer as the only shard, "
          "--allow_incomplete_input --input_timeout_secs=2 (cli)",
          "one line naming the file and --input_timeout_secs after 2 s (not "
          "a hang); nothing written",
          # A fresh interpreter: it must exit although a thread is stuck in
          # a read, which a forked child (os._exit) would not show.
          _cli(_blocking_shard_cli, fresh=True),
          error=r"no record from .*pretrain-00000-of-00001\.tfrecord within "
                r"--input_timeout_secs=2 seconds", check=_check_pipe_named),
    Fault("output_dir_is_a_file",
          "data prep with --output_dir naming an existing file (cli)",
          "one line (before, a Beam traceback from WriteShards); the file "
          "untouched",
          _cli(_output_dir_is_a_file_cli),
          error=r"is a file, not a folder, --output_dir",
          check=_file_untouched),
    Fault("blocking_corpus",
          "data prep with a named pipe without a writer among its inputs, "
          "--input_timeout_secs=2 (cli)",
          "one line naming the file and --input_timeout_secs after 2 s (not "
          "a hang); no output_dir",
          _cli(_blocking_corpus_cli),
          error=r"no record from --input_file .*corpus-part-2\.txt within "
                r"--input_timeout_secs=2 seconds",
          check=_check_pipe_named_nothing_written),
    Fault("sigkilled_data_prep",
          "data prep SIGKILLed as soon as its output_dir appears, then "
          "pretraining on that folder",
          "error naming the folder and the missing marker",
          _api(_sigkilled_data_prep),
          error=r"records.*no (_SUCCESS|manifest\.json)",
          check=_check_killed),
    Fault("skip_corrupt_records",
          "3 unparsable records in one file, a damaged one (then 5 more) in "
          "another; --skip_corrupt_records --max_corrupt_fraction=0.5",
          "exactly 3 and 6 skipped records, per file in skipped_records.json"
          " and in the log",
          _api(lambda b, t, c: _skip_corrupt(b, t, c,
                                             "--max_corrupt_fraction=0.5")),
          check=_check_skip_corrupt_counted),
    Fault("over_max_corrupt_fraction",
          "the same files with the default --max_corrupt_fraction=0.001",
          "error with the count and the flag",
          _api(_skip_corrupt),
          error=r"--skip_corrupt_records: 9 of 39 records .* more than "
                r"--max_corrupt_fraction=0\.001"),
]


# The row that waits out an input timeout in a fresh interpreter:
# `make test-slow` (tests/fixtures_data.fault_rows).
SLOW_ROWS = {
    "blocking_shard",
}


@pytest.mark.parametrize(
    "fault", fault_rows(FAULTS, SLOW_ROWS, name=lambda f: f.name))
def test_fault(fault, base, tmp_path, caplog):  # pylint: disable=redefined-outer-name
  outcome = fault.act(base, tmp_path, caplog)
  if outcome.cli is not None:
    result = outcome.cli
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    if fault.error:
      assert result.returncode != 0, result.stderr[-3000:]
      assert len(errors) == 1, result.stderr[-3000:]
      assert "Traceback" not in result.stderr, result.stderr[-3000:]
      assert re.search(fault.error, errors[0]), errors[0]
    else:
      assert result.returncode == 0, result.stderr[-3000:]
  elif fault.error:
    assert outcome.error is not None, f"no error; expected /{fault.error}/"
    assert re.search(fault.error, str(outcome.error)), str(
        outcome.error)
    assert "\n" not in str(outcome.error)
  else:
    assert outcome.error is None, outcome.error
  if fault.check:
    fault.check(base, tmp_path, outcome)


def test_manifest_of_a_complete_run(base):  # pylint: disable=redefined-outer-name
  """The hand-off record: inputs, counts, shards, flags, tokenizer hash."""
  records = base["records"]
  with open(os.path.join(records, F.MANIFEST_FILE)) as f:
    manifest = json.load(f)
  assert (manifest["format"], manifest["version"]) == (
      "albert_tf.pretraining_records", 1) == (F.MANIFEST_FORMAT,
                                              F.MANIFEST_VERSION)
  assert manifest["inputs"] == [{
      "path": base["corpus"], "bytes": os.path.getsize(base["corpus"]),
      "documents": NUM_DOCUMENTS, "error": None}]
  assert manifest["documents"] == base["summary"]["documents"]
  assert manifest["documents"]["read"] == NUM_DOCUMENTS
  shards = {os.path.basename(p): p
            for p in _shards(pathlib.Path(records))}
  assert set(manifest["shards"]) == set(shards)
  for name, entry in manifest["shards"].items():
    assert entry["bytes"] == os.path.getsize(shards[name])
    assert entry["records"] == sum(
        1 for _ in tf.data.TFRecordDataset(shards[name]))
  assert manifest["records"] == manifest["instances"] == base["summary"][
      "instances"] > 0
  assert manifest["flags"]["max_seq_length"] == SEQ
  assert manifest["flags"]["max_predictions_per_seq"] == PRED
  assert manifest["flags"]["dupe_factor"] == 1
  assert manifest["tokenizer"]["sha256"] == tokenization.file_sha256(base["spm"])
  # Written last, under a temporary name first: nothing else is left.
  assert sorted(os.listdir(records)) == sorted(
      [F.MANIFEST_FILE, F.SUCCESS_FILE, outputs.SUMMARY_FILE, *shards])


def test_input_timeout_counts_from_the_last_progress():
  """Slow but moving input is no error; a stall is, naming what stalled."""
  import time  # pylint: disable=g-import-not-at-top

  def slow(progress):
    for i in range(4):  # 1.2 s in all, 0.3 s between two reads
      progress(f"file {i}")
      time.sleep(0.3)
    return "done"
  assert input_timeout.with_input_timeout(slow, 1.0) == "done"

  def stalls(progress):
    progress("file 0")
    progress("file 1")
    time.sleep(3)
  started = time.monotonic()
  with pytest.raises(input_timeout.InputTimeoutError, match=r"no record from file 1 "
                     r"within --input_timeout_secs=0\.5 seconds"):
    input_timeout.with_input_timeout(stalls, 0.5)
  assert time.monotonic() - started < 2


def test_a_workers_io_error_is_one_line_naming_the_path():
  """A full disk in a Beam worker reaches the command as the runner's text
  (here what the DirectRunner raises for an OSError in WriteShards)."""
  from data_prep import pipeline  # pylint: disable=g-import-not-at-top

  class Progress:
    def __enter__(self):
      return self

    def __exit__(self, *exc):
      return False

  def build(p):
    raise RuntimeError("OSError: [Errno 28] No space left on device: "
                       "'/data/out/pretrain-00001-of-00004.tfrecord' "
                       "[while running 'WriteShards/Write']")
  with pytest.raises(ValueError) as error:
    pipeline._run_beam("DirectRunner", None, Progress(), build)  # pylint: disable=protected-access
  assert str(error.value) == (
      "OSError while running the pipeline ([Errno 28] No space left on "
      "device: '/data/out/pretrain-00001-of-00004.tfrecord'): nothing was "
      "marked done; fix it and rerun with --overwrite")
