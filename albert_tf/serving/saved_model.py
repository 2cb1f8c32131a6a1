"""The building blocks of a versioned SavedModel for TF Serving.

A task family (`albert_tf.tasks`) says what its signatures compute
(`Task.export_signatures`, made of `signature` and `ids_signature` here);
`make_archive` puts them with the model into a `keras.export.ExportArchive`,
and `write_version` writes export_dir/<version>/ with the tokenizer in
assets/, albert_export.json and the TF Serving warmup requests in
assets.extra/, through a hidden temporary directory renamed into place, so a
polling server never sees half a model.

Over 400 lines: the signatures, the archive, the export metadata
(`ExportInfo`), the warmup requests, the versioned write and the tokenizer
rules are the one set of SavedModel blocks every task family uses.
"""

import dataclasses
import inspect
import os
import shutil
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf.record import ModelInfo
from albert_tf.file_io import temporary_owner_alive, temporary_prefix

METADATA_FILE = "albert_export.json"
WARMUP_FILE = "tf_serving_warmup_requests"


# ---------------------------------------------------------------- signatures
def int_spec(name: str, shape=(None, None)) -> tf.TensorSpec:
  """int32 input `name`, [batch, length] by default."""
  return tf.TensorSpec(list(shape), tf.int32, name=name)


def text_specs(text_pair: bool) -> List[tf.TensorSpec]:
  """string [batch] `text` (+ `text_b` for pairs)."""
  specs = [tf.TensorSpec([None], tf.string, name="text")]
  if text_pair:
    specs.append(tf.TensorSpec([None], tf.string, name="text_b"))
  return specs


def signature(fn: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
              specs: Sequence[tf.TensorSpec]):
  """A tf.function whose inputs are named by `specs`; fn gets them as a dict.

  What fn reads beyond the model (an in-graph tokenizer: a tf.Module it
  closes over) is found and saved by `make_archive`.
  """
  names = [s.name for s in specs]

  def serve(*args):
    return fn(dict(zip(names, args)))

  return tf.function(serve, input_signature=list(specs), autograph=False)


def ids_signature(run: Callable, extra_inputs: Sequence[str] = (),
                  vocab_size: int = 0, shape=(None, None),
                  max_positions: Optional[int] = None):
  """serving_default: int32 `input_ids`, `input_mask`, `segment_ids` (+
  extra_inputs, e.g. masked_lm_positions) -> run(features). Core TF ops
  only: a SavedModel of it alone (export_saved_model
  --signatures=serving_default) loads in TensorFlow without TF Text's ops;
  beside serve_text, the SavedModel needs them whichever signature is
  called. With vocab_size, malformed inputs are an InvalidArgumentError
  naming the input (`checked_ids`), an input
  longer than max_positions too (default: the max_position_embeddings of
  the model run calls, `position_limit`). shape: of the encoder inputs
  ([batch, choices, length] for multiple choice)."""
  if vocab_size and max_positions is None:
    max_positions = position_limit(run)
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

  Without these checks a negative id would wrap to the last rows of the
  embedding table on some kernels, an id >= vocab_size would read zeros or
  fail deep in a gather, an input longer than the position table
  (max_positions: the config's max_position_embeddings) would fail in a
  broadcast or gather or, on some kernels, read past it, and an input_mask
  of another length would be broadcast or ignored (oneDNN), and a segment
  id outside [0, type_vocab_size) would read another row of the token-type
  table or none, all without a word.
  """
  ids = features[F.INPUT_IDS]
  checks = [
      tf.debugging.assert_non_negative(
          ids, message=f"{F.INPUT_IDS}: a negative token id"),
      tf.debugging.assert_less(
          ids, tf.constant(vocab_size, ids.dtype),
          message=f"{F.INPUT_IDS}: a token id >= vocab_size={vocab_size}")]
  if max_positions:
    checks.append(tf.debugging.assert_less_equal(
        tf.shape(ids)[-1], tf.constant(int(max_positions), tf.int32),
        message=f"{F.INPUT_IDS}: longer than max_position_embeddings="
                f"{int(max_positions)}, the rows of the position table"))
  if type_vocab_size:
    segments = features[F.SEGMENT_IDS]
    checks += [
        tf.debugging.assert_non_negative(
            segments, message=f"{F.SEGMENT_IDS}: a negative segment id"),
        tf.debugging.assert_less(
            segments, tf.constant(int(type_vocab_size), segments.dtype),
            message=f"{F.SEGMENT_IDS}: a segment id >= type_vocab_size="
                    f"{int(type_vocab_size)}")]
  for name in (F.INPUT_MASK, F.SEGMENT_IDS):
    checks.append(tf.debugging.assert_equal(
        tf.shape(features[name]), tf.shape(ids),
        message=f"{name}: another shape than {F.INPUT_IDS}"))
  with tf.control_dependencies(checks):
    return {name: tf.identity(value) for name, value in features.items()}


def position_limit(fn) -> Optional[int]:
  """The max_position_embeddings of the model fn calls (`config_value`)."""
  return config_value(fn, "max_position_embeddings")


def config_value(fn, name: str, depth=0) -> Optional[int]:
  """The positive int `name` of the config of the model fn calls: the
  `config` (or `encoder.config`) of what fn closes over, directly or through
  the functions it closes over (a few levels); None when there is none."""
  fn = getattr(fn, "python_function", fn)
  if depth > 4 or not callable(fn):
    return None
  owner = getattr(fn, "__self__", None)
  values = [owner] if owner is not None else []
  if inspect.isfunction(fn) or inspect.ismethod(fn):
    values += [cell.cell_contents for cell in
               (getattr(fn, "__closure__", None) or ())
               if _has_contents(cell)]
  for value in values:
    for holder in (value, _attribute(value, "encoder")):
      limit = _attribute(_attribute(holder, "config"), name)
      if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return limit
  for value in values:
    if callable(value) and not isinstance(value, keras.layers.Layer):
      limit = config_value(value, name, depth + 1)
      if limit is not None:
        return limit
  return None


def _attribute(value, name):
  if value is None or inspect.isclass(value):
    return None
  try:
    return getattr(value, name, None)
  except Exception:  # pylint: disable=broad-except  (a property that fails)
    return None


def _modules_read_by(fn, found=None, depth=0) -> Dict[int, tf.Module]:
  """The tf.Modules (not Keras layers) a function closes over, directly or
  through the functions it closes over (a few levels)."""
  found = {} if found is None else found
  fn = getattr(fn, "python_function", fn)
  if depth > 4 or not callable(fn):
    return found
  owner = getattr(fn, "__self__", None)
  candidates = [owner] if owner is not None else []
  if inspect.isfunction(fn) or inspect.ismethod(fn):
    candidates += [cell.cell_contents for cell in
                   (getattr(fn, "__closure__", None) or ())
                   if _has_contents(cell)]
  for value in candidates:
    if isinstance(value, tf.Module) and not isinstance(value,
                                                       keras.layers.Layer):
      found.setdefault(id(value), value)
    elif callable(value) and not isinstance(value, keras.layers.Layer):
      _modules_read_by(value, found, depth + 1)
  return found


def _has_contents(cell) -> bool:
  try:
    cell.cell_contents  # pylint: disable=pointless-statement
    return True
  except ValueError:  # an empty cell
    return False


def make_archive(model: keras.Model, signatures: Dict[str, Callable]):
  """A `keras.export.ExportArchive` of model with these endpoints.

  Args:
    model: the built model whose weights the signatures use.
    signatures: {name: tf.function with an input_signature}; must hold
      "serving_default" (TF Serving's default), which comes first.
  Raises:
    ValueError: no serving_default.
  """
  if "serving_default" not in signatures:
    raise ValueError(f"the export signatures {sorted(signatures)} have no "
                     "serving_default")
  archive = keras.export.ExportArchive()
  # The model's variables, not the model: `archive.track(model)` also has
  # the save walk every Keras layer and variable object for lookup tables
  # (the model holds none; the tokenizer's are tracked below): a tiny
  # classifier's export took 7.3-7.7 s of CPU with it, 6.1-6.4 s without
  # (AMD EPYC, AVX2). The signatures capture the same variables, and
  # `loaded.variables` still lists them.
  archive.variables.extend(model.variables)
  archive.trainable_variables.extend(model.trainable_variables)
  archive.non_trainable_variables.extend(model.non_trainable_variables)
  for fn in signatures.values():
    # Lookup tables and tokenizer models are saved only when tracked.
    for module in _modules_read_by(fn).values():
      archive.track(module)
  for name in ordered_signatures(signatures):
    fn = signatures[name]
    fn.get_concrete_function()  # traced once: the archive takes it as is
    archive.add_endpoint(name, fn)
  return archive


def ordered_signatures(names) -> List[str]:
  """serving_default first, then the others by name (the archive's order)."""
  names = set(names)
  return (["serving_default"] if "serving_default" in names else []) + sorted(
      names - {"serving_default"})


def takes_text_b(signatures: Dict[str, Callable]) -> bool:
  """Whether serve_text has a `text_b` input (a pair model)."""
  fn = signatures.get("serve_text")
  return fn is not None and any(s.name == "text_b"
                                for s in fn.input_signature)


# ---------------------------------------------------------------- the model
class ServedModel:
  """A Keras model as the signatures call it, XLA-compiled and/or cast.

  Every family's signatures call `model(features, training=False)` and read
  the model's attributes (config, num_labels, ...); this stands in for the
  model there. The call runs as one `tf.function(jit_compile=True)` when
  jit_compile (nested in the signature: the tokenizer's string ops around it
  cannot be compiled; XLA compiles once per input shape), and with
  float32_outputs every floating output is cast to float32, so that a
  bfloat16 model serves float32 whatever casts its family makes. The
  archive holds the model's own variables (`make_archive(model, ...)`).
  """

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
  if not jit_compile and mixed_precision in (None, "none"):
    return model
  return ServedModel(model, jit_compile,
                     float32_outputs=mixed_precision not in (None, "none"))


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
  verification: the figures of the check of the written version.
  """
  length_buckets: Optional[List[int]] = None
  jit_compile: Optional[bool] = None
  mixed_precision: Optional[str] = None
  # The signatures the SavedModel holds (export_saved_model --signatures),
  # and how the written version was checked before it was renamed into
  # place (`serving.saved_model_check`: runtime, examples, differences).
  signatures: Optional[List[str]] = None
  verification: Optional[dict] = None


def export_metadata(record, model, version, checkpoint, config, tokenizer,
                    signatures, length_buckets=None, jit_compile=False,
                    mixed_precision="none", saved=None):
  """What albert_export.json holds (an `ExportInfo`): the task record (a
  `albert_tf.record.ModelInfo`) with the tokenizer as exported, what was
  exported (--model, version, checkpoint prefix, config, special ids, the
  text rules an app applies) and how it serves (length_buckets: default
  [max_seq_length]; jit_compile; mixed_precision). signatures: all the
  family's (text_pair is the model's, whichever are saved); saved: the
  names of those the SavedModel holds (default: all)."""
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
      text_pair=takes_text_b(signatures),
      label_list=record.label_list or [str(i) for i in range(
          record.num_labels or 0)],
      special_ids={"pad": tokenizer.pad_id, "unk": tokenizer.unk_id,
                   "cls": tokenizer.cls_id, "sep": tokenizer.sep_id,
                   "mask": tokenizer.mask_id},
      normalization=normalization_rules(
          tokenizer, record.task_config.get("token_level")))


def write_warmup_requests(path, serving_default, max_seq_length, tokenizer,
                          batch_sizes=(1, 4)):
  """PredictionLog records for serving_default (TF Serving warms up on load).

  Its ids inputs get `[CLS] [SEP]` rows of max_seq_length; any other int
  input (a pretrainer's masked_lm_positions) one 0 per row.
  """
  # Imported here: only export needs the serving protos.
  from tensorflow_serving.apis import model_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
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
  """Writes export_dir/<version>/ and returns its path.

  The archive, assets/<tokenizer file>, assets.extra/METADATA_FILE
  (metadata: a `albert_tf.record.ModelInfo`, written flat) and the warmup
  requests, in a dot-named temporary directory (TF Serving loads only
  integer names) renamed into place; an existing version is swapped out
  when overwrite. extra_files: {name: text, or fn(metadata) -> text}
  written in the version too (the model card, README.md).

  verify: fn(the temporary directory) -> figures, called once the
  SavedModel, its assets and warmup requests are written there, before the
  metadata: the figures become metadata.verification (an `ExportInfo`'s),
  which the callables of extra_files see. What it raises leaves nothing
  at export_dir/<version>.
  """
  final_dir = os.path.join(export_dir, str(version))
  os.makedirs(export_dir, exist_ok=True)
  remove_stale_temporaries(export_dir)
  tmp_dir = tempfile.mkdtemp(prefix=f"{temporary_prefix()}{version}-",
                             dir=export_dir)
  try:
    archive.write_out(tmp_dir, verbose=False)
    assets = os.path.join(tmp_dir, "assets")
    extra = os.path.join(tmp_dir, "assets.extra")
    os.makedirs(assets, exist_ok=True)
    os.makedirs(extra, exist_ok=True)
    shutil.copyfile(tokenizer.model_file, os.path.join(
        assets, os.path.basename(tokenizer.model_file)))
    try:
      import tensorflow_serving  # noqa: F401 pylint: disable=g-import-not-at-top,unused-import
    except ImportError:  # a core install: albert_tf without [serving]
      logging.warning(
          "tensorflow-serving-api is not installed (pip install "
          "albert_tf[serving]): %s has no %s, so TF Serving loads it "
          "without warming up", final_dir, WARMUP_FILE)
    else:
      write_warmup_requests(os.path.join(extra, WARMUP_FILE), serving_default,
                            metadata.max_seq_length, tokenizer)
    if verify is not None:
      metadata = dataclasses.replace(metadata, verification=verify(tmp_dir))
    metadata.write(os.path.join(extra, METADATA_FILE), flat=True)
    for name, text in (extra_files or {}).items():
      with open(os.path.join(tmp_dir, name), "w", encoding="utf-8") as f:
        f.write(text(metadata) if callable(text) else text)
    make_world_readable(tmp_dir)
    if os.path.exists(final_dir):
      if not overwrite:
        raise FileExistsError(final_dir)
      old = tempfile.mkdtemp(prefix=f"{temporary_prefix('.old-')}{version}-",
                             dir=export_dir)
      os.rename(final_dir, os.path.join(old, "v"))
      os.rename(tmp_dir, final_dir)
      shutil.rmtree(old)
    else:
      os.rename(tmp_dir, final_dir)
  finally:
    if os.path.exists(tmp_dir):
      shutil.rmtree(tmp_dir)
  return final_dir


def next_version(export_dir):
  """1 + the largest integer version directory in export_dir (1 if none)."""
  if not os.path.isdir(export_dir):
    return 1
  versions = [int(d) for d in os.listdir(export_dir) if d.isdigit()]
  return max(versions, default=0) + 1


def remove_stale_temporaries(export_dir):
  """`.tmp-*` / `.old-*` folders of exports killed midway: removed, logged.

  A folder named by a process that still runs (`.tmp-pid<PID>-…`, see
  `file_io.temporary_prefix`) is another export's, in progress: kept.
  """
  for name in os.listdir(export_dir):
    if name.startswith((".tmp-", ".old-")) and not temporary_owner_alive(
        name):
      path = os.path.join(export_dir, name)
      logging.warning("Removing %s, left by an export that was killed",
                      path)
      shutil.rmtree(path, ignore_errors=True)


def make_world_readable(directory):
  """0755 folders, 0644 files: TF Serving often runs as another user, and
  mkdtemp creates 0700."""
  os.chmod(directory, 0o755)
  for parent, dirs, files in os.walk(directory):
    for name in dirs:
      os.chmod(os.path.join(parent, name), 0o755)
    for name in files:
      os.chmod(os.path.join(parent, name), 0o644)


# ---------------------------------------------------------------- app rules
def normalization_rules(tokenizer, token_level=None):
  """The text rules an app must apply before the tokenizer (for the JSON).

  token_level: a tagger's ("char"/"word"): its text is split into tokens
  first and each token goes through the rules on its own.
  """
  # The normalisation steps are the descriptions of the one table that
  # tokenization.normalize and text_graph run (albert_tf.data.normalization).
  from albert_tf.data import normalization  # pylint: disable=g-import-not-at-top
  if token_level:
    return tagger_text_rules(tokenizer, token_level)
  steps = normalization.describe(tokenizer.kind, tokenizer.do_lower_case)
  if tokenizer.kind == "sentencepiece":
    steps.append("SentencePiece encode (the model's own normalizer runs "
                 "inside); a piece ending in <digit>',' is re-encoded "
                 "without the ',' and followed by ','")
  else:
    steps.append("split on whitespace, punctuation (ASCII symbols + Unicode "
                 "P*) and CJK ideographs (each its own word); WordPiece "
                 "longest-match-first with '##' continuations; a word over "
                 "100 characters or with an unknown piece is [UNK]")
  steps.append("pack [CLS] a [SEP] (b [SEP]); truncate the longer segment "
               "first to max_seq_length; pad with the pad id; input_mask 1 "
               "for real tokens; segment_ids 0 for a, 1 for b")
  return steps


def tagger_text_rules(tokenizer, token_level):
  """What a tagger's app does to raw text (tagging_graph.TextTagger)."""
  split = ("every non-whitespace character (not str.isspace) is a token"
           if token_level == "char" else
           "a run of letters, digits and combining marks outside the CJK "
           "ideographs is one token; every other non-whitespace character "
           "(each CJK ideograph, each punctuation mark) is a token alone")
  per_token = normalization_rules(tokenizer)[:-1]
  return ([f"split the raw text into tokens (token_level={token_level}): "
           f"{split}; keep each token's code-point offsets",
           "each token on its own:"] + [f"  {step}" for step in per_token] +
          ["  SentencePiece: drop a bare leading '\u2581' piece when other "
           "pieces follow; a token with no piece is the unknown piece",
           "pack [CLS] the pieces of every token [SEP], cut after "
           "max_seq_length - 2 pieces; pad; tokens whose first piece is past "
           "the cut are not tagged",
           "a token's tag is tag_ids at its first piece; entities as "
           "conlleval reads BIO tags, from the first character of the first "
           "token to the last character of the last token"])
