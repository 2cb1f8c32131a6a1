"""`make test-slow`'s runner (tests/by_file.py): a pytest process per file,
every file's outcome counted, and a failed or killed file fails the run."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FILES = {
    "test_a.py": "def test_ok():\n  assert True\n",
    "test_b.py": ("def test_bad():\n  assert 1 == 2, 'one is not two'\n"
                  "def test_ok():\n  pass\n"),
    "test_c.py": ("import os, signal\n"
                  "def test_killed():\n  os.kill(os.getpid(), signal.SIGKILL)\n"),
}


def _run(folder, *args):
  return subprocess.run(
      [sys.executable, "-m", "tests.by_file", *args], cwd=folder,
      env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True)


def test_each_file_counted_and_a_failed_or_killed_file_fails_the_run(tmp_path):
  for name, text in FILES.items():
    (tmp_path / name).write_text(text)
  out = _run(tmp_path, *FILES)
  lines = out.stdout.splitlines()
  assert out.returncode == 1, out.stdout + out.stderr
  assert any(l.startswith("test_a.py: 1 passed (") for l in lines), out.stdout
  assert any(l.startswith("test_b.py: 1 failed, 1 passed (") for l in lines)
  assert any(l.startswith("test_c.py: killed by signal 9 (") for l in lines)
  assert "AssertionError: one is not two" in out.stdout  # the failure shown
  assert lines[-1].startswith("3 files: 1 failed, 2 passed in ")
  assert lines[-1].endswith("; failed: test_b.py test_c.py") or \
      lines[-1].endswith("; failed: test_c.py test_b.py")


def test_a_passing_selection_exits_zero_and_keeps_pytest_flags(tmp_path):
  (tmp_path / "test_a.py").write_text(
      "import pytest\n@pytest.mark.slow\ndef test_slow():\n  pass\n"
      "def test_quick():\n  assert False\n")
  (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slow\n")
  out = _run(tmp_path, "-m", "slow", "test_a.py")
  assert out.returncode == 0, out.stdout + out.stderr
  assert out.stdout.splitlines()[-1].startswith("1 files: 1 passed in ")
