"""CoNLL token-tagging files: read, check, convert between tag schemes.

    data = read_conll("data/ner/train.txt")          # scheme auto-detected
    tags = convert(data.sentences[0].tags, data.scheme, "BIO")

The file layout is CoNLL's: one token per line with its tag in the last
column (whitespace-separated, or tab-separated when the line has a tab, so a
tab-separated token may contain spaces only to be refused), a blank line
between sentences. A file without a tag column is unlabelled (prediction
input). CRLF endings and a UTF-8 BOM are accepted; CoNLL-2003's
`-DOCSTART-` lines are document markers and are skipped (counted).

Tag schemes (`SCHEMES`): BIO (IOB2), IOB1, BIOES (IOBES) and BMES, each
turned into entity spans and back without loss; the model is trained on
BIO tags, and predictions are written in the file's own scheme. A tag the
scheme does not have is an error naming file:line; a stray one
(`stray_tags`) is read as seqeval reads it (`spans`), so the F1 here is
seqeval's (conlleval's, for BIO).

How sentences become model windows, the entity metric and the predictions
file are `albert_tf.data.ner_data`.
"""

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from absl import logging

from albert_tf.data.tsv_reader import first_places

# run_ner's --task_name values: the corpus data_prep.corpora writes
# (People's Daily BIO files), and any CoNLL files.
TASK_NAMES = ("peoples_daily_ner", "conll")

SCHEMES = ("BIO", "IOB1", "BIOES", "BMES")
_SCHEME_ALIASES = {"BIO": "BIO", "IOB2": "BIO", "IOB": "BIO", "IOB1": "IOB1",
                   "BIOES": "BIOES", "IOBES": "BIOES", "BILOU": "BIOES",
                   "BMES": "BMES", "BMEO": "BMES"}
# Prefixes each scheme may use (besides the tag "O").
_PREFIXES = {"BIO": "BI", "IOB1": "BI", "BIOES": "BIES", "BMES": "BMES"}
_TAG_RE = re.compile(r"^([BIESM])-(\S+)$")
DOCSTART = "-DOCSTART-"


class DataError(ValueError):
  """Bad tagging data; the message starts with file:line."""


@dataclasses.dataclass
class Sentence:
  tokens: List[str]
  tags: Optional[List[str]]  # None when the file has no tag column
  line: int                  # 1-based line of the first token


@dataclasses.dataclass
class ConllData:
  file: str
  sentences: List[Sentence]
  scheme: str                # one of SCHEMES
  has_tags: bool
  docstarts: int = 0         # -DOCSTART- lines skipped
  stray_tags: int = 0        # gold tags out of place (see `stray_tags`)

  @property
  def entity_types(self) -> List[str]:
    return sorted({tag[2:] for s in self.sentences for tag in s.tags or ()
                   if tag != "O"})


def canonical_scheme(name: Optional[str]) -> Optional[str]:
  if not name:
    return None
  key = name.strip().upper()
  if key not in _SCHEME_ALIASES:
    raise ValueError(f"--tag_scheme must be one of {', '.join(SCHEMES)} (or "
                     f"IOB2, IOBES), got {name!r}")
  return _SCHEME_ALIASES[key]


# ------------------------------------------------------------------ schemes
def _split(tag: str) -> Tuple[str, Optional[str]]:
  """("B", "PER") for "B-PER", ("O", None) for "O"."""
  if tag == "O":
    return "O", None
  match = _TAG_RE.match(tag)
  if not match:
    raise ValueError(f"unknown tag {tag!r} (expected O or B-/I-/E-/S-/M- "
                     "followed by a type, e.g. B-PER)")
  return match.group(1), match.group(2)


def detect_scheme(tag_lists: Sequence[Sequence[str]]) -> str:
  """The scheme the tags are written in.

  M → BMES; E or S (no M) → BIOES; only B/I: IOB1 when entities start
  with I- (after O or after another type) and B- never starts one, else BIO.
  """
  prefixes, iob1, bio = set(), False, False
  for tags in tag_lists:
    prev = None
    for tag in tags:
      prefix, kind = _split(tag)
      prefixes.add(prefix)
      if prefix == "I" and prev != kind:
        iob1 = True
      if prefix == "B" and prev != kind:
        bio = True  # IOB1 has B- only between two entities of one type
      prev = kind
  if "M" in prefixes:
    if "I" in prefixes:
      raise ValueError("the tags mix I- and M-: neither BIOES nor BMES")
    return "BMES"
  if prefixes & {"E", "S"}:
    return "BIOES"
  # Both kinds of evidence: a BIO file with a stray I- (reported by the
  # strict BIO check, at its line).
  return "IOB1" if iob1 and not bio else "BIO"


def stray_tags(tags: Sequence[str], scheme: str) -> List[Tuple[int, str]]:
  """Tags of one sentence that are out of place under `scheme`, but readable.

  Such a tag does not continue an entity (an I-/M-/E- at the sentence start,
  after O or after another type) or leaves its entity open (BIOES and BMES
  end one with E-/S-): what a sentence split inside a name leaves, and what
  `spans(..., strict=False)` reads as conlleval and seqeval do.

  Returns:
    (index, why) for each such tag, why a one-line message.
  Raises:
    ValueError ("token N: ...") for a tag `scheme` does not have, or an IOB1
    B- that does not follow an entity of its type: the file is not written
    in `scheme` at all.
  """
  allowed = _PREFIXES[scheme]
  parsed = [_split(t) for t in tags]
  stray = []
  for i, (prefix, kind) in enumerate(parsed):
    if prefix != "O" and prefix not in allowed:
      raise ValueError(f"token {i + 1}: {tags[i]!r} is not a {scheme} tag")
    prev_p, prev_k = parsed[i - 1] if i else ("O", None)
    next_p, next_k = parsed[i + 1] if i + 1 < len(parsed) else ("O", None)
    after = tags[i - 1] if i else "the sentence start"
    if scheme == "IOB1" and prefix == "B" and prev_k != kind:
      raise ValueError(f"token {i + 1}: IOB1 uses B-{kind} only right after "
                       f"another {kind} entity, here after {after!r}")
    inside = prefix in "IEM" and not (scheme == "IOB1" and prefix == "I")
    if inside and (prev_k != kind or prev_p not in "BIM"):
      stray.append((i, f"{tags[i]!r} after {after!r} does not continue an "
                       f"entity ({scheme})"))
    elif scheme in ("BIOES", "BMES") and prefix in "BIM" and not (
        next_k == kind and next_p in "IEM"):
      stray.append((i, f"{tags[i]!r} is not followed by the rest of its "
                       f"entity ({scheme} ends one with E-/S-)"))
  return stray


def spans(tags: Sequence[str], scheme: str, strict: bool = True
          ) -> List[Tuple[str, int, int]]:
  """Entities of one sentence as (type, start, end) with end exclusive.

  strict: the tags must be well formed under `scheme` (ValueError naming the
  position of the first `stray_tags` otherwise). Not strict: read as
  seqeval's `get_entities` reads them (predicted tags, and gold tags with
  stray ones); see below.
  """
  parsed = [_split(t) for t in tags]
  if strict:
    stray = stray_tags(tags, scheme)
    if stray:
      raise ValueError(f"token {stray[0][0] + 1}: {stray[0][1]}")
  # One reader for every scheme (M read as I): seqeval's, which is
  # conlleval's for BIO and IOB1 (an I-X that continues no X starts one)
  # and extends it to S- and E-, which conlleval.pl lacks; seqeval because
  # the dev metric is seqeval's. BIOES `O E-PER E-PER` is two one-token
  # entities, BMES `M-PER E-PER` at the start one two-token entity.
  plain = ["O" if p == "O" else f"{'I' if p == 'M' else p}-{k}"
           for p, k in parsed]
  # Here, not at the top: seqeval loads scikit-learn (2 s), which
  # run_ner --help, reading TASK_NAMES, has no need of.
  from seqeval.metrics.sequence_labeling import get_entities  # pylint: disable=g-import-not-at-top
  return [(kind, start, end + 1) for kind, start, end in get_entities(plain)]


def from_spans(entities: Sequence[Tuple[str, int, int]], length: int,
               scheme: str) -> List[str]:
  """Tags of `length` tokens in `scheme` for (type, start, end) entities."""
  tags = ["O"] * length
  inner = "M" if scheme == "BMES" else "I"
  prev_end, prev_kind = -1, None
  for kind, start, end in sorted(entities, key=lambda e: e[1]):
    if scheme in ("BIOES", "BMES") and end - start == 1:
      tags[start] = f"S-{kind}"
    else:
      for i in range(start, end):
        tags[i] = f"{inner}-{kind}"
      if scheme == "IOB1":
        if prev_end == start and prev_kind == kind:
          tags[start] = f"B-{kind}"
      else:
        tags[start] = f"B-{kind}"
      if scheme in ("BIOES", "BMES"):
        tags[end - 1] = f"E-{kind}"
    prev_end, prev_kind = end, kind
  return tags


def convert(tags: Sequence[str], source: str, target: str,
            strict: bool = True) -> List[str]:
  """Tags from one scheme to another (through entity spans, lossless)."""
  return from_spans(spans(tags, source, strict), len(tags), target)


# ------------------------------------------------------------------ reading
def read_conll(path: str, tag_scheme: Optional[str] = None,
               strict_tags: bool = False) -> ConllData:
  """Reads and checks a CoNLL file; DataError names file:line on bad input.

  Stray gold tags (`stray_tags`) are counted in ConllData.stray_tags and
  named in one warning (the count and the first three file:line places);
  strict_tags makes the first of them a DataError instead.
  """
  with open(path, "rb") as f:
    raw = f.read()
  sentences: List[Sentence] = []
  tokens, tags, first_line = [], [], 0
  columns = None
  docstarts = 0

  def flush():
    if tokens:
      sentences.append(Sentence(list(tokens), list(tags) if columns and
                                columns > 1 else None, first_line))
    tokens.clear()
    tags.clear()

  for number, line in enumerate(raw.split(b"\n"), 1):
    where = f"{path}:{number}"
    try:
      text = line.decode("utf-8")
    except UnicodeDecodeError as e:
      raise DataError(f"{where}: not UTF-8 ({e.reason} at byte "
                      f"{e.start})") from None
    if number == 1:
      text = text.lstrip("\ufeff")
    text = text.rstrip("\r\n")
    if not text.strip():
      flush()
      continue
    fields = (text.split("\t") if "\t" in text else text.split())
    fields = [x.strip(" ") for x in fields] if "\t" in text else fields
    if fields[0] == DOCSTART:
      docstarts += 1
      flush()
      continue
    if columns is None:
      columns = len(fields)
    elif len(fields) != columns:
      raise DataError(f"{where}: {len(fields)} column(s), the file's first "
                      f"token line has {columns} (token [... ] tag)")
    token = fields[0]
    if not token or any(c.isspace() for c in token):
      raise DataError(f"{where}: the token {token!r} is empty or contains "
                      "whitespace (CoNLL tokens cannot)")
    if not tokens:
      first_line = number
    tokens.append(token)
    if columns > 1:
      tag = fields[-1]
      try:
        _split(tag)
      except ValueError as e:
        raise DataError(f"{where}: {e}") from None
      tags.append(tag)
  flush()
  if not sentences:
    raise DataError(f"{path}: no sentences (empty file?)")
  has_tags = bool(columns and columns > 1)
  scheme = canonical_scheme(tag_scheme)
  stray = []  # (line, tag) of every stray tag, in file order
  if has_tags:
    if scheme is None:
      try:
        scheme = detect_scheme([s.tags for s in sentences])
      except ValueError as e:
        raise DataError(f"{path}: {e}") from None
    for s in sentences:
      try:
        problems = stray_tags(s.tags, scheme)
      except ValueError as e:
        match = re.match(r"token (\d+): ", str(e))
        line = s.line + int(match.group(1)) - 1
        raise DataError(f"{path}:{line}: {str(e)[match.end():]}") from None
      if problems and strict_tags:
        raise DataError(f"{path}:{s.line + problems[0][0]}: "
                        f"{problems[0][1]}")
      stray.extend((s.line + i, s.tags[i]) for i, _ in problems)
  if stray:
    places = first_places([f"{path}:{line} {tag!r}" for line, tag in stray])
    logging.warning(
        "%s: %d %s tag(s) do not continue or close an entity (%s); read "
        "as conlleval and seqeval read them: an inside tag that continues "
        "no entity starts one, and an entity left open ends at its last "
        "tag (--strict_tags makes this an error)", path, len(stray), scheme,
        places)
  return ConllData(path, sentences, scheme or "BIO", has_tags, docstarts,
                   len(stray))


def to_bio(sentence: Sentence, scheme: str) -> List[str]:
  """The sentence's gold tags in BIO, stray ones read as `spans` reads them
  (read_conll has checked the rest)."""
  return convert(sentence.tags, scheme, "BIO", strict=False)
