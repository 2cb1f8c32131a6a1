"""--help of every console script: exit 0, its flags by purpose, no TF.

Each command of albert_tf.cli.SCRIPTS runs once as a fresh interpreter
(`python -c PROBE <module> --help`: runpy, as `python -m` runs it), two at a
time; PROBE prints, at exit, which TensorFlow / Keras packages were loaded.
Then the listing itself (cli_errors.grouped_help, flag_help_line) in
process, on flags defined here.
"""

import concurrent.futures
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from typing import List, Optional

from absl import flags
import pytest

from albert_tf import cli
from albert_tf.core import cli_errors
from albert_tf.core import settings

REPO = pathlib.Path(__file__).resolve().parents[1]
# Any of these in sys.modules means TF (or its Keras) was imported.
TF_PACKAGES = ("tensorflow", "keras", "tf_keras", "tensorflow_text",
               "keras_hub", "ai_edge_litert")
PROBE = f"""
import atexit, json, runpy, sys
atexit.register(lambda: print("TF-MODULES " + json.dumps(sorted(
    m for m in sys.modules if m.split(".")[0] in {TF_PACKAGES!r})),
    file=sys.stderr))
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
TRAINING = ["Data", "Model", "Training", "Output", "Distribution", "Runtime"]
# module -> the section headers of its --help, in order.
SECTIONS = {
    "albert_tf.run_pretraining": TRAINING,
    "albert_tf.finetune": ["Data", "Runtime"],  # --task, --task_module, --verbose
    "albert_tf.run_classifier": TRAINING,
    "albert_tf.run_ner": TRAINING,
    "albert_tf.run_squad": TRAINING,
    "albert_tf.run_race": TRAINING,
    "albert_tf.export_saved_model": ["Model", "Output", "Runtime"],
    "albert_tf.export_tflite": ["Data", "Model", "Output", "Runtime"],
    "albert_tf.export_onnx": ["Model", "Output", "Runtime"],
    "albert_tf.export_keras_hub": ["Model", "Output", "Runtime"],
    "albert_tf.fill_mask": ["Data", "Model", "Output", "Runtime"],
    "albert_tf.predict": ["Data", "Model", "Output", "Runtime"],
    "albert_tf.convert_checkpoint": ["Model", "Output", "Runtime"],
    "albert_tf.params": ["Model", "Output", "Runtime"],
    "data_prep.train_vocab": ["Data", "Model", "Output", "Runtime"],
    "data_prep.create_pretraining_data": ["Data", "Model", "Output",
                                          "Runtime"],
    "data_prep.corpora": ["Data", "Output", "Runtime"],
}


def _help(module, flag="--help"):
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, "-c", PROBE, module, flag],
                        cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=120, check=False)


def _sections(stdout):
  """{header: [the flag names under it]} of a --help listing."""
  sections, current = {}, None
  for line in stdout.splitlines():
    if line.endswith(" flags:") and " " not in line[:-len(" flags:")]:
      current = sections.setdefault(line[:-len(" flags:")], [])
    elif current is not None and line.startswith("  --"):
      name = line[4:].split(":", 1)[0]
      current.append(name[4:] if name.startswith("[no]") else name)
  return sections


def _tf_modules(stderr):
  lines = [l for l in stderr.splitlines() if l.startswith("TF-MODULES ")]
  assert len(lines) == 1, stderr[-2000:]
  return json.loads(lines[0][len("TF-MODULES "):])


def test_every_command_lists_its_flags_by_purpose_without_tf():
  assert sorted(SECTIONS) == sorted(cli.SCRIPTS.values())
  modules = sorted(SECTIONS)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    procs = dict(zip(modules, pool.map(_help, modules)))
  for module in modules:
    proc = procs[module]
    assert proc.returncode == 0, (module, proc.stderr[-2000:])
    assert _tf_modules(proc.stderr) == [], module
    sections = _sections(proc.stdout)
    assert list(sections) == SECTIONS[module], module
    # Every flag of its settings class, once (the inherited ones too).
    listed = [name for names in sections.values() for name in names]
    assert len(listed) == len(set(listed)), module
    assert "Flags by purpose (--helpfull lists every flag, absl's too):" in (
        proc.stdout.splitlines()), module
  classifier = _sections(procs["albert_tf.run_classifier"].stdout)
  # Every flag of the family's registered options, and nothing else.
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  assert sorted(n for names in classifier.values() for n in names) == sorted(
      [settings.flag_name(f) for f in settings.flag_fields(
          registry.family("classification").options)] + ["verbose"])
  assert {"max_seq_length", "task_name", "data_dir"} <= set(classifier["Data"])
  assert {"learning_rate", "num_train_epochs", "train_step"} <= set(
      classifier["Training"])
  assert classifier["Output"] == ["output_dir", "keep_checkpoint_max",
                                  "log_every_steps", "overwrite", "plots"]
  lines = procs["albert_tf.run_classifier"].stdout.splitlines()
  assert "  --learning_rate: Peak AdamW learning rate. (default: 5e-05)" in (
      lines)
  assert "  --output_dir: Where checkpoints and results go. (required)" in (
      lines)
  assert lines[0] == ("Fine-tune ALBERT on sentence(-pair) classification "
                      "or regression.")


def _help_args(module, *args):
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run([sys.executable, "-c", PROBE, module, *args],
                        cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=120, check=False)


def test_finetune_help_of_each_family_and_dataset_comes_from_the_registry():
  """`albert-finetune --task=<family or dataset> --help` lists --task,
  --task_module and exactly that family's option flags, a dataset's values
  as their defaults, and loads no TF; the families come from the registry,
  not from a list here."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  # The package's own (another test of this process may have registered a
  # family of its own, which a fresh --help process does not know).
  families = {n: f for n, f in registry.families().items()
              if f.options and f.task.name == n
              and f.module.startswith("albert_tf.")}
  assert {"classification", "tagging", "span_qa", "multiple_choice"} <= set(
      families)
  some_dataset = {f: sorted(n for n, d in registry.datasets(f).items()
                            if d.module.startswith("albert_tf."))
                  for f in families}
  args = [("--task=" + name, "--help") for name in families] + [
      ("--task=" + names[0], "--help")
      for names in some_dataset.values() if names]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    procs = list(pool.map(lambda a: _help_args("albert_tf.finetune", *a),
                          args))
  for (task_flag, _), proc in zip(args, procs):
    assert proc.returncode == 0, (task_flag, proc.stderr[-2000:])
    assert _tf_modules(proc.stderr) == [], task_flag
    task = task_flag.split("=", 1)[1]
    family, dataset = registry.resolve(task)
    listed = sorted(n for names in _sections(proc.stdout).values()
                    for n in names)
    assert listed == sorted(["task", "task_module", "verbose"] + [
        settings.flag_name(f) for f in settings.flag_fields(family.options)
    ]), task_flag
    if dataset is not None:
      line = next(l for l in proc.stdout.splitlines()
                  if l.startswith("  --task_name:"))
      # The dataset's name is the default, and the flag is not required.
      block = proc.stdout.split("  --task_name:", 1)[1].split("\n  --")[0]
      assert f"default: {dataset.name})" in block, (line, block)
      assert "(required)" not in block, block
  # An unknown --task is one line naming the known ones.
  bad = _help_args("albert_tf.finetune", "--task=no_such_task", "--help")
  assert bad.returncode != 0
  assert [l for l in bad.stderr.splitlines() if l.startswith("FATAL")][0].startswith(
      "FATAL Flags parsing error: --task=no_such_task: no such task family "
      "or dataset; families: classification,"), bad.stderr[-1500:]


def test_helpshort_is_help_and_helpfull_is_absls():
  short, full = (_help("albert_tf.run_classifier", flag)
                 for flag in ("--helpshort", "--helpfull"))
  assert (short.returncode, full.returncode) == (0, 0)
  assert _tf_modules(short.stderr) == _tf_modules(full.stderr) == []
  assert list(_sections(short.stdout)) == TRAINING
  # absl's listing: flags by module, absl's own among them, no sections.
  assert _sections(full.stdout) == {}
  assert "absl.flags:" in full.stdout.splitlines()
  assert "  --[no]do_train: Fine-tune on the train split." in (
      full.stdout.splitlines())


# ------------------------------------------------------------ the listing
@dataclasses.dataclass
class _Example:
  name: str = settings.field(None, "A name.", required=True)
  mode: str = settings.field("fast", "Mode.", choices=["fast", "slow"],
                             group="training")
  steps: int = settings.field(3, "Steps.", lower_bound=1, group="training")
  rate: float = settings.field(0.5, "Rate.", lower_bound=0, upper_bound=1,
                               group="training")
  dry_run: bool = settings.field(False, "Dry run.")
  column: int = settings.field(-1, "Column (default: last).")
  words: Optional[List[str]] = settings.field(["a", "b"], "Words.")
  texts: Optional[List[str]] = settings.field(None, "Texts.", flag="text",
                                              multi=True)
  output_dir: str = settings.field("", "Where to write.")
  verbose: bool = settings.field(False, "Show the traceback of an error.")


def _example_flags():
  fv = flags.FlagValues()
  settings.define_flags(_Example, fv, group="example_module")
  return fv


def test_each_flag_is_one_line_with_its_default_and_choices():
  fv = _example_flags()
  lines = {name: cli_errors.flag_help_line(name, spec, fv[name])
           for listed in settings.flag_groups(fv).values()
           for name, spec in listed}
  assert lines == {
      "name": "  --name: A name. (required)",
      "mode": "  --mode: Mode. (one of fast, slow; default: fast)",
      "steps": "  --steps: Steps. (at least 1; default: 3)",
      "rate": "  --rate: Rate. (0 to 1; default: 0.5)",
      "dry_run": "  --[no]dry_run: Dry run. (default: false)",
      "column": "  --column: Column (default: last).",
      "words": "  --words: Words. (default: a,b)",
      "text": "  --text: Texts. (repeat for several)",
      "output_dir": '  --output_dir: Where to write. (default: "")',
      "verbose": "  --[no]verbose: Show the traceback of an error. "
                 "(default: false)",
  }


def test_long_help_wraps_under_the_name_and_keeps_the_default_whole():
  fv = flags.FlagValues()
  flags.DEFINE_integer("shuffle_buffer_size", 1000, "x", flag_values=fv)
  spec = settings.FlagSpec(1000, "Record shuffle buffer; 0 reads files in "
                           "order, round robin, one file after the other.")
  # At 64 columns a plain textwrap would end the second line "(default:".
  assert cli_errors.flag_help_line(
      "shuffle_buffer_size", spec, fv["shuffle_buffer_size"], width=64) == (
          "  --shuffle_buffer_size: Record shuffle buffer; 0 reads files in\n"
          "      order, round robin, one file after the other.\n"
          "      (default: 1000)")


def test_grouped_help_is_the_docstring_then_one_section_per_group(
    monkeypatch):
  fv = _example_flags()
  main = type(sys)("fake_main")
  main.__doc__ = "Does an example.\n\nAt length.\n"
  monkeypatch.setitem(sys.modules, "__main__", main)
  text = cli_errors.grouped_help(fv, width=80)
  assert text.splitlines()[:6] == [
      "Does an example.", "", "At length.", "",
      "Flags by purpose (--helpfull lists every flag, absl's too):", ""]
  assert _sections(text) == {
      "Data": ["name", "dry_run", "column", "words", "text"],
      "Training": ["mode", "steps", "rate"],
      "Output": ["output_dir"],
      "Runtime": ["verbose"]}
  # Flags not defined by define_flags: no listing of ours (absl's help).
  assert cli_errors.grouped_help(flags.FlagValues()) is None


def test_groups_are_checked_and_derived_from_the_flag_name():
  assert [settings.default_group(n) for n in (
      "init_checkpoint", "learning_rate", "output_dir", "tpu_zone",
      "mixed_precision", "max_seq_length")] == [
          "model", "training", "output", "distribution", "runtime", "data"]
  with pytest.raises(ValueError, match=r"group='io'.*data, model, training"):
    settings.field(1, "x", group="io")
