"""Issue 50's fresh probe (round 5) of the verified exports, albert-predict,
the budget and fast-path flags and train_vocab: one test per fault the
probe found and fixed (docs/faults.md, "Round 5 probe"). Each fails with
its fix taken out.

The predict rows drive `predict.run` with the stand-in classifier of
tests/test_faults_predict_round4.py ("pos" for a text with 好); the
--verify_data rows call export_tflite's reader and `serving.verify` on
hand-made outputs, so every figure is worked out here. One test trains
one step of a tiny classifier (the widths line at the length it takes).
"""

import errno
import json
import os
import threading

from absl import flags
import numpy as np
import pytest

from albert_tf import export_tflite
from albert_tf import predict
from albert_tf.tasks import registry
from albert_tf.core import settings
from albert_tf.data import tokenization
from albert_tf.core.file_io import atomic_writer
from albert_tf.core.record import ModelInfo
from albert_tf.data.rows import PredictError
from albert_tf.serving import verify
from tests import test_faults_predict_round4 as round4
from tests.fixtures_data import write_tiny_vocab_and_config


def _one_line(message, *parts):
  message = str(message)
  assert "\n" not in message, message
  for part in parts:
    assert part in message, message


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"),
                                     round4.CHARS)
  return tokenization.load_tokenizer(vocab_file=str(root / "vocab.txt"))


# ------------------------------------------------------ one writer a file
def test_a_second_writer_of_one_file_is_refused_and_the_first_is_whole(
    tmp_path):
  """Two commands given one output file (two albert-predict runs, two
  evals writing eval_results.json): the second truncated the first's
  `.tmp`, the first renamed it and said success, and the second went on
  writing into the renamed file (NULs, then its rows)."""
  out = tmp_path / "out.tsv"
  with atomic_writer(out) as first:
    first.write("first\n")
    first.flush()
    with pytest.raises(OSError) as error:
      with atomic_writer(out) as second:
        second.write("second\n")
    assert error.value.errno == errno.EBUSY
    _one_line(error.value, f"{out} is being written by another process (its "
              f"temporary {out}.tmp is locked): cannot write {out} now")
    first.write("rows\n")
  assert out.read_text() == "first\nrows\n"
  assert sorted(os.listdir(tmp_path)) == ["out.tsv"]
  # A killed writer's temporary (no lock now) is emptied and taken over.
  (tmp_path / "out.tsv.tmp").write_text("left by a kill " * 100)
  with atomic_writer(out) as f:
    f.write("again\n")
  assert out.read_text() == "again\n"
  assert sorted(os.listdir(tmp_path)) == ["out.tsv"]


def test_predict_into_a_file_another_run_is_writing(tokenizer, tmp_path):
  source = tmp_path / "in.txt"
  source.write_text("好\n差\n", encoding="utf-8")
  out = tmp_path / "out.tsv"
  with atomic_writer(out) as other:
    other.write("the other run's rows\n")
    other.flush()
    with pytest.raises(OSError) as error:
      round4._run(tokenizer, source, out)  # pylint: disable=protected-access
    _one_line(error.value, f"cannot write {out} now")
  assert out.read_text() == "the other run's rows\n"


# ------------------------------------------------------ albert-predict
def test_predict_reads_a_pipe(tokenizer, tmp_path):
  """`--input_file=/dev/stdin` (or <(cmd)): 'does not exist' before."""
  pipe = tmp_path / "pipe"
  os.mkfifo(pipe)
  writer = threading.Thread(target=lambda: pipe.write_text(
      "好\n差\n很好\n", encoding="utf-8"), daemon=True)
  writer.start()
  out = tmp_path / "out.jsonl"
  result, _, _ = round4._run(tokenizer, pipe, out)  # pylint: disable=protected-access
  writer.join(10)
  assert result["rows"] == 3
  assert [(r["line"], r["text"], r["label"]) for r in round4._jsonl(out)] == [  # pylint: disable=protected-access
      (1, "好", "pos"), (2, "差", "neg"), (3, "很好", "pos")]
  with pytest.raises(PredictError) as error:
    round4._run(tokenizer, tmp_path / "nope.txt", out)  # pylint: disable=protected-access
  _one_line(error.value, f"--input_file={tmp_path / 'nope.txt'} does not "
            "exist")


def test_tsv_output_counts_the_texts_it_flattens(tokenizer, tmp_path):
  """A JSON lines text with a tab or a line break: written as spaces in a
  TSV output, where nothing said so."""
  source = tmp_path / "in.jsonl"
  source.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n"
                            for t in ("好\t的", "差", "很\n好", "甲\r乙")),
                    encoding="utf-8")
  out = tmp_path / "out.tsv"
  _, printed, model = round4._run(tokenizer, source, out)  # pylint: disable=protected-access
  assert model.seen == ["好\t的", "差", "很\n好", "甲\r乙"]  # predicted as given
  assert [r["text"] for r in round4._tsv(out)] == ["好 的", "差", "很 好",  # pylint: disable=protected-access
                                                   "甲 乙"]
  assert ("3 row(s) hold a tab or a line break in a text: written as spaces "
          "in this TSV output (a .jsonl --output_file keeps them)") in printed
  # JSON lines output keeps them, and says nothing.
  _, printed, _ = round4._run(tokenizer, source, tmp_path / "out.jsonl")  # pylint: disable=protected-access
  assert [r["text"] for r in round4._jsonl(tmp_path / "out.jsonl")] == [  # pylint: disable=protected-access
      "好\t的", "差", "很\n好", "甲\r乙"]
  assert not any("tab or a line break" in line for line in printed)


# ------------------------------------------------------ --verify_data
RECORD = ModelInfo(task="classification", num_labels=2,
                   label_list=["neg", "pos"], max_seq_length=8)


def _read(path, columns=None):
  task = registry.family("classification").task
  return export_tflite.read_verify_data(str(path), RECORD, task, 200, columns)


def test_verify_data_errors_name_the_exports_flags(tmp_path):
  """export_tflite/export_onnx read --verify_data with albert-predict's
  reader, whose lines named --input_file and --input_columns."""
  with pytest.raises(verify.ExportVerificationError) as error:
    _read(tmp_path / "nope.tsv")
  _one_line(error.value,
            f"--verify_data: --verify_data={tmp_path / 'nope.tsv'} does not "
            "exist")
  source = tmp_path / "dev.tsv"
  source.write_text("review\tlabel\n好\tpos\n", encoding="utf-8")
  with pytest.raises(verify.ExportVerificationError) as error:
    _read(source)
  _one_line(error.value, f"{source}:2: no column 'text' for the input 'text'",
            "--verify_columns=text=COLUMN maps another")
  assert "--input_" not in str(error.value)
  with pytest.raises(verify.ExportVerificationError) as error:
    _read(source, ["review"])
  _one_line(error.value, "--verify_columns: 'review' is not NAME=COLUMN")
  assert _read(source, ["text=review"])[1] == ["pos"]


def test_verify_data_with_some_rows_labelled_is_scored_on_those(
    tokenizer, tmp_path, absl_log):
  """Some rows without a label: the gold of all was dropped, so the
  quantized export's accuracy floor (--max_metric_drop) was never applied,
  without a word."""
  source = tmp_path / "dev.jsonl"
  rows = [{"text": "好", "label": "pos"}, {"text": "差"},
          {"text": "很好", "label": "pos"}, {"text": "甲", "label": "neg"}]
  source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                            for r in rows), encoding="utf-8")
  given = _read(source)
  assert given[1] == ["pos", None, "pos", "neg"]
  assert (f"--verify_data={source}: 1 of 4 rows have no gold label: "
          "accuracy (and --max_metric_drop) is scored on the 3 labelled "
          "rows") in absl_log
  held = verify.held_out(RECORD, tokenizer,
                         registry.family("classification").task, given)
  np.testing.assert_array_equal(held.gold, [1, -1, 1, 0])
  # The float model right on the 3 labelled rows, the artifact wrong on
  # the last one and on the unlabelled one: 2 of 3, 33 points lost.
  reference = {"probabilities": np.array(
      [[0.1, 0.9], [0.8, 0.2], [0.2, 0.8], [0.7, 0.3]], np.float32)}
  artifact = {"probabilities": np.array(
      [[0.1, 0.9], [0.3, 0.7], [0.2, 0.8], [0.4, 0.6]], np.float32)}
  figures = verify.compare(reference, artifact, held.features, held.gold)
  assert (figures["float_accuracy"], figures["accuracy"],
          figures["accuracy_examples"], figures["agreement"]) == (
              1.0, 2 / 3, 3, 0.5)
  verify.judge(figures, "dynamic", verify.Floors(min_agreement=0.0),
               "m.tflite", "use --quantize=float16 or none")
  assert not figures["passed"]
  assert figures["verdict"] == (
      "m.tflite (quantize=dynamic) accuracy 0.667 against the float model's "
      "1.000 (33.3 points lost, floor 2.0) on 4 held-out examples (accuracy "
      "on the 3 labelled): use --quantize=float16 or none")


@pytest.mark.parametrize("flag", ["--min_agreement=1.5",
                                  "--min_agreement=-0.1",
                                  "--max_metric_drop=-0.02"])
def test_floors_outside_zero_to_one_are_flag_errors(flag):
  """--min_agreement=1.5 converted the model, then refused it: 'agrees
  with the float model on 100.0% ... (floor 150.0%) ...: the float32
  .tflite differs from the SavedModel'."""
  fv = flags.FlagValues()
  settings.define_flags(export_tflite.TfliteSettings, fv)
  with pytest.raises(flags.IllegalFlagValueError):
    fv(["export_tflite", "--saved_model=sm/1", "--output=m.tflite", flag])
  fv = flags.FlagValues()
  settings.define_flags(export_tflite.TfliteSettings, fv)
  fv(["export_tflite", "--saved_model=sm/1", "--output=m.tflite",
      "--min_agreement=1", "--max_metric_drop=0"])


def test_a_refusal_offers_allow_degraded_once():
  figures = verify.judge({"examples": 4, "agreement": 0.5,
                          "compared": "the predicted class",
                          "max_relative_difference": 0.1}, "none",
                         verify.Floors(), "m.tflite",
                         export_tflite.INSTEAD["none"])
  assert figures["verdict"].count("--allow_degraded") == 0
  assert figures["verdict"].endswith(
      "the float32 .tflite differs from the SavedModel; serve the SavedModel")


# ------------------------------------------------------ train_vocab
def test_max_piece_length_above_sentencepieces_limit(tmp_path):
  """--max_piece_length=1000 ran, then 'SentencePiece could not train on
  this corpus: [... max_sentencepiece_length() <= 512], --input /
  --vocab_size (more text, a smaller --vocab_size or a lower
  --character_coverage usually help)'."""
  from data_prep import train_vocab  # pylint: disable=g-import-not-at-top
  corpus = tmp_path / "a.txt"
  corpus.write_text("好的东西\n很差\n", encoding="utf-8")
  with pytest.raises(ValueError) as error:
    train_vocab.train_sentencepiece(str(corpus), str(tmp_path / "v" / "spm"),
                                    50, max_piece_length=1000)
  _one_line(error.value, "1000 is outside [1, 512], what SentencePiece's "
            "trainer accepts", "--max_piece_length")
  assert not (tmp_path / "v").exists()
  fv = flags.FlagValues()
  settings.define_flags(train_vocab.TrainVocabSettings, fv)
  with pytest.raises(flags.IllegalFlagValueError):
    fv(["train_vocab", "--input=a.txt", "--model_prefix=v/spm",
        "--vocab_size=50", "--max_piece_length=513"])


def test_a_quantized_pass_without_gold_labels_says_accuracy_was_not_checked():
  """--verify_data without labels: 'Verified: agreement 100.0% with the
  float model on 2 held-out examples', the accuracy floor never applied
  and not said."""
  def verdict(quantize):
    return verify.judge({"examples": 2, "agreement": 1.0,
                         "compared": "the predicted class",
                         "max_relative_difference": 0.01}, quantize,
                        verify.Floors(), "m.tflite", "")["verdict"]
  assert verdict("dynamic") == (
      "agreement 100.0% with the float model on 2 held-out examples (no "
      "gold labels: accuracy, and --max_metric_drop, not checked)")
  assert verdict("none") == ("agreement 100.0% with the float model on 2 "
                             "held-out examples")


def test_export_tflite_takes_an_export_dir_as_export_onnx_does(tmp_path):
  """--saved_model=sm (the export_dir): 'sm/assets.extra/albert_export.json
  not found: --saved_model must be a version directory', where
  export_onnx, whose help says it takes what export_tflite takes, read
  the highest version."""
  for version in ("1", "3", "20"):
    (tmp_path / "sm" / version).mkdir(parents=True)
    (tmp_path / "sm" / version / "saved_model.pb").write_bytes(b"")
  (tmp_path / "sm" / "7").mkdir()  # no saved_model.pb: not a version
  assert export_tflite.version_dir(str(tmp_path / "sm")) == str(
      tmp_path / "sm" / "20")
  assert export_tflite.version_dir(str(tmp_path / "sm" / "3")) == str(
      tmp_path / "sm" / "3")
  with pytest.raises(ValueError) as error:
    export_tflite.convert(str(tmp_path / "sm" / "7"), str(tmp_path / "m.tflite"),
                          "none")
  _one_line(error.value, f"--saved_model={tmp_path / 'sm' / '7'}: no "
            "saved_model.pb there or in a numbered version folder")


# ------------------------------------------------------ fast path
def test_length_buckets_say_their_widths(absl_log):
  """--length_buckets=64 at --max_seq_length=32 trained with 4 widths (8,
  16, 24, 32: multiples of 8) and no line said so; no line said the widths
  of any --length_buckets."""
  from albert_tf.training import fast_path  # pylint: disable=g-import-not-at-top
  fast_path.say_length_buckets(64, 32)
  assert ("--length_buckets=64: batches cut to the widths 8, 16, 24, 32, 4 "
          "bucket(s), not 64: widths are multiples of 8 up to "
          "--max_seq_length=32") in absl_log
  fast_path.say_length_buckets(4, 128)
  assert "--length_buckets=4: batches cut to the widths 32, 64, 96, 128" in (
      absl_log)
  before = len(absl_log)
  fast_path.say_length_buckets(1, 128)  # off: nothing to say
  assert len(absl_log) == before


def test_a_fine_tuning_run_says_its_widths_at_the_length_it_takes(
    tmp_path, absl_log):
  """Without --max_seq_length the length is the family's default (here)
  or the record's, decided after the fast path: the line comes then."""
  from albert_tf import run_classifier  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  from tests import test_finetune_fast_path as fast  # pylint: disable=g-import-not-at-top
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(fast.CHARS)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n",
                                      encoding="utf-8")
  AlbertConfig(vocab_size=len(vocab), **dict(
      fast.TINY, max_position_embeddings=128)).to_json_file(
          tmp_path / "config.json")
  for split, n in (("train", 32), ("dev", 8)):
    (tmp_path / f"{split}.tsv").write_text(
        "\n".join(fast._rows(n, 0)) + "\n", encoding="utf-8")  # pylint: disable=protected-access
  run_classifier.run(
      task_name="sentiment", data_dir=str(tmp_path),
      output_dir=str(tmp_path / "out"), vocab_file=str(tmp_path / "vocab.txt"),
      albert_config_file=str(tmp_path / "config.json"), train_batch_size=16,
      train_step=1, do_train=True, micro_batches="1", baseline=False,
      length_buckets=64)
  assert ("--length_buckets=64: batches cut to the widths "
          f"{', '.join(str(8 * i) for i in range(1, 17))}, 16 bucket(s), not "
          "64: widths are multiples of 8 up to --max_seq_length=128"
          ) in absl_log


def test_an_export_dir_that_is_a_file_is_one_line(tmp_path):
  """--export_dir=two.txt (a file): '[Errno 17] File exists:
  '/…/two.txt'' after the model was built and restored."""
  from albert_tf import export_saved_model  # pylint: disable=g-import-not-at-top
  target = tmp_path / "two.txt"
  target.write_text("好\n", encoding="utf-8")
  with pytest.raises(export_saved_model.ExportError) as error:
    export_saved_model.export(checkpoint=str(tmp_path / "no_run"),
                              export_dir=str(target))
  _one_line(error.value, f"--export_dir={target} is a file, not a folder")
  assert target.read_text(encoding="utf-8") == "好\n"
