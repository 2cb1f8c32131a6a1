"""Bazel is not installed here, so check the BUILD file's promises directly:
every Python module and test file has a target, and every target's srcs exist."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _targets():
  text = open(os.path.join(ROOT, "BUILD"), encoding="utf-8").read()
  targets = {}
  for match in re.finditer(r'(py_\w+)\(\s*name\s*=\s*"([^"]+)"(.*?)\n\)', text, re.S):
    kind, name, body = match.groups()
    srcs = re.search(r"srcs\s*=\s*\[([^\]]*)\]", body)
    files = re.findall(r'"([^"]+)"', srcs.group(1)) if srcs else []
    targets[name] = (kind, files)
  return targets


def _python_files(folder):
  for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
    for name in names:
      if name.endswith(".py"):
        yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def test_every_target_src_exists():
  targets = _targets()
  assert len(targets) > 10
  for name, (_, files) in targets.items():
    assert files, f"target {name} has no srcs"
    for path in files:
      assert os.path.exists(os.path.join(ROOT, path)), f"{name}: {path} missing"


def test_every_module_and_test_has_a_target():
  covered = {path for _, files in _targets().values() for path in files}
  for folder in ("albert_tf", "data_prep", "tests", "benchmarks", "demo"):
    for path in _python_files(folder):
      assert path in covered, f"{path} has no target in BUILD"


def test_test_files_are_py_test_targets():
  kinds = {files[0]: kind for kind, files in _targets().values() if files}
  for path in _python_files("tests"):
    if os.path.basename(path).startswith("test_"):
      assert kinds.get(path) == "py_test", f"{path} is not a py_test"
