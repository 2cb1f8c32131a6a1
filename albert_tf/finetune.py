r"""Fine-tune ALBERT on any registered task family or dataset.

    python -m albert_tf.finetune --task=lcqmc --data_dir=data/lcqmc \
        --output_dir=out/lcqmc --init_checkpoint=albert_tiny_zh \
        --do_train --do_eval --do_predict

--task is a family (classification, tagging, span_qa, multiple_choice, or
one of your own with --task_module) or a dataset registered by one (lcqmc,
afqmc, tnews, chid, c3, ...); `--task=<it> --help` lists that family's
flags. run_classifier, run_ner, run_squad and run_race are this command
with their family fixed, under the original's names and flags.

No published weights for the task's language: a vocabulary from the
task's own text (`python -m data_prep.task_text --task=<dataset>
--data_dir=DIR --output_file=text.txt`, then `data_prep.train_vocab
--input=text.txt --max_piece_length=1 --nohard_vocab_limit`, sized by the
characters the first command prints), optionally a budgeted pretraining
on that text, then this command with `--preset` and `--spm_model_file`:
docs/clue.md, "From the task's own text".

The recipe, the same for every family (`run`):
  1. the family's options: the dataset's values, then the flags given;
  2. what the model was fine-tuned with (task_record.json beside
     --init_checkpoint or in --output_dir) fills what the flags leave open
     (`Task.resolve_options`: the flag, else the record, else the default);
  3. the config and tokenizer (`training.resolution`), the task
     (`Task.from_options`), every split read (`Task.read_splits`) before
     anything is written;
  4. the one trainer (`training.finetuning.train_and_evaluate`): resume,
     the best checkpoint by the family's dev metric;
  5. dev metrics, test predictions, and eval_results.json, written by one
     writer with one schema (`finetuning.evaluate_and_predict`).
"""

import dataclasses
import json
import sys
from typing import Iterable, List

from absl import flags

from albert_tf.tasks import registry
from albert_tf.core import settings

# TensorFlow and what imports it (finetuning, resolution, runtime) are
# imported by the functions that run, not here: --help and a flag mistake
# answer before TF loads.


def run(task: str, task_module: Iterable[str] = (), **kwargs) -> dict:
  """Fine-tunes, evaluates and predicts; returns the run's results.

  task: a family or a dataset name (`registry.resolve`); kwargs: fields of
  the family's options dataclass (a dataset's values fill the ones not
  given). Returns a dict: "eval" (best dev metrics), "test" (test metrics
  when labelled), "best_step", "num_train_steps", "train_wall_s", "data"
  (split stats), "output_dir".
  """
  # pylint: disable=g-import-not-at-top
  from albert_tf.training import fast_path, finetuning, runtime
  for module in task_module or ():
    registry.import_task_module(module)
  family, dataset = registry.resolve(task)
  if family.options is None:
    raise ValueError(f"--task={task}: the {family.name} family is not "
                     "fine-tuned by this command")
  o = family.options(**{**(dataset.defaults if dataset else {}), **kwargs})
  finetuning.check_options(o)
  o = fast_path.resolve_options(o)
  with runtime.dtype_policy(o.mixed_precision):
    return _run(family, o)


def _run(family: registry.Family, o) -> dict:
  # pylint: disable=g-import-not-at-top
  from absl import logging
  from albert_tf.training import fast_path, finetuning, resolution, runtime
  strategy = runtime.strategy_from_flags(
      o.distribution_strategy, o.tpu, o.num_gpus, o.use_tpu, o.tpu_name,
      o.tpu_zone, o.gcp_project, o.num_tpu_cores, o.worker_timeout_secs)
  info = finetuning.recorded_info(o)
  o = family.task.resolve_options(o, info)
  config, tokenizer = finetuning.resolve_model(o)
  resolution.check_seq_length(o.max_seq_length, config)
  dataset = registry.datasets(family.name).get(o.task_name)
  task = family.task.from_options(o, tokenizer, info, dataset)
  task.length_buckets = o.length_buckets
  fast_path.say_length_buckets(o.length_buckets, o.max_seq_length)
  task.micro_batches = int(o.micro_batches)
  stats = task.read_splits(o)
  finetuning.check_test_split(o, stats)
  if o.do_train and not o.init_checkpoint and task.random_init_warning:
    logging.warning("%s", task.random_init_warning)
  return finetuning.train_and_evaluate(
      o, task, config, strategy, task.fingerprint(), stats,
      lambda trainer, chief, best_step: finetuning.evaluate_and_predict(
          o, task, trainer, chief, best_step))


def _print_result(result: dict) -> None:
  print(json.dumps({k: v for k, v in result.items() if k != "data"},
                   default=str), flush=True)


def alias(family_name: str):
  """(run, main) of a family's own command (run_classifier, ...): `run`
  with the family fixed, and the absl main of its flags."""
  def run_family(**kwargs):
    return run(family_name, **kwargs)

  def main(argv):
    del argv
    options_class = registry.family(family_name).options
    _print_result(run_family(**dataclasses.asdict(
        settings.from_flags(options_class))))

  run_family.__doc__ = (f"`albert_tf.finetune.run(task={family_name!r}, "
                        "**kwargs)`: kwargs are the family's option fields.")
  return run_family, main


def alias_main(family_name: str) -> None:
  """The `__main__` block of a family's own command."""
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  settings.define_flags(registry.family(family_name).options)
  cli_errors.run_main(alias(family_name)[1])


def _task_from_argv(argv) -> tuple:
  """(--task, [--task_module ...], --verbose) from argv and its flagfiles,
  before the family's flags exist."""
  pre = flags.FlagValues()
  flags.DEFINE_string("task", None, "", flag_values=pre)
  flags.DEFINE_multi_string("task_module", [], "", flag_values=pre)
  flags.DEFINE_boolean("verbose", False, "", flag_values=pre)
  try:
    pre(list(argv), known_only=True)
  except flags.Error:
    return None, [], False
  return pre.task, pre.task_module, pre.verbose


def _known_tasks() -> str:
  """The families and their datasets, for --task's help."""
  lines = []
  for name, f in sorted(registry.families().items()):
    if f.options is not None and f.task.name == name:  # not an alias
      names = sorted(registry.datasets(name))
      lines.append(f"{name}" + (f" ({', '.join(names)})" if names else ""))
  return "Families (datasets): " + "; ".join(lines)


@dataclasses.dataclass
class TaskChoice:
  """The flags that pick the family, beside the family's own."""
  task: str = settings.field(
      None, "Task family or registered dataset; `--task=<it> --help` lists "
      "its flags.", required=True)
  task_module: List[str] = settings.field(
      [], "Module (dotted name or file.py) that registers task families or "
      "datasets of your own; repeatable.", multi=True)


def main_cli(argv=None) -> None:
  """`python -m albert_tf.finetune`: --task picks the family, whose flags
  are then defined (a dataset's values as their defaults)."""
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  argv = list(sys.argv if argv is None else argv)
  task, modules, verbose = _task_from_argv(argv)
  try:
    for module in modules:
      registry.import_task_module(module)
    family, dataset = registry.resolve(task) if task else (None, None)
  except registry.TaskModuleError as e:  # the module's file, line, error
    if verbose:
      raise
    sys.exit(f"error: {e}")
  except registry.RegistryError as e:  # one line, as absl's flag errors
    sys.exit(f"FATAL Flags parsing error: {e}")
  task_help = settings.spec(next(f for f in dataclasses.fields(TaskChoice)
                                 if f.name == "task")).help
  settings.define_flags(TaskChoice,
                        helps={"task": f"{task_help} {_known_tasks()}"})
  options_class = None
  if family is not None:
    if family.options is None:
      raise SystemExit(f"FATAL Flags parsing error: --task={task}: the "
                       f"{family.name} family is not fine-tuned here")
    options_class = family.options
    settings.define_flags(options_class,
                          defaults=dataset.defaults if dataset else None)

  def main(argv_):
    del argv_
    # The option fields whose flags the command line (or a flagfile) gave.
    given = [(f.name, flags.FLAGS[settings.flag_name(f)]) for f in
             settings.flag_fields(options_class)] if options_class else []
    values = {name: flag.value for name, flag in given if flag.present}
    _print_result(run(flags.FLAGS.task, flags.FLAGS.task_module, **values))

  cli_errors.run_main(main)

if __name__ == "__main__":
  main_cli()
