"""The peer side of benchmarks/step_parity.py and long_parity.py: the
original's schedule and optimizers ported to torch, and the map between our
variables and HF's parameters."""

import re

import numpy as np

# google-research/albert's exclude_from_weight_decay (and, by default, its
# exclude_from_layer_adaptation), searched in the parameter names.
ORIGINAL_EXCLUDE = ("LayerNorm", "layer_norm", "bias")


def original_lr(step, peak, num_train_steps, num_warmup_steps):
  """The original schedule: peak t/W during warmup, else peak (1 - t/N)."""
  if step < num_warmup_steps:
    return peak * step / num_warmup_steps
  return peak * (1.0 - min(step, num_train_steps) / num_train_steps)


class OriginalRule:
  """google-research/albert's LAMBOptimizer ("lamb") or
  AdamWeightDecayOptimizer ("adamw") on torch parameters, from the update
  equations; the global-norm clip of the original's training op first."""

  def __init__(self, named_parameters, rule, weight_decay_rate=0.01,
               beta_1=0.9, beta_2=0.999, epsilon=1e-6, clip_norm=1.0,
               exclude=ORIGINAL_EXCLUDE):
    import torch  # pylint: disable=g-import-not-at-top
    self.torch = torch
    self.params = list(named_parameters)
    self.rule = rule
    self.weight_decay_rate = weight_decay_rate
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.clip_norm = clip_norm
    self.excluded = {n for n, _ in self.params
                     if any(re.search(p, n) for p in exclude)}
    self.slots = {n: (torch.zeros_like(p), torch.zeros_like(p))
                  for n, p in self.params}

  def zero_grad(self):
    for _, p in self.params:
      p.grad = None

  def step(self, lr):
    torch = self.torch
    with torch.no_grad():
      grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p))
               for n, p in self.params}
      # tf.clip_by_global_norm: g * clip / max(global_norm, clip), not
      # torch.nn.utils.clip_grad_norm_'s clip / (global_norm + 1e-6).
      global_norm = torch.sqrt(sum(torch.sum(g * g) for g in grads.values()))
      scale = self.clip_norm / torch.maximum(
          global_norm, torch.tensor(self.clip_norm))
      for name, w in self.params:
        g = grads[name] * scale
        m, v = self.slots[name]
        m = self.beta_1 * m + (1.0 - self.beta_1) * g
        v = self.beta_2 * v + (1.0 - self.beta_2) * g * g
        self.slots[name] = (m, v)
        update = m / (torch.sqrt(v) + self.epsilon)
        excluded = name in self.excluded
        if self.weight_decay_rate and not excluded:
          update = update + self.weight_decay_rate * w
        ratio = 1.0
        if self.rule == "lamb" and not excluded:
          w_norm, u_norm = torch.linalg.norm(w), torch.linalg.norm(update)
          if w_norm > 0 and u_norm > 0:
            ratio = w_norm / u_norm
        w.sub_(ratio * lr * update)
      return float(global_norm)


def parameter_pairs(model, hf_model):
  """[(HF parameter name, our variable, transposed)] over HF's trainable
  parameters (tied ones once), named through the HF converter's map:
  HF name -> original name (`huggingface_to_original`) -> our variable
  (`original_variable_map`); the classifier's dense layer by hand (the
  original has no such name). `transposed`: the torch layout is our
  variable's transpose."""
  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.huggingface import huggingface_to_original
  from albert_tf.converters.original import original_variable_map
  originals = original_variable_map(model)
  pairs = []
  for name, param in hf_model.named_parameters():
    if name == "classifier.weight":
      pairs.append((name, model.classifier_head.dense.kernel, True))
      continue
    if name == "classifier.bias":
      pairs.append((name, model.classifier_head.dense.bias, False))
      continue
    converted = huggingface_to_original(
        {name: param.detach().numpy()})[0]
    if len(converted) != 1:
      raise ValueError(f"HF {name}: no original name")
    (original,) = converted
    variable, transform = originals[original]
    # Kernels are stored [in, out] in the original (HF: [out, in]); the SOP
    # output_weights are stored as HF's [2, H] and used transposed by us.
    transposed = original.endswith("/kernel") != (transform is np.transpose)
    if tuple(variable.shape) != tuple(
        param.shape[::-1] if transposed else param.shape):
      raise ValueError(f"HF {name} {tuple(param.shape)} vs {variable.path} "
                       f"{tuple(variable.shape)}")
    pairs.append((name, variable, transposed))
  mapped = [id(v) for _, v, _ in pairs]
  unmapped = [v.path for v in model.trainable_variables if id(v) not in mapped]
  if unmapped or len(set(mapped)) != len(mapped):
    raise ValueError(f"not one HF parameter per variable: {unmapped}")
  return pairs


def copy_ours_to_hf(pairs, hf_model):
  """Copies our variables into the HF parameters; returns hf_values, checked
  equal to ours."""
  import torch  # pylint: disable=g-import-not-at-top
  params = dict(hf_model.named_parameters())
  with torch.no_grad():
    for name, variable, transposed in pairs:
      value = np.asarray(variable.numpy())
      params[name].copy_(torch.from_numpy(np.ascontiguousarray(
          value.T if transposed else value)))
  initial = hf_values(pairs, hf_model)
  for name, variable, _ in pairs:
    if not np.array_equal(initial[name], variable.numpy()):
      raise AssertionError(f"copy of {variable.path} to {name} differs")
  return initial


def hf_values(pairs, hf_model):
  """{HF name: array in our layout}."""
  params = dict(hf_model.named_parameters())
  out = {}
  for name, _, transposed in pairs:
    value = params[name].detach().numpy().copy()
    out[name] = value.T if transposed else value
  return out


def exclusion_check(pairs, optimizer, reference):
  """Both sides' excluded variables, asserted to be the same: ours from the
  built optimizer's own sets (by variable), HF's by the regexes on HF names."""
  # pylint: disable=protected-access
  no_decay = optimizer._no_decay
  no_adaptation = optimizer._no_adaptation
  ours = sorted(v.path for _, v, _ in pairs
                if optimizer._var_key(v) in no_decay)
  ours_adapt = sorted(v.path for _, v, _ in pairs
                      if optimizer._var_key(v) in no_adaptation)
  theirs = sorted(reference.excluded)
  theirs_as_ours = sorted(v.path for n, v, _ in pairs
                          if n in reference.excluded)
  print(f"  excluded, ours ({len(ours)}): {', '.join(ours)}")
  print(f"  excluded, HF   ({len(theirs)}): {', '.join(theirs)}")
  if ours != theirs_as_ours:
    raise AssertionError(
        f"exclusion sets differ: only ours {set(ours) - set(theirs_as_ours)}, "
        f"only HF {set(theirs_as_ours) - set(ours)}")
  if ours_adapt != ours:
    raise AssertionError(f"our layer-adaptation exclusions {ours_adapt} are "
                         f"not the decay exclusions")
  return {"ours": ours, "hf": theirs, "same_variables": True}


def hf_config(config, attention="eager", **extra):
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.AlbertConfig(
      **{k: getattr(config, k) for k in (
          "vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
          "num_hidden_groups", "inner_group_num", "num_attention_heads",
          "intermediate_size", "layer_norm_eps", "max_position_embeddings",
          "type_vocab_size")},
      hidden_act={"gelu": "gelu_new", "gelu_exact": "gelu"}.get(
          config.hidden_act, config.hidden_act),
      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
      classifier_dropout_prob=0.0, attn_implementation=attention, **extra)
