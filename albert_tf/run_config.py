"""The run layer's shared rules, written once for every CLI.

* `canonical_precision` / `dtype_policy`: --mixed_precision takes
  none|bfloat16|float16 everywhere; the Keras policy names (float32,
  mixed_bfloat16, mixed_float16) are accepted as aliases.
* `make_strategy` / `is_chief`: --distribution_strategy.
* `resolve_model`: preset / albert_config_file / the config beside a
  checkpoint / the tokenizer -> (AlbertConfig, AlbertTokenizer).
* `ModelInfo`: what a trained model needs beside its weights (task, labels,
  max_seq_length, tokenizer). run_classifier writes it as
  classifier_config.json, export_saved_model as assets.extra/albert_export.json.
* `Fingerprint`: what a run in an output_dir was started with. A rerun with
  another architecture, task, tokenizer or optimizer stops with one line
  instead of resuming from weights that mean something else.

    config, tokenizer = resolve_model(preset="albert_tiny_zh",
                                      spm_model_file="vocab/spm.model")
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from typing import List, Optional, Tuple

import keras
import tensorflow as tf

from albert_tf import checkpoints
from albert_tf.config import AlbertConfig, resolve_config
from albert_tf.tokenization import load_tokenizer


class RunConfigError(ValueError):
  """Flags that do not fit together; the message names the flag or file."""


# ------------------------------------------------------------ precision
PRECISIONS = ("none", "bfloat16", "float16")
_PRECISION_ALIASES = {"": "none", "float32": "none",
                      "mixed_bfloat16": "bfloat16",
                      "mixed_float16": "float16"}
_KERAS_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                   "float16": "mixed_float16"}


def canonical_precision(name: Optional[str]) -> str:
  """none|bfloat16|float16 from any accepted spelling (None means none)."""
  value = _PRECISION_ALIASES.get(name or "", name or "none")
  if value not in PRECISIONS:
    raise RunConfigError(
        f"--mixed_precision must be one of {', '.join(PRECISIONS)} (or "
        f"{', '.join(k for k in _PRECISION_ALIASES if k)}), got {name!r}")
  return value


@contextlib.contextmanager
def dtype_policy(precision: Optional[str]):
  """Sets the global Keras dtype policy for a run and restores it after."""
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(_KERAS_POLICIES[canonical_precision(precision)])
  try:
    yield
  finally:
    keras.config.set_dtype_policy(previous)


# ------------------------------------------------------------ strategy
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored",
              "tpu")


def define_original_tpu_flags(flag_values=None):
  """The original scripts' TPU flags, mapped onto the TPU strategy."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  d = dict(flag_values=flag_values or flags.FLAGS)
  flags.DEFINE_bool("use_tpu", False, "Original name: the same as "
                    "--distribution_strategy=tpu.", **d)
  flags.DEFINE_string("tpu_name", None, "Original name of --tpu.", **d)
  flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.", **d)
  flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.",
                      **d)
  flags.DEFINE_integer("num_tpu_cores", None, "Original flag; ignored: the "
                       "TPU strategy uses every core of the TPU.", **d)


ORIGINAL_TPU_FLAGS = ("use_tpu", "tpu_name", "tpu_zone", "gcp_project",
                      "num_tpu_cores")


def strategy_from_flags(distribution_strategy: str, tpu: Optional[str] = None,
                        num_gpus: int = 0, use_tpu: bool = False,
                        tpu_name: Optional[str] = None,
                        tpu_zone: Optional[str] = None,
                        gcp_project: Optional[str] = None,
                        num_tpu_cores: Optional[int] = None):
  """make_strategy, with the original --use_tpu/--tpu_name/... folded in."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if use_tpu:
    if distribution_strategy not in ("default", "tpu"):
      raise RunConfigError(f"--use_tpu and --distribution_strategy="
                           f"{distribution_strategy} contradict each other")
    distribution_strategy = "tpu"
  if num_tpu_cores:
    logging.info("--num_tpu_cores=%d is ignored: the TPU strategy uses every "
                 "core of the TPU it connects to", num_tpu_cores)
  return make_strategy(distribution_strategy, tpu or tpu_name, num_gpus,
                       tpu_zone=tpu_zone, gcp_project=gcp_project)


def make_strategy(name: str, tpu: Optional[str] = None, num_gpus: int = 0,
                  tpu_zone: Optional[str] = None,
                  gcp_project: Optional[str] = None):
  """The tf.distribute strategy for --distribution_strategy.

  mirrored without GPUs mirrors over the logical CPUs (how the tests run it);
  multi_worker_mirrored reads the cluster from TF_CONFIG.
  """
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "one_device":
    gpus = tf.config.list_logical_devices("GPU")
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
  if name == "mirrored":
    devices = None
    if num_gpus:
      devices = [f"/gpu:{i}" for i in range(num_gpus)]
    elif not tf.config.list_logical_devices("GPU"):
      devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(devices)
  if name == "multi_worker_mirrored":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu or "", zone=tpu_zone, project=gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise RunConfigError(f"--distribution_strategy must be one of "
                       f"{', '.join(STRATEGIES)}, got {name!r}")


def is_chief(strategy) -> bool:
  """Whether this process writes logs, checkpoints and results."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or (
      resolver is None or not resolver.task_type):
    return True
  return (resolver.task_type == "chief" or
          (resolver.task_type == "worker" and resolver.task_id == 0 and
           "chief" not in resolver.cluster_spec().as_dict()))


# ------------------------------------------------------------ model + tokenizer
# Config fields that change the weights' shapes or the math; dropout and
# initializer_range may differ between pretraining and fine-tuning.
ARCHITECTURE_FIELDS = ("vocab_size", "embedding_size", "hidden_size",
                       "num_hidden_layers", "num_hidden_groups",
                       "inner_group_num", "num_attention_heads",
                       "intermediate_size", "hidden_act",
                       "max_position_embeddings", "type_vocab_size",
                       "layer_norm_eps", "share", "embedding_layout")


def architecture_diff(a: AlbertConfig, b: AlbertConfig) -> List[str]:
  return [f"{k}: {getattr(a, k)!r} vs {getattr(b, k)!r}"
          for k in ARCHITECTURE_FIELDS if getattr(a, k) != getattr(b, k)]


def resolve_model(preset: Optional[str] = None,
                  albert_config_file: Optional[str] = None,
                  init_checkpoint: Optional[str] = None,
                  spm_model_file: Optional[str] = None,
                  vocab_file: Optional[str] = None,
                  do_lower_case: Optional[bool] = None,
                  vocab_size: int = 0,
                  require_tokenizer: bool = True,
                  checkpoint_flag: str = "--init_checkpoint"
                  ) -> Tuple[AlbertConfig, object]:
  """The model config and tokenizer of a run, by one set of rules.

  Config: --preset or --albert_config_file when given, else the
  albert_config.json beside --init_checkpoint. When both exist they must
  agree on the architecture. Tokenizer: --spm_model_file / --vocab_file, else
  the one recorded beside the checkpoint (classifier_config.json). The
  vocabulary size: --vocab_size when > 0; else, with no checkpoint to fit,
  the tokenizer's size; with a checkpoint, a tokenizer larger than the
  config's vocab_size is an error.

  Returns (config, tokenizer); tokenizer is None when none is given and
  require_tokenizer is False. Raises RunConfigError naming the flag.
  """
  if preset and albert_config_file:
    raise RunConfigError("Give one of --preset or --albert_config_file, "
                         "not both")
  if init_checkpoint and not (tf.io.gfile.exists(init_checkpoint) or
                              tf.io.gfile.glob(init_checkpoint + ".index")):
    raise RunConfigError(f"{checkpoint_flag}={init_checkpoint} does not exist")
  beside = (checkpoints.config_beside(init_checkpoint) if init_checkpoint
            else None)
  if preset or albert_config_file:
    if albert_config_file and not tf.io.gfile.exists(albert_config_file):
      raise RunConfigError(f"--albert_config_file={albert_config_file} does "
                           "not exist")
    config = resolve_config(preset, albert_config_file)
  elif beside is not None:
    config = beside
  else:
    raise RunConfigError(
        "No model config: give --preset or --albert_config_file, or an "
        f"{checkpoint_flag} with {checkpoints.CONFIG_NAME} beside it")
  if beside is not None:
    diff = architecture_diff(beside, config)
    if diff:
      raise RunConfigError(
          f"{checkpoint_flag}={init_checkpoint} was written for a different "
          f"config ({checkpoints.CONFIG_NAME} beside it vs given): "
          + "; ".join(diff))

  info = ModelInfo.read_beside(init_checkpoint) if init_checkpoint else None
  if not spm_model_file and not vocab_file and info and info.tokenizer_file:
    path = os.path.join(checkpoints.checkpoint_dir(init_checkpoint),
                        info.tokenizer_file)
    if info.tokenizer_kind == "wordpiece":
      vocab_file = path
    else:
      spm_model_file = path
  if do_lower_case is None:
    do_lower_case = info.do_lower_case if info else True
  tokenizer = None
  if spm_model_file or vocab_file:
    tokenizer = load_tokenizer(spm_model_file or None, vocab_file or None,
                               do_lower_case)
  elif require_tokenizer:
    raise RunConfigError("Give --spm_model_file or --vocab_file (the "
                         "tokenizer the model was trained with)")

  if vocab_size:
    config = config.replace(vocab_size=vocab_size)
  elif tokenizer is not None and not init_checkpoint:
    config = config.replace(vocab_size=tokenizer.vocab_size)
  if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
    raise RunConfigError(
        f"tokenizer {tokenizer.model_file} has {tokenizer.vocab_size} tokens "
        f"but the model config has vocab_size={config.vocab_size} (pass the "
        "tokenizer the checkpoint was pretrained with)")
  return config, tokenizer


def check_seq_length(max_seq_length: int, config: AlbertConfig) -> None:
  """--max_seq_length fits [CLS] x [SEP] and the position embeddings."""
  if not 3 <= max_seq_length <= config.max_position_embeddings:
    raise RunConfigError(
        f"--max_seq_length={max_seq_length} must be in [3, the config's "
        f"max_position_embeddings={config.max_position_embeddings}]")


def file_sha256(path: str) -> str:
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      digest.update(chunk)
  return digest.hexdigest()


# ------------------------------------------------------------ model info
CLASSIFIER_CONFIG = "classifier_config.json"
TAGGER_CONFIG = "tagger_config.json"


@dataclasses.dataclass
class ModelInfo:
  """What serving a trained model needs beside its weights and config.

  One dataclass for run_classifier's classifier_config.json, run_ner's
  tagger_config.json and the export's albert_export.json.
  """
  task_name: Optional[str] = None
  num_labels: Optional[int] = None
  label_list: List[str] = dataclasses.field(default_factory=list)
  is_regression: bool = False
  max_seq_length: Optional[int] = None
  tokenizer_file: Optional[str] = None
  tokenizer_kind: Optional[str] = None
  do_lower_case: bool = True
  text_pair: bool = False
  # Written by run_ner (tagger_config.json): label_list holds the BIO tags.
  tag_scheme: Optional[str] = None   # the data files' scheme
  doc_stride: Optional[int] = None
  token_level: Optional[str] = None  # "char" or "word": what a token was
  # Written by export_saved_model only.
  model: Optional[str] = None
  version: Optional[int] = None
  checkpoint: Optional[str] = None
  albert_config: Optional[dict] = None
  special_ids: Optional[dict] = None
  normalization: Optional[list] = None

  def to_dict(self) -> dict:
    return {k: v for k, v in dataclasses.asdict(self).items()
            if v is not None}

  def write(self, path: str) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(json.dumps(self.to_dict(), indent=2, ensure_ascii=False))

  @classmethod
  def read(cls, path: str) -> "ModelInfo":
    with tf.io.gfile.GFile(path, "r") as f:
      values = json.loads(f.read())
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in known})

  @classmethod
  def read_beside(cls, checkpoint: str) -> Optional["ModelInfo"]:
    """classifier_config.json or tagger_config.json beside a checkpoint, or
    None."""
    for name in (CLASSIFIER_CONFIG, TAGGER_CONFIG):
      path = os.path.join(checkpoints.checkpoint_dir(checkpoint), name)
      if tf.io.gfile.exists(path):
        return cls.read(path)
    return None

  @property
  def is_tagger(self) -> bool:
    return self.token_level is not None


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
