"""Export a checkpoint as a versioned SavedModel for TF Serving.

    python -m albert_tf.export_saved_model \
        --checkpoint=demo_output/finetune --model=classifier \
        --export_dir=saved_models/sentiment --max_seq_length=128

writes `saved_models/sentiment/<version>/` (the next free integer unless
--version is given) with two signatures:

  serving_default  int32 `input_ids`, `input_mask`, `segment_ids` [batch, seq]
                   (+ `masked_lm_positions` [batch, P] for the pretrainer).
                   Core TF ops only: runs in a stock tensorflow_model_server.
  serve_text       string `text` [batch] (+ `text_b` for pairs, +
                   `masked_lm_positions` for the pretrainer), tokenized in the
                   graph by `albert_tf.text_graph` exactly as the Python
                   tokenizer does, truncated to --max_seq_length. Needs the
                   TF Text ops (a TF Serving build that links tensorflow-text;
                   in Python, `import tensorflow_text` before loading).

Outputs: encoder `sequence_output`, `pooled_output`; classifier `logits`,
`probabilities` (regression: `logits` only); pretrainer `sequence_output`,
`pooled_output`, `mlm_logits` [batch, P, vocab], `sop_logits` [batch, 2].

Also written: `assets/<tokenizer file>`, `assets.extra/albert_export.json`
(what an app or export_tflite needs: kind, max_seq_length, tokenizer,
labels) and `assets.extra/tf_serving_warmup_requests` (PredictionLog records
for serving_default). The version is written to a hidden temporary directory
beside it and renamed into place, so a polling server never sees half a model.
"""

import dataclasses
import os
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

from albert_tf import run_config
from albert_tf.checkpoints import restore_weights
from albert_tf.encoder import AlbertEncoder
from albert_tf.features import ENCODER_INPUTS, MASKED_LM_POSITIONS
from albert_tf.models import AlbertClassifier, AlbertPretrainer
from albert_tf.run_config import CLASSIFIER_CONFIG, ModelInfo
from albert_tf.tasks import classification, pretraining
from albert_tf.text_graph import TextEncoder

MODEL_KINDS = ("encoder", "classifier", "pretrainer")
METADATA_FILE = "albert_export.json"
WARMUP_FILE = "tf_serving_warmup_requests"


class ExportError(ValueError):
  """A bad export request; the message names the flag or file."""


# ---------------------------------------------------------------- inputs
def resolve_model(checkpoint, preset, albert_config_file, spm_model_file,
                  vocab_file, do_lower_case):
  """Config + tokenizer by the rules of every CLI (`run_config.resolve_model`)."""
  try:
    return run_config.resolve_model(
        preset, albert_config_file, init_checkpoint=checkpoint,
        spm_model_file=spm_model_file, vocab_file=vocab_file,
        do_lower_case=do_lower_case, checkpoint_flag="--checkpoint")
  except ValueError as e:
    raise ExportError(str(e)) from None


def build_model(kind, config, num_labels=None):
  """The Keras model of one export kind (random weights until restored)."""
  if kind == "encoder":
    return AlbertEncoder(config)
  if kind == "classifier":
    if not num_labels:
      raise ExportError("--model=classifier needs --num_labels (or a "
                        f"{CLASSIFIER_CONFIG} beside the checkpoint)")
    return AlbertClassifier(config, num_labels)
  if kind == "pretrainer":
    return AlbertPretrainer(config)
  raise ExportError(f"--model must be one of {MODEL_KINDS}, got {kind!r}")


def _restore(checkpoint, model, kind):
  try:
    report = restore_weights(checkpoint, model)
  except (ValueError, FileNotFoundError) as e:
    raise ExportError(f"--checkpoint={checkpoint}: {e}") from None
  # Exporting a randomly initialised head would serve garbage silently.
  needed = {"classifier": ["classifier_head"],
            "pretrainer": ["masked_lm_head", "sentence_order_head"]}.get(kind,
                                                                         [])
  missing = [p for p in needed if p in report["missing"]]
  if missing:
    raise ExportError(
        f"--checkpoint={report['prefix']} has no {', '.join(missing)}: it "
        f"cannot be exported as --model={kind} (export it as --model=encoder, "
        "or give a checkpoint written by the matching training script)")
  return report


def next_version(export_dir):
  """1 + the largest integer version directory in export_dir (1 if none)."""
  if not os.path.isdir(export_dir):
    return 1
  versions = [int(d) for d in os.listdir(export_dir) if d.isdigit()]
  return max(versions, default=0) + 1


# ---------------------------------------------------------------- signatures
def _int_spec(name):
  return tf.TensorSpec([None, None], tf.int32, name=name)


def _outputs(kind, model_outputs, num_labels):
  """What the signatures return: the task's export outputs, or the encoder's."""
  if kind == "classifier":
    return classification.export_outputs(model_outputs, num_labels)
  if kind == "pretrainer":
    return pretraining.export_outputs(model_outputs)
  return {n: tf.cast(model_outputs[n], tf.float32)
          for n in ("sequence_output", "pooled_output")}


def make_archive(model, kind, text_encoder, text_pair, num_labels=None):
  """A `keras.export.ExportArchive` with serving_default and serve_text."""
  archive = keras.export.ExportArchive()
  archive.track(model)
  archive.track(text_encoder)

  def run(features):
    return _outputs(kind, model(features, training=False), num_labels)

  if kind == "pretrainer":
    def serve_ids(input_ids, input_mask, segment_ids, masked_lm_positions):
      return run({"input_ids": input_ids, "input_mask": input_mask,
                  "segment_ids": segment_ids,
                  MASKED_LM_POSITIONS: masked_lm_positions})
    id_signature = [_int_spec(n) for n in ENCODER_INPUTS + (MASKED_LM_POSITIONS,)]
  else:
    def serve_ids(input_ids, input_mask, segment_ids):
      return run({"input_ids": input_ids, "input_mask": input_mask,
                  "segment_ids": segment_ids})
    id_signature = [_int_spec(n) for n in ENCODER_INPUTS]
  archive.add_endpoint("serving_default", serve_ids,
                       input_signature=id_signature)

  text_spec = [tf.TensorSpec([None], tf.string, name="text")]
  if text_pair:
    text_spec.append(tf.TensorSpec([None], tf.string, name="text_b"))
  if kind == "pretrainer":
    text_spec.append(_int_spec(MASKED_LM_POSITIONS))
    if text_pair:
      def serve_text(text, text_b, masked_lm_positions):
        return run({**text_encoder(text, text_b),
                    MASKED_LM_POSITIONS: masked_lm_positions})
    else:
      def serve_text(text, masked_lm_positions):
        return run({**text_encoder(text),
                    MASKED_LM_POSITIONS: masked_lm_positions})
  elif text_pair:
    def serve_text(text, text_b):
      return run(text_encoder(text, text_b))
  else:
    def serve_text(text):
      return run(text_encoder(text))
  archive.add_endpoint("serve_text", serve_text, input_signature=text_spec)
  return archive


def write_warmup_requests(path, kind, max_seq_length, tokenizer,
                          batch_sizes=(1, 4)):
  """PredictionLog records for serving_default (TF Serving warms up on load)."""
  # Imported here: only export needs the serving protos.
  from tensorflow_serving.apis import model_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  with tf.io.TFRecordWriter(path) as writer:
    for batch in batch_sizes:
      ids = np.full([batch, max_seq_length], tokenizer.pad_id, np.int32)
      ids[:, 0], ids[:, 1] = tokenizer.cls_id, tokenizer.sep_id
      inputs = {"input_ids": ids, "input_mask": (ids != tokenizer.pad_id)
                .astype(np.int32), "segment_ids": np.zeros_like(ids)}
      if kind == "pretrainer":
        inputs[MASKED_LM_POSITIONS] = np.zeros([batch, 1], np.int32)
      request = predict_pb2.PredictRequest(
          model_spec=model_pb2.ModelSpec(signature_name="serving_default"))
      for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
      log = prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request))
      writer.write(log.SerializeToString())
  return len(batch_sizes)


# ---------------------------------------------------------------- export
def export(checkpoint, export_dir, model="encoder", preset=None,
           albert_config_file=None, spm_model_file=None, vocab_file=None,
           do_lower_case=None, num_labels=None, version=None,
           max_seq_length=None, text_pair=None, overwrite=False):
  """Writes export_dir/<version>/ and returns its path.

  Args:
    checkpoint: a checkpoint prefix, or a directory (its latest checkpoint).
    export_dir: the model base path TF Serving polls.
    model: "encoder", "classifier" or "pretrainer".
    preset / albert_config_file: the encoder config (default: the
      albert_config.json beside the checkpoint).
    spm_model_file / vocab_file: the tokenizer (default: the one named in a
      run_classifier classifier_config.json beside the checkpoint).
    num_labels: classifier classes (default: from classifier_config.json).
    version: integer version (default: the next free one).
    max_seq_length: serve_text output length (truncation); default: the
      fine-tuning length in classifier_config.json, else 128.
    text_pair: whether serve_text takes `text_b` (default: yes for the
      pretrainer and pair tasks, no otherwise).
    overwrite: replace an existing version directory.
  Raises:
    ExportError: bad flags, an existing version without overwrite, or a
      checkpoint that does not match the config.
  """
  if model not in MODEL_KINDS:
    raise ExportError(f"--model must be one of {MODEL_KINDS}, got {model!r}")
  info = (ModelInfo.read_beside(checkpoint) if model == "classifier" else
          None) or ModelInfo()
  config, tokenizer = resolve_model(
      checkpoint, preset, albert_config_file, spm_model_file, vocab_file,
      do_lower_case)
  max_seq_length = max_seq_length or info.max_seq_length or 128
  try:
    run_config.check_seq_length(max_seq_length, config)
  except ValueError as e:
    raise ExportError(str(e)) from None
  if model == "classifier":
    num_labels = num_labels or info.num_labels
  if text_pair is None:
    text_pair = model == "pretrainer" or info.text_pair

  version = next_version(export_dir) if version is None else int(version)
  if version < 0:
    raise ExportError(f"--version must be a non-negative integer, got "
                      f"{version}")
  final_dir = os.path.join(export_dir, str(version))
  if os.path.exists(final_dir) and not overwrite:
    raise ExportError(f"{final_dir} already exists; pass --overwrite to "
                      "replace it, or omit --version to write the next one")

  keras_model = build_model(model, config, num_labels)
  report = _restore(checkpoint, keras_model, model)
  text_encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length)
  archive = make_archive(keras_model, model, text_encoder, text_pair,
                         num_labels)

  os.makedirs(export_dir, exist_ok=True)
  remove_stale_temporaries(export_dir)
  # A dot-name is not an integer, so TF Serving never loads the temp dir.
  tmp_dir = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir)
  try:
    archive.write_out(tmp_dir, verbose=False)
    assets = os.path.join(tmp_dir, "assets")
    extra = os.path.join(tmp_dir, "assets.extra")
    os.makedirs(assets, exist_ok=True)
    os.makedirs(extra, exist_ok=True)
    tokenizer_file = os.path.basename(tokenizer.model_file)
    shutil.copyfile(tokenizer.model_file, os.path.join(assets, tokenizer_file))
    write_warmup_requests(os.path.join(extra, WARMUP_FILE), model,
                          max_seq_length, tokenizer)
    info = dataclasses.replace(
        info, model=model, version=version, max_seq_length=max_seq_length,
        checkpoint=report["prefix"], albert_config=config.to_dict(),
        tokenizer_kind=tokenizer.kind, tokenizer_file=tokenizer_file,
        do_lower_case=tokenizer.do_lower_case, text_pair=text_pair,
        special_ids={"pad": tokenizer.pad_id, "unk": tokenizer.unk_id,
                     "cls": tokenizer.cls_id, "sep": tokenizer.sep_id,
                     "mask": tokenizer.mask_id},
        normalization=normalization_rules(tokenizer))
    if model == "classifier":
      info.num_labels = num_labels
      info.label_list = info.label_list or [str(i) for i in range(num_labels)]
    info.write(os.path.join(extra, METADATA_FILE))
    make_world_readable(tmp_dir)
    if os.path.exists(final_dir):  # overwrite: swap, then delete the old one
      old = tempfile.mkdtemp(prefix=f".old-{version}-", dir=export_dir)
      os.rename(final_dir, os.path.join(old, "v"))
      os.rename(tmp_dir, final_dir)
      shutil.rmtree(old)
    else:
      os.rename(tmp_dir, final_dir)
  finally:
    if os.path.exists(tmp_dir):
      shutil.rmtree(tmp_dir)
  return final_dir


def remove_stale_temporaries(export_dir):
  """`.tmp-*` / `.old-*` folders of exports killed midway: removed, logged.

  (Two exports into one export_dir at the same moment are not supported:
  this would delete the other's temporary folder.)
  """
  for name in os.listdir(export_dir):
    if name.startswith((".tmp-", ".old-")):
      path = os.path.join(export_dir, name)
      print(f"Removing {path}, left by an export that was killed",
            flush=True)
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


def normalization_rules(tokenizer):
  """The text rules an app must apply before the tokenizer (for the JSON)."""
  if tokenizer.kind == "sentencepiece":
    steps = ["collapse every run of whitespace (Python str.isspace) to one "
             "space; strip leading/trailing whitespace",
             "replace `` and '' with \""]
    if tokenizer.do_lower_case:
      steps += ["Unicode NFKD", "drop combining characters "
                "(unicodedata.combining != 0)", "lowercase"]
    steps.append("SentencePiece encode (the model's own normalizer runs "
                 "inside); a piece ending in <digit>',' is re-encoded "
                 "without the ',' and followed by ','")
  else:
    steps = ["drop U+0000, U+FFFD and Cc/Cf characters except \\t \\n \\r",
             "collapse every run of whitespace to one space; strip"]
    if tokenizer.do_lower_case:
      steps += ["lowercase", "Unicode NFD", "drop non-spacing marks (Mn)"]
    steps.append("split on whitespace, punctuation (ASCII symbols + Unicode "
                 "P*) and CJK ideographs (each its own word); WordPiece "
                 "longest-match-first with '##' continuations; a word over "
                 "100 characters or with an unknown piece is [UNK]")
  steps.append("pack [CLS] a [SEP] (b [SEP]); truncate the longer segment "
               "first to max_seq_length; pad with the pad id; input_mask 1 "
               "for real tokens; segment_ids 0 for a, 1 for b")
  return steps


def main(argv):
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  f = flags.FLAGS
  path = export(
      checkpoint=f.checkpoint, export_dir=f.export_dir, model=f.model,
      preset=f.preset, albert_config_file=f.albert_config_file,
      spm_model_file=f.spm_model_file, vocab_file=f.vocab_file,
      do_lower_case=f.do_lower_case, num_labels=f.num_labels,
      version=f.version, max_seq_length=f.max_seq_length,
      text_pair=f.text_pair, overwrite=f.overwrite)
  print(f"Exported {f.model} to {path}")


def define_flags():
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_string("checkpoint", None, "Checkpoint prefix, or a directory "
                      "(its latest checkpoint).")
  flags.DEFINE_string("export_dir", None, "Model base path, e.g. "
                      "saved_models/NAME; versions go in integer subdirs.")
  flags.DEFINE_enum("model", "encoder", MODEL_KINDS, "What to export.")
  flags.DEFINE_string("preset", None, "Config preset name.")
  flags.DEFINE_string("albert_config_file", None, "albert_config.json "
                      "(default: the one beside the checkpoint).")
  flags.DEFINE_string("spm_model_file", None, "SentencePiece model.")
  flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
  flags.DEFINE_boolean("do_lower_case", None, "Lowercase + strip accents "
                       "(default: classifier_config.json, else true).")
  flags.DEFINE_integer("num_labels", None, "Classifier classes (default: "
                       "classifier_config.json beside the checkpoint).")
  flags.DEFINE_integer("version", None, "Version (default: next free).")
  flags.DEFINE_integer("max_seq_length", None, "serve_text sequence length "
                       "(default: the fine-tuning length in "
                       "classifier_config.json, else 128).")
  flags.DEFINE_boolean("text_pair", None, "serve_text takes text_b too "
                       "(default: pretrainer and pair tasks).")
  flags.DEFINE_boolean("overwrite", False, "Replace an existing version.")
  flags.DEFINE_boolean("verbose", False, "Show the traceback of an error.")
  flags.mark_flags_as_required(["checkpoint", "export_dir"])


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  define_flags()
  cli_errors.run_main(main)
