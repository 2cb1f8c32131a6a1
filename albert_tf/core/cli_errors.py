"""One-line errors for every command line of the project (no TensorFlow).

A bad flag value, an unknown flag, a missing file or bad data prints one
line on stderr, `error: <what>, <where> (<hint>)`, and exits non-zero (2 for
command-line mistakes, 1 for file and data errors); --verbose, where a CLI
defines it, shows the traceback instead. TensorFlow is not imported here, so
data_prep's Beam workers and CLIs load this in no time; TF's own errors are
recognised when TF is already loaded. Ctrl-C (SIGINT) outside a training
loop (whose handler saves first) prints one line and exits 130, also when a
library swallowed the KeyboardInterrupt on the way (`errors.CtrlC`).

    app.run(one_line_errors(main), flags_parser=flags_parser)

--help and --helpshort print the `__main__` docstring and the flags the
command's settings classes define, by purpose (`grouped_help`), and exit 0;
--helpfull and --helpxml are absl's (every module's flags), exit 0 too.
"""

import contextlib
import functools
import logging
import os
import re
import signal
import sys
import textwrap
import threading

from absl import app
from absl import flags

from albert_tf.core import errors
from albert_tf.core import settings
from albert_tf.core.errors import (CommandLineError, describe_unknown_argument,
                              disk_error_line, error_line, out_of_memory_line)
from albert_tf.core.quiet_logs import import_tensorflow_quietly


def _print_error_and_exit(message, code):
  print("error: " + " ".join(str(message).split()), file=sys.stderr,
        flush=True)
  sys.exit(code)


def _expected_value(flag):
  if flag.boolean:
    return f"true or false, or --{flag.name} / --no{flag.name}"
  enum_values = getattr(flag.parser, "enum_values", None)
  if enum_values:
    return "one of " + ", ".join(enum_values)
  kind = flag.parser.syntactic_help or {
      "int": "an integer", "float": "a number"}.get(flag.flag_type(),
                                                     "a string")
  if not kind.startswith(("a ", "an ")):
    kind = ("an " if kind[0] in "aeiou" else "a ") + kind
  if flag.default is not None:
    kind += f", e.g. --{flag.name}={flag.default}"
  return kind


def describe_flag_error(error, flag_values=flags.FLAGS):
  """One line for an absl flags.Error (bad or missing value)."""
  text = " ".join(str(error).split())
  bad_value = re.match(r"flag --([^=\s]+)=(.*?): (.*)$", text)
  if bad_value and "must have a value other than None" in text:
    return error_line("missing", f"--{bad_value.group(1)}",
                      "this flag is required")
  if bad_value and bad_value.group(1) in flag_values:
    name, value, _ = bad_value.groups()
    return error_line(f"invalid value {value!r}", f"--{name}",
                      "expected " + _expected_value(flag_values[name]))
  missing = re.match(r"Missing value for flag --(\S+)$", text)
  if missing and missing.group(1) in flag_values:
    name = missing.group(1)
    return error_line("missing value", f"--{name}",
                      "expected " + _expected_value(flag_values[name]))
  return error_line(text, hint="--helpshort lists the flags")


def flag_names(flag_values=flags.FLAGS):
  """Names a user may write after "--", including --noNAME of booleans."""
  names = set(flag_values)
  names.update("no" + n for n in flag_values if flag_values[n].boolean)
  return names


_SHORT_HELP_FLAGS = ("-?", "-help", "--help", "-helpshort", "--helpshort")
_HELP_FLAGS = _SHORT_HELP_FLAGS + ("-helpfull", "--helpfull", "-helpxml",
                                   "--helpxml")


def _shown(value):  # as written on the command line
  if isinstance(value, bool):
    return str(value).lower()
  if isinstance(value, (list, tuple)):
    value = ",".join(str(v) for v in value)
  return str(value) if value != "" else '""'


def _number(bound):
  return f"{bound:g}" if isinstance(bound, float) else str(bound)


def flag_help_line(name, spec, flag, width=80):
  """`--name: help (default: X)`, wrapped to width (the lines after the
  first indented under the name). flag: the absl Flag (its kind, default)."""
  notes = ["required"] if spec.required else []
  if spec.choices:
    notes.append("one of " + ", ".join(spec.choices))
  low, high = spec.lower_bound, spec.upper_bound
  if low is not None and high is not None:
    notes.append(f"{_number(low)} to {_number(high)}")
  elif low is not None:
    notes.append(f"at least {_number(low)}")
  elif high is not None:
    notes.append(f"at most {_number(high)}")
  # A help that says its default ("default: last") says it better.
  if (flag.default is not None and not spec.required and
      "default:" not in spec.help):
    # No line break inside "default: X" (textwrap breaks at ASCII spaces).
    notes.append("default:\xa0" + _shown(flag.default))
  if spec.multi:
    notes.append("repeat for several")
  text = (f"--[no]{name}" if flag.boolean else f"--{name}") + ": " + (
      " ".join(spec.help.split()))
  if notes:
    text += f" ({'; '.join(notes)})"
  return textwrap.fill(text, width, initial_indent="  ",
                       subsequent_indent="      ", break_long_words=False,
                       break_on_hyphens=False).replace("\xa0", " ")


def grouped_help(flag_values=flags.FLAGS, width=None):
  """--help's text: the `__main__` docstring, then the settings classes'
  flags by group; None when no class defined any (absl's help then)."""
  groups = settings.flag_groups(flag_values)
  if not groups:
    return None
  width = width or max(40, min(flags.get_help_width(), 100))
  main = sys.modules.get("__main__")
  doc = (getattr(main, "__doc__", None) or
         f"USAGE: {sys.argv[0]} [flags]").strip("\n")
  lines = [doc, "", "Flags by purpose (--helpfull lists every flag, absl's "
           "too):"]
  for group, listed in groups.items():
    lines += ["", f"{group.capitalize()} flags:"]
    lines += [flag_help_line(name, spec, flag_values[name], width)
              for name, spec in listed]
  return "\n".join(lines)


def shipped_flagfile(path):
  """The shipped configs/NAME.flags (albert_tf/configs in a wheel, the
  repository's configs/ in a checkout) when `path` is not on disk, or None.
  """
  parts = os.path.normpath(path).split(os.sep)
  if os.path.exists(path) or len(parts) != 2 or parts[0] != "configs":
    return None
  package = os.path.dirname(os.path.abspath(__file__))
  for folder in (os.path.join(package, "configs"),
                 os.path.join(os.path.dirname(package), "configs")):
    candidate = os.path.join(folder, parts[1])
    if os.path.isfile(candidate):
      return candidate
  return None


def flags_parser(argv, other_options=None):
  """A flags parser for app.run that reports a mistake in one line.

  other_options(args) -> (unknown args, option names) lets a module accept
  further options (Beam's) among the arguments absl does not know; it may
  raise ValueError for a bad value of one of them.
  --help and --helpshort print `grouped_help` and exit 0, whatever else
  the command line holds. --flagfile=configs/NAME.flags finds the shipped
  flagfiles from any directory (`shipped_flagfile`).
  """
  # absl reads the flagfile itself: it gets the shipped copy's path.
  argv = list(argv)
  for i, arg in enumerate(argv):
    name, eq, value = arg.partition("=")
    found = shipped_flagfile(value) if (
        eq and name in ("--flagfile", "-flagfile")) else None
    argv[i] = f"{name}={found}" if found else arg
  # absl parses no flag after "--".
  flag_args = argv[1:argv.index("--")] if "--" in argv else argv[1:]
  if any(a in _SHORT_HELP_FLAGS for a in flag_args):
    text = grouped_help()
    if text is not None:
      print(text, flush=True)
      sys.exit(0)
  # An unknown flag first: it may be the misspelt name of a required one.
  named = [a for a in argv[1:] if a.startswith("--") and a != "--"]
  # absl reads --flagfile and --undefok itself; they are no defined flags.
  unknown = [a for a in named
             if a[2:].split("=", 1)[0] not in flag_names() | {"flagfile",
                                                              "undefok"}]
  if unknown and other_options is not None:
    try:
      unknown, _ = other_options(unknown)
    except ValueError:
      pass  # a bad value of an accepted option: reported below
  if unknown and other_options is None:
    _print_error_and_exit(describe_unknown_argument(unknown[0], flag_names()),
                          2)
  try:
    rest = flags.FLAGS(argv, known_only=True)
  except SystemExit as e:
    # absl's --helpfull and --helpxml (and --help of a command without
    # settings classes) print the usage, then exit 1: asked for, help is no
    # failure.
    if e.code == 1 and any(a.split("=", 1)[0] in _HELP_FLAGS
                           for a in argv[1:]):
      sys.exit(0)
    raise
  except flags.Error as e:
    if unknown:  # other_options did not take it either
      _print_error_and_exit(describe_unknown_argument(unknown[0],
                                                      flag_names()), 2)
    _print_error_and_exit(describe_flag_error(e), 2)
  extra, other_names = rest[1:], ()
  if other_options is not None and extra:
    try:
      unknown, other_names = other_options(extra)
    except ValueError as e:
      _print_error_and_exit(e, 2)
  else:
    unknown = extra
  if unknown:
    _print_error_and_exit(describe_unknown_argument(
        unknown[0], flag_names() | set(other_names)), 2)
  return rest[:1] + extra


# Ctrl-C outside a training loop (whose own handler saves a checkpoint
# first): the exit code of a process SIGINT ended, as a shell reports it.
SIGINT_EXIT_CODE = 128 + 2
STOPPED_BY_CTRL_C = "stopped by Ctrl-C (SIGINT) before it finished"
# A Ctrl-C that a library swallowed (errors.CtrlC) in a command that then
# ran to its end.
CTRL_C_CAME_LATE = ("Ctrl-C (SIGINT) came during a step that could not be "
                    "stopped, and the command ran to its end: its output is "
                    "complete")


def _verbose():
  return "verbose" in flags.FLAGS and flags.FLAGS.verbose


def _note_ctrl_c(number, frame):
  errors.CtrlC.received = True
  signal.default_int_handler(number, frame)  # raises KeyboardInterrupt


def _no_ctrl_c_traceback(record):
  # Beam's DirectRunner logs one for the bundle it stopped; the command's
  # one line says it.
  kind = record.exc_info[0] if record.exc_info else None
  return not (kind and issubclass(kind, KeyboardInterrupt))


@contextlib.contextmanager
def _noting_ctrl_c():
  """Python's Ctrl-C handler, also noting it (errors.CtrlC), unless SIGINT
  is not Python's (nohup, the caller's own); no logged KeyboardInterrupt
  tracebacks unless --verbose."""
  errors.CtrlC.received = False
  installed = (threading.current_thread() is threading.main_thread() and
               signal.getsignal(signal.SIGINT) is signal.default_int_handler)
  if installed:
    signal.signal(signal.SIGINT, _note_ctrl_c)
  quiet = _no_ctrl_c_traceback
  handlers = [] if _verbose() else list(logging.getLogger().handlers)
  for handler in handlers:
    handler.addFilter(quiet)
  try:
    yield
  finally:
    for handler in handlers:
      handler.removeFilter(quiet)
    if installed:
      signal.signal(signal.SIGINT, signal.default_int_handler)


def one_line_errors(main_fn, also=()):
  """Wraps an absl main: ValueError/OSError (and the exception classes in
  `also`) print one line, or, with --verbose, the traceback; Ctrl-C prints
  one line and exits 130 (--verbose: the traceback)."""
  @functools.wraps(main_fn)
  def wrapped(argv):
    try:
      return _run_one_line(main_fn, argv, also)
    finally:
      # The note is this command's: a later one in the same process (a
      # script, a test run) starts without it.
      errors.CtrlC.received = False

  return wrapped


def _run_one_line(main_fn, argv, also):
  try:
    with _noting_ctrl_c():
      result = main_fn(argv)
    if errors.CtrlC.received:  # swallowed on the way: no exit code 0
      _print_error_and_exit(CTRL_C_CAME_LATE, SIGINT_EXIT_CODE)
    return result
  except errors.Interrupted as e:
    _print_error_and_exit(e, e.exit_code)
  except KeyboardInterrupt:
    if _verbose():
      raise
    _print_error_and_exit(STOPPED_BY_CTRL_C, SIGINT_EXIT_CODE)
  except Exception as e:  # pylint: disable=broad-except
    # The error a swallowed Ctrl-C became (a library's own, or one a step
    # after it met): the Ctrl-C is what stopped the command.
    if errors.CtrlC.received and not _verbose():
      _print_error_and_exit(STOPPED_BY_CTRL_C, SIGINT_EXIT_CODE)
    disk = disk_error_line(e)
    if disk and not _verbose():
      _print_error_and_exit(disk, 1)
    oom = out_of_memory_line(e)
    if oom and not _verbose():
      # Straight out: after an OOM, interpreter teardown has hung, or
      # aborted in TF's allocator ("double free or corruption").
      print("error: " + oom, file=sys.stderr, flush=True)
      sys.stdout.flush()
      os._exit(1)  # pylint: disable=protected-access
    if not isinstance(e, (ValueError, OSError) + tuple(also)) and (
        not errors.is_tf_error(e)):
      raise
    if _verbose():
      raise
    message = getattr(e, "message", None) or e  # TF's OpError: no op text
    _print_error_and_exit(message, 2 if isinstance(e, CommandLineError)
                          else 1)


def run_main(main_fn, other_options=None, also=(), quiet_tensorflow=None):
  """`app.run` with one-line flag and run errors (see the module doc).

  quiet_tensorflow: import TF before main_fn with its start-up lines hidden
  (`import_tensorflow_quietly`), unless --verbose; default: for the
  albert_tf commands (data_prep's load no TF).
  """
  if quiet_tensorflow is None:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    quiet_tensorflow = bool(spec and spec.name.startswith("albert_tf."))
  # Every command's --verbose (unless its settings class has one), listed
  # by --helpfull under the command.
  settings.define_flags(settings.CommandSettings, group=sys.argv[0],
                        if_missing=True)

  def main(argv):
    if quiet_tensorflow and not _verbose():
      import_tensorflow_quietly()
    return main_fn(argv)

  app.run(one_line_errors(functools.wraps(main_fn)(main), also),
          flags_parser=functools.partial(flags_parser,
                                         other_options=other_options))
