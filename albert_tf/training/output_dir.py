"""An output_dir belongs to one run: its fingerprint and its lock.

The fingerprint is what a run in an output_dir was started with. A rerun
with another architecture, task, tokenizer or optimizer stops with one line
instead of resuming from weights that mean something else.
"""

import json
import os
import shutil
from typing import Optional

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.data.tokenization import file_sha256
from albert_tf.training.resolution import ARCHITECTURE_FIELDS
from albert_tf.training.runtime import RunConfigError, canonical_precision


# ------------------------------------------------------------ fingerprint
FINGERPRINT_FILE = "run_fingerprint.json"


def make_fingerprint(task: str, config: AlbertConfig, tokenizer,
                     optimizer: Optional[dict],
                     precision: Optional[str] = None) -> dict:
  """What an output_dir's checkpoints mean: compared on every rerun.

  optimizer and precision are None for runs that do not train (float16
  adds loss-scale variables to the optimizer state: a checkpoint of one
  precision does not resume under the other).
  """
  return {
      "task": task,
      "albert_config": {k: getattr(config, k) for k in ARCHITECTURE_FIELDS},
      "tokenizer_sha256": (file_sha256(tokenizer.model_file)
                           if tokenizer is not None else None),
      "optimizer": optimizer,
      "mixed_precision": (canonical_precision(precision)
                          if optimizer is not None else None),
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
  """Raises RunConfigError when output_dir holds a run of other settings.

  Writes nothing (call `prepare_output_dir` once every input is validated).
  """
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
  with tf.io.gfile.GFile(path, "r") as f:
    saved = json.loads(f.read())
  wanted = json.loads(json.dumps(fingerprint))
  # A section that one side leaves open (None: e.g. no optimizer in an
  # eval-only run) is not compared.
  for key in set(saved) | set(wanted):
    if saved.get(key) is None or wanted.get(key) is None:
      saved.pop(key, None)
      wanted.pop(key, None)
  saved, wanted = _flatten(saved), _flatten(wanted)
  diff = [f"{k} {saved.get(k)!r} there vs {wanted.get(k)!r} now"
          for k in sorted(set(saved) | set(wanted))
          if saved.get(k) != wanted.get(k)]
  if diff:
    raise RunConfigError(
        f"--output_dir={output_dir} holds a run with other settings ("
        + "; ".join(diff) + "): pass --overwrite to start over, or choose "
        "another --output_dir")


LOCK_FILE = ".run.lock"


def lock_output_dir(output_dir: str):
  """An exclusive lock on a local output_dir for the life of the run.

  Returns the open lock file (keep it referenced; the OS releases the lock
  when it is closed or the process dies, SIGKILL included), or None for a
  remote file system, where no lock is taken. A second run into the same
  output_dir stops with one line instead of interleaving checkpoints.
  """
  if "://" in output_dir:
    return None
  import fcntl  # pylint: disable=g-import-not-at-top
  handle = open(os.path.join(output_dir, LOCK_FILE), "a+", encoding="utf-8")
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.seek(0)
    owner = handle.read().strip() or "unknown"
    handle.close()
    raise RunConfigError(
        f"--output_dir={output_dir} is in use by another run (pid {owner}): "
        "wait for it, or choose another --output_dir") from None
  handle.seek(0)
  handle.truncate()
  handle.write(str(os.getpid()))
  handle.flush()
  return handle


def prepare_output_dir(output_dir: str, fingerprint: dict,
                       overwrite: bool = False):
  """Creates and locks output_dir, empties it on --overwrite, writes the
  fingerprint. Returns the lock (see `lock_output_dir`): keep it."""
  tf.io.gfile.makedirs(output_dir)
  lock = lock_output_dir(output_dir)
  if overwrite:
    for name in tf.io.gfile.listdir(output_dir):
      if name == LOCK_FILE:
        continue
      path = os.path.join(output_dir, name.rstrip("/"))
      if tf.io.gfile.isdir(path):
        shutil.rmtree(path) if os.path.isdir(path) else tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
  path = os.path.join(output_dir, FINGERPRINT_FILE)
  saved = {}
  if tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path, "r") as f:
      saved = json.loads(f.read())
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
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
      f.write(json.dumps(merged, indent=2, sort_keys=True))
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
  return lock
