"""data_prep.progress: live counts from the DirectRunner's workers, an ETA
from the planned byte ranges, and final counts equal to the manifest's."""

import json
import logging
import os
import re

import pytest

from albert_tf.core import features as F
from data_prep import instances as inst
from data_prep import pipeline
from data_prep import progress
from data_prep import runners
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401 pylint: disable=unused-import

_NUMBERS = re.compile(
    r"([\d,]+) documents read, ([\d,]+) instances \([\d,]+/s\), "
    r"([\d,]+) records written")


def _counts(line):
  match = _NUMBERS.search(line)
  return tuple(int(n.replace(",", "")) for n in match.groups())


class _Clock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_totals_keep_the_largest_value_per_bundle_and_eta_from_bytes():
  clock, lines = _Clock(), []
  tracker = progress.PipelineProgress(
      "ns", total_input_bytes=4_000_000, interval_secs=1000,
      live_from_workers=True, log=lines.append, clock=clock)
  with tracker:
    tracker.update("bundle_1", {"documents_read": 10, "instances": 30})
    tracker.update("bundle_2", {"documents_read": 5, "input_bytes": 1_000_000})
    # Late answers: empty (bundle over) or older than the last one.
    tracker.update("bundle_1", {})
    tracker.update("bundle_1", {"documents_read": 7, "instances": 20})
    assert tracker.totals() == {"documents_read": 15, "instances": 30,
                                "input_bytes": 1_000_000}
    clock.now += 10  # 1 MB of 4 in 10 s: 30 s to go.
    line = tracker.line()
    assert _counts(line) == (15, 30, 0)
    assert "(3/s)" in line  # 30 instances in the 10 s since the start
    assert "input 1.0 MB of 4.0 MB read (25%), ETA 30 s" in line
    tracker.update("bundle_3", {"input_bytes": 3_000_000, "instances": 50})
    clock.now += 5
    line = tracker.line()
    assert "(10/s)" in line  # 50 more in 5 s
    assert "input read (4.0 MB), grouping and writing shards" in line
  assert lines == []  # The 1000-s interval never came.


def test_in_memory_and_other_runners_say_where_the_counts_are():
  options, runner, _ = runners.choose_runner(["--direct_num_workers=1"])
  tracker = runners.pipeline_progress(runner, options, 100, 1.0)
  with tracker:
    assert "in_memory gives its counts at the end" in tracker.line()
  options, runner, _ = runners.choose_runner(["--direct_num_workers=2"], 0.5)
  tracker = runners.pipeline_progress(runner, options, 100, 1.0)
  with tracker:
    assert "documents read" in tracker.line()


def test_live_progress_of_a_two_process_run_ends_at_the_manifest_counts(
    pd_corpus, spm_model, tmp_path, caplog):  # pylint: disable=redefined-outer-name
  out = str(tmp_path / "out")
  with caplog.at_level(logging.INFO, logger=progress.__name__):
    pipeline.run_pipeline(
        pd_corpus[0], out, spm_model_file=spm_model,
        options=inst.InstanceOptions(max_seq_length=64,
                                     max_predictions_per_seq=10),
        dupe_factor=10, num_shards=2, split_bytes=16_000,
        pipeline_args=["--direct_num_workers=2",
                       "--direct_running_mode=multi_processing"],
        progress_interval_secs=0.1)
  lines = [r.getMessage() for r in caplog.records
           if r.name == progress.__name__]
  running = [l for l in lines if l.startswith("progress ")]
  final = [l for l in lines if l.startswith("done in ")]
  assert len(final) == 1 and lines[-1] == final[0]
  with open(os.path.join(out, F.MANIFEST_FILE), encoding="utf-8") as f:
    manifest = json.load(f)
  expected = (manifest["documents"]["read"], manifest["instances"],
              manifest["records"])
  assert _counts(final[0]) == expected
  size = os.path.getsize(pd_corpus[0])
  assert final[0].endswith(f"input {size / 1e6:,.1f} MB read")
  counts = [_counts(l) for l in running] + [_counts(final[0])]
  for earlier, later in zip(counts, counts[1:]):
    assert all(a <= b for a, b in zip(earlier, later)), (earlier, later)
  # Counts arrived while the workers were still reading: some line has
  # documents read but not all of them, with an ETA.
  partial = [l for c, l in zip(counts, running)
             if 0 < c[0] < expected[0] and "ETA" in l]
  assert partial, "\n".join(lines)
  shares = [int(s) for s in re.findall(r"read \((\d+)%\)", "\n".join(running))]
  assert shares == sorted(shares) and all(0 < s < 100 for s in shares)


def test_interval_must_be_positive_before_anything_is_written(tmp_path):
  out = tmp_path / "out"
  for bad in (0, -1.5):
    with pytest.raises(ValueError) as error:
      pipeline.run_pipeline("corpus/*.txt", str(out), progress_interval_secs=bad)
    message = str(error.value)
    assert "--progress_interval_secs" in message and "\n" not in message
    assert f"got {bad}" in message
  assert not out.exists()
