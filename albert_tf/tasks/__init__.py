"""Task families: one file each, registered in it (`albert_tf.tasks.registry`).

    from albert_tf.tasks import registry
    family = registry.family("classification")
    task = family.task(spec, tokenizer, data_dir, 128)
    trainer = Trainer(task, config, settings, strategy)

A family is one file here. Its `Task` subclass (`tasks/base.py` says what
it declares) carries `@registry.register_family(name, options=...)`: the
dataclass whose fields are its flags, the model whose `checkpoint_items`
name what the trainer checkpoints, what it records beside the checkpoints
(`record()`: task_record.json, `core/record.py`), what a SavedModel serves
(`export_signatures`), how raw inputs are encoded and outputs decoded for
`albert_tf.load(...).predict`, and its TFLite inputs. `albert-finetune
--task=<name>`, export_saved_model, export_tflite and `albert_tf.load` find
it through the registry; no other file lists families. docs/finetuning.md
says how to add one, here or in a module of your own (--task_module).
"""
