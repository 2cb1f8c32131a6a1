"""The task record: what a trained model needs beside its weights.

Every training command writes `task_record.json` beside its checkpoints:

    {"task": "tagging",                 # its family (tasks/registry.py)
     "task_name": "conll", "label_list": [...], "num_labels": 5,
     "max_seq_length": 128, "tokenizer_file": "spm.model",
     "tokenizer_kind": "sentencepiece", "do_lower_case": true,
     "text_pair": false,                # the fields every family serves with
     "task_config": {"tag_scheme": "BIO", "doc_stride": 63,
                     "token_level": "char"}}   # the family's own

export_saved_model finds the task class by `task` and writes the same fields
(task_config flattened) plus its own into assets.extra/albert_export.json.
Older outputs' classifier_config.json and tagger_config.json are read,
never written, their flat fields going into task_config.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import List, Optional

from albert_tf.core import file_io
from albert_tf.core import lazy

tf = lazy.module("tensorflow")


# ------------------------------------------------------------ task record
RECORD_FILE = "task_record.json"
# Older outputs: read (after RECORD_FILE), never written.
CLASSIFIER_CONFIG = "classifier_config.json"
TAGGER_CONFIG = "tagger_config.json"
LEGACY_RECORD_FILES = (CLASSIFIER_CONFIG, TAGGER_CONFIG)


@dataclasses.dataclass
class ModelInfo:
  """The task record (RECORD_FILE), and the export's albert_export.json
  (the module docstring has the layout)."""
  task: Optional[str] = None
  task_name: Optional[str] = None  # the data set (sentiment, conll, ...)
  num_labels: Optional[int] = None
  label_list: List[str] = dataclasses.field(default_factory=list)
  max_seq_length: Optional[int] = None
  tokenizer_file: Optional[str] = None
  tokenizer_kind: Optional[str] = None
  do_lower_case: bool = True
  text_pair: bool = False
  task_config: dict = dataclasses.field(default_factory=dict)
  # The module that registers the family (`registry.family` imports it
  # when the family is not registered yet: a family of the user's own).
  task_module: Optional[str] = None
  # What the fine-tuning run read ({"data": {split: its stats},
  # "data_dir"}): the model card's training section.
  training: Optional[dict] = None
  # Written by export_saved_model only.
  model: Optional[str] = None
  version: Optional[int] = None
  checkpoint: Optional[str] = None
  albert_config: Optional[dict] = None
  special_ids: Optional[dict] = None
  normalization: Optional[list] = None

  def recorded_length(self) -> Optional[int]:
    """The sequence length trained at: max_seq_length (fine-tuning), else
    task_config's (a pretraining run's records), else None."""
    return self.max_seq_length or self.task_config.get("max_seq_length")

  def to_dict(self) -> dict:
    """The fields that are set (task_config always)."""
    return {k: v for k, v in dataclasses.asdict(self).items()
            if v is not None}

  def flat_dict(self) -> dict:
    """albert_export.json's layout: task_config's fields at the top level
    and is_regression, as apps and export_tflite read them."""
    values = self.to_dict()
    own = values.pop("task_config")
    values.update({k: v for k, v in own.items() if k not in values})
    # One score and no label names: a regression head.
    values["is_regression"] = self.num_labels == 1 and not self.label_list
    return values

  def write(self, path: str, flat: bool = False) -> None:
    """Whole or not at all (`file_io.atomic_writer`; a gs:// path through
    tf.io.gfile, whose objects appear whole on close)."""
    values = self.flat_dict() if flat else self.to_dict()
    text = json.dumps(values, indent=2, ensure_ascii=False)
    if "://" in path:
      with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
      return
    with file_io.atomic_writer(path) as f:
      f.write(text)

  def write_beside(self, directory: str) -> str:
    """Writes directory/RECORD_FILE; returns its path."""
    path = os.path.join(directory, RECORD_FILE)
    self.write(path)
    return path

  @classmethod
  def from_dict(cls, values: dict, task: Optional[str] = None) -> "ModelInfo":
    """A record from a parsed file (`task` when it names none); unknown
    fields go into task_config, is_regression is dropped."""
    known = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in values.items() if k in known}
    own = {k: v for k, v in values.items()
           if k not in known and k != "is_regression"}
    fields["task_config"] = dict(own, **(values.get("task_config") or {}))
    fields.setdefault("task", task)
    return cls(**fields)

  @classmethod
  def read(cls, path: str, task: Optional[str] = None) -> "ModelInfo":
    """The record in `path`; a ValueError naming it when it is not a JSON
    object (`file_io.parse_json`)."""
    with tf.io.gfile.GFile(path, "rb") as f:
      return cls.from_dict(file_io.parse_json(f.read(), path), task)

  @classmethod
  def read_beside(cls, checkpoint_or_dir: str,
                  legacy_task=lambda name, values: None
                  ) -> Optional["ModelInfo"]:
    """The record beside a checkpoint (prefix or directory), or None:
    RECORD_FILE, else an older output's (`LEGACY_RECORD_FILES`), its task
    `legacy_task(file name, values)` (`tasks.registry.read_record`'s)."""
    directory = (checkpoint_or_dir if tf.io.gfile.isdir(checkpoint_or_dir)
                 else os.path.dirname(checkpoint_or_dir))
    path = os.path.join(directory, RECORD_FILE)
    if tf.io.gfile.exists(path):
      return cls.read(path)
    for name in LEGACY_RECORD_FILES:
      path = os.path.join(directory, name)
      if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path, "rb") as f:
          values = file_io.parse_json(f.read(), path)
        return cls.from_dict(values, legacy_task(name, values))
    return None


def tokenizer_fields(tokenizer) -> dict:
  """The record's tokenizer fields: the copy of its file beside the
  checkpoint (`finetuning.write_run_files`), its kind and lowercasing."""
  return {"tokenizer_file": os.path.basename(tokenizer.model_file),
          "tokenizer_kind": tokenizer.kind,
          "do_lower_case": tokenizer.do_lower_case}
