"""Packaging: pyproject.toml's dependencies and console scripts,
and an install of the package into a clean venv.

requirements.txt is the one source of the version pins: pyproject.toml splits
its lines, verbatim, into the core `dependencies` and the extras (data,
serving, keras-hub, demo, dev), and the first test checks that together they
are exactly requirements.txt.
"""

import ast
import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib

import pytest

from albert_tf import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The table: console script -> the module `python -m` runs.
EXPECTED_SCRIPTS = {
    "albert-pretrain": "albert_tf.run_pretraining",
    "albert-finetune": "albert_tf.finetune",
    "albert-classify": "albert_tf.run_classifier",
    "albert-ner": "albert_tf.run_ner",
    "albert-squad": "albert_tf.run_squad",
    "albert-race": "albert_tf.run_race",
    "albert-export": "albert_tf.export_saved_model",
    "albert-export-tflite": "albert_tf.export_tflite",
    "albert-export-onnx": "albert_tf.export_onnx",
    "albert-export-keras-hub": "albert_tf.export_keras_hub",
    "albert-fill-mask": "albert_tf.fill_mask",
    "albert-predict": "albert_tf.predict",
    "albert-convert": "albert_tf.convert_checkpoint",
    "albert-train-vocab": "data_prep.train_vocab",
    "albert-create-data": "data_prep.create_pretraining_data",
    "albert-corpora": "data_prep.corpora",
    "albert-params": "albert_tf.params",
}


def _pyproject():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)


def _requirement_lines():
  lines = []
  with open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8") as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if line:
        lines.append(line)
  return lines


def _normalized(requirement):
  return re.sub(r"\s+", "", requirement).lower()


# ------------------------------------------------------------- static checks
# Extras that are lists of requirements.txt lines ("all" names the others).
EXTRAS = ("data", "serving", "onnx", "keras-hub", "demo", "dev")


def test_pyproject_dependencies_are_requirements_txt():
  project = _pyproject()["project"]
  extras = project["optional-dependencies"]
  assert set(extras) == set(EXTRAS) | {"all"}
  assert extras["all"] == ["albert_tf[data,serving,onnx,keras-hub,demo]"]
  groups = {"core": project["dependencies"],
            **{name: extras[name] for name in EXTRAS}}
  listed = [(_normalized(r), group) for group, requirements in groups.items()
            for r in requirements]
  pins = [r for r, _ in listed]
  assert len(set(pins)) == len(pins), f"listed twice: {listed}"
  required = [_normalized(r) for r in _requirement_lines()]
  missing = [r for r in required if r not in pins]
  assert not missing, (f"requirements.txt lines missing from pyproject.toml "
                       f"(add to [project] dependencies or an extra): "
                       f"{missing}")
  extra = [r for r in pins if r not in required]
  assert not extra, f"pyproject.toml pins not in requirements.txt: {extra}"


def _distribution_modules(requirements):
  """Top-level module names the installed distributions of `requirements`
  provide (apache-beam -> apache_beam)."""
  names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("_", "-")
           for r in requirements}
  return {module for module, dists
          in importlib.metadata.packages_distributions().items()
          if {d.lower().replace("_", "-") for d in dists} & names}


def _top_level_imports(package):
  """(path, imported module) for every import at a module's top level (not
  inside a function: those load only when the function runs)."""
  for dirpath, _, names in os.walk(os.path.join(ROOT, package)):
    for name in sorted(n for n in names if n.endswith(".py")):
      path = os.path.join(dirpath, name)
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
      for node in tree.body:
        if isinstance(node, ast.Import):
          for alias in node.names:
            yield os.path.relpath(path, ROOT), alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
          yield os.path.relpath(path, ROOT), node.module


def test_extras_are_not_imported_where_they_are_not_installed():
  """The core install (no extras) imports albert_tf: no module of it
  imports an extra's package at its top level (data_prep may import the
  data extra: it is what that extra is for). The demo and dev extras are
  imported by neither package."""
  extras = _pyproject()["project"]["optional-dependencies"]
  never = _distribution_modules(extras["demo"] + extras["dev"])
  optional = _distribution_modules(extras["data"] + extras["serving"] +
                                   extras["onnx"] + extras["keras-hub"])
  assert {"apache_beam", "ai_edge_litert", "keras_hub", "matplotlib",
          "pytest"} <= never | optional  # installed in this venv
  beam = _distribution_modules(extras["data"])
  for package in ("albert_tf", "data_prep"):
    for path, imported in _top_level_imports(package):
      top = imported.split(".")[0]
      assert top not in never, (
          f"{path} imports {imported}: move its requirement from the demo or "
          "dev extra to [project] dependencies")
      allowed = beam if package == "data_prep" else set()
      assert top not in optional - allowed, (
          f"{path} imports {imported} at its top level: a core install has "
          "no extras; import it where it is used")


def test_build_system_is_setuptools():
  build = _pyproject()["build-system"]
  assert build["build-backend"] == "setuptools.build_meta"
  assert any(r.startswith("setuptools") for r in build["requires"])


def test_console_scripts_match_the_cli_table(monkeypatch):
  scripts = _pyproject()["project"]["scripts"]
  assert cli.SCRIPTS == EXPECTED_SCRIPTS
  assert set(scripts) == set(EXPECTED_SCRIPTS)
  ran = []
  monkeypatch.setattr(cli, "run", ran.append)
  for name, target in scripts.items():
    module, _, function = target.partition(":")
    assert module == "albert_tf.cli", target
    getattr(cli, function)()  # The entry point runs its own table row.
    assert ran[-1] == name, (name, target)


def test_family_commands_are_aliases_of_the_registry():
  """Each registered family that names a command has it in the table, and
  that module's `run` is albert_tf.finetune.run with the family fixed
  (no second recipe); every table row that is a family's is one."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  commands = {f.command: name for name, f in registry.families().items()
              if f.command}
  assert set(commands) <= set(cli.SCRIPTS), set(commands) - set(cli.SCRIPTS)
  for command, family in commands.items():
    module = importlib.import_module(cli.SCRIPTS[command])
    assert module.run.__doc__.startswith(
        f"`albert_tf.finetune.run(task={family!r}"), (command, module)
  fine_tuned = {n for n, f in registry.families().items() if f.options}
  assert {"classification", "tagging", "span_qa",
          "multiple_choice"} <= fine_tuned


@pytest.mark.parametrize("name", sorted(EXPECTED_SCRIPTS))
def test_every_script_module_has_a_main_block(name):
  """cli.run executes the module as `__main__`; without the block the
  script would import the module and exit doing nothing."""
  path = os.path.join(ROOT, *EXPECTED_SCRIPTS[name].split(".")) + ".py"
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), filename=path)
  blocks = [node for node in tree.body
            if isinstance(node, ast.If) and ast.unparse(node.test) in (
                "__name__ == '__main__'", "'__main__' == __name__")]
  assert blocks, f"{path} has no `if __name__ == \"__main__\":` block"


def _build_binaries():
  """{py_binary name: its main} of BUILD."""
  with open(os.path.join(ROOT, "BUILD"), encoding="utf-8") as f:
    text = f.read()
  binaries = {}
  for block in re.findall(r"^py_binary\((.*?)^\)", text, re.S | re.M):
    name = re.search(r'\bname\s*=\s*"([^"]+)"', block)
    main = re.search(r'\bmain\s*=\s*"([^"]+)"', block)
    binaries[name.group(1)] = main.group(1) if main else None
  return binaries


def test_every_albert_tf_script_is_a_build_binary():
  """A command of the package (a new task family's too) is a py_binary of
  BUILD whose main is its module's file."""
  mains = set(_build_binaries().values())
  modules = sorted(m for m in cli.SCRIPTS.values()
                   if m.startswith("albert_tf."))
  assert len(modules) >= 9, modules  # the nine of today, and new ones
  missing = [m for m in modules
             if m.replace(".", "/") + ".py" not in mains]
  assert not missing, f"BUILD has no py_binary with main = {missing}"


# ------------------------------------------------------- install into a venv
def _run(argv, **kwargs):
  proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                        **kwargs)
  assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])
  return proc


@pytest.mark.slow
def test_pip_install_into_a_clean_venv(tmp_path):
  """Builds the wheel from a copy of the sources, pip-installs it into a new
  venv (offline, no deps), and runs an installed console script.

  A fresh Python 3.11 venv has pip and setuptools 65.5 but not `wheel`, which
  that setuptools needs to build a wheel, and the test runs offline; so the
  wheel is built by pip in the project's venv (`pip wheel --no-build-isolation
  --no-index`, what `pip install .` does first) and installed by the new
  venv's pip. TensorFlow and the other dependencies would take minutes to
  install: the script runs with the project venv's site-packages on
  PYTHONPATH, while albert_tf must come from the new venv.
  """
  start = time.monotonic()
  # A copy, so that the build's build/ and *.egg-info stay out of the checkout.
  src = tmp_path / "src"
  project = _pyproject()["project"]
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
  for package in ("albert_tf", "data_prep", "configs"):
    shutil.copytree(os.path.join(ROOT, package), src / package, ignore=ignore)
  for name in ("pyproject.toml", project["readme"]):
    shutil.copy(os.path.join(ROOT, name), src / name)

  env = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
  env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
  dist = tmp_path / "dist"
  _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
        "--no-build-isolation", "--wheel-dir", str(dist), str(src)],
       cwd=tmp_path, env=env)
  wheels = sorted(dist.glob("albert_tf-*.whl"))
  assert len(wheels) == 1, wheels

  venv = tmp_path / "venv"
  _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=env)
  python = venv / "bin" / "python"
  _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index",
        str(wheels[0])], cwd=tmp_path, env=env)
  site_packages = _run(
      [str(python), "-I", "-c",
       "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      cwd=tmp_path, env=env).stdout.strip()
  site_packages = os.path.realpath(site_packages)

  # Every module of both packages (subpackages included) is installed; the
  # tests, benchmarks and demo are not.
  for package in ("albert_tf", "data_prep"):
    for dirpath, _, names in os.walk(src / package):
      for name in names:
        if name.endswith(".py"):
          relative = os.path.relpath(os.path.join(dirpath, name), src)
          assert os.path.isfile(os.path.join(site_packages, relative)), relative
  for folder in ("tests", "benchmarks", "demo", "configs"):
    assert not os.path.exists(os.path.join(site_packages, folder)), folder
  # The flagfiles ship inside the package, where --flagfile=configs/NAME
  # finds them from any directory; data_prep, a top-level package, belongs
  # to this distribution alone (here and in the project venv, which holds
  # the editable install `make` does).
  flagfiles = sorted(os.listdir(os.path.join(ROOT, "configs")))
  assert flagfiles and sorted(os.listdir(os.path.join(
      site_packages, "albert_tf", "configs"))) == flagfiles
  probe = ("import importlib.metadata as m\n"
           "from albert_tf.core import cli_errors\n"
           f"print(cli_errors.shipped_flagfile('configs/{flagfiles[0]}'))\n"
           "print(sorted({d.replace('_', '-').lower()\n"
           "              for d in m.packages_distributions()['data_prep']}))\n")
  # absl from the project venv (the new venv has no dependencies).
  deps_env = dict(env, PYTHONPATH=os.pathsep.join(dict.fromkeys(
      sysconfig.get_paths()[k] for k in ("purelib", "platlib"))))
  found, owners = _run([str(python), "-s", "-c", probe], cwd=tmp_path,
                       env=deps_env).stdout.splitlines()
  assert found == os.path.join(site_packages, "albert_tf", "configs",
                               flagfiles[0])
  # One distribution owns data_prep; its name reads albert-tf or albert_tf
  # depending on the setuptools that built it (the wheel's and the editable
  # install's may differ), so it is compared normalised.
  assert owners == "['albert-tf']"

  # Every console script is installed, and (isolated from PYTHONPATH and the
  # checkout) its entry point loads from the new venv.
  for name in EXPECTED_SCRIPTS:
    assert os.access(venv / "bin" / name, os.X_OK), name
  probe = ("import importlib.metadata as m, albert_tf\n"
           "eps = {e.name: e for e in m.entry_points(group='console_scripts')"
           " if e.value.startswith('albert_tf.')}\n"
           "print(albert_tf.__file__)\n"
           "for name in sorted(eps):\n"
           "  print(name, eps[name].value, callable(eps[name].load()))\n")
  lines = _run([str(python), "-I", "-c", probe], cwd=tmp_path,
               env=env).stdout.splitlines()
  assert os.path.realpath(lines[0]).startswith(site_packages + os.sep), lines
  scripts = project["scripts"]
  assert lines[1:] == [f"{name} {scripts[name]} True"
                       for name in sorted(scripts)], lines

  # The installed albert-pretrain runs: TF and absl from the project venv's
  # site-packages, albert_tf from the new venv (PYTHONVERBOSE lists the file
  # of every imported module; the cwd holds no albert_tf).
  run_env = dict(env, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                 PYTHONVERBOSE="1",
                 PYTHONPATH=os.pathsep.join(dict.fromkeys(
                     sysconfig.get_paths()[k] for k in ("purelib", "platlib"))))
  proc = subprocess.run([str(venv / "bin" / "albert-pretrain"), "--help"],
                        cwd=tmp_path, env=run_env, capture_output=True,
                        text=True, timeout=300)
  # Help asked for is no failure (absl alone exits 1; albert_tf.core.cli_errors).
  assert proc.returncode == 0, proc.stderr[-3000:]
  loaded = re.findall(r"^# code object from '(.*)'$", proc.stderr, re.M)
  ours = [p for p in loaded
          if re.search(r"[/\\](albert_tf|data_prep)[/\\]", p)]
  assert ours, "albert_tf was not imported"
  for path in ours:
    assert os.path.realpath(path).startswith(site_packages + os.sep), path
  for module in ("__init__", "cli", "run_pretraining"):
    assert any(re.search(rf"albert_tf[/\\](__pycache__[/\\])?{module}\.", p)
               for p in ours), module
  # The same help as `python -m albert_tf.run_pretraining --help`: the
  # module's docstring and its flags.
  with open(os.path.join(ROOT, "albert_tf", "run_pretraining.py"),
            encoding="utf-8") as f:
    doc = ast.get_docstring(ast.parse(f.read()))
  assert doc.splitlines()[0] in proc.stdout, proc.stdout[:2000]
  for flag in ("--train_batch_size", "--output_dir", "--[no]verbose"):
    assert flag in proc.stdout, (flag, proc.stdout[-2000:])
  elapsed = time.monotonic() - start
  print(f"build + venv + install + albert-pretrain --help: {elapsed:.1f} s")


def test_a_clone_named_albert_tf_beside_a_script_does_not_shadow_it(tmp_path):
  """A script in the folder above a clone named albert_tf: the folder is a
  namespace package `albert_tf` (no __init__.py at the clone's root) whose
  __init__ never runs (`albert_tf.load` missing). With the checkout on
  sys.path, as the Makefile's editable install (editable_mode=compat, a
  .pth) puts it, Python takes the regular package there over it."""
  makefile = open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read()
  assert "-e . --config-settings editable_mode=compat" in makefile
  os.symlink(ROOT, tmp_path / "albert_tf")  # the clone, by that name
  script = tmp_path / "script.py"
  script.write_text("import albert_tf\n"
                    "print(albert_tf.__file__)\n"
                    "print(sorted(albert_tf.__all__)[:2])\n")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                        env=dict(env, PYTHONPATH=ROOT), capture_output=True,
                        text=True, timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.splitlines() == [
      os.path.join(ROOT, "albert_tf", "__init__.py"),
      "['AlbertClassifier', 'AlbertConfig']"]
  # Without it (nothing installed; an editable install's import hook
  # behind Python's own finder is the same), the folder wins: what the
  # README's one line explains. -S -E: no site-packages, no PYTHONPATH.
  bare = subprocess.run([sys.executable, "-S", "-E", str(script)],
                        cwd=tmp_path, capture_output=True, text=True,
                        timeout=120, check=False)
  assert bare.stdout.splitlines() == ["None"], bare.stderr[-2000:]
  assert bare.stderr.splitlines()[-1].startswith(
      "AttributeError: module 'albert_tf' has no attribute '__all__'")
