"""Piece ids of a text with the character span each piece covers.

    ids, spans = encode_with_offsets(tokenizer, "Café Déjà vu, 1,000,000")
    text[spans[i][0]:spans[i][1]]   # the original characters of piece i

`ids` is exactly `tokenizer.encode(text)`; `spans[i]` is the [start, end)
code-point span of the ORIGINAL text that piece i covers. How:

  1. The tokenizer's normalisation steps (the table of
     `albert_tf.data.normalization`, as `tokenizer.normalize` runs them)
     are redone with spans, each normalised character keeping the span of
     original characters it came from, as each step's `offsets` says: a
     whitespace run collapses to one space, "``"/"''" become one '"'
     spanning both, and the per-character steps run on each original
     character (NFKD/NFD expansions and lowercasing give it several
     characters; a dropped mark or control character joins the span of the
     character before it: "e" + U+0301 is one span). The result is checked
     against `tokenizer.normalize(text)`: where a rule looks at neighbours
     (Python lowercases a word-final "Σ" to "ς") the normalised characters
     are taken from `tokenizer.normalize` as they are (same length: each
     keeps its span), or else the differing middle of the two strings maps
     as one block onto the original characters of its per-character version
     (coarse but contiguous spans).
  2. Pieces of the normalised text: SentencePiece reports each piece's
     begin/end as UTF-8 byte offsets into its input (through its own NFKC
     rules: "ＡＢＣ" is one piece "ABC" spanning the three full-width
     characters), converted to code points; the "9," re-split of
     `AlbertTokenizer._spm_pieces` is redone on those spans. WordPiece
     pieces follow from BERT's basic split and the "##" lengths; a word
     that becomes [UNK] spans the whole word.
  3. Spans never include the space a "▁" stands for. A piece that covers
     no character of its own (SentencePiece's bare "▁") gets a zero-width
     span at the start of the next character (len(text) at the end); a piece
     SentencePiece reports as empty because one character expanded into
     several pieces ("ﬁ" → "f", "i") gets that character's span, so both
     pieces span "ﬁ".

TF Text's offset ops and Hugging Face fast tokenizers would give offsets for
their own normalisation, not for this tokenizer's (ALBERT's preprocess_text,
the "9," re-split), and TF Text needs TensorFlow: this mapping is our own.
Plain Python (no TensorFlow).
"""

import bisect
import functools
from typing import List, Sequence, Tuple

from albert_tf.data import normalization
from albert_tf.data import tokenization

Span = Tuple[int, int]
# (normalised character, original start, original end)
_Unit = Tuple[str, int, int]


def _expand(units: Sequence[_Unit], fn) -> List[_Unit]:
  """Applies fn (char -> str, maybe empty or longer) keeping the spans.

  A character that fn drops (a combining mark, a control character) joins
  the span of the character before it, so that "e\u0301" stays one span.
  """
  out, memo = [], {}
  for u, s, e in units:
    chars = memo.get(u)
    if chars is None:
      chars = memo[u] = fn(u)
    if chars:
      out.extend((c, s, e) for c in chars)
    elif out:
      out[-1] = (out[-1][0], out[-1][1], e)
  return out


def _collapse_whitespace(units: Sequence[_Unit]) -> List[_Unit]:
  """" ".join(text.split()): one space per whitespace run, none at the ends."""
  out, run = [], None
  for c, s, e in units:
    if normalization.is_space(c):
      run = (run[0], e) if run else (s, e)
      continue
    if run and out:
      out.append((" ", run[0], run[1]))
    run = None
    out.append((c, s, e))
  return out


def _replace_pairs(units: Sequence[_Unit], pair: str, repl: str
                   ) -> List[_Unit]:
  """str.replace(pair, repl) for a two-character pair (left to right)."""
  if pair[0] not in {u[0] for u in units}:
    return list(units)
  out, i = [], 0
  while i < len(units):
    if i + 1 < len(units) and units[i][0] + units[i + 1][0] == pair:
      out.append((repl, units[i][1], units[i + 1][2]))
      i += 2
    else:
      out.append(units[i])
      i += 1
  return out


def _align_to(units: List[_Unit], target: str) -> List[_Unit]:
  """Gives `units` the characters of `target` (see the module docstring)."""
  if len(units) == len(target):
    return [(t, s, e) for t, (_, s, e) in zip(target, units)]
  n = min(len(units), len(target))
  p = 0
  while p < n and units[p][0] == target[p]:
    p += 1
  q = 0
  while q < n - p and units[-1 - q][0] == target[-1 - q]:
    q += 1
  middle = units[p:len(units) - q]
  if middle:
    block = (middle[0][1], middle[-1][2])
  else:
    at = units[p][1] if p < len(units) else (units[-1][2] if units else 0)
    block = (at, at)
  mid = [(t, block[0], block[1]) for t in target[p:len(target) - q]]
  return units[:p] + mid + units[len(units) - q:]


def _with_spans(group, units: List[_Unit]) -> List[_Unit]:
  """A group of `normalization.offset_groups` run on units."""
  offsets = group[0].offsets
  if offsets == normalization.SPACE_RUNS:
    return _collapse_whitespace(units)
  if offsets == normalization.PAIRS:
    for pair, repl in group[0].pairs:
      units = _replace_pairs(units, pair, repl)
    return units
  if offsets != normalization.PER_CHARACTER:
    raise ValueError(f"normalisation step {group[0].name!r}: no span form "
                     f"for offsets={offsets!r}")
  return _expand(units, lambda c: functools.reduce(
      lambda t, step: step.python(t), group, c))


def normalize_with_spans(tokenizer, text: str) -> Tuple[str, List[Span]]:
  """`tokenizer.normalize(text)` and, per normalised character, the
  [start, end) span of the original characters it came from."""
  units = [(c, i, i + 1) for i, c in enumerate(text)]
  for group in normalization.offset_groups(tokenizer.kind,
                                           tokenizer.do_lower_case):
    units = _with_spans(group, units)
  target = tokenizer.normalize(text)
  if "".join(u[0] for u in units) != target:
    units = _align_to(units, target)
  return target, [(s, e) for _, s, e in units]


def _char_offsets(text: str) -> List[int]:
  """Byte offset of each character's start, and the total byte length."""
  offsets = [0]
  for c in text:
    offsets.append(offsets[-1] + len(c.encode("utf-8")))
  return offsets


def _spm_char_pieces(tokenizer, text: str) -> List[Tuple[str, int, int]]:
  """(piece, begin, end) in code points of `text`, as SentencePiece gives."""
  offsets = _char_offsets(text)
  out = []
  for piece, byte_begin, byte_end in tokenizer.sentencepiece_offsets(text):
    begin = bisect.bisect_right(offsets, byte_begin) - 1
    end = bisect.bisect_left(offsets, byte_end)
    out.append((piece, begin, max(begin, end)))
  return out


def _spm_pieces(tokenizer, norm: str) -> List[Tuple[str, int, int]]:
  """`AlbertTokenizer.tokenize`'s "9," re-split with spans in `norm` (code
  points)."""
  out = []
  for piece, begin, end in _spm_char_pieces(tokenizer, norm):
    if not (len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()):
      out.append((piece, begin, end))
      continue
    while begin < end and norm[begin] == " ":
      begin += 1
    number = piece[:-1].replace(tokenization.SPM_UNDERLINE, "")
    sub = _spm_char_pieces(tokenizer, number)
    if (piece[0] != tokenization.SPM_UNDERLINE and sub and
        sub[0][0][0] == tokenization.SPM_UNDERLINE):
      sub = sub[1:] if len(sub[0][0]) == 1 else [(sub[0][0][1:],) +
                                                  sub[0][1:]] + sub[1:]
    if end - begin == len(number) + 1:
      # One normalised character per piece character: the usual case.
      out.extend((s, begin + b, begin + e) for s, b, e in sub)
      out.append((",", end - 1, end))
    else:
      # SentencePiece's NFKC changed the length (e.g. "🄂" is "0,"): each
      # part gets the whole piece.
      out.extend((s, begin, end) for s, _, _ in sub)
      out.append((",", begin, end))
  return out


def _wordpiece_pieces(tokenizer, norm: str) -> List[Tuple[str, int, int]]:
  """BERT's basic split and greedy WordPiece, with spans in `norm`."""
  words, start = [], None
  for i, c in enumerate(norm):
    if c.isspace() or tokenization.is_cjk_char(c) or (
        tokenization.is_punctuation(c)):
      if start is not None:
        words.append((start, i))
        start = None
      if not c.isspace():
        words.append((i, i + 1))
    elif start is None:
      start = i
  if start is not None:
    words.append((start, len(norm)))
  out = []
  for ws, we in words:
    pieces = tokenizer.word_pieces(norm[ws:we])
    lengths = [len(p) - 2 if p.startswith("##") and k else len(p)
               for k, p in enumerate(pieces)]
    if sum(lengths) != we - ws:  # [UNK] for the whole word
      out.extend((p, ws, we) for p in pieces)
      continue
    at = ws
    for p, n in zip(pieces, lengths):
      out.append((p, at, at + n))
      at += n
  return out


def encode_with_offsets(tokenizer, text: str
                        ) -> Tuple[List[int], List[Span]]:
  """Piece ids of `text` (exactly `tokenizer.encode(text)`) and their spans.

  Args:
    tokenizer: an `albert_tf.data.tokenization.AlbertTokenizer`.
    text: str.
  Returns:
    (ids, spans): spans[i] = (start, end), code points of `text` covered
    by piece i (zero-width for a bare "▁"; see the module docstring).
  Raises:
    ValueError: the ids differ from tokenizer.encode(text) (a bug here;
      the message names the start of the text).
  """
  norm, char_spans = normalize_with_spans(tokenizer, text)
  if not norm:
    pieces = []
  elif tokenizer.kind == "sentencepiece":
    pieces = _spm_pieces(tokenizer, norm)
  else:
    pieces = _wordpiece_pieces(tokenizer, norm)
  ids = tokenizer.convert_tokens_to_ids([p for p, _, _ in pieces])
  if ids != tokenizer.encode(text):
    raise ValueError(
        f"encode_with_offsets: the pieces of the text starting {text[:40]!r} "
        f"differ from tokenizer.encode ({tokenizer.kind}, do_lower_case="
        f"{tokenizer.do_lower_case}); please report it")
  spm = tokenizer.kind == "sentencepiece"
  spans = []
  for piece, begin, end in pieces:
    while begin < end and norm[begin] == " ":
      begin += 1  # the space a "▁" stands for is no character of the piece
    if spm and not piece.strip(tokenization.SPM_UNDERLINE):
      # A bare "▁" (also for what SentencePiece reads as a space, e.g.
      # U+200B) covers nothing of its own.
      at = char_spans[end][0] if end < len(norm) else len(text)
      spans.append((at, at))
    elif begin < end:
      spans.append((char_spans[begin][0], char_spans[end - 1][1]))
    else:  # reported empty: one character, several pieces
      spans.append(char_spans[begin] if begin < len(norm) else
                   (len(text), len(text)))
  return ids, spans
