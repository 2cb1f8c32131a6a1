"""Reading the input: text files -> raw documents, in byte ranges.

A document is a run of non-empty lines (one sentence each) between blank
lines. `plan_reads` cuts each uncompressed file into byte ranges that start
at document boundaries, so the ranges are read by different workers with no
look-back; a compressed file is one range. `read_raw_documents` yields the
documents of a range as bytes, with memory bounded by --max_line_bytes, and
`classify_raw_document` says which are junk. A truncated or corrupt
compressed file raises BadInputError after its last complete document.
"""

import bz2
import contextlib
import gzip
import json
import lzma
import re
import unicodedata
import zlib

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from albert_tf.core import errors

# Why a document is skipped: by classify_raw_document (the first three) and
# after tokenizing (data_prep.transforms.tokenize_raw_document).
SKIP_REASONS = ("line_too_long", "binary", "invalid_utf8", "empty",
                "single_sentence")
_READ_CHUNK_BYTES = 1 << 20
# Input files are read in ranges of about this size, so reading, tokenizing
# and instance creation of one file spread over the workers (see plan_reads);
# the size comes from the input size.
_MIN_SPLIT_BYTES = 64 << 10
_MAX_SPLIT_BYTES = 64 << 20
_SPLITS_PER_INPUT = 64
_SPLIT_SCAN_BYTES = 4 << 20
_SPLIT_SCAN_CHUNK = 64 << 10
_EMPTY_LINE = re.compile(rb"\n\r?\n")
# More than this share of control characters marks a document as binary junk.
_MAX_CONTROL_CHAR_FRACTION = 0.05


def match_inputs(input_file):
  """Paths of the comma-separated globs; ValueError naming an empty one."""
  paths = []
  for pattern in filter(None, (p.strip() for p in input_file.split(","))):
    matched = [m.path for r in FileSystems.match([pattern])
               for m in r.metadata_list]
    if not matched:
      raise ValueError(errors.error_line(
          f"no file matches {pattern!r}", "--input_file",
          "check the path; comma-separated globs and .gz files are accepted"))
    paths.extend(sorted(matched))
  if not paths:
    raise ValueError(errors.error_line(f"no file named in {input_file!r}",
                                 "--input_file", "give comma-separated globs"))
  return paths


def iter_lines(f, max_line_bytes, limit=None):
  """Yields (line, too_long) from a binary file; memory stays bounded.

  A line longer than max_line_bytes is yielded once as (None, True); its
  bytes are never held in memory beyond one chunk. With `limit`, reads at
  most that many bytes from the current position.
  """
  pending = b""
  discarding = False  # Inside a too-long line: drop bytes until "\n".
  remaining = limit
  while True:
    size = _READ_CHUNK_BYTES if remaining is None else min(
        _READ_CHUNK_BYTES, remaining)
    chunk = f.read(size) if size else b""
    if not chunk:
      break
    if remaining is not None:
      remaining -= len(chunk)
    parts = chunk.split(b"\n")
    for part in parts[:-1]:
      if discarding:
        discarding = False
        yield None, True
        continue
      line = pending + part
      pending = b""
      if len(line) > max_line_bytes:
        yield None, True
      else:
        yield line.rstrip(b"\r"), False
    if discarding:
      continue
    pending += parts[-1]
    if len(pending) > max_line_bytes:
      pending, discarding = b"", True
  if discarding:
    yield None, True
  elif pending:
    if len(pending) > max_line_bytes:
      yield None, True
    else:
      yield pending.rstrip(b"\r"), False


def _is_compressed(path):
  return (CompressionTypes.detect_compression_type(path) !=
          CompressionTypes.UNCOMPRESSED)


def _next_document_start(f, offset, scan_bytes):
  """Offset of the first line after an empty line ("\n\n" or "\n\r\n") in
  the scan_bytes after `offset`, else None. Whitespace-only lines separate
  documents too but are no split points: a split never depends on
  max_line_bytes."""
  f.seek(offset)
  window, scanned = b"", 0
  while scanned < scan_bytes:
    chunk = f.read(_SPLIT_SCAN_CHUNK)
    if not chunk:
      return None
    # Keep the last two bytes: "\n\r\n" may straddle two chunks.
    window_start = offset + scanned - len(window)
    window += chunk
    scanned += len(chunk)
    match = _EMPTY_LINE.search(window)
    if match is not None:
      return window_start + match.end()
    window = window[-2:]
  return None


def input_sizes(paths):
  """Sizes in bytes of the files, in order; ValueError for a vanished one."""
  sizes = []  # one match call: one request per batch on remote storage
  for path, result in zip(paths, FileSystems.match(list(paths))):
    if not result.metadata_list:
      raise ValueError(f"--input_file: {path!r} disappeared before reading")
    sizes.append(result.metadata_list[0].size_in_bytes)
  return sizes


def plan_reads(paths, split_bytes=None, sizes=None):
  """(path, start, end) byte ranges that together hold every document once.

  Uncompressed files are cut about every split_bytes (None: about
  _SPLITS_PER_INPUT ranges in all, within the size bounds), each cut moved
  forward to a document start, so a range reader needs no look-back: the
  documents of one pass over the file. A compressed file is one range (end
  None: to EOF). sizes: the files' sizes in bytes, if known.
  """
  sizes = input_sizes(paths) if sizes is None else sizes
  if split_bytes is None:
    split_bytes = min(_MAX_SPLIT_BYTES,
                      max(_MIN_SPLIT_BYTES, sum(sizes) // _SPLITS_PER_INPUT))
  ranges = []
  for path, size in zip(paths, sizes):
    if _is_compressed(path) or size <= split_bytes:
      ranges.append((path, 0, None))
      continue
    starts = [0]
    with FileSystems.open(path, compression_type=
                          CompressionTypes.UNCOMPRESSED) as f:
      for offset in range(split_bytes, size, split_bytes):
        if offset < starts[-1]:
          continue  # The previous cut already moved past this one.
        start = _next_document_start(f, offset, _SPLIT_SCAN_BYTES)
        if start is not None and start < size:
          starts.append(start)
    ends = starts[1:] + [None]
    ranges.extend((path, a, b) for a, b in zip(starts, ends))
  return ranges


class BadInputError(ValueError):
  """A compressed input file is truncated or corrupt. Raised in a worker;
  its text carries a marker (find_in) so that the launcher finds the file and
  reason in whatever exception the runner raises."""

  _MARK = re.compile(r"<<bad-input>>(.*?)<</bad-input>>", re.S)

  def __init__(self, path, detail):
    self.path, self.detail = path, detail
    super().__init__("<<bad-input>>" + json.dumps(
        {"path": path, "detail": detail}) + "<</bad-input>>")

  @classmethod
  def find_in(cls, text):
    """(path, detail) of the first BadInputError in an error text, or None."""
    match = cls._MARK.search(text)
    if match is None:
      return None
    try:
      found = json.loads(match.group(1))
    except ValueError:
      return None
    return found["path"], found["detail"]


# Errors of the decompressors on a damaged stream: gzip's EOFError
# ("Compressed file ended before the end-of-stream marker was reached") and
# BadGzipFile (an OSError: bad magic, CRC or length), zlib.error, bz2's
# OSError ("Invalid data stream"), lzma.LZMAError.
_DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError)


class _ReadOne:
  """read(n) as read1(n): returns what one decompression step gave.

  A buffered read(1 MB) of a truncated stream raises without returning the
  bytes it had decompressed; read1 hands them out first, so the complete
  documents before the damage are seen before the error.
  """

  def __init__(self, f):
    self._f = f

  def read(self, size=-1):
    return self._f.read1(size)


class _StreamReader:
  """read(n) of a decompressor object over a raw binary file.

  For DEFLATE and zstd, which Python has no file reader for: one
  decompression step per read (as _ReadOne), concatenated streams read on,
  and EOFError when the file ends inside a stream; an empty file is empty,
  as with gzip. (Beam's CompressedFile stops quietly where the data stops.)
  """

  # Compressed bytes per step: small, so that one step's output stays far
  # below memory even at a high compression ratio.
  _RAW_CHUNK_BYTES = 64 << 10

  def __init__(self, raw, new_decompressor):
    self._raw = raw
    self._new_decompressor = new_decompressor
    self._stream = new_decompressor()
    self._empty = True

  def read(self, size=-1):
    del size  # As read1: what one step gives.
    while True:
      if self._stream.eof:
        data = self._stream.unused_data or self._raw.read(
            self._RAW_CHUNK_BYTES)
        if not data:
          return b""
        self._stream = self._new_decompressor()  # The next stream.
      else:
        data = self._raw.read(self._RAW_CHUNK_BYTES)
        if not data:
          if self._empty:
            return b""
          raise EOFError("compressed stream ended before its end marker")
        self._empty = False
      out = self._stream.decompress(data)
      if out:
        return out


def _zstd_decompressor():
  import zstandard  # pylint: disable=g-import-not-at-top
  # Beam's window limit: a big file's frame may need more than the default.
  return zstandard.ZstdDecompressor(max_window_size=2 << 30).decompressobj()


@contextlib.contextmanager
def _open_input(path):
  """A binary reader of the (decompressed) file: Python's own for gzip,
  bzip2 and lzma, _StreamReader for DEFLATE and zstd. Both raise on a
  truncated or corrupt stream, where Beam's CompressedFile would read half a
  file as half the documents."""
  compression = CompressionTypes.detect_compression_type(path)
  openers = {CompressionTypes.GZIP: lambda raw: _ReadOne(
      gzip.GzipFile(fileobj=raw)),
             CompressionTypes.BZIP2: lambda raw: _ReadOne(bz2.BZ2File(raw)),
             CompressionTypes.LZMA: lambda raw: _ReadOne(lzma.LZMAFile(raw)),
             CompressionTypes.DEFLATE: lambda raw: _StreamReader(
                 raw, zlib.decompressobj),
             CompressionTypes.ZSTD: lambda raw: _StreamReader(
                 raw, _zstd_decompressor)}
  with FileSystems.open(path, compression_type=
                        CompressionTypes.UNCOMPRESSED) as raw:
    if compression == CompressionTypes.UNCOMPRESSED:
      yield raw
    else:
      yield openers[compression](raw)


def check_inputs_respond(paths, timeout_secs):
  """Reads the first byte of every input, each within timeout_secs (<= 0:
  forever): a named pipe without a writer or a hung mount is then an
  InputTimeoutError naming the file, not a hung pipeline."""
  from albert_tf.data import input_timeout  # pylint: disable=g-import-not-at-top

  def probe(progress):
    for path in paths:
      progress(f"--input_file {path}")
      with _open_input(path) as f:
        f.read(1)

  input_timeout.with_input_timeout(probe, timeout_secs)


def _lines_before(path, offset):
  """How many lines of the file end before byte `offset`."""
  count = 0
  with _open_input(path) as f:
    while offset > 0:
      chunk = f.read(min(_READ_CHUNK_BYTES, offset))
      if not chunk:
        break
      count += chunk.count(b"\n")
      offset -= len(chunk)
  return count


MAX_PLACES = 3  # whitespace-only lines named in the warning (all counted)

# First bytes of the characters str.strip() removes beyond bytes.strip()'s
# ASCII set: \x1c-\x1f, and in UTF-8 U+0085/U+00A0 (C2), U+1680 (E1),
# U+2000-U+205F (E2) and U+3000, the ideographic space (E3).
_UNICODE_SPACE_LEADS = frozenset(b"\x1c\x1d\x1e\x1f\xc2\xe1\xe2\xe3")


def is_blank(line: bytes) -> bool:
  """Whether a line is blank as the original reads it: `line.strip()` of
  the decoded text is empty, so a line of U+3000 ideographic spaces (common
  in Chinese text) is blank too. Only a line whose first non-ASCII-space
  byte may start such a character is decoded."""
  stripped = line.strip()
  if not stripped:
    return True
  if stripped[0] not in _UNICODE_SPACE_LEADS:
    return False
  return not stripped.decode("utf-8", "replace").strip()


def read_raw_documents(path, max_line_bytes, start=0, end=None,
                       whitespace_lines=None):
  """Yields (lines: tuple of bytes, has_long_line: bool) per document.

  Reads bytes [start, end) of the file (end None: to its end); `start` is
  0 or a document start from `plan_reads`. A truncated or corrupt compressed
  file raises BadInputError after its last complete document.

  A whitespace-only line (`is_blank`) ends a document as a blank line does;
  one that does is counted in `whitespace_lines`, if given: {"count": n,
  "places": the first MAX_PLACES "path:line" (1-based)}, for the warning.
  """
  lines, long_line = [], False
  compressed = _is_compressed(path)
  first_line = None  # of the range, counted at the first such line
  try:
    with _open_input(path) as f:
      if start:
        f.seek(start)
      limit = None if end is None else end - start
      for number, (line, too_long) in enumerate(
          iter_lines(f, max_line_bytes, limit)):
        if too_long:
          long_line = True
        elif not is_blank(line):
          lines.append(line)
        elif lines or long_line:
          if line and whitespace_lines is not None:
            whitespace_lines["count"] = whitespace_lines.get("count", 0) + 1
            places = whitespace_lines.setdefault("places", [])
            if len(places) < MAX_PLACES:
              if first_line is None:
                first_line = 1 + (_lines_before(path, start) if start else 0)
              places.append(f"{path}:{first_line + number}")
          yield tuple(lines), long_line
          lines, long_line = [], False
  except _DECOMPRESSION_ERRORS as e:
    if not compressed:
      raise
    raise BadInputError(path, f"{type(e).__name__}: {e}") from e
  if lines or long_line:
    yield tuple(lines), long_line


def classify_raw_document(lines, long_line):
  """(reason, texts): a skip reason or None, and the decoded lines."""
  if long_line:
    return "line_too_long", None
  if any(b"\x00" in line for line in lines):
    return "binary", None
  try:
    texts = [line.decode("utf-8") for line in lines]
  except UnicodeDecodeError:
    return "invalid_utf8", None
  num_chars = sum(len(t) for t in texts)
  num_control = sum(1 for t in texts for c in t
                    if c != "\t" and unicodedata.category(c) == "Cc")
  if num_chars and num_control > _MAX_CONTROL_CHAR_FRACTION * num_chars:
    return "binary", None
  return None, texts

