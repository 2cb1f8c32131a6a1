"""Every CLI, given a missing file, a bad flag value or an unknown flag, prints one line.

One table: each command line must exit non-zero with exactly one line on
stderr, `error: ...`, naming what was wrong, and no traceback; the cases of
VERBOSE are re-run with --verbose and must show the traceback. TensorFlow's
own C++ start-up lines (`I0000 ...`, "All log messages before
absl::InitializeLog()") are printed before any of our code runs and are
not ours to format; they are left out of the count.
"""

import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests import cli_runner

REPO = pathlib.Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/albert_tf_test"
_TF_RUNTIME_LINE = re.compile(
    r"^([IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]|WARNING: All log "
    r"messages before absl::InitializeLog\(\))")

# module -> {case: (argv, a word the error line must contain)}
CASES = {
    "albert_tf.run_pretraining": {
        "missing file": (["--preset=albert_tiny_zh", "--do_train",
                          f"--input_file={MISSING}/*.tfrecord",
                          "--output_dir={tmp}/out"], "matched no file"),
        "bad value": (["--preset=albert_tiny_zh", "--train_batch_size=abc"],
                      "train_batch_size"),
        "unknown flag": (["--max_seq_lenght=64"], "max_seq_lenght"),
    },
    "albert_tf.run_classifier": {
        "missing file": (["--task_name=sentiment", f"--data_dir={MISSING}",
                          "--output_dir={tmp}/out", "--preset=albert_tiny_zh",
                          f"--spm_model_file={MISSING}.model", "--do_train"],
                         MISSING),
        "bad value": (["--task_name=sentiment", "--data_dir={tmp}",
                       "--output_dir={tmp}/out", "--do_train",
                       "--mixed_precision=fp8"],
                      "mixed_precision"),
        "unknown flag": (["--num_train_epoch=3"], "num_train_epoch"),
    },
    "albert_tf.run_ner": {
        "missing file": (["--task_name=conll", f"--data_dir={MISSING}",
                          "--output_dir={tmp}/out", "--preset=albert_tiny_zh",
                          f"--spm_model_file={MISSING}.model", "--do_train"],
                         MISSING),
        "bad value": (["--task_name=msra", "--data_dir={tmp}",
                       "--output_dir={tmp}/out", "--do_train"], "task_name"),
        "unknown flag": (["--doc_strides=64"], "doc_strides"),
    },
    "albert_tf.run_squad": {
        "missing file": ([f"--train_file={MISSING}.json",
                          "--output_dir={tmp}/out", "--preset=albert_tiny_zh",
                          f"--spm_model_file={MISSING}.model", "--do_train"],
                         MISSING),
        "bad value": (["--train_file={tmp}/t.json", "--output_dir={tmp}/out",
                       "--do_train", "--doc_stride=0"], "doc_stride"),
        "unknown flag": (["--max_question_length=64"],
                         "max_question_length"),
    },
    "albert_tf.run_race": {
        "missing file": ([f"--data_dir={MISSING}", "--output_dir={tmp}/out",
                          "--preset=albert_tiny_zh",
                          f"--spm_model_file={MISSING}.model", "--do_train"],
                         MISSING),
        "bad value": (["--data_dir={tmp}", "--output_dir={tmp}/out",
                       "--do_train", "--task_name=dream"], "task_name"),
        "unknown flag": (["--max_qa_len=64"], "max_qa_len"),
    },
    "data_prep.cloze": {
        "missing flag": (["--max_documents=5"], "output_dir"),
        "bad value": (["--output_dir={tmp}/c", "--max_documents=many"],
                      "max_documents"),
        "unknown flag": (["--queries=3"], "queries"),
    },
    "albert_tf.export_saved_model": {
        "missing file": ([f"--checkpoint={MISSING}", "--export_dir={tmp}/sm",
                          "--preset=albert_tiny_zh"], MISSING),
        "bad value": ([f"--checkpoint={MISSING}", "--export_dir={tmp}/sm",
                       "--model=bert"], "model"),
        "unknown flag": (["--export_path=x"], "export_path"),
    },
    "albert_tf.export_tflite": {
        "missing file": ([f"--saved_model={MISSING}",
                          "--output={tmp}/m.tflite"], MISSING),
        "bad value": ([f"--saved_model={MISSING}", "--output={tmp}/m.tflite",
                       "--quantize=int4"], "quantize"),
        "unknown flag": (["--quantise=int8"], "quantise"),
    },
    "albert_tf.export_onnx": {
        "missing file": ([f"--saved_model={MISSING}",
                          "--output={tmp}/m.onnx"], MISSING),
        "bad value": ([f"--saved_model={MISSING}", "--output={tmp}/m.onnx",
                       "--quantize=int4"], "quantize"),
        "unknown flag": (["--quantise=dynamic"], "quantise"),
    },
    "albert_tf.convert_checkpoint": {
        "missing file": (["--source=original", f"--checkpoint={MISSING}",
                          "--output_dir={tmp}/conv"], "does not exist"),
        "bad value": (["--source=onnx", "--checkpoint=x",
                       "--output_dir={tmp}/conv"], "source"),
        "unknown flag": (["--src=original"], "src"),
        "no keras-hub preset": (["--source=keras_hub",
                                 "--checkpoint=no_such_preset",
                                 "--output_dir={tmp}/out"], "no_such_preset"),
    },
    "albert_tf.export_keras_hub": {
        "missing file": ([f"--checkpoint={MISSING}", "--output_dir={tmp}/out"],
                         MISSING),
        "bad value": ([f"--checkpoint={MISSING}", "--output_dir={tmp}/out",
                       "--overwrite=maybe"], "overwrite"),
        "unknown flag": (["--output=x"], "output"),
    },
    "albert_tf.fill_mask": {
        "missing file": ([f"--checkpoint={MISSING}", "--text=中国[MASK]民"],
                         MISSING),
        "bad value": ([f"--checkpoint={MISSING}", "--text=a [MASK]",
                       "--top_k=many"], "top_k"),
        "unknown flag": (["--topk=3"], "topk"),
    },
    "data_prep.train_vocab": {
        "missing file": ([f"--input={MISSING}/*.txt",
                          "--model_prefix={tmp}/spm"], MISSING),
        "bad value": (["--input=x", "--model_prefix={tmp}/spm",
                       "--vocab_size=many"], "vocab_size"),
        "unknown flag": (["--vocabsize=100"], "vocabsize"),
    },
    "data_prep.create_pretraining_data": {
        "missing file": ([f"--input_file={MISSING}/*.txt",
                          "--output_dir={tmp}/rec",
                          f"--spm_model_file={MISSING}.model"], MISSING),
        "bad value": (["--input_file=x", "--output_dir={tmp}/rec",
                       "--dupe_factor=abc"], "dupe_factor"),
        "unknown flag": (["--max_seq_lenght=64"], "max_seq_lenght"),
    },
    "data_prep.corpora": {
        "missing flag": (["--corpus=peoples_daily_ner"], "--output_dir"),
        "bad value": (["--corpus=wiki", "--output_dir={tmp}/out"], "corpus"),
        "unknown flag": (["--max_document=5"], "max_document"),
    },
    "albert_tf.params": {
        "bad value": (["--json=maybe"], "json"),
        "unknown preset": (["--presets=albert_bse_v2"], "albert_bse_v2"),
        "unknown flag": (["--jsn"], "jsn"),
    },
    "demo.run_demo": {
        # The vocab stage without the corpus stage's output: the stage's own
        # error line, in the demo's one line.
        "missing file": (["--only=vocab", "--output_root={tmp}/demo"],
                         "train.txt"),
        "bad value": (["--only=pretrian", "--output_root={tmp}/out"],
                      "pretrian"),
        "unknown flag": (["--fats"], "fats"),
    },
}

# module -> the case re-run with --verbose, which must then show the
# traceback: one that fails in main, for every CLI. A bad or unknown flag
# fails while parsing, before main, so it stays one line with --verbose too.
VERBOSE = {
    "albert_tf.run_pretraining": "missing file",
    "albert_tf.run_classifier": "missing file",
    "albert_tf.run_ner": "missing file",
    "albert_tf.run_squad": "missing file",
    "albert_tf.run_race": "missing file",
    "data_prep.cloze": "missing flag",
    "albert_tf.export_saved_model": "missing file",
    "albert_tf.export_tflite": "missing file",
    "albert_tf.export_onnx": "missing file",
    "albert_tf.convert_checkpoint": "missing file",
    "albert_tf.export_keras_hub": "missing file",
    "albert_tf.fill_mask": "missing file",
    "data_prep.train_vocab": "missing file",
    "data_prep.create_pretraining_data": "missing file",
    "data_prep.corpora": "missing flag",
    "albert_tf.params": "unknown preset",
    "demo.run_demo": "bad value",
}


def _run(module, argv, tmp):
  env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2",
             CUDA_VISIBLE_DEVICES="")
  argv = [a.replace("{tmp}", str(tmp)) for a in argv]
  # The demo runs from the repository root, as `make demo` does (its stages
  # are `python -m` children with the working directory on PYTHONPATH).
  cwd = REPO if module == "demo.run_demo" else tmp
  return cli_runner.run_module([module, *argv], cwd=cwd, env=env,
                               timeout=300)


@pytest.mark.slow
def test_every_cli_reports_bad_input_in_one_line(tmp_path):
  jobs = [(module, case, argv, word) for module, cases in CASES.items()
          for case, (argv, word) in cases.items()]
  verbose = [(module, CASES[module][case][0] + ["--verbose"])
             for module, case in VERBOSE.items()]
  (tmp_path / "verbose").mkdir()
  # Forked from a zygote that imported TF once (tests/cli_runner.py), 2 at
  # a time (4 made the file no faster on 2 cores).
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    procs = list(pool.map(lambda job: _run(job[0], job[2], tmp_path), jobs))
    verbose_procs = list(pool.map(
        lambda job: _run(job[0], job[1], tmp_path / "verbose"), verbose))
  failures = []
  for (module, case, _, word), proc in zip(jobs, procs):
    lines = [l for l in proc.stderr.splitlines()
             if l.strip() and not _TF_RUNTIME_LINE.match(l)]
    if (proc.returncode == 0 or len(lines) != 1 or
        not lines[0].startswith("error: ") or word not in lines[0]):
      failures.append(f"{module} [{case}] rc={proc.returncode}: "
                      + " | ".join(lines[-6:]))
  for (module, _), proc in zip(verbose, verbose_procs):
    if proc.returncode == 0 or "Traceback" not in proc.stderr:
      failures.append(f"{module} [{VERBOSE[module]} --verbose] "
                      f"rc={proc.returncode}, no traceback: "
                      + " | ".join(proc.stderr.splitlines()[-6:]))
  assert not failures, "\n".join(failures)
  assert not (tmp_path / "out").exists()  # nothing written on bad input


OUT_OF_MEMORY = '''
import sys
from absl import flags
from albert_tf.core import cli_errors
flags.DEFINE_integer("train_batch_size", 256, "")
flags.DEFINE_integer("max_seq_length", 512, "")
flags.DEFINE_boolean("verbose", False, "")
class ResourceExhaustedError(Exception):  # TF's, as its name and message go
  pass
def main(argv):
  raise ResourceExhaustedError(
      "Graph execution error:\\n\\nDetected at node StatefulPartitionedCall"
      "\\nOut of memory while trying to allocate 28.01GiB.\\n" + "x" * 2200)
cli_errors.run_main(main, quiet_tensorflow=False)
'''


def test_out_of_memory_is_one_line_naming_the_flags_to_lower(tmp_path):
  """TF's 2,000-character OOM message becomes one line with the batch and
  length flags and their values, and the process exits at once, 1."""
  script = tmp_path / "oom.py"
  script.write_text(OUT_OF_MEMORY, encoding="utf-8")
  env = dict(os.environ, PYTHONPATH=str(REPO))
  proc = subprocess.run([sys.executable, str(script)], capture_output=True,
                        text=True, env=env, timeout=60, check=False)
  assert proc.returncode == 1
  assert proc.stderr == (
      "error: out of memory: TensorFlow could not allocate 28.01GiB (lower "
      "--train_batch_size=256 or --max_seq_length=512; --verbose shows "
      "TensorFlow's message)\n")
  proc = subprocess.run([sys.executable, str(script), "--verbose"],
                        capture_output=True, text=True, env=env, timeout=60,
                        check=False)
  assert proc.returncode == 1 and "Traceback" in proc.stderr
  assert "Out of memory while trying to allocate 28.01GiB" in proc.stderr
