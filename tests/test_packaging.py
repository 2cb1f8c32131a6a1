"""Packaging: pyproject.toml's dependencies and console scripts,
and an install of the package into a clean venv.

requirements.txt is the one source of the version pins: pyproject.toml lists
its runtime lines as `dependencies` and its demo/test-only lines as the `dev`
extra, verbatim, and the first test checks that the two lists together are
exactly requirements.txt.
"""

import ast
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
    "albert-classify": "albert_tf.run_classifier",
    "albert-ner": "albert_tf.run_ner",
    "albert-squad": "albert_tf.run_squad",
    "albert-race": "albert_tf.run_race",
    "albert-export": "albert_tf.export_saved_model",
    "albert-export-tflite": "albert_tf.export_tflite",
    "albert-export-keras-hub": "albert_tf.export_keras_hub",
    "albert-fill-mask": "albert_tf.fill_mask",
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
def test_pyproject_dependencies_are_requirements_txt():
  project = _pyproject()["project"]
  runtime = [_normalized(r) for r in project["dependencies"]]
  dev = [_normalized(r) for r in project["optional-dependencies"]["dev"]]
  required = [_normalized(r) for r in _requirement_lines()]
  assert len(set(runtime)) == len(runtime), "duplicate in dependencies"
  assert not set(runtime) & set(dev), "both runtime and dev"
  missing = [r for r in required if r not in runtime and r not in dev]
  assert not missing, (f"requirements.txt lines missing from pyproject.toml "
                       f"(add to [project] dependencies, or to the dev extra "
                       f"if only the demo or tests use them): {missing}")
  extra = [r for r in runtime + dev if r not in required]
  assert not extra, f"pyproject.toml pins not in requirements.txt: {extra}"


def test_dev_extra_is_not_imported_by_the_installed_packages():
  """What the dev extra holds (demo plots, pytest) is not needed at run time:
  no module of albert_tf or data_prep imports it."""
  dev = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower().replace("_", "-")
         for r in _pyproject()["project"]["optional-dependencies"]["dev"]}
  dev_modules = {module for module, dists
                 in importlib.metadata.packages_distributions().items()
                 if {d.lower().replace("_", "-") for d in dists} & dev}
  assert dev_modules, dev  # matplotlib and pytest are installed in the venv.
  for package in ("albert_tf", "data_prep"):
    for dirpath, _, names in os.walk(os.path.join(ROOT, package)):
      for name in sorted(n for n in names if n.endswith(".py")):
        path = os.path.join(dirpath, name)
        with open(path, encoding="utf-8") as f:
          tree = ast.parse(f.read(), filename=path)
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            imported_names = [alias.name for alias in node.names]
          elif isinstance(node, ast.ImportFrom) and not node.level:
            imported_names = [node.module]
          else:
            continue
          for imported in imported_names:
            assert imported.split(".")[0] not in dev_modules, (
                f"{os.path.relpath(path, ROOT)} imports {imported}: move its "
                "requirement from the dev extra to [project] dependencies")


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
  for package in ("albert_tf", "data_prep"):
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
  for folder in ("tests", "benchmarks", "demo"):
    assert not os.path.exists(os.path.join(site_packages, folder)), folder

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
  # Help asked for is no failure (absl alone exits 1; albert_tf.cli_errors).
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
