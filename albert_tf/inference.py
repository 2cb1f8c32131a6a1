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
preset is an encoder. An export_onnx `.onnx` runs in ONNX Runtime
(`serving.onnx_runner`), an export_tflite `.tflite` in LiteRT
(`serving.tflite_runner`, one example per call), each with its record and
tokenizer read from the files
beside it: encoded in Python (`Task.encode_inputs`), decoded by
`Task.decode_outputs`, or by the family's `Task.ids_decoder`.

`predict` takes one list per input of the family's serve_text (or one
list of tuples): texts (texts_b=... for a pair task); span QA
`predict(questions, contexts)` or `predict([(question, context), ...])`;
multiple choice `predict(articles, questions, options)` (options: one list
of num_choices strings per question). Per example it gives what the
family's `Task.decode_outputs` says (a classifier {"label",
"probabilities": {label: p}}, a tagger its entities [{"type", "text",
"start", "end"}] in code points, span QA {"answer", "start", "end",
"score"}); fill-mask per [MASK] [{"piece", "id",
"probability"}], most probable first. `encode` gives the Python twin of the
family's encoding (`Task.encode_inputs`: int32 numpy,
`features.ENCODER_INPUTS`), `embed` the encoder's outputs on them.

Which family a folder holds is its record's (`albert_tf.registry`): this
module has no table of families; restoring is `albert_tf.training.export`'s.
"""

import dataclasses
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf import registry
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.serving import saved_model
from albert_tf.tasks.base import Task
from albert_tf.tasks.record import ModelInfo
from albert_tf.training import checkpoints
from albert_tf.training import export

BATCH_SIZE = 64
DEFAULT_SEQ_LENGTH = export.DEFAULT_SEQ_LENGTH  # when nothing is recorded
PRESET_FILES = ("config.json", "model.weights.h5")  # a keras-hub preset
PRESET_SPM = os.path.join("assets", "tokenizer", "vocabulary.spm")
LOOKED_FOR = (
    "a run_classifier/run_ner/run_pretraining output_dir or checkpoint (a "
    "'checkpoint' file, best/best.json or PREFIX.index), an "
    "export_saved_model export_dir or version (saved_model.pb), an "
    "export_onnx .onnx or export_tflite .tflite file (NAME.json beside it) "
    "or a keras-hub preset (config.json + model.weights.h5)")
OPTIONAL = "text_b"  # the one serve_text input a caller may leave out


class LoadError(ValueError):
  """A path load() cannot read, or a request its model cannot answer."""


class Predictor:
  """What `load` returns.

  Attributes:
    kind: the registered family's name, "fill_mask" or "encoder".
    task: the family's Task subclass (`albert_tf.tasks.base.Task` for an
      encoder or fill-mask model); record: its ModelInfo.
    inputs: the names of the inputs predict() takes, in order.
    labels: the record's label_list (class names, BIO tags, choice names).
    max_seq_length, tokenizer, text_pair, token_level: how texts are read.
    checkpoint: the prefix the weights came from; model: the Keras model
      (None for a SavedModel).
  """

  def __init__(self, path, kind, tokenizer, max_seq_length, record=None,
               task=None, inputs=None, checkpoint=None, model=None,
               serve_text=None, fill=None, encoder=None, keep=None,
               what=None, ids_fn=None, raw_fn=None):
    self.path, self.kind, self.tokenizer = path, kind, tokenizer
    self.what = what or f"the {kind} model there"
    self.max_seq_length = max_seq_length
    self.record = record or ModelInfo()
    self.task = task or Task
    self.labels = list(self.record.label_list)
    self.inputs = tuple(inputs or self.task.serve_text_inputs(
        dataclasses.replace(self.record, text_pair=True)))
    self.text_pair = "text_b" in self.inputs
    self.token_level = self.record.task_config.get("token_level")
    self.checkpoint, self.model = checkpoint, model
    self._serve_text, self._fill, self._encoder = serve_text, fill, encoder
    # A family without serve_text (no in-graph twin of its encoding):
    # predict encodes in Python (`Task.encode_inputs`, training's rule) and
    # runs serving_default on the ids.
    self._ids_fn = ids_fn
    # A family decoded in Python around a runner of serving_default (an
    # .onnx tagger or span QA model): raw inputs -> results.
    self._raw_fn = raw_fn
    self._keep = keep  # the loaded SavedModel its functions belong to

  def predict(self, texts, texts_b=None, *more, top_k=5, **named):
    """One result per example (the module docstring says which)."""
    if self.kind == "fill_mask":
      if texts_b is not None or more or named:
        raise LoadError(f"{self.path}: fill-mask takes no texts_b")
      return self._fill(_strings(texts, "texts"), top_k)
    if self._raw_fn is not None:
      inputs = self._columns(texts, texts_b, more, named, optional=False)
      return self._raw_fn(inputs)
    if self._serve_text is None and self._ids_fn is None and (
        self.path.endswith((".onnx", ".tflite"))):
      raise LoadError(f"{self.path}: predict() on an .onnx or .tflite "
                      f"cannot decode this {self.kind} model's outputs (its "
                      "Task neither decodes_serving_default nor has an "
                      "ids_decoder for them); serving.onnx_runner.OnnxRunner "
                      "runs its serving_default, export_saved_model serves "
                      "its text")
    if self._serve_text is None and self._ids_fn is None:
      raise LoadError(f"{self.path}: {self.what} has no classifier, tagger "
                      "or MLM head for predict(); embed() gives its encoder "
                      "outputs")
    inputs = self._columns(texts, texts_b, more, named, optional=False)
    n = len(inputs[self.inputs[0]])
    results, untagged = [], []
    for start in range(0, n, BATCH_SIZE):
      batch = {k: v[start:start + BATCH_SIZE] for k, v in inputs.items()}
      if self._serve_text is not None:
        out = self._serve_text(**{k: tf.constant(v, tf.string)
                                  for k, v in batch.items()})
      else:
        out = self._ids_fn({k: tf.constant(v) for k, v in
                            self.task.encode_inputs(
                                self.record, self.tokenizer,
                                self.max_seq_length, batch).items()})
      out = {k: v.numpy() for k, v in out.items()}
      size = min(BATCH_SIZE, n - start)
      results += self.task.decode_outputs(self.record, out, size)
      if "num_untagged_chars" in out:
        untagged += [start + i for i in np.flatnonzero(
            out["num_untagged_chars"])]
    if untagged:
      logging.warning(
          "%d of %d texts are longer than the %d pieces the tagger reads: "
          "their tails are not tagged (texts %s); split them first",
          len(untagged), n, self.max_seq_length - 2,
          ", ".join(map(str, untagged[:3])))
    return results

  def _columns(self, texts, texts_b, more, named, optional):
    """{input name: list} of predict's (serve_text's inputs) or encode's
    (the family's, text_b optional) arguments."""
    given = [texts] + ([texts_b] if texts_b is not None or more else []) + [
        *more]
    names = self.inputs if not optional else tuple(
        self.task.serve_text_inputs(
            dataclasses.replace(self.record, text_pair=True)))
    unknown = sorted(set(named) - set(names))
    if unknown:
      raise LoadError(f"{self.path}: no input {unknown[0]!r} (the "
                      f"{self.kind} model takes {', '.join(names)})")
    if (len(given) == 1 and not named and len(names) > 1 and
        not isinstance(texts, (str, bytes))):
      rows = list(texts)
      if rows and all(isinstance(r, (tuple, list)) and
                      len(r) == len(names) for r in rows):
        given = [list(c) for c in zip(*rows)]  # a list of tuples
    if len(given) > len(names):
      raise LoadError(f"{self.path}: a single-text model takes no texts_b"
                      if names == ("text",) else
                      f"{self.path}: the {self.kind} model takes "
                      f"{len(names)} inputs ({', '.join(names)}), got "
                      f"{len(given)}")
    values = dict(zip(names, given), **named)
    missing = [k for k in names if k not in values and
               not (optional and k == OPTIONAL)]
    if missing:
      raise LoadError(f"{self.path}: a sentence-pair model takes texts_b"
                      if missing == [OPTIONAL] else
                      f"{self.path}: the {self.kind} model takes "
                      f"{', '.join(names)} (one list each); "
                      f"{', '.join(missing)} missing")
    first = _strings(values[names[0]], names[0])
    out = {names[0]: first}
    for k in names[1:]:
      if k in values:
        out[k] = _strings(values[k], k, len(first), names[0])
    return out

  def encode(self, texts, texts_b=None, *more, **named):
    """The family's Python encoding of the inputs (`Task.encode_inputs`):
    {name: int32 [n, length]} ([n, choices, length] for multiple choice,
    [n_windows, length] for span QA).

    A tagger's are `ner_data.encode_text`'s (pieces of its tokens), the
    text families' `classifier_data.encode_pair`'s ([CLS] a [SEP] (b
    [SEP])).
    """
    inputs = self._columns(texts, texts_b, more, named, optional=True)
    return self.task.encode_inputs(self.record, self.tokenizer,
                                   self.max_seq_length, inputs)

  def embed(self, texts, texts_b=None, *more, **named):
    """The encoder's float32 `sequence_output` [n, length, hidden] and
    `pooled_output` [n, hidden] on the rows of `encode(...)` (each choice
    of a multiple-choice question, each window of span QA, one row)."""
    if self._encoder is None:
      raise LoadError(f"{self.path}: this SavedModel serves the {self.kind} "
                      "outputs only; load the output_dir it was exported "
                      "from to embed")
    features = self.encode(texts, texts_b, *more, **named)
    features = {k: v.reshape([-1, v.shape[-1]]) for k, v in features.items()}
    n = len(features[F.INPUT_IDS])
    chunks = [self._encoder({k: tf.constant(v[i:i + BATCH_SIZE])
                             for k, v in features.items()})
              for i in range(0, max(n, 1), BATCH_SIZE)]
    return {k: np.concatenate([np.asarray(c[k], np.float32) for c in chunks])
            for k in F.ENCODER_OUTPUTS}


def _strings(values, name, length=None, first="texts"):
  if isinstance(values, (str, bytes)):
    raise LoadError(f"{name} must be a list of strings, got one string")
  values = list(values)
  if length is not None and len(values) != length:
    raise LoadError(f"{name} has {len(values)} strings, {first} {length}")
  for i, value in enumerate(values):
    _check_string(value, f"{name}[{i}]")
  return values


def _check_string(value, where):
  """LoadError naming `where` unless value is a str UTF-8 can encode (a
  list or tuple of them: multiple choice's options per question).

  Without it None, a number or bytes fail in a TF conversion or deep in
  the tokenizer, and a lone surrogate ("\\ud800") in an encode, none of
  them naming the input.
  """
  if isinstance(value, np.ndarray) and value.ndim == 0:
    value = value.item()
  if isinstance(value, (list, tuple, np.ndarray)):
    for j, item in enumerate(value):
      _check_string(item, f"{where}[{j}]")
    return
  if isinstance(value, (bytes, bytearray)):
    raise LoadError(f"{where} is bytes, not a string (decode it first: "
                    f"{bytes(value[:20])!r})")
  if not isinstance(value, str):
    raise LoadError(f"{where} is {value!r} ({type(value).__name__}), not a "
                    "string")
  try:
    value.encode("utf-8")
  except UnicodeEncodeError as e:
    raise LoadError(
        f"{where} holds an unpaired surrogate {value[e.start]!r} at "
        f"character {e.start} (not text UTF-8 can encode)") from None


def _family(record):
  """The Task subclass of a record (None: no family, an encoder)."""
  if not (record and record.task):
    return None
  return registry.family(record.task, record.task_module).task


def _caller(fn, specs):
  """fn (a signature) called with keyword inputs."""
  names = [s.name for s in specs]
  return lambda **t: fn(*[t[n] for n in names])


def load(path, spm_model_file=None, vocab_file=None, do_lower_case=None):
  """A `Predictor` for a model folder or checkpoint (module docstring).

  spm_model_file / vocab_file / do_lower_case: the tokenizer of a
  checkpoint or preset with none recorded beside it (run_pretraining's;
  do_lower_case defaults to true, as in every command). Raises LoadError
  (a ValueError) naming the path and what was looked for; a folder of the
  right kind that does not load raises the exporters' one-line errors.
  """
  path = os.fspath(path)
  if path.endswith((".onnx", ".tflite")) and os.path.isfile(path):
    return _from_file(path)
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
  task_name, model_name = export.resolve_task(path, None, record)
  task = _family(record) if task_name else None
  if task is None or task.fills_masks:
    return _from_encoder_checkpoint(path, record, spm_model_file, vocab_file,
                                    do_lower_case)
  # As export_saved_model.export restores it, for the recorded task; its
  # serve_text runs in memory.
  restored = export.restore_task(path, task_name, model_name, record,
                                 spm_model_file, vocab_file, do_lower_case)
  model, record = restored.model, restored.record
  signatures = task.export_signatures(model, record, restored.tokenizer,
                                      record.max_seq_length, None)
  fn = signatures.get("serve_text")
  ids = signatures["serving_default"]
  return Predictor(
      path, task_name, restored.tokenizer, record.max_seq_length,
      record=record, task=task,
      inputs=[s.name for s in fn.input_signature] if fn else None,
      checkpoint=restored.prefix, model=model,
      serve_text=_caller(fn, fn.input_signature) if fn else None,
      encoder=lambda f: model.encoder(f, training=False),
      ids_fn=None if fn else (lambda f, c=_caller(ids, ids.input_signature):
                              c(**f)))


def _from_encoder_checkpoint(path, record, spm_model_file, vocab_file,
                             do_lower_case):
  """fill_mask's pretrainer, or the encoder of a checkpoint with no MLM
  head."""
  prefix = checkpoints.latest_checkpoint(path)
  try:
    model, tokenizer = export.load_pretrainer(
        path, spm_model_file=spm_model_file, vocab_file=vocab_file,
        do_lower_case=do_lower_case)
    kind = "fill_mask"
  except export.FillMaskError:
    model, tokenizer = export.restore_encoder(path, spm_model_file,
                                              vocab_file, do_lower_case)
    kind = "encoder"
  encoder = model if kind == "encoder" else model.encoder
  recorded = record and (record.max_seq_length or
                         record.task_config.get("max_seq_length"))
  length = min(recorded or DEFAULT_SEQ_LENGTH,
               model.config.max_position_embeddings)

  return Predictor(
      path, kind, tokenizer, length, checkpoint=prefix, model=model,
      fill=lambda texts, k: [[[_top(*t) for t in mask] for mask in masks]
                             for masks in export.fill_mask(
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
  task = _family(meta)
  kind = meta.task or export.ENCODER
  serve_text = inputs = encoder = fill = None
  if task is not None and not task.fills_masks and (
      "serve_text" in signatures):
    fn = signatures["serve_text"]
    specs = fn.structured_input_signature[1]
    order = task.serve_text_inputs(dataclasses.replace(meta, text_pair=True))
    inputs = [n for n in order if n in specs] + sorted(set(specs) -
                                                       set(order))
    serve_text = fn
  if task is None or task.fills_masks:
    ids = signatures["serving_default"]
    extra = task is not None  # a pretrainer's serving_default reads positions
    encoder = lambda f: ids(**f, **({F.MASKED_LM_POSITIONS: tf.zeros(
        [tf.shape(f[F.INPUT_IDS])[0], 1], tf.int32)} if extra else {}))
  ids_fn = None
  if task is not None and not task.fills_masks and serve_text is None:
    # A serving_default-only export (--signatures): encoded in Python, the
    # inputs as recorded (text_b only for a pair model).
    ids_fn = lambda f: signatures["serving_default"](**f)
    inputs = list(task.serve_text_inputs(meta))
  if task is not None and task.fills_masks:
    kind, task = "fill_mask", None
    fill = lambda texts, k: _serve_fill_mask(
        signatures["serve_fill_mask"], texts, k)
  return Predictor(
      path, kind, tokenizer, meta.max_seq_length, record=meta, task=task,
      inputs=inputs, checkpoint=meta.checkpoint, serve_text=serve_text,
      fill=fill, encoder=encoder, keep=loaded, ids_fn=ids_fn)


def _one_at_a_time(runner):
  """A .tflite's runner (inputs fixed at one example) over a batch."""
  def run(**features):
    n = len(features[F.INPUT_IDS])
    rows = [runner(**{k: np.asarray(v)[i:i + 1] for k, v in features.items()})
            for i in range(n)]
    return {k: np.concatenate([r[k] for r in rows]) for k in rows[0]}
  return run


# What an export's JSON holds beside the record's fields.
_FILE_FIELDS = ("model_file", "format", "quantize", "opset",
                "source_saved_model", "inputs", "outputs", "sharing",
                "signature", "verification", "model", "is_regression")


def _from_file(path):
  """An export_onnx .onnx through ONNX Runtime, or an export_tflite .tflite
  through LiteRT: the family's Python encoding (`Task.encode_inputs`),
  serving_default, `Task.decode_outputs`."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.onnx_runner import OnnxRunner
  from albert_tf.serving.tflite_runner import TFLiteRunner, sidecar_json
  tflite = path.endswith(".tflite")
  info_file = sidecar_json(path)
  exporter = "export_tflite" if tflite else "export_onnx"
  if not os.path.isfile(info_file):
    raise LoadError(f"{path}: {path}.json does not exist (load reads "
                    f"{os.path.splitext(path)[1]} files written by "
                    f"albert_tf.{exporter})")
  try:
    runner = TFLiteRunner(path) if tflite else OnnxRunner(path)
  except ImportError as e:
    raise LoadError(str(e)) from None
  except Exception as e:  # pylint: disable=broad-except
    # The runtime's own parse errors (onnxruntime's InvalidProtobuf,
    # LiteRT's ValueError) name no file; a JSON error names no file either.
    what = (f"{info_file} is not JSON" if isinstance(
        e, json.JSONDecodeError) else f"{path} does not load in "
            f"{'LiteRT' if tflite else 'ONNX Runtime'}")
    first = (str(e).strip().splitlines() or [""])[0][:200]
    raise LoadError(f"{what} ({type(e).__name__}: {first}): a cut or "
                    f"damaged file? write it again with albert_tf.{exporter}"
                    ) from None
  own = ({k: v for k, v in runner.info.items() if k not in _FILE_FIELDS}
         if not tflite else _tflite_record(runner.info))
  meta = ModelInfo.from_dict(own)
  if tflite:
    runner = _one_at_a_time(runner)
  tokenizer = _tokenizer(
      os.path.join(os.path.dirname(path), meta.tokenizer_file),
      meta.tokenizer_kind, meta.do_lower_case)
  task = _family(meta)
  kind = meta.task or export.ENCODER
  ids_fn = raw_fn = None
  if task is not None and task.decodes_serving_default:
    ids_fn = lambda f: {k: tf.constant(v) for k, v in runner(
        **{n: np.asarray(x) for n, x in f.items()}).items()}
  elif task is not None:
    raw_fn = task.ids_decoder(meta, runner, tokenizer, meta.max_seq_length)
  return Predictor(
      path, kind, tokenizer, meta.max_seq_length, record=meta, task=task,
      inputs=task.serve_text_inputs(meta) if task else None,
      checkpoint=meta.checkpoint, keep=runner, ids_fn=ids_fn, raw_fn=raw_fn,
      what=f"the {kind} {os.path.splitext(path)[1]}")


def _tflite_record(info):
  """The record fields of export_tflite's JSON (a flat layout: the
  family's own fields at the top level)."""
  from albert_tf.record import ModelInfo as Record  # pylint: disable=g-import-not-at-top
  import dataclasses as dc  # pylint: disable=g-import-not-at-top
  known = {f.name for f in dc.fields(Record)}
  values = {k: v for k, v in info.items()
            if k in known and k not in _FILE_FIELDS}
  values["task_config"] = {k: v for k, v in info.items()
                           if k not in known and k not in _FILE_FIELDS
                           and k not in ("vocab_size",
                                         "max_position_embeddings")}
  return values


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
