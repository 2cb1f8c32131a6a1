"""The one exception every converter raises for a checkpoint that does not fit.

Kept in its own module so that the per-source readers and the original-name
mapping can all raise it without importing each other.
"""


class ConversionError(ValueError):
  """A checkpoint that does not fit the config (names the variable/shapes)."""
