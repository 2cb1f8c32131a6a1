"""preset / albert_config_file / the config beside a checkpoint / the
tokenizer -> (AlbertConfig, AlbertTokenizer), the one way every command does it.

    config, tokenizer = resolve_model(preset="albert_tiny_zh",
                                      spm_model_file="vocab/spm.model")
"""

import os
from typing import List, Optional, Tuple

import tensorflow as tf

from albert_tf.core import file_io
from albert_tf.training import checkpoints
from albert_tf.core.config import (ARCHITECTURE_FIELDS, AlbertConfig,
                                   resolve_config)
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.training.runtime import RunConfigError
from albert_tf.tasks import registry


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
  the one recorded beside the checkpoint (task_record.json). The
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
    # A preset's vocab_size is a default, like its tokenizer: with a
    # checkpoint, the checkpoint's (or --vocab_size) is the one compared.
    if preset and not albert_config_file:
      config = config.replace(vocab_size=vocab_size or beside.vocab_size)
    diff = architecture_diff(beside, config)
    if diff:
      raise RunConfigError(
          f"{checkpoint_flag}={init_checkpoint} was written for a different "
          f"config ({checkpoints.CONFIG_NAME} beside it vs given): "
          + "; ".join(diff))

  info = (registry.read_record(init_checkpoint) if init_checkpoint
          else None)
  # The tokenizer recorded beside the checkpoint: a fine-tuning run's task
  # record, else a conversion's report (the tokenizer the source shipped).
  recorded = ((info.tokenizer_file, info.tokenizer_kind)
              if info and info.tokenizer_file else
              _converted_tokenizer(init_checkpoint)[:2] if init_checkpoint
              else (None, None))
  if not spm_model_file and not vocab_file and recorded[0]:
    path = os.path.join(checkpoints.checkpoint_dir(init_checkpoint),
                        recorded[0])
    if recorded[1] == "wordpiece":
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

  if tokenizer is not None and init_checkpoint:
    _check_tokenizer_of_checkpoint(tokenizer, init_checkpoint,
                                   checkpoint_flag, spm_model_file or
                                   vocab_file)
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


def _read_json(path):
  """The JSON object at path, or None (no file, or not JSON)."""
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return file_io.parse_json(f.read(), path)
  except (ValueError, tf.errors.NotFoundError):
    return None  # a damaged fingerprint is refused when its run resumes


def _check_tokenizer_of_checkpoint(tokenizer, init_checkpoint, flag, given):
  """The tokenizer must be the one the checkpoint was trained with (its
  run_fingerprint.json's sha256) or converted with (conversion_report's):
  another tokenizer of the same size would train on the wrong pieces
  without an error."""
  from albert_tf.data.tokenization import file_sha256  # pylint: disable=g-import-not-at-top
  from albert_tf.training import output_dir  # pylint: disable=g-import-not-at-top
  run_dir = checkpoints.checkpoint_dir(init_checkpoint)
  if os.path.basename(os.path.normpath(run_dir)) == checkpoints.BEST_DIR:
    run_dir = os.path.dirname(os.path.normpath(run_dir))
  path = os.path.join(run_dir, output_dir.FINGERPRINT_FILE)
  converted = not tf.io.gfile.exists(path)
  name, kind, recorded = (
      _converted_tokenizer(init_checkpoint) if converted else
      (None, None, (_read_json(path) or {}).get("tokenizer_sha256")))
  if not recorded:
    return
  sha = file_sha256(tokenizer.model_file)
  if sha == recorded:
    return
  flag_name = _tokenizer_flag(tokenizer.kind)
  if converted:
    own = os.path.join(checkpoints.checkpoint_dir(init_checkpoint),
                       name or "")
    raise RunConfigError(
        f"{flag_name}={given} (sha256 {sha[:12]}…) is not the tokenizer "
        f"{flag}={init_checkpoint} was converted with ({own}, sha256 "
        f"{recorded[:12]}…): leave out {flag_name} to use it, or pass "
        f"{_tokenizer_flag(kind)}={own}")
  raise RunConfigError(
      f"{flag_name}={given} (sha256 {sha[:12]}…) is not the tokenizer "
      f"{flag}={init_checkpoint} was trained with (sha256 "
      f"{recorded[:12]}…, in {path}): pass the tokenizer it was "
      "pretrained with")


CONVERSION_REPORT = "conversion_report.json"  # convert_checkpoint's


def _tokenizer_flag(kind):
  return "--vocab_file" if kind == "wordpiece" else "--spm_model_file"


def _converted_tokenizer(init_checkpoint):
  """(file name, kind, sha256) of the tokenizer a conversion copied beside
  the checkpoint (conversion_report.json), else Nones."""
  report = _read_json(os.path.join(
      checkpoints.checkpoint_dir(init_checkpoint), CONVERSION_REPORT))
  if not report or not report.get("tokenizer_sha256"):
    return None, None, None
  return (report.get("tokenizer_file"), report.get("tokenizer_kind"),
          report["tokenizer_sha256"])


def check_seq_length(max_seq_length: int, config: AlbertConfig) -> None:
  """--max_seq_length fits [CLS] x [SEP] and the position embeddings."""
  if not 3 <= max_seq_length <= config.max_position_embeddings:
    raise RunConfigError(
        f"--max_seq_length={max_seq_length} must be in [3, the config's "
        f"max_position_embeddings={config.max_position_embeddings}]")
