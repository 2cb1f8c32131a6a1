r"""Fine-tune ALBERT on token tagging (NER): People's Daily 1998 or any CoNLL file.

    python -m data_prep.corpora --corpus=peoples_daily_ner \
        --output_dir=demo_output/corpus/ner
    python -m albert_tf.run_ner --task_name=peoples_daily_ner \
        --data_dir=demo_output/corpus/ner --output_dir=demo_output/ner \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --doc_stride=64 --train_batch_size=32 \
        --learning_rate=1e-4 --num_train_epochs=3 \
        --do_train --do_eval --do_predict

data_dir holds train.txt, dev.txt and test.txt in CoNLL layout (token and
tag per line, blank line between sentences; test.txt may have no tags).
`--task_name=conll` reads any such files: BIO, IOB1, BIOES/IOBES or BMES
(detected, or --tag_scheme), character or word tokens. The recipe is
run_classifier's: read and window the splits (tasks/tagging.py), then the
one trainer under any --distribution_strategy, a checkpoint and a dev eval
every epoch (or --eval_every_steps), the best checkpoint by dev entity F1
kept apart; then eval/predict with the best. Killed, the same command
resumes at the last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint, best/, albert_config.json, run_fingerprint.json,
  train/ eval/, train_log.jsonl, eval_log.jsonl   as run_classifier
  task_record.json       tags, scheme, max_seq_length, tokenizer (for export)
  eval_results.json      entity_precision/recall/f1 (+ per type) of the dev
                         split with the best checkpoint; test_* when
                         test.txt has tags
  test_predictions.txt   token \t gold \t predicted (no gold column when
                         test.txt has no tags), in test.txt's order and
                         scheme, a blank line between sentences

This is `python -m albert_tf.finetune --task=tagging` under the original's
name and flags (`albert_tf.finetune.alias`); the family, its flags
(NerOptions) and its recipe are albert_tf/tasks/tagging.py.
"""

from albert_tf import finetune
from albert_tf.tasks.tagging import NerOptions  # noqa: F401  pylint: disable=unused-import

run, main = finetune.alias("tagging")


if __name__ == "__main__":
  finetune.alias_main("tagging")
