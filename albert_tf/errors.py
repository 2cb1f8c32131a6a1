"""Exceptions that the library raises and the commands turn into one line.

Defined at the bottom layer so that the trainer raises what
`cli_errors.one_line_errors` catches without importing the command layer.
"""


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
