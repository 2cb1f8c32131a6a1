"""The building blocks of a versioned SavedModel for TF Serving.

A task family (`albert_tf.tasks`) says what its signatures compute
(`Task.export_signatures`, made of `signature` and `ids_signature` here);
`make_archive` puts them with the model into a `keras.export.ExportArchive`,
and `write_version` writes export_dir/<version>/ with the tokenizer in
assets/, albert_export.json and the TF Serving warmup requests in
assets.extra/, through a hidden temporary directory renamed into place, so a
polling server never sees half a model.
"""

import dataclasses
import inspect
import os
import shutil
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf.data import normalization
from albert_tf.core.record import ModelInfo
from albert_tf.core import staging

METADATA_FILE = "albert_export.json"
WARMUP_FILE = "tf_serving_warmup_requests"


# ---------------------------------------------------------------- signatures
def int_spec(name: str, shape=(None, None)) -> tf.TensorSpec:
  """int32 input `name`, [batch, length] by default."""
  return tf.TensorSpec(list(shape), tf.int32, name=name)


def text_specs(text_pair: bool) -> List[tf.TensorSpec]:
  """string [batch] `text` (+ `text_b` for pairs)."""
  return [tf.TensorSpec([None], tf.string, name=n)
          for n in ("text", "text_b")[:1 + bool(text_pair)]]


def signature(fn: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
              specs: Sequence[tf.TensorSpec]):
  """A tf.function whose inputs are named by `specs`; fn gets them as a
  dict. The tf.Modules fn reads (an in-graph tokenizer) are saved by
  `make_archive`."""
  names = [s.name for s in specs]

  def serve(*args):
    return fn(dict(zip(names, args)))

  return tf.function(serve, input_signature=list(specs), autograph=False)


def ids_signature(run: Callable, extra_inputs: Sequence[str] = (),
                  vocab_size: int = 0, shape=(None, None),
                  max_positions: Optional[int] = None):
  """serving_default: int32 `input_ids`, `input_mask`, `segment_ids` (+
  extra_inputs, e.g. masked_lm_positions) -> run(features), core TF ops
  only. With vocab_size, malformed inputs are an InvalidArgumentError
  naming the input (`checked_ids`), an input longer than max_positions too
  (default: the max_position_embeddings of the model run calls,
  `config_value`). shape: of the encoder inputs ([batch, choices, length]
  for multiple choice)."""
  if vocab_size and max_positions is None:
    max_positions = config_value(run, "max_position_embeddings")
    if max_positions is None:
      logging.warning("serving_default: no model config found in what the "
                      "signature calls; inputs longer than its position "
                      "table are not checked")
  segment_kinds = config_value(run, "type_vocab_size") if vocab_size else None
  checked = ((lambda f: run(checked_ids(f, vocab_size, max_positions,
                                        segment_kinds)))
             if vocab_size else run)
  return signature(checked,
                   [int_spec(n, shape) for n in F.ENCODER_INPUTS] +
                   [int_spec(n) for n in extra_inputs])


def checked_ids(features: Dict[str, tf.Tensor], vocab_size: int,
                max_positions: Optional[int] = None,
                type_vocab_size: Optional[int] = None):
  """features, once their ids and shapes are what the model reads.

  Unchecked, an id outside its table reads another row, zeros or fails deep
  in a gather, depending on the kernel; an input longer than max_positions
  fails in a broadcast or reads past the position table; an input_mask of
  another length is broadcast or ignored (oneDNN); none names the input.
  """
  def in_table(name, what, size, size_name):
    values = features[name]
    return [tf.debugging.assert_non_negative(
                values, message=f"{name}: a negative {what}"),
            tf.debugging.assert_less(
                values, tf.constant(int(size), values.dtype),
                message=f"{name}: a {what} >= {size_name}={int(size)}")]

  ids = features[F.INPUT_IDS]
  checks = in_table(F.INPUT_IDS, "token id", vocab_size, "vocab_size")
  if max_positions:
    checks.append(tf.debugging.assert_less_equal(
        tf.shape(ids)[-1], tf.constant(int(max_positions), tf.int32),
        message=f"{F.INPUT_IDS}: longer than max_position_embeddings="
                f"{int(max_positions)}, the rows of the position table"))
  if type_vocab_size:
    checks += in_table(F.SEGMENT_IDS, "segment id", type_vocab_size,
                       "type_vocab_size")
  for name in (F.INPUT_MASK, F.SEGMENT_IDS):
    checks.append(tf.debugging.assert_equal(
        tf.shape(features[name]), tf.shape(ids),
        message=f"{name}: another shape than {F.INPUT_IDS}"))
  with tf.control_dependencies(checks):
    return {name: tf.identity(value) for name, value in features.items()}


def config_value(fn, name: str) -> Optional[int]:
  """The positive int `name` of the config of the model fn calls: the
  `config` (or `encoder.config`) of what fn reads (`_read_by`); None when
  there is none."""
  for value in _read_by(fn):
    try:  # (a property that fails holds no config)
      limits = [getattr(getattr(holder, "config", None), name, None)
                for holder in (value, getattr(value, "encoder", None))
                if not inspect.isclass(holder)]
    except Exception:  # pylint: disable=broad-except
      continue
    for limit in limits:
      if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
  return None


def _read_by(fn, depth=0):
  """What fn closes over (and a bound method's owner), then what the
  functions among them read, a few levels deep; Keras layers not entered."""
  fn = getattr(fn, "python_function", fn)
  if depth > 4 or not callable(fn):
    return
  values = [getattr(fn, "__self__", None)]
  if inspect.isfunction(fn) or inspect.ismethod(fn):
    values += [cell.cell_contents for cell in
               (getattr(fn, "__closure__", None) or ())
               if _has_contents(cell)]
  values = [v for v in values if v is not None]
  yield from values
  for value in values:
    if callable(value) and not isinstance(value, keras.layers.Layer):
      yield from _read_by(value, depth + 1)


def _has_contents(cell) -> bool:
  try:
    cell.cell_contents  # pylint: disable=pointless-statement
    return True
  except ValueError:  # an empty cell
    return False


def make_archive(model: keras.Model, signatures: Dict[str, Callable]):
  """A `keras.export.ExportArchive` of the built model's variables and
  signatures ({name: tf.function with an input_signature}), which must
  hold "serving_default" (TF Serving's default; first), else ValueError."""
  if "serving_default" not in signatures:
    raise ValueError(f"the export signatures {sorted(signatures)} have no "
                     "serving_default")
  archive = keras.export.ExportArchive()
  # The model's variables, not the model: `archive.track(model)` has the
  # save walk every Keras layer for lookup tables (a tiny classifier's
  # export: 7.3-7.7 s of CPU with it, 6.1-6.4 s without, AMD EPYC AVX2).
  archive.variables.extend(model.variables)
  archive.trainable_variables.extend(model.trainable_variables)
  archive.non_trainable_variables.extend(model.non_trainable_variables)
  # Lookup tables and tokenizer models (tf.Modules the signatures read) are
  # saved only when tracked.
  modules = {id(v): v for fn in signatures.values() for v in _read_by(fn)
             if isinstance(v, tf.Module)
             and not isinstance(v, keras.layers.Layer)}
  for module in modules.values():
    archive.track(module)
  for name in ordered_signatures(signatures):
    fn = signatures[name]
    fn.get_concrete_function()  # traced once: the archive takes it as is
    archive.add_endpoint(name, fn)
  return archive


def ordered_signatures(names) -> List[str]:
  """serving_default first, then the others by name (the archive's order)."""
  return sorted(set(names), key=lambda n: (n != "serving_default", n))


# ---------------------------------------------------------------- the model
class ServedModel:
  """A Keras model as the signatures call it (its call and attributes:
  config, num_labels, ...), XLA-compiled and/or cast. With jit_compile the
  call is one `tf.function(jit_compile=True)` nested in the signature (the
  tokenizer's string ops around it cannot be compiled); float32_outputs
  casts every floating output to float32, whatever the family casts."""

  def __init__(self, model, jit_compile=False, float32_outputs=False):
    self.model = model
    self.jit_compile = bool(jit_compile)

    def served_call(features):
      outputs = model(features, training=False)
      if float32_outputs:
        outputs = tf.nest.map_structure(
            lambda t: tf.cast(t, tf.float32) if t.dtype.is_floating else t,
            outputs)
      return outputs

    self._call = tf.function(served_call, jit_compile=self.jit_compile,
                             autograph=False)

  def __call__(self, features, training=False):
    if training:
      raise ValueError("an exported model runs inference only "
                       "(training=False)")
    return self._call(features)

  def __getattr__(self, name):
    if name == "model":  # not set yet (copy, unpickling): no recursion
      raise AttributeError(name)
    return getattr(self.model, name)


def served_model(model, jit_compile=False, mixed_precision="none"):
  """model itself (the graph of before) unless an option needs a
  `ServedModel`: jit_compile, or a compute dtype other than float32."""
  cast = mixed_precision not in (None, "none")
  return ServedModel(model, jit_compile, cast) if jit_compile or cast else model


# ---------------------------------------------------------------- files
@dataclasses.dataclass
class ExportInfo(ModelInfo):
  """albert_export.json: the task record plus how the export serves.

  length_buckets: the lengths serve_text pads a batch to (the smallest that
  holds its longest row); [max_seq_length] alone is full padding.
  jit_compile: the model inside the signatures is XLA-compiled.
  mixed_precision: its compute dtype, "none" (float32) or "bfloat16";
  outputs are float32 either way.
  signatures: the names of the signatures saved (serving_default first).
  verification: the figures of `serving.saved_model_check`.
  """
  length_buckets: Optional[List[int]] = None
  jit_compile: Optional[bool] = None
  mixed_precision: Optional[str] = None
  signatures: Optional[List[str]] = None
  verification: Optional[dict] = None


def export_metadata(record, model, version, checkpoint, config, tokenizer,
                    signatures, length_buckets=None, jit_compile=False,
                    mixed_precision="none", saved=None):
  """albert_export.json's `ExportInfo`: the task record with the tokenizer,
  what was exported and how it serves (length_buckets default:
  [max_seq_length]). signatures: all the family's (text_pair is the
  model's, whichever are saved); saved: those the SavedModel holds."""
  record = ExportInfo(**{f.name: getattr(record, f.name)
                         for f in dataclasses.fields(ModelInfo)})
  return dataclasses.replace(
      record, model=model, version=version, checkpoint=checkpoint,
      length_buckets=[int(b) for b in length_buckets or
                      [record.max_seq_length]],
      jit_compile=bool(jit_compile), mixed_precision=mixed_precision or "none",
      signatures=ordered_signatures(saved or signatures),
      albert_config=config.to_dict(), tokenizer_kind=tokenizer.kind,
      tokenizer_file=os.path.basename(tokenizer.model_file),
      do_lower_case=tokenizer.do_lower_case,
      text_pair=any(s.name == "text_b" for s in getattr(
          signatures.get("serve_text"), "input_signature", ())),
      label_list=record.label_list or [str(i) for i in range(
          record.num_labels or 0)],
      special_ids={"pad": tokenizer.pad_id, "unk": tokenizer.unk_id,
                   "cls": tokenizer.cls_id, "sep": tokenizer.sep_id,
                   "mask": tokenizer.mask_id},
      normalization=normalization.app_rules(
          tokenizer, record.task_config.get("token_level")))


def write_warmup_requests(path, serving_default, max_seq_length, tokenizer,
                          batch_sizes=(1, 4)):
  """PredictionLog records for serving_default (TF Serving warms up on
  load); returns how many, 0 without tensorflow-serving-api (a core
  install: albert_tf without [serving]).

  Its ids inputs get `[CLS] [SEP]` rows of max_seq_length; any other int
  input (a pretrainer's masked_lm_positions) one 0 per row.
  """
  try:
    # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import model_pb2
    from tensorflow_serving.apis import predict_pb2
    from tensorflow_serving.apis import prediction_log_pb2
  except ImportError:
    return 0
  with tf.io.TFRecordWriter(path) as writer:
    for batch in batch_sizes:
      ids = np.full([batch, max_seq_length], tokenizer.pad_id, np.int32)
      ids[:, 0], ids[:, 1] = tokenizer.cls_id, tokenizer.sep_id
      rows = {F.INPUT_IDS: ids, F.INPUT_MASK: (ids != tokenizer.pad_id)
              .astype(np.int32), F.SEGMENT_IDS: np.zeros_like(ids)}
      request = predict_pb2.PredictRequest(
          model_spec=model_pb2.ModelSpec(signature_name="serving_default"))
      for spec in serving_default.input_signature:
        value = rows.get(spec.name, np.zeros([batch, 1], np.int32))
        request.inputs[spec.name].CopyFrom(tf.make_tensor_proto(value))
      log = prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request))
      writer.write(log.SerializeToString())
  return len(batch_sizes)


def write_version(archive, export_dir, version, tokenizer, metadata,
                  serving_default, overwrite=False,
                  extra_files: Optional[Dict[str, object]] = None,
                  verify: Optional[Callable[[str], dict]] = None):
  """Writes export_dir/<version>/ (module docstring) and returns its path.

  metadata: an `ExportInfo`, written flat; an existing version is swapped
  out when overwrite. extra_files: {name: text, or fn(metadata) -> text}
  (the model card). verify: fn(the temporary directory) -> figures, run
  once the SavedModel, assets and warmup requests are there; the figures
  are metadata.verification. What it raises leaves nothing in place.
  """
  final_dir = os.path.join(export_dir, str(version))
  if os.path.exists(final_dir) and not overwrite:
    raise FileExistsError(final_dir)
  os.makedirs(export_dir, exist_ok=True)
  remove_stale_temporaries(export_dir)
  # .tmp-pid<PID>-<version>-XXXXXXXX: kept by another export into the same
  # folder while this process runs.
  with staging.staged(final_dir, tag=staging.owner_tag()) as stage:
    archive.write_out(stage.path, verbose=False)
    assets = os.path.join(stage.path, "assets")
    extra = os.path.join(stage.path, "assets.extra")
    os.makedirs(assets, exist_ok=True)
    os.makedirs(extra, exist_ok=True)
    shutil.copyfile(tokenizer.model_file, os.path.join(
        assets, os.path.basename(tokenizer.model_file)))
    if not write_warmup_requests(os.path.join(extra, WARMUP_FILE),
                                 serving_default, metadata.max_seq_length,
                                 tokenizer):
      logging.warning(
          "tensorflow-serving-api is not installed (pip install "
          "albert_tf[serving]): %s has no %s, so TF Serving loads it "
          "without warming up", final_dir, WARMUP_FILE)
    if verify is not None:
      metadata = dataclasses.replace(metadata,
                                     verification=verify(stage.path))
    metadata.write(os.path.join(extra, METADATA_FILE), flat=True)
    for name, text in (extra_files or {}).items():
      with open(os.path.join(stage.path, name), "w", encoding="utf-8") as f:
        f.write(text(metadata) if callable(text) else text)
    # 0755 folders, 0644 files: TF Serving often runs as another user, and
    # mkdtemp creates 0700.
    for parent, _, files in os.walk(stage.path):
      os.chmod(parent, 0o755)
      for name in files:
        os.chmod(os.path.join(parent, name), 0o644)
    stage.swap_in()
  return final_dir


def next_version(export_dir):
  """1 + the largest integer version directory in export_dir (1 if none)."""
  names = os.listdir(export_dir) if os.path.isdir(export_dir) else []
  return max((int(d) for d in names if d.isdigit()), default=0) + 1


def remove_stale_temporaries(export_dir):
  """`.tmp-*` / `.old-*` folders of exports killed midway: removed, logged;
  one named by a process that still runs (`staging.owner_tag`) is kept."""
  staging.remove_killed(
      export_dir, lambda name: name.startswith((".tmp-", ".old-")) and not (
          staging.temporary_owner_alive(name)), "an export")
