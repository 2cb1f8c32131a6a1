"""The exports of benchmarks.export_fidelity: every TFLite and ONNX mode of
a SavedModel, each in a child process, a refusal kept as its reason."""

import inspect
import json
import os
import time

from benchmarks import minilm_transfer as mt


def call_exporter(fn, **kwargs):
  """fn(**kwargs) with only the keyword arguments fn takes (the exporters'
  verification arguments are newer than some trees this runs on)."""
  taken = inspect.signature(fn).parameters
  return fn(**{k: v for k, v in kwargs.items() if k in taken})


def reason(error):
  """One line of an exporter's refusal."""
  text = " ".join(str(error).split()) or type(error).__name__
  return text if len(text) <= 300 else text[:297] + "..."


def export_one(kind, mode, saved_model, path, calibration_tsv, verify_tsv,
               calibration_lines):
  """One export, in this process: {"verification": ...} or {"refused"}."""
  # pylint: disable=g-import-not-at-top
  from albert_tf import export_onnx
  from albert_tf import export_tflite
  try:
    if kind == "tflite":
      info = call_exporter(
          export_tflite.convert, saved_model=saved_model, output=path,
          quantize=mode, representative_data=calibration_tsv,
          num_calibration_examples=calibration_lines, verify_data=verify_tsv)
    else:
      info = call_exporter(export_onnx.convert, saved_model=saved_model,
                           output=path, quantize=mode, verify_data=verify_tsv)
    return {"verification": (info or {}).get("verification")}
  except Exception as e:  # pylint: disable=broad-except
    return {"refused": f"{type(e).__name__}: {reason(e)}"}


def artifacts(saved_model, folder, calibration_tsv, verify_tsv,
              calibration_lines):
  """[(kind, mode, path or None, {"refused": reason} or exporter's info)].

  Each export runs in a child process (`--_export`): a converter's memory
  is returned when it ends (a dozen conversions in one process grew past
  6 GiB).
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf import export_onnx
  from albert_tf import export_tflite
  made = [("saved_model", "float32", saved_model, {})]
  todo = [("tflite", m) for m in export_tflite.QUANTIZE_MODES]
  todo += [("onnx", m) for m in export_onnx.QUANTIZE_MODES]
  for kind, mode in todo:
    path = os.path.join(folder, f"model_{mode}.{kind}")
    out = os.path.join(folder, f"export_{mode}_{kind}.json")
    start = time.perf_counter()
    try:
      mt.run_command(["benchmarks.export_fidelity", "--_export",
                      f"{kind}:{mode}:{saved_model}:{path}", "--_features",
                      f"{calibration_tsv}:{verify_tsv}:{calibration_lines}",
                      "--_out", out], out + ".log")
      with open(out, encoding="utf-8") as f:
        info = json.load(f)
    except SystemExit as e:  # the child died (its log is named)
      info = {"refused": f"the export process failed: {reason(e)}"}
    if "refused" in info:
      path = None
    info["export_s"] = round(time.perf_counter() - start, 1)
    made.append((kind, mode, path, info))
    print(f"  {kind} {mode}: {info.get('refused') or 'written'} "
          f"({info['export_s']} s)", flush=True)
  return made


def export_main(args):
  """--_export KIND:MODE:SAVED_MODEL:OUTPUT --_features CAL:VERIFY:LINES."""
  kind, mode, saved_model, path = args._export.split(":", 3)  # pylint: disable=protected-access
  calibration_tsv, verify_tsv, lines = args._features.split(":")  # pylint: disable=protected-access
  info = export_one(kind, mode, saved_model, path, calibration_tsv,
                    verify_tsv, int(lines))
  mt.write_atomically(args._out, json.dumps(info))  # pylint: disable=protected-access


def verdict(info):
  """The exporter's own check, short."""
  checked = info.get("verification")
  if not checked:
    return "—"
  text = checked.get("verdict") if isinstance(checked, dict) else None
  flag = "DEGRADED: " if isinstance(checked, dict) and checked.get(
      "degraded") else ""
  return flag + " ".join(str(text or checked).split())[:160]
