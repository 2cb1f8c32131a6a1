"""data_prep's command lines as a newcomer meets them.

Runs `python -m data_prep.create_pretraining_data` and `python -m
data_prep.train_vocab` as subprocesses on a tiny synthetic corpus and a
60-piece SentencePiece model: a mistake is one `error:` line on stderr (no
traceback, no --help dump) and nothing is written; --direct_num_workers=2
alone runs the DirectRunner with worker processes, without trying the
PrismRunner; --output_file writes one TFRecord file holding every record.
The flag parser itself is checked in-process: Beam pipeline options pass by
their Beam names, a misspelt flag stops with one line.
"""

import json
import os
import random
import re
import struct

import pytest

from tests import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPD = "data_prep.create_pretraining_data"
TRAIN_VOCAB = "data_prep.train_vocab"
VOCAB_SIZE = 60


def _run(module, *args):
  # `python -m`, forked from a zygote that imported TF (tests/cli_runner.py).
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  return cli_runner.run_module([module, *map(str, args)], cwd=ROOT, env=env,
                               timeout=120)


def _error_lines(stderr):
  return [line for line in stderr.splitlines() if line.startswith("error:")]


def _assert_one_error_line(result, *fragments):
  assert result.returncode != 0, result.stderr
  assert "Traceback" not in result.stderr, result.stderr
  assert "--helpfull" not in result.stderr  # absl's usage dump
  errors = _error_lines(result.stderr)
  assert len(errors) == 1, result.stderr
  for fragment in fragments:
    assert fragment in errors[0], errors[0]
  return errors[0]


def _count_tfrecords(path):
  """Records in a TFRecord file, from its framing (length, crc, data, crc)."""
  count = 0
  with open(path, "rb") as f:
    while True:
      header = f.read(12)
      if not header:
        return count
      (length,) = struct.unpack("<Q", header[:8])
      f.seek(length + 4, os.SEEK_CUR)
      count += 1


def _read_tfrecords(path):
  records = []
  with open(path, "rb") as f:
    while header := f.read(12):
      (length,) = struct.unpack("<Q", header[:8])
      records.append(f.read(length))
      f.read(4)
  return records


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """(corpus path, spm model path): 60 documents of made-up words."""
  directory = tmp_path_factory.mktemp("cli_data")
  rng = random.Random(7)
  syllables = ["ka", "to", "ri", "mo", "su", "ne", "la", "pi", "do", "ve",
               "zu", "ha", "me", "no", "ba", "ti"]
  words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3)))
           for _ in range(150)]
  documents = []
  for _ in range(60):
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 12)))
                 + "." for _ in range(rng.randint(2, 8))]
    documents.append("\n".join(sentences))
  corpus = directory / "corpus.txt"
  corpus.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
  from data_prep import train_vocab
  model = train_vocab.train_sentencepiece(
      str(corpus), str(directory / "spm"), vocab_size=VOCAB_SIZE,
      character_coverage=1.0, num_threads=1)
  return str(corpus), model


def _cpd_args(data, **overrides):  # pylint: disable=redefined-outer-name
  flags = {"input_file": data[0], "spm_model_file": data[1],
           "max_seq_length": 32, "max_predictions_per_seq": 5,
           "dupe_factor": 1}
  flags.update(overrides)
  return [f"--{k}={v}" for k, v in flags.items()]


@pytest.fixture(scope="module")
def two_workers_run(data, tmp_path_factory):  # pylint: disable=redefined-outer-name
  """(output dir, completed process) of a run with only --direct_num_workers."""
  output_dir = tmp_path_factory.mktemp("two_workers") / "out"
  result = _run(CPD, *_cpd_args(data, output_dir=output_dir),
                "--direct_num_workers=2")
  return output_dir, result


@pytest.mark.parametrize("bad_flag, fragments", [
    ("--max_seq_lenght=64",
     ["unknown flag --max_seq_lenght", "did you mean --max_seq_length?"]),
    ("--direct_num_workerz=2",
     ["unknown flag --direct_num_workerz", "did you mean --direct_num_workers?"]),
    ("--max_seq_length=-3", ["'-3'", "--max_seq_length"]),
    ("--dupe_factor=abc", ["'abc'", "--dupe_factor"]),
    ("--direct_running_mode=fast", ["'fast'", "--direct_running_mode"]),
])
def test_bad_flag_is_one_line_and_writes_nothing(data, tmp_path, bad_flag,  # pylint: disable=redefined-outer-name
                                                 fragments):
  output_dir = tmp_path / "out"
  result = _run(CPD, *_cpd_args(data, output_dir=output_dir), bad_flag)
  line = _assert_one_error_line(result, *fragments)
  # Flags are checked before Beam is set up: the line is all there is.
  assert result.stderr.strip() == line
  assert not output_dir.exists()
  assert not result.stdout


def test_two_workers_without_runner_use_direct_runner_processes(
    two_workers_run):
  output_dir, result = two_workers_run
  assert result.returncode == 0, result.stderr
  lines = [l for l in result.stderr.splitlines() if "Beam runner:" in l]
  assert len(lines) == 1, result.stderr
  assert "DirectRunner" in lines[0]
  assert "direct_running_mode=multi_processing" in lines[0]
  assert "direct_num_workers=2" in lines[0]
  # No attempt to fetch and start the PrismRunner binary (Beam's log lines).
  assert "Running pipeline with PrismRunner" not in result.stderr
  assert "Downloading prism" not in result.stderr
  summary = json.loads(result.stdout)
  assert summary["instances"] > 50
  assert os.path.exists(output_dir / "_SUCCESS")
  shards = sorted(p for p in os.listdir(output_dir) if p.endswith(".tfrecord"))
  assert len(shards) == 4
  assert sum(_count_tfrecords(output_dir / s) for s in shards) == (
      summary["instances"])


@pytest.mark.parametrize("flag, value, fragment", [
    ("input_file", "{tmp}/missing-*.txt", "--input_file"),
    ("spm_model_file", "{tmp}/missing.model", "--spm_model_file"),
])
def test_missing_file_is_one_line(data, tmp_path, flag, value, fragment):  # pylint: disable=redefined-outer-name
  value = value.format(tmp=tmp_path)
  output_dir = tmp_path / "out"
  result = _run(CPD, *_cpd_args(data, output_dir=output_dir, **{flag: value}))
  _assert_one_error_line(result, value, fragment)
  assert not output_dir.exists()


def test_verbose_shows_the_traceback(data, tmp_path):  # pylint: disable=redefined-outer-name
  result = _run(CPD, *_cpd_args(data, output_dir=tmp_path / "out",
                                input_file=tmp_path / "missing.txt"),
                "--verbose")
  assert result.returncode != 0
  assert "Traceback" in result.stderr and "missing.txt" in result.stderr


def test_output_file_writes_one_file_with_all_records(data, tmp_path,  # pylint: disable=redefined-outer-name
                                                      two_workers_run):
  target = tmp_path / "records" / "x.tfrecord"
  result = _run(CPD, *_cpd_args(data, output_file=target),
                "--input_file_mode=r")
  assert result.returncode == 0, result.stderr
  assert "--input_file_mode is ignored" in result.stderr
  summary = json.loads(result.stdout)
  assert os.listdir(target.parent) == ["x.tfrecord"]  # no staging left over
  assert _count_tfrecords(target) == summary["instances"] > 50
  # The same records as the --output_dir run, now in one file.
  output_dir = two_workers_run[0]
  shards = [output_dir / p for p in os.listdir(output_dir)
            if p.endswith(".tfrecord")]
  assert sorted(_read_tfrecords(target)) == sorted(
      r for s in shards for r in _read_tfrecords(s))
  # An existing file is kept unless --overwrite; both outputs is an error.
  again = _run(CPD, *_cpd_args(data, output_file=target))
  _assert_one_error_line(again, "already exists", "--overwrite")
  both = _run(CPD, *_cpd_args(data, output_file=target,
                              output_dir=tmp_path / "dir"))
  _assert_one_error_line(both, "--output_dir and --output_file")
  assert not (tmp_path / "dir").exists()


_IMPORTS_AFTER = """
import runpy, sys
sys.argv = ["create_pretraining_data", *sys.argv[1:]]
try:
  runpy.run_module("data_prep.create_pretraining_data", run_name="__main__")
finally:
  print("tensorflow modules:", sum(m.split(".")[0] == "tensorflow"
                                   for m in sys.modules), file=sys.stderr)
"""


def test_the_command_imports_no_tensorflow(data, tmp_path):  # pylint: disable=redefined-outer-name
  """Data prep is TF-free in its own process too, not only in its workers
  (the import alone costs several seconds of CPU per run)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  proc = subprocess.run(
      [sys.executable, "-c", _IMPORTS_AFTER,
       *_cpd_args(data, output_dir=tmp_path / "out")], cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
      timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout)["instances"] > 50
  assert "tensorflow modules: 0" in proc.stderr.splitlines()[-1]


def test_train_vocab_too_large_names_the_supported_size(data, tmp_path):  # pylint: disable=redefined-outer-name
  prefix = tmp_path / "vocab" / "spm"
  args = [f"--input={data[0]}", f"--model_prefix={prefix}",
          "--character_coverage=1.0", "--num_threads=1"]
  result = _run(TRAIN_VOCAB, *args, "--vocab_size=5000")
  line = _assert_one_error_line(result, "5000", "--nohard_vocab_limit")
  # Its progress lines (what it read and sampled), then the one error.
  said = result.stderr.strip().splitlines()
  assert said[-1] == line and said[0].startswith("reading 1 file(s), "), said
  assert said[1].startswith("sampled "), said
  supported = int(re.search(r"--vocab_size=(\d+)", line).group(1))
  assert VOCAB_SIZE <= supported < 5000
  assert f"at most {supported}" in line
  # The size it names works; so does a soft limit.
  assert _run(TRAIN_VOCAB, *args, f"--vocab_size={supported}").returncode == 0
  soft = _run(TRAIN_VOCAB, *args, "--vocab_size=5000", "--nohard_vocab_limit")
  assert soft.returncode == 0, soft.stderr
  assert re.search(r"^trained in \d+ s$", soft.stderr, re.M), soft.stderr
  assert os.path.exists(f"{prefix}.model")


@pytest.mark.parametrize("args, fragment", [
    (["--vocab_sise=50"], "did you mean --vocab_size?"),
    (["--vocab_size=abc"], "--vocab_size"),
    (["--input={tmp}/missing.txt"], "--input"),
])
def test_train_vocab_mistakes_are_one_line(data, tmp_path, args, fragment):  # pylint: disable=redefined-outer-name
  args = [f"--input={data[0]}", f"--model_prefix={tmp_path}/v/spm"] + [
      a.format(tmp=tmp_path) for a in args]
  _assert_one_error_line(_run(TRAIN_VOCAB, *args), fragment)
  assert not (tmp_path / "v").exists()


# ------------------------------------------------ the flag parser, in-process
@pytest.fixture
def cpd_flags():
  """create_pretraining_data with its flags defined on absl's global FLAGS,
  as `python -m` defines them, for one test; they are removed after it."""
  from absl import flags
  from data_prep import create_pretraining_data as cpd
  before = set(flags.FLAGS)
  was_parsed = flags.FLAGS.is_parsed()
  cpd._define_flags()  # pylint: disable=protected-access
  yield cpd
  for name in set(flags.FLAGS) - before:
    delattr(flags.FLAGS, name)
  if not was_parsed:
    flags.FLAGS.unparse_flags()


def test_beam_options_pass_and_misspelt_flags_stop(cpd_flags, capsys):  # pylint: disable=redefined-outer-name
  from absl import flags
  parse = cpd_flags._parse_flags  # pylint: disable=protected-access
  beam = ["--temp_location=/tmp/x", "--project=p", "--runner=DataflowRunner",
          "--region=europe-west1"]
  argv = ["create_pretraining_data", "--input_file=in.txt", "--output_dir=out",
          "--max_seq_length=64", *beam]
  # Beam's options of any runner, by their Beam names, go on to
  # PipelineOptions; the project's flags are read by absl.
  assert parse(argv) == argv[:1] + beam
  assert flags.FLAGS.max_seq_length == 64
  for misspelt, close in (("--max_seq_lenght=32", "max_seq_length"),
                          ("--temp_locaton=/tmp/x", "temp_location")):
    with pytest.raises(SystemExit) as stop:
      parse(argv + [misspelt])
    assert stop.value.code == 2
    name = misspelt[2:].split("=")[0]
    assert capsys.readouterr().err == (
        f"error: unknown flag --{name} (did you mean --{close}?)\n")


def test_train_vocab_sample_is_reproducible(tmp_path):
  """The same corpus, seed and --input_sentence_size give the same pieces and
  scores (SentencePiece's own sampling ignores the seed: 1,204 of 5,000
  pieces differed between two demo runs); another seed samples others."""
  from data_prep import train_vocab  # pylint: disable=g-import-not-at-top
  from tests.fixtures_data import people_daily_subset  # pylint: disable=g-import-not-at-top
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n".join("\n".join(d) for d in people_daily_subset(
      str(tmp_path), 3000)) + "\n", encoding="utf-8")
  lines = sum(1 for l in corpus.open(encoding="utf-8") if l.strip())

  def vocabulary(name, seed):
    model = train_vocab.train_sentencepiece(
        str(corpus), str(tmp_path / name), vocab_size=2000,
        character_coverage=0.99,
        input_sentence_size=lines // 3, num_threads=2, seed=seed)
    sp = spm.SentencePieceProcessor(model_file=model)
    return [(sp.id_to_piece(i), sp.get_score(i))
            for i in range(sp.get_piece_size())]

  first = vocabulary("a", 7)
  assert vocabulary("b", 7) == first
  assert vocabulary("c", 8) != first
  # And in another process, as two runs of the demo are.
  proc = _run(TRAIN_VOCAB, f"--input={corpus}", f"--model_prefix={tmp_path}/d",
              "--vocab_size=2000", "--character_coverage=0.99",
              f"--input_sentence_size={lines // 3}", "--num_threads=2",
              "--seed=7")
  assert proc.returncode == 0, proc.stderr[-2000:]
  sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "d.model"))
  assert [(sp.id_to_piece(i), sp.get_score(i))
          for i in range(sp.get_piece_size())] == first

  sample = train_vocab.sample_sentences(map(str, range(1000)), 100, seed=3)
  assert len(sample) == len(set(sample)) == 100
  assert sample == train_vocab.sample_sentences(map(str, range(1000)), 100, 3)
  # Uniform: every tenth of the input holds about a tenth of the sample.
  tenths = [sum(int(s) // 100 == t for s in sample) for t in range(10)]
  assert max(tenths) < 25, tenths
  assert train_vocab.sample_sentences(iter(["a", "b"]), 5, 3) == ["a", "b"]
  assert train_vocab.sample_sentences(iter(["a", "b"]), 0, 3) == ["a", "b"]
