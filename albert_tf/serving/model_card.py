"""The model card written beside every export: README.md in a SavedModel
version, NAME.README.md beside a .tflite.

What a person deciding whether to serve the model needs, from what the run
recorded: the task and its labels; the tokenizer and its sha256; the
training data (paths and sizes, from the task record's `training`); the
steps, learning rate and batch (run_fingerprint.json); the best dev metric
beside its baselines (eval_results.json); and how to call it (TF Serving's
REST body, the Python snippet, the TFLite inputs). A field the run did not
record says so rather than being left out.
"""

import json
import os
import re
from typing import Dict, List, Optional

from albert_tf.data.tokenization import file_sha256

CARD_FILE = "README.md"


def _read_json(path: str) -> Optional[dict]:
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
  except (OSError, ValueError):
    return None
  return values if isinstance(values, dict) else None


def _metrics_lines(results: Optional[dict]) -> List[str]:
  if not results:
    return ["- no eval_results.json beside the checkpoint: not evaluated"]
  lines = []
  best = results.get("best_step")
  model = {k: v for k, v in results.items()
           if not k.startswith(("test_", "baseline_")) and k != "best_step"
           and isinstance(v, (int, float))}
  if model:
    lines.append(f"- dev (best checkpoint, step {best}): {_shown(model)}")
  base = {k[len("baseline_"):]: v for k, v in results.items()
          if k.startswith("baseline_") and isinstance(v, float)}
  if base:
    lines.append("- dev baselines fitted on the same train split: " + ", ".join(
        f"{k} {v:.4f}" for k, v in sorted(base.items())))
  test = {k[len("test_"):]: v for k, v in results.items()
          if k.startswith("test_") and not k.startswith("test_baseline_")
          and isinstance(v, (int, float))}
  if test:
    lines.append(f"- test: {_shown(test)}")
  return lines or ["- eval_results.json holds no metric"]


def _shown(metrics: dict) -> str:
  return ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                   for k, v in sorted(metrics.items()))


def verification_lines(figures: Optional[dict], baselines=None) -> List[str]:
  """The "## Verified on this artifact" section: the figures
  `serving.verify.check` measured on the file itself, and a verdict line
  (DEGRADED below a floor; below a baseline: not for serving)."""
  if not figures:
    return []
  lines = ["", "## Verified on this artifact", ""]
  if figures.get("degraded"):
    lines.append(f"**DEGRADED** (written with --allow_degraded): "
                 f"{figures.get('verdict')}")
  else:
    lines.append(f"- verdict: {figures.get('verdict')}")
  lines.append(f"- run in {figures.get('runtime')} on {figures.get('source')}")
  shown = [("accuracy", "accuracy on these examples"),
           ("float_accuracy", "the float model's accuracy on them"),
           ("entity_f1", "entity F1 on these examples"),
           ("float_entity_f1", "the float model's entity F1 on them"),
           ("agreement", f"agreement with the float model ({figures.get('compared')})"),
           ("max_probability_difference", "largest probability difference"),
           ("max_relative_difference",
            "largest output difference / the output's scale")]
  for key, what in shown:
    if key in figures:
      value = figures[key]
      lines.append(f"- {what}: {value:.4f}" if key != "max_relative_difference"
                   else f"- {what}: {value:.2e}")
  best = max(((v, k) for k, v in (baselines or {}).items()), default=None)
  if best and "accuracy" in figures:
    if figures["accuracy"] <= best[0]:
      lines.append(f"- below the {best[1]} baseline ({best[0]:.4f}, dev): "
                   "not for serving")
    else:
      lines.append(f"- above the best baseline, {best[1]} {best[0]:.4f} (dev)")
  if not figures.get("real_text", True):
    lines.append("- no held-out text was given: these figures prove the file "
                 "runs as the float model does, not its accuracy on text "
                 "(export again with --verify_data)")
  return lines


def card(record, checkpoint: Optional[str], tokenizer_path: str,
         serve_inputs: List[str], export_path: str,
         tflite: Optional[Dict] = None, tf_serving: bool = True,
         verification: Optional[dict] = None) -> str:
  """The card's Markdown. record: the export's ModelInfo; checkpoint: the
  prefix the weights came from (its folder holds the run's files);
  serve_inputs: serve_text's input names; tflite: export_tflite's info;
  tf_serving: False for a file TF Serving does not run (an .onnx);
  verification: `serving.verify.check`'s figures on this artifact."""
  run_dir = (os.path.dirname(checkpoint) if checkpoint else None)
  if run_dir and os.path.basename(run_dir) == "best":
    run_dir = os.path.dirname(run_dir)
  fingerprint = _read_json(os.path.join(run_dir, "run_fingerprint.json")
                           ) if run_dir else None
  results = _read_json(os.path.join(run_dir, "eval_results.json")
                       ) if run_dir else None
  optimizer = (fingerprint or {}).get("optimizer") or {}
  training = record.training or {}
  task = record.task or "encoder"
  lines = [f"# Model card: {task}" + (f" ({record.task_name})"
                                      if record.task_name else ""), ""]
  lines += ["## What it does", ""]
  if record.label_list:
    lines.append(f"- labels, in the model's order: "
                 f"{', '.join(map(str, record.label_list))}")
  lines.append(f"- max_seq_length: {record.max_seq_length}")
  try:
    sha = file_sha256(tokenizer_path)
  except OSError:
    sha = "unreadable"
  lines.append(f"- tokenizer: {record.tokenizer_kind} "
               f"`{os.path.basename(tokenizer_path)}`, sha256 {sha}, "
               f"lowercased: {record.do_lower_case}")
  lines += ["", "## How it was trained", ""]
  if training.get("data"):
    for split, stats in sorted(training["data"].items()):
      where = stats.get("file") or stats.get("source") or "?"
      size = stats.get("examples", stats.get("questions"))
      size = (f"{size} examples" if size is not None else
              f"{stats['sentences']} sentences" if "sentences" in stats
              else "? examples")
      lines.append(f"- {split}: {where} ({size})")
  else:
    lines.append("- the training data was not recorded (a run before model "
                 "cards, or a converted checkpoint)")
  if optimizer:
    # The step of the weights served (the best checkpoint's, by dev).
    step = re.search(r"ckpt-(\d+)$", checkpoint or "")
    lines.append(
        f"- the served weights: step {step.group(1) if step else '?'} of "
        f"batch {(fingerprint or {}).get('train_batch_size', '?')}, "
        f"optimizer {optimizer.get('name')} at learning rate "
        f"{optimizer.get('learning_rate')}")
  lines.append(f"- weights: {checkpoint or 'not recorded'}")
  lines += ["", "## How good it is", ""] + _metrics_lines(results)
  if verification:
    lines.append("- the figures above are the checkpoint's; this file's own "
                 "are under \"Verified on this artifact\"")
  lines += verification_lines(verification, {
      k[len("baseline_"):-len("_accuracy")]: v
      for k, v in (results or {}).items()
      if k.startswith("baseline_") and k.endswith("_accuracy")
      and isinstance(v, float)})
  lines += ["", "## How to call it", ""]
  example = {name: ("..." if name != "options" else ["...", "..."])
             for name in serve_inputs}
  if serve_inputs and tf_serving:
    lines += [
        "TF Serving (REST, a server built with TF Text ops):", "",
        "```json",
        json.dumps({"signature_name": "serve_text", "instances": [example]},
                   ensure_ascii=False),
        "```", "",
        "`serving_default` takes int32 `input_ids`, `input_mask`, "
        "`segment_ids`. This SavedModel holds serve_text, so the server "
        "needs TF Text's ops to load it at all, whichever signature is "
        "called; `export_saved_model --signatures=serving_default` writes "
        "one that a stock TF Serving loads.", ""]
  lines += ["Python:", "", "```python", "import albert_tf",
            f"albert_tf.load({export_path!r}).predict("
            + ", ".join('["..."]' if n != "options" else '[["...", "..."]]'
                        for n in serve_inputs) + ")",
            "```"]
  if tflite:
    inputs = ", ".join(f"{i['name']} {i['shape']}" for i in
                       tflite.get("inputs", []))
    lines += ["", f"TFLite (`{tflite.get('model_file')}`, "
              f"quantize={tflite.get('quantize')}): inputs {inputs}; the "
              f"tokenizer is `{tflite.get('tokenizer_file')}` and the "
              "pre-processing rules are in the .json beside it."]
  return "\n".join(lines) + "\n"
