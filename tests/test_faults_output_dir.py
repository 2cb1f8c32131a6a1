"""Faults of output_dirs: one row per fault (in-process, tiny configs).

An output_dir belongs to one job: --overwrite deletes only the files a run
writes there, a run does not write into the folder of its own records, a
resume with another batch size is refused (an older output_dir, which did
not record it, still resumes), and a label list names each class once.
"""

import json
import logging
import pathlib
import shutil

import pytest

from albert_tf import run_classifier
from albert_tf import run_pretraining as rp
from albert_tf.training import output_dir
from albert_tf.training.runtime import RunConfigError
from tests.fixtures_data import fault_rows
from tests.test_faults import _options
from tests.test_faults import data  # noqa: F401  pylint: disable=unused-import
from tests.pretraining_fixtures import tiny_argv

LEGACY = pathlib.Path(__file__).resolve().parent / "legacy_v1"


def _jsonl(path, key):
  return [json.loads(l)[key] for l in path.read_text().splitlines()
          if l.strip()]


def _files(directory):
  return {str(p.relative_to(directory)): p.read_bytes()
          for p in sorted(directory.rglob("*")) if p.is_file()}


def _left_after_removing_run_files(out, tmp):
  """What remove_run_files leaves of a copy of out (out is not touched)."""
  copy = tmp / "copy"
  shutil.rmtree(copy, ignore_errors=True)
  shutil.copytree(out, copy)
  output_dir.remove_run_files(str(copy))
  return sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))


# ------------------------------------------------------------ the rows
def overwrite_deletes_only_the_runs_files(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out, do_predict=True))
  # Everything the run wrote is a run file (a new file of the trainer, a
  # command or a task must be listed in output_dir.run_files()).
  assert _left_after_removing_run_files(out, tmp) == [output_dir.LOCK_FILE]
  assert (out / "test_results.tsv").exists() and (out / "best").is_dir()
  # A user's files beside the run's, some with names close to its own.
  other = {"notes.txt": b"keep me\n", "corpus/part-0.txt": b"text\n",
           "train/README": b"mine\n", "best/notes.txt": b"best so far\n",
           "ckpt-notes.txt": b"x", "checkpoint.bak": b"y",
           "eval/events.txt": b"z"}
  for name, content in other.items():
    (out / name).parent.mkdir(exist_ok=True)
    (out / name).write_bytes(content)
  # Another learning rate (so --overwrite is needed), fewer steps, the
  # tokenizer copy the first run wrote as this run's tokenizer (kept).
  vocab = (out / "vocab.txt").read_bytes()
  with caplog.at_level(logging.INFO, logger="absl"):
    result = run_classifier.run(**_options(
        data, out, learning_rate=0.02, train_step=2,
        vocab_file=str(out / "vocab.txt"), overwrite=True))
  assert result["num_train_steps"] == 2
  said = [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("--overwrite")]
  # 19: curves.png among them
  assert said == [f"--overwrite: deleted 19 files of the earlier run in {out}"]
  files = _files(out)
  assert {k: files.get(k) for k in other} == other  # byte-identical
  assert files["vocab.txt"] == vocab
  assert sorted(p.name for p in out.glob("ckpt-*")) == [
      "ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-notes.txt"]
  assert not (out / "test_results.tsv").exists()  # the first run's
  assert _jsonl(out / "eval_log.jsonl", "global_step") == [0, 2]
  assert _jsonl(out / "train_log.jsonl", "step") == [1, 2]
  assert json.loads((out / output_dir.FINGERPRINT_FILE).read_text())[
      "optimizer"]["learning_rate"] == 0.02
  # Its own folders go once empty: train/ of the first run had events only.
  shutil.rmtree(out / "corpus")
  (out / "train" / "README").unlink()
  (out / "best" / "notes.txt").unlink()
  (out / "eval" / "events.txt").unlink()
  assert _left_after_removing_run_files(out, tmp) == [
      output_dir.LOCK_FILE, "checkpoint.bak", "ckpt-notes.txt", "notes.txt"]


def pretraining_output_dir_holds_its_records(data, tmp, caplog):
  (tmp / "pre").mkdir()
  argv = tiny_argv(tmp / "pre", "--do_eval", "--eval_every_checkpoint",
                   "--skip_corrupt_records")
  records = tmp / "pre" / "data"
  before = _files(records)
  for flag, extra in (("--input_file", []), ("--eval_input_file", [
      f"--input_file={tmp}/pre/data/part-0.tfrecord",
      f"--eval_input_file={tmp}/pre/out/held/part-1.tfrecord"])):
    out = records if flag == "--input_file" else tmp / "pre" / "out"
    if extra:
      (out / "held").mkdir(parents=True)
      shutil.copy(records / "part-1.tfrecord", out / "held")
    value = f"{records}/*.tfrecord" if not extra else (
        f"{out}/held/part-1.tfrecord")
    inside = (f"{records}/part-0.tfrecord" if not extra else value)
    with pytest.raises(RunConfigError) as error:
      rp.run(rp.params_from_argv(argv + extra + [f"--output_dir={out}",
                                                 "--overwrite"]))
    assert str(error.value) == (
        f"{flag}={value} reads {inside}, which is inside --output_dir={out}: "
        "write checkpoints and logs to a folder of their own (another "
        "--output_dir)")
  assert _files(records) == before  # not a record deleted, nothing added
  assert sorted(p.name for p in (tmp / "pre" / "out").rglob("*")) == [
      "held", "part-1.tfrecord"]
  # The same run into a folder of its own: everything it wrote (best/,
  # eval_results.txt, skipped_records.json, ...) is a run file.
  out = tmp / "pre" / "own"
  rp.run(rp.params_from_argv(argv + [f"--output_dir={out}",
                                     "--num_train_steps=3"]))
  assert {"best", "eval_results.txt", "skipped_records.json",
          "task_record.json"} <= {p.name for p in out.iterdir()}
  assert _left_after_removing_run_files(out, tmp) == [output_dir.LOCK_FILE]


def resume_with_another_train_batch_size(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out, train_step=2, do_eval=False))
  before = _files(out)
  with pytest.raises(RunConfigError) as error:
    run_classifier.run(**_options(data, out, train_step=4, do_eval=False,
                                  train_batch_size=4))
  assert str(error.value) == (
      f"--output_dir={out} holds a run with other settings (train_batch_size "
      "8 there vs 4 now): pass --overwrite to start over, or choose another "
      "--output_dir")
  assert _files(out) == before
  # A predict-only run does not train: any batch size predicts.
  run_classifier.run(**_options(data, out, do_train=False, do_eval=False,
                                do_predict=True, train_batch_size=4))
  assert json.loads((out / output_dir.FINGERPRINT_FILE).read_text())[
      "train_batch_size"] == 8


def older_output_dir_without_a_batch_size_resumes(data, tmp, caplog):
  # tests/legacy_v1/classifier: written before the fingerprint had
  # train_batch_size; the TSVs are those of its make_fixture.sh.
  out = tmp / "classifier"
  shutil.copytree(LEGACY / "classifier", out)
  assert "train_batch_size" not in json.loads(
      (out / output_dir.FINGERPRINT_FILE).read_text())
  (tmp / "tsv").mkdir()
  (tmp / "tsv" / "train.tsv").write_text("label\ttext\n" + (
      "pos\tgood movie\npos\tvery fun film\nneg\tbad plot\nneg\tdull acting\n"
      * 4), encoding="utf-8")
  (tmp / "tsv" / "dev.tsv").write_text(
      "label\ttext\npos\tthe film was good\nneg\tthe plot was bad\n",
      encoding="utf-8")
  options = dict(task_name="tsv", data_dir=str(tmp / "tsv"),
                 text_a_column="text", label_column="label",
                 albert_config_file=str(LEGACY / "albert_config.json"),
                 vocab_file=str(LEGACY / "vocab.txt"), output_dir=str(out),
                 max_seq_length=16, train_batch_size=4, train_step=6,
                 save_checkpoints_steps=2, learning_rate=0.01, do_train=True,
                 do_eval=True,
                 # Its "adamw" was Keras's rule (the fingerprint says so).
                 optimizer="keras_adamw")
  with caplog.at_level(logging.INFO, logger="absl"):
    result = run_classifier.run(**options)
  assert result["num_train_steps"] == 6
  assert [r.getMessage() for r in caplog.records
          if r.getMessage().startswith("Resumed")] == [
              f"Resumed from {out}/ckpt-4"]
  assert _jsonl(out / "eval_log.jsonl", "global_step") == [0, 2, 4, 6]
  # Filled in by the resume: the next one is compared.
  assert json.loads((out / output_dir.FINGERPRINT_FILE).read_text())[
      "train_batch_size"] == 4
  with pytest.raises(RunConfigError, match=r"\(train_batch_size 4 there vs 2 "
                     r"now\)"):
    run_classifier.run(**dict(options, train_batch_size=2, train_step=8))


def duplicate_labels_in_label_list(data, tmp, caplog):
  (tmp / "train.tsv").write_text("text\tlabel\n好\tno\n很好\tyes\n",
                                 encoding="utf-8")
  for labels, twice in (("no,yes,no", "'no'"),
                        ("a,b,a,c,b", "'a', 'b'")):
    with pytest.raises(ValueError) as error:
      run_classifier.run(**_options(
          data, tmp / "out", task_name="tsv", data_dir=str(tmp),
          text_a_column="text", label_column="label", label_list=labels,
          do_eval=False))
    assert str(error.value) == (f"--label_list={labels}: {twice} given more "
                                "than once (each label once)")
  assert not (tmp / "out").exists()


def checkpoint_index_missing_or_rewritten(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out))  # ckpt-2, ckpt-4
  ckpt4 = {p.name: p.read_bytes() for p in out.glob("ckpt-4.*")}
  # 1. The `checkpoint` index is gone: the files decide, and it says so.
  (out / "checkpoint").unlink()
  with caplog.at_level(logging.INFO, logger="absl"):
    result = run_classifier.run(**_options(data, out, train_step=6))
  assert result["num_train_steps"] == 6
  said = [r.getMessage() for r in caplog.records]
  assert f"Resumed from {out}/ckpt-4" in said
  assert (f"{out}: resuming by the checkpoint files: ckpt-2, ckpt-4 are not "
          f"in the `checkpoint` index (there is no index file); the latest is "
          f"{out}/ckpt-4") in said
  assert {p.name: p.read_bytes() for p in out.glob("ckpt-4.*")} == ckpt4
  assert _jsonl(out / "eval_log.jsonl", "global_step") == [0, 2, 4, 6]
  # 2. Another tool's tf.train.Checkpoint.save rewrote the index (ckpt-1,
  # no step): refused, and nothing of the run changes.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.train.Checkpoint(v=tf.Variable(1.0)).save(str(out / "ckpt"))
  before = _files(out)
  with pytest.raises(ValueError) as error:
    run_classifier.run(**_options(data, out, train_step=8))
  assert str(error.value) == (
      f"{out}/ckpt-1 was not written by this trainer (it holds no step, its "
      f"name says 1): move it out of {out}, or pass --overwrite to start "
      "over")
  assert _files(out) == before
  # 3. Only the index rewritten, to name a checkpoint elsewhere: refused.
  for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001"):
    (out / name).unlink()
  tf.compat.v1.train.update_checkpoint_state(str(out), str(tmp / "x-9"))
  with pytest.raises(ValueError, match=r"^the `checkpoint` index in .* names "
                     r".*x-9, which is not one of the checkpoints this "
                     r"trainer wrote there \(ckpt-4, ckpt-6\)"):
    run_classifier.run(**_options(data, out, train_step=8))


def convert_checkpoint_into_a_training_run(data, tmp, caplog):
  from albert_tf import convert_checkpoint  # pylint: disable=g-import-not-at-top
  out = tmp / "out"
  run_classifier.run(**_options(data, out, train_step=2))
  before = _files(out)
  with pytest.raises(ValueError) as error:
    convert_checkpoint.convert("original", str(out), str(out))
  assert str(error.value) == (
      f"--output_dir={out} holds a training run (eval_log.jsonl): convert "
      "into a new folder, and pass it as --init_checkpoint")
  assert _files(out) == before


def files_cut_short_by_a_kill(data, tmp, caplog):
  out = tmp / "out"
  run_classifier.run(**_options(data, out))
  # A kill mid-write: half of a last eval_log line, and of a train_log one.
  for name in ("eval_log.jsonl", "train_log.jsonl"):
    with open(out / name, "a", encoding="utf-8") as f:
      f.write('{"global_step": 6, "accur')
  with caplog.at_level(logging.INFO, logger="absl"):
    run_classifier.run(**_options(data, out, train_step=6))
  cut = [r.getMessage() for r in caplog.records if "cut short" in
         r.getMessage()]
  assert cut[0] == (f"{out}/eval_log.jsonl:4: the last line is cut short "
                    "(Unterminated string starting at; a run killed while "
                    "writing it): dropped")
  assert _jsonl(out / "eval_log.jsonl", "global_step") == [0, 2, 4, 6]
  assert _jsonl(out / "train_log.jsonl", "step") == [1, 2, 3, 4, 5, 6]
  # A bad line with lines after it is no kill: named, not dropped.
  lines = (out / "eval_log.jsonl").read_text().splitlines()
  (out / "eval_log.jsonl").write_text("\n".join(
      lines[:1] + ["{oops"] + lines[1:]) + "\n")
  before = _files(out)
  with pytest.raises(ValueError) as error:
    run_classifier.run(**_options(data, out, train_step=8))
  assert str(error.value).startswith(
      f"{out}/eval_log.jsonl:2: not a JSON record (")
  assert _files(out) == before
  # A fingerprint that is not JSON: named, with what to do.
  (out / output_dir.FINGERPRINT_FILE).write_text('{"task": "sentiment", ')
  with pytest.raises(RunConfigError) as error:
    run_classifier.run(**_options(data, out, train_step=8))
  assert str(error.value) == (
      f"{out}/{output_dir.FINGERPRINT_FILE} is not valid JSON (Expecting "
      "property name enclosed in double quotes, line 1): written by another "
      "tool or cut short; it records the run's settings, so pass --overwrite "
      "to start over, or choose another --output_dir")


def never_beats_step_0(data, tmp, caplog):
  from albert_tf.training import checkpoints  # pylint: disable=g-import-not-at-top
  out = tmp / "out"
  # A learning rate of 1e-12 (0 is refused): every eval equals step 0's,
  # none beats it.
  with caplog.at_level(logging.INFO, logger="absl"):
    result = run_classifier.run(**_options(data, out, learning_rate=1e-12,
                                           do_predict=True))
  # The untrained step 0 is never kept as the best (Trainer._keep_if_best):
  # the first trained eval is, and the run says it never beat step 0.
  assert (result["best_step"], result["never_beat_step_0"]) == (2, True)
  warning = checkpoints.NEVER_BEAT_STEP_0 % out
  said = [r.getMessage() for r in caplog.records]
  assert said.count(warning) == 1
  assert checkpoints.latest_checkpoint(str(out)).endswith("best/ckpt-2")
  # A run that learns (the label is in the first character) says nothing
  # of the kind.
  learnable = tmp / "learnable"
  learnable.mkdir()
  shutil.copy(data / "vocab.txt", learnable)
  shutil.copy(data / "config.json", learnable)
  for split, n in (("train", 32), ("dev", 16)):
    (learnable / f"{split}.tsv").write_text("".join(
        f"{i % 2}\t{'好差'[i % 2]}的电影{'很不是'[i % 3]}\n" for i in range(n)),
        encoding="utf-8")
  caplog.clear()
  with caplog.at_level(logging.INFO, logger="absl"):
    result = run_classifier.run(**_options(
        learnable, tmp / "learns", train_step=30, eval_every_steps=10))
  assert "never_beat_step_0" not in result and result["best_step"] > 0
  assert not [r for r in caplog.records
              if "no trained checkpoint beat the dev metric" in r.getMessage()]


def tokenizer_of_the_init_checkpoint(data, tmp, caplog):
  from albert_tf.core.config import PRESETS  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  from albert_tf.training import resolution  # pylint: disable=g-import-not-at-top
  special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  (tmp / "vocab_a.txt").write_text("\n".join(special + list("好差很不是的")))
  (tmp / "vocab_b.txt").write_text("\n".join(special + list("电影书手机质")))
  # A pretraining output_dir of the albert_tiny_zh shape with vocab a.
  pretrained = tmp / "pretrained"
  pretrained.mkdir()
  PRESETS["albert_tiny_zh"].replace(vocab_size=11).to_json_file(
      pretrained / "albert_config.json")
  tokenizer_a = load_tokenizer(None, str(tmp / "vocab_a.txt"), True)
  fingerprint = output_dir.make_fingerprint(
      "pretraining", PRESETS["albert_tiny_zh"], tokenizer_a, None)
  (pretrained / output_dir.FINGERPRINT_FILE).write_text(
      json.dumps(fingerprint))
  # 1. --preset with the checkpoint's own tokenizer: the preset's
  # vocab_size (21128) gives way to the checkpoint's, as its tokenizer does.
  config, _ = resolution.resolve_model(
      preset="albert_tiny_zh", init_checkpoint=str(pretrained),
      vocab_file=str(tmp / "vocab_a.txt"))
  assert (config.vocab_size, config.hidden_size) == (11, 312)
  # 2. Another tokenizer of the same size: refused, both named.
  with pytest.raises(RunConfigError) as error:
    resolution.resolve_model(preset="albert_tiny_zh",
                             init_checkpoint=str(pretrained),
                             vocab_file=str(tmp / "vocab_b.txt"))
  sha = lambda name: output_dir.file_sha256(str(tmp / name))[:12]
  assert str(error.value) == (
      f"--vocab_file={tmp}/vocab_b.txt (sha256 {sha('vocab_b.txt')}…) is not "
      f"the tokenizer --init_checkpoint={pretrained} was trained with (sha256 "
      f"{sha('vocab_a.txt')}…, in {pretrained}/{output_dir.FINGERPRINT_FILE}):"
      " pass the tokenizer it was pretrained with")
  # 3. Through the command: run_classifier refuses before writing anything.
  with pytest.raises(RunConfigError, match="is not the tokenizer"):
    run_classifier.run(**_options(
        data, tmp / "out", albert_config_file=None, preset="albert_tiny_zh",
        init_checkpoint=str(pretrained), vocab_file=str(tmp / "vocab_b.txt")))
  assert not (tmp / "out").exists()


FAULTS = [overwrite_deletes_only_the_runs_files,
          tokenizer_of_the_init_checkpoint,
          never_beats_step_0,
          files_cut_short_by_a_kill,
          checkpoint_index_missing_or_rewritten,
          convert_checkpoint_into_a_training_run,
          pretraining_output_dir_holds_its_records,
          resume_with_another_train_batch_size,
          older_output_dir_without_a_batch_size_resumes,
          duplicate_labels_in_label_list]


# Rows that train several times in a row (resume, refuse and rerun, kill
# and rerun): `make test-slow` (tests/fixtures_data.fault_rows).
SLOW_ROWS = {
    "overwrite_deletes_only_the_runs_files",
    "never_beats_step_0",
    "files_cut_short_by_a_kill",
    "checkpoint_index_missing_or_rewritten",
    "pretraining_output_dir_holds_its_records",
}


@pytest.mark.parametrize("fault", fault_rows(FAULTS, SLOW_ROWS))
def test_fault(fault, data, tmp_path, caplog):
  fault(data, tmp_path, caplog)


def test_the_checkpoint_index_of_a_relative_folder_names_its_own_files(
    tmp_path, monkeypatch):
  """best/checkpoint of a run with a relative --output_dir said
  model_checkpoint_path: "../../ckpt-4", which TF reads against best/ (the
  index file's folder): a file that is not there, so tools that read only
  the index (tf.train.latest_checkpoint) found no checkpoint."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.training import checkpoints  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  for folder in ("clf/best", "clf"):
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(f"{folder}/ckpt-4")
    checkpoints.write_checkpoint_state(folder, "ckpt-4", all_paths=["ckpt-4"])
    text = (tmp_path / folder / "checkpoint").read_text()
    assert text.splitlines() == ['model_checkpoint_path: "ckpt-4"',
                                 'all_model_checkpoint_paths: "ckpt-4"']
    assert tf.train.latest_checkpoint(folder) == f"{folder}/ckpt-4"
