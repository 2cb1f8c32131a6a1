"""Load a trained model from its folder and predict on raw strings.

    import albert_tf
    model = albert_tf.load("demo_output/cls")          # run_classifier output
    model.predict(["很好用", "太差了"])
    # [{"label": "1", "probabilities": {"0": 0.02, "1": 0.98}}, ...]
    albert_tf.load("demo_output/ner").predict(["张三在北京。"])
    # [[{"type": "PER", "text": "张三", "start": 0, "end": 2}, ...]]
    model.embed(["很好用"])["pooled_output"].shape      # (1, hidden_size)

For a run_classifier or run_ner output_dir (or a checkpoint with its
task_record.json), the checkpoint export_saved_model would export (best/
when the run kept one) is restored into the task's `export_model`, and
`predict` calls the `serve_text` of `Task.export_signatures` in memory: the
SavedModel's own tokenizer, truncation and entity spans, none written. A
run_pretraining output_dir or other encoder checkpoint predicts with
`fill_mask.fill_mask` (`predict(["中国[MASK]民银行"], top_k=5)`), or only
embeds without an MLM head. An export_saved_model export_dir (its highest
version) or version runs its `serve_text` (`serve_fill_mask`), its task
and labels read from assets.extra/albert_export.json; an export_keras_hub
preset is an encoder.

Per text, `predict` gives: classification {"label", "probabilities":
{label: p}}; regression {"score"}; tagging [{"type", "text", "start",
"end"}] (code points: text[start:end] is the entity); fill-mask per [MASK]
[{"piece", "id", "probability"}], most probable first. `encode` gives the
Python tokenizer's model inputs (int32 numpy, `features.ENCODER_INPUTS`),
`embed` the encoder's outputs on them.
"""

import dataclasses
import os

from absl import logging
import numpy as np
import tensorflow as tf

from albert_tf import export_saved_model as export_lib
from albert_tf import features as F
from albert_tf import fill_mask as fill_mask_lib
from albert_tf import registry
from albert_tf.data import classifier_data, ner_data
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.serving import saved_model
from albert_tf.tasks.record import ModelInfo
from albert_tf.training import checkpoints

BATCH_SIZE = 64
DEFAULT_SEQ_LENGTH = 128  # export_saved_model's, when nothing is recorded
# The families whose serve_text `predict` reads.
SERVED = ("classification", "regression", "tagging")
PRESET_FILES = ("config.json", "model.weights.h5")  # a keras-hub preset
PRESET_SPM = os.path.join("assets", "tokenizer", "vocabulary.spm")
LOOKED_FOR = (
    "a run_classifier/run_ner/run_pretraining output_dir or checkpoint (a "
    "'checkpoint' file, best/best.json or PREFIX.index), an "
    "export_saved_model export_dir or version (saved_model.pb) or a "
    "keras-hub preset (config.json + model.weights.h5)")


class LoadError(ValueError):
  """A path load() cannot read, or a request its model cannot answer."""


class Predictor:
  """What `load` returns.

  Attributes:
    kind: "classification", "regression", "tagging", "fill_mask",
      "encoder", or another family's name (span_qa, multiple_choice: embed
      only).
    labels: the class names (classification) or BIO tags (tagging).
    max_seq_length, tokenizer, text_pair, token_level: how texts are read.
    checkpoint: the prefix the weights came from; model: the Keras model
      (None for a SavedModel).
  """

  def __init__(self, path, kind, tokenizer, max_seq_length, labels=(),
               text_pair=False, token_level=None, checkpoint=None,
               model=None, serve_text=None, fill=None, encoder=None,
               keep=None, what=None):
    self.path, self.kind, self.tokenizer = path, kind, tokenizer
    self.what = what or f"the {kind} model there"
    self.max_seq_length = max_seq_length
    self.labels = [] if kind == "regression" else list(labels)
    self.text_pair, self.token_level = text_pair, token_level
    self.checkpoint, self.model = checkpoint, model
    self._serve_text, self._fill, self._encoder = serve_text, fill, encoder
    self._keep = keep  # the loaded SavedModel its functions belong to

  def predict(self, texts, texts_b=None, top_k=5):
    """One result per text (the module docstring says which)."""
    texts = _strings(texts, "texts")
    if self.kind == "fill_mask":
      if texts_b is not None:
        raise LoadError(f"{self.path}: fill-mask takes no texts_b")
      return self._fill(texts, top_k)
    if self._serve_text is None:
      raise LoadError(f"{self.path}: {self.what} has no classifier, tagger "
                      "or MLM head for predict(); embed() gives its encoder "
                      "outputs")
    if self.text_pair != (texts_b is not None):
      raise LoadError(f"{self.path}: a sentence-pair model takes texts_b"
                      if self.text_pair else
                      f"{self.path}: a single-text model takes no texts_b")
    inputs = {"text": texts}
    if texts_b is not None:
      inputs["text_b"] = _strings(texts_b, "texts_b", len(texts))
    results, untagged = [], []
    for start in range(0, len(texts), BATCH_SIZE):
      out = self._serve_text(**{k: tf.constant(v[start:start + BATCH_SIZE],
                                               tf.string)
                                for k, v in inputs.items()})
      out = {k: v.numpy() for k, v in out.items()}
      results += self._decode(out, len(texts[start:start + BATCH_SIZE]))
      if "num_untagged_chars" in out:
        untagged += [start + i for i in np.flatnonzero(
            out["num_untagged_chars"])]
    if untagged:
      logging.warning(
          "%d of %d texts are longer than the %d pieces the tagger reads: "
          "their tails are not tagged (texts %s); split them first",
          len(untagged), len(texts), self.max_seq_length - 2,
          ", ".join(map(str, untagged[:3])))
    return results

  def _decode(self, out, n):
    if self.kind == "regression":
      return [{"score": float(out[F.LOGITS][i, 0])} for i in range(n)]
    if self.kind == "classification":
      return [{"label": self.labels[int(p.argmax())],
               "probabilities": dict(zip(self.labels, map(float, p)))}
              for p in out[F.PROBABILITIES]]
    return [[{"type": out["entity_types"][i, j].decode(),
              "text": out["entity_texts"][i, j].decode(),
              "start": int(out["entity_starts"][i, j]),
              "end": int(out["entity_ends"][i, j])}
             for j in range(int(out["num_entities"][i]))] for i in range(n)]

  def encode(self, texts, texts_b=None):
    """The model inputs of the Python tokenizer: {name: int32 [n, length]}.

    A tagger's are `ner_data.encode_text`'s (pieces of its tokens), the
    others' `classifier_data.encode_pair`'s ([CLS] a [SEP] (b [SEP])).
    """
    texts = _strings(texts, "texts")
    length = self.max_seq_length
    if self.kind == "tagging":
      if texts_b is not None:
        raise LoadError(f"{self.path}: a tagger takes no texts_b")
      rows = [ner_data.encode_text(t, self.tokenizer, self.token_level,
                                   length)[1] for t in texts]
      return {k: np.concatenate([r[k] for r in rows]) if rows else
              np.zeros([0, length], np.int32) for k in F.ENCODER_INPUTS}
    texts_b = (_strings(texts_b, "texts_b", len(texts)) if texts_b is not None
               else [None] * len(texts))
    rows = [classifier_data.encode_pair(self.tokenizer, a, b, length)[:3]
            for a, b in zip(texts, texts_b)]
    return {k: np.asarray([r[i] for r in rows], np.int32).reshape([-1, length])
            for i, k in enumerate(F.ENCODER_INPUTS)}

  def embed(self, texts, texts_b=None):
    """The encoder's float32 `sequence_output` [n, length, hidden] and
    `pooled_output` [n, hidden] on `encode(texts, texts_b)`."""
    if self._encoder is None:
      raise LoadError(f"{self.path}: this SavedModel serves the {self.kind} "
                      "outputs only; load the output_dir it was exported "
                      "from to embed")
    features = self.encode(texts, texts_b)
    n = len(features[F.INPUT_IDS])
    chunks = [self._encoder({k: tf.constant(v[i:i + BATCH_SIZE])
                             for k, v in features.items()})
              for i in range(0, max(n, 1), BATCH_SIZE)]
    return {k: np.concatenate([np.asarray(c[k], np.float32) for c in chunks])
            for k in F.ENCODER_OUTPUTS}


def _strings(values, name, length=None):
  if isinstance(values, (str, bytes)):
    raise LoadError(f"{name} must be a list of strings, got one string")
  values = list(values)
  if length is not None and len(values) != length:
    raise LoadError(f"{name} has {len(values)} strings, texts {length}")
  return values


def load(path, spm_model_file=None, vocab_file=None, do_lower_case=None):
  """A `Predictor` for a model folder or checkpoint (module docstring).

  spm_model_file / vocab_file / do_lower_case: the tokenizer of a
  checkpoint or preset with none recorded beside it (run_pretraining's;
  do_lower_case defaults to true, as in every command). Raises LoadError
  (a ValueError) naming the path and what was looked for; a folder of the
  right kind that does not load raises the exporters' one-line errors.
  """
  path = os.fspath(path)
  if os.path.isdir(path):
    version = _version_dir(path)
    if version:
      return _from_saved_model(path, version)
    if all(os.path.isfile(os.path.join(path, f)) for f in PRESET_FILES):
      return _from_keras_hub(path, spm_model_file, do_lower_case)
  try:
    checkpoints.latest_checkpoint(path)
  except FileNotFoundError:
    raise LoadError(
        f"{path} is not a model folder albert_tf.load reads: looked for "
        f"{LOOKED_FOR}" if os.path.exists(path) else
        f"{path} does not exist (albert_tf.load reads {LOOKED_FOR})") from None
  record = ModelInfo.read_beside(path)
  task_name, model_name = export_lib.resolve_task(path, None, record)
  if task_name in (None, "pretraining"):
    return _from_encoder_checkpoint(path, record, spm_model_file, vocab_file,
                                    do_lower_case)
  # As export_saved_model.export does, for the recorded task.
  config, tokenizer = export_lib.resolve_model(
      path, None, None, spm_model_file, vocab_file, do_lower_case)
  task = registry.family(task_name).task
  max_seq_length = record.max_seq_length or DEFAULT_SEQ_LENGTH
  record = dataclasses.replace(record, max_seq_length=max_seq_length)
  model = task.export_model(config, record)
  report = export_lib._restore(path, model, model_name)  # pylint: disable=protected-access
  kwargs = dict(model=model, checkpoint=report["prefix"],
                encoder=lambda f: model.encoder(f, training=False))
  if task_name not in SERVED:
    return Predictor(path, task_name, tokenizer, max_seq_length, **kwargs)
  signatures = task.export_signatures(model, record, tokenizer,
                                      max_seq_length, None)
  fn = signatures["serve_text"]
  names = [s.name for s in fn.input_signature]
  return Predictor(
      path, task_name, tokenizer, max_seq_length,
      labels=record.label_list or [str(i) for i in range(record.num_labels)],
      text_pair=saved_model.takes_text_b(signatures),
      token_level=record.task_config.get("token_level"),
      serve_text=lambda **t: fn(*[t[n] for n in names]), **kwargs)


def _from_encoder_checkpoint(path, record, spm_model_file, vocab_file,
                             do_lower_case):
  """fill_mask's pretrainer, or the encoder of a checkpoint with no MLM
  head."""
  prefix = checkpoints.latest_checkpoint(path)
  try:
    model, tokenizer = fill_mask_lib.load(
        path, spm_model_file=spm_model_file, vocab_file=vocab_file,
        do_lower_case=do_lower_case)
    kind = "fill_mask"
  except fill_mask_lib.FillMaskError:
    config, tokenizer = export_lib.resolve_model(
        path, None, None, spm_model_file, vocab_file, do_lower_case)
    model = AlbertEncoder(config)
    export_lib._restore(path, model, export_lib.ENCODER)  # pylint: disable=protected-access
    kind = "encoder"
  encoder = model if kind == "encoder" else model.encoder
  recorded = record and (record.max_seq_length or
                         record.task_config.get("max_seq_length"))
  length = min(recorded or DEFAULT_SEQ_LENGTH,
               model.config.max_position_embeddings)

  return Predictor(
      path, kind, tokenizer, length, checkpoint=prefix, model=model,
      fill=lambda texts, k: [[[_top(*t) for t in mask] for mask in masks]
                             for masks in fill_mask_lib.fill_mask(
                                 model, tokenizer, texts, k)],
      encoder=lambda f: encoder(f, training=False))


def _version_dir(path):
  """path itself when it is a SavedModel, else its highest version, or None."""
  if tf.saved_model.contains_saved_model(path):
    return path
  versions = [int(d) for d in os.listdir(path) if d.isdigit() and
              tf.saved_model.contains_saved_model(os.path.join(path, d))]
  return os.path.join(path, str(max(versions))) if versions else None


def _from_saved_model(path, version_dir):
  # Registers the TF Text ops of serve_text before the graph is read.
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import  # noqa: F401
  meta_file = os.path.join(version_dir, "assets.extra",
                           saved_model.METADATA_FILE)
  if not os.path.isfile(meta_file):
    raise LoadError(f"{path}: {meta_file} does not exist (load reads "
                    "SavedModels written by export_saved_model)")
  meta = ModelInfo.read(meta_file)
  tokenizer = _tokenizer(
      os.path.join(version_dir, "assets", meta.tokenizer_file),
      meta.tokenizer_kind, meta.do_lower_case)
  loaded = tf.saved_model.load(version_dir)
  signatures = loaded.signatures
  kind = meta.task or export_lib.ENCODER
  serve_text = signatures["serve_text"] if kind in SERVED else None
  encoder = fill = None
  if kind in (export_lib.ENCODER, "pretraining"):
    ids = signatures["serving_default"]
    extra = kind == "pretraining"  # its serving_default reads positions
    encoder = lambda f: ids(**f, **({F.MASKED_LM_POSITIONS: tf.zeros(
        [tf.shape(f[F.INPUT_IDS])[0], 1], tf.int32)} if extra else {}))
  if kind == "pretraining":
    kind = "fill_mask"
    fill = lambda texts, k: _serve_fill_mask(
        signatures["serve_fill_mask"], texts, k)
  return Predictor(
      path, kind, tokenizer, meta.max_seq_length, labels=meta.label_list,
      text_pair=meta.text_pair,
      token_level=meta.task_config.get("token_level"),
      checkpoint=meta.checkpoint, serve_text=serve_text, fill=fill,
      encoder=encoder, keep=loaded)


def _serve_fill_mask(fn, texts, top_k):
  results = []
  for start in range(0, len(texts), BATCH_SIZE):
    out = {k: v.numpy() for k, v in fn(
        text=tf.constant(texts[start:start + BATCH_SIZE], tf.string),
        top_k=tf.constant(top_k, tf.int32)).items()}
    results += [[[_top(p.decode(), i, q) for p, i, q in zip(
        out["top_k_pieces"][r, m], out["top_k_ids"][r, m],
        out["top_k_probabilities"][r, m])] for m in range(int(masks))]
                for r, masks in enumerate(out["num_masks"])]
  return results


def _top(piece, piece_id, probability):
  return {"piece": piece, "id": int(piece_id),
          "probability": float(probability)}


def _tokenizer(path, kind, do_lower_case):
  wordpiece = kind == "wordpiece"
  return load_tokenizer(None if wordpiece else path,
                        path if wordpiece else None,
                        True if do_lower_case is None else do_lower_case)


def _from_keras_hub(path, spm_model_file, do_lower_case):
  """The encoder of a keras-hub AlbertBackbone preset (no head)."""
  import keras_hub  # pylint: disable=g-import-not-at-top
  from albert_tf.converters import keras_hub_interop  # pylint: disable=g-import-not-at-top
  backbone = keras_hub.models.AlbertBackbone.from_preset(path)
  encoder = keras_hub_interop.encoder_from_keras_hub(backbone)
  tokenizer = _tokenizer(spm_model_file or os.path.join(path, PRESET_SPM),
                         "sentencepiece", do_lower_case)
  length = min(DEFAULT_SEQ_LENGTH, encoder.config.max_position_embeddings)
  return Predictor(path, "encoder", tokenizer, length, model=encoder,
                   encoder=lambda f: encoder(f, training=False),
                   what="the keras-hub preset (an AlbertBackbone)")
