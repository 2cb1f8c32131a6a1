"""Named datasets of the task families, each registered where it is read.

A dataset is a `registry.register_dataset(name, family, spec=..., **option
defaults)` call: `albert-finetune --task=<name>` then runs its family with
those options. The modules here are imported by `registry.load_builtins`
(no list); `classic.py` names the data sets the commands read already,
`clue.py` CLUE 1.1's and FewCLUE's official layouts.
"""
