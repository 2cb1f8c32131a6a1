"""benchmarks.serving_latency without its peers: flags, skip lines, report.

The benchmark itself (exports, minutes of timing) needs the optional peers
of benchmarks/requirements-peers.txt, which CI never installs; these tests
import none of them (nor TensorFlow in the commands they run) and take
about a second.
"""

import os
import subprocess
import sys

from benchmarks import serving_latency

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_PROBE = ("tensorflow", "torch", "transformers", "onnxruntime",
               "keras_hub")


def _run(*args):
  env = dict(os.environ, PYTHONPATH=ROOT)
  return subprocess.run([sys.executable, *args], capture_output=True,
                        text=True, cwd=ROOT, env=env, timeout=120,
                        check=False)


def test_help_lists_the_flags():
  out = _run("-m", "benchmarks.serving_latency", "--help")
  assert out.returncode == 0, out.stderr
  for flag in ("--quick", "--calls", "--peers", "--check_peers",
               "--tflite_quantize", "--work_dir", "--results_dir", "--model",
               "--data"):
    assert flag in out.stdout, flag
  assert "--worker" not in out.stdout  # the subprocesses' own flag


def test_peers_none_is_one_skip_line_per_peer_without_importing_them():
  out = _run("-c", "import sys; from benchmarks import serving_latency as s; "
             "s.main(['--check_peers', '--peers=none']); "
             f"print([m for m in {PEERS_PROBE!r} if m in sys.modules])")
  assert out.returncode == 0, out.stderr
  assert out.stdout.splitlines() == [
      "skip keras_hub: not requested (--peers=none)",
      "skip hf_torch: not requested (--peers=none)",
      "skip onnxruntime: not requested (--peers=none)",
      "[]"]


def test_a_peer_not_installed_is_skipped_with_one_line():
  installed = {"keras_hub", "onnxruntime", "transformers"}
  run, skipped = serving_latency.peer_status(
      "all", find_spec=lambda name: object() if name in installed else None)
  assert run == ["keras_hub", "onnxruntime"]
  assert skipped == ["skip hf_torch: torch not installed (pip install -r "
                     "benchmarks/requirements-peers.txt)"]
  run, skipped = serving_latency.peer_status("onnxruntime",
                                             find_spec=lambda name: None)
  assert run == []
  assert skipped == [
      "skip keras_hub: not requested (--peers=onnxruntime)",
      "skip hf_torch: not requested (--peers=onnxruntime)",
      "skip onnxruntime: onnxruntime not installed (pip install -r "
      "benchmarks/requirements-peers.txt)"]


def test_an_unknown_peer_or_call_count_is_refused_in_one_line():
  out = _run("-m", "benchmarks.serving_latency", "--peers=keras_hub,tensorrt")
  assert out.returncode == 2
  assert out.stderr.splitlines()[-1] == (
      "serving_latency.py: error: --peers=keras_hub,tensorrt: unknown "
      "['tensorrt']; known: keras_hub, hf_torch, onnxruntime, all, none")
  out = _run("-m", "benchmarks.serving_latency", "--calls=0")
  assert out.returncode == 2
  assert out.stderr.splitlines()[-1] == (
      "serving_latency.py: error: --calls must be >= 1, got 0")


def test_cpu_model_flags_and_tag_come_from_the_first_cpu():
  info = serving_latency.cpu_info(
      "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ "
      "2.10GHz\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n\n"
      "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
  assert info == {"model": "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz",
                  "tag": "intel-r-xeon-r-platinum-8581c-cpu-2-10ghz-amx",
                  "flags": ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]}
  assert serving_latency.cpu_info(
      "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n") == {
          "model": "AMD EPYC", "tag": "amd-epyc-avx2", "flags": ["avx2"]}


def test_table_puts_ours_first_and_divides_the_ort_p50_by_each_row():
  def row(name, length, threads, p50, p99):
    return {"implementation": name, "length": length, "threads": threads,
            "input": f"{length} tokens", "p50_ms": p50, "p99_ms": p99}
  rows = [row("albert_tf serving_default", 64, 1, 20.0, 30.0),
          row("ONNX Runtime (tf2onnx)", 64, 1, 10.0, 12.5),
          row("albert_tf LiteRT float32", 64, 1, 8.0, 9.0),
          row("albert_tf serving_default", 64, 2, 16.0, 40.0)]
  assert serving_latency.format_table(rows).splitlines() == [
      "| implementation | length | threads | p50 ms | p99 ms | "
      "ORT p50 / p50 |",
      "|---|---|---|---|---|---|",
      "| albert_tf serving_default | 64 (64 tokens) | 1 | 20.00 | 30.00 | "
      "0.50 |",
      "| albert_tf LiteRT float32 | 64 (64 tokens) | 1 | 8.00 | 9.00 | 1.25 |",
      "| ONNX Runtime (tf2onnx) | 64 (64 tokens) | 1 | 10.00 | 12.50 | 1.00 |",
      "| albert_tf serving_default | 64 (64 tokens) | 2 | 16.00 | 40.00 | — |"]


def test_data_without_model_is_refused():
  out = _run("-m", "benchmarks.serving_latency", "--data=x.tsv")
  assert out.returncode == 2
  assert "--data goes with --model" in out.stderr


def test_model_times_your_own_artifact_at_batch_1_and_32(tmp_path):
  """--model: a tiny random pair classifier (tests/test_family_serving),
  timed on the rows of a TSV: their token lengths are the ones reported."""
  from tests import test_family_serving as fs  # pylint: disable=g-import-not-at-top
  from benchmarks import serving_latency_model  # pylint: disable=g-import-not-at-top
  fs._make(tmp_path / "clf", "classification")  # pylint: disable=protected-access
  data = tmp_path / "dev.tsv"
  data.write_text("text\ttext_b\n很好\t是的\n张明在北京说今天很好\t他说\n",
                  encoding="utf-8")
  printed = []
  rows = serving_latency_model.run(str(tmp_path / "clf"), str(data), calls=2,
                                   log=printed.append)
  assert [(r["runtime"], r["batch"]) for r in rows] == [
      ("TensorFlow", 1), ("TensorFlow", 32)]
  assert all(0 < r["p50_ms"] <= r["p90_ms"] for r in rows)
  # [CLS] + characters + [SEP] of the first input, 2 rows: 4 and 12 tokens.
  assert printed[0].startswith(f"2 row(s) of {data}: 4-12 tokens (median 8)")
  assert printed[-1].startswith(f"| {tmp_path / 'clf'} | TensorFlow | 32 |")
