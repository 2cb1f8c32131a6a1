"""The data sets the family commands have always read, under their names.

    albert-finetune --task=lcqmc --data_dir=data/lcqmc ...
    albert-finetune --task=cmrc2018 --data_dir=data/cmrc2018 ...

Their layouts are the family readers' own tables (classifier_data.TASKS
for the TSV sets, conll, squad_metrics and race for the others); this file
only gives each one its --task name.
"""

from albert_tf.tasks import registry
from albert_tf.data import classifier_data, conll, race, squad_metrics

for _name, _spec in classifier_data.TASKS.items():
  registry.register_dataset(
      _name, "classification", spec=_spec,
      help=f"{_name} TSV files ({'scores' if _spec.is_regression else ', '.join(_spec.label_list)})")
for _name in conll.TASK_NAMES:
  registry.register_dataset(_name, "tagging", help=f"{_name} CoNLL files")
for _name in squad_metrics.TASK_NAMES:
  registry.register_dataset(_name, "span_qa",
                            help=f"{_name} (SQuAD JSON, its metric)")
for _name in race.TASK_NAMES:
  registry.register_dataset(_name, "multiple_choice", help="RACE's layout")
