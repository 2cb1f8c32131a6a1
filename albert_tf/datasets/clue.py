"""CLUE 1.1 and FewCLUE, read from their own files (`albert_tf.data.clue`,
`albert_tf.data.clue_choice`).

    albert-finetune --task=afqmc --data_dir=afqmc_public ... --do_predict
        # -> test_results.tsv and afqmc_predict.json (CLUE's submission)
    albert-finetune --task=eprstmt_0 --data_dir=FewCLUE/datasets/eprstmt ...
        # train_0 / dev_0; test accuracy on test_public.json;
        # eprstmt_predict_0.json from test.json
    albert-finetune --task=c3 --data_dir=c3_public ...   # c311_predict.json

CLUE's classification sets default to the hyperparameters of CLUE's
albert_tiny runs, FewCLUE's (FewCLUE's own names; tnewsf is its TNEWS) to
those of its BERT fine-tuning baseline. A FewCLUE set is one dataset per
split: `<task>` trains on train_few_all.json and selects on
dev_few_all.json, `<task>_0` .. `<task>_4` on train_k.json and dev_k.json.
docs/clue.md has the commands and CLUE's published figures.
"""

from typing import Optional

from albert_tf.tasks import registry
from albert_tf.data import classifier_data as cd
from albert_tf.data import clue, clue_choice
from albert_tf.data.clue import (BINARY_LABELS, CSL, IFLYTEK_LABELS,
                                 NLI_LABELS, NO_CONSENSUS, TNEWS_LABELS, WSC,
                                 WSC_LABELS, pair, single)


def _json_spec(name, layout, labels, files, submission, no_consensus=None):
  """A classification TaskSpec reading `files` (split -> names) as JSON
  lines of `layout` (`clue.single`, `clue.pair`, `clue.CSL`, `clue.WSC`)."""
  fields, texts, has_pair = layout
  columns = ("text_a", "text_b" if has_pair else None, "label")
  return cd.TaskSpec(
      name=name, files=files, columns={s: columns for s in files},
      label_list=tuple(labels),
      reader=clue.JsonReader(tuple(fields), texts, no_consensus),
      submission=submission)


def clue_spec(name: str, layout, labels, submission_file: str,
              no_consensus: Optional[str] = None,
              train_files=("train.json",)) -> cd.TaskSpec:
  """A CLUE 1.1 task: train.json, dev.json, test.json; the submission
  predicts test.json."""
  return _json_spec(name, layout, labels,
                    {"train": tuple(train_files), "dev": ("dev.json",),
                     "test": ("test.json",)},
                    cd.Submission(submission_file, "test"), no_consensus)


# name: (help, then `clue_spec`'s arguments after the name).
CLUE_TASKS = {
    "afqmc": ("CLUE AFQMC (Ant Financial question matching: sentence1, "
              "sentence2, label 0/1)", pair("sentence1", "sentence2"),
              BINARY_LABELS, "afqmc_predict.json"),
    "tnews": ("CLUE TNEWS 1.1 (15 news classes: sentence, label code "
              "100-116)", single("sentence"), TNEWS_LABELS,
              "tnews11_predict.json"),
    "iflytek": ("CLUE IFLYTEK (119 app classes: sentence, label 0-118)",
                single("sentence"), IFLYTEK_LABELS, "iflytek_predict.json"),
    "cmnli": ("CLUE CMNLI (NLI: sentence1, sentence2; '-' skipped)",
              pair("sentence1", "sentence2"), NLI_LABELS,
              "cmnli_predict.json", NO_CONSENSUS),
    "ocnli": ("CLUE OCNLI (NLI: sentence1, sentence2; '-' skipped)",
              pair("sentence1", "sentence2"), NLI_LABELS,
              "ocnli_50k_predict.json", NO_CONSENSUS,
              ("train.json", "train.50k.json")),
    "csl": ("CLUE CSL (keyword list + abstract, label 0/1)", CSL,
            BINARY_LABELS, "csl_predict.json"),
    "cluewsc2020": ("CLUE CLUEWSC2020 (text with its two spans marked, "
                    "label true/false)", WSC, WSC_LABELS,
                    "cluewsc11_predict.json"),
}
_FEWCLUE_HELP = {
    "eprstmt": "FewCLUE EPRSTMT (e-commerce reviews, Positive/Negative)",
    "bustm": "FewCLUE BUSTM (dialogue sentence pairs, 0/1)",
    "csldcp": "FewCLUE CSLDCP (abstracts, 67 disciplines)",
    "tnewsf": "FewCLUE TNEWS (15 news classes)",
    "iflytekf": "FewCLUE IFLYTEK (119 app classes)",
    "ocnlif": "FewCLUE OCNLI (NLI)",
    "cslf": "FewCLUE CSL (keywords + abstract, 0/1)",
    "cluewscf": "FewCLUE CLUEWSC (true/false)",
}

for _name, (_help, *_args) in CLUE_TASKS.items():
  _spec = clue_spec(_name, *_args)
  registry.register_dataset(
      _name, "classification", spec=_spec,
      help=f"{_help}; writes {_spec.submission.file_name}",
      train_batch_size=16, learning_rate=2e-5,
      num_train_epochs=10.0 if _name == "iflytek" else 3.0)

for _task, (_layout, _labels, _skip, _) in clue.FEWCLUE_TASKS.items():
  for _split in clue.FEWCLUE_SPLITS:
    _name = clue.fewclue_dataset_name(_task, _split)
    # test_public.json (labelled) is the test split; test.json is submitted.
    _k = "few_all" if _split == "all" else _split
    _spec = _json_spec(
        _name, _layout, _labels,
        {"train": (f"train_{_k}.json",), "dev": (f"dev_{_k}.json",),
         "test": ("test_public.json",), "submit": ("test.json",)},
        cd.Submission(f"{_task}_predict_{_split}.json", "submit"), _skip)
    registry.register_dataset(
        _name, "classification", spec=_spec,
        help=f"{_FEWCLUE_HELP[_task]}, {_spec.files['train'][0]}; "
        f"test_public.json; writes {_spec.submission.file_name}",
        train_batch_size=32, learning_rate=2e-5, num_train_epochs=3.0)

# The multiple_choice family, with CLUE's baseline settings (C3:
# mrc_pytorch/run_mrc_c3.sh, CHID: run_mrc_chid.sh).
registry.register_dataset(
    "c3", "multiple_choice", spec=clue_choice.C3,
    help="CLUE C3 (multiple-choice reading, 2-4 choices padded to 4); "
    "writes c311_predict.json",
    max_seq_length=512, max_qa_length=128, train_batch_size=24,
    learning_rate=2e-5, num_train_epochs=8.0, train_step=0, warmup_step=-1,
    warmup_proportion=0.05)
registry.register_dataset(
    "chid", "multiple_choice", spec=clue_choice.CHID,
    help="CLUE CHID (idiom cloze, up to 10 candidates); writes "
    "chid11_predict.json",
    max_seq_length=64, max_qa_length=16, train_batch_size=24,
    learning_rate=2e-5, num_train_epochs=3.0, train_step=0, warmup_step=-1,
    warmup_proportion=0.06)
