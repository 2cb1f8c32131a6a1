"""CoNLL token-tagging files: read, check, convert between tag schemes.

    data = read_conll("data/ner/train.txt")          # scheme auto-detected
    tags = convert(data.sentences[0].tags, data.scheme, "BIO")

Files: a token per line, its tag in the last column (split on tabs if the
line has one, else on whitespace; none when unlabelled), a blank line between
sentences; CRLF, a BOM and `-DOCSTART-` lines (skipped) are accepted. Tag
schemes (`SCHEMES`) convert through entity spans without loss; the model
trains on BIO, predictions keep the file's scheme. A stray tag (`stray_tags`)
is read as seqeval reads it (`spans`): the F1 here is seqeval's.

Model windows, the entity metric and the predictions file are
`albert_tf.data.ner_data`.
"""

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

from absl import logging

from albert_tf.data import tsv_reader

# run_ner's --task_name: data_prep.corpora's People's Daily (BIO), any CoNLL.
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
  match = _TAG_RE.match(tag)
  if not match and tag != "O":
    raise ValueError(f"unknown tag {tag!r} (expected O or B-/I-/E-/S-/M- "
                     "followed by a type, e.g. B-PER)")
  return match.groups() if match else ("O", None)


def detect_scheme(tag_lists: Sequence[Sequence[str]]) -> str:
  """The scheme the tags are written in: M → BMES; E or S → BIOES; only B/I:
  IOB1 when entities start with I- and B- never starts one, else BIO."""
  prefixes, iob1, bio = set(), False, False
  for tags in tag_lists:
    prev = None
    for tag in tags:
      prefix, kind = _split(tag)
      prefixes.add(prefix)
      iob1 |= prefix == "I" and prev != kind
      bio |= prefix == "B" and prev != kind  # IOB1's B- follows its type
      prev = kind
  if "M" in prefixes:
    if "I" in prefixes:
      raise ValueError("the tags mix I- and M-: neither BIOES nor BMES")
    return "BMES"
  if prefixes & {"E", "S"}:
    return "BIOES"
  # Both: a BIO file with a stray I- (the BIO check reports it, at its line).
  return "IOB1" if iob1 and not bio else "BIO"


def stray_tags(tags: Sequence[str], scheme: str) -> List[Tuple[int, str]]:
  """(index, why) of each tag of one sentence that continues no entity or
  leaves its entity open (BIOES, BMES) under `scheme`, as a sentence split
  inside a name leaves. ValueError ("token N: ...") for a tag `scheme` does
  not have, or an IOB1 B- that does not follow an entity of its type."""
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
  """Entities of one sentence as (type, start, end), end exclusive, read as
  seqeval's `get_entities` (the dev metric's) reads them, M as I: an I-X
  that continues no X starts one (conlleval), BIOES `O E-PER E-PER` is two
  entities. strict: ValueError ("token N: ...") at the first `stray_tags`."""
  if strict:
    stray = stray_tags(tags, scheme)
    if stray:
      raise ValueError(f"token {stray[0][0] + 1}: {stray[0][1]}")
  plain = ["O" if p == "O" else f"{'I' if p == 'M' else p}-{k}"
           for p, k in map(_split, tags)]
  # Here, not at the top: seqeval loads scikit-learn (2 s), which
  # run_ner --help, reading TASK_NAMES, has no need of.
  from seqeval.metrics.sequence_labeling import get_entities  # pylint: disable=g-import-not-at-top
  return [(kind, start, end + 1) for kind, start, end in get_entities(plain)]


def convert(tags: Sequence[str], source: str, target: str,
            strict: bool = True) -> List[str]:
  """Tags from one scheme to another (through entity spans, lossless)."""
  out = ["O"] * len(tags)
  inner = "M" if target == "BMES" else "I"
  prev_end, prev_kind = -1, None
  for kind, start, end in sorted(spans(tags, source, strict),
                                 key=lambda e: e[1]):
    if target in ("BIOES", "BMES") and end - start == 1:
      out[start] = f"S-{kind}"
    else:
      out[start:end] = [f"{inner}-{kind}"] * (end - start)
      if target != "IOB1" or (prev_end, prev_kind) == (start, kind):
        out[start] = f"B-{kind}"
      if target in ("BIOES", "BMES"):
        out[end - 1] = f"E-{kind}"
    prev_end, prev_kind = end, kind
  return out


# ------------------------------------------------------------------ reading
def read_conll(path: str, tag_scheme: Optional[str] = None,
               strict_tags: bool = False) -> ConllData:
  """Reads and checks a CoNLL file; DataError names file:line on bad input.
  Stray gold tags are counted and named in one warning (strict_tags: the
  first is a DataError)."""
  try:
    lines = list(tsv_reader.text_lines(path))
  except tsv_reader.DataError as e:  # not UTF-8
    raise DataError(str(e)) from None
  sentences, rows, columns, docstarts = [], [], None, 0
  for number, text in lines + [(len(lines) + 1, "")]:  # "": the last flush
    where = f"{path}:{number}"
    fields = ([x.strip(" ") for x in text.split("\t")] if "\t" in text
              else text.split())
    if not text.strip() or fields[0] == DOCSTART:
      docstarts += bool(text.strip())
      if rows:
        sentences.append(Sentence([f[0] for f in rows], [f[-1] for f in rows]
                                  if columns > 1 else None, first_line))
      rows = []
      continue
    if columns is None:
      columns = len(fields)
    elif len(fields) != columns:
      raise DataError(f"{where}: {len(fields)} column(s), the file's first "
                      f"token line has {columns} (token [... ] tag)")
    if not fields[0] or any(c.isspace() for c in fields[0]):
      raise DataError(f"{where}: the token {fields[0]!r} is empty or "
                      "contains whitespace (CoNLL tokens cannot)")
    if columns > 1:
      try:
        _split(fields[-1])
      except ValueError as e:
        raise DataError(f"{where}: {e}") from None
    first_line = first_line if rows else number
    rows.append(fields)
  if not sentences:
    raise DataError(f"{path}: no sentences (empty file?)")
  has_tags = bool(columns and columns > 1)
  scheme = canonical_scheme(tag_scheme)
  stray = []  # (line, tag) of every stray tag, in file order
  if has_tags:
    try:
      scheme = scheme or detect_scheme([s.tags for s in sentences])
    except ValueError as e:
      raise DataError(f"{path}: {e}") from None
    for s in sentences:
      try:
        problems = stray_tags(s.tags, scheme)
        if problems and strict_tags:
          raise ValueError(f"token {problems[0][0] + 1}: {problems[0][1]}")
      except ValueError as e:  # "token N: why"
        n, why = str(e)[len("token "):].split(": ", 1)
        raise DataError(f"{path}:{s.line + int(n) - 1}: {why}") from None
      stray.extend((s.line + i, s.tags[i]) for i, _ in problems)
  if stray:
    logging.warning(
        "%s: %d %s tag(s) do not continue or close an entity (%s); read "
        "as conlleval and seqeval read them: an inside tag that continues "
        "no entity starts one, and an entity left open ends at its last "
        "tag (--strict_tags makes this an error)", path, len(stray), scheme,
        tsv_reader.first_places([f"{path}:{line} {tag!r}"
                                 for line, tag in stray]))
  return ConllData(path, sentences, scheme or "BIO", has_tags, docstarts,
                   len(stray))


def to_bio(sentence: Sentence, scheme: str) -> List[str]:
  """The sentence's gold tags in BIO, stray ones read as `spans` reads them
  (read_conll has checked the rest); well-formed BIO as it is (no seqeval)."""
  tags = sentence.tags
  if scheme == "BIO" and all(t[0] != "I" or p[1:] == t[1:]
                             for p, t in zip(["O"] + tags, tags)):
    return list(tags)
  return convert(tags, scheme, "BIO", strict=False)
