"""Task families: one file each, one line each in `TASKS`.

    task = tasks.TASKS["classification"](spec, tokenizer, data_dir, 128)
    trainer = Trainer(task, config, settings, strategy)

A family is one file here and one line below. Its `Task` subclass
(`tasks/base.py` says what it declares) builds its model, whose
`checkpoint_items` name what the trainer checkpoints; says what it records
beside the checkpoints (`record()`: task_record.json, `tasks/record.py`);
and says what export_saved_model serves (`export_name`, `export_model`,
`export_signatures`). Nothing else lists heads, checkpoint parts or export
kinds. To add one: write `albert_tf/tasks/<family>.py`, add
its line below, and, when it has a command of its own, that command's file
and its console-script line in `albert_tf/cli.py`; docs/finetuning.md says
more.
"""

from albert_tf.tasks.base import Task
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.tasks.multiple_choice import MultipleChoiceTask
from albert_tf.tasks.pretraining import PretrainingTask
from albert_tf.tasks.span_qa import SpanQATask
from albert_tf.tasks.tagging import TaggingTask

TASKS = {
    "pretraining": PretrainingTask,
    "classification": ClassificationTask,
    # Same family with one output and squared error (sts-b, tsv scores).
    "regression": ClassificationTask,
    # Token tagging (NER) on CoNLL files.
    "tagging": TaggingTask,
    # Reading comprehension: SQuAD v1.1/v2.0, CMRC 2018, DRCD spans.
    "span_qa": SpanQATask,
    # Reading comprehension: RACE's four options per question.
    "multiple_choice": MultipleChoiceTask,
}

__all__ = ["TASKS", "Task", "ClassificationTask", "MultipleChoiceTask",
           "PretrainingTask", "SpanQATask", "TaggingTask"]
