"""The converted MiniLM of benchmarks/minilm_transfer.py against a NumPy BERT
forward pass of its safetensors (tests/numpy_reference.py)."""

import os

import numpy as np

REL = 1e-5  # parity tolerance, relative to the largest magnitude compared


def parity(model_dir, converted_dir, texts, seq_length):
  """Max |ours - NumPy| / max(1, max |NumPy|) of the encoder outputs on
  `texts` (WordPiece, [CLS] text [SEP], padded to seq_length)."""
  # pylint: disable=g-import-not-at-top
  import safetensors.numpy
  from albert_tf.core.config import AlbertConfig
  from albert_tf.data.tokenization import load_tokenizer
  from albert_tf.modeling.encoder import AlbertEncoder
  from albert_tf.training import checkpoints
  from tests.numpy_reference import BertHfSource, bert_forward
  config = AlbertConfig.from_json_file(
      os.path.join(converted_dir, "albert_config.json"))
  tokenizer = load_tokenizer(vocab_file=os.path.join(converted_dir,
                                                     "vocab.txt"))
  ids = np.zeros([len(texts), seq_length], np.int32)
  for row, text in enumerate(texts):
    pieces = tokenizer.encode(text)[:seq_length - 2]
    # Some rows shorter than the length, so padding is compared too.
    pieces = pieces[:seq_length - 2 - 17 * (row % 3)]
    seq = [tokenizer.cls_id] + pieces + [tokenizer.sep_id]
    ids[row, :len(seq)] = seq
  inputs = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32),
            "segment_ids": np.zeros_like(ids)}
  encoder = AlbertEncoder(config)
  checkpoints.restore_weights(converted_dir, encoder)
  ours = {k: np.asarray(v) for k, v in encoder(inputs, training=False).items()}
  state = safetensors.numpy.load_file(os.path.join(model_dir,
                                                   "model.safetensors"))
  ref = bert_forward(BertHfSource(state), inputs, config.num_hidden_layers,
                     config.num_attention_heads, heads=False)
  result = {}
  for key in ("sequence_output", "pooled_output"):
    scale = max(1.0, float(np.max(np.abs(ref[key]))))
    result[key] = {"max_abs_diff": float(np.max(np.abs(ours[key] - ref[key]))),
                   "scale": scale}
    result[key]["relative"] = result[key]["max_abs_diff"] / scale
    result[key]["ok"] = result[key]["relative"] <= REL
  result["texts"], result["tokens"] = len(texts), int(inputs["input_mask"].sum())
  return result
