"""The one tokenizer interface of the project: SentencePiece model or WordPiece vocab.txt.

`load_tokenizer(spm_model_file=...)` wraps an ALBERT SentencePiece model (ids
pad=0, unk=1, [CLS]=2, [SEP]=3, [MASK]=4, as written by
`data_prep.train_vocab`); `load_tokenizer(vocab_file=...)` wraps a BERT-style
WordPiece `vocab.txt` (Google's Chinese ALBERT, brightmart's albert_zh).
Both return an `AlbertTokenizer` with the same methods, so callers never
branch on the kind.

  tok = load_tokenizer(spm_model_file="demo_output/vocab/spm.model")
  ids = [tok.cls_id] + tok.encode("迈向充满希望的新世纪。") + [tok.sep_id]

Plain Python (sentencepiece + unicodedata), no TensorFlow: data_prep's Beam
workers load it in every process. The normalisation is the table of
`albert_tf.data.normalization`, whose graph side the export's in-graph
tokenizer (`albert_tf.serving.text_graph`) runs.
"""

import collections
import functools
import hashlib
import itertools
import os
import unicodedata

from albert_tf.data import normalization

SPM_UNDERLINE = "\u2581"  # "▁": SentencePiece's word-start marker.
KINDS = ("sentencepiece", "wordpiece")

CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
# Pad/unk are spelled differently by the two vocabularies.
_PAD_TOKENS = {"sentencepiece": "<pad>", "wordpiece": "[PAD]"}
_UNK_TOKENS = {"sentencepiece": "<unk>", "wordpiece": "[UNK]"}

# ASCII punctuation, € and £ count as whole words in the original
# `_is_start_piece_sp`, as does any piece with a character outside a-z.
_SPM_WORD_PUNCT = frozenset('!"#$%&\'()*+,-./:;?@[\\]^_`{|}~') | {"€", "£"}
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")


# BERT's CJK ideograph blocks (the original tokenization._is_chinese_char).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
              (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
              (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_cjk_char(char):
  """True for a CJK Unified Ideograph (the ranges BERT splits one by one)."""
  cp = ord(char)
  return any(a <= cp <= b for a, b in CJK_RANGES)


def is_punctuation(char):
  # BERT treats every non-alphanumeric ASCII character as punctuation too
  # (e.g. "$", "^", "`"), beyond the Unicode P* categories.
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


# normalize(text, kind, do_lower_case): the steps of
# `normalization.PIPELINES[kind]`, as the original tokenizers run them.
normalize = normalization.normalize


class AlbertTokenizer:
  """Tokenizer over a SentencePiece model or a WordPiece vocabulary.

  Build it with `load_tokenizer`. Special ids (`pad_id`, `unk_id`, `cls_id`,
  `sep_id`, `mask_id`) come from the model/vocab itself.
  """

  def __init__(self, kind, model_file, do_lower_case, sp_model=None,
               vocab=None):
    if kind not in KINDS:
      raise ValueError(f"tokenizer kind must be one of {KINDS}, got {kind!r}")
    self.kind = kind
    self.model_file = model_file
    self.do_lower_case = do_lower_case
    self._sp = sp_model
    if kind == "sentencepiece":
      self._id_to_token = [sp_model.id_to_piece(i)
                           for i in range(sp_model.get_piece_size())]
    else:
      self._id_to_token = list(vocab)
    self._token_to_id = {t: i for i, t in enumerate(self._id_to_token)}
    self.pad_id = self._special_id(_PAD_TOKENS[kind])
    self.unk_id = self._special_id(_UNK_TOKENS[kind])
    self.cls_id = self._special_id(CLS_TOKEN)
    self.sep_id = self._special_id(SEP_TOKEN)
    self.mask_id = self._special_id(MASK_TOKEN)

  def _special_id(self, token):
    if token not in self._token_to_id:
      raise ValueError(
          f"{self.model_file}: the {self.kind} vocabulary has no {token!r} "
          "token (expected ALBERT special tokens: <pad>/[PAD], <unk>/[UNK], "
          "[CLS], [SEP], [MASK])")
    return self._token_to_id[token]

  @functools.cached_property
  def fingerprint(self):
    """(kind, do_lower_case, sha256 of the vocabulary): equal for tokenizers
    that give the same ids, whatever their files are named."""
    if self.kind == "sentencepiece":
      vocab = self._sp.serialized_model_proto()
    else:
      vocab = "\n".join(self._id_to_token).encode("utf-8")
    return self.kind, self.do_lower_case, hashlib.sha256(vocab).hexdigest()

  @property
  def vocab_size(self):
    return len(self._id_to_token)

  def normalize(self, text):
    return normalize(text, self.kind, self.do_lower_case)

  def tokenize(self, text):
    """Normalises and splits `text` into tokens (pieces) of the vocabulary."""
    text = self.normalize(text)
    if not text:
      return []
    if self.kind == "sentencepiece":
      return self._spm_pieces(text)
    return [piece for word in _basic_tokenize(text) for piece in _wordpiece(
        word, self._token_to_id, _UNK_TOKENS["wordpiece"])]

  def _spm_pieces(self, text):
    pieces = self._sp.encode(text, out_type=str)
    # As the original `encode_pieces`: "9," is re-split into "9" and "," so
    # numbers followed by a comma get the same pieces as bare numbers.
    out = []
    for piece in pieces:
      if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
        sub = self._sp.encode(piece[:-1].replace(SPM_UNDERLINE, ""),
                              out_type=str)
        # Inside a word the re-encoded number must not gain a "▁".
        if piece[0] != SPM_UNDERLINE and sub and sub[0][0] == SPM_UNDERLINE:
          sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
        out.extend(sub)
        out.append(",")
      else:
        out.append(piece)
    return out

  def convert_tokens_to_ids(self, tokens):
    return [self._token_to_id.get(t, self.unk_id) for t in tokens]

  def convert_ids_to_tokens(self, ids):
    return [self._id_to_token[i] for i in ids]

  def encode(self, text):
    """Token ids of `text` (no [CLS]/[SEP] added)."""
    return self.convert_tokens_to_ids(self.tokenize(text))

  def is_word_start(self, token):
    """True if `token` starts a word for whole-word masking.

    SentencePiece: as the original `_is_start_piece_sp` — a "▁" piece, a
    control/special piece ("<...>", "[...]"), a punctuation piece, or any
    piece with a character outside a-z (so each Chinese piece is a word).
    WordPiece: every token except "##" continuations (BERT splits each CJK
    character into its own token, so each is a word).
    """
    if self.kind == "wordpiece":
      return not token.startswith("##")
    if (token.startswith(SPM_UNDERLINE) or token.startswith("<") or
        token in (CLS_TOKEN, SEP_TOKEN, MASK_TOKEN) or token in _SPM_WORD_PUNCT):
      return True
    return not all(c.lower() in _ASCII_LETTERS or c in _SPM_WORD_PUNCT
                   for c in token)

  def word_start_table(self):
    """`is_word_start` for every id, as a list of bool of length vocab_size."""
    return [self.is_word_start(t) for t in self._id_to_token]


def _basic_tokenize(text):
  """BERT basic tokenization of normalised text: CJK and punctuation split."""
  words = []
  for chunk in text.split():
    for alone, run in itertools.groupby(
        chunk, lambda c: is_cjk_char(c) or is_punctuation(c)):
      words.extend(run if alone else ["".join(run)])
  return words


def _wordpiece(word, token_to_id, unk_token, max_chars_per_word=100):
  """Greedy longest-match-first split of one word into WordPiece tokens."""
  if len(word) > max_chars_per_word:
    return [unk_token]
  pieces, start = [], 0
  while start < len(word):
    prefix = "##" if start else ""
    end = next((e for e in range(len(word), start, -1)
                if prefix + word[start:e] in token_to_id), None)
    if end is None:
      return [unk_token]  # BERT: one unknown sub-piece makes the word [UNK].
    pieces.append(prefix + word[start:end])
    start = end
  return pieces


def load_tokenizer(spm_model_file=None, vocab_file=None, do_lower_case=True):
  """An `AlbertTokenizer` of a SentencePiece `.model` (ALBERT ids) or a
  WordPiece `vocab.txt` (one token per line): exactly one must be given.
  Raises ValueError: neither or both given, or the file is missing,
  unreadable or lacks the special tokens."""
  if (spm_model_file is None) == (vocab_file is None):
    raise ValueError("give exactly one of spm_model_file= or vocab_file= "
                     f"(got spm_model_file={spm_model_file!r}, "
                     f"vocab_file={vocab_file!r})")
  path = spm_model_file or vocab_file
  if not os.path.isfile(path):
    raise ValueError(f"tokenizer file {path!r} does not exist")
  if spm_model_file:
    import sentencepiece as spm  # Only needed for SentencePiece models.
    sp = spm.SentencePieceProcessor()
    try:
      sp.Load(spm_model_file)
    except (OSError, RuntimeError) as e:
      raise ValueError(
          f"cannot load SentencePiece model {spm_model_file!r}: {e}") from e
    return AlbertTokenizer("sentencepiece", spm_model_file, do_lower_case,
                           sp_model=sp)
  try:
    with open(vocab_file, encoding="utf-8") as f:
      # Only the newline is stripped: whitespace-like tokens keep their ids.
      vocab = [line.rstrip("\n").rstrip("\r") for line in f]
  except UnicodeDecodeError as e:
    raise ValueError(f"WordPiece vocab {vocab_file!r} is not UTF-8 text: {e}")
  counts = collections.Counter(vocab)
  duplicates = [t for t, c in counts.items() if c > 1 and t]
  if duplicates:
    raise ValueError(f"{vocab_file}: duplicate tokens {duplicates[:5]}")
  return AlbertTokenizer("wordpiece", vocab_file, do_lower_case, vocab=vocab)


def file_sha256(path: str) -> str:
  """sha256 of a tokenizer (or any local) file: what manifests and run
  fingerprints compare."""
  with open(path, "rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def write_synced(path: str, data: bytes) -> None:
  """Writes data to path and syncs it: some file systems report a full disk
  only at the sync or the close. The first half of an atomic write: path is
  always a temporary file or lies in a scratch folder, which the caller
  renames into place (train_vocab, export_tflite, export_onnx,
  convert_checkpoint)."""
  with open(path, "wb") as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
