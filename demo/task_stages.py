"""The demo's fine-tuning stages: sentiment, learning curves, NER and cloze
reading comprehension, each from the pretrained checkpoint and from random
init beside its baselines (a mixin of demo.run_demo.Demo)."""

import json
import os

from benchmarks.commands import run_module, run_side_by_side


def read_json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


class TaskStages:
  """Needs the host's path(), budget, mode and _spm()."""

  def _init_args(self, init):
    """From the pretrained checkpoint (init), or random weights of its
    config (init None)."""
    return [f"--init_checkpoint={init}" if init else
            f"--albert_config_file={self.path('pretrain', 'albert_config.json')}"]

  def _fine_tune(self, module, out, init, args, train_examples,
                 eval_examples, learning_rate):
    """The (module, args, log) of a fine-tuning CLI (`run_side_by_side`);
    its results are out/eval_results.json."""
    args = [f"--output_dir={out}", f"--spm_model_file={self._spm()}",
            "--train_batch_size=32", f"--learning_rate={learning_rate}",
            "--do_train",
            "--do_eval", "--do_predict", "--seed=12345"] + args
    if train_examples:
      args.append(f"--max_train_examples={train_examples}")
    if eval_examples:
      args.append(f"--max_eval_examples={eval_examples}")
    if self.budget["predict_examples"]:
      args.append(f"--max_predict_examples={self.budget['predict_examples']}")
    return module, args + self._init_args(init), os.path.join(out, "log.txt")

  def _finetune(self, out, init):
    b = self.budget
    return self._fine_tune(
        "albert_tf.run_classifier", out, init,
        ["--task_name=sentiment",
         f"--data_dir={self.path('corpus', 'sentiment')}",
         f"--max_seq_length={b['finetune_seq']}",
         f"--train_step={b['finetune_steps']}",
         f"--eval_every_steps={b['finetune_steps'] // b['finetune_evals']}"],
        b["finetune_train_examples"], b["finetune_eval_examples"], 5e-4)

  def stage_finetune(self, out):
    run_side_by_side(
        self._finetune(os.path.join(out, "pretrained"), self.path("pretrain")),
        self._finetune(os.path.join(out, "random_init"), None),
        ("benchmarks.tfidf_baseline",
         [f"--data_dir={self.path('corpus', 'sentiment')}",
          f"--output_file={out}/tfidf.json"], os.path.join(out, "log.txt")))
    return {name: read_json(os.path.join(out, name, "eval_results.json"))
            for name in ("pretrained", "random_init")} | {
                "tfidf": read_json(os.path.join(out, "tfidf.json"))}

  def stage_curves(self, out):
    """benchmarks.learning_curves on the demo's review splits and its
    pretrained checkpoint: for each labelled budget and seed, a stratified
    subset fine-tuned from the checkpoint and from random init (the same
    recipe) and TF-IDF + LR on it, all scored on the same test reviews;
    paired t-test across seeds. Writes out/learning_curves.{json,md}."""
    b = self.budget
    run_module("benchmarks.learning_curves",
               f"--data_dir={self.path('corpus', 'sentiment')}",
               f"--pretrained={self.path('pretrain')}",
               f"--spm_model_file={self._spm()}",
               f"--work_dir={out}/work", f"--output={out}/learning_curves",
               f"--sizes={b['curve_sizes']}", f"--seeds={b['curve_seeds']}",
               f"--min_steps={b['curve_min_steps']}",
               f"--max_steps={b['curve_max_steps']}",
               f"--max_seq_length={b['finetune_seq']}",
               f"--max_test_examples={b['curve_test_examples']}",
               "--workers=2", log=os.path.join(out, "log.txt"))
    summary = read_json(os.path.join(out, "learning_curves.json"))
    figures = {}
    for row in summary["rows"]:
      figures[f"n{row['train_examples']}"] = {
          "pretrained": round(row["pretrained"]["mean"], 4),
          "random_init": round(row["random_init"]["mean"], 4),
          "tfidf": round(row["tfidf"]["mean"], 4),
          "vs_random_init": row["vs_random_init"]["verdict"],
          "vs_random_init_p": row["vs_random_init"]["paired_t_p"],
          "vs_tfidf": row["vs_tfidf"]["verdict"]}
    figures["seeds"] = len(summary["seeds"])
    figures["test_examples"] = summary["test_examples"]
    return figures

  def _ner(self, out, init):
    b = self.budget
    return self._fine_tune(
        "albert_tf.run_ner", out, init,
        ["--task_name=peoples_daily_ner",
         f"--data_dir={self.path('corpus', 'ner')}",
         f"--max_seq_length={b['ner_seq']}",
         f"--doc_stride={b['ner_seq'] // 2}", f"--train_step={b['ner_steps']}",
         f"--eval_every_steps={b['ner_steps'] // b['ner_evals']}"],
        # albert_zh_l4_h128 at 2e-4 (2026-12-04, 600 dev windows): both
        # inits still predict only O at 140 steps (F1 0.000); dev F1 at 300
        # / 600 / 900 steps 0.214 / 0.205 / 0.231 pretrained, 0.182 / 0.218
        # / 0.245 random init. At 1e-3 both stayed on O for 900 steps, and so
        # did a 450-step run (its learning rate decays twice as fast).
        b["ner_train_examples"], b["ner_eval_examples"], 2e-4)

  def stage_ner(self, out):
    """Fine-tune a tagger from the pretrained checkpoint and from random
    init on the same budget; a CRF on character n-grams on the first
    crf_train_sentences of the same train split. The CRF is scored on the
    whole test split, the taggers too unless predict_examples limits them
    (FAST)."""
    crf_args = [f"--data_dir={self.path('corpus', 'ner')}",
                f"--output_dir={out}/crf"]
    # On the first sentences of the same train split: CRFsuite on all 35k
    # takes about 7 minutes here, more than the demo can give it.
    if self.budget["crf_train_sentences"]:
      crf_args.append(
          f"--max_train_sentences={self.budget['crf_train_sentences']}")
    run_side_by_side(
        self._ner(os.path.join(out, "pretrained"), self.path("pretrain")),
        self._ner(os.path.join(out, "random_init"), None),
        ("benchmarks.crf_ner_baseline", crf_args,
         os.path.join(out, "log.txt")))
    pretrained, random_init = (
        read_json(os.path.join(out, name, "eval_results.json"))
        for name in ("pretrained", "random_init"))
    keep = ("entity_f1", "entity_precision", "entity_recall", "PER_f1",
            "LOC_f1", "ORG_f1")
    figures = {}
    for name, results in (("pretrained", pretrained),
                          ("random_init", random_init)):
      figures[name] = {k: results[k] for k in keep if k in results}
      figures[name].update({k: results[k] for k in results
                            if k.startswith("test_") and k[5:] in keep})
    crf = read_json(os.path.join(out, "crf", "crf_results.json"))
    figures["crf"] = {k: crf["dev"][k] for k in keep if k in crf["dev"]}
    figures["crf"].update({f"test_{k}": crf["test"][k] for k in keep
                           if k in crf["test"]})
    figures["crf"].update(train_sentences=crf["train_sentences"],
                          fit_seconds=crf["fit_seconds"])
    return figures

  def stage_reading(self, out):
    """Cloze reading comprehension (Cui et al. 2016) from the same
    documents: a sentence with one noun blanked is the question, the
    sentences around it the context (rc_context_chars at most, so that one
    window of rc_seq pieces holds question and context). Span QA
    (run_squad, CMRC 2018 scoring) and 4-way choice (run_race) from the
    pretrained checkpoint and from random init on the same budget, trained
    on train, scored on test (no dev selection: the last checkpoint); the
    most-frequent-noun baselines and chance on the same test split."""
    b = self.budget
    cloze = os.path.join(out, "cloze")
    # The documents and split of pretraining's corpus (--max_documents and
    # the 80/10/10 NER split): dev and test documents were never pretrained
    # on.
    run_module("data_prep.cloze", f"--output_dir={cloze}",
               f"--max_documents={b['max_documents']}",
               f"--max_context_chars={b['rc_context_chars']}",
               log=os.path.join(out, "log.txt"))
    from data_prep import cloze as cloze_lib  # pylint: disable=g-import-not-at-top
    # On the test questions the models are scored on.
    baselines = cloze_lib.baseline_scores(
        cloze, "test", max_examples=b["predict_examples"])
    # Span EM in percent, as run_squad's CMRC 2018 scores.
    for key in ("span_em_most_frequent", "span_em_uniform_candidate"):
      if baselines.get(key) is not None:
        baselines[key] = round(100 * baselines[key], 2)
    figures = {"sizes": read_json(os.path.join(cloze, "sizes.json")),
               "baselines": baselines,
               "round_trip": _answer_round_trip(cloze, self._spm())}
    inits = [("pretrained", self.path("pretrain")), ("random_init", None)]
    # The smoke run checks that the stage runs, not what transfers.
    inits = inits[:1] if self.mode == "smoke" else inits
    commands = []
    for name, init in inits:
      common = [f"--spm_model_file={self._spm()}",
                f"--max_seq_length={b['rc_seq']}",
                f"--train_step={b['rc_steps']}", "--learning_rate=5e-4",
                "--do_train", "--do_predict", "--seed=12345",
                *self._init_args(init)]
      if b["rc_train_examples"]:
        common.append(f"--max_train_examples={b['rc_train_examples']}")
      if b["predict_examples"]:
        common.append(f"--max_predict_examples={b['predict_examples']}")
      commands += [
          ("albert_tf.run_squad", [
              f"--output_dir={out}/span_{name}", "--task_name=cmrc2018",
              f"--train_file={cloze}/train.json",
              f"--predict_file={cloze}/test.json",
              f"--doc_stride={b['rc_seq'] // 2}",
              f"--max_query_length={b['rc_query']}",
              f"--train_batch_size={b['rc_batch']}", *common],
           os.path.join(out, f"span_{name}.log")),
          ("albert_tf.run_race", [
              f"--output_dir={out}/choice_{name}", f"--data_dir={cloze}/race",
              f"--max_qa_length={b['rc_query']}",
              f"--warmup_step={max(1, b['rc_steps'] // 10)}",
              # Four sequences a question: the span run's sequences a step.
              f"--train_batch_size={b['rc_batch'] // 4}", *common],
           os.path.join(out, f"choice_{name}.log"))]
    run_side_by_side(*commands)
    for name, _ in inits:
      span = read_json(os.path.join(out, f"span_{name}", "eval_results.json"))
      choice = read_json(os.path.join(out, f"choice_{name}",
                                      "eval_results.json"))
      figures[name] = {"span_test_f1": span["test_f1"],
                       "span_test_exact_match": span["test_exact_match"],
                       "choice_test_accuracy": choice["test_accuracy"]}
    return figures


def _answer_round_trip(cloze, spm_model):
  """Every cloze answer, char span -> pieces -> char span, with the demo's
  own vocabulary: how many do not come back as the answer text, and the
  first of them. A mismatch is a piece wider than the answer (the answer
  boundary falls inside a piece the vocabulary learnt)."""
  from albert_tf.data import squad  # pylint: disable=g-import-not-at-top
  from albert_tf.data.tokenization import load_tokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer(spm_model_file=spm_model)
  answers, mismatches = 0, []
  for split in ("train", "dev", "test"):
    data = squad.read_squad(os.path.join(cloze, f"{split}.json"), False,
                            False)
    answers += sum(len(e.answers) for e in data.examples)
    mismatches += squad.round_trip_mismatches(data.examples, tokenizer)
  wider = sum(text in back for _, text, back in mismatches)
  return {"answers": answers, "mismatches": len(mismatches),
          "mismatches_inside_a_wider_piece": wider,
          "first": [{"id": q, "answer": a, "read_back": b}
                    for q, a, b in mismatches[:3]]}
