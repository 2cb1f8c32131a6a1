"""What the tagger's graph preprocessor (`albert_tf.serving.tagging_graph`)
promises, written out in plain Python for the tests: tokens split from raw
text, the Python tokenizer's pieces of each token packed into one window,
and entities read from the tokens' BIO tags (by `conll.spans`)."""

from albert_tf.data import conll
from albert_tf.serving import tagging_graph


def reference_split(text, token_level):
  """Tokens (token, start, end) as the graph's `split` promises them, in
  plain Python: a token per non-space character (str.isspace), or per run
  of `is_word_char` characters at the word level."""
  tokens, i = [], 0
  while i < len(text):
    if text[i].isspace():
      i += 1
      continue
    end = i + 1
    if token_level == "word" and tagging_graph.is_word_char(text[i]):
      while end < len(text) and tagging_graph.is_word_char(text[end]):
        end += 1
    tokens.append((text[i:end], i, end))
    i = end
  return tokens


def reference_encode(text, tokenizer, token_level, max_seq_length):
  """(tokens, input_ids, positions of the tagged tokens' first pieces) from
  the Python tokenizer's pieces of each token: a bare leading "▁" dropped
  when other pieces follow, [UNK] for a token without pieces; [CLS] pieces
  cut after max_seq_length - 2 [SEP], padding."""
  tokens, ids, positions = reference_split(text, token_level), [], []
  for token, _, _ in tokens:
    pieces = tokenizer.tokenize(token)
    if len(pieces) > 1 and pieces[0] == "\u2581":
      pieces = pieces[1:]
    if len(ids) < max_seq_length - 2:
      positions.append(len(ids) + 1)
    ids.extend(tokenizer.convert_tokens_to_ids(pieces) or [tokenizer.unk_id])
  ids = [tokenizer.cls_id] + ids[:max_seq_length - 2] + [tokenizer.sep_id]
  ids += [tokenizer.pad_id] * (max_seq_length - len(ids))
  return tokens, ids, positions


def reference_entities(text, tokens, token_tags):
  """(entities [(type, start, end, text)], char_tags, untagged characters)
  that `decode` promises for the first len(token_tags) tokens' BIO tags,
  read by conll.spans as conlleval reads them."""
  tagged = tokens[:len(token_tags)]
  char_tags = ["O" if c.isspace() else "" for c in text]
  for _, start, end in tagged:
    char_tags[start:end] = ["O"] * (end - start)
  entities = []
  for kind, first, last in conll.spans(list(token_tags), "BIO", strict=False):
    start, end = tagged[first][1], tagged[last - 1][2]
    entities.append((kind, start, end, text[start:end]))
    char_tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
  return entities, char_tags, sum(t == "" for t in char_tags)
