"""data_prep on Beam's DaskRunner, on a real local dask.distributed cluster.

A `dask scheduler` and two `dask worker` processes (one thread each) on
127.0.0.1, started and stopped here; the command runs there with
--runner=DaskRunner --dask_client_address=... and must write what the
DirectRunner writes: byte-identical shards, the same summary.json (its
counts: documents read, used, skipped by reason, instances, records per
shard), _SUCCESS, and the same manifest but for the Beam options of the run.
SOP and NSP (whose document pool goes through two GroupByKeys) both; and a
truncated .gz input there: one error line and no markers, or with
--skip_bad_inputs the file's complete documents and its entry in the
manifest. These are slow (make test-slow). The two errors of a Dask run that cannot
start are fast: a scheduler address nobody answers at, and dask missing.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from data_prep import local_dask
from tests import cli_runner
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401 pylint: disable=unused-import

# Bad documents, one per skip reason checked (blank lines between them).
BAD_DOCUMENTS = (b"\xff\xfe broken \xc3\x28 utf-8\nsecond line\n\n"
                 + "这是唯一的一句话。\n\n".encode("utf-8"))


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
  """Address of a scheduler with two single-thread workers; stopped after."""
  with local_dask.cluster(2, str(tmp_path_factory.mktemp("dask_logs"))) as (
      address):
    yield address


def _corpus(pd_corpus, directory):  # pylint: disable=redefined-outer-name
  path = os.path.join(directory, "corpus.txt")
  with open(pd_corpus[0], "rb") as f, open(path, "wb") as out:
    out.write(f.read() + b"\n" + BAD_DOCUMENTS)
  return path


def _run(corpus, spm, output_dir, nsp, beam_args):
  proc = cli_runner.run_module(
      ["data_prep.create_pretraining_data", f"--input_file={corpus}",
       f"--output_dir={output_dir}", f"--spm_model_file={spm}",
       "--max_seq_length=64", "--max_predictions_per_seq=10",
       "--dupe_factor=2", "--num_shards=3",
       f"--random_next_sentence={str(nsp).lower()}"] + beam_args,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _files(directory):
  found = {}
  for name in sorted(os.listdir(directory)):
    with open(os.path.join(directory, name), "rb") as f:
      found[name] = f.read()
  return found


@pytest.mark.slow
@pytest.mark.parametrize("nsp", [False, True], ids=["sop", "nsp"])
def test_dask_cluster_writes_what_the_direct_runner_writes(
    scheduler, pd_corpus, spm_model, tmp_path, nsp):  # pylint: disable=redefined-outer-name
  corpus = _corpus(pd_corpus, str(tmp_path))
  direct, dask = str(tmp_path / "direct"), str(tmp_path / "dask")
  _run(corpus, spm_model, direct, nsp, [])
  # Four partitions: both workers get read ranges.
  proc = _run(corpus, spm_model, dask, nsp, [
      "--runner=DaskRunner", f"--dask_client_address={scheduler}",
      "--dask_npartitions=4"])
  direct_files, dask_files = _files(direct), _files(dask)
  assert sorted(dask_files) == sorted(direct_files) == [
      "_SUCCESS", "manifest.json", "pretrain-00000-of-00003.tfrecord",
      "pretrain-00001-of-00003.tfrecord", "pretrain-00002-of-00003.tfrecord",
      "summary.json"]
  for name in direct_files:
    if name != "manifest.json":
      assert dask_files[name] == direct_files[name], name
  summary = json.loads(dask_files["summary.json"])
  # The bad documents appended to the corpus, counted on the workers.
  assert summary["documents"]["skipped"]["invalid_utf8"] == 1
  assert summary["documents"]["skipped"]["single_sentence"] >= 1
  assert summary["documents"]["read"] == (
      summary["documents"]["used"] + sum(
          summary["documents"]["skipped"].values()))
  assert summary["instances"] > 1000
  direct_manifest = json.loads(direct_files["manifest.json"])
  dask_manifest = json.loads(dask_files["manifest.json"])
  assert dask_manifest["flags"].pop("pipeline_args") == [
      "--runner=DaskRunner", f"--dask_client_address={scheduler}",
      "--dask_npartitions=4"]
  assert direct_manifest["flags"].pop("pipeline_args") == []
  for manifest in (direct_manifest, dask_manifest):
    manifest["flags"].pop("output_dir", None)
  assert dask_manifest == direct_manifest
  assert dask_manifest["records"] == summary["instances"]
  assert dask_manifest["documents"] == summary["documents"]
  # The last log line's counts, from summary.json (no Beam metrics there).
  assert (f"{summary['instances']:,} instances" in proc.stderr
          and f"{summary['instances']:,} records written" in proc.stderr), (
              proc.stderr[-2000:])


def test_unreachable_scheduler_is_one_line_naming_it(spm_model, pd_corpus,
                                                     tmp_path):  # pylint: disable=redefined-outer-name
  address = f"127.0.0.1:{local_dask.free_port()}"  # nothing listens there
  start = time.monotonic()
  proc = cli_runner.run_module(
      ["data_prep.create_pretraining_data", f"--input_file={pd_corpus[0]}",
       f"--output_dir={tmp_path / 'out'}", f"--spm_model_file={spm_model}",
       "--runner=DaskRunner", f"--dask_client_address={address}"],
      timeout=120)
  assert time.monotonic() - start < 60
  assert proc.returncode != 0
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert lines[0].startswith(
      f"error: no Dask scheduler answers at '{address}' ("), lines[0]
  assert "--dask_client_address (start one (`dask scheduler" in lines[0]
  assert not (tmp_path / "out").exists()


def test_dask_runner_without_dask_is_one_line_naming_the_extra(
    spm_model, pd_corpus, tmp_path):  # pylint: disable=redefined-outer-name
  # A fresh interpreter where `import dask` fails, as without the package.
  code = (
      "import runpy, sys\n"
      "sys.modules['dask'] = None\n"
      "sys.argv = ['create_pretraining_data'] + sys.argv[1:]\n"
      "runpy.run_module('data_prep.create_pretraining_data', "
      "run_name='__main__')\n")
  proc = subprocess.run(
      [sys.executable, "-c", code, f"--input_file={pd_corpus[0]}",
       f"--output_dir={tmp_path / 'out'}", f"--spm_model_file={spm_model}",
       "--runner=DaskRunner", "--dask_client_address=127.0.0.1:8786"],
      capture_output=True, text=True, timeout=120, cwd=cli_runner.ROOT,
      env=dict(os.environ, PYTHONPATH=cli_runner.ROOT))
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  assert lines[0].startswith("error: runner 'DaskRunner' cannot be loaded ("
                             "ModuleNotFoundError: No module named 'dask"), (
                                 lines[0])
  assert "pip install 'albert_tf[data]'" in lines[0]
  assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_truncated_input_on_dask_fails_or_is_skipped_and_listed(
    scheduler, pd_corpus, spm_model, tmp_path):  # pylint: disable=redefined-outer-name
  import gzip  # pylint: disable=g-import-not-at-top
  with open(pd_corpus[0], "rb") as f:
    whole = gzip.compress(f.read())
  truncated = str(tmp_path / "part-1.txt.gz")
  with open(truncated, "wb") as f:
    f.write(whole[:len(whole) // 2])
  beam_args = ["--runner=DaskRunner", f"--dask_client_address={scheduler}"]
  command = ["data_prep.create_pretraining_data",
             f"--input_file={truncated}", f"--spm_model_file={spm_model}",
             "--max_seq_length=64", "--max_predictions_per_seq=10",
             "--dupe_factor=1", "--num_shards=2"] + beam_args
  failed = cli_runner.run_module(
      command + [f"--output_dir={tmp_path / 'failed'}"], timeout=300)
  assert failed.returncode == 1
  assert failed.stderr.strip().splitlines()[-1].startswith(
      f"error: input file '{truncated}' is truncated or corrupt (EOFError: "
      ), failed.stderr[-2000:]
  assert not (tmp_path / "failed" / "_SUCCESS").exists()
  assert not (tmp_path / "failed" / "manifest.json").exists()
  skipped = cli_runner.run_module(
      command + [f"--output_dir={tmp_path / 'skipped'}", "--skip_bad_inputs"],
      timeout=300)
  assert skipped.returncode == 0, skipped.stderr[-2000:]
  with open(tmp_path / "skipped" / "manifest.json", encoding="utf-8") as f:
    manifest = json.load(f)
  assert manifest["inputs_skipped"] == 1
  [entry] = manifest["inputs"]
  assert entry["path"] == truncated and entry["error"].startswith("EOFError")
  # Complete documents before the damage were kept, and fewer than all.
  assert 0 < entry["documents"] == manifest["documents"]["read"] < len(
      pd_corpus[1])
  assert (tmp_path / "skipped" / "_SUCCESS").exists()
