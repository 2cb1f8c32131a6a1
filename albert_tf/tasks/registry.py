"""Task families and datasets register themselves where they are defined.

The shape of Model Garden's `task_factory.register_task_cls`: a family's
file says, beside its `Task` subclass,

    @registry.register_family("classification", options=ClassifierOptions,
                              command="albert-classify")
    class ClassificationTask(Task):
      ...

and a dataset (a named set of option values of one family, such as CLUE's
AFQMC) says, in the file that reads it,

    registry.register_dataset("afqmc", "classification", spec=AFQMC_SPEC,
                              help="CLUE AFQMC: ...")

Nothing else lists families or datasets. The built-in ones are the modules
of BUILTIN_PACKAGES (this layer's), imported by `load_builtins` on the first
lookup; others come from `--task_module` (a module or a `.py` file), an
ENTRY_POINT_GROUP entry point, or any module imported before the lookup.
No TensorFlow here (the family files import it lazily, `albert_tf.core.lazy`).
"""

import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import re
import sys
import traceback
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

# The packages whose modules register the built-in families and datasets.
BUILTIN_PACKAGES = ("albert_tf.tasks", "albert_tf.datasets")
# The entry-point group of installed packages' families and datasets.
ENTRY_POINT_GROUP = "albert_tf.tasks"


class RegistryError(ValueError):
  """An unknown or clashing family or dataset name."""


class TaskModuleError(RegistryError):
  """A task module that fails to import; `reason` is `FILE:LINE: Type:
  message`, the line of the module where it failed."""

  def __init__(self, message, reason):
    super().__init__(message)
    self.reason = reason


@dataclasses.dataclass(frozen=True)
class Family:
  """A task family: its Task subclass and the dataclass of its flags.

  options: an `albert_tf.core.options.FinetuneOptions` subclass whose fields are
    the family's flags (shared ones inherited); None for a family that is
    not fine-tuned (pretraining).
  command: the console script of the family's own command (an alias of
    `albert-finetune --task=<name>`), or None.
  module: the module that defined the family (`load` imports it).
  modules: the other modules that belong to this family alone (its
    command, readers, model head, serving graph): docs/CONTRACTS.md lists
    them, and only they and `module` may name the family
    (tests/test_family_names.py).
  """
  name: str
  task: type
  options: Optional[type] = None
  command: Optional[str] = None
  module: str = ""
  help: str = ""
  modules: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Dataset:
  """A named dataset of one family: option defaults and the family's spec.

  spec: what the family reads the data with (a classifier_data.TaskSpec,
    a reader); the family says what it accepts.
  defaults: option values this dataset sets (task_name, max_seq_length, ..)
    unless the command line gives them.
  """
  name: str
  family: str
  spec: Any = None
  defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  help: str = ""
  module: str = ""


_FAMILIES: Dict[str, Family] = {}
# Modules imported from a .py file (`import_task_module`): name -> path.
_FILE_MODULES: Dict[str, str] = {}
_DATASETS: Dict[str, Dataset] = {}
_loaded = False


def _module_file(module_name):
  path = getattr(sys.modules.get(module_name), "__file__", None)
  return os.path.realpath(path) if path else None


def _same_definition(known, task_cls):
  """The same class of the same file (a module reloaded, or a file
  imported under another name): it may take its own name again."""
  return (known.__qualname__ == task_cls.__qualname__ and
          _module_file(known.__module__) == _module_file(task_cls.__module__))


def register_family(name: str, *, options: Optional[type] = None,
                    command: Optional[str] = None, help: str = "",  # pylint: disable=redefined-builtin
                    aliases: Iterable[str] = (), modules: Iterable[str] = ()):
  """Class decorator: registers a Task subclass as family `name`.

  aliases: other names of the same class. modules: `Family.modules`.
  Registering a name twice with another class is an error; the same class
  again (a module reloaded) replaces it.
  """
  def decorate(task_cls):
    for n in (name, *aliases):
      known = _FAMILIES.get(n)
      if known and not _same_definition(known.task, task_cls):
        raise RegistryError(
            f"task family {n!r}: already registered by "
            f"{module_source(known.task.__module__)}."
            f"{known.task.__qualname__}; {module_source(task_cls.__module__)}"
            f".{task_cls.__qualname__} cannot take "
            "the name")
      _FAMILIES[n] = Family(n, task_cls, options, command if n == name
                            else None, task_cls.__module__,
                            help or (task_cls.__doc__ or "").split("\n")[0],
                            tuple(modules))
    task_cls.name = task_cls.__dict__.get("name") or name
    return task_cls
  return decorate


def register_dataset(name: str, family: str, *, spec: Any = None,
                     help: str = "", **defaults) -> Dataset:  # pylint: disable=redefined-builtin
  """Registers dataset `name` of `family`; returns it.

  defaults: option values (the family's option fields) the dataset sets;
  task_name defaults to `name`.
  """
  known = _DATASETS.get(name)
  caller = sys._getframe(1).f_globals.get("__name__", "")  # pylint: disable=protected-access
  if known and known.module != caller:
    raise RegistryError(f"dataset {name!r}: already registered by "
                        f"{module_source(known.module)}; "
                        f"{module_source(caller)} cannot take the name")
  if name in _FAMILIES:
    raise RegistryError(f"dataset {name!r}: the name of a task family")
  dataset = Dataset(name, family, spec, {"task_name": name, **defaults},
                    help, caller)
  _DATASETS[name] = dataset
  return dataset


def _file_module_name(path: str) -> str:
  """The name a .py task module is imported under: its file name and a hash
  of where it is, so that two files of one name (a/fam.py, b/fam.py) both
  run, and a file named like a module already imported (json.py) runs at
  all. The same file always gets the same name (imported once)."""
  real = os.path.realpath(path)
  stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(real))[0])
  digest = hashlib.sha256(real.encode("utf-8")).hexdigest()[:10]
  return f"_albert_tf_task_module_{stem}_{digest}"


def _failed_line(error: BaseException, path: Optional[str]) -> str:
  """`FILE:LINE: Type: message` of an error raised while importing a task
  module: the module's own line that failed (a SyntaxError's line, else
  the last traceback frame in `path`, else the last frame)."""
  what = f"{type(error).__name__}: " + " ".join(str(error).split())
  if isinstance(error, SyntaxError) and error.filename:
    what = f"{type(error).__name__}: {error.msg}"
    return f"{error.filename}:{error.lineno}: {what}"
  frames = traceback.extract_tb(error.__traceback__)
  real = os.path.realpath(path) if path else None
  own = [f for f in frames
         if real and os.path.realpath(f.filename) == real]
  frame = (own or [f for f in frames if not f.filename.startswith("<")]
           or frames or [None])[-1]
  if frame is None:
    return what
  return f"{frame.filename}:{frame.lineno}: {what}"


def _raise_import_failure(name, error, path):
  reason = _failed_line(error, path)
  raise TaskModuleError(
      f"--task_module={name} does not import: {reason} (--verbose shows "
      "the traceback)", reason) from error


def import_task_module(name: str) -> None:
  """Imports a module that registers families or datasets: a dotted module
  name, or the path of a .py file (imported under a name of its own,
  `_file_module_name`). A module that fails to import is a TaskModuleError
  naming its file, line and exception."""
  if name.endswith(".py"):
    if not os.path.isfile(name):
      raise RegistryError(f"--task_module={name}: no such file")
    module_name = _file_module_name(name)
    _FILE_MODULES[module_name] = os.path.abspath(name)
    if module_name in sys.modules:
      return
    spec = importlib.util.spec_from_file_location(module_name, name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
      spec.loader.exec_module(module)
    except Exception as e:  # pylint: disable=broad-except
      del sys.modules[module_name]
      _raise_import_failure(name, e, name)
    except BaseException:
      del sys.modules[module_name]
      raise
    return
  try:
    importlib.import_module(name)
  except ModuleNotFoundError as e:
    if e.name and name.startswith(e.name):
      raise RegistryError(f"--task_module={name}: no module named "
                          f"{e.name!r} (give a module on the Python path or "
                          "a .py file)") from None
    _raise_import_failure(name, e, _module_origin(name))
  except Exception as e:  # pylint: disable=broad-except
    _raise_import_failure(name, e, _module_origin(name))


def _module_origin(name: str) -> Optional[str]:
  """The file of dotted module `name`, or None."""
  try:
    spec = importlib.util.find_spec(name)
  except (ImportError, ValueError):
    return None
  return getattr(spec, "origin", None)


def module_source(module_name: str) -> str:
  """How to import a family's module again (what a record keeps): the path
  of the .py file it was imported from (`--task_module=file.py`), else its
  dotted name."""
  return _FILE_MODULES.get(module_name, module_name)


def load_builtins() -> None:
  """Imports every module of BUILTIN_PACKAGES and the entry points of
  ENTRY_POINT_GROUP (once)."""
  global _loaded
  if _loaded:
    return
  _loaded = True
  for package in BUILTIN_PACKAGES:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
      continue
    importlib.import_module(package)
    for info in pkgutil.iter_modules(spec.submodule_search_locations):
      if not info.name.startswith("_"):
        importlib.import_module(f"{package}.{info.name}")
  for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
    entry.load()


def families() -> Dict[str, Family]:
  """{name: Family} of every registered family (built-ins loaded)."""
  load_builtins()
  return dict(_FAMILIES)


def datasets(family: Optional[str] = None) -> Dict[str, Dataset]:
  """{name: Dataset} of every registered dataset (of `family`)."""
  load_builtins()
  return {k: v for k, v in _DATASETS.items()
          if family is None or v.family == family}


def family(name: str, module: Optional[str] = None) -> Family:
  """The family `name`; `module` (a record's) is imported when the name is
  not registered yet. Raises RegistryError listing the known ones."""
  load_builtins()
  if name not in _FAMILIES and module:
    try:
      import_task_module(module)
    except TaskModuleError as e:
      raise TaskModuleError(
          f"task family {name!r} is defined in {module}, which does not "
          f"import: {e.reason} (--verbose shows the traceback)",
          e.reason) from e
    except (ImportError, RegistryError):
      pass
  if name not in _FAMILIES:
    raise RegistryError(
        f"unknown task family {name!r}"
        + (f" (defined in {module}, which is not importable here)"
           if module else "")
        + f"; known: {', '.join(sorted(_FAMILIES))} (a family of your own: "
        "--task_module=<module or file.py>)")
  return _FAMILIES[name]


def resolve(task: str) -> Tuple[Family, Optional[Dataset]]:
  """(family, dataset or None) of a --task value: a family or dataset name.
  Raises RegistryError naming the known ones."""
  load_builtins()
  if task in _FAMILIES:
    return _FAMILIES[task], None
  if task in _DATASETS:
    dataset = _DATASETS[task]
    return family(dataset.family), dataset
  fine_tuned = sorted(n for n, f in _FAMILIES.items() if f.options)
  raise RegistryError(
      f"--task={task}: no such task family or dataset; families: "
      f"{', '.join(fine_tuned)}; datasets: {', '.join(sorted(_DATASETS))} "
      "(a family of your own: --task_module=<module or file.py>)")


def read_record(checkpoint_or_dir: str):
  """`ModelInfo.read_beside` with an older output's record file given the
  family whose `Task.legacy_record_task` claims it."""
  from albert_tf.core.record import ModelInfo  # pylint: disable=g-import-not-at-top

  def legacy_task(file_name, values):
    return next((t for f in families().values()
                 for t in [f.task.legacy_record_task(file_name, values)] if t),
                None)
  return ModelInfo.read_beside(checkpoint_or_dir, legacy_task)


def dataset(name: str) -> Dataset:
  """The registered dataset `name`; RegistryError listing them if none."""
  load_builtins()
  if name not in _DATASETS:
    raise RegistryError(f"unknown dataset {name!r}; known: "
                        f"{', '.join(sorted(_DATASETS))}")
  return _DATASETS[name]
