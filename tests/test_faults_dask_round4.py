"""Data prep on Dask never waits without end, and a cluster that goes away
is one line (issue 50, rows 16, 17 and 29), after which the same command
runs again; train_vocab's advice for a vocabulary too small works (row 30).

  * 16: a --dask_client_address whose port accepts connections and never
    speaks: one line within --dask_connection_timeout, nothing written;
    the run's own client is bounded too (3 x the timeout);
  * 17: the only worker SIGKILLed mid-run: a warning, then after
    --no_worker_timeout_secs one line saying the last worker is gone;
  * 29: the scheduler SIGKILLed mid-run: one line saying it is gone, no
    CancelledError traceback, no missing summary.json;
  * after either, the output_dir holds only what an unfinished run leaves,
    and the same command replaces it (data_prep.outputs.UNFINISHED_MARKER);
  * 30: train_vocab --vocab_size too small for the corpus's characters:
    the sizes named are the smallest that train, at this coverage and at
    0.98, the lowest SentencePiece's unigram trainer accepts (a lower
    --character_coverage is refused as a flag).

The quick ones use a fake scheduler port (a socket that accepts and never
speaks) and RunWatch with fake futures; the real-cluster ones (a `dask
scheduler` and one `dask worker` on 127.0.0.1) are slow.
"""

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from data_prep import dask_cluster
from data_prep import local_dask
from data_prep import outputs
from data_prep import pipeline
from data_prep import runners
from tests import cli_runner
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401 pylint: disable=unused-import

# Start-up of a data prep command on a loaded 2-core machine (imports),
# beside the bounds under test.
START_UP_SECS = 60


@contextlib.contextmanager
def silent_port(hang_up_after=None):
  """127.0.0.1:PORT where connections are accepted and nothing is said;
  after hang_up_after seconds (if given) they are closed."""
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(16)
  accepted = []
  stop = threading.Event()

  def accept():
    server.settimeout(0.2)
    end = None if hang_up_after is None else time.monotonic() + hang_up_after
    while not stop.is_set() and (end is None or time.monotonic() < end):
      try:
        accepted.append(server.accept()[0])
      except OSError:
        pass
    for connection in accepted:
      connection.close()

  thread = threading.Thread(target=accept, daemon=True)
  thread.start()
  try:
    yield f"127.0.0.1:{server.getsockname()[1]}"
  finally:
    stop.set()
    thread.join()
    for connection in accepted:
      connection.close()
    server.close()


# --------------------------------------------------------------- row 16
def test_a_port_that_never_speaks_is_one_line_within_the_timeout(tmp_path):
  out = tmp_path / "out"
  raised = []

  def run():
    try:
      # The cluster is checked before the input or the tokenizer is read.
      pipeline.run_pipeline(
          str(tmp_path / "corpus.txt"), str(out),
          spm_model_file=str(tmp_path / "spm.model"), dupe_factor=1,
          pipeline_args=["--runner=DaskRunner",
                         f"--dask_client_address={address}",
                         "--dask_connection_timeout=2"])
    except Exception as e:  # pylint: disable=broad-except
      raised.append(e)

  with silent_port() as address:
    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)  # Without the bound: distributed's handshake, forever.
    elapsed = time.monotonic() - start
    assert not thread.is_alive(), "still waiting on the silent port"
  [error] = raised
  assert isinstance(error, runners.ClusterError)
  assert str(error) == (
      f"no Dask scheduler answers at '{address}': it accepted the connection "
      "and said nothing for 2 s (--dask_connection_timeout), "
      "--dask_client_address (is it the port `dask scheduler` prints "
      "(tcp://HOST:8786, not the dashboard's 8787)? A scheduler too busy to "
      "answer: raise --dask_connection_timeout)")
  assert 2 <= elapsed < 20
  assert not out.exists()


def test_the_runs_own_client_is_bounded_too():
  # The scheduler answered the check, then stops speaking before the run
  # connects: the run's client, which distributed gives no handshake bound,
  # gives up after 3 x --dask_connection_timeout. (Without the bound, the
  # port hangs up after 60 s and the client fails with another error.)
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=g-import-not-at-top
  with silent_port(hang_up_after=60) as address:
    options = PipelineOptions(["--runner=DaskRunner",
                               f"--dask_client_address={address}",
                               "--dask_connection_timeout=1"])
    runner = dask_cluster.WatchedDaskRunner(60)
    p = beam.Pipeline(runner=runner, options=options)
    _ = p | beam.Create([1])
    start = time.monotonic()
    with pytest.raises(runners.ClusterError) as raised:
      runner.run_pipeline(p, options)
    assert 3 <= time.monotonic() - start < 10
  assert str(raised.value) == (
      f"the Dask scheduler at '{address}' did not take this run's connection "
      "within 3 s (3 x --dask_connection_timeout=1), though it answered a "
      "moment before, --dask_client_address (is it overloaded? Rerun, or "
      "raise --dask_connection_timeout)")


# ---------------------------------------------------------- rows 17, 29
class _Future:

  def __init__(self, status):
    self.status = status


class _Client:

  def __init__(self):
    self.calls = []

  def cancel(self, futures, force=False):
    self.calls.append(("cancel", len(futures), force))

  def close(self, timeout=None):
    self.calls.append(("close", timeout))


class _Clock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def _watch(monkeypatch, identities, statuses, no_worker_timeout_secs=5):
  """A RunWatch over fake futures; each look answers the next of
  `identities` (a dict, or an exception to raise) and sets the futures'
  statuses to the next of `statuses`; a look is 2 s of the fake clock."""
  clock = _Clock()
  futures = [_Future("pending"), _Future("pending")]
  looks = iter(zip(identities, statuses))

  def wait_futures(futures_, seconds):
    del futures_
    clock.now += seconds
    try:
      identity, status = next(looks)
    except StopIteration:
      raise AssertionError("still waiting after the last look") from None
    for future in futures:
      future.status = status
    state["identity"] = identity

  def identity_(address, timeout_secs, knock_first=True):
    # Knocking (a plain TCP connect, which the scheduler logs) only after
    # the client lost its connection.
    cancelled = any(f.status == "cancelled" for f in futures)
    assert (address, timeout_secs, knock_first) == ("127.0.0.1:8786", 10,
                                                    cancelled)
    if isinstance(state["identity"], Exception):
      raise state["identity"]
    return state["identity"]

  state = {}
  monkeypatch.setattr(dask_cluster, "_wait_futures", wait_futures)
  monkeypatch.setattr(dask_cluster, "_identity", identity_)
  watch = dask_cluster.RunWatch("127.0.0.1:8786", 10, no_worker_timeout_secs,
                                poll_secs=2.0, clock=clock, started=90.0)
  return watch, futures


def test_the_last_worker_gone_is_a_warning_then_one_line(monkeypatch, caplog):
  one, none = {"n_workers": 1}, {"n_workers": 0}
  # Two looks with a worker, then none: first seen at 106 s, 4 s later still
  # none (below 5), at 6 s the end.
  watch, futures = _watch(monkeypatch, [one, one, none, none, none, none],
                          ["pending"] * 6)
  client = _Client()
  with caplog.at_level(logging.WARNING, logger="data_prep.dask_cluster"):
    with pytest.raises(runners.ClusterError) as raised:
      watch.wait(client, futures)
  assert str(raised.value) == (
      "the last Dask worker of the scheduler at '127.0.0.1:8786' is gone: no "
      "worker for 5 s (--no_worker_timeout_secs), 22 s into the run; its "
      "tasks are cancelled, --dask_client_address (start workers: `dask "
      "worker tcp://127.0.0.1:8786 --nthreads 1` on each machine, then run "
      "the same command again: nothing was marked done, and the rerun "
      "replaces what this run left)")
  assert [r.getMessage() for r in caplog.records] == [
      "the Dask scheduler at '127.0.0.1:8786' has no worker left, 16 s into "
      "the run: waiting up to 5 s for one (--no_worker_timeout_secs)"]
  assert client.calls == [("cancel", 2, True), ("close", 10)]


def test_a_worker_back_in_time_lets_the_run_finish(monkeypatch):
  one, none = {"n_workers": 1}, {"n_workers": 0}
  watch, futures = _watch(monkeypatch,
                          [none, none, one, none, none, one, one],
                          ["pending"] * 6 + ["finished"])
  watch.wait(_Client(), futures + [_Future("finished")])  # returns
  # Tasks that failed end the wait too: gathering them raises their error.
  watch, futures = _watch(monkeypatch, [one, one], ["pending", "error"])
  watch.wait(_Client(), futures)


def test_the_scheduler_gone_is_one_line_without_reconnect_noise(
    monkeypatch, caplog):
  refused = dask_cluster._NoAnswer(  # pylint: disable=protected-access
      "ConnectionRefusedError: [Errno 111] Connection refused", refused=True)
  # distributed cancels every task when the client's connection ends.
  watch, futures = _watch(monkeypatch, [{"n_workers": 1}, refused],
                          ["pending", "cancelled"])
  client = _Client()
  with pytest.raises(runners.ClusterError) as raised:
    watch.wait(client, futures)
  assert str(raised.value) == (
      "the Dask scheduler at '127.0.0.1:8786' is gone, 14 s into the run "
      "(ConnectionRefusedError: [Errno 111] Connection refused): the run's "
      "tasks are lost, --dask_client_address (start the scheduler and its "
      "workers again, then run the same command again: nothing was marked "
      "done, and the rerun replaces what this run left)")
  # Not closed by hand: closing a client in its reconnect loop logs a
  # CancelledError traceback; what it logs on its own is dropped.
  assert client.calls == []
  log = logging.getLogger("distributed.utils")
  try:
    raise asyncio.CancelledError()
  except BaseException:  # pylint: disable=broad-except
    with caplog.at_level(logging.ERROR, logger="distributed.utils"):
      log.exception("")
  logging.getLogger("distributed.client").error(
      "Failed to reconnect to scheduler after 10.00 seconds, closing client")
  assert not [r for r in caplog.records
              if r.name.startswith("distributed.")]


def test_a_silent_scheduler_is_gone_after_three_looks(monkeypatch):
  silent = dask_cluster._NoAnswer(  # pylint: disable=protected-access
      "it accepted the connection and said nothing for 10 s "
      "(--dask_connection_timeout)", refused=False)
  watch, futures = _watch(monkeypatch, [silent, {"n_workers": 1}, silent,
                                        silent, silent], ["pending"] * 5)
  with pytest.raises(runners.ClusterError,
                     match=r"is gone, 20 s into the run \(it accepted the "):
    watch.wait(_Client(), futures)


def test_an_unfinished_runs_leftovers_are_replaced_by_the_same_command(
    tmp_path, caplog):
  out = tmp_path / "out"
  lock = outputs.prepare_output_dir(str(out), overwrite=False)
  lock.release()
  assert os.listdir(out) == [outputs.UNFINISHED_MARKER]
  # What a run whose cluster went away leaves: a shard, a partial one.
  (out / "pretrain-00001-of-00002.tfrecord").write_bytes(b"x")
  (out / ".tmp-0123-pretrain-00000-of-00002.tfrecord").write_bytes(b"y")
  with caplog.at_level(logging.WARNING, logger="data_prep.outputs"):
    outputs.prepare_output_dir(str(out), overwrite=False).release()
  assert os.listdir(out) == [outputs.UNFINISHED_MARKER]
  assert [r.getMessage() for r in caplog.records] == [
      f"--output_dir={out} holds what an unfinished run left (3 files, no "
      "_SUCCESS): replacing them"]
  # A finished run (its marker gone, or _SUCCESS beside it) is refused.
  (out / "_SUCCESS").write_bytes(b"")
  with pytest.raises(ValueError, match="already holds the output of a "
                     "previous run .*pass --overwrite"):
    outputs.prepare_output_dir(str(out), overwrite=False)
  os.remove(out / outputs.UNFINISHED_MARKER)
  os.remove(out / "_SUCCESS")
  (out / "pretrain-00000-of-00001.tfrecord").write_bytes(b"z")
  with pytest.raises(ValueError, match="already holds"):
    outputs.prepare_output_dir(str(out), overwrite=False)


# ------------------------------------------- rows 17, 29 on a real cluster
def _command(corpus, spm, out, address):
  return ["data_prep.create_pretraining_data", f"--input_file={corpus}",
          f"--output_dir={out}", f"--spm_model_file={spm}",
          "--max_seq_length=64", "--max_predictions_per_seq=10",
          "--dupe_factor=10", "--num_shards=2", "--runner=DaskRunner",
          f"--dask_client_address={address}", "--dask_connection_timeout=5",
          "--no_worker_timeout_secs=5", "--progress_interval_secs=5"]


def _kill_when_a_task_runs(address, pid_of):
  """SIGKILLs pid_of(client) once the cluster processes a task."""
  from dask.distributed import Client  # pylint: disable=g-import-not-at-top
  with Client(address, timeout=30) as client:
    pid = pid_of(client)
    deadline = time.monotonic() + START_UP_SECS + 120
    while not any(client.processing().values()):
      assert time.monotonic() < deadline, "no task ever ran"
      time.sleep(0.05)
  os.kill(pid, signal.SIGKILL)
  return time.monotonic()


def _worker_pid(client):
  [pid] = client.run(os.getpid).values()
  return pid


def _scheduler_pid(client):
  return client.run_on_scheduler(os.getpid)


def _run_and_kill(command, address, pid_of):
  proc = cli_runner.start_module(command)
  try:
    killed_at = _kill_when_a_task_runs(address, pid_of)
    _, stderr = proc.communicate(timeout=START_UP_SECS + 120)
  finally:
    if proc.poll() is None:  # A hang: the test fails, the run goes.
      proc.kill()
      proc.wait()
  return proc.returncode, stderr, time.monotonic() - killed_at


def _last_line_and_noise(stderr):
  lines = stderr.strip().splitlines()
  noise = [l for l in lines if "Traceback" in l or "CancelledError" in l
           or "summary.json" in l or "Failed to reconnect" in l]
  return lines[-1], noise


@pytest.mark.slow
def test_the_only_worker_killed_then_the_same_command_finishes(
    pd_corpus, spm_model, tmp_path):  # pylint: disable=redefined-outer-name
  out = tmp_path / "out"
  with local_dask.cluster(1, str(tmp_path / "logs")) as address:
    command = _command(pd_corpus[0], spm_model, out, address)
    code, stderr, after_kill = _run_and_kill(command, address, _worker_pid)
    last, noise = _last_line_and_noise(stderr)
    assert code == 1 and not noise, stderr[-3000:]
    assert last.startswith(
        f"error: the last Dask worker of the scheduler at '{address}' is "
        "gone: no worker for 5 s (--no_worker_timeout_secs), "), last
    assert "then run the same command again" in last
    assert "has no worker left" in stderr  # the warning before the wait
    assert after_kill < 5 + 60, after_kill  # the bound, and the looks
    assert not (out / "_SUCCESS").exists()
    # A worker again; the same command replaces what the run left.
    worker = subprocess.Popen(
        [sys.executable, "-m", "dask", "worker", f"tcp://{address}",
         "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host",
         "127.0.0.1"],
        env=dict(os.environ, PYTHONPATH=cli_runner.ROOT),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
      again = cli_runner.run_module(command, timeout=START_UP_SECS + 240)
    finally:
      os.killpg(worker.pid, signal.SIGTERM)
      worker.wait(timeout=30)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"--output_dir={out} holds what an unfinished run left" in (
      again.stderr)
  assert sorted(os.listdir(out)) == [
      "_SUCCESS", "manifest.json", "pretrain-00000-of-00002.tfrecord",
      "pretrain-00001-of-00002.tfrecord", "summary.json"]


@pytest.mark.slow
def test_the_scheduler_killed_then_the_same_command_finishes(
    pd_corpus, spm_model, tmp_path):  # pylint: disable=redefined-outer-name
  out = tmp_path / "out"
  with local_dask.cluster(1, str(tmp_path / "logs")) as address:
    command = _command(pd_corpus[0], spm_model, out, address)
    code, stderr, after_kill = _run_and_kill(command, address,
                                             _scheduler_pid)
  last, noise = _last_line_and_noise(stderr)
  assert code == 1 and not noise, stderr[-3000:]
  assert last.startswith(
      f"error: the Dask scheduler at '{address}' is gone, "), last
  assert "(ConnectionRefusedError: " in last
  assert "start the scheduler and its workers again" in last
  assert after_kill < 30, after_kill
  assert not (out / "_SUCCESS").exists()
  # A scheduler again at the same address: the same command finishes.
  port = int(address.split(":")[1])
  with local_dask.cluster(1, str(tmp_path / "logs2"), port=port):
    again = cli_runner.run_module(command, timeout=START_UP_SECS + 240)
  assert again.returncode == 0, again.stderr[-3000:]
  assert (out / "_SUCCESS").exists() and (out / "manifest.json").exists()


@pytest.mark.slow
def test_a_silent_port_on_the_command_line_is_one_line(
    spm_model, pd_corpus, tmp_path):  # pylint: disable=redefined-outer-name
  with silent_port() as address:
    proc = cli_runner.run_module(
        ["data_prep.create_pretraining_data", f"--input_file={pd_corpus[0]}",
         f"--output_dir={tmp_path / 'out'}", f"--spm_model_file={spm_model}",
         "--runner=DaskRunner", f"--dask_client_address={address}"],
        timeout=START_UP_SECS + 60)
  assert proc.returncode == 1
  lines = proc.stderr.strip().splitlines()
  assert lines == [
      f"error: no Dask scheduler answers at '{address}': it accepted the "
      "connection and said nothing for 10 s (--dask_connection_timeout), "
      "--dask_client_address (is it the port `dask scheduler` prints "
      "(tcp://HOST:8786, not the dashboard's 8787)? A scheduler too busy to "
      "answer: raise --dask_connection_timeout)"], proc.stderr
  assert not (tmp_path / "out").exists()


# --------------------------------------------------------------- row 30
def test_a_vocabulary_too_small_names_sizes_that_train(pd_corpus, tmp_path):  # pylint: disable=redefined-outer-name
  from data_prep import corpora  # pylint: disable=g-import-not-at-top
  from data_prep import train_vocab  # pylint: disable=g-import-not-at-top
  corpus = str(tmp_path / "corpus.txt")
  corpora.write_documents(pd_corpus[1][:40], corpus)

  def train(vocab_size, coverage=0.9995):
    return train_vocab.train_sentencepiece(
        corpus, str(tmp_path / "spm"), vocab_size, coverage, num_threads=1)

  with pytest.raises(ValueError) as raised:
    train(400)
  match = re.fullmatch(
      r"vocabulary size 400 is too small for this corpus: its characters at "
      r"--character_coverage=0\.9995 and the 5 special pieces need (\d+), "
      r"--vocab_size \(pass --vocab_size=\1 or more; or "
      r"--character_coverage=0\.98 \(the lowest SentencePiece accepts: rarer "
      r"characters become <unk>\) with --vocab_size=(\d+) or more\)",
      str(raised.value))
  assert match, str(raised.value)
  needed, needed_at_098 = int(match.group(1)), int(match.group(2))
  assert 400 < needed_at_098 < needed
  # What the line says works, and is the least that does (SentencePiece
  # trains it); the 0.95 the old hint led to is refused as a flag value.
  assert train(needed).endswith("spm.model")
  with pytest.raises(ValueError, match=f"need {needed},"):
    train(needed - 1)
  assert train(needed_at_098, 0.98).endswith("spm.model")
  with pytest.raises(ValueError, match=r"^0\.95 is outside \[0\.98, 1\]"):
    train(needed_at_098, 0.95)
