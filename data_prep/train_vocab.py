"""Trains an ALBERT SentencePiece vocabulary (unigram; pad=0 unk=1 [CLS]=2 [SEP]=3 [MASK]=4).

  python -m data_prep.train_vocab --input='corpus/*.txt' \
      --model_prefix=vocab/spm --vocab_size=8000

writes vocab/spm.model and vocab/spm.vocab. Both are written in a
dot-named folder beside them (`vocab/.tmp-spm-XXXXXXXX`) and renamed into
place (the .model last) once both are complete, so a failure (a full disk)
or a kill while writing leaves a previous vocabulary there as it was; the
folder of a killed run is removed at the next start, with a warning.
Settings follow the original
ALBERT vocabulary: unigram model, [CLS]/[SEP]/[MASK] as control symbols (never
produced from text, so user text cannot forge them), no BOS/EOS. The text is
passed through `albert_tf.data.tokenization.normalize` first, the same function the
tokenizer applies before encoding, so the vocabulary is learned on exactly
what it will see. `character_coverage` 0.9995 keeps the rare-character tail
of Chinese text as <unk> instead of spending the vocabulary on it.

A bad flag, a missing file or a corpus too small for --vocab_size is one
line on stderr, `error: <what>, <where> (<hint>)`, and exit code 1 (2 for
command-line mistakes); --verbose shows the traceback instead. The
command-line helpers at the end are shared with create_pretraining_data.
"""

import dataclasses
import functools
import glob
import gzip
import io
import itertools
import os
import random
import re
import sys
import time
from typing import Optional

from albert_tf.core import cli_errors
from albert_tf.core import staging
from albert_tf.core import settings
from albert_tf.data import tokenization
from albert_tf.data.tokenization import write_synced
from albert_tf.core.errors import CommandLineError, error_line

SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
# SentencePiece's refusal when the corpus has fewer distinct pieces than
# asked for, e.g. "Vocabulary size too high (60). Please set it to a value
# <= 51." (older releases say "is too high").
_VOCAB_TOO_HIGH = re.compile(
    r"Vocabulary size (?:is )?too high \((\d+)\)\. Please set it to a value "
    r"<= (\d+)")
# "Vocabulary size is smaller than required_chars. 10 vs 25. ..."
_VOCAB_TOO_SMALL = re.compile(r"smaller than required_chars\. (\d+) vs (\d+)")
# SentencePiece's unigram trainer refuses a lower coverage (its check
# "character_coverage() >= 0.98", trainer_interface.cc).
MIN_CHARACTER_COVERAGE = 0.98
# SentencePiece's trainer refuses a max_sentencepiece_length above this.
MAX_PIECE_LENGTH = 512
# The C++ location SentencePiece puts before its message:
# "INTERNAL: src/trainer_interface.cc(744) [condition] ".
_SPM_LOCATION = re.compile(r"^\w+: \S+\.cc\(\d+\) (?:\[.*?\] )?")


def iter_sentences(paths, do_lower_case=True):
  """Yields the normalised non-blank lines of text files (gzip by suffix)."""
  for path in paths:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
      for line in f:
        line = tokenization.normalize(line, "sentencepiece", do_lower_case)
        if line:
          yield line


def sample_sentences(sentences, size, seed):
  """A uniform random sample of at most `size` sentences (all when size is
  0 or the corpus is smaller), the same for the same seed and input.

  Written here because SentencePiece's own sampling (input_sentence_size
  with shuffle_input_sentence) ignores set_random_generator_seed: the same
  corpus and seed gave a vocabulary with 1,204 of 5,000 pieces different
  from one run to the next. Reservoir sampling (Algorithm R) keeps at most
  `size` sentences in memory, as SentencePiece does.
  """
  if not size:
    return list(sentences)
  rng = random.Random(seed)
  sentences = iter(sentences)
  sample = list(itertools.islice(sentences, size))
  for seen, sentence in enumerate(sentences, size + 1):
    slot = rng.randrange(seen)
    if slot < size:
      sample[slot] = sentence
  return sample


def train_sentencepiece(input_pattern, model_prefix, vocab_size,
                        character_coverage=0.9995,
                        input_sentence_size=10_000_000, num_threads=1,
                        do_lower_case=True, seed=12345,
                        hard_vocab_limit=True, progress=None,
                        max_piece_length=16):
  """Trains the model; returns the path of PREFIX.model.

  progress: called with one line at each stage (what is read, the sample
  drawn, the training and its time); the command prints them to stderr.

  Raises:
    ValueError: a glob matches no file, or SentencePiece refuses the corpus
      (e.g. it supports fewer pieces than vocab_size with hard_vocab_limit;
      the message then names the largest size it supports).
    OSError: PREFIX.model / PREFIX.vocab could not be written (disk full,
      permission); one line naming them, and nothing replaced.
  """
  if not MIN_CHARACTER_COVERAGE <= character_coverage <= 1:
    raise ValueError(error_line(
        f"{character_coverage:g} is outside [{MIN_CHARACTER_COVERAGE}, 1], "
        "what SentencePiece's unigram trainer accepts",
        "--character_coverage", f"{MIN_CHARACTER_COVERAGE} maps the most "
        "rare characters to <unk>"))
  if not 1 <= max_piece_length <= MAX_PIECE_LENGTH:
    raise ValueError(error_line(
        f"{max_piece_length} is outside [1, {MAX_PIECE_LENGTH}], what "
        "SentencePiece's trainer accepts", "--max_piece_length",
        "16 is the default; 1 gives a vocabulary of characters"))
  import sentencepiece as spm
  paths = []
  for pattern in filter(None, (p.strip() for p in input_pattern.split(","))):
    matched = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not matched:
      raise ValueError(error_line(
          f"no file matches {pattern!r}", "--input",
          "check the path; comma-separated globs and .gz files are accepted"))
    paths.extend(matched)
  if not paths:
    raise ValueError(error_line(f"no file named in {input_pattern!r}",
                                "--input", "give comma-separated globs"))
  directory = os.path.dirname(model_prefix)
  if directory:
    try:
      os.makedirs(directory, exist_ok=True)
    except OSError as e:
      raise ValueError(error_line(
          f"cannot create directory {directory!r}: {e.strerror}",
          "--model_prefix", "choose a writable place")) from e
  # One writer per --model_prefix, while it trains and writes: a second
  # run stops here in one line naming the owner's pid (PREFIX.lock).
  with staging.claimed(model_prefix, "--model_prefix", "a train_vocab",
                       lock_file=model_prefix + ".lock"):
    say = progress or (lambda line: None)
    start = time.time()
    size = sum(os.path.getsize(p) for p in paths)
    say(f"reading {len(paths)} file(s), {size / 2**20:.1f} MiB, and sampling "
        f"up to {input_sentence_size:,} sentences")
    spm.set_random_generator_seed(seed)
    sentences = sample_sentences(iter_sentences(paths, do_lower_case),
                                 input_sentence_size, seed)
    say(f"sampled {len(sentences):,} sentences in {time.time() - start:.0f} s; "
        f"training a {vocab_size:,}-piece unigram model on {num_threads} "
        "thread(s) (minutes on a large sample)")
    start = time.time()
    train = functools.partial(
        _train_unigram, sentences, num_threads=num_threads,
        hard_vocab_limit=hard_vocab_limit, max_piece_length=max_piece_length)
    try:
      model = train(vocab_size, character_coverage)
    except RuntimeError as e:
      raise ValueError(explain_sentencepiece_error(
          str(e), character_coverage,
          _pieces_needed_at_lowest_coverage(train, str(e),
                                            character_coverage))) from e
    say(f"trained in {time.time() - start:.0f} s")
    _write_model_and_vocab(model_prefix, model)
    return model_prefix + ".model"


def _train_unigram(sentences, vocab_size, character_coverage, num_threads,
                   hard_vocab_limit, max_piece_length):
  """The ALBERT unigram model's bytes; RuntimeError: SentencePiece's refusal."""
  import sentencepiece as spm
  # The model comes back as bytes and train_sentencepiece writes both files:
  # SentencePiece ignores a failed write (to a full disk it "writes" a
  # truncated model and returns), and bytes without the path make the same
  # corpus give the same file wherever it is written.
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences),
      model_writer=model,
      vocab_size=vocab_size,
      model_type="unigram",
      character_coverage=character_coverage,
      pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      control_symbols=list(SPECIAL_PIECES[2:]),
      input_sentence_size=0,          # sampled by train_sentencepiece
      shuffle_input_sentence=False,
      num_threads=num_threads,
      hard_vocab_limit=hard_vocab_limit,
      max_sentencepiece_length=max_piece_length,
      minloglevel=2)
  return model.getvalue()


def _pieces_needed_at_lowest_coverage(train, message, character_coverage):
  """For a --vocab_size below what the corpus's characters need: the
  smallest size that trains at MIN_CHARACTER_COVERAGE, asked of
  SentencePiece itself (it refuses a size of 6 at once, naming the number;
  no model is trained). None for another error, or at that coverage."""
  if (not _VOCAB_TOO_SMALL.search(message)
      or character_coverage <= MIN_CHARACTER_COVERAGE):
    return None
  try:
    train(len(SPECIAL_PIECES) + 1, MIN_CHARACTER_COVERAGE)
  except RuntimeError as e:
    needed = _VOCAB_TOO_SMALL.search(str(e))
    return int(needed.group(2)) if needed else None
  return None


def vocab_text(model_proto):
  """PREFIX.vocab as SentencePiece writes it: `piece<TAB>score` per line."""
  import sentencepiece as spm
  processor = spm.SentencePieceProcessor(model_proto=model_proto)
  # C++'s default float output is %g.
  return "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
                 for i in range(processor.get_piece_size()))


def _write_model_and_vocab(model_prefix, model_proto):
  """PREFIX.model and PREFIX.vocab, renamed into place once both are written
  (`staging.staged`).

  Raises:
    OSError: one line naming both files and --model_prefix (disk full,
      permission), saying what was replaced (normally nothing).
  """
  name = os.path.basename(model_prefix)
  with staging.staged(model_prefix, f"{model_prefix}.model and "
                      f"{model_prefix}.vocab, --model_prefix") as stage:
    write_synced(os.path.join(stage.path, name + ".model"), model_proto)
    write_synced(os.path.join(stage.path, name + ".vocab"),
                 vocab_text(model_proto).encode("utf-8"))
    # The model, which is read, last.
    stage.move([name + ".vocab", name + ".model"],
               os.path.dirname(model_prefix) or ".")


def explain_sentencepiece_error(message, character_coverage=None,
                                needed_at_lowest_coverage=None):
  """One line for a SentencePiece training failure, with what to change.

  character_coverage: the run's; needed_at_lowest_coverage: the smallest
  --vocab_size that trains at MIN_CHARACTER_COVERAGE (for a size below what
  the characters need)."""
  message = _SPM_LOCATION.sub("", " ".join(message.split()))
  too_high = _VOCAB_TOO_HIGH.search(message)
  if too_high:
    asked, supported = too_high.groups()
    return error_line(
        f"vocabulary size {asked} is too high for this corpus, which supports "
        f"at most {supported} pieces", "--vocab_size",
        f"pass --vocab_size={supported}, or --nohard_vocab_limit to let "
        f"SentencePiece stop below {asked}")
  too_small = _VOCAB_TOO_SMALL.search(message)
  if too_small:
    # SentencePiece's number is its required characters plus the special
    # pieces: the smallest size that trains (checked in the test).
    asked, required = too_small.groups()
    at = (f" at --character_coverage={character_coverage:g}"
          if character_coverage is not None else "")
    hint = f"pass --vocab_size={required} or more"
    if needed_at_lowest_coverage is not None:
      hint += (f"; or --character_coverage={MIN_CHARACTER_COVERAGE} (the "
               "lowest SentencePiece accepts: rarer characters become <unk>)"
               f" with --vocab_size={needed_at_lowest_coverage} or more")
    return error_line(
        f"vocabulary size {asked} is too small for this corpus: its "
        f"characters{at} and the {len(SPECIAL_PIECES)} special pieces need "
        f"{required}", "--vocab_size", hint)
  if "sentences_.empty()" in message:
    return error_line("the input holds no text", "--input",
                      "one sentence per line is expected")
  return error_line(f"SentencePiece could not train on this corpus: {message}",
                    "--input / --vocab_size",
                    "more text, a smaller --vocab_size or a lower "
                    "--character_coverage usually help")


@dataclasses.dataclass
class TrainVocabSettings:
  """The command line of train_vocab; the fields are the flags."""
  # Not marked required: main names the missing one with an example.
  input: Optional[str] = settings.field(
      None, "Comma-separated globs of text files (.gz allowed), one sentence "
      "per line; blank lines are ignored.")
  model_prefix: Optional[str] = settings.field(
      None, "Writes PREFIX.model, PREFIX.vocab.")
  vocab_size: int = settings.field(
      8000, "Vocabulary size including the 5 special pieces.",
      lower_bound=len(SPECIAL_PIECES) + 1)
  hard_vocab_limit: bool = settings.field(
      True, "SentencePiece's hard_vocab_limit: fail when the corpus cannot "
      "fill --vocab_size pieces; --nohard_vocab_limit makes it a soft limit "
      "(the vocabulary may come out smaller).")
  character_coverage: float = settings.field(
      0.9995, "Fraction of characters covered by the vocabulary (0.9995 for "
      "Chinese, 1.0 for small alphabets; SentencePiece's unigram trainer "
      "accepts no less than 0.98).", lower_bound=MIN_CHARACTER_COVERAGE,
      upper_bound=1)
  input_sentence_size: int = settings.field(
      10_000_000, "Train on a uniform random sample of at most this many "
      "sentences (0: all).", lower_bound=0)
  num_threads: int = settings.field(os.cpu_count() or 1, "Trainer threads.",
                                    lower_bound=1)
  do_lower_case: bool = settings.field(
      True, "Lowercase and strip accents, as the tokenizer will (must match "
      "the tokenizer's setting).")
  seed: int = settings.field(12345, "Sentence sampling seed.")
  max_piece_length: int = settings.field(
      16, "Longest piece in characters (SentencePiece's "
      "max_sentencepiece_length). 1 gives a vocabulary of characters, as the "
      "Chinese BERT and ALBERT vocabularies are (each Chinese character one "
      "piece); whole-word masking then masks n-grams of characters.",
      lower_bound=1, upper_bound=MAX_PIECE_LENGTH)


def main(argv):
  del argv
  s = settings.from_flags(TrainVocabSettings)
  for name, example in (("input", "demo_output/corpus/peoples_daily/train.txt"),
                        ("model_prefix", "demo_output/vocab/spm")):
    if not getattr(s, name):
      raise CommandLineError(error_line(
          "a required flag is missing", f"--{name}",
          f"e.g. --{name}={example}"))
  path = train_sentencepiece(s.input, s.model_prefix, s.vocab_size,
                             s.character_coverage, s.input_sentence_size,
                             s.num_threads, s.do_lower_case, s.seed,
                             s.hard_vocab_limit,
                             progress=lambda line: print(line, file=sys.stderr,
                                                         flush=True),
                             max_piece_length=s.max_piece_length)
  print(f"wrote {path}")


if __name__ == "__main__":
  # Only when run as a script, so modules with flags of the same names can be
  # imported together (tests, benchmarks).
  settings.define_flags(TrainVocabSettings)
  cli_errors.run_main(main)
