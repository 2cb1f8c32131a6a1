"""An independent NumPy forward pass of ALBERT, written from the paper and the
original modeling.py description (not from albert_tf's code):

  emb = LN_E(word[ids] + pos[:s] + type[seg]);  h = emb @ W_proj + b
  for layer i: g = int(i * G / L); for each inner block of group g:
      a = softmax(q k^T / sqrt(d) + (1 - mask) * -10000) v   (per head)
      h = LN(h + a @ W_o + b_o);  h = LN_1(h + gelu_tanh(h W_1 + b_1) W_2 + b_2)
  pooled = tanh(h[:, 0] W_p + b_p)
All LayerNorms use epsilon 1e-12.
"""

import numpy as np
from scipy.special import erf

EPS = 1e-12


def layer_norm(x, gamma, beta):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + EPS) * gamma + beta


def gelu_tanh(x):
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {"gelu": gelu_tanh, "relu": lambda x: np.maximum(x, 0)}


def softmax(x):
  x = x - x.max(-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(-1, keepdims=True)


def attention(h, mask, w, heads):
  b, s, hidden = h.shape
  d = hidden // heads

  def split(t):
    return t.reshape(b, s, heads, d).transpose(0, 2, 1, 3)

  q = split(h @ w["q_w"] + w["q_b"])
  k = split(h @ w["k_w"] + w["k_b"])
  v = split(h @ w["v_w"] + w["v_b"])
  scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
  scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
  ctx = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
  return ctx @ w["o_w"] + w["o_b"]


def block(h, mask, w, heads, act):
  h = layer_norm(h + attention(h, mask, w, heads), w["ln_g"], w["ln_b"])
  ffn = ACTIVATIONS[act](h @ w["i_w"] + w["i_b"]) @ w["f_w"] + w["f_b"]
  return layer_norm(h + ffn, w["ln1_g"], w["ln1_b"])


def forward(weights, ids, mask, seg, num_layers, heads, act="gelu"):
  """weights: dict with 'emb' and 'groups' (list of lists of block dicts)."""
  e = weights["emb"]
  x = e["word"][ids] + e["pos"][:ids.shape[1]][None] + e["type"][seg]
  x = layer_norm(x, e["ln_g"], e["ln_b"])
  h = x @ e["proj_w"] + e["proj_b"]
  groups = weights["groups"]
  mask = mask.astype(np.float64)
  for i in range(num_layers):
    for w in groups[int(i * len(groups) / num_layers)]:
      h = block(h, mask, w, heads, act)
  pooled = np.tanh(h[:, 0] @ weights["pool_w"] + weights["pool_b"])
  return h, pooled


def assert_close_to_scale(actual, expected, rel=1e-6, rtol=1e-7):
  """Elementwise close, with an absolute slack scaled by the tensor's size.

  Float32 sums carry errors proportional to their largest terms, and oneDNN
  picks different kernels (AVX2, AVX-512, AMX) on different CPUs: an entry
  of 0.1 in a gradient whose largest entries are ~600 may differ by 3e-5 on
  one machine and not another. So the absolute tolerance is `rel` times the
  largest magnitude of `expected` (at least 1), plus `rtol` relative.
  """
  expected = np.asarray(expected, np.float64)
  scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
  np.testing.assert_allclose(actual, expected, atol=rel * scale, rtol=rtol)


# ------------------------------------------------ the original update rules
# google-research/albert's AdamWeightDecayOptimizer and LAMBOptimizer, from
# their update equations (as docs/pretraining.md's **Optimizer** paragraph
# states them), in float64. Variables are named; the exclusion regexes are
# searched in the names, as the original searches TF1 variable names.
ORIGINAL_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


def original_lr(step, init_lr, num_train_steps, num_warmup_steps, power=1.0):
  """lr(t): init_lr t/W during warmup, else init_lr (1 - t/N)^power."""
  if step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps) ** power


def original_step(params, grads, slots, lr, rule, weight_decay_rate=0.01,
                  beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0,
                  exclude=ORIGINAL_EXCLUDE):
  """One step of rule "adamw" or "lamb" on dicts name -> array (in place).

  slots: name -> (m, v), created as zeros when missing.
  """
  import re  # pylint: disable=g-import-not-at-top
  global_norm = np.sqrt(sum(np.sum(np.square(g)) for g in grads.values()))
  # tf.clip_by_global_norm: g * clip / max(global_norm, clip)
  scale = clip_norm / max(global_norm, clip_norm)
  for name, w in params.items():
    g = grads[name].astype(np.float64) * scale
    m, v = slots.get(name, (np.zeros_like(w), np.zeros_like(w)))
    m = beta_1 * m + (1.0 - beta_1) * g
    v = beta_2 * v + (1.0 - beta_2) * g * g
    slots[name] = (m, v)
    update = m / (np.sqrt(v) + epsilon)
    excluded = any(re.search(p, name) for p in exclude)
    if not excluded:
      update = update + weight_decay_rate * w
    ratio = 1.0
    if rule == "lamb" and not excluded:
      w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
      if w_norm > 0 and u_norm > 0:
        ratio = w_norm / u_norm
    params[name] = w - ratio * lr * update
  return params


# ---------------------------------------------------------------- BERT
# A BERT forward pass that reads the arrays of a checkpoint by the names the
# file gives them (Google's TF1 release or Hugging Face's), written from the
# published layouts and the BERT paper, not from albert_tf's code:
#   x = LN(word[ids] + pos[:s] + type[seg]); per layer
#   x = LN(x + attention(x) W_o + b_o); x = LN(x + gelu(x W_i + b_i) W_f + b_f)
#   pooled = tanh(x[:, 0] W_p + b_p); BERT's "gelu" is the erf one.
# role -> name in the file; "{n}" is the layer, "{p}" HF's optional "bert.".
BERT_TF1_NAMES = {
    "word": "bert/embeddings/word_embeddings",
    "pos": "bert/embeddings/position_embeddings",
    "type": "bert/embeddings/token_type_embeddings",
    "emb_ln": "bert/embeddings/LayerNorm",
    "q": "bert/encoder/layer_{n}/attention/self/query",
    "k": "bert/encoder/layer_{n}/attention/self/key",
    "v": "bert/encoder/layer_{n}/attention/self/value",
    "att_out": "bert/encoder/layer_{n}/attention/output/dense",
    "att_ln": "bert/encoder/layer_{n}/attention/output/LayerNorm",
    "inter": "bert/encoder/layer_{n}/intermediate/dense",
    "out": "bert/encoder/layer_{n}/output/dense",
    "out_ln": "bert/encoder/layer_{n}/output/LayerNorm",
    "pool": "bert/pooler/dense",
    "mlm": "cls/predictions/transform/dense",
    "mlm_ln": "cls/predictions/transform/LayerNorm",
    "mlm_bias": "cls/predictions/output_bias",
    "nsp_w": "cls/seq_relationship/output_weights",
    "nsp_b": "cls/seq_relationship/output_bias",
}
BERT_HF_NAMES = {
    "word": "{p}embeddings.word_embeddings",
    "pos": "{p}embeddings.position_embeddings",
    "type": "{p}embeddings.token_type_embeddings",
    "emb_ln": "{p}embeddings.LayerNorm",
    "q": "{p}encoder.layer.{n}.attention.self.query",
    "k": "{p}encoder.layer.{n}.attention.self.key",
    "v": "{p}encoder.layer.{n}.attention.self.value",
    "att_out": "{p}encoder.layer.{n}.attention.output.dense",
    "att_ln": "{p}encoder.layer.{n}.attention.output.LayerNorm",
    "inter": "{p}encoder.layer.{n}.intermediate.dense",
    "out": "{p}encoder.layer.{n}.output.dense",
    "out_ln": "{p}encoder.layer.{n}.output.LayerNorm",
    "pool": "{p}pooler.dense",
    "mlm": "cls.predictions.transform.dense",
    "mlm_ln": "cls.predictions.transform.LayerNorm",
    "mlm_bias": "cls.predictions.bias",
    "nsp_w": "cls.seq_relationship.weight",
    "nsp_b": "cls.seq_relationship.bias",
}
BERT_DENSE_ROLES = ("q", "k", "v", "att_out", "inter", "out", "pool", "mlm")
BERT_NORM_ROLES = ("emb_ln", "att_ln", "out_ln", "mlm_ln")
BERT_TABLE_ROLES = ("word", "pos", "type")


class BertTf1Source:
  """Google's TF1 BERT arrays by name: kernels are [in, out]."""
  DENSE_LEAVES, NORM_LEAVES, TABLE_LEAF = ("/kernel", "/bias"), (
      "/gamma", "/beta"), ""

  def __init__(self, tensors=None):
    self.t = {} if tensors is None else tensors

  def name(self, role, n=None):
    return BERT_TF1_NAMES[role].format(n=n)

  def keys(self, role, n=None):
    """The file's key(s) of a role: a pair for dense and LayerNorm."""
    name = self.name(role, n)
    if role in BERT_DENSE_ROLES:
      return tuple(name + leaf for leaf in self.DENSE_LEAVES)
    if role in BERT_NORM_ROLES:
      return tuple(name + leaf for leaf in self.NORM_LEAVES)
    return name + (self.TABLE_LEAF if role in BERT_TABLE_ROLES else "")

  def kernel_layout(self, kernel):
    """[in, out] <-> the file's orientation (its own inverse)."""
    return kernel

  def table(self, role):
    return self.t[self.keys(role)]

  def dense(self, role, n=None):
    kernel, bias = self.keys(role, n)
    return self.kernel_layout(self.t[kernel]), self.t[bias]

  def norm(self, role, n=None):
    gamma, beta = self.keys(role, n)
    return self.t[gamma], self.t[beta]

  def nsp(self):  # [2, H] in both layouts
    return self.t[self.keys("nsp_w")], self.t[self.keys("nsp_b")]


class BertHfSource(BertTf1Source):
  """HF BERT arrays by name: torch Linear weights are [out, in]."""
  DENSE_LEAVES, NORM_LEAVES, TABLE_LEAF = (".weight", ".bias"), (
      ".weight", ".bias"), ".weight"

  def __init__(self, state=None, prefix=""):
    super().__init__(state)
    self.prefix = prefix

  def name(self, role, n=None):
    return BERT_HF_NAMES[role].format(n=n, p=self.prefix)

  def kernel_layout(self, kernel):
    return kernel.T


def gelu_erf(x):
  return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def bert_forward(src, inputs, num_layers, num_heads, heads=True):
  """Post-LN BERT in float64 over `src` (BertTf1Source / BertHfSource).

  inputs: int arrays input_ids, input_mask, segment_ids [batch, seq] (and
  masked_lm_positions [batch, P] when `heads`). Returns sequence_output,
  pooled_output and, with `heads`, mlm_logits and sop_logits (BERT's NSP).
  """
  f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731

  def linear(x, kernel_bias):
    return x @ f64(kernel_bias[0]) + f64(kernel_bias[1])

  def norm(x, gamma_beta):
    return layer_norm(x, f64(gamma_beta[0]), f64(gamma_beta[1]))

  ids, mask, seg = (inputs[k] for k in ("input_ids", "input_mask",
                                        "segment_ids"))
  b, s = ids.shape
  word = f64(src.table("word"))
  x = word[ids] + f64(src.table("pos"))[:s] + f64(src.table("type"))[seg]
  x = norm(x, src.norm("emb_ln"))
  hidden = x.shape[-1]
  d = hidden // num_heads
  bias = ((1.0 - mask) * -10000.0)[:, None, None, :]

  def split(t):
    return t.reshape(b, s, num_heads, d).transpose(0, 2, 1, 3)

  for n in range(num_layers):
    q, k, v = (split(linear(x, src.dense(r, n))) for r in ("q", "k", "v"))
    probs = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
    x = norm(x + linear(ctx, src.dense("att_out", n)), src.norm("att_ln", n))
    ffn = linear(gelu_erf(linear(x, src.dense("inter", n))),
                 src.dense("out", n))
    x = norm(x + ffn, src.norm("out_ln", n))
  pooled = np.tanh(linear(x[:, 0], src.dense("pool")))
  out = {"sequence_output": x, "pooled_output": pooled}
  if heads:
    g = np.take_along_axis(x, inputs["masked_lm_positions"][..., None], 1)
    t = norm(gelu_erf(linear(g, src.dense("mlm"))), src.norm("mlm_ln"))
    out["mlm_logits"] = t @ word.T + f64(src.table("mlm_bias"))
    weights, nsp_bias = src.nsp()
    out["sop_logits"] = pooled @ f64(weights).T + f64(nsp_bias)
  return out


# The original run_classifier's packing, from its description, as the test
# oracle of the graph encoder (`text_graph.TextEncoder`, the one encoder of
# albert_tf): [CLS] a [SEP] (b [SEP]), the longer side popped first (ties:
# b) as `_truncate_seq_pair`, then padded; the pieces are the Python
# tokenizer's.
def pack_pair(tokenizer, text_a, text_b, length):
  """(input_ids, input_mask, segment_ids, pieces removed), lists of length."""
  a = list(tokenizer.encode(text_a))
  b = list(tokenizer.encode(text_b)) if text_b is not None else []
  budget, removed = length - 2 - (text_b is not None), 0
  while len(a) + len(b) > budget:
    (a if len(a) > len(b) else b).pop()
    removed += 1
  ids = [tokenizer.cls_id] + a + [tokenizer.sep_id]
  segments = [0] * len(ids)
  if text_b is not None:
    ids += b + [tokenizer.sep_id]
    segments += [1] * (len(b) + 1)
  pad = length - len(ids)
  return (ids + [tokenizer.pad_id] * pad, [1] * len(ids) + [0] * pad,
          segments + [0] * pad, removed)


def packed(tokenizer, texts, texts_b=None, length=128):
  """{input_ids, input_mask, segment_ids: int32 [n, length]} of pack_pair."""
  rows = [pack_pair(tokenizer, a, b, length)
          for a, b in zip(texts, texts_b or [None] * len(texts))]
  return {name: np.array([r[i] for r in rows], np.int32).reshape([-1, length])
          for i, name in enumerate(("input_ids", "input_mask", "segment_ids"))}


# A text with [MASK]s as ids, from fill_mask_graph's module doc, as the
# test oracle of its graph encoder: each "[MASK]" is one mask id; the
# characters glued to its end (up to whitespace) continue the masked word
# (SentencePiece without its word-start prefix); the rest is tokenized as
# usual; [CLS] ... [SEP] around.
_GLUED = {}


def masked_ids(tokenizer, text):
  from albert_tf.data.tokenization import AlbertTokenizer  # pylint: disable=g-import-not-at-top
  from albert_tf.serving.fill_mask_graph import without_dummy_prefix  # pylint: disable=g-import-not-at-top
  glued = tokenizer
  if tokenizer.kind == "sentencepiece":
    if tokenizer.model_file not in _GLUED:
      import sentencepiece as spm  # pylint: disable=g-import-not-at-top
      with open(tokenizer.model_file, "rb") as f:
        proto = without_dummy_prefix(f.read())
      _GLUED[tokenizer.model_file] = AlbertTokenizer(
          "sentencepiece", tokenizer.model_file, tokenizer.do_lower_case,
          sp_model=spm.SentencePieceProcessor(model_proto=proto))
    glued = _GLUED[tokenizer.model_file]
  parts = text.split("[MASK]")
  ids = [tokenizer.cls_id] + tokenizer.encode(parts[0])
  for part in parts[1:]:
    end = next((i for i, c in enumerate(part) if c.isspace()), len(part))
    ids += ([tokenizer.mask_id] + glued.encode(part[:end]) +
            tokenizer.encode(part[end:]))
  return ids + [tokenizer.sep_id]


# The original run_race's packing (race_utils), from its description, as
# the test oracle of the graph encoder (`choice_graph.ChoiceEncoder`): per
# option, qa = question.replace("_", option) when the question has a blank,
# else question + " " + option; qa keeps its last max_qa_length pieces, the
# article its first ones that fit; [CLS] article [SEP] qa [SEP], padded.
def race_packing(tokenizer, examples, length, max_qa_length):
  """({input_ids, input_mask, segment_ids: int32 [n, choices, length]},
  questions with the article cut, with a qa cut)."""
  rows, cut_article, cut_qa = [], 0, 0
  for e in examples:
    article = list(tokenizer.encode(e.article))
    cut = [False, False]
    for option in e.options:
      qa = list(tokenizer.encode(
          e.question.replace("_", option) if "_" in e.question
          else e.question + " " + option))
      cut[1] |= len(qa) > max_qa_length
      qa = qa[len(qa) - min(len(qa), max_qa_length):]
      context = article[:length - 3 - len(qa)]
      cut[0] |= len(context) < len(article)
      ids = [tokenizer.cls_id] + context + [tokenizer.sep_id] + qa + [
          tokenizer.sep_id]
      pad = length - len(ids)
      rows.append((ids + [tokenizer.pad_id] * pad, [1] * len(ids) + [0] * pad,
                   [0] * (len(context) + 2) + [1] * (len(qa) + 1) + [0] * pad))
    cut_article += cut[0]
    cut_qa += cut[1]
  shape = [len(examples), -1, length]
  return ({name: np.array([r[i] for r in rows], np.int32).reshape(shape)
           for i, name in enumerate(("input_ids", "input_mask",
                                     "segment_ids"))}, cut_article, cut_qa)
