#!/usr/bin/env bash
# Writes this folder's fixture: what the code of 2026-12-01 (commit eae2f5f,
# before the package moved into subpackages) wrote for a tiny config.
# tests/test_legacy_outputs.py checks that today's code still resumes,
# evaluates and exports it. Re-running this script with newer code would
# defeat that purpose; it is kept to say how the files were made.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python}
rm -rf work pretrain classifier tagger export && mkdir -p work
printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n' > vocab.txt
for w in good bad movie film plot acting the a is was very not fun dull \
    paris london alice bob lives in works at city man woman; do echo $w; done >> vocab.txt
cat > albert_config.json <<'J'
{"vocab_size": 30, "embedding_size": 4, "hidden_size": 8,
 "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
 "max_position_embeddings": 32}
J
$PY - <<'P'
import numpy as np, tensorflow as tf
from albert_tf.core import features
rng = np.random.default_rng(0)
with tf.io.TFRecordWriter("work/part-0.tfrecord") as w:
  for _ in range(16):
    n = int(rng.integers(8, 17)); ids = rng.integers(5, 30, size=n)
    ids[0], ids[-1] = 2, 3; cut = int(rng.integers(2, n - 1)); ids[cut] = 3
    seg = np.zeros(16, np.int64); seg[cut + 1:n] = 1
    pos = np.sort(rng.choice(np.arange(1, n - 1), size=2, replace=False))
    lab = ids[pos].copy(); ids[pos] = 4
    pad = lambda a: np.pad(a, (0, 16 - len(a)))
    w.write(features.make_pretraining_example(
        input_ids=pad(ids), input_mask=pad(np.ones(n, np.int64)),
        segment_ids=seg, token_boundary=pad(np.ones(n, np.int64)),
        masked_lm_positions=pos, masked_lm_ids=lab,
        masked_lm_weights=np.ones(2, np.float32),
        next_sentence_label=int(rng.integers(0, 2))).SerializeToString())
P
$PY -m albert_tf.run_pretraining --albert_config_file=albert_config.json \
    --input_file=work/part-0.tfrecord --allow_incomplete_input \
    --eval_input_file=work/part-0.tfrecord --output_dir=pretrain --max_seq_length=16 \
    --max_predictions_per_seq=2 --train_batch_size=4 --eval_batch_size=4 \
    --num_train_steps=4 --num_warmup_steps=1 --save_checkpoints_steps=2 \
    --iterations_per_loop=2 --learning_rate=0.01 --max_eval_steps=1 --do_eval
mkdir -p work/tsv work/conll
printf 'label\ttext\n' | tee work/tsv/train.tsv > work/tsv/dev.tsv
for i in 1 2 3 4; do
  printf 'pos\tgood movie\npos\tvery fun film\nneg\tbad plot\nneg\tdull acting\n' >> work/tsv/train.tsv
done
printf 'pos\tthe film was good\nneg\tthe plot was bad\n' >> work/tsv/dev.tsv
$PY -m albert_tf.run_classifier --task_name=tsv --data_dir=work/tsv \
    --text_a_column=text --label_column=label --init_checkpoint=pretrain \
    --vocab_file=vocab.txt --output_dir=classifier --max_seq_length=16 \
    --train_batch_size=4 --train_step=4 --save_checkpoints_steps=2 \
    --learning_rate=0.01 --do_train --do_eval
for split in train dev test; do
  printf 'alice B-PER\nlives O\nin O\nparis B-LOC\n\nbob B-PER\nworks O\nat O\nlondon B-LOC\n\n' > work/conll/$split.txt
done
$PY -m albert_tf.run_ner --task_name=conll --data_dir=work/conll \
    --init_checkpoint=pretrain --vocab_file=vocab.txt --output_dir=tagger \
    --max_seq_length=16 --train_batch_size=2 --train_step=4 \
    --save_checkpoints_steps=2 --learning_rate=0.01 --do_train --do_eval
$PY -m albert_tf.export_saved_model --checkpoint=classifier --model=classifier \
    --export_dir=export --max_seq_length=16
gzip -9 export/1/saved_model.pb  # 700 KB -> 64 KB; the test unzips it
rm -rf work
