"""An output_dir belongs to one run: its fingerprint, its lock, its files.

The fingerprint is what a run in an output_dir was started with. A rerun
with another architecture, task, tokenizer, optimizer or batch size stops
with one line instead of resuming from weights that mean something else.
--overwrite deletes the files a run writes there (`run_files()`) and nothing
else: data, notes or another tool's output in the folder stay as they are.
"""

import json
import os
import re
from typing import Dict, Iterable, Optional, Sequence

from absl import logging
import tensorflow as tf

from albert_tf.core import features
from albert_tf.core import file_io
from albert_tf.tasks import registry
from albert_tf.core.config import ARCHITECTURE_FIELDS, AlbertConfig
from albert_tf.data.tokenization import file_sha256
from albert_tf.core import record
from albert_tf.training import callbacks
from albert_tf.training import checkpoints
from albert_tf.training.runtime import RunConfigError, canonical_precision


# ------------------------------------------------------------ fingerprint
FINGERPRINT_FILE = "run_fingerprint.json"


def make_fingerprint(task: str, config: AlbertConfig, tokenizer,
                     optimizer: Optional[dict],
                     precision: Optional[str] = None,
                     train_batch_size: Optional[int] = None,
                     task_settings: Optional[dict] = None) -> dict:
  """What an output_dir's checkpoints mean: compared on every rerun.

  optimizer (None for runs that do not train: so are the fields after it),
  precision (float16 adds loss-scale variables to the optimizer state),
  train_batch_size, task_settings: what else changes the model a training
  run resumes (a fine-tuning family's max_seq_length, ...). A field an older
  run did not record is None there: not compared, and filled in by the next
  training run (`prepare_output_dir`).
  """
  training = optimizer is not None
  return {
      "task": task,
      "albert_config": {k: getattr(config, k) for k in ARCHITECTURE_FIELDS},
      "tokenizer_sha256": (file_sha256(tokenizer.model_file)
                           if tokenizer is not None else None),
      "optimizer": optimizer,
      "mixed_precision": canonical_precision(precision) if training else None,
      # The steps and the learning-rate schedule count batches of this size.
      "train_batch_size": train_batch_size if training else None,
      "task_settings": task_settings if training else None,
  }


def _flatten(values, prefix=""):
  out = {}
  for key, value in values.items():
    if isinstance(value, dict):
      out.update(_flatten(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def check_output_dir(output_dir: str, fingerprint: dict,
                     overwrite: bool = False) -> None:
  """Raises RunConfigError when output_dir holds a run of other settings;
  writes nothing (`prepare_output_dir` does, once every input is valid)."""
  path = os.path.join(output_dir, FINGERPRINT_FILE)
  if overwrite:
    return
  if not tf.io.gfile.exists(path):
    # Checkpoints of unknown settings (an older albert_tf, another tool):
    # resuming them could silently mix two runs.
    if tf.io.gfile.exists(os.path.join(output_dir, "checkpoint")):
      training = fingerprint.get("optimizer") is not None
      raise RunConfigError(
          f"--output_dir={output_dir} holds checkpoints but no "
          f"{FINGERPRINT_FILE}, so their settings are unknown: pass them "
          "as --init_checkpoint with another --output_dir"
          + (" (or --overwrite, which deletes them, to start over)"
             if training else ""))
    return
  saved = _read_fingerprint(path)
  wanted = json.loads(json.dumps(fingerprint))
  _check_update_rule(output_dir, saved, wanted)
  saved, wanted = _flatten(saved), _flatten(wanted)
  # A field either side leaves open (None, or in a section left open: no
  # optimizer in an eval-only run, a fine-tuning warmup given as a share of
  # the steps) is not compared.
  diff = [f"{k} {saved.get(k)!r} there vs {wanted.get(k)!r} now"
          for k in sorted(set(saved) | set(wanted))
          if saved.get(k) is not None and wanted.get(k) is not None
          and saved.get(k) != wanted.get(k)]
  if diff:
    raise RunConfigError(
        f"--output_dir={output_dir} holds a run with other settings ("
        + "; ".join(diff) + "): pass --overwrite to start over, or choose "
        "another --output_dir")


_RULE_NAMES = {"google-research/albert": "the original's (google-research/"
               "albert)", "keras": "Keras's"}


def _check_update_rule(output_dir: str, saved: dict, wanted: dict) -> None:
  before = (saved.get("optimizer") or {}).get("rule")
  now = (wanted.get("optimizer") or {}).get("rule")
  if before is None or now is None or before == now:
    return
  name = saved["optimizer"].get("name")
  raise RunConfigError(
      f"--output_dir={output_dir} was trained with {_RULE_NAMES[before]} "
      f"update rule (--optimizer={name}), this run asks for "
      f"{_RULE_NAMES[now]} (--optimizer={wanted['optimizer'].get('name')}): "
      f"pass --optimizer={name} to continue it, or --overwrite to start over")


def _with_update_rule(fingerprint: dict) -> dict:
  """An older run's fingerprint in today's terms: before the original's
  update rules existed, "lamb" and "adamw" were Keras's rules and no "rule"
  was recorded, so such a run is keras_lamb / keras_adamw."""
  optimizer = fingerprint.get("optimizer")
  if isinstance(optimizer, dict) and "rule" not in optimizer:
    name = optimizer.get("name")
    if name in ("lamb", "adamw"):
      optimizer["name"] = f"keras_{name}"
    optimizer["rule"] = "keras"
  return fingerprint


def recorded_precision(output_dir: str) -> Optional[str]:
  """The mixed_precision of output_dir's run_fingerprint.json, or None (no
  run, no record, unreadable)."""
  try:
    return recorded_section(output_dir, "mixed_precision")
  except (RunConfigError, tf.errors.OpError, AttributeError):
    return None


def recorded_section(output_dir: str, key: str):
  """A section of output_dir's run_fingerprint.json (None without one)."""
  path = os.path.join(output_dir, FINGERPRINT_FILE)
  if not tf.io.gfile.exists(path):
    return None
  return _read_fingerprint(path).get(key)


def record_section(output_dir: str, key: str, value) -> None:
  """Adds a section to output_dir's run_fingerprint.json: what a run
  decided once it ran (a budget's plan), kept by its resumes."""
  path = os.path.join(output_dir, FINGERPRINT_FILE)
  saved = _read_fingerprint(path) if tf.io.gfile.exists(path) else {}
  saved[key] = value
  _write_fingerprint(path, saved)


def _write_fingerprint(path: str, fingerprint: dict) -> None:
  with tf.io.gfile.GFile(path + ".tmp", "w") as f:
    f.write(json.dumps(fingerprint, indent=2, sort_keys=True))
  file_io.synced_rename(path + ".tmp", path)


def _read_fingerprint(path: str) -> dict:
  with tf.io.gfile.GFile(path, "r") as f:
    text = f.read()
  try:
    return _with_update_rule(json.loads(text))
  except json.JSONDecodeError as e:
    raise RunConfigError(
        f"{path} is not valid JSON ({e.msg}, line {e.lineno}): written by "
        "another tool or cut short; it records the run's settings, so pass "
        "--overwrite to start over, or choose another --output_dir") from None


LOCK_FILE = file_io.LOCK_FILE


def lock_output_dir(output_dir: str):
  """`file_io.lock_output` of output_dir for the life of the run (keep it
  referenced; None on a remote file system)."""
  return file_io.lock_output(output_dir, "--output_dir", error=RunConfigError,
                             remove=False)


# ------------------------------------------------------------ its files
_CKPT = r"ckpt-\d+\.(index|data-\d+-of-\d+)"  # tf.train.CheckpointManager's
_EVENTS = r"events\.out\.tfevents\..+"  # tf.summary's
# What training, eval and predict runs write in output_dir, by folder (full
# matches of the names): --overwrite deletes these and nothing else. The
# tokenizer copy (`finetuning.write_run_files`) is the file the previous
# run's task record names; the families' own predictions are their
# `output_files`, read from the registry when a run starts over (so a family
# registered after this module loaded is included).
_RUN_FILES: Dict[str, Sequence[str]] = {
    "": (_CKPT, r"checkpoint(\.tmp)?",
         re.escape(FINGERPRINT_FILE) + r"(\.tmp)?",
         *map(re.escape, (
             checkpoints.CONFIG_NAME, record.RECORD_FILE,
             *record.LEGACY_RECORD_FILES, callbacks.TRAIN_LOG,
             callbacks.EVAL_LOG, features.SKIPPED_RECORDS_FILE,
             # run_pretraining's results; test_results.json of older runs.
             "eval_results.txt", "test_results.json")),
         r"eval_results\.txt\.tmp",
         # a fine-tuning run's plot (training.plots.CURVES_FILE)
         r"curves\.png(\.tmp)?",
         # renamed into place (file_io.atomic_writer, its .tmp)
         r"eval_results\.json(\.tmp)?"),
    "train": (_EVENTS,),
    "eval": (_EVENTS,),
    checkpoints.BEST_DIR: (_CKPT, r"checkpoint(\.tmp)?", re.escape(
        checkpoints.BEST_FILE) + r"(\.tmp)?"),
}


def run_files() -> Dict[str, Sequence[str]]:
  """{folder: name patterns} of what runs write in output_dir: the
  trainer's and commands' files, and every registered family's and
  dataset's output files, each also as its `.tmp`."""
  own = {name for family in registry.families().values()
         for name in family.task.output_files}
  for dataset in registry.datasets().values():
    own.update(registry.family(dataset.family).task.dataset_output_files(
        dataset))
  own = sorted(own)
  files = dict(_RUN_FILES)
  files[""] = (*files[""], *(re.escape(n) + r"(\.tmp)?" for n in own))
  return files


# Folders of the run's own: a save killed midway (`<prefix>_temp*`), a
# multi-worker run's scratch checkpoints (`.worker_N`).
RUN_DIRS = r"ckpt-\d+_temp.*|\.worker_\d+"


def _resolved(path: str) -> str:
  return path.rstrip("/") if "://" in path else os.path.realpath(path)


def check_inputs_outside(output_dir: str, flag: str, value: str,
                         files: Iterable[str]) -> None:
  """Raises RunConfigError when one of `files` (what `flag`=`value` reads)
  lies in output_dir (a glob of it would read checkpoints, --overwrite
  would delete in the corpus)."""
  root = _resolved(output_dir)
  for path in files:
    if _resolved(path).startswith(root + "/"):
      raise RunConfigError(
          f"{flag}={value} reads {path}, which is inside --output_dir="
          f"{output_dir}: write checkpoints and logs to a folder of their "
          "own (another --output_dir)")


def remove_run_files(output_dir: str, keep: Iterable[str] = ()) -> list:
  """Deletes what a run wrote in output_dir (`run_files()`, `RUN_DIRS`, the
  tokenizer copy), never the lock, nor a path in `keep` (the new run's own
  inputs). A folder of the run's (train/, eval/, best/) goes once nothing
  else is left in it. Returns the paths deleted."""
  keep = {_resolved(p) for p in keep if p}
  try:  # the tokenizer copy the last fine-tuning run put there
    info = registry.read_record(output_dir)
  except (ValueError, tf.errors.OpError):  # a record killed mid-write
    info = None
  tokenizer = info.tokenizer_file if info else None
  if tokenizer and os.path.basename(tokenizer) != tokenizer:
    tokenizer = None
  removed = []
  for folder, patterns in sorted(run_files().items(), reverse=True):
    directory = os.path.join(output_dir, folder) if folder else output_dir
    if not tf.io.gfile.isdir(directory):
      continue
    files = re.compile("|".join(patterns) if folder or not tokenizer else
                       "|".join([*patterns, re.escape(tokenizer)]))
    for name in tf.io.gfile.listdir(directory):
      name = name.rstrip("/")
      path = os.path.join(directory, name)
      if _resolved(path) in keep:
        continue
      if tf.io.gfile.isdir(path):
        if not folder and re.fullmatch(RUN_DIRS, name):
          tf.io.gfile.rmtree(path)
          removed.append(path)
      elif files.fullmatch(name):
        tf.io.gfile.remove(path)
        removed.append(path)
    if folder and not tf.io.gfile.listdir(directory):
      tf.io.gfile.rmtree(directory)
  return removed


def prepare_output_dir(output_dir: str, fingerprint: dict,
                       overwrite: bool = False, keep: Iterable[str] = ()):
  """Creates and locks output_dir, deletes the run files there on
  --overwrite (`keep`: the run's inputs), writes the fingerprint. Returns
  the lock: keep it."""
  tf.io.gfile.makedirs(output_dir)
  lock = lock_output_dir(output_dir)
  if overwrite:
    removed = remove_run_files(output_dir, keep)
    if removed:
      logging.info("--overwrite: deleted %d files of the earlier run in %s",
                   len(removed), output_dir)
  path = os.path.join(output_dir, FINGERPRINT_FILE)
  saved = _read_fingerprint(path) if tf.io.gfile.exists(path) else {}
  # check_output_dir compared every section both sides set; a section the
  # earlier run left open (an eval-only run has no optimizer) is filled in
  # by the first training run, so that later reruns compare it. An eval-only
  # run fills nothing in: the checkpoints were not made with its settings.
  if saved and fingerprint.get("optimizer") is None:
    merged = saved
  else:
    merged = {**fingerprint, **{k: v for k, v in saved.items()
                                if v is not None}}
  if merged != saved:
    _write_fingerprint(path, merged)
  return lock
