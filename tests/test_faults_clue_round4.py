"""Issue 50's CLUE submission and fine-tuning results faults, made on
purpose (docs/faults.md, "Nothing silent, round 4").

A submission names every test line by its id, once: a duplicate id, or a
line whose 0-based place is another line's id, is refused naming them;
CMNLI's "-" test lines are predicted; a `--max_predict_examples` run
writes its partial submission under another name. A predict run over a
finished one never leaves an empty test_results.tsv or eval_results.json
figures of other predictions, and keeps the dev metrics of the model it
predicts with. A dev eval that finds the model collapsed says so, with the
flags to change, for every family (`Task.warn_if_collapsed`).

The submission rows predict with logits chosen by the test (no model);
the results rows run one tiny classifier, trained once (module fixture).
"""

import json
import logging
import shutil
import types

import numpy as np
import pytest

from albert_tf.tasks import registry
from albert_tf import run_classifier
from albert_tf.data import classifier_data as cd
from albert_tf.data import tokenization
from albert_tf.tasks import base
from albert_tf.training import optimization
from albert_tf.training import output_dir
from tests.fixtures_data import write_tiny_vocab_and_config
from tests.test_clue import CHARS, TASKS, labelled, spec_of, write_lines


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
  root = write_tiny_vocab_and_config(tmp_path_factory.mktemp("vocab"), CHARS)
  return tokenization.load_tokenizer(vocab_file=str(root / "vocab.txt"))


def _predict(spec, tokenizer, data_dir, out, **limits):
  """ClassificationTask.predict where row i's logits pick label i % n (the
  submission's content is then known); returns the test metrics."""
  task = registry.family("classification").task(
      spec, tokenizer, str(data_dir), 16, **limits)
  n = len(spec.label_list)
  task.logits = lambda model, features: np.eye(n, dtype=np.float32)[
      np.arange(len(features["input_ids"])) % n] * 5
  out.mkdir(exist_ok=True)
  return task.predict(None, str(out))


def _afqmc_test(root, ids):
  """afqmc's train/dev and a test.json whose line k has id ids[k] (None:
  no "id" on that line)."""
  spec = spec_of("afqmc")
  write_lines(root / "train.json", [labelled("afqmc", i, spec)
                                    for i in range(3)])
  write_lines(root / "dev.json", [labelled("afqmc", i, spec)
                                  for i in range(2)])
  rows = [dict(TASKS["afqmc"][0](k), **({} if i is None else {"id": i}))
          for k, i in enumerate(ids)]
  write_lines(root / "test.json", rows)
  return spec


def _submission_ids(path):
  return [json.loads(line)["id"] for line in path.read_text().splitlines()]


# ------------------------------------------------------ 11: duplicate ids
def test_duplicate_test_id_is_refused_naming_it(tokenizer, tmp_path):
  spec = _afqmc_test(tmp_path / "data", [100, 101, 100, 102])
  test = tmp_path / "data" / "test.json"
  with pytest.raises(cd.DataError) as error:
    _predict(spec, tokenizer, tmp_path / "data", tmp_path / "out")
  assert str(error.value) == (
      f"{test}: 1 id(s) on more than one line ('100' at {test}:1, {test}:3):"
      " the submission names each prediction by its line's id, so two would "
      "share one; give each line its own \"id\"")
  assert not list((tmp_path / "out").iterdir())  # nothing written
  # Train and dev ids name no prediction: a repeat there is read.
  write_lines(tmp_path / "data" / "train.json", [
      dict(labelled("afqmc", i, spec), id=7) for i in range(3)])
  assert len(cd.read_examples(spec, str(tmp_path / "data"), "train")[0]) == 3


def test_fewclue_submission_file_with_a_duplicate_id_is_refused(tmp_path):
  spec = spec_of("eprstmt")
  write_lines(tmp_path / "test.json", [
      dict(TASKS["eprstmt"][0](i), id=i // 2) for i in range(4)])
  with pytest.raises(cd.DataError, match=r"2 id\(s\) on more than one line "
                     r"\('0' at .*test\.json:1, .*test\.json:2; '1' at "):
    cd.read_examples(spec, str(tmp_path), "submit")


# --------------------------------------------- 12: ids on some lines only
def test_place_that_is_another_lines_id_is_refused(tokenizer, tmp_path):
  # Line 1 has no id, so its place names it 0, the id line 3 gives.
  spec = _afqmc_test(tmp_path / "data", [None, 5, 0])
  test = tmp_path / "data" / "test.json"
  with pytest.raises(cd.DataError) as error:
    _predict(spec, tokenizer, tmp_path / "data", tmp_path / "out")
  assert str(error.value) == (
      f"{test}: 1 line(s) without an \"id\" take their 0-based place as "
      f"their id, which another line gives as its own ({test}:1 (named 0, "
      f"as {test}:3 is)): the submission would hold two lines of one id; "
      "give every line an \"id\"")
  assert not list((tmp_path / "out").iterdir())


def test_lines_without_id_among_ids_are_named_in_a_warning(tokenizer,
                                                           tmp_path, caplog):
  spec = _afqmc_test(tmp_path / "data", [None, 7, None, 9])
  test = tmp_path / "data" / "test.json"
  with caplog.at_level(logging.WARNING):
    _predict(spec, tokenizer, tmp_path / "data", tmp_path / "out")
  assert _submission_ids(tmp_path / "out" / "afqmc_predict.json") == [
      0, 7, 2, 9]
  assert (f"{test}: 2 of 4 lines have no \"id\": named by their 0-based "
          f"place among the JSON lines, as CLUE's baseline numbers them "
          f"({test}:1 as 0, {test}:3 as 2)") in caplog.text


# ------------------------------------ 13: a partial predict's submission
def test_max_predict_examples_never_replaces_a_full_submission(
    tokenizer, tmp_path, caplog):
  spec = _afqmc_test(tmp_path / "data", list(range(100, 110)))
  out = tmp_path / "out"
  _predict(spec, tokenizer, tmp_path / "data", out)
  full = (out / "afqmc_predict.json").read_bytes()
  assert _submission_ids(out / "afqmc_predict.json") == list(range(100, 110))
  with caplog.at_level(logging.WARNING):
    _predict(spec, tokenizer, tmp_path / "data", out, max_predict_examples=3)
  assert (out / "afqmc_predict.json").read_bytes() == full
  assert _submission_ids(out / "afqmc_predict.partial.json") == [
      100, 101, 102]
  test = tmp_path / "data" / "test.json"
  assert (f"--max_predict_examples=3: 3 of the 10 lines of {test} "
          f"predicted, so the submission is written as "
          f"{out}/afqmc_predict.partial.json; {out}/afqmc_predict.json (a "
          "submission holds every line) is left as it was") in caplog.text
  # Into a folder without a full one: still the partial name.
  _predict(spec, tokenizer, tmp_path / "data", tmp_path / "new",
           max_predict_examples=3)
  assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [
      "afqmc_predict.partial.json", "test_results.tsv"]
  # A limit the file does not reach predicts every line: the full name.
  _predict(spec, tokenizer, tmp_path / "data", tmp_path / "all",
           max_predict_examples=10)
  assert _submission_ids(tmp_path / "all" / "afqmc_predict.json") == list(
      range(100, 110))
  # --overwrite deletes the partial file with the run's others.
  removed = output_dir.remove_run_files(str(out))
  assert sorted(p.rsplit("/", 1)[1] for p in removed) == [
      "afqmc_predict.json", "afqmc_predict.partial.json", "test_results.tsv"]


# ------------------------------------------------ 32: CMNLI's "-" lines
def test_no_consensus_test_line_keeps_its_id_in_the_submission(
    tokenizer, tmp_path, caplog):
  spec = spec_of("cmnli")
  data = tmp_path / "data"
  write_lines(data / "train.json", [labelled("cmnli", i, spec)
                                    for i in range(3)])
  write_lines(data / "dev.json", [labelled("cmnli", i, spec)
                                  for i in range(2)])
  # Row i's logits pick label i % 3, and its gold label is label i % 3:
  # every labelled line is right.
  rows = [dict(labelled("cmnli", i, spec), id=100 + i) for i in range(5)]
  rows[2]["label"] = "-"
  write_lines(data / "test.json", rows)
  with caplog.at_level(logging.WARNING):
    metrics = _predict(spec, tokenizer, data, tmp_path / "out")
  out = tmp_path / "out"
  assert _submission_ids(out / "cmnli_predict.json") == [
      100, 101, 102, 103, 104]
  assert len((out / "test_results.tsv").read_text().splitlines()) == 6
  # Scored on the four lines that have a gold label.
  assert metrics["num_examples"] == 4 and metrics["accuracy"] == 1.0
  assert (f"{data / 'test.json'}: 1 line(s) with label '-' (no consensus "
          "among the annotators) kept unlabelled: predicted, as the "
          "submission needs every test id, and left out of the test "
          f"metrics (at {data / 'test.json'}:3)") in caplog.text
  # Train and dev still skip them, as CLUE's baseline does.
  rows = [labelled("cmnli", i, spec) for i in range(3)]
  rows[1]["label"] = "-"
  write_lines(data / "dev.json", rows)
  dev, stats = cd.read_examples(spec, str(data), "dev")
  assert len(dev) == 2 and stats["no_consensus_skipped"] == 1


# ---------------------------------------------- a trained tiny classifier
CLASSIFIER_CHARS = "好差很不是的电影书手机"


def _rows(n, seed):
  rng = np.random.default_rng(seed)
  rows = ["label\ttext"]
  for i in range(n):
    words = list(rng.choice(list(CLASSIFIER_CHARS[2:]), size=4))
    words.insert(int(rng.integers(0, 4)), "好" if i % 2 else "差")
    rows.append(f"{'pos' if i % 2 else 'neg'}\t{''.join(words)}")
  return "\n".join(rows) + "\n"


def _options(root, out, **kw):
  options = dict(task_name="tsv", data_dir=str(root / "data"),
                 output_dir=str(out), text_a_column="text",
                 label_column="label", label_list="neg,pos",
                 vocab_file=str(root / "vocab.txt"),
                 albert_config_file=str(root / "config.json"),
                 max_seq_length=12, train_batch_size=8, eval_batch_size=16,
                 learning_rate=1e-3, warmup_step=1, train_step=4,
                 eval_every_steps=2, seed=1, baseline=False)
  options.update(kw)
  return options


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """A finished run: trained, evaluated, and predicted on a labelled
  test.tsv (eval_results.json holds accuracy and test_accuracy)."""
  root = tmp_path_factory.mktemp("classifier")
  write_tiny_vocab_and_config(root, CLASSIFIER_CHARS)
  (root / "data").mkdir()
  for split, n, seed in (("train", 16, 0), ("dev", 8, 1), ("test", 8, 2)):
    (root / "data" / f"{split}.tsv").write_text(_rows(n, seed),
                                                encoding="utf-8")
  run_classifier.run(**_options(root, root / "out", do_train=True,
                                do_eval=True, do_predict=True))
  return root


def _copy(root, tmp_path):
  """The finished run and its data, each test's own."""
  shutil.copytree(root, tmp_path / "run")
  return tmp_path / "run", tmp_path / "run" / "out"


def _files(out):
  return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


# ------------------------------------------------- 4: an empty test split
def test_header_only_test_file_is_refused_and_nothing_changes(trained,
                                                              tmp_path):
  root, out = _copy(trained, tmp_path)
  before = _files(out)
  (root / "data" / "test.tsv").write_text("label\ttext\n", encoding="utf-8")
  with pytest.raises(ValueError) as error:
    run_classifier.run(**_options(root, out, do_predict=True))
  assert str(error.value) == (
      f"--do_predict: {root}/data/test.tsv holds no examples (its header "
      f"only): nothing to predict, so the predictions in --output_dir={out} "
      "are left as they are; fix the test file, or leave out --do_predict")
  assert _files(out) == before


def test_unlabelled_test_file_drops_the_earlier_test_metrics_and_says_so(
    trained, tmp_path, caplog):
  root, out = _copy(trained, tmp_path)
  earlier = json.loads((out / "eval_results.json").read_text())
  assert earlier["test_num_examples"] == 8
  (root / "data" / "test.tsv").write_text(
      "text\n" + "".join(f"{c}好\n" for c in "很不是"), encoding="utf-8")
  with caplog.at_level(logging.WARNING):
    run_classifier.run(**_options(root, out, do_predict=True,
                                  label_column=None, text_a_column="0",
                                  has_header=True))
  now = json.loads((out / "eval_results.json").read_text())
  assert now == {k: v for k, v in earlier.items()
                 if not k.startswith("test_")}  # dev metrics, best_step
  assert len((out / "test_results.tsv").read_text().splitlines()) == 4
  assert (f"{out}/eval_results.json: test_accuracy, test_eval_metric, "
          "test_num_examples left out of the earlier results: they scored "
          "other test predictions than this run's, whose test split has no "
          "labels") in caplog.text


# --------------------------- 14: dev metrics kept beside new predictions
def test_a_run_that_trains_nothing_keeps_the_dev_metrics(trained, tmp_path):
  """--do_train --do_predict at the step the run is at (nothing to train)
  used to rewrite eval_results.json with the test figures alone."""
  root, out = _copy(trained, tmp_path)
  earlier = json.loads((out / "eval_results.json").read_text())
  run_classifier.run(**_options(root, out, do_train=True, do_predict=True))
  assert json.loads((out / "eval_results.json").read_text()) == earlier


# -------------------------------------------------------- 34: collapse
def _model(step, optimizer="adamw", learning_rate=5e-4, warmup=10):
  """Stands for a Keras model: what the check reads is its optimizer."""
  opt = optimization.create_optimizer(optimizer, optimization.
                                      WarmupPolynomialDecay(
                                          learning_rate, 100, warmup))
  opt.iterations.assign(step)
  return types.SimpleNamespace(optimizer=opt)


ADVICE_ADAMW = (
    "fine-tuning has collapsed. Likely cause: a learning rate too large for "
    "the first steps of --optimizer=adamw, the original's rule, whose "
    "first steps have no bias correction and are 2-6x larger than Keras's "
    "(a rate tuned under keras_adamw is too large here); pass a lower "
    "--learning_rate (now 0.0005), a longer --warmup_step (now 10 steps) "
    "or --optimizer=keras_adamw")


def test_collapse_line_by_hand():
  assert base.collapse_line(_model(40), 40, 3, "dev examples", "'pos'") == (
      "Dev eval at step 40: the model predicts 'pos' for every one of the 3 "
      "dev examples, though the gold answers are not all that: " +
      ADVICE_ADAMW)
  assert base.collapse_line(
      _model(40, "keras_adamw", 1e-3, 0), 40, 2, "dev questions",
      "choice 0") == (
          "Dev eval at step 40: the model predicts choice 0 for every one "
          "of the 2 dev questions, though the gold answers are not all "
          "that: fine-tuning has collapsed. Likely cause: a learning rate "
          "too large for the first steps; pass a lower --learning_rate "
          "(now 0.001) or a longer --warmup_step (now 0 steps)")
  # The untrained head predicted the same: too small a rate is as likely.
  assert base.collapse_line(
      _model(40, "adamw", 1e-12), 40, 2, "dev examples", "'pos'",
      as_untrained=True) == (
          "Dev eval at step 40: the model predicts 'pos' for every one of "
          "the 2 dev examples, as the untrained head did at step 0, though "
          "the gold answers are not all that: fine-tuning has not moved it "
          "off one prediction. Likely cause: a --learning_rate (now 1e-12) "
          "too small to train (or too few steps); or a learning rate too "
          "large for the first steps of --optimizer=adamw, the original's "
          "rule, whose first steps have no bias correction and are 2-6x "
          "larger than Keras's (a rate tuned under keras_adamw is too large "
          "here): then pass a lower --learning_rate (now 1e-12), a longer "
          "--warmup_step (now 10 steps) or --optimizer=keras_adamw")
  # Collapsed: one prediction for all, which not every gold answer is.
  assert base.one_prediction(["pos"] * 3, ["pos", "neg", "pos"]) == ("pos",)
  assert base.one_prediction(["pos", "neg"], ["pos", "pos"]) is None
  assert base.one_prediction(["pos"] * 2, ["pos"] * 2) is None
  assert base.one_prediction(["pos"], ["neg"]) is None  # one example


def _write_tagging(root):
  block = "".join(f"{c}\t{'B-LOC' if k == 0 else 'O'}\n"
                  for k, c in enumerate(CHARS[:4])) + "\n"
  for name in ("train.txt", "dev.txt", "test.txt"):
    (root / name).write_text(block * 3, encoding="utf-8")


def _classification_collapsed(root, tokenizer):
  spec = _afqmc_test(root, [1, 2])
  task = registry.family("classification").task(spec, tokenizer, str(root),
                                                16)
  task.logits = lambda model, features: np.tile(
      np.float32([[0, 3]]), [len(features["input_ids"]), 1])
  return task, "'1' for every one of the 2 dev examples"


def _tagging_collapsed(root, tokenizer):
  _write_tagging(root)
  task = registry.family("tagging").task("conll", tokenizer, str(root), 16,
                                         8, tag_scheme="BIO")
  task.predicted_tags = lambda model, split: [
      ["O"] * len(s.tokens) for s in task.load_split(split)[0].sentences]
  return task, ("only O tags (no entity) for every one of the 3 dev "
                "sentences")


def _span_qa_collapsed(root, tokenizer):
  context = CHARS * 2
  path = root / "squad.json"
  path.write_text(json.dumps({"version": "1.1", "data": [{
      "title": "t", "paragraphs": [{"context": context, "qas": [
          {"id": f"q{i}", "question": CHARS[i], "answers": [
              {"text": context[i:i + 2], "answer_start": i}]}
          for i in range(3)]}]}]}, ensure_ascii=False), encoding="utf-8")
  task = registry.family("span_qa").task(
      "squad", tokenizer, str(path), str(path), max_seq_length=32,
      doc_stride=8, max_query_length=8)
  task.answers = lambda model, split: ({f"q{i}": "" for i in range(3)},
                                       None, None)
  return task, "the same answer, '', for every one of the 3 dev questions"


def _multiple_choice_collapsed(root, tokenizer):
  for split in ("train", "dev", "test"):
    folder = root / split / "middle"
    folder.mkdir(parents=True)
    for i in range(3):
      (folder / f"{i}.txt").write_text(json.dumps(
          {"id": f"{split}{i}", "article": CHARS, "questions": [CHARS[i]],
           "options": [list(CHARS[:4])], "answers": ["ABC"[i]]},
          ensure_ascii=False), encoding="utf-8")
  task = registry.family("multiple_choice").task("race", tokenizer,
                                                 str(root), 32, 8)
  task.logits = lambda model, split: np.tile(np.float32([[0, 0, 3, 0]]),
                                             [3, 1])
  return task, "choice 2 for every one of the 3 dev questions"


def _write_pos(root):
  """A POS file with no O: every token is B-x or I-x."""
  block = "".join(f"{c}\t{'B' if k % 2 == 0 else 'I'}-{'nr'[k // 2]}\n"
                  for k, c in enumerate(CHARS[:4])) + "\n"
  for name in ("train.txt", "dev.txt", "test.txt"):
    (root / name).write_text(block * 3, encoding="utf-8")


def _pos_tagger(root, tokenizer, predict):
  """A tagging task on `_write_pos`'s files whose predicted tags are
  predict(sentence tokens)."""
  _write_pos(root)
  task = registry.family("tagging").task("conll", tokenizer, str(root), 16,
                                         8, tag_scheme="BIO")
  task.predicted_tags = lambda model, split: [
      predict(s.tokens) for s in task.load_split(split)[0].sentences]
  return task


def test_a_tagger_with_one_tag_for_every_token_has_collapsed(
    tokenizer, tmp_path, caplog):
  """A POS tagger without O that predicts I-n for every token collapsed
  (the trial's dev F1 0.000); the check looked for all-O only and said
  nothing."""
  task = _pos_tagger(tmp_path, tokenizer, lambda tokens: ["I-n"] * len(tokens))
  with caplog.at_level(logging.WARNING):
    task.evaluate(_model(40), None)
  assert [r.getMessage() for r in caplog.records
          if "collapsed" in r.getMessage()] == [
              "Dev eval at step 40: the model predicts only 'I-n' tags for "
              "every one of the 3 dev sentences, though the gold answers "
              "are not all that: " + ADVICE_ADAMW]


@pytest.mark.parametrize("predict", [
    lambda tokens: ["B-n"] + ["I-n"] * (len(tokens) - 1),  # two tags
    lambda tokens: ["B-n", "I-n", "B-r", "I-r"]],  # the gold tags
    ids=["two_tags", "gold"])
def test_a_tagger_with_two_tags_or_the_gold_ones_has_not_collapsed(
    predict, tokenizer, tmp_path, caplog):
  task = _pos_tagger(tmp_path, tokenizer, predict)
  with caplog.at_level(logging.WARNING):
    task.evaluate(_model(40), None)
  assert "collapsed" not in caplog.text


@pytest.mark.parametrize("family", [
    _classification_collapsed, _tagging_collapsed, _span_qa_collapsed,
    _multiple_choice_collapsed], ids=lambda f: f.__name__[1:-10])
def test_every_familys_eval_says_when_the_model_collapsed(
    family, tokenizer, tmp_path, caplog):
  task, what = family(tmp_path, tokenizer)
  with caplog.at_level(logging.WARNING):
    task.evaluate(_model(40), None)
  lines = [r.getMessage() for r in caplog.records
           if "collapsed" in r.getMessage()]
  assert lines == [f"Dev eval at step 40: the model predicts {what}, "
                   "though the gold answers are not all that: " +
                   ADVICE_ADAMW]
  caplog.clear()
  task.evaluate(_model(0), None)  # the untrained head: not judged
  assert "collapsed" not in caplog.text and "step 0" not in caplog.text
  task.evaluate(_model(40), None)  # ... but remembered
  assert (f"Dev eval at step 40: the model predicts {what}, as the "
          "untrained head did at step 0, though the gold answers are not "
          "all that: fine-tuning has not moved it off one prediction."
          ) in caplog.text
