"""Imports run one way: commands -> inference -> training -> tasks ->
serving/data -> modeling -> base (docs/CONTRACTS.md, "Layers").

Every `import` and `from ... import` in albert_tf/ (at module level or in a
function: a deferred import is still an arrow) is read with `ast`; an
import of a higher layer than the importing module's own fails the test,
naming both and the line. A planted upward import in a copy of a module
shows the check can fail.
"""

import ast
import pathlib
import shutil
from typing import List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Layer of each albert_tf module by its path; higher numbers may import
# lower ones and their own layer, never a higher one.
BASE = ("config", "features", "file_io", "settings", "options", "registry",
        "lazy", "errors", "record")
LAYERS = (
    ("base", 0), ("modeling", 1), ("serving", 2), ("data", 2),
    ("converters", 2), ("tasks", 3), ("datasets", 3), ("training", 4),
    ("inference", 5))
COMMANDS = 6  # run_*, finetune, export_*, fill_mask, cli, cli_errors, ...
NAMES = {0: "base", 1: "modeling", 2: "serving/data", 3: "tasks",
         4: "training", 5: "inference", 6: "commands"}


def layer_of(module: str) -> Optional[int]:
  """The layer of a dotted albert_tf module name (None: not albert_tf)."""
  parts = module.split(".")
  if parts[0] != "albert_tf":
    return None
  if len(parts) == 1 or parts[1] in BASE:
    return 0
  return dict(LAYERS).get(parts[1], COMMANDS)


def _module_name(root: pathlib.Path, path: pathlib.Path) -> str:
  parts = list(path.relative_to(root).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def _imported(node) -> List[str]:
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if isinstance(node, ast.ImportFrom) and node.module and not node.level:
    # `from albert_tf import x`: x may be a module of a layer of its own.
    return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
  return []


def upward_imports(root: pathlib.Path) -> List[str]:
  """'module (layer) imports other (layer) at file:line' for every arrow
  that points up, in the albert_tf package under root."""
  found = []
  for path in sorted((root / "albert_tf").rglob("*.py")):
    module = _module_name(root, path)
    mine = layer_of(module)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      for name in _imported(node):
        theirs = layer_of(name)
        if theirs is not None and theirs > mine:
          found.append(f"{module} ({NAMES[mine]}) imports {name} "
                       f"({NAMES[theirs]}) at "
                       f"{path.relative_to(root)}:{node.lineno}")
  return sorted(set(found))


def test_no_module_imports_a_higher_layer():
  assert upward_imports(ROOT) == []


def test_the_layers_are_the_documented_ones():
  assert [layer_of(m) for m in (
      "albert_tf.config", "albert_tf.registry", "albert_tf.record",
      "albert_tf.modeling.encoder", "albert_tf.serving.text_graph",
      "albert_tf.data.tokenization", "albert_tf.tasks.classification",
      "albert_tf.datasets.classic", "albert_tf.training.trainer",
      "albert_tf.inference", "albert_tf.finetune", "albert_tf.run_ner",
      "albert_tf.cli_errors", "numpy")] == [
          0, 0, 0, 1, 2, 2, 3, 3, 4, 5, 6, 6, 6, None]


def test_a_planted_upward_import_fails(tmp_path):
  """A copy of the package where the encoder imports the trainer (in a
  function, as a deferred import would): the check names that arrow."""
  shutil.copytree(ROOT / "albert_tf", tmp_path / "albert_tf",
                  ignore=shutil.ignore_patterns("__pycache__", "configs"))
  encoder = tmp_path / "albert_tf" / "modeling" / "encoder.py"
  lines = encoder.read_text(encoding="utf-8")
  encoder.write_text(lines + "\n\ndef _planted():\n"
                     "  from albert_tf.training import trainer\n"
                     "  return trainer\n", encoding="utf-8")
  line = len(lines.splitlines()) + 4
  planted = sorted(set(upward_imports(tmp_path)) - set(upward_imports(ROOT)))
  assert planted == [
      "albert_tf.modeling.encoder (modeling) imports "
      "albert_tf.training (training) at "
      f"albert_tf/modeling/encoder.py:{line}",
      "albert_tf.modeling.encoder (modeling) imports "
      "albert_tf.training.trainer (training) at "
      f"albert_tf/modeling/encoder.py:{line}"]
