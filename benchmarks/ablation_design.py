"""The design of benchmarks/paper_ablations: the paper's figures, the small
model, its variants, the budgets and the directions checked."""

SEQ, PREDS = 64, 10


# The paper's numbers (Lan et al. 2020, arXiv 1909.11942v6; ALBERT base,
# 125k steps x batch 4096, seq 512). Table 3/4: the downstream average
# (SQuAD1.1/2.0, MNLI, SST-2, RACE); Table 5: intrinsic accuracies (%).
PAPER = {
    "table5": {"none": {"mlm": 54.9, "nsp": 52.4, "sop": 53.3, "avg": 80.3},
               "nsp": {"mlm": 54.5, "nsp": 90.5, "sop": 52.0, "avg": 80.4},
               "sop": {"mlm": 54.0, "nsp": 78.9, "sop": 86.5, "avg": 81.6}},
    "table4": {"all": {"params": "12M", "avg": 80.1},
               "attention": {"params": "64M", "avg": 81.7},
               "ffn": {"params": "38M", "avg": 79.2},
               "none": {"params": "89M", "avg": 82.3}},
    "table3": {"64": {"avg": 79.0}, "128": {"avg": 80.1},
               "256": {"avg": 79.6}, "H": {"avg": 79.8}},
}

# The model: small enough for a run of a few minutes on 2 shared cores
# (H=256 trained at a third of H=128's speed there).
MODEL = {"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
         "intermediate_size": 512, "max_position_embeddings": 512}
BASE = {"embedding_size": 128, "share": "all", "sentence": "sop",
        "dropout": 0.0}
# Each variant: its changes from BASE. "base" is read by every table.
VARIANTS = {
    "base": {},
    "loss_none": {"sentence": "none"},
    "loss_nsp": {"sentence": "nsp"},
    "share_attention": {"share": "attention"},
    "share_ffn": {"share": "ffn"},
    "share_none": {"share": "none"},
    "e64": {"embedding_size": 64},
    "e256": {"embedding_size": 256},  # > H here, < H in the paper
    "dropout": {"dropout": 0.1},
}
# Variants whose runs evaluate at every checkpoint (the §4.9 curve).
CURVES = ("base", "dropout")

BUDGETS = {
    # lr 0.01: SOP left chance after about 500 steps at this batch in an
    # H=128 run of this trainer; 5000 pieces cover People's Daily's
    # characters (0.9995 coverage); dupe 2: the steps read < 1 epoch.
    "full": {"steps": 500, "batch": 32, "max_documents": 0,
             "vocab_size": 5000, "vocab_sentences": 200000,
             "dupe_factor": 2, "eval_batch": 128, "eval_batches": 16,
             "checkpoints": 4, "learning_rate": 0.01},
    "smoke": {"steps": 4, "batch": 8, "max_documents": 150,
              "vocab_size": 3500, "vocab_sentences": 0, "dupe_factor": 1,
              "eval_batch": 16, "eval_batches": 2, "checkpoints": 2,
              "learning_rate": 0.01},
}

# The directions checked: (table, claim, metric, ahead, behind, paper's
# figures of ahead and behind). Metrics: mlm (held-out MLM accuracy on the
# SOP records), sop / nsp (sentence head's accuracy on held-out SOP / NSP
# records). behind = CHANCE: the held-out pairs' majority-class accuracy
# (the paper's "none" row is its chance level, about 50%); ahead "above" it
# by more than two binomial standard errors, or "not above" it.
CHANCE = "chance"
DIRECTIONS = [
    ("table5", "SOP-trained solves SOP", "sop", "base", CHANCE, 86.5, 53.3),
    ("table5", "NSP-trained does not solve SOP (not above chance)", "sop",
     "loss_nsp", CHANCE, 52.0, 53.3),
    ("table5", "SOP-trained beats NSP-trained on SOP", "sop", "base",
     "loss_nsp", 86.5, 52.0),
    ("table5", "SOP-trained solves NSP reasonably (above chance)", "nsp",
     "base", CHANCE, 78.9, 52.4),
    ("table5", "NSP-trained solves NSP", "nsp", "loss_nsp", CHANCE, 90.5,
     52.4),
    ("table5", "NSP-trained beats SOP-trained on NSP", "nsp", "loss_nsp",
     "base", 90.5, 78.9),
    ("table5", "no sentence loss: slightly higher MLM accuracy than SOP",
     "mlm", "loss_none", "base", 54.9, 54.0),
    ("table5", "NSP: slightly higher MLM accuracy than SOP", "mlm",
     "loss_nsp", "base", 54.5, 54.0),
    ("table4", "not-shared beats all-shared", "mlm", "share_none", "base",
     82.3, 80.1),
    ("table4", "attention-shared beats all-shared", "mlm",
     "share_attention", "base", 81.7, 80.1),
    ("table4", "all-shared beats FFN-shared", "mlm", "base", "share_ffn",
     80.1, 79.2),
    ("table4", "attention-shared beats FFN-shared", "mlm", "share_attention",
     "share_ffn", 81.7, 79.2),
    ("table3", "E=128 beats E=64", "mlm", "base", "e64", 80.1, 79.0),
    ("table3", "E=128 beats E=256", "mlm", "base", "e256", 80.1, 79.6),
    ("s49", "no dropout beats dropout 0.1", "mlm", "base", "dropout", None,
     None),
]


def variant_config(variant, vocab_size):
  """The albert_config.json fields of a variant."""
  v = {**BASE, **VARIANTS[variant]}
  return {**MODEL, "vocab_size": vocab_size,
          "embedding_size": v["embedding_size"], "share": v["share"],
          "hidden_dropout_prob": v["dropout"],
          "attention_probs_dropout_prob": v["dropout"]}

