r"""Long-run training parity of albert_tf with HF torch and the original's LAMB
(issue 49, part 1). Not part of `make test`; no test imports it.

    python -m benchmarks.long_parity [--steps=2000] [--seeds=12345,54321] \
        [--eval_every=250] [--resume_at=1000] [--noise_floor_seeds=12345] \
        [--input_file=demo_output/tfrecords/train/*.tfrecord,demo_output/tfrecords/reviews/*.tfrecord] \
        [--eval_input_file=demo_output/tfrecords/heldout/*.tfrecord]
    python -m benchmarks.long_parity --from_json=benchmarks/results/long_parity_<cpu>.json

`benchmarks/step_parity.py` checks 25 steps of random batches to float
rounding; this trains long enough for the curves to mean something: the
demo's model and recipe on the demo's own records, on both sides, from the
same initial weights and batches, and asks whether the held-out curves
agree within the spread that the seed alone makes.

Per seed (the seed sets the initial weights and the order of the batches;
within one seed both sides share both):

* the batches: `--steps` training batches of 32 x 64 (10 prediction slots)
  read once through the project's pretraining task
  (`registry.family("pretraining").task(...).build_inputs("train", ...)`:
  `pretraining_dataset.make_distributed_dataset`, shuffle buffer 1000,
  task seed = the seed, as `run_pretraining` builds it) from the records
  data prep wrote (static masks, masked_lm_weights 0 on empty slots, SOP
  labels), after `record_checks.check_records_dirs` checked their
  manifests against --spm_model_file; the same numpy batches are fed to
  both sides. The held-out batches: the task's eval input (the first
  `--eval_batches` batches of `--eval_batch_size` of --eval_input_file, in
  file order), identical for every seed and side.
* ours: `Trainer(task, config, TrainerSettings(optimizer="lamb", ...))`
  builds the model (`AlbertPretrainer`, preset albert_zh_l4_h128, vocab
  size from --spm_model_file), the schedule (`WarmupPolynomialDecay`), the
  optimizer (`create_optimizer("lamb")`, `exclude_layer_norm_and_bias`),
  compiles it and makes the checkpoint object, and `trainer.restore()`
  runs; then Keras `fit` trains the model on the numpy batches, one step
  per epoch so that each step's loss is logged exactly (the trainer's own
  `train()` reads the files itself, with one epoch per checkpoint
  interval), and `trainer.evaluate()` (the task's eval: Keras `evaluate`
  on the held-out files) runs at step 0 and every `--eval_every` steps.
* the peer: HF `AlbertForPreTraining` (eager attention, gelu_new, dropout
  0) with the initial weights copied from ours through the HF converter's
  name map (`parity_reference.parameter_pairs`); the loss computed as the
  original does (the sequence output gathered at masked_lm_positions, then
  the MLM head, cross-entropy weighted by masked_lm_weights over
  sum(weights) + 1e-5, plus the mean SOP cross-entropy); the update is
  `parity_reference.OriginalRule("lamb")`, a torch port of google-research/
  albert's LAMBOptimizer after its global-norm clip to 1.0, at the
  original schedule (`parity_reference.original_lr`). Eval: the same held-out
  batches, MLM accuracy and loss weighted by masked_lm_weights over the
  whole set, SOP accuracy and loss over its examples.
* the noise floor (`--noise_floor_seeds`): a second HF model with PyTorch's
  SDPA attention instead of the eager one, trained in lockstep with the
  first: a change of float rounding only. How far it drifts from the eager
  model is how far rounding alone carries two correct implementations apart
  over this run.

Resume leg (the first seed, `--resume_at`): the uninterrupted run saves the
trainer's checkpoint (`trainer.manager`: encoder, heads, optimizer
variables, step) at `--resume_at`; afterwards a new Trainer is built on the
same output directory under another Keras seed, `restore()` resumes from
that checkpoint, and fit continues on the same batches from there. The
report gives the largest difference of its per-step losses and eval
figures from the uninterrupted run's. (The trainer's real `train()` would
read new batches after a resume: the task re-seeds its input by the step.)

Report: per eval point the three held-out figures of both sides and seeds,
the cross-side differences |ours - HF| (same seed) and the seed spread
|seed 1 - seed 2| (same side); the sides agree at a point when, for each
figure, the cross-side difference of both seeds is no larger than the
smaller of the two sides' seed spreads (strict), else when no larger than
the larger one (lenient). The per-step relative loss difference
|ours - HF| / |HF| of every step is in the .json, and the first step where
it exceeds 1e-6, 1e-4, 1e-2 and 1e-1 (and the noise floor's) in the .md.
Also the mix of the two record directories in each seed's stream, and
whether held-out sequences occur among the training records. Writes
benchmarks/results/long_parity_<cpu-tag>.{md,json} (tmp + replace);
`--from_json` rewrites the .md from a .json. Exits 1 when the sides do not
agree within the seed spread (strict) at some eval point.
Peers: `pip install -r benchmarks/requirements-peers.txt`.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks.common import cpu_bf16_features
from benchmarks.common import write_atomically
from benchmarks.long_parity_data import expand
from benchmarks.long_parity_data import make_task
from benchmarks.long_parity_data import read_batches
from benchmarks.long_parity_data import source_index
from benchmarks.long_parity_data import stream_mix
from benchmarks.long_parity_data import text_rows
from benchmarks.long_parity_report import analyse
from benchmarks.long_parity_report import compact
from benchmarks.long_parity_report import dumps
from benchmarks.long_parity_report import report
from benchmarks.long_parity_train import fix_projection
from benchmarks.long_parity_train import make_trainer
from benchmarks.long_parity_train import train_hf
from benchmarks.long_parity_train import train_ours
from benchmarks.parity_reference import OriginalRule
from benchmarks.parity_reference import copy_ours_to_hf
from benchmarks.parity_reference import exclusion_check
from benchmarks.parity_reference import hf_config
from benchmarks.parity_reference import parameter_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_INPUT = ("demo_output/tfrecords/train/*.tfrecord,"
                 "demo_output/tfrecords/reviews/*.tfrecord")
DEFAULT_EVAL = "demo_output/tfrecords/heldout/*.tfrecord"


# ------------------------------------------------------------ one seed
def run_seed(args, config, strategy, seed, eval_data, work_dir, floor, index,
             dirs):
  # pylint: disable=g-import-not-at-top
  import transformers
  print(f"seed {seed}: reading {args.steps} batches", flush=True)
  task = make_task(args, seed)
  began = time.perf_counter()
  data = read_batches(task.build_inputs("train", strategy, args.batch_size),
                      args.steps)
  read_seconds = time.perf_counter() - began
  output_dir = os.path.join(work_dir, f"ours_seed{seed}")
  trainer = make_trainer(args, config, task, strategy, output_dir, seed)
  if trainer.step:
    raise AssertionError(f"{output_dir} already holds step {trainer.step}")

  # The peer starts from our initial weights.
  models = {"eager": transformers.AlbertForPreTraining(
      hf_config(config))}
  trainable = fix_projection(models["eager"], config)
  pairs = parameter_pairs(trainer.model, trainable)
  copy_ours_to_hf(pairs, trainable)
  exclusions = exclusion_check(pairs, trainer.model.optimizer, OriginalRule(
      trainable.named_parameters(), "lamb"))
  if floor:
    models["sdpa"] = transformers.AlbertForPreTraining(
        hf_config(config, attention="sdpa"))
    models["sdpa"].load_state_dict(models["eager"].state_dict())
    fix_projection(models["sdpa"], config)
  for m in models.values():
    m.train()

  print(f"seed {seed}: ours", flush=True)
  save_at = args.resume_at if seed == args.seeds[0] and args.resume_at else None
  ours = train_ours(trainer, data, args, save_at=save_at, label=f"seed {seed}")
  print(f"seed {seed}: HF ({', '.join(models)})", flush=True)
  peers = train_hf(models, data, eval_data, args, label=f"seed {seed}")
  result = {"seed": seed, "read_seconds": round(read_seconds, 1),
            "ours": ours, "hf": peers["eager"],
            "hf_sdpa": peers.get("sdpa"), "exclusions": exclusions,
            "mix": stream_mix(data, index, dirs, args.eval_every)
            if index is not None else None}
  if save_at:
    print(f"seed {seed}: resume from step {save_at}", flush=True)
    resumed = make_trainer(args, config, task, strategy, output_dir,
                           seed + 1000003)
    if resumed.step != save_at:
      raise AssertionError(f"resumed at step {resumed.step}, not {save_at}")
    result["resumed"] = train_ours(resumed, data, args,
                                   label=f"seed {seed} resumed")
    result["resumed"]["checkpoint"] = ours["checkpoint"]
  return result


# ------------------------------------------------------------ main
def _commit():
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True, check=True
                          ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def _uncommitted():
  """`git status --porcelain` lines of albert_tf/ (the code that ran, when
  it is not the commit's)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    return subprocess.run(
        ["git", "status", "--porcelain", "--", "albert_tf"], cwd=ROOT,
        capture_output=True, text=True, check=True).stdout.splitlines()
  except (OSError, subprocess.CalledProcessError):
    return None


def write_results(result, results_dir):
  os.makedirs(results_dir, exist_ok=True)
  stem = os.path.join(results_dir, f"long_parity_{result['cpu']['tag']}")
  markdown = report(result)
  write_atomically(stem + ".json", dumps(result) + "\n")
  write_atomically(stem + ".md", markdown)
  return stem, markdown


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--steps", type=int, default=2000,
      help="Training steps per run; also the schedule's num_train_steps.")
  add("--warmup_steps", type=int, default=300)
  add("--learning_rate", type=float, default=0.01, help="Peak lr (LAMB).")
  add("--batch_size", type=int, default=32)
  add("--seq_length", type=int, default=64)
  add("--predictions", type=int, default=10,
      help="max_predictions_per_seq of the records.")
  add("--seeds", default="12345,54321",
      help="Comma-separated; each sets the initial weights and the batch "
      "order (the task's shuffle seed); the report compares the first two.")
  add("--eval_every", type=int, default=250)
  add("--eval_batches", type=int, default=30)
  add("--eval_batch_size", type=int, default=64)
  add("--resume_at", type=int, default=1000,
      help="The first seed's run saves the trainer's checkpoint here and a "
      "second run resumes from it (0: no resume leg).")
  add("--noise_floor_seeds", default=None,
      help="Seeds whose peer also trains an SDPA-attention HF model in "
      "lockstep (default: the first seed; 'none' for none).")
  add("--preset", default="albert_zh_l4_h128")
  add("--spm_model_file", default="demo_output/vocab/spm.model",
      help="Sets vocab_size (8000 for the demo's) and is checked against "
      "the records' manifests.")
  add("--input_file", default=DEFAULT_INPUT)
  add("--eval_input_file", default=DEFAULT_EVAL)
  add("--shuffle_buffer_size", type=int, default=1000)
  add("--source_mix", default=True, action=argparse.BooleanOptionalAction,
      help="Report the mix of --input_file directories per window of steps "
      "and the held-out examples found among the training records (one "
      "pass over the training records).")
  add("--threads", type=int, default=1, help="torch intra-op threads.")
  add("--work_dir", default=None,
      help="Where the trainer's checkpoints go (default: a temporary "
      "directory, removed at the end).")
  add("--results_dir", default=os.path.join(ROOT, "benchmarks", "results"))
  add("--from_json", default=None,
      help="Only rewrite the .md (beside it) from this .json.")
  args = parser.parse_args(argv)

  if args.from_json:
    with open(args.from_json, encoding="utf-8") as f:
      result = json.load(f)
    markdown = report(result)
    write_atomically(os.path.splitext(args.from_json)[0] + ".md", markdown)
    print(markdown)
    return 0 if result["agree_strict"] else 1

  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  os.chdir(ROOT)
  args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  floor_seeds = ([args.seeds[0]] if args.noise_floor_seeds is None else
                 [] if args.noise_floor_seeds == "none" else
                 [int(s) for s in args.noise_floor_seeds.split(",")])
  if args.resume_at and not 0 < args.resume_at < args.steps:
    parser.error("--resume_at must lie between 0 and --steps")

  # pylint: disable=g-import-not-at-top
  import torch
  from albert_tf.data import record_checks
  from albert_tf.training import resolution
  from albert_tf.training import runtime
  from benchmarks.serving_latency import cpu_info
  torch.set_num_threads(args.threads)
  cpu = cpu_info()
  features = cpu_bf16_features()
  cpu["bf16_grep"] = next(
      (f for f in ("amx_bf16", "avx512_bf16") if features[f]), "")
  commit, uncommitted = _commit(), _uncommitted()  # the code that runs
  load_start = os.getloadavg()
  started = time.perf_counter()
  strategy = runtime.make_strategy("default")
  config, _ = resolution.resolve_model(
      args.preset, spm_model_file=args.spm_model_file,
      require_tokenizer=False)
  resolution.check_seq_length(args.seq_length, config)
  for pattern, flag in ((args.input_file, "--input_file"),
                        (args.eval_input_file, "--eval_input_file")):
    record_checks.check_records_dirs(
        expand(pattern), args.seq_length, args.predictions,
        spm_model_file=args.spm_model_file, flag=flag)
  eval_data = read_batches(make_task(args, args.seeds[0]).build_inputs(
      "eval", strategy, args.eval_batch_size))
  if len(eval_data["input_ids"]) != args.eval_batches or any(
      len(b) != args.eval_batch_size for b in eval_data["input_ids"]):
    raise ValueError(f"the held-out input gave {len(eval_data['input_ids'])} "
                     f"batches, {args.eval_batches} full ones wanted")
  index = dirs = overlap = None
  if args.source_mix:
    index, dirs = source_index(args)
    rows = [r for b in range(args.eval_batches) for r in text_rows(
        {k: eval_data[k][b] for k in eval_data})]
    overlap = {"examples": len(rows),
               "in_train": int(sum(r in index for r in rows))}

  work_dir = args.work_dir or tempfile.mkdtemp(prefix="long_parity_")
  seeds = []
  try:
    for seed in args.seeds:
      seeds.append(run_seed(args, config, strategy, seed, eval_data,
                            work_dir, seed in floor_seeds, index, dirs))
  finally:
    if not args.work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)

  argv_shown = " ".join(argv if argv is not None else sys.argv[1:])
  weights = float(eval_data["masked_lm_weights"].sum())
  result = {
      "command": f"python -m benchmarks.long_parity {argv_shown}".strip(),
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "commit": commit, "uncommitted_at_start": uncommitted, "cpu": cpu, "cpu_count": os.cpu_count(),
      "load_start": load_start, "load_end": os.getloadavg(),
      "versions": {d: importlib.metadata.version(d) for d in (
          "tensorflow", "keras", "torch", "transformers", "numpy")},
      "torch_threads": torch.get_num_threads(),
      "args": {k: v for k, v in vars(args).items()},
      "model": (f"preset {args.preset} (L{config.num_hidden_layers} sharing "
                f"one block, H {config.hidden_size}, E "
                f"{config.embedding_size}, {config.num_attention_heads} "
                f"heads, FFN {config.intermediate_size}, tanh GELU), vocab "
                f"{config.vocab_size} from {args.spm_model_file}; a random "
                "Keras initialisation per seed, copied into HF"),
      "data": (f"{args.steps} batches of {args.batch_size} × "
               f"{args.seq_length} tokens ({args.predictions} prediction "
               f"slots) per seed from {args.input_file}, read once by the "
               "pretraining task's input (shuffle buffer "
               f"{args.shuffle_buffer_size}, task seed = the seed) and fed "
               "to both sides"),
      "schedule": (f"LAMB, peak lr {args.learning_rate:g}, linear warmup over "
                   f"{args.warmup_steps} steps then linear decay to 0 at "
                   f"step {args.steps}; weight decay 0.01, global-norm clip "
                   "1.0, beta 0.9 / 0.999, epsilon 1e-6"),
      "eval_set": (f"the first {args.eval_batches} batches of "
                   f"{args.eval_batch_size} of {args.eval_input_file} "
                   f"({args.eval_batches * args.eval_batch_size} examples, "
                   f"{weights:.0f} masked tokens), at step 0 and every "
                   f"{args.eval_every} steps"),
      "heldout_overlap": overlap,
      "seconds": round(time.perf_counter() - started, 1),
      "seeds": seeds}
  compact(analyse(result))
  stem, markdown = write_results(result, args.results_dir)
  print(markdown)
  print(f"wrote {stem}.json and {stem}.md")
  return 0 if result["agree_strict"] else 1


if __name__ == "__main__":
  sys.exit(main())
