"""FewCLUE's unlabeled.json files as pretraining text.

  python -m data_prep.fewclue_unlabeled --data_dir=FewCLUE/datasets \
      --output_dir=DIR [--tasks=eprstmt,bustm,...]
      DIR/unlabeled.txt in the pretraining layout (one sentence per line,
      a blank line between documents) and DIR/sizes.json.

FewCLUE ships unlabeled text beside each task's splits
(datasets/<task>/unlabeled.json, one JSON object per line) and its rules
allow it in pretraining and fine-tuning. Each line is one document: its
text fields (`albert_tf.data.clue.UNLABELED_FIELDS`: BUSTM's and OCNLI's
two sentences, the others' one text) split into sentences after 。！？!?
(`corpora.split_sentences`); a document that gives one sentence only is
split at clauses too (`corpora.split_clauses`, as the review corpus is), so
that sentence-order prediction has two segments; one that still has one
sentence is written anyway and counted (create_pretraining_data skips and
counts it). CHID's texts have #idiom# holes and CLUEWSC has none: not read.
A task directory without unlabeled.json is reported in sizes.json as
missing; a line that is not JSON or lacks a field stops the command with
file:line (`albert_tf.data.clue.unlabeled_texts`).

    python -m data_prep.create_pretraining_data \
        --input_file=DIR/unlabeled.txt ...
"""

import dataclasses
import json
import os
from typing import Dict, Iterable, List, Optional

from albert_tf.core import cli_errors
from albert_tf.core import settings
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.core.file_io import atomic_writer
from albert_tf.data import clue
from data_prep import corpora

OUTPUT_FILE = "unlabeled.txt"


def document(texts: List[str]) -> List[str]:
  """The sentences of one unlabeled line (see the module doc)."""
  sentences = [s for t in texts for s in corpora.split_sentences(t)]
  if len(sentences) < 2:
    sentences = [s for t in texts for s in corpora.split_clauses(t)]
  return sentences


def write_unlabeled(data_dir: str, output_dir: str,
                    tasks: Optional[Iterable[str]] = None) -> Dict:
  """Writes DIR/unlabeled.txt and DIR/sizes.json from FewCLUE's
  <data_dir>/<task>/unlabeled.json; returns the sizes: per task lines,
  documents, sentences, one_sentence_documents, empty_lines (no text),
  or {"missing": path}."""
  tasks = list(tasks or clue.UNLABELED_FIELDS)
  unknown = [t for t in tasks if t not in clue.UNLABELED_FIELDS]
  if unknown:
    raise ValueError(f"--tasks: {', '.join(unknown)} not known; FewCLUE's "
                     f"tasks with unlabeled text: "
                     f"{', '.join(clue.UNLABELED_FIELDS)}")
  os.makedirs(output_dir, exist_ok=True)
  sizes = {}
  documents = 0
  path_out = os.path.join(output_dir, OUTPUT_FILE)
  with atomic_writer(path_out) as out:
    for task in tasks:
      path = os.path.join(data_dir, task, clue.UNLABELED_FILE)
      if not os.path.isfile(path):
        sizes[task] = {"missing": path}
        continue
      counts = {"lines": 0, "documents": 0, "sentences": 0,
                "one_sentence_documents": 0, "empty_lines": 0}
      for _, texts in clue.unlabeled_texts(path, clue.UNLABELED_FIELDS[task]):
        counts["lines"] += 1
        sentences = document(texts)
        if not sentences:
          counts["empty_lines"] += 1
          continue
        out.write(("\n" if documents else "") + "\n".join(sentences) + "\n")
        documents += 1
        counts["documents"] += 1
        counts["sentences"] += len(sentences)
        counts["one_sentence_documents"] += len(sentences) == 1
      sizes[task] = counts
  with atomic_writer(os.path.join(output_dir, "sizes.json")) as f:
    json.dump(sizes, f, indent=2, ensure_ascii=False)
  return sizes


@dataclasses.dataclass
class UnlabeledSettings:
  """The command line of data_prep.fewclue_unlabeled; the fields are the
  flags."""
  data_dir: Optional[str] = settings.field(
      None, "FewCLUE's datasets/ directory (one directory per task).")
  output_dir: Optional[str] = settings.field(
      None, "Directory for unlabeled.txt and sizes.json.")
  tasks: Optional[str] = settings.field(
      None, "Comma-separated task directories (default: "
      f"{','.join(clue.UNLABELED_FIELDS)}).")


def main(argv):
  del argv
  s = settings.from_flags(UnlabeledSettings)
  for name, example in (("data_dir", "FewCLUE/datasets"),
                        ("output_dir", "DIR")):
    if not getattr(s, name):
      raise CommandLineError(error_line(
          "a required flag is missing", f"--{name}",
          f"e.g. --{name}={example}"))
  tasks = [t.strip() for t in (s.tasks or "").split(",") if t.strip()]
  print(json.dumps(write_unlabeled(s.data_dir, s.output_dir, tasks or None),
                   ensure_ascii=False))


if __name__ == "__main__":
  settings.define_flags(UnlabeledSettings)
  cli_errors.run_main(main)
