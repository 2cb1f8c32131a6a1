"""Issue 39's silent faults of fine-tuning, made on purpose.

The label order is part of the model (eval, predict, resume and
--init_checkpoint with another --label_list), flags are checked before
anything is written, an eval- or predict-only run keeps the training run's
results, and the fingerprint covers max_seq_length, dropout and labels.
One tiny classifier is trained once (module fixture) on a `tsv` task whose
label is "pos" iff the review holds 好; each test then runs against a copy.
"""

import json
import logging
import shutil

import numpy as np
import pytest

from albert_tf import run_classifier
from albert_tf.data.classifier_data import DataError
from albert_tf.training.runtime import RunConfigError
from tests.fixtures_data import write_tiny_vocab_and_config

CHARS = "好差很不是的电影书手机质量服务一般"


def _rows(n, seed):
  rng = np.random.default_rng(seed)
  filler = list("很不是的电影书手机质量服务一般")
  rows = ["label\ttext"]
  for i in range(n):
    words = list(rng.choice(filler, size=int(rng.integers(3, 7))))
    words.insert(int(rng.integers(0, len(words))), "好" if i % 2 else "差")
    rows.append(f"{'pos' if i % 2 else 'neg'}\t{''.join(words)}")
  return "\n".join(rows) + "\n"


def _options(root, out, **kw):
  options = dict(task_name="tsv", data_dir=str(root / "data"),
                 output_dir=str(out), text_a_column="text",
                 label_column="label", label_list="neg,pos",
                 vocab_file=str(root / "vocab.txt"),
                 albert_config_file=str(root / "config.json"),
                 max_seq_length=16, train_batch_size=16, eval_batch_size=32,
                 learning_rate=3e-3, warmup_step=2, classifier_dropout=0.0,
                 train_step=40, eval_every_steps=20, seed=1)
  options.update(kw)
  return options


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  root = tmp_path_factory.mktemp("labels")
  write_tiny_vocab_and_config(root, CHARS)
  (root / "data").mkdir()
  for split, n, seed in (("train", 64, 0), ("dev", 24, 1), ("test", 24, 2)):
    (root / "data" / f"{split}.tsv").write_text(_rows(n, seed),
                                                encoding="utf-8")
  result = run_classifier.run(**_options(root, root / "out", do_train=True,
                                         do_eval=True, do_predict=True))
  assert result["eval"]["accuracy"] >= 0.8, result  # it learnt the task
  return root, result


def _copy(root, tmp_path):
  out = tmp_path / "out"
  shutil.copytree(root / "out", out)
  return out


def _predictions(out):
  rows = (out / "test_results.tsv").read_text().splitlines()
  return [r.split("\t")[1] for r in rows[1:]]


def test_another_label_order_is_remapped_by_name(trained, tmp_path, caplog):
  root, result = trained
  out = _copy(root, tmp_path)
  before = _predictions(out)
  with caplog.at_level(logging.WARNING):
    again = run_classifier.run(**_options(
        root, out, label_list="pos,neg", do_eval=True, do_predict=True))
  # The same metrics and predictions, not inverted (0.675 -> 0.325 before).
  assert again["eval"]["accuracy"] == pytest.approx(
      result["eval"]["accuracy"])
  assert again["test"]["accuracy"] == pytest.approx(
      result["test"]["accuracy"])
  assert _predictions(out) == before
  assert any("remapped by name" in r.getMessage() and "neg,pos" in
             r.getMessage() for r in caplog.records)


def test_another_label_set_is_refused_before_anything_is_written(
    trained, tmp_path):
  root, _ = trained
  out = _copy(root, tmp_path)
  files = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
  with pytest.raises(DataError) as error:
    run_classifier.run(**_options(root, out, label_list="neg,pos,meh",
                                  do_eval=True))
  assert str(error.value) == (
      f"--output_dir={out} holds a classification model of labels neg,pos; "
      "this run's are neg,pos,meh: give the same labels (--label_list), or "
      "--overwrite to start over")
  assert {p.name: p.read_bytes() for p in out.iterdir()
          if p.is_file()} == files


def test_init_from_a_classifier_of_other_labels_trains_a_new_head(
    trained, tmp_path, caplog):
  """The encoder comes from --init_checkpoint, the head does not."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  root, _ = trained
  data = tmp_path / "data"
  shutil.copytree(root / "data", data)
  for f in data.iterdir():
    f.write_text(f.read_text(encoding="utf-8").replace("pos\t", "good\t")
                 .replace("neg\t", "bad\t"), encoding="utf-8")
  out = tmp_path / "new"
  with caplog.at_level(logging.WARNING):
    run_classifier.run(**_options(
        root, out, data_dir=str(data), label_list="bad,good",
        init_checkpoint=str(root / "out"), albert_config_file=None,
        train_step=1, learning_rate=1e-9, warmup_step=0, do_train=True))
  assert any("its classifier head is not restored" in r.getMessage()
             for r in caplog.records)
  old = tf.train.load_checkpoint(str(root / "out" / "best"))
  new = tf.train.load_checkpoint(str(out / "ckpt-1"))
  names = [n for n in new.get_variable_to_shape_map()
           if "OPTIMIZER" not in n and "/" in n]
  head = [n for n in names if n.startswith("classifier_head/")]
  body = [n for n in names if n.startswith("encoder/")]
  assert head and body
  # After one step at lr 1e-9 the encoder is the init's; the head is new.
  for n in body:
    np.testing.assert_allclose(new.get_tensor(n), old.get_tensor(n),
                               atol=1e-6)
  assert any(not np.allclose(new.get_tensor(n), old.get_tensor(n),
                             atol=1e-3) for n in head)


@pytest.mark.parametrize("flag, value, message", [
    ("learning_rate", -1e-3, "--learning_rate must be positive, got -0.001"),
    ("learning_rate", 0.0, "--learning_rate must be positive, got 0.0"),
    ("train_step", -3, "--train_step must be 0 or more, got -3"),
    ("save_checkpoints_steps", -5,
     "--save_checkpoints_steps must be 0 or more, got -5"),
    ("eval_every_steps", -1, "--eval_every_steps must be 0 or more, got -1"),
    ("warmup_step", -5, "--warmup_step must be -1 (--warmup_proportion of "
     "training) or 0 or more, got -5"),
    ("num_train_epochs", 0.0, "--num_train_epochs must be positive (or give "
     "--train_step), got 0.0"),
])
def test_fine_tuning_flags_are_checked_before_anything_is_written(
    trained, tmp_path, flag, value, message):
  root, _ = trained
  out = tmp_path / "never"
  kw = {flag: value}
  if flag == "num_train_epochs":
    kw["train_step"] = 0
  with pytest.raises(ValueError) as error:
    run_classifier.run(**_options(root, out, do_train=True, **kw))
  assert str(error.value) == message
  assert not out.exists()


def test_a_predict_only_run_keeps_the_training_runs_results(trained,
                                                            tmp_path):
  root, result = trained
  out = _copy(root, tmp_path)
  trained_results = json.loads((out / "eval_results.json").read_text())
  run_classifier.run(**_options(root, out, do_predict=True,
                                max_predict_examples=8))
  now = json.loads((out / "eval_results.json").read_text())
  # Dev metrics and best_step as training wrote them; test_* of this run.
  for key in ("accuracy", "eval_metric", "best_step", "num_examples"):
    assert now[key] == trained_results[key], key
  assert now["test_num_examples"] == 8
  assert trained_results["test_num_examples"] == 24


@pytest.mark.parametrize("flag, value, saved", [
    ("max_seq_length", 32, 16), ("classifier_dropout", 0.3, 0.0)])
def test_resume_with_another_length_or_dropout_is_refused(
    trained, tmp_path, flag, value, saved):
  root, _ = trained
  out = _copy(root, tmp_path)
  with pytest.raises(RunConfigError) as error:
    run_classifier.run(**_options(root, out, do_train=True, train_step=60,
                                  **{flag: value}))
  assert f"task_settings.{flag} {saved!r} there vs {value!r} now" in str(
      error.value)


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_raising_train_step_alone_continues_a_run_with_a_warmup_share(
    trained, tmp_path):
  """--warmup_step=-1 (a share of the steps): the fingerprint records the
  share, not the step count it comes to, so a rerun with more steps
  continues from the checkpoint instead of being refused."""
  root, _ = trained
  out = tmp_path / "share"
  first = run_classifier.run(**_options(root, out, warmup_step=-1,
                                        train_step=10, eval_every_steps=5,
                                        do_train=True, do_eval=True))
  assert first["num_train_steps"] == 10
  fingerprint = json.loads((out / "run_fingerprint.json").read_text())
  assert (fingerprint["optimizer"]["num_warmup_steps"],
          fingerprint["optimizer"]["warmup_proportion"]) == (None, 0.1)
  more = run_classifier.run(**_options(root, out, warmup_step=-1,
                                       train_step=20, eval_every_steps=5,
                                       do_train=True, do_eval=True))
  assert more["num_train_steps"] == 20
  steps = [json.loads(l)["global_step"] for l in
           (out / "eval_log.jsonl").read_text().splitlines()]
  assert steps == [0, 5, 10, 15, 20]
