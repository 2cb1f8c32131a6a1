"""Export a checkpoint as a versioned SavedModel for TF Serving.

    python -m albert_tf.export_saved_model \
        --checkpoint=demo_output/finetune --model=classifier \
        --export_dir=saved_models/sentiment --max_seq_length=128

writes `saved_models/sentiment/<version>/` (the next free integer unless
--version is given) with these signatures:

  serving_default  int32 `input_ids`, `input_mask`, `segment_ids` [batch, seq]
                   (+ `masked_lm_positions` [batch, P] for the pretrainer).
                   Core TF ops only: runs in a stock tensorflow_model_server.
  serve_text       string `text` [batch] (+ `text_b` for pairs, +
                   `masked_lm_positions` for the pretrainer), tokenized in the
                   graph by `albert_tf.serving.text_graph` exactly as the Python
                   tokenizer does, truncated to --max_seq_length. Needs the
                   TF Text ops (a TF Serving build that links tensorflow-text;
                   in Python, `import tensorflow_text` before loading).
  serve_fill_mask  pretrainer only: string `text` [batch] with [MASK]s and
                   int32 `top_k` -> the top-k pieces, ids and probabilities
                   per [MASK] (`albert_tf.fill_mask.add_serve_fill_mask`).

Outputs: encoder `sequence_output`, `pooled_output`; classifier `logits`,
`probabilities` (regression: `logits` only); pretrainer `sequence_output`,
`pooled_output`, `mlm_logits` [batch, P, vocab], `sop_logits` [batch, 2];
tagger `logits` [batch, seq, tags] float32, `tag_ids` [batch, seq] int32.

The tagger (`--model=tagger --checkpoint=<run_ner output_dir>`; the tags,
max_seq_length, do_lower_case and token_level come from the
tagger_config.json beside the checkpoint) has its own serve_text: string
`text` [batch] -> entities with character offsets, read the way run_ner read
its data (`albert_tf.serving.tagging_graph.TextTagger`; the Python twin is
`ner_data.encode_text` + `ner_data.tag_text`). The text is split into tokens
("char": every non-whitespace character; "word": each run of letters, digits
and combining marks, each CJK character and each other symbol alone), each
token normalised and split into pieces on its own (so offsets stay exact
when lowercasing or NFKD change lengths), and a token's tag is the model's
tag at its first piece; entities are read as conlleval reads tags (an I-X
that does not continue an X starts one). Padded over the batch:
  entity_types, entity_texts  string [batch, E] ("" padding)
  entity_starts, entity_ends  int32 [batch, E]: offsets into the input
                              string in code points, end exclusive (-1 pad)
  num_entities                int32 [batch]
  char_tags                   string [batch, C]: a BIO tag per character
                              (B-X first character of an entity, I-X the
                              rest, whitespace inside it too, O elsewhere;
                              "" padding)
  num_untagged_chars          int32 [batch]: non-whitespace characters past
                              the first max_seq_length - 2 pieces; they are
                              not tagged ("" in char_tags). Split longer
                              texts before sending (run_ner's overlapping
                              windows are for files).

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

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from albert_tf import features as F
from albert_tf import fill_mask
from albert_tf.training import resolution
from albert_tf.training.checkpoints import restore_weights
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.features import ENCODER_INPUTS, MASKED_LM_POSITIONS
from albert_tf.data import ner_data
from albert_tf.modeling.models import AlbertClassifier, AlbertPretrainer, AlbertTagger
from albert_tf.tasks.record import CLASSIFIER_CONFIG, TAGGER_CONFIG, ModelInfo
from albert_tf import tasks
from albert_tf.serving.tagging_graph import TextTagger
from albert_tf.serving.text_graph import TextEncoder

MODEL_KINDS = ("encoder", "classifier", "pretrainer", "tagger")
METADATA_FILE = "albert_export.json"
WARMUP_FILE = "tf_serving_warmup_requests"


class ExportError(ValueError):
  """A bad export request; the message names the flag or file."""


# ---------------------------------------------------------------- inputs
def resolve_model(checkpoint, preset, albert_config_file, spm_model_file,
                  vocab_file, do_lower_case):
  """Config + tokenizer by the rules of every CLI (`resolution.resolve_model`)."""
  try:
    return resolution.resolve_model(
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
  if kind == "tagger":
    if not num_labels:
      raise ExportError(f"--model=tagger needs the {TAGGER_CONFIG} run_ner "
                        "writes beside the checkpoint")
    return AlbertTagger(config, num_labels)
  raise ExportError(f"--model must be one of {MODEL_KINDS}, got {kind!r}")


def _restore(checkpoint, model, kind):
  try:
    report = restore_weights(checkpoint, model)
  except (ValueError, FileNotFoundError) as e:
    raise ExportError(f"--checkpoint={checkpoint}: {e}") from None
  # Exporting a randomly initialised head would serve garbage silently.
  needed = {"classifier": ["classifier_head"], "tagger": ["tagger_head"],
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


# The task family (`albert_tf.tasks.TASKS`) whose outputs each --model serves.
TASK_OF_MODEL = {"classifier": "classification", "pretrainer": "pretraining",
                 "tagger": "tagging"}


def _outputs(kind, model_outputs, num_labels):
  """What the signatures return: the task's export outputs, or the encoder's."""
  if kind in TASK_OF_MODEL:
    return tasks.TASKS[TASK_OF_MODEL[kind]].export_outputs(model_outputs,
                                                          num_labels)
  return {n: tf.cast(model_outputs[n], tf.float32) for n in F.ENCODER_OUTPUTS}


def make_archive(model, kind, text_encoder, text_pair, num_labels=None):
  """A `keras.export.ExportArchive` with serving_default and serve_text."""
  archive = keras.export.ExportArchive()
  archive.track(model)
  archive.track(text_encoder)

  def run(features):
    return _outputs(kind, model(features, training=False), num_labels)

  if kind == "pretrainer":
    def serve_ids(input_ids, input_mask, segment_ids, masked_lm_positions):
      return run({F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask,
                  F.SEGMENT_IDS: segment_ids,
                  MASKED_LM_POSITIONS: masked_lm_positions})
    id_signature = [_int_spec(n) for n in ENCODER_INPUTS + (MASKED_LM_POSITIONS,)]
  else:
    def serve_ids(input_ids, input_mask, segment_ids):
      return run({F.INPUT_IDS: input_ids, F.INPUT_MASK: input_mask,
                  F.SEGMENT_IDS: segment_ids})
    id_signature = [_int_spec(n) for n in ENCODER_INPUTS]
  archive.add_endpoint("serving_default", serve_ids,
                       input_signature=id_signature)

  if kind == "tagger":
    # text_encoder is a TextTagger: raw text -> tokens -> the model's tags ->
    # entities with offsets.
    def serve_tagged_text(text):
      return text_encoder(text, lambda features: run(features)[F.TAG_IDS])
    archive.add_endpoint("serve_text", serve_tagged_text, input_signature=[
        tf.TensorSpec([None], tf.string, name="text")])
    return archive

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
      inputs = {F.INPUT_IDS: ids, F.INPUT_MASK: (ids != tokenizer.pad_id)
                .astype(np.int32), F.SEGMENT_IDS: np.zeros_like(ids)}
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
    model: "encoder", "classifier", "pretrainer" or "tagger".
    preset / albert_config_file: the encoder config (default: the
      albert_config.json beside the checkpoint).
    spm_model_file / vocab_file: the tokenizer (default: the one named in a
      run_classifier classifier_config.json or run_ner tagger_config.json
      beside the checkpoint).
    num_labels: classifier classes (default: from classifier_config.json;
      a tagger's tags always come from tagger_config.json).
    version: integer version (default: the next free one).
    max_seq_length: serve_text output length (truncation); default: the
      fine-tuning length in classifier_config.json or tagger_config.json,
      else 128.
    text_pair: whether serve_text takes `text_b` (default: yes for the
      pretrainer and pair tasks, no otherwise).
    overwrite: replace an existing version directory.
  Raises:
    ExportError: bad flags, an existing version without overwrite, or a
      checkpoint that does not match the config.
  """
  if model not in MODEL_KINDS:
    raise ExportError(f"--model must be one of {MODEL_KINDS}, got {model!r}")
  info = (ModelInfo.read_beside(checkpoint) if model in ("classifier",
                                                         "tagger") else
          None) or ModelInfo()
  config, tokenizer = resolve_model(
      checkpoint, preset, albert_config_file, spm_model_file, vocab_file,
      do_lower_case)
  num_labels = check_task_info(checkpoint, model, info, num_labels, text_pair)
  max_seq_length = max_seq_length or info.max_seq_length or 128
  try:
    resolution.check_seq_length(max_seq_length, config)
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
  if model == "tagger":
    try:
      text_encoder = TextTagger.from_tokenizer(
          tokenizer, max_seq_length, info.token_level, info.label_list)
    except ValueError as e:
      raise ExportError(f"{TAGGER_CONFIG} beside --checkpoint={checkpoint}: "
                        f"{e}") from None
  else:
    text_encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length)
  archive = make_archive(keras_model, model, text_encoder, text_pair,
                         num_labels)
  if model == "pretrainer":
    fill_mask.add_serve_fill_mask(archive, keras_model, tokenizer,
                                  max_seq_length)

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
        normalization=normalization_rules(tokenizer, info.token_level))
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


def normalization_rules(tokenizer, token_level=None):
  """The text rules an app must apply before the tokenizer (for the JSON).

  token_level: a tagger's ("char"/"word"): its text is split into tokens
  first and each token goes through the rules on its own.
  """
  if token_level:
    return tagger_text_rules(tokenizer, token_level)
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


def tagger_text_rules(tokenizer, token_level):
  """What a tagger's app does to raw text (ner_data.encode_text/tag_text)."""
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


def check_task_info(checkpoint, kind, info, num_labels, text_pair):
  """A tagger checkpoint goes with --model=tagger, and only it; returns the
  number of labels (a tagger's: its tags in tagger_config.json)."""
  if kind == "classifier" and info.is_tagger:
    raise ExportError(f"--checkpoint={checkpoint} is a tagger ({TAGGER_CONFIG} "
                      "beside it, written by run_ner): export it with "
                      "--model=tagger")
  if kind != "tagger":
    return num_labels
  if not info.is_tagger:
    raise ExportError(f"--model=tagger needs the {TAGGER_CONFIG} run_ner "
                      f"writes beside --checkpoint={checkpoint} (tags, "
                      "max_seq_length, token_level); none found")
  if info.token_level not in ner_data.TOKEN_LEVELS:
    raise ExportError(f"{TAGGER_CONFIG} beside --checkpoint={checkpoint}: "
                      f"token_level must be one of {ner_data.TOKEN_LEVELS}, "
                      f"got {info.token_level!r}")
  if num_labels and num_labels != len(info.label_list):
    raise ExportError(f"--num_labels={num_labels} but the tagger has "
                      f"{len(info.label_list)} tags ({TAGGER_CONFIG}); omit "
                      "--num_labels")
  if text_pair:
    raise ExportError("--text_pair: a tagger's serve_text takes one text")
  return len(info.label_list)


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
                       "classifier_config.json or tagger_config.json, else "
                       "128).")
  flags.DEFINE_boolean("text_pair", None, "serve_text takes text_b too "
                       "(default: pretrainer and pair tasks).")
  flags.DEFINE_boolean("overwrite", False, "Replace an existing version.")
  flags.DEFINE_boolean("verbose", False, "Show the traceback of an error.")
  flags.mark_flags_as_required(["checkpoint", "export_dir"])


if __name__ == "__main__":
  from albert_tf import cli_errors  # pylint: disable=g-import-not-at-top
  define_flags()
  cli_errors.run_main(main)
