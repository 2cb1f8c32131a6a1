"""Imports run one way, by layers (docs/CONTRACTS.md, "Layers").

Every module of albert_tf/, data_prep/, benchmarks/ and demo/ is read with
`ast`. An arrow is
- an `import` or `from ... import` anywhere: at module level, in a
  function, under a condition (relative imports resolved);
- a deferred import by name: `lazy.module(NAME)`, `importlib.import_module(
  NAME)`, `__import__(NAME)` or `runpy.run_module(NAME)`, where NAME is a
  string literal, the literal head of an f-string, or a variable whose
  assignments or loop (`for p in PACKAGES`) give literal strings, such as
  a table of module names (`_LAZY[name]`).
An arrow points at the deepest module it names (`from albert_tf.tasks import
base` is albert_tf.tasks.base; the package __init__ files import nothing of
the project when loaded, which a test here checks). A command run as a
subprocess (`python -m ...`) is no import and not counted.

The test fails on an arrow to a higher layer than the importing module's
and on any cycle of modules, naming the modules and lines. Planted arrows
in a copy of the tree show that both checks can fail.
"""

import ast
import functools
import pathlib
import shutil
from typing import Dict, List, Optional, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("albert_tf", "data_prep", "benchmarks", "demo")

# The layers, lowest first; a module may import its own layer and lower
# ones. albert_tf's by the folder (or root module) a module is in.
ALBERT_TF = {"core": 0, "modeling": 1, "serving": 2, "data": 2, "converters": 2,
             "tasks": 3, "datasets": 3, "training": 4, "inference": 5}
COMMANDS = 6  # run_*, finetune, export_*, predict, the root
LAYERS = {"data_prep": 7, "cli": 8, "benchmarks": 9, "demo": 10}
NAMES = {0: "base", 1: "modeling", 2: "serving/data/converters",
         3: "tasks/datasets", 4: "training", 5: "inference",
         6: "albert_tf commands", 7: "data_prep", 8: "console scripts",
         9: "benchmarks", 10: "demo"}

# Arrows left out of both checks: each points up or closes a cycle, and
# is listed in docs/CONTRACTS.md ("Layers") until it is removed. The test
# fails when one goes away (drop it here then) as well as on a new one.
KNOWN = set()  # none today

# (module, function) of the calls that import by name; None: a builtin.
_DEFERRED = {("lazy", "module"), ("importlib", "import_module"),
             (None, "import_module"), (None, "__import__"),
             ("runpy", "run_module")}


def layer_of(module: str) -> Optional[int]:
  """The layer of a dotted module name (None: not one of PACKAGES)."""
  parts = module.split(".")
  if parts[0] not in PACKAGES:
    return None
  if parts[0] != "albert_tf":
    return LAYERS[parts[0]]
  if len(parts) == 1:
    return COMMANDS  # the package root: `albert_tf.load` is inference's
  if parts[1] == "cli":
    return LAYERS["cli"]
  return ALBERT_TF.get(parts[1], COMMANDS)


def modules_of(root: pathlib.Path) -> Dict[str, pathlib.Path]:
  """{dotted name: file} of every module of PACKAGES under root."""
  found = {}
  for package in PACKAGES:  # a missing one has no modules
    for path in sorted((root / package).rglob("*.py")):
      if "__pycache__" in path.parts:
        continue
      parts = list(path.relative_to(root).with_suffix("").parts)
      if parts[-1] == "__init__":
        parts.pop()
      found[".".join(parts)] = path
  return found


def _strings(node, bindings, seen=()) -> List[str]:
  """The literal strings an expression can be: literals, an f-string's
  literal head (its package), names through their bindings."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return [node.value]
  if isinstance(node, ast.JoinedStr):
    head = node.values[0] if node.values else None
    if isinstance(head, ast.Constant) and "." in head.value:
      return [head.value.rsplit(".", 1)[0]]
    return []
  if isinstance(node, ast.Subscript):
    return _strings(node.value, bindings, seen)
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return [s for e in node.elts for s in _strings(e, bindings, seen)]
  if isinstance(node, ast.Dict):
    return [s for v in node.values for s in _strings(v, bindings, seen)]
  if isinstance(node, ast.Name) and node.id not in seen:
    return [s for value in bindings.get(node.id, ())
            for s in _strings(value, bindings, (*seen, node.id))]
  return []


def _bindings(tree) -> Dict[str, List[ast.AST]]:
  """{name: values assigned to it or iterated into it} in a module."""
  found: Dict[str, List[ast.AST]] = {}
  for node in ast.walk(tree):
    pairs = []
    if isinstance(node, ast.Assign):
      pairs = [(t, node.value) for t in node.targets]
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value:
      pairs = [(node.target, node.value)]
    elif isinstance(node, (ast.For, ast.comprehension)):
      pairs = [(node.target, node.iter)]
    for target, value in pairs:
      if isinstance(target, ast.Name):
        found.setdefault(target.id, []).append(value)
  return found


def _named(node, module: str, is_package: bool, bindings) -> List[str]:
  """The dotted names one node imports."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if isinstance(node, ast.ImportFrom):
    base = node.module or ""
    if node.level:
      package = module.split(".")[:len(module.split(".")) - (
          0 if is_package else 1)]
      package = package[:len(package) - (node.level - 1)]
      base = ".".join(package + ([node.module] if node.module else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]
  if isinstance(node, ast.Call) and node.args:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
      call = (func.value.id, func.attr)
    else:
      call = (None, getattr(func, "id", None))
    if call in _DEFERRED:
      return _strings(node.args[0], bindings)
  return []


@functools.lru_cache(maxsize=None)
def arrows(root: pathlib.Path) -> Dict[Tuple[str, str], List[str]]:
  """{(module, imported module): ["file:line", ...]} over PACKAGES."""
  modules = modules_of(root)

  def deepest(name):
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
      parts.pop()
    return ".".join(parts) or None

  found: Dict[Tuple[str, str], List[str]] = {}
  for module, path in modules.items():
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bindings = _bindings(tree)
    for node in ast.walk(tree):
      names = _named(node, module, path.name == "__init__.py", bindings)
      if isinstance(node, ast.ImportFrom):
        # `from a import b`: module a.b if there is one, else a itself.
        base, *members = names
        names = [m if m in modules else base for m in members]
      for name in names:
        target = deepest(name)
        if target and target != module:
          found.setdefault((module, target), []).append(
              f"{path.relative_to(root)}:{node.lineno}")
  return found


def upward_imports(root: pathlib.Path) -> List[str]:
  """'module (layer) imports other (layer) at file:line' for every arrow
  that points up and is not KNOWN."""
  found = []
  for (module, target), where in arrows(root).items():
    mine, theirs = layer_of(module), layer_of(target)
    if theirs > mine and (module, target) not in KNOWN:
      found.append(f"{module} ({NAMES[mine]}) imports {target} "
                   f"({NAMES[theirs]}) at {', '.join(where)}")
  return sorted(found)


def cycles(root: pathlib.Path) -> List[List[str]]:
  """The import cycles (strongly connected sets of modules, sorted), the
  KNOWN arrows left out."""
  graph: Dict[str, Set[str]] = {}
  for module, target in arrows(root):
    if (module, target) not in KNOWN:
      graph.setdefault(module, set()).add(target)
  index: Dict[str, int] = {}
  low: Dict[str, int] = {}
  stack: List[str] = []
  found = []

  def visit(node):  # Tarjan's strongly connected components
    index[node] = low[node] = len(index)
    stack.append(node)
    for nxt in sorted(graph.get(node, ())):
      if nxt not in index:
        visit(nxt)
        low[node] = min(low[node], low[nxt])
      elif nxt in stack:
        low[node] = min(low[node], index[nxt])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return sorted(found)


def test_no_module_imports_a_higher_layer():
  assert upward_imports(ROOT) == []


def test_no_import_cycle():
  assert cycles(ROOT) == []


def test_the_known_upward_arrows_are_still_there():
  """A KNOWN arrow that went away is dropped from KNOWN (and from
  docs/CONTRACTS.md), so that it cannot come back unseen."""
  assert KNOWN <= set(arrows(ROOT))


def test_package_init_files_import_nothing_of_the_project_when_loaded():
  """Why an arrow names only its deepest module: loading a package's
  __init__ (as every import of a module below it does) imports no module
  of the project; its own deferred imports are arrows like any other."""
  for module, path in modules_of(ROOT).items():
    if path.name != "__init__.py":
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
      names = _named(node, module, True, {})
      assert not [n for n in names if layer_of(n) is not None], (
          f"{path.relative_to(ROOT)}:{node.lineno} imports {names}")


def test_the_layers_are_the_documented_ones():
  assert [layer_of(m) for m in (
      "albert_tf.core.config", "albert_tf.core.features",
      "albert_tf.core.record", "albert_tf.core.cli_errors",
      "albert_tf.modeling.encoder",
      "albert_tf.serving.text_graph", "albert_tf.data.tokenization",
      "albert_tf.converters.bert", "albert_tf.tasks.classification",
      "albert_tf.datasets.classic", "albert_tf.training.trainer",
      "albert_tf.inference", "albert_tf.finetune", "albert_tf.predict",
      "albert_tf", "data_prep.pipeline", "albert_tf.cli",
      "benchmarks.commands", "demo.run_demo", "numpy")] == [
          0, 0, 0, 0, 1, 2, 2, 2, 3, 3, 4, 5, 6, 6, 6, 7, 8, 9, 10, None]


def test_deferred_imports_are_arrows():
  """lazy.module strings, importlib with a literal and a table of names,
  and an import in a function: each is seen, at its line."""
  found = arrows(ROOT)
  assert "albert_tf/tasks/classification.py:29" in found[
      ("albert_tf.tasks.classification", "albert_tf.modeling.models")]
  assert ("albert_tf", "albert_tf.inference") in found  # _LAZY[name]
  assert ("albert_tf.tasks.registry", "albert_tf.tasks") in found  # for p in
  assert ("albert_tf.cli", "data_prep.train_vocab") in found  # runpy
  assert ("demo.report", "benchmarks.learning_curves") in found  # in a def


def _planted(tmp_path, relative, text):
  """A copy of albert_tf and demo under tmp_path with `text` appended to
  one file; returns the line of its first appended line."""
  for package in ("albert_tf", "demo"):
    shutil.copytree(ROOT / package, tmp_path / package,
                    ignore=shutil.ignore_patterns("__pycache__", "configs",
                                                  "results"))
  path = tmp_path / relative
  lines = path.read_text(encoding="utf-8")
  path.write_text(lines + "\n\n" + text, encoding="utf-8")
  return len(lines.splitlines()) + 3


def test_a_planted_upward_import_fails(tmp_path):
  """The encoder imports the trainer in a function, and data_prep names
  the demo through importlib: the check names both arrows."""
  line = _planted(tmp_path, "albert_tf/modeling/encoder.py",
                  "def _planted():\n"
                  "  from albert_tf.training import trainer\n"
                  "  return trainer\n"
                  "_DEMO = ('demo.report',)\n"
                  "def _also():\n"
                  "  import importlib\n"
                  "  for name in _DEMO:\n"
                  "    importlib.import_module(name)\n")
  planted = sorted(set(upward_imports(tmp_path)) - set(upward_imports(ROOT)))
  assert planted == [
      "albert_tf.modeling.encoder (modeling) imports albert_tf.training."
      "trainer (training) at "
      f"albert_tf/modeling/encoder.py:{line + 1}",
      "albert_tf.modeling.encoder (modeling) imports demo.report (demo) "
      f"at albert_tf/modeling/encoder.py:{line + 7}"]


def test_a_planted_cycle_fails(tmp_path):
  """shared.py naming bert through lazy.module closes a cycle of one
  layer's modules: bert -> tf1 -> brightmart -> shared -> bert."""
  _planted(tmp_path, "albert_tf/converters/shared.py",
           "from albert_tf.core import lazy\n"
           "_bert = lazy.module('albert_tf.converters.bert')\n")
  assert cycles(tmp_path) == [[
      "albert_tf.converters.bert", "albert_tf.converters.brightmart",
      "albert_tf.converters.shared", "albert_tf.converters.tf1"]]
