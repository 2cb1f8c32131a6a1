"""Console scripts (pyproject.toml [project.scripts]) beside `python -m`.

A command module defines its flags and runs only under `if __name__ ==
"__main__":`; a console script calls a zero-argument function. Each
function here runs its module as `python -m <module>` does (runpy, as
`__main__`), so a script runs exactly the module's own `__main__` code and
--help, and nothing here follows changes to it.

SCRIPTS is the one table; tests/test_packaging.py checks it against
pyproject.toml and the registry's families (a family without a command of
its own runs as `albert-finetune --task=<it>`). A module is imported only
when its script runs: importing this file loads neither TF nor Beam.
"""

import runpy

# Console script -> the module `python -m` runs.
SCRIPTS = {
    "albert-pretrain": "albert_tf.run_pretraining",
    "albert-finetune": "albert_tf.finetune",
    "albert-classify": "albert_tf.run_classifier",
    "albert-ner": "albert_tf.run_ner",
    "albert-squad": "albert_tf.run_squad",
    "albert-race": "albert_tf.run_race",
    "albert-export": "albert_tf.export_saved_model",
    "albert-export-tflite": "albert_tf.export_tflite",
    "albert-export-onnx": "albert_tf.export_onnx",
    "albert-export-keras-hub": "albert_tf.export_keras_hub",
    "albert-fill-mask": "albert_tf.fill_mask",
    "albert-predict": "albert_tf.predict",
    "albert-convert": "albert_tf.convert_checkpoint",
    "albert-train-vocab": "data_prep.train_vocab",
    "albert-create-data": "data_prep.create_pretraining_data",
    "albert-corpora": "data_prep.corpora",
    "albert-params": "albert_tf.params",
}


def run(name):
  """Runs console script `name` as `python -m <its module>` would."""
  runpy.run_module(SCRIPTS[name], run_name="__main__", alter_sys=True)


def _entry_point(name):
  def entry_point():
    run(name)
  entry_point.__doc__ = f"`{name}`: python -m {SCRIPTS[name]}"
  return entry_point


pretrain = _entry_point("albert-pretrain")
finetune = _entry_point("albert-finetune")
classify = _entry_point("albert-classify")
ner = _entry_point("albert-ner")
squad = _entry_point("albert-squad")
race = _entry_point("albert-race")
export = _entry_point("albert-export")
export_tflite = _entry_point("albert-export-tflite")
export_onnx = _entry_point("albert-export-onnx")
export_keras_hub = _entry_point("albert-export-keras-hub")
fill_mask = _entry_point("albert-fill-mask")
predict = _entry_point("albert-predict")
convert = _entry_point("albert-convert")
train_vocab = _entry_point("albert-train-vocab")
create_data = _entry_point("albert-create-data")
corpora = _entry_point("albert-corpora")
params = _entry_point("albert-params")
