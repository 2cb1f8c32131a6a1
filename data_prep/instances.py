"""Document -> ALBERT pretraining instances: SOP/NSP pairs and n-gram masking.

Plain, deterministic functions with no Beam and no TensorFlow, so they are
tested directly and used the same way by the Beam pipeline and by the
single-process benchmark loop. A document is a list of segments (sentences),
each a list of token ids.

Follows the original `create_pretraining_data.py`, with these deliberate
differences:
  * Randomness comes from a `random.Random` seeded per (document content,
    dupe index, seed) — see `document_seed` — instead of one RNG threaded
    through all documents in file order, and the n-gram length is drawn from
    that RNG too (the original drew it from the unseeded numpy RNG, so its
    output was not reproducible).
  * SOP, a chunk of a single segment (a very long sentence, or the last
    sentence of a document): the original takes B from a random other
    document and labels it 1 ("swapped"), which biases the label and teaches
    the SOP head topic prediction. Here the segment is cut at a random token
    and the two halves go through the usual 50% swap.
  * Random replacements (the 10%) never draw [CLS], [SEP], [MASK] or <pad>,
    and a word never spans the [SEP] between A and B.
  * The n-gram length is drawn per masked n-gram and placed at the next
    (shuffled) start word where it fits whole and uncovered, so the lengths
    follow p(n) ∝ 1/n; see `create_masked_lm_predictions`.
"""

import array
import bisect
import dataclasses
import hashlib
import itertools
import random
from typing import FrozenSet, List, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
  """Flags of the original create_pretraining_data.py that shape instances."""
  max_seq_length: int = 512
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  ngram: int = 3
  favor_shorter_ngram: bool = True
  do_whole_word_mask: bool = True
  random_next_sentence: bool = False
  random_seed: int = 12345

  def __post_init__(self):
    if self.max_seq_length < 5:
      raise ValueError(f"max_seq_length must be >= 5, got {self.max_seq_length}")
    if self.max_predictions_per_seq < 1:
      raise ValueError("max_predictions_per_seq must be >= 1, got "
                       f"{self.max_predictions_per_seq}")
    if not 0.0 < self.masked_lm_prob < 1.0:
      raise ValueError(f"masked_lm_prob must be in (0, 1), got "
                       f"{self.masked_lm_prob}")
    if self.ngram < 1:
      raise ValueError(f"ngram must be >= 1, got {self.ngram}")


@dataclasses.dataclass(frozen=True)
class Vocab:
  """What instance creation needs from a tokenizer (picklable, small)."""
  vocab_size: int
  cls_id: int
  sep_id: int
  mask_id: int
  word_starts: Tuple[bool, ...]  # word_starts[id]: token starts a word.
  # Never used as a random replacement: a stray [SEP] or <pad> inside a
  # sequence would contradict segment_ids and input_mask.
  special_ids: FrozenSet[int] = frozenset()

  @classmethod
  def from_tokenizer(cls, tokenizer):
    return cls(tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id,
               tokenizer.mask_id, tuple(tokenizer.word_start_table()),
               frozenset((tokenizer.pad_id, tokenizer.cls_id,
                          tokenizer.sep_id, tokenizer.mask_id)))

  def random_id(self, rng):
    """A uniformly random id that is not in `special_ids`."""
    while True:
      token = rng.randrange(self.vocab_size)
      if token not in self.special_ids:
        return token


@dataclasses.dataclass
class TrainingInstance:
  """One sequence `[CLS] A [SEP] B [SEP]`, unpadded, after masking."""
  input_ids: List[int]
  segment_ids: List[int]
  token_boundary: List[int]
  masked_lm_positions: List[int]
  masked_lm_ids: List[int]  # The original ids at masked_lm_positions.
  next_sentence_label: int  # SOP: 1 = swapped; NSP: 1 = random B.
  ngram_lengths: List[int]  # Length in words of each masked n-gram (stats).


def document_fingerprint(document):
  """16-byte digest of a document's token ids and segment boundaries."""
  h = hashlib.blake2b(digest_size=16)
  h.update(array.array("q", [len(s) for s in document]).tobytes())
  for segment in document:
    h.update(array.array("q", segment).tobytes())
  return h.digest()


def document_seed(fingerprint, dupe_index, random_seed):
  """Seed of one (document, dupe) pair: independent of worker and order."""
  h = hashlib.blake2b(fingerprint, digest_size=8,
                      person=b"albert-dataprep")
  h.update(f"{dupe_index}:{random_seed}".encode())
  return int.from_bytes(h.digest(), "little")


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Truncates the longer list in place, randomly from the front or back."""
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    # Front or back, so the model does not learn that sequences always end
    # where a sentence ends.
    if rng.random() < 0.5:
      del longer[0]
    else:
      longer.pop()


def _choose_ngram(rng, cumulative_weights):
  return bisect.bisect_right(cumulative_weights,
                             rng.random() * cumulative_weights[-1]) + 1


def create_masked_lm_predictions(tokens, options, vocab, rng):
  """Whole-word n-gram masking of one sequence.

  Args:
    tokens: list of ids, `[CLS] A [SEP] B [SEP]`.
    options: `InstanceOptions`.
    vocab: `Vocab`.
    rng: `random.Random`.
  Returns:
    (output_ids, token_boundary, masked_positions, masked_ids, ngram_lengths):
    up to min(max_predictions_per_seq, max(1, round(masked_lm_prob * len)))
    masked positions, sorted; each 80% [MASK], 10% kept, 10% a random id.
  """
  cls_id, sep_id = vocab.cls_id, vocab.sep_id
  word_starts = vocab.word_starts
  token_boundary = [0] * len(tokens)
  cand_indexes = []  # One list of positions per word.
  after_special = True
  for i, token in enumerate(tokens):
    if token == cls_id or token == sep_id:
      token_boundary[i] = 1
      after_special = True
      continue
    is_start = word_starts[token]
    # A continuation piece right after [SEP] (B truncated at the front)
    # starts its own word: words never span the segment boundary.
    if options.do_whole_word_mask and not is_start and not after_special:
      cand_indexes[-1].append(i)
    else:
      cand_indexes.append([i])
      if is_start:
        token_boundary[i] = 1
    after_special = False

  num_to_predict = min(options.max_predictions_per_seq,
                       max(1, int(round(len(tokens) * options.masked_lm_prob))))
  weights = [1.0 / n if options.favor_shorter_ngram else 1.0
             for n in range(1, options.ngram + 1)]
  cumulative = list(itertools.accumulate(weights))

  # Each n-gram length is drawn first and then placed at the next start word
  # (in shuffled order) where it fits, so accepted lengths follow p(n). The
  # original drew n per start and dropped the start when the n-gram hit an
  # already masked word, which under-represents long n-grams (that scheme
  # gave 8:3.6:2 on People's Daily instead of 6:3:2).
  remaining = list(range(len(cand_indexes)))
  rng.shuffle(remaining)
  output = list(tokens)
  covered = set()
  masked = []  # (position, original id)
  ngram_lengths = []
  max_n = options.ngram
  while len(masked) < num_to_predict and remaining and max_n >= 1:
    n = _choose_ngram(rng, cumulative[:max_n])
    budget = num_to_predict - len(masked)
    for j, start in enumerate(remaining):
      if start + n > len(cand_indexes):
        continue
      words = cand_indexes[start:start + n]
      # Near the budget, a shorter n-gram from the same start (as the
      # original) rather than exceeding max_predictions_per_seq.
      while len(words) > 1 and sum(len(w) for w in words) > budget:
        words = words[:-1]
      positions = [i for w in words for i in w]
      if len(positions) > budget or any(i in covered for i in positions):
        continue
      if positions[-1] - positions[0] + 1 != len(positions):
        continue  # Spans the [SEP] between A and B: not an n-gram of text.
      del remaining[j]
      break
    else:
      # No start can hold an n-gram this long any more; try shorter ones.
      max_n = n - 1
      continue
    for i in positions:
      covered.add(i)
      r = rng.random()
      if r < 0.8:
        output[i] = vocab.mask_id
      elif r >= 0.9:
        output[i] = vocab.random_id(rng)
      masked.append((i, tokens[i]))
    ngram_lengths.append(len(words))
  masked.sort()
  return (output, token_boundary, [p for p, _ in masked],
          [t for _, t in masked], ngram_lengths)


def _random_document_b(rng, random_documents, fingerprint, target_length):
  """B segment from another document of the pool (NSP), or None."""
  if not random_documents:
    return None
  for _ in range(10):
    other_fp, other = random_documents[rng.randrange(len(random_documents))]
    if other_fp != fingerprint:
      break
  else:
    return None
  tokens_b = []
  for segment in other[rng.randrange(len(other)):]:
    tokens_b.extend(segment)
    if len(tokens_b) >= target_length:
      break
  return tokens_b


def create_instances_from_document(document, rng, options, vocab,
                                   random_documents=(), fingerprint=b""):
  """All instances of one pass over `document` (one dupe).

  Args:
    document: list of segments, each a non-empty list of token ids.
    rng: `random.Random`, seeded by the caller (see `document_seed`).
    options: `InstanceOptions`.
    vocab: `Vocab`.
    random_documents: NSP only: a sequence of (fingerprint, document) to draw
      random B segments from; its order must not depend on the runner.
    fingerprint: this document's fingerprint, so NSP never picks itself.
  Returns:
    list of `TrainingInstance`.
  """
  max_num_tokens = options.max_seq_length - 3
  # Like the original, a share of sequences is shorter, so the model also
  # sees short inputs (fine-tuning data are often short).
  target_length = max_num_tokens
  if rng.random() < options.short_seq_prob:
    target_length = rng.randint(2, max_num_tokens)

  instances = []
  chunk, chunk_length = [], 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i])
    if i == len(document) - 1 or chunk_length >= target_length:
      a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
      tokens_a = [t for s in chunk[:a_end] for t in s]
      tokens_b = [t for s in chunk[a_end:] for t in s]
      if options.random_next_sentence:
        label = 0
        if len(chunk) == 1 or rng.random() < 0.5:
          random_b = _random_document_b(rng, random_documents, fingerprint,
                                        target_length - len(tokens_a))
          if random_b:
            tokens_b, label = random_b, 1
            # The unused segments go back to the document for the next chunk.
            i -= len(chunk) - a_end
      else:
        if len(chunk) == 1 and len(tokens_a) >= 2:
          cut = rng.randint(1, len(tokens_a) - 1)
          tokens_a, tokens_b = tokens_a[:cut], tokens_a[cut:]
        label = int(rng.random() < 0.5)
        if label:
          tokens_a, tokens_b = tokens_b, tokens_a
      if tokens_a and tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        tokens = [vocab.cls_id] + tokens_a + [vocab.sep_id] + tokens_b + [
            vocab.sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        (input_ids, token_boundary, positions, masked_ids,
         ngram_lengths) = create_masked_lm_predictions(tokens, options, vocab,
                                                       rng)
        instances.append(TrainingInstance(input_ids, segment_ids,
                                          token_boundary, positions,
                                          masked_ids, label, ngram_lengths))
      chunk, chunk_length = [], 0
    i += 1
  return instances


def instances_for_document(document, options, vocab, dupe_factor,
                           random_documents=()):
  """Instances of all `dupe_factor` passes over one document, deterministic."""
  fingerprint = document_fingerprint(document)
  instances = []
  for dupe_index in range(dupe_factor):
    rng = random.Random(document_seed(fingerprint, dupe_index,
                                      options.random_seed))
    instances.extend(create_instances_from_document(
        document, rng, options, vocab, random_documents, fingerprint))
  return instances


def padded_features(instance, options):
  """Feature lists of one instance padded to the record's fixed lengths.

  Returns a dict with the keyword arguments of
  `albert_tf.core.features.make_pretraining_example`.
  """
  seq_pad = [0] * (options.max_seq_length - len(instance.input_ids))
  pred_pad = [0] * (options.max_predictions_per_seq -
                    len(instance.masked_lm_positions))
  return dict(
      input_ids=instance.input_ids + seq_pad,
      input_mask=[1] * len(instance.input_ids) + seq_pad,
      segment_ids=instance.segment_ids + seq_pad,
      token_boundary=instance.token_boundary + seq_pad,
      masked_lm_positions=instance.masked_lm_positions + pred_pad,
      masked_lm_ids=instance.masked_lm_ids + pred_pad,
      masked_lm_weights=[1.0] * len(instance.masked_lm_positions) + pred_pad,
      next_sentence_label=instance.next_sentence_label)


def instance_stats(instances: Sequence[TrainingInstance]):
  """Counts for the summary; dicts of ints that add up across documents."""
  stats = {"instances": len(instances), "tokens": 0, "masked_tokens": 0,
           "next_sentence_label_1": 0}
  for instance in instances:
    stats["tokens"] += len(instance.input_ids)
    stats["masked_tokens"] += len(instance.masked_lm_positions)
    stats["next_sentence_label_1"] += instance.next_sentence_label
    for n in instance.ngram_lengths:
      key = f"ngram_{n}"
      stats[key] = stats.get(key, 0) + 1
  return stats
