r"""Pretraining step throughput: albert_tf vs keras-hub AlbertBackbone, one run.

    python -m benchmarks.pretrain_throughput            # tiny_zh + base_v2
    python -m benchmarks.pretrain_throughput --quick    # tiny_zh only, fewer reps

Both sides run the same training step: same shapes (batch x seq 128, 20
masked positions), same loss (weighted MLM cross entropy + 2-way SOP cross
entropy on the pooled output), same optimizer (LAMB, our schedule), under
one tf.function (optionally XLA). For each (model, precision, jit) we time
`--reps` repetitions of `--steps` steps after warmup and report the median
and the min-max spread of examples/s and tokens/s; ratios compare medians
measured in the same process. Results go to stdout and a JSON file.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from albert_tf.training import optimization  # noqa: E402
from albert_tf.core.config import AlbertConfig  # noqa: E402
from albert_tf.modeling.models import AlbertPretrainer, pretraining_losses  # noqa: E402

SEQ = 128
PRED = 20


def make_batch(batch, vocab, seed=0):
  rng = np.random.default_rng(seed)
  positions = np.sort(np.stack([rng.choice(np.arange(1, SEQ), PRED, False)
                                for _ in range(batch)]), axis=1)
  return {
      "input_ids": tf.constant(rng.integers(5, vocab, (batch, SEQ)), tf.int32),
      "input_mask": tf.ones((batch, SEQ), tf.int32),
      "segment_ids": tf.constant(
          (np.arange(SEQ) >= SEQ // 2)[None].repeat(batch, 0), tf.int32),
      "masked_lm_positions": tf.constant(positions, tf.int32),
      "masked_lm_ids": tf.constant(rng.integers(5, vocab, (batch, PRED)),
                                   tf.int32),
      "masked_lm_weights": tf.ones((batch, PRED), tf.float32),
      "next_sentence_labels": tf.constant(rng.integers(0, 2, (batch, 1)),
                                          tf.int32),
  }


def ours(config):
  model = AlbertPretrainer(config)

  def forward(batch, training):
    return model({k: batch[k] for k in ("input_ids", "input_mask",
                                        "segment_ids", "masked_lm_positions")},
                 training=training)
  return model, forward


def keras_hub_model(config):
  backbone = keras_hub.models.AlbertBackbone(
      vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
      num_heads=config.num_attention_heads,
      embedding_dim=config.embedding_size, hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size, num_groups=1,
      num_inner_repetitions=1, dropout=0.0, max_sequence_length=SEQ)
  mlm = keras_hub.layers.MaskedLMHead(
      vocabulary_size=config.vocab_size,
      token_embedding=backbone.token_embedding,
      intermediate_activation="gelu", dtype=backbone.dtype_policy)
  sop = keras.layers.Dense(2, dtype=backbone.dtype_policy)

  def forward(batch, training):
    out = backbone({"token_ids": batch["input_ids"],
                    "segment_ids": batch["segment_ids"],
                    "padding_mask": batch["input_mask"]}, training=training)
    return {"mlm_logits": tf.cast(mlm(out["sequence_output"],
                                      batch["masked_lm_positions"]),
                                  tf.float32),
            "sop_logits": tf.cast(sop(out["pooled_output"]), tf.float32)}

  return [backbone, mlm, sop], forward


def time_side(build, config, batch_size, jit, steps, reps, warmup):
  modules, forward = build(config)
  batch = make_batch(batch_size, config.vocab_size)
  forward(batch, False)  # build variables
  modules = modules if isinstance(modules, list) else [modules]
  variables = [v for m in modules for v in m.trainable_variables]
  variables = list({id(v): v for v in variables}.values())
  optimizer = optimization.create_optimizer(
      "lamb", optimization.WarmupPolynomialDecay(1e-4, 10**6, 10))
  optimizer.build(variables)

  @tf.function(jit_compile=jit)
  def step(batch):
    with tf.GradientTape() as tape:
      loss = pretraining_losses(forward(batch, True), batch)["loss"]
    optimizer.apply(tape.gradient(loss, variables), variables)
    return loss

  for _ in range(warmup):
    loss = step(batch)
  assert np.isfinite(float(loss))
  rates = []
  for _ in range(reps):
    start = time.perf_counter()
    for _ in range(steps):
      loss = step(batch)
    float(loss)  # wait for the last step
    rates.append(steps * batch_size / (time.perf_counter() - start))
  return {"examples_per_s_median": statistics.median(rates),
          "examples_per_s_min": min(rates), "examples_per_s_max": max(rates),
          "tokens_per_s_median": statistics.median(rates) * SEQ,
          "reps": reps, "steps": steps, "batch": batch_size}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="albert_tiny_zh only, 3 reps of 3 steps")
  parser.add_argument("--presets", default="albert_tiny_zh,albert_base_v2")
  parser.add_argument("--precisions", default="float32,bfloat16")
  parser.add_argument("--jit", default="off,on")
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--output", default="benchmarks/results/"
                      "pretrain_throughput.json")
  args = parser.parse_args()
  presets = args.presets.split(",")
  reps, steps = args.reps, args.steps
  if args.quick:
    presets, reps, steps = ["albert_tiny_zh"], 3, 3
  batches = {"albert_tiny_zh": 32, "albert_base_v2": 8}
  rows = []
  for preset in presets:
    config = AlbertConfig.from_preset(preset).replace(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    for precision in args.precisions.split(","):
      keras.mixed_precision.set_global_policy(
          "float32" if precision == "float32" else "mixed_bfloat16")
      for jit in [j == "on" for j in args.jit.split(",")]:
        for side, build in (("albert_tf", ours),
                            ("keras_hub", keras_hub_model)):
          result = time_side(build, config, batches.get(preset, 8), jit,
                             steps, reps, warmup=2)
          row = {"preset": preset, "precision": precision, "jit": jit,
                 "model": side, **result}
          rows.append(row)
          print(f"{preset:15s} {precision:8s} jit={str(jit):5s} {side:9s} "
                f"{result['examples_per_s_median']:8.2f} ex/s "
                f"[{result['examples_per_s_min']:.2f}-"
                f"{result['examples_per_s_max']:.2f}] "
                f"{result['tokens_per_s_median']:9.0f} tok/s", flush=True)
  keras.mixed_precision.set_global_policy("float32")

  def median(preset, precision, jit, model):
    for r in rows:
      if (r["preset"], r["precision"], r["jit"], r["model"]) == (
          preset, precision, jit, model):
        return r["examples_per_s_median"]
    return None

  ratios = []
  for preset in presets:
    for jit in [j == "on" for j in args.jit.split(",")]:
      for precision in args.precisions.split(","):
        a = median(preset, precision, jit, "albert_tf")
        b = median(preset, precision, jit, "keras_hub")
        if a and b:
          ratios.append({"preset": preset, "jit": jit, "precision": precision,
                         "ours_over_keras_hub": a / b})
      f32 = median(preset, "float32", jit, "albert_tf")
      bf16 = median(preset, "bfloat16", jit, "albert_tf")
      if f32 and bf16:
        ratios.append({"preset": preset, "jit": jit,
                       "ours_bfloat16_over_float32": bf16 / f32})
  for r in ratios:
    print(json.dumps(r))
  os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
  with open(args.output, "w", encoding="utf-8") as f:
    json.dump({"rows": rows, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
  main()
