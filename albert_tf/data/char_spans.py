"""Piece ids of a text with the character span each piece covers.

    ids, spans = encode_with_offsets(tokenizer, "Café Déjà vu, 1,000,000")
    text[spans[i][0]:spans[i][1]]   # the original characters of piece i

`ids` is exactly `tokenizer.encode(text)`; `spans[i]` is the [start, end)
code-point span of the ORIGINAL text that piece i covers. How:

  1. The tokenizer's normalisation (`tokenization.normalize`) is redone
     character by character, each normalised character keeping the span of
     original characters it came from: a whitespace run collapses to one
     space, "``"/"''" become one '"' spanning both, NFKD/NFD expansions
     and lowercasing give several characters of one original character,
     and a dropped mark or control character joins the span of the
     character before it ("e" + U+0301 is one span). The result is checked
     against `tokenizer.normalize(text)`. Lowercasing is the one step that
     is not per character (Python lowercases a word-final "Σ" to "ς"); when
     the check fails the normalised characters are taken from
     `tokenizer.normalize` as they are (same length: each keeps its span),
     or else the differing middle of the two strings maps as one block onto
     the original characters of its per-character version (coarse but
     contiguous spans).
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
import unicodedata
from typing import List, Sequence, Tuple

from albert_tf.data import tokenization

Span = Tuple[int, int]
# (normalised character, original start, original end)
_Unit = Tuple[str, int, int]

_PROTO_KIND = []  # the SentencePiece output type that works, found once


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
    if c.isspace():
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


def normalize_with_spans(tokenizer, text: str) -> Tuple[str, List[Span]]:
  """`tokenizer.normalize(text)` and, per normalised character, the
  [start, end) span of the original characters it came from."""
  units = [(c, i, i + 1) for i, c in enumerate(text)]
  lower = tokenizer.do_lower_case
  if tokenizer.kind == "wordpiece":
    units = _expand(units, lambda c: (
        "" if tokenization.is_dropped_control(c) else c))
    units = _collapse_whitespace(units)
    if lower:
      units = _expand(units, lambda c: "".join(
          d for d in unicodedata.normalize("NFD", c.lower())
          if unicodedata.category(d) != "Mn"))
  else:
    units = _collapse_whitespace(units)
    units = _replace_pairs(units, "``", '"')
    units = _replace_pairs(units, "''", '"')
    if lower:
      units = _expand(units, lambda c: "".join(
          d for d in unicodedata.normalize("NFKD", c)
          if not unicodedata.combining(d)).lower())
  target = tokenizer.normalize(text)
  if "".join(u[0] for u in units) != target:
    units = _align_to(units, target)
  return target, [(s, e) for _, s, e in units]


def _spm_proto_pieces(sp, text: str):
  """SentencePiece pieces with byte offsets: `immutable_proto` up to
  sentencepiece 0.2.0, `proto` (parsed) from the versions that removed it."""
  if not _PROTO_KIND:
    try:
      sp.encode("a", out_type="immutable_proto")
      _PROTO_KIND.append("immutable_proto")
    except (ValueError, RuntimeError):
      _PROTO_KIND.append("proto")
  return sp.encode(text, out_type=_PROTO_KIND[0]).pieces


def _char_offsets(text: str) -> List[int]:
  """Byte offset of each character's start, and the total byte length."""
  offsets = [0]
  for c in text:
    offsets.append(offsets[-1] + len(c.encode("utf-8")))
  return offsets


def _spm_char_pieces(sp, text: str) -> List[Tuple[str, int, int]]:
  """(piece, begin, end) in code points of `text`, as sp.encode gives."""
  offsets = _char_offsets(text)
  out = []
  for p in _spm_proto_pieces(sp, text):
    begin = bisect.bisect_right(offsets, p.begin) - 1
    end = bisect.bisect_left(offsets, p.end)
    out.append((p.piece, begin, max(begin, end)))
  return out


def _spm_pieces(sp, norm: str) -> List[Tuple[str, int, int]]:
  """`AlbertTokenizer._spm_pieces` with spans in `norm` (code points)."""
  out = []
  for piece, begin, end in _spm_char_pieces(sp, norm):
    if not (len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()):
      out.append((piece, begin, end))
      continue
    while begin < end and norm[begin] == " ":
      begin += 1
    number = piece[:-1].replace(tokenization.SPM_UNDERLINE, "")
    sub = _spm_char_pieces(sp, number)
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
  unk = tokenization._UNK_TOKENS["wordpiece"]  # pylint: disable=protected-access
  out = []
  for ws, we in words:
    pieces = tokenization._wordpiece(  # pylint: disable=protected-access
        norm[ws:we], tokenizer._token_to_id, unk)  # pylint: disable=protected-access
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
    pieces = _spm_pieces(tokenizer._sp, norm)  # pylint: disable=protected-access
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
