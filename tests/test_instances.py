"""data_prep.instances: SOP/NSP pairs and n-gram masking, checked with numbers.

Synthetic vocabulary: ids 5..599 start a word, ids 600..999 continue one, so
whole-word masking has multi-token words. The SOP test uses ids that
increase along each document, which makes the A/B order of every instance
checkable after unmasking. Everything is seeded, so the statistical bounds
are exact checks, not flaky ones.
"""

import random

import pytest

from data_prep import instances as inst

VOCAB = inst.Vocab(vocab_size=1000, cls_id=2, sep_id=3, mask_id=4,
                   word_starts=tuple(i < 600 for i in range(1000)),
                   special_ids=frozenset((0, 2, 3, 4)))
OPTIONS = inst.InstanceOptions(max_seq_length=128, max_predictions_per_seq=20)


def make_documents(num_docs, seed=0):
  """Documents of 4..30 sentences of 3..40 words of 1..3 tokens."""
  rng = random.Random(seed)
  documents = []
  for _ in range(num_docs):
    document = []
    for _ in range(rng.randint(4, 30)):
      segment = []
      for _ in range(rng.randint(3, 40)):
        # A word start, sometimes followed by continuation pieces.
        segment.append(rng.randrange(5, 600))
        segment.extend(rng.randrange(600, 1000)
                       for _ in range(rng.choice((0, 0, 0, 1, 2))))
      document.append(segment)
    documents.append(document)
  return documents


def unmasked(instance):
  ids = list(instance.input_ids)
  for position, original in zip(instance.masked_lm_positions,
                                instance.masked_lm_ids):
    ids[position] = original
  return ids


@pytest.fixture(scope="module")
def corpus_instances():
  documents = make_documents(400)
  return [i for d in documents
          for i in inst.instances_for_document(d, OPTIONS, VOCAB, 3)]


def test_layout_of_every_instance(corpus_instances):
  for instance in corpus_instances:
    ids, segments = instance.input_ids, instance.segment_ids
    assert 5 <= len(ids) <= OPTIONS.max_seq_length
    assert ids[0] == VOCAB.cls_id and ids[-1] == VOCAB.sep_id
    first_sep = ids.index(VOCAB.sep_id)
    # Random replacements never bring in special ids.
    assert [p for p, t in enumerate(ids) if t in (0, 2, 3)] == [
        0, first_sep, len(ids) - 1]
    assert segments == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    positions = instance.masked_lm_positions
    assert positions == sorted(set(positions))
    assert not {0, first_sep, len(ids) - 1} & set(positions)
    expected = min(20, max(1, round(len(ids) * 0.15)))
    assert len(positions) <= expected
    assert instance.token_boundary[0] == 1 and instance.token_boundary[-1] == 1


def test_masked_count_rate_and_replacement_mix(corpus_instances):
  tokens = sum(len(i.input_ids) for i in corpus_instances)
  masked = sum(len(i.masked_lm_positions) for i in corpus_instances)
  assert 0.14 <= masked / tokens <= 0.16
  full_budget = sum(
      len(i.masked_lm_positions) == min(20, max(1, round(len(i.input_ids) *
                                                         0.15)))
      for i in corpus_instances)
  assert full_budget / len(corpus_instances) > 0.97
  kinds = {"mask": 0, "same": 0, "random": 0}
  for instance in corpus_instances:
    for p, original in zip(instance.masked_lm_positions, instance.masked_lm_ids):
      token = instance.input_ids[p]
      kinds["mask" if token == 4 else "same" if token == original
            else "random"] += 1
  total = sum(kinds.values())
  assert abs(kinds["mask"] / total - 0.8) < 0.01
  # A random id equal to the original counts as "same": 0.1 + 0.1/1000.
  assert abs(kinds["same"] / total - 0.1) < 0.01
  assert abs(kinds["random"] / total - 0.1) < 0.01


def test_whole_words_are_masked_together(corpus_instances):
  for instance in corpus_instances:
    ids = unmasked(instance)
    masked = set(instance.masked_lm_positions)
    for p in masked:
      start = p
      # Words end at [CLS]/[SEP]: a B truncated at the front may start with
      # a continuation piece, which is then a word of its own.
      while not VOCAB.word_starts[ids[start]] and ids[start - 1] not in (2, 3):
        start -= 1
      end = p + 1
      while end < len(ids) and ids[end] not in (2, 3) and not (
          VOCAB.word_starts[ids[end]]):
        end += 1
      assert set(range(start, end)) <= masked


def test_sop_labels_balanced_and_order_correct():
  # Ids strictly increasing along each document: label 0 keeps A before B.
  rng = random.Random(1)
  documents = []
  for _ in range(300):
    ids = iter(range(5, 600))
    documents.append([[next(ids) for _ in range(rng.randint(5, 25))]
                      for _ in range(rng.randint(3, 12))])
  options = inst.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
  vocab = inst.Vocab(1000, 2, 3, 4, tuple([True] * 1000))
  labels = []
  for document in documents:
    for instance in inst.instances_for_document(document, options, vocab, 10):
      ids = unmasked(instance)
      sep = ids.index(3)
      a, b = ids[1:sep], ids[sep + 1:-1]
      assert (max(a) < min(b)) if instance.next_sentence_label == 0 else (
          min(a) > max(b))
      labels.append(instance.next_sentence_label)
  assert len(labels) > 3000
  assert abs(sum(labels) / len(labels) - 0.5) <= 0.02


def test_ngram_lengths_follow_one_over_n():
  # One token per word, as for Chinese SentencePiece pieces.
  vocab = inst.Vocab(1000, 2, 3, 4, tuple([True] * 1000))
  counts = {1: 0, 2: 0, 3: 0}
  for document in make_documents(300, seed=5):
    for instance in inst.instances_for_document(document, OPTIONS, vocab, 2):
      if len(instance.input_ids) == OPTIONS.max_seq_length:
        for n in instance.ngram_lengths:
          counts[n] += 1
  total = sum(counts.values())
  # p(n) ∝ 1/n: 6/11, 3/11, 2/11; at the end of the 19-token budget the
  # last n-gram is sometimes shortened to fit, which favours n = 1 a little.
  for n, expected in ((1, 6 / 11), (2, 3 / 11), (3, 2 / 11)):
    assert abs(counts[n] / total - expected) < 0.03, counts


def test_deterministic_per_document_and_seed():
  document = make_documents(1, seed=7)[0]
  first = inst.instances_for_document(document, OPTIONS, VOCAB, 2)
  assert first == inst.instances_for_document(document, OPTIONS, VOCAB, 2)
  # Dupes differ from each other; another seed gives other instances.
  one = inst.instances_for_document(document, OPTIONS, VOCAB, 1)
  assert first[:len(one)] == one and first[len(one):] != one
  other_seed = inst.InstanceOptions(max_seq_length=128,
                                    max_predictions_per_seq=20, random_seed=1)
  assert inst.instances_for_document(document, other_seed, VOCAB, 1) != one


def test_short_seq_prob_and_truncation():
  documents = make_documents(50, seed=3)
  short = inst.InstanceOptions(max_seq_length=128, max_predictions_per_seq=20,
                               short_seq_prob=1.0)
  lengths = [len(i.input_ids) for d in documents
             for i in inst.instances_for_document(d, short, VOCAB, 1)]
  full = [len(i.input_ids) for d in documents
          for i in inst.instances_for_document(d, OPTIONS, VOCAB, 1)]
  assert max(lengths) <= 128 and max(full) <= 128
  assert sum(lengths) / len(lengths) < 0.8 * sum(full) / len(full)


def test_nsp_random_b_from_other_documents_deterministic():
  # Each document has its own id range, so a B segment shows where it is from.
  documents = [[[d * 100 + 5 + s * 10 + t for t in range(8)] for s in range(8)]
               for d in range(9)]
  vocab = inst.Vocab(1000, 2, 3, 4, tuple([True] * 1000))
  pool = sorted((inst.document_fingerprint(d), d) for d in documents)
  options = inst.InstanceOptions(max_seq_length=64, max_predictions_per_seq=10,
                                 random_next_sentence=True)
  labels = []
  for d, document in enumerate(documents):
    got = inst.instances_for_document(document, options, vocab, 20, pool)
    assert got == inst.instances_for_document(document, options, vocab, 20,
                                              pool)
    for instance in got:
      ids = unmasked(instance)
      sep = ids.index(3)
      owners_b = {(t - 5) // 100 for t in ids[sep + 1:-1]}
      assert {(t - 5) // 100 for t in ids[1:sep]} == {d}
      assert (owners_b != {d}) == bool(instance.next_sentence_label)
      labels.append(instance.next_sentence_label)
  assert 0.4 < sum(labels) / len(labels) < 0.65


def test_padded_features_and_stats():
  instance = inst.TrainingInstance(
      input_ids=[2, 7, 4, 3, 9, 3], segment_ids=[0, 0, 0, 0, 1, 1],
      token_boundary=[1, 1, 1, 1, 1, 1], masked_lm_positions=[2],
      masked_lm_ids=[8], next_sentence_label=1, ngram_lengths=[1])
  options = inst.InstanceOptions(max_seq_length=8, max_predictions_per_seq=3)
  padded = inst.padded_features(instance, options)
  assert padded["input_ids"] == [2, 7, 4, 3, 9, 3, 0, 0]
  assert padded["input_mask"] == [1] * 6 + [0, 0]
  assert padded["masked_lm_positions"] == [2, 0, 0]
  assert padded["masked_lm_weights"] == [1.0, 0.0, 0.0]
  assert inst.instance_stats([instance, instance]) == {
      "instances": 2, "tokens": 12, "masked_tokens": 2,
      "next_sentence_label_1": 2, "ngram_1": 2}


def test_invalid_options_are_errors():
  with pytest.raises(ValueError, match="masked_lm_prob"):
    inst.InstanceOptions(masked_lm_prob=0)
  with pytest.raises(ValueError, match="max_seq_length"):
    inst.InstanceOptions(max_seq_length=3)
