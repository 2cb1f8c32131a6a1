"""Real data's noise, one row each: read as the field reads it, and counted.

  * stray gold tags (MSRA-style `M-PER`/`E-PER` at a sentence start, an
    entity BIOES/BMES leaves open): run_ner trains, one warning per file
    with the count and the first three file:line places; `--strict_tags`
    makes the first one an error;
  * pretraining records with no data prep file beside them (the original
    create_pretraining_data.py's single file): read without a flag, one
    warning; a folder in data prep's own shard layout without `_SUCCESS` is
    still refused as a killed run.

Tiny inputs: a 2-type char-level NER file, a 1-layer hidden-16 model, a few
steps; 24 pretraining records of length 16.
"""

import logging
import os
import re

import pytest

from albert_tf import run_ner
from albert_tf import run_pretraining as rp
from albert_tf.data import conll
from albert_tf.data import record_checks
from tests import cli_runner
from tests.fixtures_data import write_tiny_vocab_and_config
from tests.pretraining_fixtures import PRED, SEQ, write_config, write_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHARS = "张明华京沪的说去是"

# BMES (detected: M- and no I-). Lines 7, 11, 17, 18 and 21 are stray: an
# M-/E- at the sentence start (7, 11), E-PER after O and after E-PER (17,
# 18), an entity left open at the sentence end (21).
STRAY_TRAIN = """\
张 B-PER
明 M-PER
华 E-PER
的 O
京 S-LOC

明 M-PER
华 E-PER
说 O

华 E-PER
去 O
京 B-LOC
沪 E-LOC

的 O
华 E-PER
华 E-PER

张 B-PER
明 M-PER

"""
CLEAN = "张 B-PER\n华 E-PER\n是 O\n沪 S-LOC\n去 O\n\n"
# What the model trains on: seqeval's reading (conll.spans says why).
STRAY_BIO = [["B-PER", "I-PER", "O"], ["B-PER", "O", "B-LOC", "I-LOC"],
             ["O", "B-PER", "B-PER"], ["B-PER", "I-PER"]]
READ_AS = ("read as conlleval and seqeval read them: an inside tag that "
           "continues no entity starts one, and an entity left open ends at "
           "its last tag (--strict_tags makes this an error)")


@pytest.fixture(scope="module")
def ner(tmp_path_factory):
  root = tmp_path_factory.mktemp("noise_ner")
  write_tiny_vocab_and_config(root, CHARS)
  data = root / "data"
  data.mkdir()
  (data / "train.txt").write_text(STRAY_TRAIN + CLEAN * 12, encoding="utf-8")
  # One stray tag in dev, at its first line (and an M-: BMES too).
  (data / "dev.txt").write_text(
      "华 E-PER\n的 O\n\n张 B-PER\n明 M-PER\n华 E-PER\n\n" + CLEAN * 2,
      encoding="utf-8")
  return root


def _ner_options(root, output_dir, **kw):
  options = dict(task_name="conll", data_dir=str(root / "data"),
                 output_dir=str(output_dir),
                 vocab_file=str(root / "vocab.txt"),
                 albert_config_file=str(root / "config.json"),
                 max_seq_length=16, train_batch_size=8, eval_batch_size=16,
                 learning_rate=1e-2, train_step=2, eval_every_steps=2,
                 iterations_per_loop=2, log_every_steps=2, seed=1,
                 do_train=True, do_eval=True)
  options.update(kw)
  return options


def _warnings(caplog, text):
  return [r.getMessage() for r in caplog.records
          if r.levelno == logging.WARNING and text in r.getMessage()]


# ------------------------------------------------------------ the rows
def test_stray_tags_train_with_one_warning_per_file(ner, tmp_path, caplog):
  """Row `stray_tags_counted`: MSRA-style stray tags train; counted."""
  caplog.set_level(logging.INFO)
  result = run_ner.run(**_ner_options(ner, tmp_path / "out"))
  assert result["num_train_steps"] == 2
  train, dev = ner / "data" / "train.txt", ner / "data" / "dev.txt"
  assert _warnings(caplog, "do not continue or close an entity") == [
      f"{train}: 5 BMES tag(s) do not continue or close an entity ({train}:7 "
      f"'M-PER', {train}:11 'E-PER', {train}:17 'E-PER', and 2 more); "
      + READ_AS,
      f"{dev}: 1 BMES tag(s) do not continue or close an entity ({dev}:1 "
      f"'E-PER'); " + READ_AS]
  assert (result["data"]["train"]["stray_tags"],
          result["data"]["dev"]["stray_tags"]) == (5, 1)
  # The dev metric's gold entities: the one-token PER of the stray E-PER,
  # one PER, then a PER and a LOC in each of two clean sentences.
  assert result["eval"]["num_gold_entities"] == 1 + 1 + 2 * 2
  data = conll.read_conll(str(train))
  assert [conll.to_bio(s, data.scheme) for s in data.sentences[1:5]
          ] == STRAY_BIO
  assert conll.convert(["O", "E-PER", "E-PER"], "BIOES", "BIO",
                       strict=False) == ["O", "B-PER", "B-PER"]


def test_strict_tags_is_the_one_line_error(ner, tmp_path):
  """Row `strict_tags`: --strict_tags stops at the first stray tag."""
  train = ner / "data" / "train.txt"
  with pytest.raises(conll.DataError) as e:
    run_ner.run(**_ner_options(ner, tmp_path / "out", strict_tags=True))
  assert str(e.value) == (f"{train}:7: 'M-PER' after 'the sentence start' "
                          "does not continue an entity (BMES)")
  assert not (tmp_path / "out").exists()
  # The flag, on the command line: one `error:` line, exit code 1.
  argv = [f"--{k}={v}" for k, v in _ner_options(
      ner, tmp_path / "cli").items() if not isinstance(v, bool)]
  cli = cli_runner.run_module(
      ["albert_tf.run_ner", *argv, "--do_train", "--strict_tags"], cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES=""), timeout=120)
  errors = [l for l in cli.stderr.splitlines() if l.startswith("error:")]
  assert cli.returncode == 1, cli.stderr[-2000:]
  assert errors == [f"error: {train}:7: 'M-PER' after 'the sentence start' "
                    "does not continue an entity (BMES)"], cli.stderr[-2000:]


def _pretrain_argv(input_file, output_dir, *extra):
  return [f"--albert_config_file={write_config(output_dir.parent / 'c.json')}",
          f"--input_file={input_file}", f"--output_dir={output_dir}",
          "--do_train", f"--max_seq_length={SEQ}",
          f"--max_predictions_per_seq={PRED}", "--train_batch_size=8",
          "--eval_batch_size=8", "--num_train_steps=2",
          "--num_warmup_steps=1", "--save_checkpoints_steps=2",
          "--iterations_per_loop=2", "--log_steps=1", "--max_eval_steps=1",
          *extra]


def test_original_single_file_records_train_with_one_warning(tmp_path,
                                                             caplog):
  """Row `records_written_elsewhere`: the original script's one file."""
  caplog.set_level(logging.INFO)
  folder = tmp_path / "original"
  folder.mkdir()
  records = write_records(folder / "tf_examples.tfrecord", 24)
  (folder / "notes.txt").write_text("not data prep's\n")
  # --do_eval on the same file: checked, and warned about, once.
  result = rp.run(rp.params_from_argv(_pretrain_argv(
      records, tmp_path / "pretrain", "--do_eval")))
  assert result["global_step"] == 2
  assert _warnings(caplog, "data prep") == [
      f"{folder}: 1 file(s) of --input_file with no data prep file beside "
      "them (no _SUCCESS, manifest.json, summary.json or "
      "pretrain-*-of-*.tfrecord shard): read as records written elsewhere "
      "(e.g. google-research/albert's create_pretraining_data.py, or data "
      "prep's --output_file); only their first records' lengths are "
      "checked, not their tokenizer"]


def test_own_layout_without_success_is_still_refused(tmp_path, caplog):
  """Row `own_layout_without_success`: data prep's shard, no markers."""
  folder = tmp_path / "records"
  folder.mkdir()
  shard = write_records(folder / "pretrain-00000-of-00001.tfrecord", 8)
  expected = (
      f"{folder}: no _SUCCESS and no manifest.json (the files data prep "
      "writes last) beside data prep's pretrain-00000-of-00001.tfrecord, so "
      "its run there was killed, failed or is still writing, and the shards "
      "may be partial or missing (--input_file matched 1 file(s) there)")
  with pytest.raises(record_checks.InputFileError) as e:
    rp.run(rp.params_from_argv(_pretrain_argv(
        f"{folder}/*.tfrecord", tmp_path / "pretrain")))
  assert str(e.value) == (f"{expected}. Rerun data prep with --overwrite, or "
                          "pass --allow_incomplete_input to read the files "
                          "as they are")
  assert not (tmp_path / "pretrain").exists()
  # --allow_incomplete_input reads it, as before, with a warning.
  caplog.set_level(logging.WARNING)
  assert record_checks.check_records_dirs(
      [shard], SEQ, PRED, allow_incomplete=True) == {}
  assert _warnings(caplog, "data prep") == [
      f"--allow_incomplete_input: reading them as they are: {expected}"]
  assert not re.search("written elsewhere", caplog.text)


def test_vocab_with_an_empty_line_exports_and_keeps_its_ids(tmp_path):
  """An empty line of a vocab.txt: the ids after it stay where the
  checkpoint has them, and the in-graph tokenizer builds and agrees."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.text_graph import TextEncoder  # pylint: disable=g-import-not-at-top
  from tests.numpy_reference import pack_pair  # pylint: disable=g-import-not-at-top
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "", "张", "明",
            "", "hello", "##s"]
  (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n",
                                      encoding="utf-8")
  tokenizer = load_tokenizer(None, str(tmp_path / "vocab.txt"), True)
  assert tokenizer.vocab_size == 11
  texts = ["张明 hellos", "明 x"]
  expected = [pack_pair(tokenizer, t, None, 8)[0] for t in texts]
  assert expected[0][:5] == [2, 6, 7, 9, 10]  # after both empty lines
  encoder = TextEncoder.from_tokenizer(tokenizer, max_seq_length=8)
  got = encoder(tf.constant(texts))["input_ids"].numpy().tolist()
  assert got == expected
