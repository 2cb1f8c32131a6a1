"""Modules imported on first use, so that a family file loads no TF to register.

    tf = lazy.module("tensorflow")
    models = lazy.module("albert_tf.modeling.models")
    ...
    def build_model(self, config):
      return models.AlbertClassifier(config, ...)   # imports here

`albert_tf.tasks.registry` imports every family file to list the families (for
--help); the import of what they name through this happens when a method
first uses it. The standard library's `importlib.util.LazyLoader` swaps the
module's class while TensorFlow's own lazy loaders run; a proxy that
imports by name and forwards attribute access is the simpler rule.
"""

import importlib
import types


class _LazyModule(types.ModuleType):
  """Imports `__name__` at the first attribute access and forwards to it."""

  def __getattr__(self, attr):
    module = importlib.import_module(self.__name__)
    self.__dict__["_module"] = module
    return getattr(module, attr)

  def __dir__(self):
    return dir(importlib.import_module(self.__name__))


def module(name: str) -> types.ModuleType:
  """A stand-in for `import name` that imports it when first used."""
  return _LazyModule(name)
