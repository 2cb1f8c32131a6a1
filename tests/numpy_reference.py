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
