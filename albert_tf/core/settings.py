"""A command's settings as one dataclass whose fields are its absl flags.

Each field says its flag once: the type annotation gives the kind of flag,
`field` the default, the help and the rest, and the command line and the
Python API read the same definition:

    @dataclasses.dataclass
    class ExportSettings:
      checkpoint: str = settings.field(None, "Checkpoint prefix.",
                                       required=True)
      quantize: str = settings.field("dynamic", "Quantization.",
                                     choices=["none", "dynamic"])
      top_k: int = settings.field(5, "Pieces per mask.", lower_bound=1)

    if __name__ == "__main__":
      settings.define_flags(ExportSettings)
      app.run(lambda argv: run(settings.from_flags(ExportSettings)))

Annotation -> flag: str string (enum with choices), int integer, float,
bool boolean, List[str] list (multi_string with multi=True, for values
with commas); Optional[X] is X with the default None (worked out later). A
required field is keyword-only, without a Python default.

Why this is written here: absl has no dataclass binding; ml_collections'
`DEFINE_config_dataclass` would rename every flag of the original scripts
(`--config.train_batch_size=...`), and fiddle's call graphs are a heavier
model than a flat set of flags. No TensorFlow here: data_prep imports this.
"""

import dataclasses
import typing
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import flags

# The flags defined here belong to the module that calls define_flags, as if
# it had called DEFINE_* itself: a command's flags are its key flags, listed
# under its name by --helpfull.
flags.disclaim_key_flags()

_KEY = "albert_tf.core.settings"

# The purposes --help groups flags by, in its order.
GROUPS = ("data", "model", "training", "output", "distribution", "runtime")

# The group of a flag name whose purpose is the same in every command; any
# other name is "data" (what is read and how it becomes examples) unless its
# field says `group=`.
_GROUP_OF_NAME = {
    **dict.fromkeys(("preset", "presets", "albert_config_file",
                     "init_checkpoint", "checkpoint", "spm_model_file",
                     "vocab_file", "vocab_size", "do_lower_case", "model",
                     "num_labels"), "model"),
    **dict.fromkeys(("do_train", "do_eval", "do_predict", "learning_rate",
                     "train_batch_size", "eval_batch_size",
                     "predict_batch_size", "num_train_epochs", "train_step",
                     "num_train_steps", "warmup_step", "num_warmup_steps",
                     "warmup_proportion", "optimizer", "weight_decay",
                     "poly_power", "classifier_dropout", "eval_every_steps",
                     "eval_every_checkpoint", "max_eval_steps"), "training"),
    **dict.fromkeys(("output_dir", "output_file", "output", "export_dir",
                     "model_prefix", "overwrite", "version", "num_shards",
                     "keep_checkpoint_max", "save_checkpoints_steps",
                     "log_steps", "log_every_steps"), "output"),
    **dict.fromkeys(("distribution_strategy", "tpu", "num_gpus", "use_tpu",
                     "tpu_name", "tpu_zone", "gcp_project", "num_tpu_cores"),
                    "distribution"),
    **dict.fromkeys(("mixed_precision", "jit_compile", "iterations_per_loop",
                     "num_threads", "input_timeout_secs",
                     "progress_interval_secs", "verbose"), "runtime"),
}

# (flag_values, class) for every define_flags call: what --help lists.
_DEFINED: List[Tuple[flags.FlagValues, type, dict, dict]] = []


@dataclasses.dataclass(frozen=True)
class FlagSpec:
  """What `field` records in a field's metadata."""
  default: Any
  help: str
  choices: Optional[Sequence[str]] = None
  required: bool = False
  flag: Optional[str] = None
  lower_bound: Optional[float] = None
  upper_bound: Optional[float] = None
  multi: bool = False
  group: Optional[str] = None


def field(default, help, *, choices=None, required=False, flag=None,  # pylint: disable=redefined-builtin
          lower_bound=None, upper_bound=None, multi=False, group=None):
  """A dataclass field that is also an absl flag.

  Args:
    default: the flag's default and the field's (a required field has no
      Python default; its flag default must be None, as absl wants).
    help: the flag's help text.
    choices: the values of a str field (an enum flag).
    required: the flag must be given; the field has no default.
    flag: the flag name, when it is not the field name.
    lower_bound, upper_bound: the range of an int or float flag.
    multi: a List[str] field taken from a repeated flag (--text=a --text=b)
      instead of one comma-separated value.
    group: the purpose --help lists the flag under, one of GROUPS
      (default: `default_group` of the flag name).
  Returns:
    A dataclasses.field; a mutable default (a list) is copied per instance.
  Raises:
    ValueError: a group not in GROUPS, a required field with a default.
  """
  if group is not None and group not in GROUPS:
    raise ValueError(f"settings.field(group={group!r}): must be one of "
                     f"{', '.join(GROUPS)}")
  spec = FlagSpec(default, help, tuple(choices) if choices else None,
                  required, flag, lower_bound, upper_bound, multi, group)
  metadata = {_KEY: spec}
  if required:
    if default is not None:
      raise ValueError(f"settings.field(required=True): the default must be "
                       f"None, got {default!r}")
    return dataclasses.field(kw_only=True, metadata=metadata)
  if isinstance(default, (list, dict, set)):
    return dataclasses.field(default_factory=lambda: type(default)(default),
                             metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def spec(f: dataclasses.Field) -> Optional[FlagSpec]:
  """The FlagSpec of a field, or None for a field made without `field`."""
  return f.metadata.get(_KEY)


def flag_name(f: dataclasses.Field) -> str:
  """The flag of a field: its `flag=`, else the field name."""
  return spec(f).flag or f.name


def default_group(name: str) -> str:
  """The group of flag `name` when its field gives none."""
  return _GROUP_OF_NAME.get(name, "data")


def flag_fields(cls) -> List[dataclasses.Field]:
  """The fields of `cls` that are flags (made with `field`)."""
  return [f for f in dataclasses.fields(cls) if spec(f) is not None]


def _base_type(annotation):
  """X for Optional[X]; the annotation itself otherwise."""
  if typing.get_origin(annotation) is typing.Union:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if len(args) == 1:
      return args[0]
  return annotation


def define_flags(cls, flag_values=flags.FLAGS, group=None, defaults=None,
                 helps=None, if_missing=False):
  """Defines one absl flag per `field` of dataclass `cls` on flag_values.

  group: the module --helpfull lists them under (default: the caller's).
  defaults / helps: {field name: value / help text} replacing the fields'
  (a dataset's values; such a flag is not required). if_missing: skip the
  flags flag_values has. Raises TypeError naming a field whose annotation
  has no flag kind.
  """
  hints = typing.get_type_hints(cls)
  fields = [f for f in flag_fields(cls)
            if not (if_missing and flag_name(f) in flag_values)]
  for f in fields:
    s = _overridden(spec(f), f.name, defaults or {}, helps or {})
    kind = _base_type(hints[f.name])
    common = dict(flag_values=flag_values, module_name=group,
                  required=s.required)
    name = flag_name(f)
    if kind is bool:
      flags.DEFINE_boolean(name, s.default, s.help, **common)
    elif kind is str and s.choices:
      flags.DEFINE_enum(name, s.default, list(s.choices), s.help, **common)
    elif kind is str:
      flags.DEFINE_string(name, s.default, s.help, **common)
    elif kind in (int, float):
      define = flags.DEFINE_integer if kind is int else flags.DEFINE_float
      define(name, s.default, s.help, lower_bound=s.lower_bound,
             upper_bound=s.upper_bound, **common)
    elif typing.get_origin(kind) in (list, List) and typing.get_args(
        kind) == (str,):
      define = flags.DEFINE_multi_string if s.multi else flags.DEFINE_list
      define(name, s.default, s.help, **common)
    else:
      raise TypeError(f"{cls.__name__}.{f.name}: no flag kind for the "
                      f"annotation {hints[f.name]!r} (str, int, float, bool, "
                      "List[str], or Optional of one)")
  _DEFINED.append((flag_values, cls, dict(defaults or {}), dict(helps or {})))


def _overridden(s: FlagSpec, name: str, defaults: dict, helps: dict
                ) -> FlagSpec:
  if name in defaults:
    s = dataclasses.replace(s, default=defaults[name], required=False)
  if name in helps:
    s = dataclasses.replace(s, help=helps[name])
  return s


def flag_groups(flag_values=flags.FLAGS
                ) -> Dict[str, List[Tuple[str, FlagSpec]]]:
  """{group: [(flag name, FlagSpec)]} of the classes define_flags defined
  on flag_values: groups in GROUPS order (none empty), flags in field
  order. Empty when define_flags defined none there."""
  by_group = {name: [] for name in GROUPS}
  seen = set()
  for values, cls, defaults, helps in _DEFINED:
    if values is not flag_values:
      continue
    for f in flag_fields(cls):
      if flag_name(f) not in seen:
        seen.add(flag_name(f))
        by_group[spec(f).group or default_group(flag_name(f))].append(
            (flag_name(f), _overridden(spec(f), f.name, defaults, helps)))
  return {name: listed for name, listed in by_group.items() if listed}


def from_flags(cls, flag_values=flags.FLAGS, **overrides):
  """An instance of `cls` from parsed flags; `overrides` replace fields
  (and give those made without `field` that have no default)."""
  values = {f.name: flag_values[flag_name(f)].value for f in flag_fields(cls)}
  values.update(overrides)
  return cls(**values)


@dataclasses.dataclass
class CommandSettings:
  """The flag every command has, defined once by `cli_errors.run_main`
  (it reads it there: one line per error, or the traceback)."""
  verbose: bool = field(False, "Show the traceback of an error instead of "
                        "one line.")
