"""Bazel is not installed here, so check the BUILD file's promises directly:
every Python module and test file has a target, every target's srcs exist,
and deps match the imports (parsed with `ast`): each project module a target's
srcs import is in the target or its deps, transitively, and each dep is used."""

import ast
import functools
import glob
import importlib.metadata
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Requirement(str):
  """A `requirement("name")` dep: the PyPI name."""


def _glob(include, exclude=()):
  """Bazel's glob over the checkout (files only, sorted)."""
  def matches(patterns):
    return {path for pattern in patterns
            for path in glob.glob(pattern, root_dir=ROOT, recursive=True)
            if os.path.isfile(os.path.join(ROOT, path))}
  return sorted(matches(include) - matches(exclude))


@functools.lru_cache(maxsize=None)
def _evaluate_build():
  """{name: (kind, srcs, deps)} of BUILD run as Python (Starlark's syntax
  is Python's), its rules recording their targets: so a list of tests
  expanded by a comprehension, and a glob, are read as Bazel reads them."""
  targets = {}

  def rule(kind):
    def record(name, srcs=(), deps=(), **_):
      assert name not in targets, f"BUILD: two targets named {name}"
      targets[name] = (kind, list(srcs), list(deps))
    return record

  namespace = {"load": lambda *_: None, "package": lambda **_: None,
               "requirement": _Requirement, "glob": _glob,
               **{kind: rule(kind) for kind in ("py_library", "py_binary",
                                                "py_test")}}
  text = open(os.path.join(ROOT, "BUILD"), encoding="utf-8").read()
  exec(compile(text, "BUILD", "exec"), namespace)  # pylint: disable=exec-used
  return targets


def _targets():
  return {name: (kind, srcs) for name, (kind, srcs, _) in
          _evaluate_build().items()}


def _python_files(folder):
  for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
    for name in names:
      if name.endswith(".py"):
        yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def test_build_file_parses():
  """Starlark's syntax is Python's for a BUILD file: a stray token (a line
  with a lone comma once) fails Bazel before any check below runs."""
  ast.parse(open(os.path.join(ROOT, "BUILD"), encoding="utf-8").read(),
            "BUILD")


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


# ------------------------------------------------------- deps vs. real imports
INTERNAL = ("albert_tf", "data_prep", "benchmarks", "demo", "tests")


def _parse_build(requirements=False):
  """{name: (kind, srcs, deps)}; deps as written (":name" labels), or with
  requirements=True the PyPI names of its `requirement("...")` deps."""
  return {name: (kind, srcs, [d for d in deps if isinstance(d, _Requirement)
                              == requirements])
          for name, (kind, srcs, deps) in _evaluate_build().items()}


def _module_name(path):
  """albert_tf/tasks/base.py -> albert_tf.tasks.base; a package's
  __init__.py -> the package."""
  parts = path[:-len(".py")].split("/")
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _project_modules():
  """{dotted module name: path} of every .py file in the project packages."""
  return {_module_name(path.replace(os.sep, "/")): path.replace(os.sep, "/")
          for folder in INTERNAL for path in _python_files(folder)}


def _imported_modules(path, modules):
  """Project-internal modules that `path` imports (anywhere in the file), with
  their parent packages (importing a.b.c runs a/__init__ and a/b/__init__),
  and the packages `path` itself belongs to. Names that are no file of the
  project come back as themselves, so the caller can report them."""
  tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read(),
                   filename=path)
  package = _module_name(path)
  if not path.endswith("__init__.py"):
    package = package.rpartition(".")[0]
  wanted = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      wanted.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:  # Relative: from the file's package, `level` dots up.
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(base + ([node.module] if node.module else []))
      else:
        base = node.module
      wanted.add(base)
      for alias in node.names:  # `from pkg import module` imports the module.
        if f"{base}.{alias.name}" in modules:
          wanted.add(f"{base}.{alias.name}")
  # The file's own packages: importing a.b.c runs a/__init__ and a/b/__init__.
  wanted.add(_module_name(path))
  found = set()
  for name in wanted:
    if name.split(".")[0] not in INTERNAL:
      continue
    parts = name.split(".")
    found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
  return found


def test_deps_name_targets_of_this_build_file():
  targets = _parse_build()
  for name, (_, _, deps) in targets.items():
    for dep in deps:
      assert dep.startswith(":") and dep[1:] in targets, (
          f"{name}: dep {dep!r} is no target of this BUILD file")
      assert dep[1:] != name, f"{name} depends on itself"


def test_deps_provide_every_project_import():
  """Each target's srcs import only project modules that the target or its
  (transitive) deps list in srcs, as Bazel's sandbox would enforce."""
  targets = _parse_build()
  modules = _project_modules()

  def closure(name, seen=None):
    seen = set() if seen is None else seen
    if name not in seen:
      seen.add(name)
      for dep in targets[name][2]:
        if dep[1:] in targets:
          closure(dep[1:], seen)
    return seen

  problems = []
  for name, (_, srcs, _) in sorted(targets.items()):
    provided = {src for target in closure(name) for src in targets[target][1]}
    for src in srcs:
      if not os.path.exists(os.path.join(ROOT, src)):
        continue  # test_every_target_src_exists reports it.
      for module in sorted(_imported_modules(src, modules)):
        if module not in modules:
          problems.append(f"{name}: {src} imports {module}, which is no "
                          "module of the project")
        elif modules[module] not in provided:
          owners = sorted(t for t, (_, s, _) in targets.items()
                          if modules[module] in s)
          problems.append(f"{name}: {src} imports {module} "
                          f"({modules[module]}); add a dep on one of "
                          f"{[':' + o for o in owners] or 'a new target'}")
  assert not problems, "\n".join(problems)


def test_no_unused_deps():
  """Every direct dep has in its own srcs a module that the target's srcs
  import (a dep kept only for what its own deps bring is not needed: the
  target can depend on those)."""
  targets = _parse_build()
  modules = _project_modules()
  problems = []
  for name, (_, srcs, deps) in sorted(targets.items()):
    needed = {modules[m] for src in srcs
              if os.path.exists(os.path.join(ROOT, src))
              for m in _imported_modules(src, modules) if m in modules}
    for dep in deps:
      if dep[1:] in targets and not needed & set(targets[dep[1:]][1]):
        problems.append(f"{name}: nothing in {srcs} imports a module of {dep}")
  assert not problems, "\n".join(problems)


# ------------------------------------------------- third-party deps (PyPI)
# The peers the benchmarks compare against (torch, ONNX Runtime, ...): an
# optional file, installed by hand, never by make test.
PEERS_FILE = "benchmarks/requirements-peers.txt"


@functools.lru_cache(maxsize=None)
def _requirements_txt(name="requirements.txt"):
  """Normalised names of the distributions a requirements file installs."""
  names = set()
  for line in open(os.path.join(ROOT, name), encoding="utf-8"):
    line = line.split("#")[0].strip()
    if line:
      names.add(_normalise(re.match(r"[A-Za-z0-9._-]+", line).group(0)))
  return names


def _normalise(name):
  return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


@functools.lru_cache(maxsize=None)
def _distributions():
  """{top-level module: [distribution names]} of this environment."""
  return importlib.metadata.packages_distributions()


def _third_party_imports(path):
  """Distributions (by the installed packages' own metadata) whose modules
  `path` imports, anywhere in the file."""
  distributions = _distributions()
  tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level:
      names = [node.module]
    else:
      continue
    for name in names:
      top = name.split(".")[0]
      if top in sys.stdlib_module_names or top in INTERNAL:
        continue
      if top not in distributions and path.startswith("benchmarks/") and (
          _normalise(top) in _requirements_txt(PEERS_FILE)):
        found.add(_normalise(top))  # a benchmark peer, not installed here
        continue
      assert top in distributions, f"{path} imports {top}, installed by no " \
          "distribution in this environment"
      owners = distributions[top]
      if len(owners) > 1:  # a namespace package (google.*): the owner of
        prefix = name.replace(".", "/")  # this very module
        owners = [d for d in owners if any(
            str(f).startswith(prefix)
            for f in importlib.metadata.files(d) or ())] or owners
      found.update(_normalise(d) for d in owners)
  return found


def test_third_party_deps_match_imports_and_requirements():
  """Each target declares `requirement(...)` for exactly the distributions
  its srcs import, and requirements.txt installs each of them directly (not
  only as another package's dependency)."""
  installed = _requirements_txt()
  problems = []
  for name, (_, srcs, pypi) in sorted(_parse_build(requirements=True).items()):
    declared = {_normalise(p) for p in pypi}
    needed = set().union(*[_third_party_imports(s) for s in srcs
                           if os.path.exists(os.path.join(ROOT, s))])
    if needed - declared:
      problems.append(f"{name}: add requirement(...) for "
                      f"{sorted(needed - declared)}")
    if declared - needed:
      problems.append(f"{name}: its srcs import nothing of "
                      f"{sorted(declared - needed)}")
    allowed = installed | (_requirements_txt(PEERS_FILE) if all(
        src.startswith("benchmarks/") for src in srcs) else set())
    if declared - allowed:
      problems.append(f"{name}: requirements.txt does not list "
                      f"{sorted(declared - allowed)}")
  assert not problems, "\n".join(problems)
