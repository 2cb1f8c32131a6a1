"""CLUE 1.1 and FewCLUE, read from their own files (`albert_tf.data.clue`,
`albert_tf.data.clue_choice`).

    albert-finetune --task=afqmc --data_dir=afqmc_public ... --do_predict
        # -> test_results.tsv and afqmc_predict.json (CLUE's submission)
    albert-finetune --task=eprstmt_0 --data_dir=FewCLUE/datasets/eprstmt ...
        # train_0 / dev_0; test accuracy on test_public.json;
        # eprstmt_predict_0.json from test.json
    albert-finetune --task=c3 --data_dir=c3_public ...   # c311_predict.json

CLUE's classification sets (afqmc, tnews, iflytek, cmnli, ocnli, csl,
cluewsc2020) take the hyperparameters of CLUE's albert_tiny runs as their
defaults (batch 16, lr 2e-5, 3 epochs; IFLYTEK 10); FewCLUE's (eprstmt,
bustm, csldcp, tnewsf, iflytekf, ocnlif, cslf, cluewscf; FewCLUE's own
names, tnewsf being its TNEWS) those of its BERT fine-tuning baseline
(batch 32, lr 2e-5, 3 epochs). A FewCLUE set is one dataset per split:
`<task>` trains on train_few_all.json and selects on dev_few_all.json,
`<task>_0` .. `<task>_4` on train_k.json and dev_k.json. docs/clue.md has
the commands and CLUE's published figures.
"""

from albert_tf import registry
from albert_tf.data import clue, clue_choice

_CLUE_HELP = {
    "afqmc": "CLUE AFQMC (Ant Financial question matching: sentence1, "
             "sentence2, label 0/1)",
    "tnews": "CLUE TNEWS 1.1 (15 news classes: sentence, label code "
             "100-116)",
    "iflytek": "CLUE IFLYTEK (119 app classes: sentence, label 0-118)",
    "cmnli": "CLUE CMNLI (NLI: sentence1, sentence2; '-' skipped)",
    "ocnli": "CLUE OCNLI (NLI: sentence1, sentence2; '-' skipped)",
    "csl": "CLUE CSL (keyword list + abstract, label 0/1)",
    "cluewsc2020": "CLUE CLUEWSC2020 (text with its two spans marked, label "
                   "true/false)",
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

_clue_specs = clue.clue_specs()
for _name, _spec in _clue_specs.items():
  registry.register_dataset(
      _name, "classification", spec=_spec,
      help=f"{_CLUE_HELP[_name]}; writes {_spec.submission.file_name}",
      train_batch_size=16, learning_rate=2e-5,
      num_train_epochs=10.0 if _name == "iflytek" else 3.0)

_fewclue_specs = clue.fewclue_specs()
for _task in clue.FEWCLUE_TASKS:
  for _split in clue.FEWCLUE_SPLITS:
    _name = clue.fewclue_dataset_name(_task, _split)
    _spec = _fewclue_specs[_name]
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
