"""A registered dataset's own text, for a vocabulary and pretraining.

  python -m data_prep.task_text --task=bustm_0 \
      --data_dir=FewCLUE/datasets/bustm --output_file=out/bustm/text.txt

For a task without published weights in its language (docs/clue.md, "From
the task's own text"): the texts of the dataset's --splits (default its
train split), read by the dataset's reader as `albert-finetune --task`
reads them (`Task.read_dataset`; labels are not read into the text), and
FewCLUE's unlabeled.json beside them when there is one (its rules allow it
in pretraining). Each example (or unlabeled line) is one document, split
into sentences as `data_prep.fewclue_unlabeled` splits one, in the
pretraining layout: one sentence per line, a blank line between documents.
`data_prep.train_vocab` and `data_prep.create_pretraining_data` read it.
Dev and test texts are left out unless --splits names them. The command
prints the counts and the distinct characters after the tokenizer's
normalisation (a vocabulary of characters, train_vocab --max_piece_length=1,
holds at most that many pieces plus 6: the 5 special ones and "▁").
"""

import dataclasses
import json
import os
from typing import List, Optional

from albert_tf.core import cli_errors
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.data import clue
from albert_tf.data import tokenization
from albert_tf.core.file_io import atomic_writer
from data_prep import fewclue_unlabeled


def _unlabeled_fields(dataset_name: str):
  """The text fields of the FewCLUE task's unlabeled.json, or None."""
  base = dataset_name.rsplit("_", 1)[0] if dataset_name not in (
      clue.FEWCLUE_TASKS) else dataset_name
  task = clue.FEWCLUE_TASKS.get(base)
  return clue.UNLABELED_FIELDS.get(task[3]) if task else None


def write_task_text(task: str, data_dir: str, output_file: str,
                    splits=("train",)) -> dict:
  """Writes the text of `task`'s splits (and unlabeled.json) to
  output_file; returns {"documents", "sentences", "characters", per source
  "examples"/"lines"}."""
  family, dataset = registry.resolve(task)
  if dataset is None:
    raise CommandLineError(error_line(
        f"{task} is a task family, not a dataset", "--task",
        "name a registered dataset, e.g. --task=bustm_0"))
  found = family.task.read_dataset(dataset, data_dir)
  if found is None:
    raise CommandLineError(error_line(
        f"the {dataset.family} family's datasets are not read here",
        "--task", "a CLUE or FewCLUE classification dataset"))
  missing = [s for s in splits if s not in found]
  if missing:
    raise CommandLineError(error_line(
        f"no {', '.join(missing)} file of {task} in {data_dir}", "--data_dir",
        f"{task} reads " + ", ".join(
            f"{s}: {'/'.join(dataset.spec.files[s])}"
            for s in missing if s in dataset.spec.files)))
  documents: List[List[str]] = []
  sizes = {}
  for split in splits:
    examples = found[split][0]
    documents += [[t for t in (e.text_a, e.text_b) if t] for e in examples]
    sizes[split] = {"examples": len(examples)}
  fields = _unlabeled_fields(dataset.name)
  unlabeled = os.path.join(data_dir, clue.UNLABELED_FILE)
  if fields and os.path.isfile(unlabeled):
    before = len(documents)
    documents += [texts for _, texts in clue.unlabeled_texts(unlabeled,
                                                             fields)]
    sizes[clue.UNLABELED_FILE] = {"lines": len(documents) - before}
  written, sentences, characters = 0, 0, set()
  os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
  with atomic_writer(output_file) as out:
    for texts in documents:
      lines = fewclue_unlabeled.document(texts)
      if not lines:
        continue
      out.write(("\n" if written else "") + "\n".join(lines) + "\n")
      written += 1
      sentences += len(lines)
      # As the vocabulary sees them (train_vocab normalises first).
      characters.update(c for line in lines for c in tokenization.normalize(
          line, "sentencepiece", True) if not c.isspace())
  return dict(sizes, documents=written, sentences=sentences,
              characters=len(characters))


@dataclasses.dataclass
class TaskTextSettings:
  """The command line of data_prep.task_text; the fields are the flags."""
  task: Optional[str] = settings.field(
      None, "A registered dataset (afqmc, tnews, bustm_0, ...: docs/clue.md).")
  data_dir: Optional[str] = settings.field(
      None, "The dataset's folder, as albert-finetune --data_dir.")
  output_file: Optional[str] = settings.field(
      None, "The text file written (one sentence per line, a blank line "
      "between documents).")
  splits: List[str] = settings.field(
      ["train"], "The splits whose texts are written (train, dev, test; "
      "FewCLUE's unlabeled.json is always added).")


def main(argv):
  del argv
  s = settings.from_flags(TaskTextSettings)
  for name, example in (("task", "bustm_0"),
                        ("data_dir", "FewCLUE/datasets/bustm"),
                        ("output_file", "out/bustm/text.txt")):
    if not getattr(s, name):
      raise CommandLineError(error_line(
          "a required flag is missing", f"--{name}",
          f"e.g. --{name}={example}"))
  sizes = write_task_text(s.task, s.data_dir, s.output_file, s.splits)
  print(json.dumps(sizes, ensure_ascii=False))
  print(f"wrote {s.output_file}: {sizes['documents']} documents, "
        f"{sizes['characters']} distinct characters (a vocabulary of "
        "characters, train_vocab --max_piece_length=1 --nohard_vocab_limit, "
        f"holds at most {sizes['characters'] + 6} pieces: those, the 5 "
        "special ones and the word start)")


if __name__ == "__main__":
  settings.define_flags(TaskTextSettings)
  cli_errors.run_main(main)
