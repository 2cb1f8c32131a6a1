r"""Fine-tune ALBERT on span question answering: SQuAD v1.1/v2.0, CMRC 2018, DRCD.

    python -m albert_tf.run_squad --train_file=train-v1.1.json \
        --predict_file=dev-v1.1.json --output_dir=out/squad \
        --init_checkpoint=albert_base --spm_model_file=albert_base/spm.model \
        --do_train --do_predict
    # v2.0: --version_2_with_negative; CMRC 2018 / DRCD: --task_name=cmrc2018

The files are the official SQuAD JSON (CMRC 2018 and DRCD use the same
layout). The original's flags and defaults: max_seq_length 384, doc_stride
128 (the step between the starts of a context's windows, not HF's overlap),
max_query_length 64, n_best_size 20, max_answer_length 30, start_n_top and
end_n_top 5 (v2), learning_rate 5e-5, warmup_proportion 0.1, 3 epochs. The
recipe is run_classifier's: read and window the files (tasks/span_qa.py),
the one trainer under any --distribution_strategy, a checkpoint and a dev
eval every epoch (or --eval_every_steps) when --do_eval, the best by dev F1
kept apart; then eval/predict with the best. Killed, the same command
resumes at the last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       version 2 or not, windows, tokenizer (for export)
  predictions.json       {question id: answer text} for every question of
                         --predict_file ("" = no answer, v2)
  nbest_predictions.json the n best answers per question, with scores
  null_odds.json         v2: the no-answer score per question
  eval_results.json      the official metrics of --predict_file when it has
                         answers (SQuAD v1.1: exact_match, f1; v2.0: exact,
                         f1, HasAns_*, NoAns_*, best_* and the threshold
                         behind predictions.json; CMRC 2018: f1,
                         exact_match), with the best checkpoint

This is `python -m albert_tf.finetune --task=span_qa` under the original's
name and flags (`albert_tf.finetune.alias`); the family, its flags
(SquadOptions) and its recipe are albert_tf/tasks/span_qa.py.
"""

from albert_tf import finetune
from albert_tf.tasks.span_qa import SquadOptions  # noqa: F401  pylint: disable=unused-import

run, main = finetune.alias("span_qa")


if __name__ == "__main__":
  finetune.alias_main("span_qa")
