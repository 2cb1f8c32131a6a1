r"""Fine-tune ALBERT on sentence(-pair) classification or regression.

    python -m albert_tf.run_classifier --task_name=sentiment \
        --data_dir=demo_output/corpus/sentiment --output_dir=demo_output/cls \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=1e-4 \
        --num_train_epochs=3 --do_train --do_eval --do_predict

Recipe: read + encode the TSV splits (tasks/classification.py), then the
one trainer (albert_tf.training.trainer) under any --distribution_strategy: an
`AlbertClassifier` initialised from --init_checkpoint, AdamW (warmup +
linear decay), a checkpoint and a dev eval every epoch (or every
--eval_every_steps), the best checkpoint by the task's dev metric kept
apart; then predict with the best. Killed, the same command resumes at the
last checkpoint. Writes to output_dir:
  ckpt-N.* + checkpoint   latest checkpoints (weights, optimizer, step)
  best/                   best weights by the dev metric + best.json
  albert_config.json      the encoder config
  task_record.json        task, labels, max_seq_length (for export)
  run_fingerprint.json    config, task, tokenizer hash, optimizer (a rerun
                          with other settings stops; --overwrite starts over)
  <tokenizer file>        a copy of the spm model / vocab.txt
  train/ eval/            TensorBoard events (loss, learning rate, metrics)
  train_log.jsonl         every --log_every_steps: loss, accuracy, lr, speed
  eval_log.jsonl          every eval: dev metrics and global_step
  eval_results.json       dev metrics of the best checkpoint (+ test_*
                          metrics when the test split is labelled)
  test_results.tsv        index, prediction, per-class probabilities

This is `python -m albert_tf.finetune --task=classification` under the original's
name and flags (`albert_tf.finetune.alias`); the family, its flags
(ClassifierOptions) and its recipe are `albert_tf/tasks/classification.py`.
"""

from albert_tf import finetune
from albert_tf.tasks.classification import ClassifierOptions  # noqa: F401  pylint: disable=unused-import

run, main = finetune.alias("classification")


if __name__ == "__main__":
  finetune.alias_main("classification")
