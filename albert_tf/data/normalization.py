"""The tokenizers' text normalisation, written once: a table of steps.

Every rule the tokenizers apply to raw text before splitting it is one
`Step` here: its `description` is the exported metadata's text (`app_rules`:
albert_export.json, the TFLite JSON), its `python` side what
`tokenization.normalize` runs (data_prep, the fine-tuning readers), its
`graph` side what `text_graph.TextEncoder.normalize` runs (`serve_text`).

Each step also says how it moves characters (`offsets`), for the maps from
normalised characters back to the original text that span question answering
needs (`serving/span_graph.py`, in the graph):

  - `PER_CHARACTER`: the step run on each character alone (`python` /
    `graph` of a one-character string), a character it deletes joining the
    span of the character before it. Exact but where a rule looks at
    neighbours (Python's word-final sigma, the canonical reordering of
    combining marks), which the maps check against the whole-text result;
  - `SPACE_RUNS`: each run of `str.isspace` characters becomes one " " spanning
    the run, none at the ends;
  - `PAIRS`: each two-character string of the step's `pairs` becomes its
    replacement spanning both (left to right, one pair after the other).

`PIPELINES[kind]` puts the steps of each tokenizer kind in its own order
(ALBERT's `preprocess_text`: NFKD, drop combining characters, lowercase;
BERT's `BasicTokenizer`: lowercase, NFD, drop Mn); `steps(kind,
do_lower_case)` leaves out the lowercasing ones when do_lower_case is off.

The characters a step selects (whitespace, controls, combining marks) are
decided by one Python predicate each; the graph side matches them with an
RE2 class generated from that same predicate over every assigned code
point (`char_class`), so both sides agree character for character. Known
remaining difference: TF's ICU case tables are older than Python's
`unicodedata` (Python 3.11: Unicode 14) for 40 capital letters added in
Unicode 14 (Vithkuqi, Glagolitic U+2C2F, Latin Extended-D U+A7C0...), which
`str.lower` lowercases and the graph keeps (tests/test_preprocessing_parity
checks that the difference is exactly those). TF-free at import (data_prep's
Beam workers load it); the graph sides import TF when called.
"""

import dataclasses
import functools
import itertools
import sys
import unicodedata
from typing import Any, Callable, Dict, List, Tuple


# ------------------------------------------------------------ predicates
def is_dropped_control(char):
  """What WordPiece normalisation deletes: NUL, U+FFFD and Cc/Cf except
  tab and newlines (BERT's _clean_text)."""
  if char in "\x00\ufffd":
    return True
  if char in "\t\n\r":
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


# The predicates of the steps below, by the name `char_class` takes
# ("space": str.split() with no argument splits on exactly these).
CHAR_PREDICATES = {
    "space": str.isspace,
    "control": is_dropped_control,
    "combining": lambda char: unicodedata.combining(char) != 0,
    "nonspacing_mark": lambda char: unicodedata.category(char) == "Mn",
}


# ------------------------------------------------------------ RE2 classes
def re2_class(codepoints):
  """An RE2 character class `[...]` matching exactly `codepoints` (sorted)."""
  parts = []
  # Consecutive code points share cp - index: one range each.
  for _, run in itertools.groupby(enumerate(codepoints),
                                  lambda x: x[1] - x[0]):
    run = [cp for _, cp in run]
    parts.append(f"\\x{{{run[0]:x}}}" + (
        f"-\\x{{{run[-1]:x}}}" if len(run) > 1 else ""))
  return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=None)
def assigned_characters():
  """Every character but the unassigned (Cn), private-use (Co) and surrogate
  (Cs) code points, in order (none passes a predicate used here): about
  145k of the 1.1M, found with C-level map/compress so that an export does
  not spend seconds calling Python predicates on the rest."""
  everything = "".join(map(chr, range(sys.maxunicode + 1)))
  keep = map(str.__ne__, map(unicodedata.category, everything),
             itertools.repeat("Cn"))
  return [c for c in itertools.compress(everything, keep)
          if unicodedata.category(c) not in ("Co", "Cs")]


@functools.lru_cache(maxsize=None)
def predicate_class(predicate):
  """RE2 class of the assigned characters `predicate` accepts."""
  return re2_class(ord(c) for c in assigned_characters() if predicate(c))


def char_class(name):
  """RE2 class of one of `CHAR_PREDICATES`, by name."""
  return predicate_class(CHAR_PREDICATES[name])


# ------------------------------------------------------------ steps
# How a step moves characters (`Step.offsets`; see the module docstring).
PER_CHARACTER, SPACE_RUNS, PAIRS = "per_character", "space_runs", "pairs"


@dataclasses.dataclass(frozen=True)
class Step:
  """One normalisation rule, in prose, in Python and in the TF graph."""
  name: str
  description: str
  python: Callable[[str], str]
  graph: Callable[[Any], Any]  # tf.string tensor -> tf.string tensor
  lower_case_only: bool = False  # runs only with do_lower_case
  offsets: str = PER_CHARACTER  # or SPACE_RUNS, PAIRS
  # PAIRS: (two characters, replacement), in the order they are replaced.
  pairs: Tuple[Tuple[str, str], ...] = ()


def _drop_step(name, description, predicate, lower_case_only=False):
  """A step deleting every character `predicate` accepts."""
  def python(text):
    return "".join(c for c in text if not predicate(c))

  def graph(text):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.strings.regex_replace(text, predicate_class(predicate), "")
  return Step(name, description, python, graph, lower_case_only)


def _unicode_form_step(form):
  def python(text):
    return unicodedata.normalize(form, text)

  def graph(text):
    import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
    return tf_text.normalize_utf8(text, form)
  return Step(form.lower(), f"Unicode {form}", python, graph,
              lower_case_only=True)


def _collapse_whitespace_graph(text):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  text = tf.strings.regex_replace(text, char_class("space") + "+", " ")
  return tf.strings.regex_replace(text, "^ | $", "")


def _quotes_graph(text):
  # `` and '' share no character, so one left-to-right pass replaces the
  # same pairs as the two str.replace calls.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.strings.regex_replace(text, "``|''", '"')


def _lower_graph(text):
  """str.lower in the graph, NUL characters included.

  With encoding="utf-8" tf.strings.lower stops at the first NUL
  ("Paris\\x00 Museum" -> "paris"), so each NUL-free part is lowercased on
  its own and the parts joined back with their NULs. A NUL is neither cased
  nor case-ignorable, so no casing context (the word-final sigma "ς") crosses
  it: the parts lowercase as the whole string does in Python.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  parts = tf.strings.split(tf.reshape(text, [-1]), sep="\x00")  # [n, (k)]
  lengths = parts.row_lengths()
  last = tf.equal(tf.ragged.range(lengths).flat_values,
                  tf.gather(lengths, parts.value_rowids()) - 1)
  # reduce_join's separator attribute cannot hold a NUL; a tensor can.
  nul = tf.where(last, "", tf.constant("\x00"))
  lowered = tf.strings.join(
      [tf.strings.lower(parts.flat_values, encoding="utf-8"), nul])
  joined = tf.strings.reduce_join(parts.with_flat_values(lowered), axis=-1)
  return tf.reshape(joined, tf.shape(text))


DROP_CONTROLS = _drop_step(
    "drop_controls",
    "drop U+0000, U+FFFD and Cc/Cf characters except \\t \\n \\r",
    is_dropped_control)
COLLAPSE_WHITESPACE = Step(
    "collapse_whitespace",
    "collapse every run of whitespace (Python str.isspace) to one space; "
    "strip leading/trailing whitespace",
    lambda text: " ".join(text.split()), _collapse_whitespace_graph,
    offsets=SPACE_RUNS)
LATEX_QUOTES = Step("latex_quotes", "replace `` and '' with \"",
                    lambda text: text.replace("``", '"').replace("''", '"'),
                    _quotes_graph, offsets=PAIRS,
                    pairs=(("``", '"'), ("''", '"')))
NFKD = _unicode_form_step("NFKD")
NFD = _unicode_form_step("NFD")
DROP_COMBINING = _drop_step(
    "drop_combining", "drop combining characters (unicodedata.combining != 0)",
    CHAR_PREDICATES["combining"], lower_case_only=True)
DROP_NONSPACING_MARKS = _drop_step(
    "drop_nonspacing_marks", "drop non-spacing marks (Mn)",
    CHAR_PREDICATES["nonspacing_mark"], lower_case_only=True)
LOWERCASE = Step("lowercase", "lowercase", str.lower, _lower_graph,
                 lower_case_only=True)

# The one table: each kind's steps, in the order they run.
PIPELINES: Dict[str, Tuple[Step, ...]] = {
    # ALBERT's `preprocess_text` (its " ".join(text.split()) first).
    "sentencepiece": (COLLAPSE_WHITESPACE, LATEX_QUOTES, NFKD, DROP_COMBINING,
                      LOWERCASE),
    # BERT's `BasicTokenizer`: _clean_text, whitespace, then lowercase and
    # accent stripping. NFD, not NFKD, so full-width punctuation keeps the
    # ids BERT's Chinese vocab gives it.
    "wordpiece": (DROP_CONTROLS, COLLAPSE_WHITESPACE, LOWERCASE, NFD,
                  DROP_NONSPACING_MARKS),
}


def steps(kind, do_lower_case=True) -> Tuple[Step, ...]:
  """The steps a tokenizer of `kind` runs, in order."""
  if kind not in PIPELINES:
    raise ValueError(f"tokenizer kind must be one of {tuple(PIPELINES)}, "
                     f"got {kind!r}")
  return tuple(s for s in PIPELINES[kind]
               if do_lower_case or not s.lower_case_only)


def normalize(text, kind="sentencepiece", do_lower_case=True):
  """Runs the Python side of `steps(kind, do_lower_case)` on a str."""
  for step in steps(kind, do_lower_case):
    text = step.python(text)
  return text


def normalize_graph(text, kind="sentencepiece", do_lower_case=True):
  """Runs the graph side of `steps(kind, do_lower_case)` on a tf.string
  tensor (any shape)."""
  for step in steps(kind, do_lower_case):
    text = step.graph(text)
  return text


def offset_groups(kind, do_lower_case=True) -> List[Tuple[Step, ...]]:
  """`steps(kind, do_lower_case)` as the offset maps run them: each
  SPACE_RUNS or PAIRS step alone, and each run of consecutive PER_CHARACTER
  steps as one group, run together on each original character (so a
  character's expansion, e.g. NFKD's "e" + U+0301, goes through the next
  steps as one string, and what they delete of it stays in its span)."""
  groups = []
  for step in steps(kind, do_lower_case):
    if (step.offsets == PER_CHARACTER and groups and
        groups[-1][-1].offsets == PER_CHARACTER):
      groups[-1] += (step,)
    else:
      groups.append((step,))
  return groups


def app_rules(tokenizer, token_level=None) -> List[str]:
  """The text rules an app applies before the model (albert_export.json's
  `normalization`): this table's steps, then tokenizing and packing.

  token_level: a tagger's ("char"/"word"): the text is split into tokens
  first and each token goes through the rules on its own
  (`tagging_graph.TextTagger`).
  """
  rules = [step.description for step in steps(
      tokenizer.kind, tokenizer.do_lower_case)] + [
      "SentencePiece encode (the model's own normalizer runs inside); a "
      "piece ending in <digit>',' is re-encoded without the ',' and "
      "followed by ','" if tokenizer.kind == "sentencepiece" else
      "split on whitespace, punctuation (ASCII symbols + Unicode P*) and "
      "CJK ideographs (each its own word); WordPiece longest-match-first "
      "with '##' continuations; a word over 100 characters or with an "
      "unknown piece is [UNK]"]
  if not token_level:
    return rules + ["pack [CLS] a [SEP] (b [SEP]); truncate the longer "
                    "segment first to max_seq_length; pad with the pad id; "
                    "input_mask 1 for real tokens; segment_ids 0 for a, 1 "
                    "for b"]
  split = ("every non-whitespace character (not str.isspace) is a token"
           if token_level == "char" else
           "a run of letters, digits and combining marks outside the CJK "
           "ideographs is one token; every other non-whitespace character "
           "(each CJK ideograph, each punctuation mark) is a token alone")
  return ([f"split the raw text into tokens (token_level={token_level}): "
           f"{split}; keep each token's code-point offsets",
           "each token on its own:"] + [f"  {rule}" for rule in rules] +
          ["  SentencePiece: drop a bare leading '\u2581' piece when other "
           "pieces follow; a token with no piece is the unknown piece",
           "pack [CLS] the pieces of every token [SEP], cut after "
           "max_seq_length - 2 pieces; pad; tokens whose first piece is past "
           "the cut are not tagged",
           "a token's tag is tag_ids at its first piece; entities as "
           "conlleval reads BIO tags, from the first character of the first "
           "token to the last character of the last token"])
