"""Flat tensors with row ids in the graph, and text normalised with the
code-point span of every character (span QA's offsets).

Ragged ops would make a graph of ~5000 ops for the span reader; these
helpers keep one flat tensor and its row ids instead. `Units` redoes the
normalisation steps (`albert_tf.data.normalization`) as each step's
`offsets` says, each normalised character keeping the original characters
it came from; `CharTable` maps byte offsets to code-point positions.
"""

import functools

import tensorflow as tf

from albert_tf.data import normalization
from albert_tf.serving import text_graph

# pylint: disable-next=protected-access
_cc = text_graph._char_class
rows_of = tf.ragged.row_splits_to_segment_ids  # the row of each item


def at(values, index):
  """values[w, index[w, ...]] for each row w."""
  return tf.gather(values, index, batch_dims=1)


def arange(n):
  return tf.range(tf.cast(n, tf.int64))


def shift(values, fill):
  """values[i - 1], fill at i = 0."""
  return tf.concat([tf.fill([1], fill), values], 0)[:-1]


def row_starts(rows):
  return tf.not_equal(rows, shift(rows, tf.constant(-1, rows.dtype)))


def length(text, unit="UTF8_CHAR"):
  return tf.cast(tf.strings.length(text, unit=unit), tf.int64)


def mask(values, keep):
  """tf.boolean_mask of a 1-D tensor in 3 ops (it makes ~30)."""
  return tf.gather(values, tf.reshape(tf.where(keep), [-1]))


def count(keep):
  return tf.reduce_sum(tf.cast(keep, tf.int64))


def spread(counts):
  """(item, rank) of each of counts[i] copies of every item i."""
  counts = tf.cast(counts, tf.int64)
  item = tf.repeat(arange(tf.size(counts)), counts)
  return item, arange(tf.size(item)) - tf.gather(
      tf.cumsum(counts, exclusive=True), item)


def pad(values, fill):
  """values with one more item, so a gather at index 0 of none works."""
  return tf.concat([values, tf.fill([1], tf.constant(fill, values.dtype))], 0)


class Units:
  """Flat normalised characters, row ids and the original [s, e) of each."""

  def __init__(self, chars, s, e, rows):
    self.chars, self.s, self.e, self.rows = chars, s, e, rows

  def keep(self, keep, chars, e):
    return Units(*(mask(v, keep) for v in (chars, self.s, e, self.rows)))

  def expand(self, fn):
    """fn gives each character 0..k characters; a dropped one extends the
    last character emitted before it in its row."""
    out = fn(self.chars)
    kept = tf.not_equal(out, "")
    leader = kept | row_starts(self.rows)
    group = tf.cumsum(tf.cast(leader, tf.int64)) - 1
    group_end = tf.math.unsorted_segment_max(self.e, group, count(leader))
    split = tf.strings.unicode_split(mask(out, kept), "UTF-8")
    item, rank = spread(split.row_lengths())
    item = tf.gather(tf.reshape(tf.where(kept), [-1]), item)
    last = tf.equal(rank, tf.gather(length(out), item) - 1)
    ends = tf.where(last, tf.gather(group_end, tf.gather(group, item)),
                    tf.gather(self.e, item))
    return Units(split.flat_values, tf.gather(self.s, item), ends,
                  tf.gather(self.rows, item))

  def run(self, group, nrows):
    """A group of `normalization.offset_groups`: the graph side of its
    steps, on each character for PER_CHARACTER."""
    step = group[0]
    if step.offsets == normalization.SPACE_RUNS:
      return self.collapse_whitespace(nrows)
    if step.offsets == normalization.PAIRS:
      units = self
      for pair, repl in step.pairs:
        if len(pair) != 2 or pair[0] != pair[1]:
          raise ValueError(f"normalisation step {step.name!r}: the graph "
                           f"spans pairs of one character only, not {pair!r}")
        units = units.replace_pairs(pair[0], repl)
      return units
    if step.offsets != normalization.PER_CHARACTER:
      raise ValueError(f"normalisation step {step.name!r}: no span form for "
                       f"offsets={step.offsets!r}")
    return self.expand(lambda chars: functools.reduce(
        lambda t, s: s.graph(t), group, chars))

  def collapse_whitespace(self, nrows):
    """" ".join(text.split()): a run spans its characters; none at the ends."""
    space = tf.strings.regex_full_match(self.chars, _cc("space"))
    run_start = space & ~(shift(space, False) & ~row_starts(self.rows))
    run = tf.maximum(tf.cumsum(tf.cast(run_start, tf.int64)) - 1, 0)
    run_end = tf.math.unsorted_segment_max(
        mask(self.e, space), mask(run, space), count(run_start))
    solid = tf.cast(~space, tf.int64)
    total = tf.math.unsorted_segment_sum(solid, self.rows, nrows)
    before = (tf.cumsum(solid, exclusive=True) -
              tf.gather(tf.cumsum(total, exclusive=True), self.rows))
    after = tf.gather(total, self.rows) - before - solid
    keep = ~space | (run_start & (before > 0) & (after > 0))
    ends = tf.where(run_start, tf.gather(pad(run_end, 0), run), self.e)
    return self.keep(keep, tf.where(space, " ", self.chars), ends)

  def replace_pairs(self, char, repl):
    """str.replace(char * 2, repl): pairs from the start of each run."""
    is_c = tf.equal(self.chars, char)
    inner = ~row_starts(self.rows)
    run_start = is_c & ~(shift(is_c, False) & inner)
    index = arange(tf.size(is_c))
    first = tf.gather(pad(mask(index, run_start), 0), tf.maximum(
        tf.cumsum(tf.cast(run_start, tf.int64)) - 1, 0))
    even = tf.equal((index - first) % 2, 0)
    head = is_c & even & tf.concat([(is_c & inner)[1:], [False]], 0)
    ends = tf.where(head, tf.concat([self.e[1:], self.e[-1:]], 0), self.e)
    return self.keep(~(is_c & ~even), tf.where(head, repl, self.chars), ends)


class CharTable:
  """Byte offsets in a batch of strings -> global code-point positions."""

  def __init__(self, text):
    codepoints, starts = tf.strings.unicode_decode_with_offsets(text, "UTF-8")
    self.codepoints, self.splits = codepoints.flat_values, starts.row_splits
    self.byte_base = tf.cumsum(length(text, "BYTE"), exclusive=True)
    self._starts = tf.concat([starts.flat_values + tf.gather(
        self.byte_base, starts.value_rowids()), [tf.reduce_sum(length(
            text, "BYTE"))]], 0)

  def span(self, rows, begin, end):
    """A piece spans the characters of its first to its last byte."""
    base = tf.gather(self.byte_base, rows)
    b = tf.searchsorted(self._starts, begin + base, "right",
                        out_type=tf.int64) - 1
    e = tf.searchsorted(self._starts, end + base, "left", out_type=tf.int64)
    return b, tf.maximum(b, e)
