"""Task families: one file each, registered in it (`albert_tf.tasks.registry`).

    from albert_tf.tasks import registry
    family = registry.family("classification")
    task = family.task(spec, tokenizer, data_dir, 128)
    trainer = Trainer(task, config, settings, strategy)

A family is one file here: a `Task` subclass (`tasks/base.py`, with its
serving half `tasks/serving.py`) carrying `@registry.register_family(name,
options=...)`. The commands and `albert_tf.load` find it through the
registry; docs/finetuning.md says how to add one, here or in a module of
your own (--task_module).
"""
