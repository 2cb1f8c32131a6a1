"""What a trained model needs beside its weights (task, labels,
max_seq_length, tokenizer). run_classifier writes it as
classifier_config.json, run_ner as tagger_config.json, export_saved_model as
assets.extra/albert_export.json.
"""

import dataclasses
import json
import os
from typing import List, Optional

import tensorflow as tf

from albert_tf.training import checkpoints


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


