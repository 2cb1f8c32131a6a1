"""Nothing silent, round 4 (issue 50): conversion, task modules, corrupt
files, Ctrl-C and export defaults. One test per row of docs/faults.md;
each fails with its fix taken out."""

import json
import os
import pathlib

import numpy as np
import pytest

from albert_tf import convert_checkpoint as cc
from tests import test_convert_bert as bert_fixtures

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _one_line(message, *parts):
  message = str(message)
  assert "\n" not in message, message
  for part in parts:
    assert part in message, message


# ------------------------------------------------------------ conversion
def test_bert_config_with_fewer_layers_than_the_checkpoint_is_refused(
    tmp_path):
  """Row 5: a 2-layer bert_model.ckpt, bert_config.json saying 1 layer."""
  tensors = bert_fixtures.tf1_bert_tensors(np.random.default_rng(1))
  prefix = bert_fixtures.write_google_release(str(tmp_path / "bert"), tensors,
                                              num_hidden_layers=1)
  out = tmp_path / "out"
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet)
  _one_line(error.value, f"{prefix} holds 2 layers but "
            f"{tmp_path / 'bert' / 'bert_config.json'} says "
            "num_hidden_layers=1: bert/encoder/layer_1/attention/output/"
            "LayerNorm/beta and 15 more tensor(s) would be left out")
  assert not out.exists()


def test_vocab_with_fewer_tokens_than_vocab_size_is_refused_unless_padded(
    tmp_path):
  """Row 15: a 30-token vocab.txt for vocab_size=50."""
  tensors = bert_fixtures.tf1_bert_tensors(np.random.default_rng(2),
                                           heads=False)
  release = tmp_path / "bert"
  prefix = bert_fixtures.write_google_release(str(release), tensors)
  bert_fixtures.write_vocab(str(release), size=30)
  out = tmp_path / "out"
  with pytest.raises(cc.ConversionError) as error:
    cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet)
  _one_line(error.value, f"{release / 'vocab.txt'}: 30 tokens but "
            "vocab_size=50 in the config: the embedding rows of ids 30 to "
            "49 are never used", "--allow_padded_vocab")
  assert not out.exists()
  # Padded on purpose: converted, the padding named in the report.
  report = cc.convert("bert", prefix, str(out), log=bert_fixtures.quiet,
                      allow_padded_vocab=True)
  assert report["heads"] == []
  assert (f"{release / 'vocab.txt'}: 30 tokens but vocab_size=50 "
          "(--allow_padded_vocab): the embedding rows of ids 30 to 49 are "
          "never used") in report["notes"]
  assert (out / "vocab.txt").read_text() == (release / "vocab.txt").read_text()


# ------------------------------------------------------------ task modules
FAMILY_FILE = '''from albert_tf.tasks import registry
from albert_tf.tasks.base import Task


@registry.register_family({name!r})
class FamTask(Task):
  """{name}."""
'''


@pytest.fixture
def registry_state(monkeypatch):
  """The registry as it was before the test (families, datasets, files)."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  registry.load_builtins()
  for name in ("_FAMILIES", "_DATASETS", "_FILE_MODULES"):
    monkeypatch.setattr(registry, name, dict(getattr(registry, name)))
  return registry


def _family_file(path, name):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(FAMILY_FILE.format(name=name), encoding="utf-8")
  return str(path)


def test_two_task_modules_of_one_file_name_both_run(tmp_path,
                                                    registry_state):
  """Row 10: a/fam.py and b/fam.py; b was skipped, and the record named b
  for a's family."""
  registry = registry_state
  a = _family_file(tmp_path / "a" / "fam.py", "round4_fam_a")
  b = _family_file(tmp_path / "b" / "fam.py", "round4_fam_b")
  registry.import_task_module(a)
  registry.import_task_module(b)
  # What task_record.json records (finetuning.py: module_source of the
  # task class's module) is each family's own file.
  for name, path in (("round4_fam_a", a), ("round4_fam_b", b)):
    task = registry.family(name).task
    assert task.__doc__ == f"{name}."
    assert registry.module_source(task.__module__) == path
  # Both define the same family: one line naming both files.
  c = _family_file(tmp_path / "c" / "fam.py", "round4_fam_a")
  with pytest.raises(registry.TaskModuleError) as error:
    registry.import_task_module(c)
  _one_line(error.value, f"--task_module={c} does not import: {c}:5: "
            f"RegistryError: task family 'round4_fam_a': already registered "
            f"by {a}.FamTask; {c}.FamTask cannot take the name")
  # The same file again is the same module: imported once, no clash.
  registry.import_task_module(a)


def test_a_task_module_named_like_an_imported_module_runs(tmp_path,
                                                          registry_state):
  """Row 24: --task_module=shadow/json.py was never run (json is
  imported); the user saw `no such task family`."""
  registry = registry_state
  path = _family_file(tmp_path / "shadow" / "json.py", "round4_shadow")
  registry.import_task_module(path)
  task = registry.family("round4_shadow").task
  assert registry.module_source(task.__module__) == path
  assert json.dumps({"a": 1}) == '{"a": 1}'  # the standard json, untouched
  assert json.__file__ != path


BROKEN_MODULES = {
    "syntax": ("import os\nx = 1\ndef f(:\n  pass\n", 3,
               "SyntaxError: invalid syntax"),
    "dependency": ("import os\nimport round4_no_such_dependency\n", 2,
                   "ModuleNotFoundError: No module named "
                   "'round4_no_such_dependency'"),
    "exception": ("import os\n\nraise RuntimeError('no GPU here')\n", 3,
                  "RuntimeError: no GPU here"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_MODULES))
def test_a_task_module_that_fails_to_import_is_one_line(tmp_path, kind,
                                                        registry_state):
  """Row 23: a 17-line traceback at fine-tuning, 39 at export."""
  registry = registry_state
  text, line, what = BROKEN_MODULES[kind]
  path = tmp_path / "fam.py"
  path.write_text(text, encoding="utf-8")
  with pytest.raises(registry.TaskModuleError) as error:
    registry.import_task_module(str(path))
  _one_line(error.value, f"--task_module={path} does not import: "
            f"{path}:{line}: {what} (--verbose shows the traceback)")
  # Export and load find the family through the record's task_module.
  with pytest.raises(registry.TaskModuleError) as error:
    registry.family("round4_broken", str(path))
  _one_line(error.value, f"task family 'round4_broken' is defined in {path}, "
            f"which does not import: {path}:{line}: {what}")


def test_a_task_module_that_fails_to_import_on_the_command_line(tmp_path):
  """Row 23 through albert_tf.finetune: one line, exit 1; --verbose: the
  traceback."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  path = tmp_path / "fam.py"
  path.write_text(BROKEN_MODULES["exception"][0], encoding="utf-8")
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  argv = [sys.executable, "-m", "albert_tf.finetune", "--task=fam",
          f"--task_module={path}"]
  proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert proc.returncode == 1
  assert proc.stderr.splitlines() == [
      f"error: --task_module={path} does not import: {path}:3: "
      "RuntimeError: no GPU here (--verbose shows the traceback)"]
  proc = subprocess.run(argv + ["--verbose"], env=env, capture_output=True,
                        text=True, timeout=300, check=False)
  assert proc.returncode == 1
  assert "Traceback (most recent call last)" in proc.stderr
  assert "raise RuntimeError('no GPU here')" in proc.stderr


# ------------------------------------------------- damaged files of a run
@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
  """A tiny classifier's output_dir (2 steps, so best/ holds ckpt-2) and its
  data, from the fault tests' fixtures."""
  from tests import test_faults  # pylint: disable=g-import-not-at-top
  from albert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("finetuned")
  data = test_faults.data.__wrapped__(tmp_path_factory)
  run_classifier.run(**test_faults._options(  # pylint: disable=protected-access
      data, root / "out", train_step=2, eval_every_steps=2))
  return data, root / "out"


def _copy(run, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out"
  shutil.copytree(run, out)
  return out


def _cut(path, keep):
  path.write_bytes(path.read_bytes()[:keep])


def _error_line(finetuned, out, what):
  """The one `error:` line (exit code 1, no traceback) of one of the three
  readers of a fine-tuned output_dir the issue names, each under the
  command lines' error wrapper."""
  # pylint: disable=g-import-not-at-top
  import albert_tf
  from albert_tf import export_saved_model
  from albert_tf import run_classifier
  from tests import test_faults
  data, _ = finetuned
  run = {
      "export": lambda: export_saved_model.export(str(out),
                                                  str(out) + "_export"),
      "predict": lambda: albert_tf.load(str(out)).predict(["好"]),
      "eval_only": lambda: run_classifier.run(**test_faults._options(  # pylint: disable=protected-access
          data, out, do_train=False, albert_config_file=None,
          vocab_file=None)),
  }[what]
  code, stderr = test_faults._one_line_error(run)  # pylint: disable=protected-access
  lines = [l for l in stderr.splitlines() if l.startswith("error:")]
  assert code == 1 and len(lines) == 1, stderr
  assert "Traceback" not in stderr
  return lines[0]


READERS = ("export", "predict", "eval_only")


def _readers(quick):
  """READERS as params, `quick` alone in make test: the message is one
  function's whichever reader meets the damage (checkpoints.check_complete,
  file_io.parse_json), and every reader keeps one row of the three tests
  below in make test; the whole grid (10 s each) runs in make test-slow."""
  return [pytest.param(w, marks=() if w == quick else pytest.mark.slow)
          for w in READERS]


@pytest.mark.parametrize("what", _readers("eval_only"))
def test_a_truncated_checkpoint_data_file_is_one_line(finetuned, tmp_path,
                                                      what):
  """Row 25: a 43-line `IndexError: Read less bytes than requested`."""
  out = _copy(finetuned[1], tmp_path)
  data = out / "best" / "ckpt-2.data-00000-of-00001"
  _cut(data, 100)
  line = _error_line(finetuned, out, what)
  assert f"{data}: 100 bytes, but {out / 'best' / 'ckpt-2.index'} lists at " \
      "least" in line, line
  assert "the checkpoint is truncated" in line


@pytest.mark.parametrize("what", _readers("predict"))
def test_a_truncated_checkpoint_index_is_one_line(finetuned, tmp_path, what):
  """Row 26: `not an sstable (bad magic number)`, with no path."""
  out = _copy(finetuned[1], tmp_path)
  index = out / "best" / "ckpt-2.index"
  _cut(index, 50)
  line = _error_line(finetuned, out, what)
  assert f"{index} is not a readable checkpoint index (" in line, line


@pytest.mark.parametrize("what", _readers("export"))
@pytest.mark.parametrize("damaged", ["task_record.json", "best/best.json"])
def test_a_corrupt_record_is_one_line_naming_it(finetuned, tmp_path, what,
                                                damaged):
  """Row 27: `Invalid control character at: line 1 column 18`, no file."""
  out = _copy(finetuned[1], tmp_path)
  path = out / damaged
  path.write_text('{"task": "classif\x01ication"', encoding="utf-8")
  line = _error_line(finetuned, out, what)
  assert (f"{path} is not valid JSON (Invalid control character at line 1 "
          "column 18): a cut or damaged copy?") in line, line


# ------------------------------------------------------- export defaults
@pytest.mark.parametrize("model", [None, "encoder"])
def test_a_pretraining_run_exports_at_its_recorded_length(tmp_path,
                                                          monkeypatch, model):
  """Row 33: a run pretrained at seq 32 (max_position_embeddings 64),
  exported without --max_seq_length, failed with `--max_seq_length=128
  must be in [3, …64]`, a value the user never passed."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import export_saved_model
  from albert_tf.core.config import AlbertConfig
  from albert_tf.modeling.models import AlbertPretrainer
  from albert_tf.core.record import ModelInfo
  from albert_tf.training import checkpoints
  from tests.fixtures_data import write_tiny_vocab_and_config
  write_tiny_vocab_and_config(tmp_path, "好差很不是的")
  config = AlbertConfig.from_json_file(tmp_path / "config.json").replace(
      max_position_embeddings=64)
  run = tmp_path / "pretrain"
  run.mkdir()
  checkpoints.save_weights(AlbertPretrainer(config), str(run / "ckpt-1"),
                           config)
  # What run_pretraining records: the records' lengths in task_config.
  ModelInfo(task="pretraining", text_pair=True, task_config={
      "max_seq_length": 32, "max_predictions_per_seq": 5}).write_beside(
          str(run))
  seen = {}

  def written(checkpoint, export_dir, version, overwrite, keras_model,
              model_name, task, record, tokenizer, config, max_seq_length,
              *rest):
    seen.update(length=max_seq_length, recorded=record.max_seq_length)
    return export_dir

  monkeypatch.setattr(export_saved_model, "_export_locked", written)
  export_saved_model.export(str(run), str(tmp_path / "export"), model=model,
                            vocab_file=str(tmp_path / "vocab.txt"))
  assert seen == {"length": 32, "recorded": 32}


# ------------------------------------------------------------------ Ctrl-C
def _ctrl_c(swallowed=False):
  """A real SIGINT to this process, raised where it lands, or swallowed
  as TensorFlow's C++ layers and tf2onnx's `except Exception` do (turned
  into another error that is caught)."""
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)  # the handler raises KeyboardInterrupt here
    raise AssertionError("SIGINT did not arrive")
  except KeyboardInterrupt:
    if not swallowed:
      raise


def _wrapped(fn):
  """fn under the commands' wrapper, with Python's own SIGINT handler as a
  shell's foreground command has it (a background job of a non-interactive
  shell, as `make test &`, inherits SIGINT ignored)."""
  import signal  # pylint: disable=g-import-not-at-top
  from tests import test_faults  # pylint: disable=g-import-not-at-top
  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    return test_faults._one_line_error(fn)  # pylint: disable=protected-access
  finally:
    signal.signal(signal.SIGINT, before)


def _then(error):
  def run():
    _ctrl_c(swallowed=True)
    if error:
      raise error
  return run


@pytest.mark.parametrize("when,fn,line", [
    ("raised", _ctrl_c, "error: stopped by Ctrl-C (SIGINT) before it finished"),
    # swallowed, then the next step fails on what the library left
    ("swallowed_then_an_error", _then(RuntimeError("no graph")),
     "error: stopped by Ctrl-C (SIGINT) before it finished"),
    # swallowed, and the command ran to its end (export_onnx exited 0)
    ("swallowed_to_the_end", _then(None),
     "error: Ctrl-C (SIGINT) came during a step that could not be stopped, "
     "and the command ran to its end: its output is complete"),
])
def test_ctrl_c_outside_a_training_loop_is_one_line_and_130(when, fn, line):
  """Row 28: a 46-83-line KeyboardInterrupt traceback (export_saved_model,
  data prep, predict, fine-tuning before its first step; every command's
  main runs under cli_errors.one_line_errors), and export_onnx exiting 0."""
  del when
  code, stderr = _wrapped(fn)
  assert (code, stderr.splitlines()) == (130, [line])


def test_the_next_command_in_the_process_starts_without_the_ctrl_c():
  """The note of a swallowed Ctrl-C belongs to its command: a script (or a
  test run) that runs another command afterwards is not stopped by it (CI
  once lost a pytest worker this way, in export_tflite.convert)."""
  from albert_tf.core import cli_errors, errors  # pylint: disable=g-import-not-at-top
  code, _ = _wrapped(_then(None))
  assert code == 130 and errors.CtrlC.received is False
  # The next command puts its output in place (no KeyboardInterrupt).
  assert cli_errors.one_line_errors(
      lambda argv: errors.stop_if_ctrl_c() or "done")([]) == "done"


def test_ctrl_c_tracebacks_a_library_logs_are_not_shown():
  """Row 28, data prep: Beam's DirectRunner logs the KeyboardInterrupt of
  the bundle it stopped (a 30-line traceback) before it raises it again."""
  import io  # pylint: disable=g-import-not-at-top
  import logging  # pylint: disable=g-import-not-at-top
  logged = io.StringIO()
  handler = logging.StreamHandler(logged)
  logging.getLogger().addHandler(handler)

  def pipeline():
    try:
      _ctrl_c()
    except KeyboardInterrupt:
      logging.getLogger("apache_beam.runners.worker").exception(
          "KeyboardInterrupt [while running 'MakeInstances']")
      logging.getLogger("apache_beam.runners.worker").warning("other news")
      raise
  try:
    code, stderr = _wrapped(pipeline)
  finally:
    logging.getLogger().removeHandler(handler)
  assert (code, stderr.splitlines()) == (
      130, ["error: stopped by Ctrl-C (SIGINT) before it finished"])
  assert logged.getvalue() == "other news\n"


def test_a_swallowed_ctrl_c_stops_an_export_before_its_rename(tmp_path):
  """Row 28: export_onnx/export_tflite put nothing in place after a Ctrl-C
  the conversion swallowed."""
  from albert_tf import export_tflite  # pylint: disable=g-import-not-at-top
  from albert_tf.core import file_io  # pylint: disable=g-import-not-at-top
  from albert_tf.core import staging
  scratch = tmp_path / "scratch"
  scratch.mkdir()
  names = {k: f"m.{k}" for k in ("tokenizer", "model", "card", "json")}
  for name in names.values():
    (scratch / name).write_text("new")
  stage = staging.Stage(str(scratch), str(tmp_path / "m.onnx"), ".old-m-")

  def export():
    _ctrl_c(swallowed=True)  # inside the conversion
    export_tflite.rename_into_place(stage, names)
  code, stderr = _wrapped(export)
  assert code == 130 and "stopped by Ctrl-C" in stderr
  assert stage.replaced == [] and sorted(
      p.name for p in tmp_path.iterdir()) == ["scratch"]


@pytest.mark.slow
def test_ctrl_c_in_export_onnx_on_the_command_line(tmp_path):
  """Row 28 through the command (absl, run_main): a SIGINT that a step
  swallows, then the error it leaves, is one line and exit code 130."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  child = (
      "import runpy, signal, sys\n"
      # Python's own SIGINT handler, as a terminal's command has it (a
      # background job of a non-interactive shell inherits SIGINT ignored).
      "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
      "from tests import test_faults_convert_round4 as t\n"
      "from albert_tf.core import settings\n"
      "real = settings.from_flags\n"
      "def from_flags(cls):\n"
      "  t._ctrl_c(swallowed=True)\n"
      "  return real(cls)\n"
      "settings.from_flags = from_flags\n"
      "sys.argv = ['export_onnx', '--saved_model=%s', '--output=%s']\n"
      "runpy.run_module('albert_tf.export_onnx', run_name='__main__')\n" % (
          tmp_path / "none", tmp_path / "m.onnx"))
  env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-c", child], env=env, cwd=ROOT,
                        capture_output=True, text=True, timeout=600,
                        check=False)
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert proc.returncode == 130, proc.stderr[-2000:]
  assert errors == ["error: stopped by Ctrl-C (SIGINT) before it "
                    "finished"], proc.stderr
  assert "Traceback" not in proc.stderr
