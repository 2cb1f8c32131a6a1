"""Fine-tune ALBERT on sentence(-pair) classification or regression.

    python -m albert_tf.run_classifier --task_name=sentiment \
        --data_dir=demo_output/sentiment --output_dir=demo_output/cls \
        --init_checkpoint=demo_output/pretrain \
        --spm_model_file=demo_output/vocab/spm.model \
        --max_seq_length=128 --train_batch_size=32 --learning_rate=1e-4 \
        --num_train_epochs=3 --do_train --do_eval --do_predict

Recipe: read + encode the TSV splits (classifier_data), build an
`AlbertClassifier`, restore the encoder from --init_checkpoint, train with
AdamW (warmup + linear decay), evaluate after every epoch (or every
--eval_every_steps), keep the checkpoint with the best eval metric, then
predict with it. Writes to output_dir:
  ckpt-N.* + checkpoint   best weights (encoder + classifier_head)
  albert_config.json      the encoder config
  classifier_config.json  task, labels, max_seq_length (for export)
  <tokenizer file>        a copy of the spm model / vocab.txt
  train_log.jsonl         one line per eval: step, epoch, loss, lr, metrics
  eval_results.json       dev metrics of the best checkpoint (+ test metrics
                          when the test split is labelled)
  test_results.tsv        index, prediction, per-class probabilities
"""

import dataclasses
import json
import math
import os
import shutil
import time
from typing import Optional

from absl import app
from absl import flags
import keras
import numpy as np
import tensorflow as tf

from albert_tf import checkpoints
from albert_tf import classifier_data as cd
from albert_tf import optimization
from albert_tf.config import AlbertConfig, resolve_config
from albert_tf.models import AlbertClassifier
from albert_tf.tokenization import load_tokenizer

# Config fields that change the weights' shapes or the math; dropout and
# initializer_range may differ between pretraining and fine-tuning.
_ARCHITECTURE_FIELDS = ("vocab_size", "embedding_size", "hidden_size",
                        "num_hidden_layers", "num_hidden_groups",
                        "inner_group_num", "num_attention_heads",
                        "intermediate_size", "hidden_act",
                        "max_position_embeddings", "type_vocab_size",
                        "layer_norm_eps", "share", "embedding_layout")
CONFIG_FILE = checkpoints.CONFIG_NAME


@dataclasses.dataclass
class ClassifierOptions:
  """Everything `run` needs; field names are the command-line flags."""
  task_name: str
  data_dir: str
  output_dir: str
  init_checkpoint: Optional[str] = None
  preset: Optional[str] = None
  albert_config_file: Optional[str] = None
  spm_model_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: bool = True
  max_seq_length: int = 128
  train_batch_size: int = 32
  eval_batch_size: int = 64
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  train_step: int = 0            # > 0 overrides num_train_epochs
  warmup_step: int = -1          # -1: 10% of the training steps
  optimizer: str = "adamw"
  weight_decay: float = 0.01
  classifier_dropout: float = 0.1
  do_train: bool = True
  do_eval: bool = True
  do_predict: bool = False
  eval_every_steps: int = 0      # 0: after every epoch
  log_every_steps: int = 20
  max_train_examples: int = 0    # 0: all (a subset for quick runs)
  max_eval_examples: int = 0
  seed: int = 12345
  mixed_precision: str = ""      # "", "mixed_bfloat16" or "mixed_float16"
  # The generic `tsv` task.
  text_a_column: Optional[str] = None
  text_b_column: Optional[str] = None
  label_column: Optional[str] = None
  label_list: Optional[str] = None  # comma-separated; empty: regression
  has_header: Optional[bool] = None


def _log(message):
  print(message, flush=True)


def _checkpoint_dir(path):
  return path if os.path.isdir(path) else os.path.dirname(path)


def load_model_config(options):
  """The encoder config: --preset/--albert_config_file, else the checkpoint's.

  Raises ValueError naming the differing fields when both exist and disagree
  on the architecture.
  """
  ckpt_config = None
  if options.init_checkpoint:
    path = os.path.join(_checkpoint_dir(options.init_checkpoint), CONFIG_FILE)
    if os.path.exists(path):
      ckpt_config = AlbertConfig.from_json_file(path)
  if options.preset or options.albert_config_file:
    config = resolve_config(options.preset, options.albert_config_file)
  elif ckpt_config is not None:
    config = ckpt_config
  else:
    raise ValueError(
        "No model config: give --preset or --albert_config_file, or an "
        f"--init_checkpoint with {CONFIG_FILE} next to it")
  if ckpt_config is not None:
    diff = [f"{k}: checkpoint {getattr(ckpt_config, k)!r} vs given "
            f"{getattr(config, k)!r}" for k in _ARCHITECTURE_FIELDS
            if getattr(ckpt_config, k) != getattr(config, k)]
    if diff:
      raise ValueError(
          f"--init_checkpoint={options.init_checkpoint} was written for a "
          f"different config ({CONFIG_FILE} next to it): " + "; ".join(diff))
  return config


def make_task(options):
  """The TaskSpec of --task_name (the `tsv` task from the column flags)."""
  if options.task_name.lower() != "tsv":
    return cd.get_task(options.task_name)
  labels = [x.strip() for x in (options.label_list or "").split(",")
            if x.strip()]
  return cd.get_task("tsv", text_a_column=options.text_a_column,
                     text_b_column=options.text_b_column,
                     label_column=options.label_column,
                     label_list=labels or None, has_header=options.has_header)


def load_split(spec, options, tokenizer, split, max_examples=0):
  """Reads and encodes one split; logs what was skipped and truncated."""
  examples, read_stats = cd.read_examples(spec, options.data_dir, split,
                                          max_examples=max_examples or None)
  features, enc_stats = cd.encode_examples(examples, tokenizer,
                                           options.max_seq_length, spec)
  stats = dict(read_stats, **{k: v for k, v in enc_stats.items()
                              if k != "examples"})
  _log(f"[{split}] {stats['file']}: {stats['examples']} examples, "
       f"{stats['empty_lines_skipped']} empty line(s) skipped, "
       f"{stats['truncated']} truncated to max_seq_length="
       f"{options.max_seq_length} ({stats['tokens_removed']} tokens removed)")
  has_labels = all(e.label is not None for e in examples) and bool(examples)
  return examples, features, stats, has_labels


def build_optimizer(options, model, num_train_steps, warmup_steps):
  schedule = optimization.WarmupPolynomialDecay(
      options.learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=warmup_steps)
  optimizer = optimization.create_optimizer(
      options.optimizer, schedule, weight_decay=options.weight_decay)
  optimization.exclude_layer_norm_and_bias(optimizer, model)
  if options.mixed_precision == "mixed_float16":
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer, schedule


def restore_init_checkpoint(path, model):
  """Restores the encoder (and a classifier head if present) from `path`."""
  try:
    return checkpoints.restore_weights(path, model)
  except (ValueError, TypeError) as e:
    raise ValueError(
        f"--init_checkpoint={path} does not fit the model config "
        f"(vocab_size={model.config.vocab_size}, hidden_size="
        f"{model.config.hidden_size}, embedding_size="
        f"{model.config.embedding_size}): {e}") from None


def _batches(features, batch_size, keys):
  n = len(features["input_ids"])
  for start in range(0, n, batch_size):
    yield {k: features[k][start:start + batch_size] for k in keys}


def run(**kwargs):
  """Runs fine-tuning/eval/predict; kwargs are `ClassifierOptions` fields.

  Returns a dict: "eval" (best dev metrics), "test" (test metrics when
  labelled), "best_step", "num_train_steps", "train_wall_s", "data" (split
  stats), "output_dir".
  """
  options = ClassifierOptions(**kwargs)
  policy = keras.config.dtype_policy()
  if options.mixed_precision:
    if options.mixed_precision not in ("mixed_bfloat16", "mixed_float16"):
      raise ValueError("--mixed_precision must be '', mixed_bfloat16 or "
                       f"mixed_float16, got {options.mixed_precision!r}")
    keras.config.set_dtype_policy(options.mixed_precision)
  try:
    return _run(options)
  finally:
    keras.config.set_dtype_policy(policy)


def _run(options):

  if not (options.do_train or options.do_eval or options.do_predict):
    raise ValueError("Nothing to do: set --do_train, --do_eval or --do_predict")
  spec = make_task(options)
  config = load_model_config(options)
  tokenizer = load_tokenizer(options.spm_model_file, options.vocab_file,
                             options.do_lower_case)
  if tokenizer.vocab_size > config.vocab_size:
    raise ValueError(
        f"tokenizer {tokenizer.model_file} has {tokenizer.vocab_size} tokens "
        f"but the model config has vocab_size={config.vocab_size}")
  if options.max_seq_length > config.max_position_embeddings:
    raise ValueError(f"--max_seq_length={options.max_seq_length} exceeds "
                     "max_position_embeddings="
                     f"{config.max_position_embeddings}")
  os.makedirs(options.output_dir, exist_ok=True)
  keras.utils.set_random_seed(options.seed)
  input_keys = ("input_ids", "input_mask", "segment_ids")

  model = AlbertClassifier(config, spec.num_labels,
                           classifier_dropout=options.classifier_dropout)
  if options.init_checkpoint:
    report = restore_init_checkpoint(options.init_checkpoint, model)
    _log(f"Restored {options.init_checkpoint}: {report}")
  elif options.do_train:
    _log("No --init_checkpoint: training from random initialisation")

  config.to_json_file(os.path.join(options.output_dir, CONFIG_FILE))
  tokenizer_copy = os.path.join(options.output_dir,
                                os.path.basename(tokenizer.model_file))
  if os.path.abspath(tokenizer_copy) != os.path.abspath(tokenizer.model_file):
    shutil.copyfile(tokenizer.model_file, tokenizer_copy)
  with open(os.path.join(options.output_dir, "classifier_config.json"), "w",
            encoding="utf-8") as f:
    json.dump({"task_name": spec.name, "num_labels": spec.num_labels,
               "label_list": list(spec.label_list or []),
               "is_regression": spec.is_regression,
               "max_seq_length": options.max_seq_length,
               "tokenizer_file": os.path.basename(tokenizer.model_file),
               "tokenizer_kind": tokenizer.kind,
               "do_lower_case": options.do_lower_case}, f, indent=2)

  ckpt = checkpoints.make_checkpoint(model)  # encoder + classifier_head
  manager = tf.train.CheckpointManager(ckpt, options.output_dir,
                                       max_to_keep=1)
  result = {"output_dir": options.output_dir, "data": {}}

  # One trace for every batch size (the last batch is smaller).
  batch_spec = {k: tf.TensorSpec([None, None], tf.int32) for k in input_keys}
  label_spec = tf.TensorSpec([None], tf.float32 if spec.is_regression
                             else tf.int32)

  @tf.function(input_signature=[batch_spec], autograph=False)
  def predict_step(batch):
    return model(batch, training=False)["logits"]

  def predict(features):
    outputs = [predict_step(b).numpy() for b in _batches(
        features, options.eval_batch_size, input_keys)]
    return (np.concatenate(outputs) if outputs else
            np.zeros([0, spec.num_labels], np.float32))

  dev = None
  if options.do_eval:
    dev = load_split(spec, options, tokenizer, "dev", options.max_eval_examples)
    result["data"]["dev"] = dev[2]
    if not dev[3]:
      raise ValueError(f"{dev[2]['file']}: the dev split needs labels for "
                       "--do_eval")

  def evaluate():
    return cd.compute_metrics(spec, dev[1]["label_ids"], predict(dev[1]))

  best, best_step = None, None
  if options.do_train:
    _, train, stats, has_labels = load_split(spec, options, tokenizer, "train",
                                             options.max_train_examples)
    result["data"]["train"] = stats
    if not has_labels:
      raise ValueError(f"{stats['file']}: the train split needs labels")
    n = len(train["input_ids"])
    steps_per_epoch = max(1, math.ceil(n / options.train_batch_size))
    num_steps = options.train_step or max(
        1, int(math.ceil(steps_per_epoch * options.num_train_epochs)))
    warmup = (options.warmup_step if options.warmup_step >= 0 else
              int(0.1 * num_steps))
    eval_every = options.eval_every_steps or steps_per_epoch
    optimizer, schedule = build_optimizer(options, model, num_steps, warmup)
    # Slots created outside tf.function: one trace of train_step, not two.
    optimizer.build(model.trainable_variables)
    if spec.is_regression:
      loss_fn = lambda y, logits: tf.reduce_mean(
          tf.square(logits[:, 0] - tf.cast(y, tf.float32)))
    else:
      loss_fn = lambda y, logits: tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(
              tf.cast(y, tf.int32), logits))

    @tf.function(input_signature=[batch_spec, label_spec], autograph=False)
    def train_step(batch, labels):
      with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(batch, training=True)["logits"])
        scaled = (optimizer.scale_loss(loss)
                  if hasattr(optimizer, "scale_loss") else loss)
      grads = tape.gradient(scaled, model.trainable_variables)
      optimizer.apply(grads, model.trainable_variables)
      return loss

    _log(f"Training {num_steps} steps ({steps_per_epoch}/epoch, batch "
         f"{options.train_batch_size}, warmup {warmup}, lr "
         f"{options.learning_rate}) on {n} examples")
    rng = np.random.default_rng(options.seed)
    log_path = os.path.join(options.output_dir, "train_log.jsonl")
    start, step, losses = time.time(), 0, []
    with open(log_path, "w", encoding="utf-8") as log:
      while step < num_steps:
        order = rng.permutation(n)
        for begin in range(0, n, options.train_batch_size):
          idx = order[begin:begin + options.train_batch_size]
          batch = {k: train[k][idx] for k in input_keys}
          losses.append(float(train_step(batch, train["label_ids"][idx])))
          step += 1
          if options.log_every_steps and step % options.log_every_steps == 0:
            elapsed = time.time() - start
            recent = np.mean(losses[-options.log_every_steps:])
            _log(f"step {step}/{num_steps} loss {recent:.4f} ("
                 f"{step * options.train_batch_size / elapsed:.1f} examples/s)")
          if step % eval_every == 0 or step == num_steps:
            entry = {"step": step, "epoch": round(step / steps_per_epoch, 3),
                     "train_loss": float(np.mean(losses)),
                     "learning_rate": float(schedule(step)),
                     "elapsed_s": round(time.time() - start, 2)}
            losses = []
            if dev is not None:
              metrics = evaluate()
              entry["eval"] = metrics
              if best is None or metrics["eval_metric"] > best["eval_metric"]:
                best, best_step = metrics, step
                manager.save(checkpoint_number=step)
            log.write(json.dumps(entry) + "\n")
            log.flush()
            _log(json.dumps(entry))
          if step >= num_steps:
            break
    result["train_wall_s"] = round(time.time() - start, 2)
    result["num_train_steps"] = num_steps
    if dev is None:
      manager.save(checkpoint_number=step)
      best_step = step
    else:
      ckpt.restore(manager.latest_checkpoint).expect_partial()
  elif options.init_checkpoint is None:
    _log("WARNING: no training and no --init_checkpoint: evaluating an "
         "untrained model")

  if dev is not None:
    if best is None:
      best = evaluate()
    eval_results = {f"eval_{k}": v for k, v in best.items()
                    if k != "eval_metric"}
    eval_results["best_step"] = best_step
    result["eval"] = best
    _log(f"Eval (best step {best_step}): {best}")
  else:
    eval_results = {}
  result["best_step"] = best_step

  if options.do_predict:
    examples, test, stats, has_labels = load_split(spec, options, tokenizer,
                                                   "test")
    result["data"]["test"] = stats
    logits = predict(test)
    write_predictions(os.path.join(options.output_dir, "test_results.tsv"),
                      spec, logits)
    if has_labels:
      test_metrics = cd.compute_metrics(spec, test["label_ids"], logits)
      result["test"] = test_metrics
      eval_results.update({f"test_{k}": v for k, v in test_metrics.items()
                           if k != "eval_metric"})
      _log(f"Test: {test_metrics}")
  if eval_results:
    with open(os.path.join(options.output_dir, "eval_results.json"), "w",
              encoding="utf-8") as f:
      json.dump(eval_results, f, indent=2)
  return result


def write_predictions(path, spec, logits):
  """index \t prediction (label or score) [\t probability of each label]."""
  with open(path, "w", encoding="utf-8") as f:
    if spec.is_regression:
      f.write("index\tprediction\n")
      for i, value in enumerate(np.asarray(logits).reshape([-1])):
        f.write(f"{i}\t{value:.6f}\n")
      return
    f.write("index\tprediction\t" + "\t".join(
        f"prob_{label}" for label in spec.label_list) + "\n")
    z = logits - logits.max(-1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    for i, row in enumerate(probs):
      f.write(f"{i}\t{spec.label_list[int(row.argmax())]}\t" +
              "\t".join(f"{p:.6f}" for p in row) + "\n")


# ----------------------------------------------------------------- flags
FLAGS = flags.FLAGS


def define_flags():
  f = flags
  f.DEFINE_string("task_name", None, "sentiment, lcqmc, cola, sst-2, mrpc, "
                  "sts-b, qqp, mnli, qnli, rte or tsv")
  f.DEFINE_string("data_dir", None, "Directory with {train,dev,test} TSVs.")
  f.DEFINE_string("output_dir", None, "Where checkpoints and results go.")
  f.DEFINE_string("init_checkpoint", None, "Checkpoint (file prefix or "
                  "directory) in the project layout; see convert_checkpoint.")
  f.DEFINE_string("preset", None, "Model preset, e.g. albert_tiny_zh.")
  f.DEFINE_string("albert_config_file", None, "albert_config.json.")
  f.DEFINE_string("spm_model_file", None, "SentencePiece model.")
  f.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.")
  f.DEFINE_bool("do_lower_case", True, "Lowercase input text.")
  f.DEFINE_integer("max_seq_length", 128, "Tokens per example incl. "
                   "[CLS]/[SEP]; longer inputs are truncated and counted.")
  f.DEFINE_integer("train_batch_size", 32, "Training batch size.")
  f.DEFINE_integer("eval_batch_size", 64, "Eval/predict batch size.")
  f.DEFINE_float("learning_rate", 5e-5, "Peak AdamW learning rate.")
  f.DEFINE_float("num_train_epochs", 3.0, "Epochs (if --train_step=0).")
  f.DEFINE_integer("train_step", 0, "Training steps; overrides epochs.")
  f.DEFINE_integer("warmup_step", -1, "Warmup steps; -1: 10% of training.")
  f.DEFINE_enum("optimizer", "adamw", ["adamw", "lamb"], "Optimizer.")
  f.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay.")
  f.DEFINE_float("classifier_dropout", 0.1, "Dropout before the classifier.")
  f.DEFINE_bool("do_train", False, "Fine-tune on train.tsv.")
  f.DEFINE_bool("do_eval", False, "Evaluate on the dev split.")
  f.DEFINE_bool("do_predict", False, "Predict the test split.")
  f.DEFINE_integer("eval_every_steps", 0, "Eval interval; 0: every epoch.")
  f.DEFINE_integer("log_every_steps", 20, "Print the loss every N steps.")
  f.DEFINE_integer("max_train_examples", 0, "Use the first N train examples.")
  f.DEFINE_integer("max_eval_examples", 0, "Use the first N dev examples.")
  f.DEFINE_integer("seed", 12345, "Random seed.")
  f.DEFINE_string("mixed_precision", "", "mixed_bfloat16 or mixed_float16.")
  f.DEFINE_string("text_a_column", None, "tsv task: text_a column (header "
                  "name or 0-based index).")
  f.DEFINE_string("text_b_column", None, "tsv task: text_b column.")
  f.DEFINE_string("label_column", None, "tsv task: label column.")
  f.DEFINE_string("label_list", None, "tsv task: comma-separated labels; "
                  "empty means regression.")
  f.DEFINE_bool("has_header", None, "tsv task: first line is a header "
                "(default: when a column is given by name).")
  f.mark_flags_as_required(["task_name", "data_dir", "output_dir"])


def main(argv):
  del argv
  names = [f.name for f in dataclasses.fields(ClassifierOptions)]
  result = run(**{name: FLAGS[name].value for name in names})
  _log(json.dumps({k: v for k, v in result.items() if k != "data"},
                  default=str))


if __name__ == "__main__":
  define_flags()
  app.run(main)
