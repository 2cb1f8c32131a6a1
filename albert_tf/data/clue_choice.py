"""CLUE 1.1's choice tasks, C3 and CHID, for the multiple_choice family.

C3 (CLUE's c3_public.zip; files `C3_FILES`): each file one JSON array of
documents [[sentences], [{"question", "choice" (2-4), "answer"}], id], the
answer the text of one choice. A question is one example, encoded as
RACE's (`albert_tf.serving.choice_graph`): its document's sentences joined
by newlines, 4 choices, missing ones padded and masked. Its id is its
"id", else its 0-based place among the split's questions (as CLUE's
baseline). Submission: c311_predict.json, one line {"id", "label": choice
index} each.

CHID (idiom cloze; CLUE's chid_public.zip; files `CHID_FILES`, answers in
<file>_answer.json, one JSON object {blank: index of its idiom}): one JSON
object per line {"content": [passages] (or one string), "candidates":
[7-10 idioms]}, each passage with blanks "#idiom000378#". Each blank is
one example (article: its passage; question: its tag, as a served CHID
model's inputs give it too), encoded by `encode_chid`; its choices are its
line's candidates, padded to 10 and masked. Submission: chid11_predict.json, one
JSON object {blank: index of the predicted idiom}.

Errors name file:line (C3: where the document starts) and what was
expected; a CHID passage without a blank is skipped, counted and named in
one warning; answers for no blank are counted.
"""

import collections
import json
import os
import re
from typing import Iterator, List, Sequence, Tuple

from absl import logging
import numpy as np

from albert_tf.core import features as F
from albert_tf.data import race
from albert_tf.data.classifier_data import DataError, write_submission
from albert_tf.data.tsv_reader import first_places
from albert_tf.data.clue import json_lines, require_fields
from albert_tf.core.file_io import atomic_writer

C3_CHOICES = 4
CHID_CHOICES = 10
# Candidate file groups of each split, the first whose files all exist.
C3_FILES = {
    "train": (("d-train.json", "m-train.json"),
              ("c3-d-train.json", "c3-m-train.json")),
    "dev": (("d-dev.json", "m-dev.json"), ("c3-d-dev.json", "c3-m-dev.json")),
    "test": (("test1.1.json",), ("test.json",),
             ("c3-d-test.json", "c3-m-test.json")),
}
CHID_FILES = {"train": (("train.json",),), "dev": (("dev.json",),),
              "test": (("test1.1.json",), ("test.json",))}
BLANK_RE = re.compile(r"#idiom\d+#")
# The target blank's marker in CLUE's CHID baseline.
CHID_MARKER = "[unused1]"


def _find(data_dir: str, groups, task: str, split: str) -> List[str]:
  if split not in groups:
    raise DataError(f"{task}: no split {split!r} (splits: "
                    f"{', '.join(groups)})")
  for group in groups[split]:
    paths = [os.path.join(data_dir, name) for name in group]
    if all(os.path.isfile(p) for p in paths):
      return paths
  looked = "; ".join(" + ".join(g) for g in groups[split])
  raise FileNotFoundError(f"task {task}: no {split} file(s) in {data_dir} "
                          f"(looked for {looked})")


# -------------------------------------------------------------------- C3
def _array_items(path: str) -> Iterator[Tuple[str, object]]:
  """Yields ("file:line", item) for each item of a file holding one JSON
  array (the line where the item starts)."""
  try:
    with open(path, encoding="utf-8-sig") as f:
      text = f.read()
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: not UTF-8 text ({e})") from None
  decoder = json.JSONDecoder()
  space = re.compile(r"\s*")

  def skip(i):
    return space.match(text, i).end()

  def line(i):
    return text.count("\n", 0, i) + 1

  i = skip(0)
  if not text.startswith("[", i):
    raise DataError(f"{path}:{line(i)}: expected a JSON array of documents "
                    "[[sentences], [questions], id]")
  i = skip(i + 1)
  if text.startswith("]", i):
    return
  while True:
    try:
      item, end = decoder.raw_decode(text, i)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}:{e.lineno}: not JSON ({e.msg} at column "
                      f"{e.colno})") from None
    yield f"{path}:{line(i)}", item
    i = skip(end)
    if text.startswith(",", i):
      i = skip(i + 1)
    elif text.startswith("]", i):
      return
    else:
      raise DataError(f"{path}:{line(i)}: expected ',' or ']' after a "
                      "document")


def _c3_questions(where: str, doc, split: str, first_index: int,
                  level: str) -> List[race.Question]:
  if (not isinstance(doc, list) or len(doc) != 3 or
      not isinstance(doc[0], list) or not isinstance(doc[1], list)):
    raise DataError(f"{where}: expected a document [[sentences], "
                    "[questions], id]")
  sentences, questions, doc_id = doc
  if not all(isinstance(s, str) for s in sentences):
    raise DataError(f"{where}: document {doc_id!r}: its sentences are not "
                    "all strings")
  article = "\n".join(sentences)
  out = []
  for j, q in enumerate(questions):
    here = f"{where}: document {doc_id!r} question {j}"
    if not isinstance(q, dict) or "question" not in q or "choice" not in q:
      raise DataError(f"{here}: expected an object with question, choice "
                      "and answer")
    question, choices = q["question"], q["choice"]
    if not isinstance(question, str):
      raise DataError(f"{here}: 'question' is {type(question).__name__} "
                      "(expected a string)")
    if (not isinstance(choices, list) or not 2 <= len(choices) <= C3_CHOICES
        or not all(isinstance(c, str) for c in choices)):
      raise DataError(f"{here}: 'choice' is not a list of 2 to {C3_CHOICES} "
                      "strings")
    answer = q.get("answer")
    label = None
    if answer is None or (answer == "" and split not in ("train", "dev")):
      if split in ("train", "dev"):
        raise DataError(f"{here}: no 'answer' (every question of the "
                        f"{split} split needs one)")
    else:
      stripped = [c.strip() for c in choices]
      if not isinstance(answer, str) or answer.strip() not in stripped:
        raise DataError(f"{here}: answer {answer!r} is not one of its "
                        f"choices {choices}")
      label = stripped.index(answer.strip())
    qid = q.get("id", first_index + len(out))
    out.append(race.Question(qid, level, article, question, list(choices),
                             label))
  return out


def read_c3(data_dir: str, split: str) -> race.RaceData:
  """C3's questions of a split (`C3_FILES`), in file order (d before m),
  each of level "d" or "m" by its file's name ("" for the test file)."""
  paths = _find(data_dir, C3_FILES, "c3", split)
  examples: List[race.Question] = []
  documents = 0
  for path in paths:
    name = os.path.basename(path)
    level = next((lv for lv in ("d", "m") if f"{lv}-" in name[:5]), "")
    for where, doc in _array_items(path):
      documents += 1
      examples.extend(_c3_questions(where, doc, split, len(examples), level))
  ids = collections.Counter(q.id for q in examples)
  twice = [i for i, c in ids.items() if c > 1]
  if twice:
    raise DataError(f"{' + '.join(paths)}: question id(s) "
                    f"{', '.join(map(repr, twice[:3]))} occur more than once "
                    "(a submission names each question by its id)")
  counts = {"files": len(paths), "documents": documents,
            "questions": len(examples),
            "unlabelled": sum(q.label is None for q in examples)}
  for k in range(2, C3_CHOICES + 1):
    counts[f"choices_{k}"] = sum(len(q.options) == k for q in examples)
  logging.info("C3 %s: %s", ", ".join(paths), counts)
  return race.RaceData(examples, counts, " + ".join(paths))


def write_c3_submission(path: str, examples: Sequence[race.Question],
                        predicted: Sequence[int]) -> None:
  """c311_predict.json: one line {"id": ..., "label": choice index} each."""
  write_submission(path, examples, [int(choice) for choice in predicted])


C3 = race.ChoiceSpec("c3", read_c3, num_choices=C3_CHOICES, pad_choices=True,
                     choice_names=tuple(str(i) for i in range(C3_CHOICES)),
                     submission_file="c311_predict.json",
                     write_submission=write_c3_submission)


# ------------------------------------------------------------------ CHID
def read_chid(data_dir: str, split: str) -> race.RaceData:
  """CHID's blanks of a split (`CHID_FILES`, answers from <file>_answer.json
  where it exists), in file order; each a race.Question whose id and
  question are the blank's tag and whose article is its passage."""
  (path,) = _find(data_dir, CHID_FILES, "chid", split)
  answer_path = os.path.splitext(path)[0] + "_answer.json"
  answers = None
  if os.path.isfile(answer_path):
    try:
      with open(answer_path, encoding="utf-8-sig") as f:
        answers = json.load(f)
    except json.JSONDecodeError as e:
      raise DataError(f"{answer_path}:{e.lineno}: not JSON ({e.msg}); "
                      "expected one object {blank: index of its idiom}"
                      ) from None
    if not isinstance(answers, dict):
      raise DataError(f"{answer_path}: expected one JSON object {{blank: "
                      f"index of its idiom}}, got {type(answers).__name__}")
    for tag, index in answers.items():
      if isinstance(index, bool) or not isinstance(index, int):
        raise DataError(f"{answer_path}: {tag}: answer {index!r} is not an "
                        "integer")
  elif split in ("train", "dev"):
    raise FileNotFoundError(f"task chid: the {split} split needs "
                            f"{answer_path} (the answers of {path})")
  examples: List[race.Question] = []
  no_blank, seen = [], {}
  lines = passages = 0
  for where, obj in json_lines(path):
    if obj is None:
      continue
    lines += 1
    require_fields(obj, ("content", "candidates"), where,
                   "expected content and candidates")
    content, candidates = obj["content"], obj["candidates"]
    if isinstance(content, str):
      content = [content]
    if not isinstance(content, list) or not all(
        isinstance(c, str) for c in content):
      raise DataError(f"{where}: 'content' is not a list of passages "
                      "(strings)")
    if (not isinstance(candidates, list) or
        not 2 <= len(candidates) <= CHID_CHOICES or
        not all(isinstance(c, str) for c in candidates)):
      raise DataError(f"{where}: 'candidates' is not a list of 2 to "
                      f"{CHID_CHOICES} idioms (strings)")
    for k, passage in enumerate(content):
      passages += 1
      tags = BLANK_RE.findall(passage)
      if not tags:
        no_blank.append(f"{where} passage {k}")
      for tag in tags:
        if tag in seen:
          raise DataError(f"{where}: blank {tag} occurs again (first at "
                          f"{seen[tag]}); a submission names each blank once")
        seen[tag] = where
        label = None
        if answers is not None:
          if tag not in answers:
            raise DataError(f"{where}: blank {tag} has no answer in "
                            f"{answer_path}")
          label = answers[tag]
          if not 0 <= label < len(candidates):
            raise DataError(f"{answer_path}: {tag}: answer {label} is not an "
                            f"index of the {len(candidates)} candidates of "
                            f"{where}")
        examples.append(race.Question(tag, "", passage, tag,
                                      list(candidates), label))
  if no_blank:
    logging.warning("%d CHID passage(s) without a #idiom...# blank skipped "
                    "(%s)", len(no_blank), first_places(no_blank))
  unused = len(set(answers or ()) - set(seen))
  counts = {"lines": lines, "passages": passages, "blanks": len(examples),
            "passages_without_blank": len(no_blank),
            "answers_unused": unused,
            "unlabelled": sum(q.label is None for q in examples)}
  logging.info("CHID %s: %s", path, counts)
  return race.RaceData(examples, counts, path)


def encode_chid(examples: Sequence[race.Question], tokenizer,
                max_seq_length: int = 64, max_qa_length: int = 16,
                num_choices: int = CHID_CHOICES):
  """Model inputs of CHID blanks (question: the blank's tag in its article),
  as CLUE's baseline (mrc_pytorch/preprocess/CHID_preprocess.py): [CLS]
  idiom [SEP] left context, a marker at the blank, right context [SEP], the
  passage's other blanks four [MASK]s each; the context is the window of
  pieces around the blank that fits; the marker is "[unused1]"
  where the vocabulary has it, else [MASK]. Texts are tokenised by
  serve_text's graph (`TextEncoder.tokenize`). Missing candidates are
  all-zero rows.

  Returns (features, counts) as `choice_graph.encode_questions`; counts:
  questions, contexts_truncated (passage not whole), idioms_truncated (cut
  to max_qa_length), choices_padded. Raises ValueError when max_qa_length
  leaves no room, DataError for more candidates than num_choices or a
  question that is no blank of its article.
  """
  if not 1 <= max_qa_length <= max_seq_length - 4:
    raise ValueError(f"max_qa_length (the idiom's pieces) must be between 1 "
                     f"and max_seq_length - 4 = {max_seq_length - 4} ([CLS], "
                     f"two [SEP] and the blank's marker), got {max_qa_length}")
  marker = tokenizer.convert_tokens_to_ids([CHID_MARKER])[0]
  marker = tokenizer.mask_id if marker == tokenizer.unk_id else marker
  masks = [tokenizer.mask_id] * 4
  # Each text between blanks and each idiom, tokenised once, batch by batch.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.serving import text_graph  # pylint: disable=g-import-not-at-top
  encoder = text_graph.shared_encoder(tokenizer, max_seq_length)
  parts = {q.article: BLANK_RE.split(q.article) for q in examples}
  texts = list(dict.fromkeys([*(p for ps in parts.values() for p in ps),
                              *(o for q in examples for o in q.options)]))
  pieces = {}
  for start in range(0, len(texts), 4096):
    batch = texts[start:start + 4096]
    pieces.update(zip(batch, encoder.tokenize(tf.constant(batch)).to_list()))
  features = {k: np.zeros([len(examples), num_choices, max_seq_length],
                          np.int32) for k in F.ENCODER_INPUTS}
  features[F.INPUT_IDS][:] = tokenizer.pad_id
  cut_context = cut_idiom = 0
  for n, question in enumerate(examples):
    if len(question.options) > num_choices:
      raise DataError(f"blank {question.id}: {len(question.options)} "
                      f"candidates (expected at most {num_choices})")
    tags = BLANK_RE.findall(question.article)
    if question.question not in tags:
      raise DataError(f"blank {question.id}: {question.question!r} is not "
                      "a #idiom...# blank of its article")
    target = tags.index(question.question)
    chunks = [pieces[text] for text in parts[question.article]]
    left = [i for c in chunks[:target] for i in c + masks] + chunks[target]
    right = chunks[target + 1] + [i for c in chunks[target + 2:]
                                  for i in masks + c]
    cut = False
    for c, option in enumerate(question.options):
      idiom = pieces[option][:max_qa_length]
      cut_idiom += len(pieces[option]) > max_qa_length
      # Half each, a short side's room given to the other
      # (CHID_preprocess.add_tokens_for_around).
      room = max_seq_length - 4 - len(idiom)
      n_left = min(len(left), max(room - len(right), room // 2))
      n_right = min(len(right), room - n_left)
      cut = cut or n_left < len(left) or n_right < len(right)
      ids = ([tokenizer.cls_id] + idiom + [tokenizer.sep_id] +
             left[len(left) - n_left:] + [marker] + right[:n_right] +
             [tokenizer.sep_id])
      features[F.INPUT_IDS][n, c, :len(ids)] = ids
      features[F.INPUT_MASK][n, c, :len(ids)] = 1
      features[F.SEGMENT_IDS][n, c, len(idiom) + 2:len(ids)] = 1
    cut_context += cut
  features[F.LABEL_IDS] = np.asarray(
      [-1 if q.label is None else q.label for q in examples], np.int32)
  counts = {"questions": len(examples), "contexts_truncated": cut_context,
            "idioms_truncated": cut_idiom, "choices_padded": sum(
                len(q.options) < num_choices for q in examples)}
  logging.info("CHID encoded (max_seq_length %d): %s", max_seq_length,
               counts)
  return features, counts


def write_chid_submission(path: str, examples: Sequence[race.Question],
                          predicted: Sequence[int]) -> None:
  """chid11_predict.json: one JSON object {blank: idiom index} (indented,
  as CLUE's baseline writes it)."""
  result = {q.id: int(choice) for q, choice in zip(examples, predicted)}
  with atomic_writer(path) as f:
    f.write(json.dumps(result, indent=2) + "\n")


CHID = race.ChoiceSpec("chid", read_chid, encode_chid,
                       num_choices=CHID_CHOICES,
                       choice_names=tuple(str(i) for i in range(CHID_CHOICES)),
                       submission_file="chid11_predict.json",
                       write_submission=write_chid_submission)
