"""Trains an ALBERT SentencePiece vocabulary (unigram; pad=0 unk=1 [CLS]=2 [SEP]=3 [MASK]=4).

  python -m data_prep.train_vocab --input='corpus/*.txt' \
      --model_prefix=vocab/spm --vocab_size=8000

writes vocab/spm.model and vocab/spm.vocab. Settings follow the original
ALBERT vocabulary: unigram model, [CLS]/[SEP]/[MASK] as control symbols (never
produced from text, so user text cannot forge them), no BOS/EOS. The text is
passed through `albert_tf.tokenization.normalize` first, the same function the
tokenizer applies before encoding, so the vocabulary is learned on exactly
what it will see. `character_coverage` 0.9995 keeps the rare-character tail
of Chinese text as <unk> instead of spending the vocabulary on it.
"""

import glob
import gzip
import os

from absl import app
from absl import flags

from albert_tf import tokenization

SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")


def iter_sentences(paths, do_lower_case=True):
  """Yields the normalised non-blank lines of text files (gzip by suffix)."""
  for path in paths:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
      for line in f:
        line = tokenization.normalize(line, "sentencepiece", do_lower_case)
        if line:
          yield line


def train_sentencepiece(input_pattern, model_prefix, vocab_size,
                        character_coverage=0.9995,
                        input_sentence_size=10_000_000, num_threads=1,
                        do_lower_case=True, seed=12345,
                        hard_vocab_limit=True):
  """Trains the model; returns the path of PREFIX.model.

  Raises:
    ValueError: a glob matches no file.
  """
  import sentencepiece as spm
  paths = []
  for pattern in filter(None, (p.strip() for p in input_pattern.split(","))):
    matched = sorted(glob.glob(pattern))
    if not matched:
      raise ValueError(f"--input: {pattern!r} matches no file")
    paths.extend(matched)
  if not paths:
    raise ValueError(f"--input={input_pattern!r} names no file")
  directory = os.path.dirname(model_prefix)
  if directory:
    os.makedirs(directory, exist_ok=True)
  spm.set_random_generator_seed(seed)
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter_sentences(paths, do_lower_case),
      model_prefix=model_prefix,
      vocab_size=vocab_size,
      model_type="unigram",
      character_coverage=character_coverage,
      pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=list(SPECIAL_PIECES[2:]),
      input_sentence_size=input_sentence_size,
      shuffle_input_sentence=True,
      num_threads=num_threads,
      hard_vocab_limit=hard_vocab_limit,
      minloglevel=2)
  return model_prefix + ".model"


def _define_flags():
  # Only when run as a script, so modules with flags of the same names can be
  # imported together (tests, benchmarks).
  flags.DEFINE_string("input", None, "Comma-separated globs of text files "
                      "(.gz allowed), one "
                      "sentence per line; blank lines are ignored.")
  flags.DEFINE_string("model_prefix", None, "Writes PREFIX.model, PREFIX.vocab.")
  flags.DEFINE_integer("vocab_size", 8000, "Vocabulary size including the 5 "
                       "special pieces.")
  flags.DEFINE_float("character_coverage", 0.9995, "Fraction of characters "
                     "covered by the vocabulary (0.9995 for Chinese, 1.0 for "
                     "small alphabets).")
  flags.DEFINE_integer("input_sentence_size", 10_000_000, "Train on a uniform "
                       "random sample of at most this many sentences (0: all).")
  flags.DEFINE_integer("num_threads", os.cpu_count() or 1, "Trainer threads.")
  flags.DEFINE_bool("do_lower_case", True, "Lowercase and strip accents, as the "
                    "tokenizer will (must match the tokenizer's setting).")
  flags.DEFINE_integer("seed", 12345, "Sentence sampling seed.")


def main(argv):
  del argv
  FLAGS = flags.FLAGS
  if not FLAGS.input or not FLAGS.model_prefix:
    raise app.UsageError("--input and --model_prefix are required")
  path = train_sentencepiece(FLAGS.input, FLAGS.model_prefix, FLAGS.vocab_size,
                            FLAGS.character_coverage,
                            FLAGS.input_sentence_size, FLAGS.num_threads,
                            FLAGS.do_lower_case, FLAGS.seed)
  print(f"wrote {path}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
