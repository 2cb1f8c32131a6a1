"""Exceptions that the library raises and the one-line messages of errors.

Defined at the bottom layer so that the trainer raises what
`cli_errors.one_line_errors` catches, and data_prep words its errors as the
commands do (`error_line`), without importing the command layer. No
TensorFlow import: a TensorFlow error is recognised when TF is loaded.
"""

import difflib
import os
import re
import sys

from absl import flags


class CtrlC:
  """Whether Ctrl-C came during this command (`cli_errors`' handler notes
  it): a library that swallows the KeyboardInterrupt does not lose this."""
  received = False


def stop_if_ctrl_c():
  """Raises KeyboardInterrupt when a Ctrl-C came and was swallowed: for a
  command about to put its output in place (a rename)."""
  if CtrlC.received:
    raise KeyboardInterrupt


class Interrupted(Exception):
  """A run that stopped on a signal after saving: one line, and the exit
  code of a process the signal ended (143; 130 for SIGINT)."""
  exit_code = 128 + 15

  def __init__(self, message, signal_name=None):
    super().__init__(message)
    if signal_name == "SIGINT":
      self.exit_code = 128 + 2


class ClusterError(ValueError):
  """A cluster the run needs does not answer, or went away (one line)."""


class CommandLineError(ValueError):
  """A mistake on the command line: exit code 2 instead of 1."""


def error_line(what, where=None, hint=None):
  """`<what>, <where> (<hint>)`, the text after "error: "."""
  return (what + (f", {where}" if where else "")
          + (f" ({hint})" if hint else ""))


def describe_unknown_argument(arg, known_names):
  """One line for an argument no parser accepted, with the closest flag."""
  if not arg.startswith("-"):
    return error_line(f"unexpected argument {arg!r}",
                      hint="flags take the form --name=value")
  name = arg.lstrip("-").split("=", 1)[0]
  close = difflib.get_close_matches(name, list(known_names), n=1, cutoff=0.75)
  return f"unknown flag --{name} " + (
      f"(did you mean --{close[0]}?)" if close
      else "(--helpshort lists the flags)")


# The flags a user lowers when memory runs out, in the order worth trying.
_MEMORY_FLAGS = ("train_batch_size", "eval_batch_size", "max_seq_length")


def out_of_memory_line(error):
  """For TF's out-of-memory error (thousands of characters of allocator
  state): one line naming the batch and length flags to lower; else None."""
  text = str(getattr(error, "message", None) or error)
  if disk_error_line(error):  # TF's class for a full disk too
    return None
  if not (type(error).__name__ == "ResourceExhaustedError" or
          "Out of memory while trying to allocate" in text or
          "OOM when allocating" in text):
    return None
  size = re.search(r"allocate ([\d.]+\s*[KMGT]i?B)", text)
  knobs = [f"--{n}={flags.FLAGS[n].value}" for n in _MEMORY_FLAGS
           if n in flags.FLAGS and flags.FLAGS[n].value is not None]
  return error_line(
      "out of memory" + (f": TensorFlow could not allocate {size.group(1)}"
                         if size else ""),
      hint=("lower " + " or ".join(knobs) if knobs else
            "lower the batch size or the sequence length") +
      "; --verbose shows TensorFlow's message")


# The causes TF's file systems put after "PATH; " (errno's strerror).
# Only a write meets these (a read's "Permission denied" is no write error).
_DISK_CAUSES = ("No space left on device", "Disk quota exceeded",
                "File too large", "Read-only file system")


def disk_error_line(error):
  """For TF's error from a file write (`PATH; No space left on device`, a
  ResourceExhaustedError): `[Errno 28] No space left on device: cannot
  write PATH`; else None."""
  if not is_tf_error(error):
    return None
  text = " ".join(str(getattr(error, "message", None) or error).split())
  for cause in _DISK_CAUSES:
    if cause not in text:
      continue
    found = re.search(r"(?:^|\s)(\S+); " + re.escape(cause), text)
    if not found:
      return text
    number = next((n for n in range(1, 134) if os.strerror(n) == cause),
                  None)
    return (f"[Errno {number}] " if number else "") + (
        f"{cause}: cannot write {found.group(1)}")
  return None


def is_tf_error(error):
  """Whether `error` is TensorFlow's (without importing TensorFlow)."""
  tf = sys.modules.get("tensorflow")
  return tf is not None and isinstance(error, tf.errors.OpError)
