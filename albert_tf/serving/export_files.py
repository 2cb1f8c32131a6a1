"""The files an export writes beside its model, and the export it reads.

export_tflite and export_onnx read the SavedModel export_saved_model wrote
(`read_source`: `version_dir`, `read_export_record`, `tokenizer_of`), write
PATH in a dot-named scratch folder beside it (`scratch_folder`, under the
output's lock), check it before it is written (`VerifySettings`, held-out
examples of `read_verify_data`), then write its tokenizer copy, PATH.json
and the model card PATH.README.md (`sidecar_names`) beside it and rename
them all into place (`write_beside`, `rename_into_place`).
"""

import contextlib
import dataclasses
import os
import types
from typing import List, Optional

from absl import logging

from albert_tf.core import errors
from albert_tf.core import staging
from albert_tf.core import settings
from albert_tf.data import rows
from albert_tf.data.tokenization import load_tokenizer
from albert_tf.data.tokenization import write_synced
from albert_tf.serving import verify

# The tokenizer copy beside PATH.tflite: PATH + this suffix, by kind.
TOKENIZER_SUFFIXES = {"sentencepiece": ".spm.model", "wordpiece": ".vocab.txt"}


def version_dir(saved_model, error=ValueError):
  """saved_model itself when it holds saved_model.pb, else its highest
  numbered version; `error` (a ValueError) naming --saved_model otherwise."""
  if os.path.isfile(os.path.join(saved_model, "saved_model.pb")):
    return saved_model
  versions = sorted(int(d) for d in (os.listdir(saved_model) if os.path.isdir(
      saved_model) else []) if d.isdigit() and os.path.isfile(
          os.path.join(saved_model, d, "saved_model.pb")))
  if not versions:
    raise error(
        f"--saved_model={saved_model}: no saved_model.pb there or in a "
        "numbered version folder (give export_saved_model's export_dir or "
        "a version)")
  return os.path.join(saved_model, str(versions[-1]))


def read_export_record(saved_model_dir):
  """The export's `serving.saved_model.ExportInfo` (a core.record.ModelInfo
  and how the SavedModel serves; assets.extra/albert_export.json)."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.saved_model import METADATA_FILE, ExportInfo
  path = os.path.join(saved_model_dir, "assets.extra", METADATA_FILE)
  if not os.path.exists(path):
    raise ValueError(f"{path} not found: --saved_model must be a version "
                     "directory written by albert_tf.export_saved_model")
  # The record API reads old and new files alike. As ExportInfo, the
  # SavedModel's length_buckets (serve_text's, not the .tflite's fixed
  # [1, max_seq_length]) are no task field the .json would copy.
  return ExportInfo.read(path)


def read_export_metadata(saved_model_dir):
  """The export's metadata in the flat layout apps see."""
  return read_export_record(saved_model_dir).flat_dict()


def tokenizer_of(saved_model_dir, metadata):
  """The Python tokenizer stored in the SavedModel's assets."""
  return tokenizer_file(
      os.path.join(saved_model_dir, "assets", metadata["tokenizer_file"]),
      metadata["tokenizer_kind"], metadata["do_lower_case"])


def tokenizer_file(path, kind, do_lower_case):
  """The tokenizer of a SentencePiece model or (kind "wordpiece") a vocab
  file; do_lower_case None: true, as in every command."""
  wordpiece = kind == "wordpiece"
  return load_tokenizer(None if wordpiece else path,
                        path if wordpiece else None,
                        True if do_lower_case is None else do_lower_case)


def sidecar_names(output, tokenizer_kind):
  """The files an export writes beside output: {"model", "tokenizer",
  "json", "card"}. The JSON and the card carry the model's whole name
  (m.tflite.json, m.onnx.README.md), so a .tflite and an .onnx of one stem
  never overwrite each other's; the tokenizer copy (m.spm.model) may be
  shared, when it is the same file (`check_tokenizer_copy`)."""
  base = os.path.basename(output)
  return {"model": base, "tokenizer": os.path.splitext(base)[0] +
          TOKENIZER_SUFFIXES[tokenizer_kind],
          "json": base + ".json", "card": base + ".README.md"}


def check_tokenizer_copy(output, name, tokenizer_file):
  """Refuses when the tokenizer copy beside output differs from this
  export's tokenizer and another export of the same stem (m.onnx beside
  m.tflite) still reads it; replacing output's own export may change it."""
  folder = os.path.dirname(os.path.abspath(output))
  existing = os.path.join(folder, name)
  if not os.path.exists(existing):
    return
  with open(existing, "rb") as f, open(tokenizer_file, "rb") as g:
    if f.read() == g.read():
      return
  stem = os.path.splitext(os.path.basename(output))[0]
  others = [stem + ext for ext in (".tflite", ".onnx")
            if stem + ext != os.path.basename(output)
            and os.path.exists(os.path.join(folder, stem + ext))]
  if others:
    raise ValueError(
        f"--output={output}: {existing} is the tokenizer of {others[0]} "
        "beside it, not this model's; give another --output or remove "
        f"{others[0]}")


def rename_into_place(stage, names):
  """Moves names' files from the stage (`scratch_folder`) beside its
  target, the JSON (which names the others) last."""
  # A Ctrl-C that the conversion swallowed (tf2onnx, TF's C++ layers)
  # stops the export here, before a file is replaced.
  errors.stop_if_ctrl_c()
  stage.move([names[k] for k in ("tokenizer", "model", "card", "json")],
             os.path.dirname(os.path.abspath(stage.target)))


def lock_path(output):
  """The lock file of one --output: `.NAME.lock` beside it."""
  return staging.lock_beside(output)


@contextlib.contextmanager
def scratch_folder(output, command="export_tflite"):
  """Yields a `staging.Stage`: a dot-named folder beside output, under the
  output's lock (`staging.claimed`; `command` names the exporter in the
  warning about a killed run's folder), removed at the end. An OSError
  comes out as one line naming --output and what was replaced."""
  with (staging.claimed(output, "--output", f"an {command}"),
        staging.staged(output, f"--output={output}") as stage):
    yield stage


def read_source(saved_model, output, extension, error, precision_hint):
  """(the version directory, its record, its tokenizer, `sidecar_names`)
  of an export of saved_model (an export_dir or a version) to output,
  which must end in extension; `error` (a ValueError) names the flag for
  another output, no SavedModel, or a bfloat16 one (+ precision_hint)."""
  if not output.endswith(extension):
    raise error(f"--output={output}: end it in {extension} (its .json, "
                "tokenizer and card are named after it)")
  saved_model = version_dir(saved_model, error)
  record = read_export_record(saved_model)
  if record.mixed_precision not in (None, "none"):
    raise error(f"--saved_model={saved_model} computes in "
                f"{record.mixed_precision}{precision_hint}")
  tokenizer = tokenizer_of(saved_model, record.flat_dict())
  names = sidecar_names(output, record.tokenizer_kind)
  check_tokenizer_copy(output, names["tokenizer"], tokenizer.model_file)
  return saved_model, record, tokenizer, names


def write_beside(stage, names, record, tokenizer, info, serve_inputs,
                 card_tail="", **card_options):
  """Writes the tokenizer copy, the JSON of info and the model card (the
  SavedModel's, with the artifact's serve_inputs and verified figures,
  then card_tail; `model_card.card`'s card_options) in the stage, then
  moves them and the model beside its target (`rename_into_place`)."""
  # pylint: disable=g-import-not-at-top
  import json
  from albert_tf.serving import model_card
  card = model_card.card(record, record.checkpoint, tokenizer.model_file,
                         serve_inputs, info["model_file"],
                         tf_serving=False,
                         verification=info.get("verification"),
                         **card_options) + card_tail
  with open(tokenizer.model_file, "rb") as f:
    texts = {"tokenizer": f.read(), "card": card.encode("utf-8"),
             "json": json.dumps(info, indent=2,
                                ensure_ascii=False).encode("utf-8")}
  for key, data in texts.items():
    write_synced(os.path.join(stage.path, names[key]), data)
  rename_into_place(stage, names)


def verdict_line(checked) -> str:
  """The line a command prints for verify.check's figures."""
  return ("DEGRADED: " if checked["degraded"] else "Verified: ") + (
      checked["verdict"])


def read_verify_data(path, record, task, max_examples, input_columns=None):
  """(raw inputs {serve_text name: list}, gold label names or None, a
  description) of --verify_data, read as albert-predict reads files (a TSV
  with a header, JSON lines, plain text; gold labels from "label"; a
  tagger's: a list of tags per row, one per token of its text)."""
  inputs = task.serve_text_inputs(record)
  view = types.SimpleNamespace(kind=record.task or "encoder", inputs=inputs,
                               task=task, record=record)
  try:
    reader = rows.RowReader(view, path, input_columns=input_columns)
    values, gold = {n: [] for n in inputs}, []
    for number, row in rows.read_rows(path):
      got, label = reader(number, row)
      for name in inputs:
        values[name].append(got[name])
      # As albert-predict reads it (a tagger's: tags per token).
      gold.append(None if label is None else reader.scorer.read_gold(
          label, got, f"{path}:{number}"))
      if len(gold) >= max_examples:
        break
  except rows.PredictError as e:
    # predict's reader names predict's flags; this command's are these.
    text = str(e).replace("--input_file=", "--verify_data=").replace(
        "--input_columns", "--verify_columns")
    raise verify.ExportVerificationError(f"--verify_data: {text}") from None
  if not gold:
    raise verify.ExportVerificationError(f"--verify_data={path} holds no rows")
  labelled = sum(g is not None for g in gold)
  if record.label_list and 0 < labelled < len(gold):
    logging.warning("--verify_data=%s: %d of %d rows have no gold label: "
                    "%s (and --max_metric_drop) is scored on the %d "
                    "labelled rows", path, len(gold) - labelled, len(gold),
                    reader.scorer.verify_metric, labelled)
  return (values, (gold if record.label_list and labelled else None),
          f"--verify_data={path}")


@dataclasses.dataclass
class VerifySettings:
  """The check before an export is written (export_tflite, export_onnx)."""
  verify_data: Optional[str] = settings.field(
      None, "Held-out examples the file is checked on before it is "
      "written, read as albert-predict reads files (TSV with a header, JSON "
      "lines, plain text; gold labels from a 'label' column). Default: the "
      "run's recorded dev split, else texts of the vocabulary's pieces.",
      group="output")
  verify_columns: Optional[List[str]] = settings.field(
      None, "NAME=COLUMN pairs for --verify_data, as albert-predict's "
      "--input_columns.", group="output")
  num_verify_examples: int = settings.field(
      verify.NUM_EXAMPLES, "Held-out examples run for the check.",
      lower_bound=1, group="output")
  min_agreement: Optional[float] = settings.field(
      None, "The floor of agreement with the float model (default: 0.995 "
      "for --quantize=none, 0.95 for the others).", lower_bound=0.0,
      upper_bound=1.0, group="output")
  max_metric_drop: float = settings.field(
      0.02, "Quantized: the most accuracy (a tagger: entity F1) the file "
      "may lose against the float model on the held-out examples (0.02: 2 "
      "points).",
      lower_bound=0.0, upper_bound=1.0, group="output")
  allow_degraded: bool = settings.field(
      False, "Write the file even below a floor (never one its runtime "
      "cannot load); its card then says DEGRADED with the figures.",
      group="output")

  def floors(self):
    return verify.Floors(self.min_agreement, self.max_metric_drop)
