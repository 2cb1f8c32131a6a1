"""Exceptions that the library raises and the commands turn into one line.

Defined at the bottom layer so that the trainer raises what
`cli_errors.one_line_errors` catches without importing the command layer.
"""


class CtrlC:
  """Whether Ctrl-C (SIGINT) came during this command, noted by the
  handler `cli_errors.one_line_errors` installs before the interpreter
  raises KeyboardInterrupt. A library that turns a KeyboardInterrupt into
  an error of its own and goes on (TensorFlow's C++ layers below a Python
  callback, then tf2onnx's `except Exception`) loses the exception, not
  this note: a command checks it before it puts its output in place
  (`stop_if_ctrl_c`), and the wrapper at its end."""
  received = False


def stop_if_ctrl_c():
  """Raises KeyboardInterrupt when a Ctrl-C came and was swallowed: for a
  command about to put its output in place (a rename)."""
  if CtrlC.received:
    raise KeyboardInterrupt


class Interrupted(Exception):
  """A run that stopped on a signal after saving (a SIGTERM before a
  preemption, a Ctrl-C): one line, and the exit code of a process the
  signal ended (143, 130 for SIGINT), so a scheduler sees the job as not
  finished."""
  exit_code = 128 + 15

  def __init__(self, message, signal_name=None):
    super().__init__(message)
    if signal_name == "SIGINT":
      self.exit_code = 128 + 2
