"""run_pipeline: checks the inputs, runs the Beam pipeline, marks the run done.

Every mistake in an argument, an input or the tokenizer file is a ValueError
of one line, `error: <what>, <where> (<hint>)`, raised before anything is
written. While the pipeline runs, a log line every progress_interval_secs
gives the workers' counts so far, records/s and an ETA from the planned byte
ranges read (data_prep.progress); a last line gives the committed counts.

Bad documents are counted and skipped, never fatal: a document with a line
over max_line_bytes ("line_too_long"), NUL bytes or mostly control
characters ("binary"), invalid UTF-8 ("invalid_utf8"), no tokens ("empty"),
or fewer than two non-empty sentences ("single_sentence": no sentence pair to
order). A document of more than max_sentences_per_document sentences is
counted and logged as a warning (a corpus without blank lines between
documents is one huge document). Bad input FILES and empty results are
errors, one line naming the file or the counts: a truncated or corrupt
compressed input (with skip_bad_inputs: its complete documents before the
damage are kept, the rest of the file is skipped, and the skip is logged and
listed in summary.json and the manifest), and a run that makes no instance
at all (no _SUCCESS, no manifest).
"""

import dataclasses
import logging
import os
import re
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from albert_tf.core import errors
from albert_tf.data import tokenization
from data_prep import instances as instances_lib
from data_prep import outputs
from data_prep import progress as progress_lib
from data_prep import reading
from data_prep import runners
from data_prep import transforms

_LOGGER = logging.getLogger(__name__)


def run_pipeline(input_file, output_dir, spm_model_file=None, vocab_file=None,
                 do_lower_case=True, options=None, dupe_factor=40,
                 num_shards=4, overwrite=False, pipeline_args=(),
                 max_line_bytes=100_000, split_bytes=None,
                 skip_bad_inputs=False, max_sentences_per_document=10_000,
                 progress_interval_secs=10.0, input_timeout_secs=600,
                 no_worker_timeout_secs=60):
  """Checks inputs, runs the pipeline to completion, returns the summary dict.

  Args:
    input_file: comma-separated globs of text files.
    output_dir: directory of the shards, summary.json, _SUCCESS and
      manifest.json.
    spm_model_file / vocab_file: the tokenizer (exactly one).
    do_lower_case: tokenizer normalisation.
    options: `data_prep.instances.InstanceOptions`.
    dupe_factor: passes over each document, each with its own masks.
    num_shards: number of TFRecord files.
    overwrite: replace the output of a previous run in output_dir.
    pipeline_args: Beam options, e.g. ["--direct_num_workers=2"]; see
      data_prep.runners.choose_runner for the runner picked when --runner
      is not among them.
    max_line_bytes: a document with a longer line is skipped.
    split_bytes: read uncompressed files in ranges of about this size
      (default: from the input size, 256 KB to 64 MB).
    skip_bad_inputs: a truncated or corrupt compressed input is logged and
      listed in summary.json / the manifest (its complete documents before
      the damage are kept) instead of failing the run.
    max_sentences_per_document: longer documents are counted and logged as
      a warning (missing blank lines between documents?).
    progress_interval_secs: seconds between two progress lines in the log
      (see data_prep.progress).
    input_timeout_secs: an input whose first byte does not come within
      this many seconds (a named pipe, a hung mount) is an error naming it;
      0: wait forever.
    no_worker_timeout_secs: on the DaskRunner, how long the run waits for
      a worker when its cluster has none left (then an error).
  Raises:
    ValueError: before any work, for a glob that matches nothing, an
      unreadable tokenizer file, output_dir holding a previous run, or a
      pipeline argument that is no Beam option; after the pipeline, for a
      truncated or corrupt compressed input (without skip_bad_inputs) and
      for a run that made no instance. _SUCCESS and the manifest are then
      not written.
    runners.ClusterError: a Dask scheduler that does not answer or has no
      worker (before any work), or, during the run, a scheduler gone or no
      worker for no_worker_timeout_secs.
  """
  options = options or instances_lib.InstanceOptions()
  _check_arguments(dupe_factor, num_shards, max_sentences_per_document,
                   progress_interval_secs)
  # A mistake in a Beam option or the runner first (chosen again below).
  runners.choose_runner(pipeline_args)
  paths = reading.match_inputs(input_file)
  reading.check_inputs_respond(paths, input_timeout_secs)
  input_bytes = dict(zip(paths, reading.input_sizes(paths)))
  tokenizer = _load_tokenizer(spm_model_file, vocab_file, do_lower_case)
  tokenizer_info = outputs.describe_tokenizer(tokenizer)
  run_flags = dict(
      input_file=input_file, spm_model_file=spm_model_file,
      vocab_file=vocab_file, do_lower_case=do_lower_case,
      **dataclasses.asdict(options), dupe_factor=dupe_factor,
      num_shards=num_shards, max_line_bytes=max_line_bytes,
      split_bytes=split_bytes, skip_bad_inputs=skip_bad_inputs,
      max_sentences_per_document=max_sentences_per_document,
      pipeline_args=list(pipeline_args))
  # Held while the pipeline writes: a second run into output_dir stops in
  # one line naming this process (`file_io.lock_output`).
  lock = outputs.prepare_output_dir(output_dir, overwrite)
  try:
    runners.make_workers_find_this_package()
    read_ranges = reading.plan_reads(paths, split_bytes,
                                     list(input_bytes.values()))
    # Again, now that the number of read ranges is known (it sets the
    # DaskRunner's partitions).
    pipeline_options, runner, runner_line = runners.choose_runner(
        pipeline_args,
        progress_lib.progress_request_secs(progress_interval_secs),
        len(read_ranges), no_worker_timeout_secs)
    _LOGGER.info(runner_line)
    progress = runners.pipeline_progress(runner, pipeline_options,
                                         sum(input_bytes.values()),
                                         progress_interval_secs)
    _run_beam(runner, pipeline_options, progress, lambda p: (
        transforms.build_pipeline(
            p, read_ranges, output_dir, tokenizer, options, dupe_factor,
            num_shards, max_line_bytes, max_sentences_per_document,
            skip_bad_inputs, input_bytes)),
              lambda: progress_lib.summary_counts(
                  outputs.read_summary(output_dir), input_bytes))
    summary = outputs.read_summary(output_dir)
    _check_summary(summary, paths, output_dir, max_sentences_per_document)
    outputs.mark_done(output_dir, summary, input_bytes, run_flags,
                      tokenizer_info)
    return summary
  finally:
    if lock is not None:
      lock.release()


def _check_arguments(dupe_factor, num_shards, max_sentences_per_document,
                     progress_interval_secs):
  if dupe_factor < 1 or num_shards < 1:
    raise ValueError(f"dupe_factor and num_shards must be >= 1, got "
                     f"{dupe_factor} and {num_shards}")
  if max_sentences_per_document < 1:
    raise ValueError(errors.error_line(
        f"must be >= 1, got {max_sentences_per_document}",
        "--max_sentences_per_document"))
  if not progress_interval_secs > 0:
    raise ValueError(errors.error_line(
        f"must be > 0, got {progress_interval_secs}",
        "--progress_interval_secs"))


# "OSError: [Errno 28] No space left on device: '/path'" in a runner's text.
_IO_ERROR = re.compile(
    r"((?:OS|IO|FileExists|FileNotFound|Permission|IsADirectory|"
    r"NotADirectory)Error): (\[Errno \d+\] [^\n\[]*?)(?: \[while running|\n|$)")


def _run_beam(runner, pipeline_options, progress, build,
              counts_without_metrics=None):
  """Runs the pipeline that build(pipeline) makes, with progress lines.

  counts_without_metrics: () -> the counts of the last line when the runner
  keeps no Beam metrics (the DaskRunner).

  Raises:
    ValueError: one line naming the input file, for a truncated or corrupt
      compressed input (BadInputError in a worker).
  """
  try:
    with progress:
      with beam.Pipeline(runner=runner, options=pipeline_options) as p:
        build(p)
    progress.log_final(p.result, counts_without_metrics)
    # The DaskRunner's result holds its dask.distributed client, open.
    client = getattr(p.result, "client", None)
    if client is not None:
      client.close()
  except runners.ClusterError:
    raise  # Its line already names the cluster and what is gone.
  except Exception as e:  # pylint: disable=broad-except
    # Runners wrap a worker's exception in their own (often as text only).
    text = _error_text(e)
    bad = reading.BadInputError.find_in(text)
    if bad is None:
      io_error = _IO_ERROR.search(text)
      if io_error is None:
        raise
      # A full disk, a permission, a folder deleted under the run: the
      # worker's OSError, which the runner hands over as text.
      raise ValueError(
          f"{io_error.group(1)} while running the pipeline ({io_error.group(2)}"
          f"): nothing was marked done; fix it and rerun with --overwrite"
      ) from None
    raise ValueError(errors.error_line(
        f"input file {bad[0]!r} is truncated or corrupt ({bad[1]}); nothing "
        "was marked done", "--input_file",
        "fix or remove the file, or pass --skip_bad_inputs to keep its "
        "complete documents before the damage and skip the rest; the skip "
        "is logged and listed in the manifest")) from None


def _check_summary(summary, paths, output_dir, max_sentences_per_document):
  """Logs the inputs' warnings; ValueError for a run of no or lost records."""
  _log_input_warnings(summary, max_sentences_per_document)
  if not summary["instances"]:
    raise ValueError(_no_instances_message(summary, paths, output_dir))
  records = sum(summary["records_per_shard"].values())
  if records != summary["instances"]:  # A runner that lost or added records.
    raise ValueError(errors.error_line(
        f"the shards in {output_dir!r} hold {records} records but "
        f"{summary['instances']} instances were made; nothing was marked "
        "done", "--output_dir", "rerun with --overwrite"))


def _error_text(error):
  """The text of an exception and of the exceptions it was raised from."""
  texts, seen = [], set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    texts.append(str(error))
    error = error.__cause__ or error.__context__
  return "\n".join(texts)


def _log_input_warnings(summary, max_sentences_per_document):
  inputs = summary.get("inputs", {})
  for path, report in inputs.items():
    if report["error"]:
      _LOGGER.warning(
          "--skip_bad_inputs: %s is truncated or corrupt (%s): kept its %d "
          "complete documents before the damage, skipped the rest (listed "
          "in the manifest)", path, report["error"], report["documents"])
  spaces = [r["whitespace_lines"] for r in inputs.values()
            if r.get("whitespace_lines")]
  if spaces:
    _LOGGER.warning(
        "%d line(s) of whitespace only were read as blank lines, each "
        "ending a document (first at %s): remove the whitespace, or the "
        "line if the document goes on after it",
        sum(s["count"] for s in spaces), ", ".join(
            [p for s in spaces for p in s["places"]][:reading.MAX_PLACES]))
  over = summary.get("documents_over_max_sentences", 0)
  if over:
    longest = max(inputs, key=lambda p: inputs[p]["max_sentences"])
    _LOGGER.warning(
        "%d document(s) have more than --max_sentences_per_document=%d "
        "sentences (the longest: %d, in %s): is the corpus missing the blank "
        "lines between documents? Without them a file reads as one document "
        "(one sentence per line, a blank line after each document)", over,
        max_sentences_per_document, inputs[longest]["max_sentences"], longest)


def _no_instances_message(summary, paths, output_dir):
  documents = summary["documents"]
  skipped = {r: n for r, n in documents["skipped"].items() if n}
  if not documents["read"]:
    what = (f"no instances: no documents in {len(paths)} input file(s) "
            f"(e.g. {paths[0]!r})")
    hint = "the input is empty"
  else:
    what = (f"no instances from the {documents['read']} document(s) read "
            f"(skipped: " + (", ".join(f"{n} {r}" for r, n in skipped.items())
                             or "none") + ")")
    hint = "check the input"
  if skipped.get("single_sentence"):
    hint = ("each document needs two or more sentences: one sentence per "
            "line, a blank line between documents")
  return errors.error_line(
      what, "--input_file", f"{hint}; nothing was marked done, see "
      f"{FileSystems.join(output_dir, outputs.SUMMARY_FILE)}")


def _load_tokenizer(spm_model_file, vocab_file, do_lower_case):
  """The tokenizer of the flags; a mistake is one line naming the flag."""
  try:
    return tokenization.load_tokenizer(spm_model_file, vocab_file,
                                       do_lower_case)
  except ValueError as e:
    if spm_model_file is None and vocab_file is None:
      raise ValueError(errors.error_line(
          "no tokenizer given", "--spm_model_file / --vocab_file",
          "pass a SentencePiece model from `python -m data_prep.train_vocab`,"
          " or a WordPiece vocab.txt")) from e
    if spm_model_file is not None and vocab_file is not None:
      raise ValueError(errors.error_line(
          "two tokenizers given", "--spm_model_file and --vocab_file",
          "pass one of them")) from e
    flag = "--spm_model_file" if spm_model_file else "--vocab_file"
    hint = ("train one with `python -m data_prep.train_vocab`"
            if spm_model_file else "one WordPiece token per line")
    raise ValueError(errors.error_line(str(e), flag, hint)) from e


def run_pipeline_to_files(output_files, input_file, overwrite=False, **kwargs):
  """run_pipeline writing its shards to the given files, one per file.

  The original's --output_file: the shards (len(output_files) of them) are
  written to a temporary directory next to the first file and then renamed
  to the given names; summary.json and _SUCCESS are not kept. Same
  arguments as run_pipeline otherwise; returns its summary, whose "shards"
  are the given files.

  Raises:
    ValueError: as run_pipeline; also when a file exists and not overwrite,
      or a path names a directory.
  """
  if not output_files:
    raise ValueError(errors.error_line("no file named", "--output_file"))
  for path in output_files:
    if os.path.isdir(path):
      raise ValueError(errors.error_line(
          f"{path!r} is a directory", "--output_file",
          "use --output_dir for a directory"))
    if FileSystems.exists(path) and not overwrite:
      raise ValueError(errors.error_line(
          f"{path!r} already exists", "--output_file",
          "pass --overwrite to replace it"))
  first = output_files[0]
  staging = FileSystems.join(
      os.path.dirname(first) or ".",
      f"{outputs.TEMP_PREFIX}{os.path.basename(first)}-{uuid.uuid4().hex}")
  num_shards = len(output_files)
  try:
    summary = run_pipeline(input_file, staging, num_shards=num_shards,
                           overwrite=False, **kwargs)
    for index, path in enumerate(output_files):
      FileSystems.rename([outputs.shard_name(staging, index, num_shards)],
                         [path])
  finally:
    if FileSystems.exists(staging):
      FileSystems.delete([staging])
  summary["shards"] = list(output_files)
  return summary
