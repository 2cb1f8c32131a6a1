"""Token tagging: CoNLL reading, tag schemes, windows, run_ner end to end."""

import json
import os

import numpy as np
import pytest

from albert_tf.data import conll, ner_data
from albert_tf import run_ner
from albert_tf.core.config import AlbertConfig
from albert_tf.data.tokenization import load_tokenizer

# First characters and inner characters of each type's entities.
PER, LOC, ORG = ("张王李", "明华"), ("京沪川", "湘粤"), ("社局厂", "院所")
FILLER = "的是在了和有我他说去来到"
# Word-level tokens, some split into several WordPiece pieces.
WORDS = ["alpha", "beta", "gamma", "delta", "ab", "abc"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A WordPiece vocab (characters + a few ##pieces) and a tiny config."""
  root = tmp_path_factory.mktemp("ner")
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
           sorted(set("".join(PER + LOC + ORG) + FILLER)) +
           ["al", "##pha", "be", "##ta", "ga", "##mma", "de", "##lta", "ab",
            "##c"])
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  config = AlbertConfig(vocab_size=len(vocab), embedding_size=8,
                        hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, initializer_range=0.2)
  config.to_json_file(root / "albert_config.json")
  return root


def tokenizer(workdir):
  return load_tokenizer(vocab_file=str(workdir / "vocab.txt"))


def tagger(workdir, max_seq_length):
  """The graph preprocessor fine-tuning packs windows from (its pieces)."""
  from albert_tf.serving.tagging_graph import TextTagger  # pylint: disable=g-import-not-at-top
  return TextTagger.from_tokenizer(tokenizer(workdir), max_seq_length, "char",
                                   ["O"])


def synthetic_sentences(n, seed, min_len=4, max_len=12):
  """Char-level sentences: an entity is a first character of its type's
  and 0-2 inner ones (an easily learnt rule)."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    tokens, tags = [], []
    while len(tokens) < rng.integers(min_len, max_len + 1):
      kind = rng.integers(0, 5)
      if kind < 3:
        chars, name = [(PER, "PER"), (LOC, "LOC"), (ORG, "ORG")][kind]
        length = int(rng.integers(1, 4))
        for i in range(length):
          tokens.append(str(rng.choice(list(chars[min(i, 1)]))))
          tags.append(("B-" if i == 0 else "I-") + name)
      else:
        tokens.append(str(rng.choice(list(FILLER))))
        tags.append("O")
    out.append(conll.Sentence(tokens, tags, 0))
  return out


def write_conll(path, sentences, scheme="BIO", sep=" ", crlf=False,
                with_tags=True):
  end = "\r\n" if crlf else "\n"
  with open(path, "w", encoding="utf-8", newline="") as f:
    for s in sentences:
      tags = conll.convert(s.tags, "BIO", scheme) if s.tags else None
      for i, token in enumerate(s.tokens):
        f.write(f"{token}{sep}{tags[i]}{end}" if with_tags and tags
                else f"{token}{end}")
      f.write(end)


# ------------------------------------------------------------ schemes
BIO_CASES = [
    ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "I-LOC", "O"],
    ["B-ORG"],
    ["O", "O"],
    ["B-PER", "B-PER", "I-PER", "B-ORG", "I-ORG"],
]


@pytest.mark.parametrize("scheme", conll.SCHEMES)
def test_scheme_round_trip(scheme):
  for bio in BIO_CASES:
    other = conll.convert(bio, "BIO", scheme)
    assert conll.convert(other, scheme, "BIO") == bio
    assert conll.spans(other, scheme) == conll.spans(bio, "BIO")


def test_scheme_spellings():
  bio = BIO_CASES[0]
  assert conll.convert(bio, "BIO", "BIOES") == [
      "B-PER", "E-PER", "O", "S-LOC", "B-LOC", "I-LOC", "E-LOC", "O"]
  assert conll.convert(bio, "BIO", "BMES") == [
      "B-PER", "E-PER", "O", "S-LOC", "B-LOC", "M-LOC", "E-LOC", "O"]
  assert conll.convert(bio, "BIO", "IOB1") == [
      "I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-LOC", "O"]


@pytest.mark.parametrize("scheme", conll.SCHEMES)
def test_scheme_detected(tmp_path, scheme):
  path = tmp_path / "x.txt"
  write_conll(path, [conll.Sentence(["a", "b", "c", "d", "e", "f", "g",
                                        "h"], BIO_CASES[0], 0)], scheme)
  assert conll.read_conll(str(path)).scheme == scheme


def test_predicted_tags_read_as_conlleval():
  # An I- after O starts an entity, as conlleval and seqeval read it.
  assert conll.spans(["O", "I-PER", "I-PER", "I-LOC"], "BIO",
                        strict=False) == [("PER", 1, 3), ("LOC", 3, 4)]


def test_entity_metrics_per_type_by_hand():
  gold = [["B-PER", "I-PER", "O", "B-LOC", "O", "B-PER"],
          ["B-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "O"],
          ["O", "B-PER", "O"]]
  predicted = [["B-PER", "I-PER", "O", "B-LOC", "O", "O"],
               ["B-ORG", "I-ORG", "O", "B-LOC", "O", "B-LOC"],
               ["B-ORG", "B-PER", "O"]]
  # Gold: PER 0-2, LOC 3, PER 5 | ORG 0-2, LOC 3-5 | PER 1 (PER 3, LOC 2,
  # ORG 1). Predicted: PER 0-2 ok, LOC 3 ok | ORG 0-2 ok, LOC 3-4 (gold is
  # 3-5) wrong, LOC 5 wrong | ORG 0 wrong, PER 1 ok.
  # PER: 2 right of 2 predicted, 3 gold: P 1, R 2/3, F1 0.8.
  # LOC: 1 of 3 predicted, 2 gold: P 1/3, R 1/2, F1 0.4.
  # ORG: 1 of 2 predicted, 1 gold: P 1/2, R 1, F1 2/3.
  # All: 4 right of 7 predicted, 6 gold: P 4/7, R 2/3, F1 8/13.
  # Tokens: 4 of 15 differ (S1 5; S2 4, 5; S3 0).
  expected = {
      "PER_precision": 1.0, "PER_recall": 2 / 3, "PER_f1": 0.8,
      "PER_support": 3,
      "LOC_precision": 1 / 3, "LOC_recall": 1 / 2, "LOC_f1": 0.4,
      "LOC_support": 2,
      "ORG_precision": 1 / 2, "ORG_recall": 1.0, "ORG_f1": 2 / 3,
      "ORG_support": 1,
      "entity_precision": 4 / 7, "entity_recall": 2 / 3,
      "entity_f1": 8 / 13, "token_accuracy": 11 / 15,
      "num_sentences": 3, "num_tokens": 15, "num_gold_entities": 6,
      "num_predicted_entities": 7}
  metrics = ner_data.entity_metrics(gold, predicted)
  assert metrics == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------ reading
def test_reader_crlf_bom_docstart_tabs_and_words(tmp_path):
  path = tmp_path / "x.txt"
  path.write_bytes("\ufeff-DOCSTART- -X- O\r\n\r\nalpha\tNNP\tB-PER\r\n"
                   "beta\tVB\tO\r\n\r\n\r\ngamma\tNN\tB-LOC\r\n".encode())
  data = conll.read_conll(str(path))
  assert [s.tokens for s in data.sentences] == [["alpha", "beta"], ["gamma"]]
  assert [s.tags for s in data.sentences] == [["B-PER", "O"], ["B-LOC"]]
  assert data.docstarts == 1 and data.scheme == "BIO"


@pytest.mark.parametrize("content, message", [
    ("a B-PER\nb X-PER\n", "x.txt:2: unknown tag 'X-PER'"),
    # B- after O makes it BIO (IOB2): there an I- cannot follow O.
    ("a B-LOC\nb O\nc I-PER\n", "x.txt:3: 'I-PER' after 'O' does not "
     "continue"),
    ("", "x.txt: no sentences"),
    ("\n\n", "x.txt: no sentences"),
    ("a\u3000b\tO\n", "x.txt:1: the token 'a\\u3000b' is empty or contains "
     "whitespace"),
    ("a O\nb c O\n", "x.txt:2: 3 column(s)"),
    ("a B-PER\nb E-PER\nc I-LOC\n", "x.txt:3: 'I-LOC' after 'E-PER' does "
     "not continue an entity (BIOES)"),
    ("a B-PER\nb E-PER\nc B-LOC\n\n", "x.txt:3: 'B-LOC' is not followed by"),
    ("a O\n\xff O\n", "x.txt:2: not UTF-8"),
])
def test_reader_errors_name_file_and_line(tmp_path, content, message):
  # strict_tags: the stray tags among these (lines 3 of the 'does not
  # continue' and 'is not followed by' cases) are errors too; without it they
  # are read with a warning (tests/test_faults_noise.py).
  path = tmp_path / "x.txt"
  path.write_bytes(content.encode("utf-8", "surrogateescape")
                   if "\xff" not in content else content.encode("latin-1"))
  with pytest.raises(conll.DataError) as e:
    conll.read_conll(str(path), strict_tags=True)
  assert message in str(e.value)
  assert "\n" not in str(e.value)


def test_forced_scheme_rejects_what_it_does_not_allow(tmp_path):
  path = tmp_path / "x.txt"
  path.write_text("a S-PER\n", encoding="utf-8")
  with pytest.raises(conll.DataError, match=r"x.txt:1: 'S-PER' is not a "
                     "BIO tag"):
    conll.read_conll(str(path), "BIO")
  # Valid IOB1 (detected as such), but not IOB2 when that is what is asked.
  path.write_text("a O\nb I-PER\n", encoding="utf-8")
  assert conll.read_conll(str(path)).scheme == "IOB1"
  with pytest.raises(conll.DataError, match=r"x.txt:2: 'I-PER' after 'O'"):
    conll.read_conll(str(path), "IOB2", strict_tags=True)
  # Not strict: a stray I- under IOB2, read as the start of an entity.
  data = conll.read_conll(str(path), "IOB2")
  assert (data.scheme, data.stray_tags) == ("BIO", 1)
  assert conll.to_bio(data.sentences[0], data.scheme) == ["O", "B-PER"]


# ------------------------------------------------------------ windows
def test_alignment_oracle_long_sentences_and_pieces(workdir):
  """Gold tags through pieces, windows and back give entity F1 = 1.0."""
  sentences = synthetic_sentences(20, seed=3, min_len=30, max_len=90)
  # Word tokens of several pieces, and one sentence 3x the window.
  sentences.append(conll.Sentence(
      ["alpha", "beta", "abc", "gamma", "delta"] * 4,
      ["B-ORG", "I-ORG", "O", "B-PER", "O"] * 4, 0))
  max_seq_length = 16
  long_one = synthetic_sentences(1, seed=4, min_len=3 * max_seq_length,
                                 max_len=3 * max_seq_length)[0]
  sentences.append(long_one)
  labels = ner_data.bio_label_list(["LOC", "ORG", "PER"])
  label_map = {t: i for i, t in enumerate(labels)}
  windows = ner_data.encode_sentences(sentences, tagger(workdir,
                                                       max_seq_length),
                                      label_map, doc_stride=5)
  assert windows.long_sentences == len(sentences)
  assert windows.features["input_ids"].shape[1] == max_seq_length
  # Logits that put all weight on the gold label at every labelled position.
  gold_ids = windows.features["label_ids"]
  logits = np.zeros(gold_ids.shape + (len(labels),), np.float32)
  rows, cols = np.nonzero(gold_ids >= 0)
  logits[rows, cols, gold_ids[rows, cols]] = 1.0
  predicted = ner_data.tags_from_logits(windows, logits, labels)
  assert [len(p) for p in predicted] == [len(s.tokens) for s in sentences]
  assert predicted == [s.tags for s in sentences]
  metrics = ner_data.entity_metrics([s.tags for s in sentences], predicted)
  assert metrics["entity_f1"] == 1.0
  # Each token is owned by the window where it is most central.
  for s_owner in windows.owner:
    assert all(w >= 0 and 1 <= pos <= max_seq_length - 2 for w, pos in s_owner)


def test_window_starts_cover_everything():
  for n in (1, 14, 15, 40, 100):
    starts = ner_data.window_starts(n, 14, 5)
    covered = set()
    for s in starts:
      covered.update(range(s, min(s + 14, n)))
    assert covered == set(range(n))
    assert starts[-1] + 14 >= n and (len(starts) == 1 or
                                     starts[-2] + 14 < n)


def test_only_first_piece_labelled(workdir):
  sentence = conll.Sentence(["alpha", "的"], ["B-PER", "O"], 0)
  labels = ner_data.bio_label_list(["PER"])
  windows = ner_data.encode_sentences([sentence], tagger(workdir, 8), {
      t: i for i, t in enumerate(labels)}, 3)
  # [CLS] al ##pha 的 [SEP] pad...
  assert windows.features["label_ids"][0].tolist() == [-1, 1, -1, 0, -1, -1,
                                                       -1, -1]
  assert windows.features["input_ids"][0].tolist() == tokenizer(
      workdir).convert_tokens_to_ids(["[CLS]", "al", "##pha", "的", "[SEP]",
                                      "[PAD]", "[PAD]", "[PAD]"])
  # A stray I- (after O) is read as conlleval reads it: it starts an
  # entity; well-formed BIO is taken as it is.
  windows = ner_data.encode_sentences([
      conll.Sentence(["的", "alpha"], ["O", "I-PER"], 0),
      conll.Sentence(["alpha", "的"], ["B-PER", "I-PER"], 0)],
                                      tagger(workdir, 8), {
      t: i for i, t in enumerate(labels)}, 3)
  assert windows.features["label_ids"].tolist() == [
      [-1, 0, 1, -1, -1, -1, -1, -1], [-1, 1, -1, 2, -1, -1, -1, -1]]


# ------------------------------------------------------------ run_ner
def options(workdir, data_dir, output_dir, **kw):
  o = dict(task_name="conll", data_dir=str(data_dir),
           output_dir=str(output_dir), vocab_file=str(workdir / "vocab.txt"),
           albert_config_file=str(workdir / "albert_config.json"),
           max_seq_length=24, doc_stride=8, train_batch_size=16,
           eval_batch_size=32, learning_rate=3e-3, warmup_step=2,
           classifier_dropout=0.0, seed=1, iterations_per_loop=5,
           log_every_steps=10)
  o.update(kw)
  return o


def read_predictions(path):
  """Sentences of (token, gold, predicted) rows from test_predictions.txt."""
  sentences, current = [], []
  for line in open(path, encoding="utf-8").read().split("\n"):
    if line:
      current.append(line.split("\t"))
    elif current:
      sentences.append(current)
      current = []
  return sentences


@pytest.fixture(scope="module")
def trained(workdir, tmp_path_factory):
  root = tmp_path_factory.mktemp("run")
  data = root / "data"
  data.mkdir()
  write_conll(data / "train.txt", synthetic_sentences(400, seed=1),
              scheme="BIOES", crlf=True)
  write_conll(data / "dev.txt", synthetic_sentences(60, seed=2),
              scheme="BIOES")
  # Test sentences longer than one window: every token must come back. Some
  # gold tags are wrong, so that the predictions are not all right.
  test = synthetic_sentences(30, seed=5, min_len=20, max_len=60)
  for s in test[::3]:
    s.tags = ["B-PER" if t == "O" and (i + 1 == len(s.tags) or s.tags[i + 1]
                                       [0] != "I") and i % 4 == 0 else t
              for i, t in enumerate(s.tags)]
  write_conll(data / "test.txt", test, scheme="BIOES", sep="\t")
  result = run_ner.run(**options(workdir, data, root / "out", train_step=100,
                                 eval_every_steps=50, do_train=True,
                                 do_eval=True, do_predict=True))
  return root, result, test


def test_run_ner_learns_and_reports_seqeval_f1(trained):
  root, result, test = trained
  out = root / "out"
  eval_results = json.loads((out / "eval_results.json").read_text())
  # Per type, the gold entities counted from the B- tags written to the dev
  # and test files (synthetic_sentences tags in BIO).
  import collections  # pylint: disable=g-import-not-at-top
  for prefix, sentences in (("", synthetic_sentences(60, seed=2)),
                            ("test_", test)):
    counts = collections.Counter(t[2:] for s in sentences for t in s.tags
                                 if t.startswith("B-"))
    assert {k: eval_results[f"{prefix}{k}_support"] for k in counts} == counts
    assert eval_results[f"{prefix}num_gold_entities"] == sum(counts.values())
  assert eval_results["entity_f1"] > 0.9, eval_results
  rows = read_predictions(out / "test_predictions.txt")
  # Exactly the input tokens, in order, with gold in the file's scheme.
  assert [[r[0] for r in s] for s in rows] == [s.tokens for s in test]
  assert [[r[1] for r in s] for s in rows] == [
      conll.convert(s.tags, "BIO", "BIOES") for s in test]
  assert all(len(r) == 3 for s in rows for r in s)
  from seqeval.metrics import f1_score
  f1_from_file = f1_score([[r[1] for r in s] for s in rows],
                          [[r[2] for r in s] for s in rows])
  assert 0.5 < f1_from_file < 1.0
  assert eval_results["test_entity_f1"] == pytest.approx(f1_from_file,
                                                         abs=1e-12)
  info = json.loads((out / "task_record.json").read_text())
  assert info["task"] == "tagging"
  assert info["task_config"]["tag_scheme"] == "BIOES"
  assert info["task_config"]["token_level"] == "char"
  assert info["label_list"][0] == "O" and len(info["label_list"]) == 7
  assert result["data"]["test"]["long_sentences"] > 0


def test_run_ner_predict_unlabelled_and_resume_dir(trained, workdir):
  root, _, test = trained
  data = root / "unlabelled"
  data.mkdir()
  write_conll(data / "test.txt", test[:5], with_tags=False)
  ner_out = root / "out"
  result = run_ner.run(**options(
      workdir, data, root / "predict", init_checkpoint=str(ner_out),
      albert_config_file=None, vocab_file=None, max_seq_length=None,
      doc_stride=None, do_train=False, do_eval=False, do_predict=True))
  assert "test" not in result
  rows = read_predictions(root / "predict" / "test_predictions.txt")
  assert [[r[0] for r in s] for s in rows] == [s.tokens for s in test[:5]]
  assert all(len(r) == 2 for s in rows for r in s)


def test_run_ner_unknown_type_in_dev_names_line(trained, workdir, tmp_path):
  root, _, _ = trained
  data = tmp_path / "data"
  data.mkdir()
  (data / "dev.txt").write_text("张 B-PER\n的 O\n\n社 B-XYZ\n",
                                encoding="utf-8")
  with pytest.raises(conll.DataError, match=r"dev.txt:4: entity type "
                     "'XYZ' is not among the model's"):
    run_ner.run(**options(workdir, data, tmp_path / "o",
                          init_checkpoint=str(root / "out"),
                          albert_config_file=None, vocab_file=None,
                          do_train=False, do_eval=True))
  assert not os.path.exists(tmp_path / "o")


def test_run_ner_eval_only_without_tags_says_where_they_come_from(
    workdir, tmp_path):
  data = tmp_path / "data"
  data.mkdir()
  (data / "dev.txt").write_text("张 B-PER\n的 O\n", encoding="utf-8")
  with pytest.raises(conll.DataError, match=r"train.txt: no such file, "
                     "and no task_record.json beside --init_checkpoint"):
    run_ner.run(**options(workdir, data, tmp_path / "o", do_train=False,
                          do_eval=True))
  assert not os.path.exists(tmp_path / "o")
