r"""Fine-tune ALBERT on multiple-choice reading comprehension: RACE.

    python -m albert_tf.run_race --data_dir=data/RACE --output_dir=out/race \
        --init_checkpoint=albert_base --spm_model_file=albert_base/spm.model \
        --do_train --do_eval

data_dir is RACE's own tree, RACE/{train,dev,test}/{middle,high}/*.txt (one
JSON article per file), the directory holding RACE/, or the same tree with
the original's merged all.txt per level directory (`albert_tf.data.race`).
Each question's four options become `[CLS] article [SEP] question+option
[SEP]` (a "_" in the question is replaced by the option); dense(1) over each
pooled output and a softmax over the four pick the answer. The original's
defaults: max_seq_length 512, max_qa_length 128, learning_rate 1e-5, 12000
steps with 1000 of warmup, batch 32. The recipe is run_classifier's (one
trainer, resume, the best checkpoint by dev accuracy). Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       max_qa_length, tokenizer (for export)
  eval_results.json      accuracy, accuracy_middle, accuracy_high (dev, with
                         the best checkpoint); test_* when test has answers
  test_predictions.tsv   id, level, predicted letter, prob_A..prob_D

This is `python -m albert_tf.finetune --task=multiple_choice` under the original's
name and flags (`albert_tf.finetune.alias`); the family, its flags
(RaceOptions) and its recipe are albert_tf/tasks/multiple_choice.py.
"""

from albert_tf import finetune
from albert_tf.tasks.multiple_choice import RaceOptions  # noqa: F401  pylint: disable=unused-import

run, main = finetune.alias("multiple_choice")


if __name__ == "__main__":
  finetune.alias_main("multiple_choice")
