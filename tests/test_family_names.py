"""A family is its own files: no other file of albert_tf names it.

Every registered family's name (`albert_tf.tasks.registry.families()`, aliases
included) may appear as a string value only in the module that registers
it and the modules its registration lists (`Family.modules`), and in
albert_tf/datasets/ (a dataset names its family). Docstrings and comments
may say "classification" in prose; a string that *is* a family name
(`kind == "tagging"`, `{"span_qa": ...}`) is a table of families.
predict.py, inference.py and export_tflite.py, once tables of families,
name none even in prose. docs/CONTRACTS.md lists each family's files as
the registry does.
"""

import ast
import pathlib
import re

from albert_tf.tasks import registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "albert_tf"
CONTRACTS = ROOT / "docs" / "CONTRACTS.md"
NO_PROSE = ("predict.py", "inference.py", "export_tflite.py")


def _file(module):
  return ROOT / (module.replace(".", "/") + ".py")


def family_strings(source, names):
  """(line, name) of each string constant of `source` equal to a name."""
  return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
          if isinstance(node, ast.Constant) and isinstance(node.value, str)
          and node.value in names]


def owners():
  """{file: the family names it may hold}."""
  allowed = {}
  for name, family in registry.families().items():
    for module in (family.module, *family.modules):
      allowed.setdefault(_file(module), set()).add(name)
  return allowed


def test_no_file_but_a_familys_own_names_it():
  names = set(registry.families())
  allowed = owners()
  found = []
  for path in sorted(PACKAGE.rglob("*.py")):
    if path.is_relative_to(PACKAGE / "datasets"):
      continue
    for line, name in family_strings(path.read_text("utf-8"), names):
      if name not in allowed.get(path, ()):
        found.append(f"{path.relative_to(ROOT)}:{line}: {name!r}")
  assert not found, ("family names outside the family's own files (move the "
                     "branch into its Task, or list the module in its "
                     f"register_family(modules=...)): {found}")


def test_the_check_finds_a_table_of_families():
  source = ('KINDS = {"tagging": 1}\n'
            'def f(kind):\n'
            '  """A tagging model in prose is fine."""\n'
            '  return kind == "span_qa"  # "tagging" in a comment is fine\n')
  assert family_strings(source, {"tagging", "span_qa"}) == [
      (1, "tagging"), (4, "span_qa")]


def test_the_former_tables_name_no_family_even_in_prose():
  pattern = re.compile(r"\b(" + "|".join(sorted(registry.families())) +
                       r")\b")
  found = [f"{name}:{i}: {m.group(1)}" for name in NO_PROSE
           for i, line in enumerate(
               (PACKAGE / name).read_text("utf-8").splitlines(), 1)
           for m in pattern.finditer(line)]
  assert not found, found


def test_a_module_belongs_to_one_family_and_exists():
  seen = {}
  for name, family in registry.families().items():
    for module in family.modules:
      assert _file(module).is_file(), f"{name}: no module {module}"
      other = seen.setdefault(module, family.task)
      assert other is family.task, (
          f"{module} is listed by {name} and by {other.name}")


def contracts_files():
  """{family: its files} of CONTRACTS.md's "Built-in families' files"."""
  text = CONTRACTS.read_text("utf-8")
  section = text.split("**Built-in families' files**", 1)[1].split("\n\n")[1]
  listed = {}
  for item in re.split(r"\n- ", "\n" + section.strip())[1:]:
    names = re.findall(r"^`(\w+)`(?: \(alias `(\w+)`\))?:", item)[0]
    files = re.findall(r"`(albert_tf/[\w/]+\.py)`", item)
    for name in filter(None, names):
      listed[name] = sorted(files)
  return listed


def test_contracts_lists_each_builtin_familys_files():
  builtin = {name: sorted(str(_file(m).relative_to(ROOT))
                          for m in (f.module, *f.modules))
             for name, f in registry.families().items()
             if f.module.startswith(registry.BUILTIN_PACKAGES)}
  assert contracts_files() == builtin
