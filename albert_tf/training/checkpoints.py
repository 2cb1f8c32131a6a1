"""The one checkpoint layout of this project, and how to find and restore it.

Every weights checkpoint that albert_tf writes (run_pretraining,
run_classifier, run_ner, convert_checkpoint) is a `tf.train.Checkpoint` of a
model's `checkpoint_items` (`encoder` plus its heads: `masked_lm_head`,
`sentence_order_head`, `classifier_head`, `tagger_head`, ...) and, while
training, `optimizer` and `step`, with `albert_config.json` beside it.
Restoring matches variables by these object paths, so an encoder saved by
the pretrainer loads into a classifier and vice versa.
"""

import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from albert_tf.core import file_io
from albert_tf.core.config import AlbertConfig

CONFIG_NAME = "albert_config.json"
BEST_DIR = "best"  # where the trainer keeps the best checkpoint by dev metric
BEST_FILE = "best.json"  # its record: step, metric, checkpoint name


def latest_checkpoint(path_or_dir):
  """A checkpoint prefix from a prefix or a directory.

  A training directory resolves to the best checkpoint by the dev metric
  when the run kept one (its best/ subdirectory), else to its latest.
  """
  if tf.io.gfile.isdir(path_or_dir):
    best = read_best_record(path_or_dir)
    latest = best and best["checkpoint"]
    if latest and tf.io.gfile.exists(latest + ".index"):
      if best.get("step") == 0:
        logging.warning(NEVER_BEAT_STEP_0, path_or_dir)
    else:
      latest = tf.train.latest_checkpoint(path_or_dir)
    if latest is None:
      raise FileNotFoundError(f"No checkpoint found in directory {path_or_dir}")
    return latest
  if not tf.io.gfile.glob(path_or_dir + ".index"):
    raise FileNotFoundError(
        f"No checkpoint at {path_or_dir} (expected {path_or_dir}.index, or a "
        "directory holding a 'checkpoint' file)")
  return path_or_dir


def read_best_record(directory):
  """best/best.json of a training directory as a dict, its "checkpoint" a
  path, or None; a ValueError naming the file when it is damaged."""
  path = os.path.join(directory, BEST_DIR, BEST_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "rb") as f:
    best = file_io.parse_json(f.read(), path)
  if not isinstance(best.get("checkpoint"), str):
    raise ValueError(f"{path} names no checkpoint (no \"checkpoint\" "
                     "field): a damaged copy?")
  best["checkpoint"] = os.path.join(directory, BEST_DIR, best["checkpoint"])
  return best


class CheckpointReadError(ValueError):
  """A checkpoint whose files are cut short or damaged (names the file)."""


_DAMAGED = "a copy cut short, or a disk that filled up while it was saved?"


def check_complete(prefix):
  """tf.train.load_checkpoint(prefix), or CheckpointReadError naming the
  file when the index is not one or the data files are missing or shorter
  than the tensors it lists (reads the string tensors, not the weights)."""
  index = prefix + ".index"
  try:
    reader = tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    text = " ".join(str(getattr(e, "message", None) or e).split())
    raise CheckpointReadError(
        f"{index} is not a readable checkpoint index ({text[:120]}): "
        f"{_DAMAGED}") from None
  data = sorted(tf.io.gfile.glob(prefix + ".data-*"))
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  size = sum(tf.io.gfile.stat(f).length for f in data)
  needed = 0
  try:
    for name, shape in shapes.items():
      if dtypes[name] == tf.string:
        needed += len(np.asarray(reader.get_tensor(name)).tobytes())
      else:
        needed += int(np.prod(shape, dtype=np.int64)) * dtypes[name].size
  except (IndexError, tf.errors.OpError, ValueError):
    needed = max(needed, size + 1)  # a string tensor past the end
  if needed > size:
    names = ", ".join(data) or f"{prefix}.data-00000-of-00001 (missing)"
    raise CheckpointReadError(
        f"{names}: {size} bytes, but {index} lists at least {needed} bytes "
        f"of tensors: the checkpoint is truncated ({_DAMAGED})")
  return reader


# Said when no trained checkpoint of a fine-tuning run beat its untrained
# start on dev (the best kept is then a trained step no better than it; an
# older run's best could be step 0 itself).
NEVER_BEAT_STEP_0 = (
    "%s: no trained checkpoint beat the dev metric of step 0 (the task head "
    "as initialised), so the model it serves is no better on dev than an "
    "untrained one: check the learning rate, the labels and the steps")


def checkpoint_dir(path_or_dir):
  """The directory of a checkpoint prefix, or the directory itself."""
  return (path_or_dir if tf.io.gfile.isdir(path_or_dir)
          else os.path.dirname(path_or_dir))


def config_beside(path_or_dir):
  """The albert_config.json next to a checkpoint, or None."""
  path = os.path.join(checkpoint_dir(path_or_dir), CONFIG_NAME)
  return AlbertConfig.from_json_file(path) if tf.io.gfile.exists(path) else None


def model_parts(model):
  """{checkpoint object name: trackable}: the model's `checkpoint_items`."""
  items = getattr(model, "checkpoint_items", None)
  if items is None:
    raise TypeError(f"{type(model).__name__} has no checkpoint_items (a "
                    "dict {checkpoint object name: trackable}): it cannot "
                    "be checkpointed")
  return dict(items)


def make_checkpoint(model, **extra):
  """`tf.train.Checkpoint` of a model's parts (+ e.g. optimizer=, step=)."""
  return tf.train.Checkpoint(**model_parts(model), **extra)


class NonFiniteError(ValueError):
  """Weights or a training loss that are NaN or inf (one line for the CLIs)."""


def check_finite(model_or_variables, where):
  """Raises NonFiniteError naming the first variable of a model, layer or
  list that holds NaN or inf; where: what holds them ("--checkpoint=…")."""
  variables = getattr(model_or_variables, "variables", model_or_variables)
  variables = [v for v in variables if tf.as_dtype(v.dtype).is_floating]
  if not variables:
    return
  # One reduction when all is well, as at every checkpoint save; the
  # per-variable counts only once something is wrong.
  if bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(v))
                         for v in variables])):
    return
  bad = [v for v in variables if not bool(tf.reduce_all(
      tf.math.is_finite(v)))]
  first = bad[0]
  nan = int(tf.reduce_sum(tf.cast(tf.math.is_nan(first), tf.int64)))
  inf = int(tf.reduce_sum(tf.cast(tf.math.is_inf(first), tf.int64)))
  others = (f" (and {len(bad) - 1} more of the {len(variables)} variables)"
            if len(bad) > 1 else "")
  name = getattr(first, "path", None) or first.name.split(":")[0]
  raise NonFiniteError(
      f"{where}: the weights are not finite: {name} has "
      f"{nan} NaN and {inf} inf of its {int(tf.size(first))} values{others}")


def write_checkpoint_state(directory, latest, all_paths=None,
                           timestamps=None, last_preserved=None):
  """Writes directory's `checkpoint` index naming `latest` (tmp + rename).
  Not tf.compat.v1.train.update_checkpoint_state (deprecated: a warning at
  every call) nor tf.train.CheckpointManager (it deletes checkpoints in its
  own order)."""
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  # The names are relative to directory already. An absolute save_dir (its
  # only use) keeps TF from making them relative to a relative directory
  # once more: "clf/best" and "ckpt-4" gave "../../ckpt-4", which TF reads
  # against clf/best/, a file that is not there.
  state = tf.compat.v1.train.generate_checkpoint_state_proto(
      os.path.abspath(directory), latest, all_model_checkpoint_paths=all_paths,
      all_model_checkpoint_timestamps=timestamps,
      last_preserved_timestamp=last_preserved)
  tmp = os.path.join(directory, "checkpoint.tmp")
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text_format.MessageToString(state))
  file_io.synced_rename(tmp, os.path.join(directory, "checkpoint"))


def write_best(model, directory, step, metric, results, chief=True):
  """Saves model's weights as directory/best/ckpt-<step>; the chief then
  writes best.json and the state file, and only then removes the previous
  best. Every worker must call it (all join the save)."""
  best_dir = os.path.join(directory, BEST_DIR)
  tf.io.gfile.makedirs(best_dir)
  name = os.path.basename(make_checkpoint(model).write(
      os.path.join(best_dir, f"ckpt-{step}")))
  if not chief:
    return
  record = {"step": step, metric: results[metric], "checkpoint": name,
            "metrics": results}
  tmp = os.path.join(best_dir, BEST_FILE + ".tmp")
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(json.dumps(record, indent=2))
  tf.io.gfile.rename(tmp, os.path.join(best_dir, BEST_FILE), overwrite=True)
  write_checkpoint_state(best_dir, name)
  for old in tf.io.gfile.glob(os.path.join(best_dir, "ckpt-*")):
    if not os.path.basename(old).startswith(name + "."):
      tf.io.gfile.remove(old)


def save_weights(model, prefix, config=None):
  """Writes a weights-only checkpoint (and albert_config.json) at `prefix`."""
  path = make_checkpoint(model).write(prefix)
  # `write` leaves no "checkpoint" state file; add one so that the directory
  # itself can be passed wherever a checkpoint is expected.
  write_checkpoint_state(os.path.dirname(prefix) or ".", os.path.basename(path))
  if config is not None:
    config.to_json_file(os.path.join(os.path.dirname(prefix), CONFIG_NAME))
  return path


def restore_weights(path_or_dir, model, parts=None):
  """Restores the parts of a built `model` found in a checkpoint; returns
  {"restored", "missing": the model parts it did not hold, "prefix"}.
  Raises ValueError (another config, no encoder) or CheckpointReadError.
  """
  prefix = latest_checkpoint(path_or_dir)
  saved = check_complete(prefix).get_variable_to_shape_map()
  available = {key.split("/")[0] for key in saved}
  wanted = model_parts(model)
  if parts is not None:
    wanted = {k: v for k, v in wanted.items() if k in parts}
  if "encoder" not in available:
    raise ValueError(
        f"{prefix} holds no 'encoder' object; it is not an albert_tf "
        "checkpoint (convert original/HF checkpoints with "
        "python -m albert_tf.convert_checkpoint)")
  present = {k: v for k, v in wanted.items() if k in available}
  missing = sorted(set(wanted) - set(present))
  try:
    status = tf.train.Checkpoint(**present).read(prefix)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (ValueError, tf.errors.InvalidArgumentError) as e:
    # TF names the variable and both shapes; say what it means.
    raise ValueError(
        f"Checkpoint {prefix} does not match this model's config "
        f"(wrong albert_config.json or preset?): {e}") from None
  except (IndexError, tf.errors.OpError) as e:
    # Damage check_complete's sizes do not show (bytes changed in place).
    text = " ".join(str(getattr(e, "message", None) or e).split())
    raise CheckpointReadError(
        f"{prefix}: the checkpoint's files cannot be read ({text[:120]}): "
        f"{_DAMAGED}") from None
  return {"restored": sorted(present), "missing": missing, "prefix": prefix}


# ---------------------------------------------------------------- run state
STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"  # the trainer's step variable


def reconcile_state(directory, name="ckpt"):
  """Makes the `checkpoint` index of a training directory agree with the
  `<name>-N.index` files in it, or refuses the directory.

  tf.train.CheckpointManager trusts the index alone: with the index
  deleted, or rewritten by another tool's tf.train.Checkpoint.save, a run
  would start at step 0 and overwrite the checkpoints it did not see.
  Here the files decide: a `<name>-N` must hold the trainer's step N, the
  index may name only such files (else another tool rewrote it), files it
  does not list (a kill between a save and its index update) are added,
  an unreadable one is left to the trainer's restore, and best/ must be
  whole (the run ends evaluating with it). Returns the steps found.
  """
  best_dir = os.path.join(directory, BEST_DIR)
  try:
    best = read_best_record(directory)
    prefix = best and best["checkpoint"]
    if prefix and tf.io.gfile.exists(prefix + ".index"):
      check_complete(prefix)
  except ValueError as e:
    raise ValueError(
        f"{e} (remove {best_dir}, the best checkpoint by the dev metric, to "
        "go on without it)") from None
  found, unreadable = {}, set()
  for index in tf.io.gfile.glob(os.path.join(directory, f"{name}-*.index")):
    prefix = index[:-len(".index")]
    number = prefix.rsplit("-", 1)[1]
    if not number.isdigit():
      continue
    try:
      reader = tf.train.load_checkpoint(prefix)
      step = (int(reader.get_tensor(STEP_KEY))
              if reader.has_tensor(STEP_KEY) else None)
    except (tf.errors.OpError, ValueError):
      # unreadable: the trainer's restore falls back past it
      unreadable.add(os.path.basename(prefix))
      continue
    if step != int(number):
      raise ValueError(
          f"{prefix} was not written by this trainer (it holds "
          f"{'no step' if step is None else f'step {step}'}, its name says "
          f"{number}): move it out of {directory}, or pass --overwrite to "
          "start over")
    found[int(number)] = prefix
  state = tf.train.get_checkpoint_state(directory)
  listed = list(state.all_model_checkpoint_paths) if state else []
  if state and state.model_checkpoint_path not in listed:
    listed.append(state.model_checkpoint_path)
  ours = {os.path.basename(p) for p in found.values()}
  foreign = [p for p in listed
             if os.path.basename(p) not in ours | unreadable]
  if foreign:
    raise ValueError(
        f"the `checkpoint` index in {directory} names {foreign[0]}, which "
        "is not one of the checkpoints this trainer wrote there "
        f"({', '.join(sorted(ours, key=_number)) or 'none'}): it was "
        "rewritten by another tool? Delete the `checkpoint` file to resume "
        "from the latest of them, or pass --overwrite to start over")
  unlisted = sorted(set(ours) - {os.path.basename(p) for p in listed},
                    key=_number)
  if unlisted:
    latest = found[max(found)]
    logging.warning(
        "%s: resuming by the checkpoint files: %s %s not in the `checkpoint` "
        "index%s; the latest is %s", directory, ", ".join(unlisted),
        "is" if len(unlisted) == 1 else "are",
        "" if state else " (there is no index file)", latest)
    # Names relative to the directory, and the times, as CheckpointManager
    # writes them (it manages, and so restores, only checkpoints newer than
    # last_preserved_timestamp).
    times = [tf.io.gfile.stat(found[n] + ".index").mtime_nsec / 1e9
             for n in sorted(found)]
    write_checkpoint_state(
        directory, os.path.basename(latest), all_paths=[
            os.path.basename(found[n]) for n in sorted(found)],
        timestamps=times, last_preserved=min(times) - 1)
  return sorted(found)


def _number(name):
  return int(name.rsplit("-", 1)[1])
