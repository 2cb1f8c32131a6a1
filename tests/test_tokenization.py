"""albert_tf.data.tokenization: normalisation, SentencePiece and WordPiece behind one interface."""

import pytest

from albert_tf.data import tokenization
from tests.fixtures_data import pd_corpus, spm_model  # noqa: F401 pylint: disable=unused-import

WORDPIECE_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff",
                   "##able", "hello", "中", "国", ",", "，", "!", "e"]


@pytest.fixture
def wordpiece(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(WORDPIECE_VOCAB) + "\n", encoding="utf-8")
  return tokenization.load_tokenizer(vocab_file=str(path))


def test_normalize_sentencepiece_steps():
  norm = tokenization.normalize
  assert norm("  a \t\n b  ") == "a b"
  assert norm("``Quote''") == '"quote"'
  assert norm("Héllo ÅÇ") == "hello ac"
  # NFKD folds full-width forms, as the original ALBERT preprocessing does.
  assert norm("１９９８，ＡＢ") == "1998,ab"
  assert norm("Héllo", do_lower_case=False) == "Héllo"


def test_normalize_wordpiece_steps():
  norm = lambda t, **kw: tokenization.normalize(t, "wordpiece", **kw)
  assert norm("Héllo\x00 \ufffdW\u200bo") == "hello wo"
  # NFD keeps the full-width comma that BERT's Chinese vocab has its own id for.
  assert norm("中，国") == "中，国"
  assert norm("``x''") == "``x''"


def test_wordpiece_tokenize_and_ids(wordpiece):
  assert wordpiece.kind == "wordpiece"
  assert (wordpiece.pad_id, wordpiece.unk_id, wordpiece.cls_id,
          wordpiece.sep_id, wordpiece.mask_id) == (0, 1, 2, 3, 4)
  tokens = wordpiece.tokenize("UNaffable 中国, Héllo! xyz")
  assert tokens == ["un", "##aff", "##able", "中", "国", ",", "hello", "!",
                    "[UNK]"]
  ids = wordpiece.encode("UNaffable 中国")
  assert ids == [5, 6, 7, 9, 10]
  assert wordpiece.convert_ids_to_tokens(ids) == tokens[:5]
  assert wordpiece.vocab_size == len(WORDPIECE_VOCAB)
  assert [wordpiece.is_word_start(t) for t in ("un", "##aff", "中")] == [
      True, False, True]


def test_sentencepiece_special_ids_and_round_trip(spm_model):
  tok = tokenization.load_tokenizer(spm_model_file=spm_model)
  assert tok.kind == "sentencepiece" and tok.model_file == spm_model
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (
      0, 1, 2, 3, 4)
  assert tok.convert_ids_to_tokens([2, 3, 4]) == ["[CLS]", "[SEP]", "[MASK]"]
  text = "迈向充满希望的新世纪。"
  tokens = tok.tokenize(text)
  assert "".join(tokens).replace("\u2581", "") == text
  assert tok.encode(text) == tok.convert_tokens_to_ids(tokens)
  # Control symbols are never produced from text: user text cannot forge them.
  assert not {2, 3, 4} & set(tok.encode("[CLS] [SEP] [MASK]"))
  # The original "9," rule: no piece ends in a digit followed by a comma.
  assert not any(len(p) > 1 and p[-1] == "," and p[-2].isdigit()
                 for p in tok.tokenize("1998,2000,3"))
  assert tok.tokenize(" \u3000 ") == []


def test_sentencepiece_word_starts(spm_model):
  tok = tokenization.load_tokenizer(spm_model_file=spm_model)
  assert tok.is_word_start("\u2581the")
  assert not tok.is_word_start("ing")
  assert tok.is_word_start("世纪")  # Non-English pieces are whole words.
  assert tok.is_word_start(",") and tok.is_word_start("[MASK]")
  table = tok.word_start_table()
  assert len(table) == tok.vocab_size and all(table[:5])


def test_load_errors_name_the_file(tmp_path, spm_model):
  with pytest.raises(ValueError, match="exactly one"):
    tokenization.load_tokenizer()
  with pytest.raises(ValueError, match="exactly one"):
    tokenization.load_tokenizer(spm_model_file=spm_model, vocab_file="v.txt")
  missing = str(tmp_path / "missing.model")
  with pytest.raises(ValueError, match="missing.model"):
    tokenization.load_tokenizer(spm_model_file=missing)
  junk = tmp_path / "junk.model"
  junk.write_bytes(b"not a model")
  with pytest.raises(ValueError, match="junk.model"):
    tokenization.load_tokenizer(spm_model_file=str(junk))
  no_mask = tmp_path / "vocab.txt"
  no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"\[MASK\]"):
    tokenization.load_tokenizer(vocab_file=str(no_mask))
