"""Text files -> ALBERT pretraining TFRecords, with Apache Beam.

  python -m data_prep.create_pretraining_data --input_file='corpus/train.txt' \
      --output_dir=out/train --spm_model_file=vocab/spm.model \
      --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=2 \
      --direct_num_workers=2

Input: text files (globs, comma-separated; gzip by ".gz"), one sentence per
line, documents separated by blank lines. Output in --output_dir: TFRecord
shards in the original ALBERT format, `summary.json`, `_SUCCESS`, then
`manifest.json`, the hand-off to pretraining (data_prep.outputs); or, as the
original, --output_file=FILE[,FILE...]: one shard per file, nothing else.

Beam's pipeline options are accepted by their Beam names (--runner,
--direct_num_workers, Dataflow's --project, ...), so the same command runs on
Dask (--runner=DaskRunner --dask_client_address=HOST:PORT), Dataflow, Flink
or Spark; without --runner it runs on the DirectRunner
(data_prep.runners). Bad documents are counted and skipped (data_prep.pipeline
says which). A mistake in a flag, an input or the tokenizer file is one line
on stderr, `error: <what>, <where> (<hint>)`, before anything is written;
--verbose shows the traceback instead.
"""

import dataclasses
import json
import logging
import os
import sys
from typing import Optional

from absl import flags

if __name__ == "__main__":
  # Run as a command: `import apache_beam` logs "apitools not found ..."
  # (the optional GCP client) through the root logger, which would put a
  # line of noise before every one-line error. The NullHandler also keeps
  # logging from installing its default stderr handler for that message.
  logging.getLogger().addHandler(logging.NullHandler())
  logging.getLogger().addFilter(
      lambda record: "apitools not found" not in record.getMessage())

# pylint: disable=g-import-not-at-top,wrong-import-position
from albert_tf.core import cli_errors
from albert_tf.core import errors
from albert_tf.core import settings
from data_prep import instances as instances_lib
from data_prep import outputs
from data_prep import pipeline
from data_prep import runners
# pylint: enable=g-import-not-at-top,wrong-import-position

_LOGGER = logging.getLogger(__name__)

# Flags of google-research/albert's create_pretraining_data.py that mean
# nothing here: accepted, so its commands run, and reported as ignored.
_IGNORED_ORIGINAL_FLAGS = {
    "input_file_mode": "input files are read as bytes and decoded as UTF-8",
    "do_permutation": "permutation training is not implemented; records "
                      "have --max_predictions_per_seq mask slots",
    "parallel": "Beam runs the work in parallel (--direct_num_workers)",
}
_IGNORED_HELP = "Accepted for the original's commands; ignored."


@dataclasses.dataclass
class CreateDataSettings:
  """The command line: the original's flags, names and defaults."""
  input_file: Optional[str] = settings.field(
      None, "Comma-separated globs of text files: one sentence per line, "
      "blank line between documents; .gz allowed.")
  output_dir: Optional[str] = settings.field(
      None, "Directory for the TFRecord shards, summary.json, _SUCCESS and "
      "manifest.json.")
  output_file: Optional[str] = settings.field(
      None, "Instead of --output_dir, as the original: write all records to "
      "this one TFRecord file (comma-separated files: one shard each).")
  spm_model_file: Optional[str] = settings.field(None, "SentencePiece model.")
  vocab_file: Optional[str] = settings.field(
      None, "WordPiece vocab.txt (instead of --spm_model_file).")
  do_lower_case: bool = settings.field(True, "Lowercase and strip accents.")
  max_seq_length: int = settings.field(512, "Tokens per sequence.",
                                       lower_bound=5)
  max_predictions_per_seq: int = settings.field(20, "Masked tokens cap.",
                                                lower_bound=1)
  masked_lm_prob: float = settings.field(0.15, "Share of tokens masked.",
                                         lower_bound=0, upper_bound=1)
  dupe_factor: int = settings.field(
      40, "Passes over the data, each with different masks.", lower_bound=1)
  short_seq_prob: float = settings.field(
      0.1, "Share of documents (per pass) whose sequences are shorter than "
      "max_seq_length.", lower_bound=0, upper_bound=1)
  ngram: int = settings.field(3, "Longest masked n-gram, p(n) ∝ 1/n.",
                              lower_bound=1)
  favor_shorter_ngram: bool = settings.field(True,
                                             "p(n) ∝ 1/n, else uniform.")
  random_seed: int = settings.field(12345,
                                    "Seed mixed into each document's seed.")
  random_next_sentence: bool = settings.field(False,
                                              "BERT's NSP instead of SOP.")
  do_whole_word_mask: bool = settings.field(True, "Mask whole words.")
  num_shards: int = settings.field(4, "TFRecord files to write.",
                                   lower_bound=1)
  overwrite: bool = settings.field(
      False, "Replace a previous run's output in --output_dir (or the "
      "--output_file).")
  max_line_bytes: int = settings.field(
      100_000, "Documents with a longer line are skipped as junk.",
      lower_bound=1)
  skip_bad_inputs: bool = settings.field(
      False, "A truncated or corrupt compressed input file is an error; with "
      "this flag its complete documents before the damage are kept, the rest "
      "is skipped, and the skip is logged and listed in summary.json and "
      "manifest.json.")
  max_sentences_per_document: int = settings.field(
      10_000, "Documents with more sentences (lines) are counted and logged "
      "as a warning: blank lines between documents missing?", lower_bound=1)
  progress_interval_secs: float = settings.field(
      10.0, "Seconds between two progress lines in the log.")
  input_timeout_secs: int = settings.field(
      600, "Stop with an error naming the file when an input file gives no "
      "byte for this long (a named pipe, a hung mount); 0: wait forever.",
      lower_bound=0)
  no_worker_timeout_secs: float = settings.field(
      60.0, "On the DaskRunner: stop with an error when the cluster has had "
      "no worker for this long (its last worker died).", lower_bound=1)
  input_file_mode: str = settings.field("r", _IGNORED_HELP)
  do_permutation: bool = settings.field(False, _IGNORED_HELP)
  parallel: bool = settings.field(False, _IGNORED_HELP)


def _define_flags():
  # Defined only when run as a script, so tests and the benchmark can import
  # this module next to others that define flags of the same names.
  settings.define_flags(CreateDataSettings)
  settings.define_flags(settings.CommandSettings)  # --verbose
  return flags.FLAGS


def _parse_flags(argv):
  # Beam's pipeline options (--runner, --direct_num_workers, ...) are kept
  # for PipelineOptions; any other unknown flag is a one-line error, before
  # anything is read or written.
  def beam_options_among(args):
    _, unknown = runners.parse_pipeline_args(args)
    return unknown, runners.beam_option_names()
  return cli_errors.flags_parser(argv, beam_options_among)


def _instance_options(s):
  try:
    return instances_lib.InstanceOptions(**{
        f.name: getattr(s, f.name)
        for f in dataclasses.fields(instances_lib.InstanceOptions)})
  except ValueError as e:  # "<field> must be ...": the field is the flag.
    field = str(e).split(" ", 1)[0]
    raise ValueError(errors.error_line(str(e), f"--{field}")) from e


def _check_outputs(s):
  if not s.input_file:
    raise errors.CommandLineError(errors.error_line(
        "a required flag is missing", "--input_file",
        "e.g. --input_file=demo_output/corpus/peoples_daily/train.txt"))
  if s.output_dir and s.output_file:
    raise errors.CommandLineError(errors.error_line(
        "two outputs given", "--output_dir and --output_file",
        "pass one: --output_dir for shards, summary.json, _SUCCESS and "
        "manifest.json, --output_file for one TFRecord file as the "
        "original"))
  if not s.output_dir and not s.output_file:
    raise errors.CommandLineError(errors.error_line(
        "no output given", "--output_dir or --output_file",
        "e.g. --output_dir=demo_output/tfrecords/train"))


def main(argv):
  s = settings.from_flags(CreateDataSettings)
  for name, reason in _IGNORED_ORIGINAL_FLAGS.items():
    if flags.FLAGS[name].present:
      _LOGGER.info("--%s is ignored here: %s", name, reason)
  _check_outputs(s)
  common = dict(spm_model_file=s.spm_model_file, vocab_file=s.vocab_file,
                do_lower_case=s.do_lower_case, options=_instance_options(s),
                dupe_factor=s.dupe_factor, overwrite=s.overwrite,
                pipeline_args=argv[1:], max_line_bytes=s.max_line_bytes,
                skip_bad_inputs=s.skip_bad_inputs,
                max_sentences_per_document=s.max_sentences_per_document,
                progress_interval_secs=s.progress_interval_secs,
                input_timeout_secs=s.input_timeout_secs,
                no_worker_timeout_secs=s.no_worker_timeout_secs)
  if s.output_file:
    output_files = outputs.output_file_paths(s.output_file)
    if flags.FLAGS["num_shards"].present and s.num_shards != len(output_files):
      raise errors.CommandLineError(errors.error_line(
          f"--num_shards={s.num_shards} but {len(output_files)} output "
          "files", "--output_file", "with --output_file there is one shard "
          "per file; drop --num_shards"))
    summary = pipeline.run_pipeline_to_files(output_files, s.input_file,
                                             **common)
  else:
    summary = pipeline.run_pipeline(s.input_file, s.output_dir,
                                    num_shards=s.num_shards, **common)
  # With --output_file there is no summary.json: say where the records went.
  print(json.dumps({k: summary[k] for k in (
      "instances", "tokens", "masked_lm_rate", "next_sentence_label_1_fraction",
      "ngram_ratio", "documents") + (("shards",) if s.output_file else ())},
                   indent=1))


if __name__ == "__main__":
  from absl import app
  # A bad input file fails the pipeline in a worker, and Beam logs that
  # worker error with its traceback; the one `error:` line names the file
  # (--verbose shows the traceback).
  if "--verbose" not in sys.argv:
    # Beam's own INFO lines (servers started, workers connected, their
    # forwarded logs): --verbose shows them.
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    # The DaskRunner's client, and the LocalCluster it starts without
    # --dask_client_address (some 60 lines of start and stop, also from its
    # worker processes): dask's logging config, read when dask is imported.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    # The workers' start-up warnings, forwarded (they also print their own).
    logging.getLogger("apache_beam.runners.portability.local_job_service"
                     ).setLevel(logging.ERROR)
    for _name in ("apache_beam.runners.common",
                  "apache_beam.runners.portability.local_job_service",
                  "apache_beam.runners.worker.sdk_worker"):
      logging.getLogger(_name).addFilter(
          lambda record: "<<bad-input>>" not in record.getMessage())
  _define_flags()
  app.run(cli_errors.one_line_errors(main), flags_parser=_parse_flags)
