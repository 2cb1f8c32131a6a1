"""The demo's budgets per mode, the stages each mode runs and the progress
estimates (demo/run_demo.py reads them)."""

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

