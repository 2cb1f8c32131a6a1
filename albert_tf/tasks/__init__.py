"""Task families: one file each, one line each in `TASKS`.

    task = tasks.TASKS["classification"](spec, tokenizer, data_dir, 128)
    trainer = Trainer(task, config, settings, strategy)

To add a family (token tagging, span QA, ...): write
`albert_tf/tasks/<family>.py` with a `Task` subclass (see `tasks/base.py`
for what it declares) and add its line below; docs/finetuning.md says more.
"""

from albert_tf.tasks.base import Task
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.tasks.pretraining import PretrainingTask
from albert_tf.tasks.tagging import TaggingTask

TASKS = {
    "pretraining": PretrainingTask,
    "classification": ClassificationTask,
    # Same family with one output and squared error (sts-b, tsv scores).
    "regression": ClassificationTask,
    # Token tagging (NER) on CoNLL files.
    "tagging": TaggingTask,
}

__all__ = ["TASKS", "Task", "ClassificationTask", "PretrainingTask",
           "TaggingTask"]
