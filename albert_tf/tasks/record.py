"""The task record's old import place; it is `albert_tf.record` (the base
layer: serving reads it and tasks write it)."""

from albert_tf.record import *  # noqa: F401,F403  pylint: disable=wildcard-import,unused-wildcard-import
from albert_tf.record import (LEGACY_RECORD_FILES, RECORD_FILE,  # noqa: F401
                              ModelInfo, read_beside, tokenizer_fields)
