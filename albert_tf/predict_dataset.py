"""`albert-predict --task=<dataset> --data_dir=DIR`: a benchmark's own files.

    python -m albert_tf.predict --model=out/bustm_0 --task=bustm_0 \
        --data_dir=FewCLUE/datasets/bustm --submission_file=out/bustm_0

The registered dataset's reader reads its files (`Task.read_dataset`: the
files `albert-finetune --task` reads, ids kept); every split but train is
predicted; a labelled one is scored as `albert_tf.predict` scores a file,
beside the majority class and char n-gram TF-IDF + logistic regression
fitted on the train file (`albert_tf.data.baselines`, fine-tuning's
baselines), and says "below the baseline" when it is. --output_file gets
one row per example (split, id, file:line, inputs, gold, prediction);
--submission_file the benchmark's own file of its submission split (CLUE's
test.json, FewCLUE's test.json), atomically; a file there with more lines
is left as it is (an error). The classification family's datasets are read
here (CLUE 1.1's and FewCLUE's); C3 and CHID are not.
"""

import os

from albert_tf.data.rows import (GOLD, JSON_EXTENSIONS, PredictError,
                                 RowWriter, check_files)
from albert_tf.tasks import scoring


def _dataset(args):
  """(family, dataset) of --task; PredictError unless a dataset."""
  from albert_tf.tasks import registry  # pylint: disable=g-import-not-at-top
  if not args.task or not args.data_dir:
    raise PredictError("--task=<dataset> and --data_dir=DIR go together "
                         "(a benchmark's own files)")
  if args.input_file:
    raise PredictError("--input_file or --task: one of them (--task reads "
                         "the dataset's own files in --data_dir)")
  try:
    family, dataset = registry.resolve(args.task)
  except registry.RegistryError as e:
    raise PredictError(str(e)) from None
  if dataset is None:
    raise PredictError(f"--task={args.task} is a task family; name one of "
                         "its datasets (afqmc, tnews, bustm_0, ...)")
  if not os.path.isdir(args.data_dir):
    raise PredictError(f"--data_dir={args.data_dir} is not a directory")
  return family, dataset


def _read(family, dataset, data_dir):
  """{split: (examples, stats)} of the dataset's files in data_dir."""
  from albert_tf.data import classifier_data as cd  # pylint: disable=g-import-not-at-top
  try:
    splits = family.task.read_dataset(dataset, data_dir)
  except cd.DataError as e:
    raise PredictError(str(e)) from None
  if splits is None:
    raise PredictError(
        f"--task={dataset.name}: albert-predict reads the classification "
        f"datasets' files, not {dataset.family}'s (albert-finetune "
        f"--task={dataset.name} --nodo_train --do_predict predicts them)")
  if not [s for s in splits if s != "train"]:
    wanted = sorted({n for s, names in dataset.spec.files.items()
                     if s != "train" for n in names})
    raise PredictError(f"--data_dir={data_dir}: none of {dataset.name}'s "
                         f"files ({', '.join(wanted)})")
  return splits


def _submission_path(args, dataset, splits):
  """Where the submission goes (None: not asked); PredictError when a file
  there holds more lines than this one would."""
  submission = dataset.spec.submission
  if not args.submission_file:
    return None
  if submission is None or submission.split not in splits:
    raise PredictError(
        f"--submission_file: {dataset.name} has no submission file in "
        f"{args.data_dir}" + (f" (its {', '.join(dataset.spec.files[submission.split])} is missing)"
                              if submission else ""))
  path = args.submission_file
  if os.path.isdir(path):
    path = os.path.join(path, submission.file_name)
  lines = len(splits[submission.split][0])
  if os.path.isfile(path):
    with open(path, encoding="utf-8", errors="replace") as f:
      old = sum(1 for line in f if line.strip())
    if old > lines:
      raise PredictError(
          f"--submission_file={path} holds {old} lines, this one would hold "
          f"{lines} (of {splits[submission.split][1]['file']}): not replaced "
          "by a shorter one; name another file")
  return path


def _check_model(predictor, family, dataset, args, pair):
  labels = list(dataset.spec.label_list or ())
  if predictor.task is not family.task or sorted(predictor.labels) != sorted(
      labels) or predictor.text_pair != pair:
    raise PredictError(
        f"--model={args.model}: a {predictor.kind} model of "
        f"{'pairs' if predictor.text_pair else 'one text'}, labels "
        f"{predictor.labels[:8]}; --task={dataset.name} reads "
        f"{'pairs' if pair else 'one text'}, labels {labels[:8]} (a model "
        f"fine-tuned with albert-finetune --task={dataset.name})")


def _baselines(splits, labels, split, gold):
  """{name: classifier_metrics} of the baselines fitted on the train file
  for `split`'s labelled examples (gold: their labels); {} without one."""
  from albert_tf.data import baselines  # pylint: disable=g-import-not-at-top
  train = [e for e in splits.get("train", ([], {}))[0] if e.label is not None]
  if not train:
    return {}
  examples = [e for e in splits[split][0] if e.label is not None]
  ids = [labels.index(e.label) for e in train]
  tfidf = baselines.tfidf(([e.text_a for e in train],
                           [e.text_b for e in train], ids),
                          [([e.text_a for e in examples],
                            [e.text_b for e in examples])])[0]
  majority = baselines.majority(ids, len(examples))
  return {name: scoring.classifier_metrics(
      gold, [labels[i] for i in predicted], labels)
          for name, predicted in (("majority", majority), ("tfidf", tfidf))}


def run_task(args, log=print):
  """Predicts and scores --task's files in --data_dir; returns {split:
  {"rows", "metrics", "baselines"}} and "submission": its path or None."""
  from albert_tf.data import classifier_data as cd  # pylint: disable=g-import-not-at-top
  from albert_tf import inference  # pylint: disable=g-import-not-at-top
  from albert_tf.core.file_io import atomic_writer  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.predictor import predict_batches  # pylint: disable=g-import-not-at-top
  family, dataset = _dataset(args)
  splits = _read(family, dataset, args.data_dir)
  submission = _submission_path(args, dataset, splits)
  if args.output_file:
    check_files(splits[next(iter(splits))][1]["file"], args.output_file)
  pair = any(e.text_b is not None for examples, _ in splits.values()
             for e in examples)
  predictor = inference.load_with_head(args.model, PredictError)
  _check_model(predictor, family, dataset, args, pair)
  labels = list(predictor.labels)
  result, rows, predicted = {"submission": submission}, [], {}
  for split, (examples, stats) in splits.items():
    if split == "train":
      continue
    scorer = predictor.task.scorer(predictor.record)
    read = ((e.source, {"text": e.text_a, **(
        {"text_b": e.text_b} if pair else {})}, e.label) for e in examples)
    predicted[split] = []
    for (where, values, gold, prediction, _), example in zip(predict_batches(
        predictor, read, args.batch_size, args.progress_interval_secs),
                                                              examples):
      scorer.add(values, gold, prediction, where)
      predicted[split].append(prediction["label"])
      rows.append({"split": split, "id": example.id, "line": where, **values,
                   GOLD: "" if gold is None else gold,
                   **scorer.fields(prediction)})
    scores = scorer.metrics()
    log(f"[{split}] {stats['file']}: {len(examples)} examples predicted")
    result[split] = {"rows": len(examples), "metrics": scores,
                     "baselines": {}}
    if not scores:
      continue
    for line in scorer.lines(scores):
      log(f"[{split}] {line}")
    base = _baselines(splits, labels, split, scorer.gold)
    result[split]["baselines"] = base
    if base:
      best = max(m["accuracy"] for m in base.values())
      log(f"[{split}] baselines fitted on {splits['train'][1]['file']}: "
          + ", ".join(f"{name} accuracy={m['accuracy']:.4f} macro_f1="
                      f"{m['macro_f1']:.4f}" for name, m in base.items())
          + (": below the baseline" if scores["accuracy"] < best else ""))
  if args.output_file:
    jsonl = os.path.splitext(args.output_file)[1].lower() in JSON_EXTENSIONS
    with atomic_writer(args.output_file) as f:
      writer = RowWriter(f, jsonl)
      for row in rows:
        writer.write(row)
    log(f"{len(rows)} rows -> {args.output_file} (split, id, file:line)")
  if submission:
    split = dataset.spec.submission.split
    cd.write_submission(submission, splits[split][0], predicted[split])
    log(f"{submission}: {len(predicted[split])} lines, the benchmark's "
        f"submission file of {splits[split][1]['file']}")
  return result
