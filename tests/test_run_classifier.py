"""run_classifier end to end on tiny TSV files, and the task readers' errors."""

import json
import os

import numpy as np
import pytest


from albert_tf.data import classifier_data as cd
from albert_tf import run_classifier
from albert_tf.core.config import AlbertConfig
from albert_tf.data.classifier_data import encode_examples
from albert_tf.data.tokenization import load_tokenizer

CHARS = "好差很不是的电影书手机质量服务一般喜欢失望"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A WordPiece vocab of single characters and a tiny albert config."""
  root = tmp_path_factory.mktemp("cls")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS) + list(
      "abcdefghij")
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64,
                        # Wider than 0.02 so that 40 steps break symmetry.
                        initializer_range=0.2)
  config.to_json_file(root / "albert_config.json")
  return root


def write(path, lines):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def sentiment_rows(n, seed):
  """label 1 iff the review contains 好 (an easy, learnable signal)."""
  rng = np.random.default_rng(seed)
  filler = list("很不是的电影书手机质量服务一般")
  rows = []
  for i in range(n):
    label = i % 2
    words = list(rng.choice(filler, size=rng.integers(3, 8)))
    words.insert(int(rng.integers(0, len(words))), "好" if label else "差")
    rows.append(f"{label}\t{''.join(words)}")
  return rows


def base_options(workdir, **kw):
  options = dict(vocab_file=str(workdir / "vocab.txt"),
                 albert_config_file=str(workdir / "albert_config.json"),
                 max_seq_length=16, train_batch_size=16, eval_batch_size=32,
                 # The original AdamW takes ~3x Adam's first steps (no bias
                 # correction): at 1e-2 this model stayed at chance.
                 learning_rate=3e-3, warmup_step=2, classifier_dropout=0.0,
                 seed=1)
  options.update(kw)
  return options


def test_sentiment_end_to_end(workdir):
  data = workdir / "sentiment"
  train = sentiment_rows(96, 0)
  train.insert(10, "")                                  # an empty line
  train.append("1\t" + "好" * 40)                       # longer than 16 tokens
  write(data / "train.tsv", train)
  write(data / "dev.tsv", sentiment_rows(32, 1))
  write(data / "test.tsv", sentiment_rows(32, 2))
  out = workdir / "sentiment_out"
  result = run_classifier.run(
      task_name="sentiment", data_dir=str(data), output_dir=str(out),
      num_train_epochs=6, do_train=True, do_eval=True, do_predict=True,
      **base_options(workdir))
  stats = result["data"]["train"]
  assert stats["examples"] == 97 and stats["empty_lines_skipped"] == 1
  assert stats["truncated"] == 1 and stats["tokens_removed"] == 40 - 14
  assert result["eval"]["accuracy"] >= 0.8, result["eval"]
  assert result["test"]["accuracy"] >= 0.8, result["test"]
  saved = json.loads((out / "eval_results.json").read_text())
  assert saved["accuracy"] == result["eval"]["accuracy"]
  assert saved["best_step"] == result["best_step"]
  evals = [json.loads(l) for l in (out / "eval_log.jsonl").read_text().split(
      "\n") if l]
  # 97 examples / batch 16 = 7 steps per epoch: step 0, then every epoch.
  assert [e["global_step"] for e in evals] == [0, 7, 14, 21, 28, 35, 42]
  assert max(e["accuracy"] for e in evals) == result["eval"]["accuracy"]
  best = max(evals, key=lambda e: e["accuracy"])  # the first of equals
  assert result["best_step"] == best["global_step"]
  train_log = [json.loads(l) for l in (out / "train_log.jsonl").read_text(
      ).split("\n") if l]
  assert [e["step"] for e in train_log] == [20, 40]
  assert all(np.isfinite(e["loss"]) and e["learning_rate"] > 0
             for e in train_log)
  rows = (out / "test_results.tsv").read_text().splitlines()
  assert rows[0] == "index\tprediction\tprob_0\tprob_1" and len(rows) == 33
  for name in ("albert_config.json", "vocab.txt", "task_record.json",
               "checkpoint", "best/checkpoint", "run_fingerprint.json"):
    assert (out / name).exists(), name

  # The kept checkpoint is the best one: evaluating it alone reproduces it.
  again = run_classifier.run(
      task_name="sentiment", data_dir=str(data), output_dir=str(
          workdir / "reeval"), init_checkpoint=str(out), do_train=False,
      do_eval=True, **{k: v for k, v in base_options(workdir).items()
                       if k != "albert_config_file"})
  assert again["eval"]["accuracy"] == pytest.approx(result["eval"]["accuracy"])
  # Eval-only in the training output_dir, as docs/finetuning.md writes it:
  # the config, tokenizer and max_seq_length are the ones recorded there.
  before = (out / "eval_log.jsonl").read_bytes()
  here = run_classifier.run(task_name="sentiment", data_dir=str(data),
                            output_dir=str(out), do_train=False, do_eval=True)
  assert here["eval"]["accuracy"] == pytest.approx(result["eval"]["accuracy"])
  assert here["best_step"] == result["best_step"]
  assert json.loads((out / "eval_results.json").read_text())[
      "accuracy"] == pytest.approx(result["eval"]["accuracy"])
  log = (out / "eval_log.jsonl").read_bytes()
  assert log.startswith(before)  # training's log kept, this eval appended
  assert json.loads(log[len(before):])["accuracy"] == pytest.approx(
      result["eval"]["accuracy"])

  # A checkpoint of a different config: a clear error naming the fields.
  other = workdir / "other_config.json"
  AlbertConfig.from_json_file(workdir / "albert_config.json").replace(
      hidden_size=32, intermediate_size=64).to_json_file(other)
  with pytest.raises(ValueError, match="different config.*hidden_size"):
    run_classifier.run(
        task_name="sentiment", data_dir=str(data), output_dir=str(
            workdir / "bad"), init_checkpoint=str(out), do_train=False,
        do_eval=True, **base_options(workdir, albert_config_file=str(other)))
  # Same, when the checkpoint has no albert_config.json beside it.
  os.remove(out / "albert_config.json")
  with pytest.raises(ValueError, match="does not fit the model config.*shape"):
    run_classifier.run(
        task_name="sentiment", data_dir=str(data), output_dir=str(
            workdir / "bad2"), init_checkpoint=str(out), do_train=False,
        do_eval=True, **base_options(workdir, albert_config_file=str(other)))


def test_lcqmc_pair_task(workdir):
  data = workdir / "lcqmc"
  rng = np.random.default_rng(3)
  rows = []
  for i in range(64):
    a = "".join(rng.choice(list(CHARS), size=4))
    b = a if i % 2 else "".join(rng.choice(list(CHARS), size=5))
    rows.append(f"{a}\t{b}\t{i % 2}")
  write(data / "train.txt", rows[:48])   # the original LCQMC .txt names
  write(data / "dev.txt", rows[48:])
  write(data / "test.txt", rows[48:])
  out = workdir / "lcqmc_out"
  result = run_classifier.run(
      task_name="lcqmc", data_dir=str(data), output_dir=str(out),
      train_step=6, do_train=True, do_eval=True, do_predict=True,
      mixed_precision="mixed_bfloat16", **base_options(workdir))
  assert result["num_train_steps"] == 6
  assert result["eval"]["num_examples"] == 16
  assert result["test"]["num_examples"] == 16  # the LCQMC test split is labelled
  assert len((out / "test_results.tsv").read_text().splitlines()) == 17


def test_stsb_regression(workdir):
  data = workdir / "sts-b"
  header = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
            "sentence1\tsentence2")
  rng = np.random.default_rng(4)
  rows = []
  for i in range(48):
    a = "".join(rng.choice(list(CHARS), size=5))
    score = float(i % 6)
    rows.append(f"{i}\tmain-news\tx\t2012\t{i}\tnone\tnone\t{a}\t{a[:int(score)]}"
                f"\t{score:.3f}")
  write(data / "train.tsv", [header + "\tscore"] + rows[:32])
  write(data / "dev.tsv", [header + "\tscore"] + rows[32:])
  write(data / "test.tsv", [header] + [r.rsplit("\t", 1)[0] for r in rows[32:]])
  out = workdir / "stsb_out"
  result = run_classifier.run(
      task_name="sts-b", data_dir=str(data), output_dir=str(out),
      train_step=6, do_train=True, do_eval=True, do_predict=True,
      **base_options(workdir))
  saved = json.loads((out / "eval_results.json").read_text())
  assert {"pearson", "spearman", "best_step"} <= set(saved)
  assert "test_pearson" not in saved  # the GLUE test split has no score
  preds = (out / "test_results.tsv").read_text().splitlines()
  assert preds[0] == "index\tprediction" and len(preds) == 17
  assert [int(r.split("\t")[0]) for r in preds[1:]] == list(range(16))
  # test.tsv holds dev.tsv's 16 pairs without their scores, so the written
  # predictions (the best checkpoint's) are the ones scored on dev. Their
  # gold scores, i % 6 for rows i = 32..47:
  gold = np.array([2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5], float)
  predicted = np.array([float(r.split("\t")[1]) for r in preds[1:]])
  assert np.ptp(predicted) > 1e-3  # not constant: both correlations exist
  # Pearson and Spearman in NumPy (ranks: see the example in the comment of
  # test_metrics_on_hand_computed_examples).
  assert _average_ranks([1, 2, 2, 3, 7]).tolist() == [1, 2.5, 2.5, 4, 5]
  pearson = np.corrcoef(predicted, gold)[0, 1]
  spearman = np.corrcoef(_average_ranks(predicted), _average_ranks(gold))[0, 1]
  # The file rounds to 6 decimals, an error of 5e-7 or less per entry: to
  # first order r then moves by at most 5e-7 / std(predicted); twice that.
  # The ranks are unchanged (the predictions are ~1e-4 apart).
  tol = 2 * 5e-7 / predicted.std()
  dev = result["eval"]
  assert dev["pearson"] == pytest.approx(pearson, abs=tol)
  assert dev["spearman"] == pytest.approx(spearman, abs=1e-9)
  assert dev["corr"] == pytest.approx((pearson + spearman) / 2, abs=tol)
  assert dev["num_examples"] == len(gold)
  # Evaluated at step 0 and after each epoch (32 examples / batch 16 = 2
  # steps). The best is the trained step with the highest dev corr (step
  # 0's eval is never kept), and the result is its logged eval.
  evals = [json.loads(l) for l in (out / "eval_log.jsonl").read_text(
      ).splitlines() if l]
  assert [e["global_step"] for e in evals] == [0, 2, 4, 6]
  best = max(evals[1:], key=lambda e: e["corr"])
  assert result["best_step"] == saved["best_step"] == best["global_step"]
  assert (dev["pearson"], dev["spearman"], dev["num_examples"]) == (
      best["pearson"], best["spearman"], best["num_examples"])


def _average_ranks(x):
  """1-based ranks; tied values share the mean of their ranks."""
  x = np.asarray(x)
  return np.array([(x < v).sum() + ((x == v).sum() + 1) / 2 for v in x])


# ------------------------------------------------------- readers (no model)
def test_bad_input_messages(tmp_path, workdir):
  spec = cd.get_task("sentiment")
  write(tmp_path / "train.tsv", ["1\t好", "", "0"])
  with pytest.raises(cd.DataError, match=r"train.tsv:3: .*missing text_a"):
    cd.read_examples(spec, str(tmp_path), "train")
  write(tmp_path / "train.tsv", ["1\t好", "", "2\t差"])
  with pytest.raises(cd.DataError,
                     match=r"train.tsv:3: unknown label '2'.*\['0', '1'\]"):
    cd.read_examples(spec, str(tmp_path), "train")
  write(tmp_path / "train.tsv", ["1\t好", "", "  ", "0\t差"])
  examples, stats = cd.read_examples(spec, str(tmp_path), "train")
  assert len(examples) == 2 and stats["empty_lines_skipped"] == 2
  assert examples[1].source.endswith("train.tsv:4")
  write(tmp_path / "dev.tsv", ["sentence1\tlabel", "a\tentailment"])
  with pytest.raises(cd.DataError, match="no column 'sentence2'"):
    cd.read_examples(cd.get_task("rte"), str(tmp_path), "dev")
  write(tmp_path / "train.tsv", ["x\tnot a number"])
  tsv = cd.get_task("tsv", text_a_column="0", label_column="1")
  with pytest.raises(cd.DataError, match="regression label 'not a number'"):
    cd.read_examples(tsv, str(tmp_path), "train")
  with pytest.raises(ValueError, match="Unknown task_name 'foo'"):
    cd.get_task("foo")


def test_generic_tsv_named_columns(tmp_path):
  write(tmp_path / "train.tsv", ["id\tq\tlabel\tdoc", "7\t好\tyes\t差",
                                 "8\t差\tno\t好"])
  spec = cd.get_task("tsv", text_a_column="q", text_b_column="doc",
                     label_column="label", label_list=["no", "yes"])
  examples, stats = cd.read_examples(spec, str(tmp_path), "train")
  assert stats["header_lines"] == 1
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [
      ("好", "差", "yes"), ("差", "好", "no")]


def test_encoding_and_truncation(workdir):
  tok = load_tokenizer(vocab_file=str(workdir / "vocab.txt"))
  examples = [cd.InputExample("a", "好好好好好", "差差", "1", "f:1"),
              cd.InputExample("b", "好差", None, "0", "f:2"),
              cd.InputExample("c", "好" * 10, None, "1", "f:3")]
  features, stats = encode_examples(examples, tok, 8, cd.get_task("sentiment"),
                                    name_truncated=3)
  # longest-first: a loses 2 pieces -> [CLS] 好好好 [SEP] 差差 [SEP]
  assert tok.convert_ids_to_tokens(features["input_ids"][0]) == [
      "[CLS]", "好", "好", "好", "[SEP]", "差", "差", "[SEP]"]
  assert features["segment_ids"][0].tolist() == [0] * 5 + [1] * 3
  assert features["input_mask"][1].tolist() == [1] * 4 + [0] * 4
  assert features["input_ids"][1, -1] == tok.pad_id
  # 10 pieces into 6 places: 4 removed; 2 + 4 in all, 2 examples cut.
  assert stats == {"examples": 3, "truncated": 2, "tokens_removed": 6,
                   "truncated_at": ["f:1", "f:3"]}
  assert features["label_ids"].tolist() == [1, 0, 1]


def test_metrics_on_hand_computed_examples():
  # scores s = [1, 2, 2, 3, 7], labels l = [1, 3, 2, 4, 5]; both means 3.
  # Pearson: s - 3 = [-2, -1, -1, 0, 4], l - 3 = [-2, 0, -1, 1, 2]:
  #   sum of products 4 + 0 + 1 + 0 + 8 = 13, sums of squares 22 and 10,
  #   r = 13 / sqrt(220) = 0.876460.
  # Spearman: ranks of s [1, 2.5, 2.5, 4, 5] (the tie shares 2 and 3), of l
  #   [1, 3, 2, 4, 5]; minus the mean 3: [-2, -.5, -.5, 1, 2] and
  #   [-2, 0, -1, 1, 2]: products 9.5, squares 9.5 and 10,
  #   rho = 9.5 / sqrt(95) = sqrt(0.95) = 0.974679.
  scores, labels = np.array([1, 2, 2, 3, 7.0]), np.array([1, 3, 2, 4, 5.0])
  result = cd.compute_metrics(cd.get_task("sts-b"), labels, scores)
  assert result["pearson"] == pytest.approx(13 / np.sqrt(220), rel=1e-12)
  assert result["spearman"] == pytest.approx(np.sqrt(0.95), rel=1e-12)
  assert result["eval_metric"] == result["corr"] == pytest.approx(
      (13 / np.sqrt(220) + np.sqrt(0.95)) / 2, rel=1e-12)
  assert result["num_examples"] == 5
  # A constant prediction has no correlation (not nan, which never wins).
  assert cd.compute_metrics(cd.get_task("sts-b"), labels, np.ones(5))["corr"] == 0.0

  labels = np.array([1, 1, 0, 0, 1, 0])
  logits = np.array([[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [1, 0]])
  result = cd.compute_metrics(cd.get_task("mrpc"), labels, logits)
  assert result["accuracy"] == pytest.approx(4 / 6)
  assert result["f1"] == pytest.approx(2 / 3)  # tp 2, fp 1, fn 1
  # CoLA is scored by Matthews correlation, as in the original:
  # (tp tn - fp fn) / sqrt((tp + fp)(tp + fn)(tn + fp)(tn + fn)) with tp 2,
  # tn 2, fp 1, fn 1 = 3 / 9.
  result = cd.compute_metrics(cd.get_task("cola"), labels, logits)
  assert result["mcc"] == pytest.approx(1 / 3, rel=1e-12)
  assert result["eval_metric"] == result["mcc"]


def test_labelled_tsv_test_split_is_scored(workdir, tmp_path):
  def rows(n, seed):
    return ["review\tlabel"] + [
        f"{r.split(chr(9))[1]}\t{'pos' if r[0] == '1' else 'neg'}"
        for r in sentiment_rows(n, seed)]
  write(tmp_path / "train.tsv", rows(32, 0))
  write(tmp_path / "dev.tsv", rows(16, 1))
  write(tmp_path / "test.tsv", rows(12, 2))
  out = tmp_path / "out"
  result = run_classifier.run(
      task_name="tsv", data_dir=str(tmp_path), output_dir=str(out),
      text_a_column="review", label_column="label", label_list="neg,pos",
      train_step=4, do_train=True, do_eval=True, do_predict=True,
      **base_options(workdir))
  saved = json.loads((out / "eval_results.json").read_text())
  assert saved["test_num_examples"] == 12
  assert saved["test_accuracy"] == result["test"]["accuracy"]
  rows_out = (out / "test_results.tsv").read_text().splitlines()
  assert rows_out[0] == "index\tprediction\tprob_neg\tprob_pos"
  assert len(rows_out) == 13
  predicted = [r.split("\t")[1] for r in rows_out[1:]]
  gold = [r.split("\t")[1] for r in rows(12, 2)[1:]]
  assert set(predicted) <= {"neg", "pos"}
  assert result["test"]["accuracy"] == pytest.approx(
      np.mean([p == g for p, g in zip(predicted, gold)]))

  # Without the label column the same test file gets predictions only.
  write(tmp_path / "test.tsv", [r.rsplit("\t", 1)[0] for r in rows(12, 2)])
  result = run_classifier.run(
      task_name="tsv", data_dir=str(tmp_path), output_dir=str(out),
      text_a_column="review", label_column="label", label_list="neg,pos",
      train_step=4, do_train=False, do_eval=True, do_predict=True,
      **base_options(workdir))
  assert "test" not in result
  assert len((out / "test_results.tsv").read_text().splitlines()) == 13


def test_tsv_label_set_comes_from_the_train_split(tmp_path):
  from albert_tf.data.classifier_data import read_spec
  def spec_for(labels, **kw):
    write(tmp_path / "train.tsv", ["text\tlabel"] + [
        f"好{i}\t{label}" for i, label in enumerate(labels)])
    return read_spec("tsv", text_a_column="text", label_column="label",
                     data_dir=str(tmp_path), **kw)
  # Text labels: classes, not a regression on 'pos' (the old failure).
  assert spec_for(["pos", "neg", "pos"]).label_list == ("neg", "pos")
  # Integer labels are classes too, in numeric order.
  assert spec_for(["10", "2", "2", "0"]).label_list == ("0", "2", "10")
  # Scores with a fractional part are a regression; --regression forces it.
  assert spec_for(["0.5", "3.2", "1"]).is_regression
  assert spec_for(["0", "1"], regression=True).is_regression
  with pytest.raises(cd.DataError, match="--regression needs numeric.*'pos'"):
    spec_for(["pos", "1"], regression=True)
  # An explicit --label_list wins, and the labels of a checkpoint next.
  assert spec_for(["pos"], label_list="pos,neg").label_list == ("pos", "neg")
  assert spec_for(["pos", "neg"], known_labels=["pos", "neg"]
                  ).label_list == ("pos", "neg")
