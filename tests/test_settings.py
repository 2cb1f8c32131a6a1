"""Each command's flags are the fields of one settings dataclass.

Per command: its `__main__` block, run in-process with absl's app.run
stubbed out, defines exactly the fields of one dataclass and nothing else;
an empty (or required-only) command line parses to the dataclass's Python
defaults, field by field. Then albert_tf.core.settings itself: which flag each
annotation makes, enum, list, required, Optional, bounds and renames.
"""

import dataclasses
import importlib
import os
import pathlib
import runpy
import subprocess
import sys
import typing
from typing import List, Optional

from absl import app
from absl import flags
import pytest

from albert_tf.core import settings

REPO = pathlib.Path(__file__).resolve().parents[1]
# module -> (settings class, number of flags). The counts are the command
# lines as they stand: a flag added or dropped changes one on purpose.
COMMANDS = {
    "albert_tf.params": ("ParamsSettings", 3),
    "albert_tf.fill_mask": ("FillMaskArgs", 9),
    "albert_tf.predict": ("PredictArgs", 15),
    "albert_tf.convert_checkpoint": ("ConvertSettings", 6),
    "albert_tf.export_keras_hub": ("KerasHubExportSettings", 6),
    "data_prep.train_vocab": ("TrainVocabSettings", 11),
    "data_prep.corpora": ("CorporaSettings", 7),
    "data_prep.create_pretraining_data": ("CreateDataSettings", 28),
    "albert_tf.run_pretraining": ("PretrainingOptions", 49),
    "albert_tf.run_classifier": ("ClassifierOptions", 57),
    "albert_tf.run_ner": ("NerOptions", 54),
    "albert_tf.run_squad": ("SquadOptions", 60),
    "albert_tf.run_race": ("RaceOptions", 51),
    "data_prep.cloze": ("ClozeSettings", 7),
    "data_prep.task_text": ("TaskTextSettings", 5),
    "albert_tf.export_tflite": ("TfliteSettings", 15),
    "albert_tf.export_onnx": ("OnnxSettings", 10),
    "albert_tf.export_saved_model": ("ExportSettings", 18),
}


def _main_block_definitions(module_name, monkeypatch):
  """(classes given to settings.define_flags, their FlagValues, names the
  run added to the global flags) when `module_name` runs as __main__."""
  classes, fv = [], flags.FlagValues()
  define = settings.define_flags

  def record(cls, flag_values=None, group=None, **kwargs):
    del flag_values
    classes.append(cls)
    define(cls, fv, group=group, **kwargs)

  monkeypatch.setattr(settings, "define_flags", record)
  monkeypatch.setattr(app, "run", lambda *args, **kwargs: None)
  # Imported first: what its imports define (TF's own flags) is not its.
  importlib.import_module(module_name)
  before = set(flags.FLAGS)
  runpy.run_module(module_name, run_name="__main__")
  return classes, fv, set(flags.FLAGS) - before


def _required_argv(cls):
  """--name=value for each required field: a value of its type."""
  hints = typing.get_type_hints(cls)
  argv = {}
  for f in settings.flag_fields(cls):
    spec = settings.spec(f)
    if spec.required:
      value = (spec.choices[0] if spec.choices else
               "7" if hints[f.name] is int else "x")
      argv[f.name] = (settings.flag_name(f), value)
  return argv


# runpy warns that the module was imported before; that is on purpose.
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
@pytest.mark.parametrize("module_name", sorted(COMMANDS))
def test_every_flag_of_a_command_is_a_field_of_its_settings(module_name,
                                                           monkeypatch):
  class_name, count = COMMANDS[module_name]
  classes, fv, stray = _main_block_definitions(module_name, monkeypatch)
  # The command's class, then --verbose (settings.CommandSettings, which
  # every command has and cli_errors defines once).
  assert [c.__name__ for c in classes] == [class_name, "CommandSettings"]
  assert stray == set()  # no flag defined beside the settings classes
  fields = {settings.flag_name(f) for c in classes
            for f in settings.flag_fields(c)}
  assert set(fv) == fields
  assert len(fields) == count and "verbose" in fields
  # Every field is a flag: none is left for Python callers only.
  assert sum(len(dataclasses.fields(c)) for c in classes) == count


def test_help_lists_the_fields_as_the_commands_own_flags():
  # --helpshort shows the fields of the command's settings class, by
  # group; --helpfull lists them under the command's module (absl's key
  # flags), not albert_tf.core.settings'. Help asked for exits 0.
  short, full = (subprocess.run(
      [sys.executable, "-m", "albert_tf.params", flag],
      cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
      capture_output=True, text=True, timeout=120, check=False)
                 for flag in ("--helpshort", "--helpfull"))
  assert (short.returncode, full.returncode) == (0, 0), short.stderr[-2000:]
  lines = short.stdout.splitlines()
  assert lines[0] == ("Parameter table of the presets: `python -m "
                      "albert_tf.params [--json]`.")
  start = lines.index("Flags by purpose (--helpfull lists every flag, "
                      "absl's too):")
  assert lines[start + 1:] == [
      "", "Model flags:",
      "  --presets: Only these presets (comma-separated names of",
      "      albert_tf.core.config.PRESETS; default: all).",
      "", "Output flags:",
      "  --[no]json: Print {preset: {encoder, pretrainer}} JSON. "
      "(default: false)",
      "", "Runtime flags:",
      "  --[no]verbose: Show the traceback of an error instead of one line.",
      "      (default: false)"]
  lines = full.stdout.splitlines()
  start = lines.index(str(REPO / "albert_tf" / "params.py") + ":")
  end = lines.index("absl.app:")
  assert [l.split(":")[0] for l in lines[start + 1:end]
          if l.startswith("  --")] == [
              "  --[no]json", "  --presets", "  --[no]verbose"]


@pytest.mark.parametrize("module_name", sorted(COMMANDS))
def test_command_line_defaults_are_the_python_defaults(module_name):
  cls = getattr(importlib.import_module(module_name), COMMANDS[module_name][0])
  required = _required_argv(cls)
  fv = flags.FlagValues()
  settings.define_flags(cls, fv)
  fv(["command"] + [f"--{flag}={value}" for flag, value in required.values()])
  parsed = settings.from_flags(cls, fv)
  python = cls(**{name: parsed.__dict__[name] for name in required})
  for f in dataclasses.fields(cls):
    assert getattr(parsed, f.name) == getattr(python, f.name), f.name
  for name, (_, value) in required.items():
    assert str(getattr(parsed, name)) == value


def test_the_contract_values_of_the_training_commands():
  from albert_tf import run_classifier, run_ner  # pylint: disable=g-import-not-at-top
  from albert_tf import run_pretraining as rp  # pylint: disable=g-import-not-at-top
  for cls, task in ((run_classifier.ClassifierOptions, "sentiment"),
                    (run_ner.NerOptions, "conll")):
    o = cls(task_name=task, data_dir="d", output_dir="o")
    # As on the command line: nothing to do until a --do_* flag is given.
    assert (o.do_train, o.do_eval, o.do_predict) == (False, False, False)
    assert (o.train_batch_size, o.eval_batch_size, o.learning_rate,
            o.optimizer, o.max_seq_length, o.do_lower_case) == (
                32, 64, 5e-5, "adamw", None, None)
  p = rp.Params()
  assert (p.do_train, p.do_eval, p.train_batch_size, p.optimizer,
          p.learning_rate, p.num_train_steps) == (True, False, 4096, "lamb",
                                                  0.00176, 125000)
  # The original ALBERT TPU flags stay, on both kinds of command.
  for cls in (rp.Params, run_ner.NerOptions):
    names = {f.name for f in dataclasses.fields(cls)}
    assert {"use_tpu", "tpu_name", "tpu_zone", "gcp_project",
            "num_tpu_cores", "save_checkpoints_steps"} <= names
  with pytest.raises(TypeError, match="task_name"):
    run_classifier.ClassifierOptions(data_dir="d", output_dir="o")  # pylint: disable=missing-kwoa


def test_the_old_import_places_still_work():
  """Names that moved to TF-free modules, so that a command parses its
  flags before TF loads, are still found where other code imports them."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import convert_checkpoint, converters
  from albert_tf.core import options
  from albert_tf.training import finetuning
  assert finetuning.FinetuneOptions is options.FinetuneOptions
  assert convert_checkpoint.read_tf1_checkpoint is (
      converters.tf1.read_tf1_checkpoint)
  assert tuple(converters.READERS) == converters.SOURCES


# ------------------------------------------------------------ settings.py
@dataclasses.dataclass
class _Example:
  name: str = settings.field(None, "A name.", required=True)
  mode: str = settings.field("fast", "Mode.", choices=["fast", "slow"])
  steps: int = settings.field(3, "Steps.", lower_bound=1)
  rate: float = settings.field(0.5, "Rate.", lower_bound=0, upper_bound=1)
  dry_run: bool = settings.field(False, "Dry run.")
  length: Optional[int] = settings.field(None, "Length (default: later).")
  lower: Optional[bool] = settings.field(None, "Lowercase (default: later).")
  words: Optional[List[str]] = settings.field(None, "Comma-separated words.")
  texts: List[str] = settings.field(["a"], "Texts.", flag="text", multi=True)


def _parse(*argv):
  fv = flags.FlagValues()
  settings.define_flags(_Example, fv, group="example_module")
  fv(["example"] + list(argv))
  return fv


def test_annotations_make_these_flags():
  fv = _parse("--name=n")
  kinds = {name: (type(fv[name]).__name__, fv[name].flag_type())
           for name in fv}
  assert kinds == {
      "name": ("Flag", "string"), "mode": ("EnumFlag", "string enum"),
      "steps": ("Flag", "int"), "rate": ("Flag", "float"),
      "dry_run": ("BooleanFlag", "bool"), "length": ("Flag", "int"),
      "lower": ("BooleanFlag", "bool"),
      "words": ("Flag", "comma separated list of strings"),
      "text": ("MultiFlag", "multi string")}
  assert fv["mode"].parser.enum_values == ["fast", "slow"]
  assert fv["steps"].help == "Steps."
  assert {f.name for f in fv.flags_by_module_dict()["example_module"]} == set(
      fv)


def test_values_parse_into_the_dataclass():
  fv = _parse("--name=n", "--mode=slow", "--steps=9", "--rate=0.25",
              "--dry_run", "--length=16", "--nolower", "--words=x,y,z",
              "--text=a,b", "--text=c")
  assert settings.from_flags(_Example, fv) == _Example(
      name="n", mode="slow", steps=9, rate=0.25, dry_run=True, length=16,
      lower=False, words=["x", "y", "z"], texts=["a,b", "c"])
  # Optional fields: None unless given, on the command line as in Python.
  defaults = settings.from_flags(_Example, _parse("--name=n"))
  assert (defaults.length, defaults.lower, defaults.words, defaults.texts) == (
      None, None, None, ["a"])
  assert settings.from_flags(_Example, _parse("--name=n"), steps=4).steps == 4


def test_enum_bounds_and_required_are_checked_when_parsing():
  with pytest.raises(flags.IllegalFlagValueError, match="mode"):
    _parse("--name=n", "--mode=medium")
  with pytest.raises(flags.IllegalFlagValueError, match="steps"):
    _parse("--name=n", "--steps=0")
  with pytest.raises(flags.IllegalFlagValueError, match="rate"):
    _parse("--name=n", "--rate=1.5")
  with pytest.raises(flags.IllegalFlagValueError, match="--name"):
    _parse()
  # In Python a required field has no default (and is keyword-only).
  with pytest.raises(TypeError, match="name"):
    _Example()  # pylint: disable=missing-kwoa


def test_mutable_defaults_are_copied_per_instance():
  first, second = _Example(name="a"), _Example(name="b")
  first.texts.append("more")
  assert second.texts == ["a"]


def test_bad_definitions_name_the_field():
  @dataclasses.dataclass
  class Bad:
    sizes: List[int] = settings.field(None, "Sizes.")

  with pytest.raises(TypeError, match=r"Bad\.sizes"):
    settings.define_flags(Bad, flags.FlagValues())
  with pytest.raises(ValueError, match="default must be None"):
    settings.field("x", "A required flag with a default.", required=True)
