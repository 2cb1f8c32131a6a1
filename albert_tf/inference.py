"""Load a trained model from its folder and predict on raw strings.

    import albert_tf
    model = albert_tf.load("demo_output/cls")          # run_classifier output
    model.predict(["很好用", "太差了"])
    # [{"label": "1", "probabilities": {"0": 0.02, "1": 0.98}}, ...]
    albert_tf.load("demo_output/ner").predict(["张三在北京。"])
    # [[{"type": "PER", "text": "张三", "start": 0, "end": 2}, ...]]
    model.embed(["很好用"])["pooled_output"].shape      # (1, hidden_size)

What it loads: a fine-tuned output_dir or checkpoint (with its
task_record.json) is restored as export_saved_model would export it and
`predict` calls its `Task.export_signatures` serve_text in memory; a
run_pretraining output_dir predicts masks (`fill_mask.fill_mask`: `predict(
["中国[MASK]民银行"], top_k=5)`) or only embeds without an MLM head; an
export_saved_model export runs its serve_text (serve_fill_mask), its record
read from assets.extra/albert_export.json; a keras-hub preset is an
encoder; an export_onnx `.onnx` runs in ONNX Runtime, an export_tflite
`.tflite` in LiteRT (one example per call), encoded by serve_text's own
encoder run from Python (`Task.encode_inputs`) and decoded by
`Task.decode_outputs` or the family's `Task.ids_decoder`.

`predict` takes one list per serve_text input (or one list of tuples):
texts (texts_b=... for a pair task), span QA questions and contexts,
multiple choice articles, questions and options (num_choices each). Per
example it gives the family's `Task.decode_outputs` (a classifier {"label",
"probabilities"}, a tagger its entities [{"type", "text", "start", "end"}]
in code points, span QA {"answer", "start", "end", "score"}); fill-mask
per [MASK] [{"piece", "id", "probability"}], most probable first. `encode`
gives the model inputs (`Task.encode_inputs`, int32), `embed` the
encoder's outputs on them.

Which family a folder holds is its record's (`albert_tf.tasks.registry`): this
module has no table of families; restoring is `albert_tf.training.export`'s.
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.tasks import registry
from albert_tf.serving import saved_model
from albert_tf.serving.export_files import tokenizer_file, tokenizer_of
from albert_tf.serving.predictor import BATCH_SIZE, LoadError, Predictor
from albert_tf.tasks.base import Task
from albert_tf.core.record import ModelInfo
from albert_tf.training import checkpoints
from albert_tf.training import export

DEFAULT_SEQ_LENGTH = export.DEFAULT_SEQ_LENGTH  # when nothing is recorded
PRESET_FILES = ("config.json", "model.weights.h5")  # a keras-hub preset
PRESET_SPM = os.path.join("assets", "tokenizer", "vocabulary.spm")
LOOKED_FOR = (
    "a run_classifier/run_ner/run_pretraining output_dir or checkpoint (a "
    "'checkpoint' file, best/best.json or PREFIX.index), an "
    "export_saved_model export_dir or version (saved_model.pb), an "
    "export_onnx .onnx or export_tflite .tflite file (NAME.json beside it) "
    "or a keras-hub preset (config.json + model.weights.h5)")


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
  record = registry.read_record(path)
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
      path, kind, tokenizer, length, task=Task, checkpoint=prefix, model=model,
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
  tokenizer = tokenizer_of(version_dir, meta.flat_dict())
  loaded = tf.saved_model.load(version_dir)
  signatures = loaded.signatures
  task = _family(meta)
  kind = meta.task or export.ENCODER
  serve_text = inputs = encoder = fill = ids_fn = None
  if task is None or task.fills_masks:
    ids = signatures["serving_default"]
    extra = task is not None  # a pretrainer's serving_default reads positions
    encoder = lambda f: ids(**f, **({F.MASKED_LM_POSITIONS: tf.zeros(
        [tf.shape(f[F.INPUT_IDS])[0], 1], tf.int32)} if extra else {}))
    if task is not None:
      kind, task = "fill_mask", None
      fill = lambda texts, k: _serve_fill_mask(
          signatures["serve_fill_mask"], texts, k)
  elif "serve_text" in signatures:
    serve_text = signatures["serve_text"]
    specs = serve_text.structured_input_signature[1]
    order = task.serve_text_inputs(dataclasses.replace(meta, text_pair=True))
    inputs = [n for n in order if n in specs] + sorted(set(specs) -
                                                       set(order))
  else:
    # A serving_default-only export (--signatures): encoded in Python, the
    # inputs as recorded (text_b only for a pair model).
    ids_fn = lambda f: signatures["serving_default"](**f)
    inputs = list(task.serve_text_inputs(meta))
  return Predictor(
      path, kind, tokenizer, meta.max_seq_length, record=meta,
      task=task or Task, inputs=inputs, checkpoint=meta.checkpoint,
      serve_text=serve_text,
      fill=fill, encoder=encoder, keep=loaded, ids_fn=ids_fn)


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
  from albert_tf.serving.tflite_runner import (TFLiteRunner, one_at_a_time,
                                               sidecar_json)
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
  # export_tflite's JSON is flat: the fields the record does not know are
  # the family's task_config, but for the runner's own limits.
  skip = _FILE_FIELDS + (("vocab_size", "max_position_embeddings") if tflite
                         else ())
  meta = ModelInfo.from_dict({k: v for k, v in runner.info.items()
                              if k not in skip})
  if tflite:
    runner = one_at_a_time(runner)
  tokenizer = tokenizer_file(
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
      path, kind, tokenizer, meta.max_seq_length, record=meta,
      task=task or Task, inputs=task.serve_text_inputs(meta) if task else None,
      checkpoint=meta.checkpoint, keep=runner, ids_fn=ids_fn, raw_fn=raw_fn,
      what=f"the {kind} {os.path.splitext(path)[1]}")


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


def _from_keras_hub(path, spm_model_file, do_lower_case):
  """The encoder of a keras-hub AlbertBackbone preset (no head)."""
  import keras_hub  # pylint: disable=g-import-not-at-top
  from albert_tf.converters import keras_hub_interop  # pylint: disable=g-import-not-at-top
  backbone = keras_hub.models.AlbertBackbone.from_preset(path)
  encoder = keras_hub_interop.encoder_from_keras_hub(backbone)
  tokenizer = tokenizer_file(spm_model_file or os.path.join(path, PRESET_SPM),
                             "sentencepiece", do_lower_case)
  length = min(DEFAULT_SEQ_LENGTH, encoder.config.max_position_embeddings)
  return Predictor(path, "encoder", tokenizer, length, task=Task, model=encoder,
                   encoder=lambda f: encoder(f, training=False),
                   what="the keras-hub preset (an AlbertBackbone)")


def load_with_head(model, error=ValueError):
  """`load(model)` of a model with a task head; `error` for one without."""
  predictor = load(model)
  if predictor.kind in ("fill_mask", "encoder"):
    raise error(f"--model={model}: a {predictor.kind} checkpoint has no "
                "task head (albert_tf.fill_mask predicts masks)")
  return predictor
