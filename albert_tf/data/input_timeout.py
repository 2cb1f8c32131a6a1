"""Reads that may block, watched: an error naming the input, not a hang.

TensorFlow-free, so that data prep (and its Beam workers) can use it
without importing TF: pretraining (`run_pretraining`, over
`albert_tf.data.record_checks`) and data prep (`data_prep.reading`) both
run their first reads through `with_input_timeout`; the fine-tuning
families read each split's file through `read_within`.
"""

import threading
import time
from typing import Callable


# --input_timeout_secs's default (pretraining, data prep, fine-tuning).
DEFAULT_SECS = 600


class InputFileError(ValueError):
  """A TFRecord file is missing, unreadable or disagrees with the flags."""


class InputTimeoutError(InputFileError):
  """An input read made no progress within --input_timeout_secs."""


def with_input_timeout(fn: Callable, timeout_secs: float,
                       flag: str = "--input_timeout_secs"):
  """fn(progress) in a helper thread; an error if it stalls, not a hang.

  fn calls progress(what) before each read that may block (a file's first
  record, the first training batch); InputTimeoutError names `what` when
  the next call or fn's return does not come within timeout_secs of it. A
  blocked read (a named pipe without a writer, a hung network mount)
  cannot be interrupted from Python: the helper thread (a daemon) is left
  behind and the caller gets the error. Nothing is watched after fn
  returns, so a slow but working run is never stopped later.

  Returns fn's value; fn's exception is re-raised. timeout_secs <= 0 calls
  fn directly.
  """
  if timeout_secs <= 0:
    return fn(lambda what: None)
  state = {"what": "the input files", "since": time.monotonic()}
  outcome = {}

  def progress(what):
    state["what"], state["since"] = what, time.monotonic()

  def target():
    try:
      outcome["value"] = fn(progress)
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e
  thread = threading.Thread(target=target, name="input-check", daemon=True)
  thread.start()
  while thread.is_alive():
    waited = time.monotonic() - state["since"]
    if waited >= timeout_secs:
      raise InputTimeoutError(
          f"no record from {state['what']} within {flag}={timeout_secs:g} "
          "seconds: the read made no progress (a named pipe without a "
          "writer, a hung network mount, a file still being written, or a "
          f"very slow one?); fix the input, or raise {flag} (0: no limit)")
    thread.join(min(timeout_secs - waited, 0.2))
  if "error" in outcome:
    raise outcome["error"]
  return outcome.get("value")


def read_within(what: str, fn: Callable, timeout_secs: float,
                flag: str = "--input_timeout_secs"):
  """fn() (one whole read, e.g. a split's file) within timeout_secs, for
  readers that report no progress of their own: InputTimeoutError names
  `what` after that (the default, 600 s, is ample for any fine-tuning
  file); timeout_secs <= 0 calls fn directly."""
  def watched(progress):
    progress(what)
    return fn()
  return with_input_timeout(watched, timeout_secs, flag)
