"""fill_mask: [MASK] tokenization, a memorised sentence, the serve_fill_mask signature."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_fill_mask needs)

from albert_tf.training import checkpoints
from albert_tf.data import tokenization
from albert_tf import export_saved_model as export_lib
from albert_tf import fill_mask as fm
from albert_tf.serving import fill_mask_graph as fmg
from albert_tf.core.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.modeling.models import AlbertPretrainer
from tests.fixtures_data import tiny_spm_model
from tests import numpy_reference
from tests.numpy_reference import assert_close_to_scale

SENTENCE = "人民日报发表新年献词，迈向充满希望的新世纪。"
CORPUS = [SENTENCE, "今天天气很好，我们去公园散步。",
          "the quick brown fox jumps over the lazy dog in 1998, 2000.",
          "经济增长和社会发展都取得了新的成就。"] * 30
MAX_SEQ = 32


@pytest.fixture(scope="module")
def spm_file(tmp_path_factory):
  return tiny_spm_model(tmp_path_factory.mktemp("spm"), CORPUS, 100)


@pytest.fixture(scope="module")
def tokenizer(spm_file):
  return tokenization.load_tokenizer(spm_model_file=spm_file)


def _maskable(tokenizer):
  """Positions in [CLS] pieces [SEP] of SENTENCE that a [MASK] in text can
  stand for: not the bare word-start piece "▁", nor the piece after it (text
  has no way to say "▁ then [MASK]")."""
  pieces = ["[CLS]"] + tokenizer.tokenize(SENTENCE)
  bare = tokenization.SPM_UNDERLINE
  return [i for i in range(1, len(pieces))
          if bare not in (pieces[i], pieces[i - 1])]


def _masked(tokenizer, positions):
  """SENTENCE with the pieces at `positions` (of [CLS] pieces [SEP]) masked:
  (text, ids with the mask id there, the original pieces)."""
  ids = [tokenizer.cls_id] + tokenizer.encode(SENTENCE) + [tokenizer.sep_id]
  pieces = tokenizer.convert_ids_to_tokens(ids[1:-1])
  text = "".join(fm.MASK_TOKEN if i + 1 in positions else
                 p.replace(tokenization.SPM_UNDERLINE, " ")
                 for i, p in enumerate(pieces)).strip()
  masked_ids = [tokenizer.mask_id if i in positions else t
                for i, t in enumerate(ids)]
  return text, masked_ids, [pieces[i - 1] for i in positions]


# ------------------------------------------------------ text -> ids
def test_each_mask_is_one_position_and_the_rest_tokenizes_as_in_context(
    tokenizer):
  ok = _maskable(tokenizer)
  assert len(ok) >= len(SENTENCE) - 3
  for positions in ([ok[0]], [ok[1]], [ok[5]], [ok[-1]], ok[2:4],
                    [ok[1], ok[6], ok[-2]], ok):
    text, expected, _ = _masked(tokenizer, positions)
    assert numpy_reference.masked_ids(tokenizer, text) == expected, text
    got = fmg.MaskedTextEncoder(tokenizer, 64)(tf.constant([text]))
    assert got["input_ids"][0, :len(expected)].numpy().tolist() == expected
  # "[MASK]" is never split into the pieces of "[", "mask", "]".
  ids = fmg.MaskedTextEncoder(tokenizer, 64)(tf.constant(["the [MASK] fox"]))
  ids = ids["input_ids"][0, :int(ids["num_tokens"][0])].numpy().tolist()
  assert ids.count(tokenizer.mask_id) == 1
  assert ids[:2] + ids[-1:] == [tokenizer.cls_id] + tokenizer.encode(
      "the")[:1] + [tokenizer.sep_id]


EDGE_TEXTS = [
    "[MASK]天气很好", "今天天气很[MASK]", "[MASK][MASK]", "[MASK]", "",
    "no mask here", "今天 [MASK] 很好[MASK]", "The [MASK]ick Brown, 1998,2013",
    # (No "000": SentencePiece ties split it either way; see test_export.)
    "the fox[MASK], 1998, jumps", "今天\u3000[MASK]\u3000很好",
    "  [MASK]  spaced  [MASK]  ", "Café [MASK]é ``quoted''",
    "the [mask] is lowercase so it is text", "[MASK]" * 3 + "新世纪",
]


def test_in_graph_encoding_matches_python(tokenizer):
  length = 64
  encoder = fmg.MaskedTextEncoder(tokenizer, length)
  got = encoder(tf.constant(EDGE_TEXTS))
  for row, text in enumerate(EDGE_TEXTS):
    ids = numpy_reference.masked_ids(tokenizer, text)
    assert len(ids) <= length
    assert got["num_tokens"][row].numpy() == len(ids), text
    np.testing.assert_array_equal(
        got["input_ids"][row].numpy(),
        ids + [tokenizer.pad_id] * (length - len(ids)), err_msg=text)
    np.testing.assert_array_equal(got["input_mask"][row].numpy(),
                                  np.arange(length) < len(ids))
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    assert got["num_masks"][row].numpy() == text.count("[MASK]"), text
    assert got["masked_lm_positions"][row].numpy()[:len(positions)].tolist(
    ) == positions
  assert got["masked_lm_positions"].shape == (len(EDGE_TEXTS), 3)
  # Truncated to max_seq_length: a [MASK] cut off is not counted.
  short = fmg.MaskedTextEncoder(tokenizer, 8)(tf.constant(
      ["今[MASK]天气很好很好[MASK]"]))
  assert short["input_ids"].shape == (1, 8)
  assert short["num_masks"].numpy().tolist() == [1]
  assert short["input_ids"][0, -1].numpy() == tokenizer.sep_id


def test_without_dummy_prefix_changes_only_the_word_start(tokenizer, spm_file):
  import sentencepiece as spm
  with open(spm_file, "rb") as f:
    proto = f.read()
  plain = spm.SentencePieceProcessor(model_proto=proto)
  glued = spm.SentencePieceProcessor(model_proto=fmg.without_dummy_prefix(proto))
  assert plain.encode("天气很好", out_type=str)[0].startswith("\u2581")
  assert not glued.encode("天气很好", out_type=str)[0].startswith("\u2581")
  assert glued.get_piece_size() == plain.get_piece_size()
  # Only the prefix goes: a space inside still starts a word ("▁很").
  plain_pieces = plain.encode("天气 很好", out_type=str)
  assert plain_pieces[0] == "\u2581"  # this tiny vocab has no "▁天"
  assert glued.encode("天气 很好", out_type=str) == plain_pieces[1:]
  assert "\u2581" in plain_pieces[1:] or "\u2581很" in plain_pieces
  assert [glued.id_to_piece(i) for i in range(plain.get_piece_size())] == [
      plain.id_to_piece(i) for i in range(plain.get_piece_size())]


# ------------------------------------------------------ a memorised sentence
def _train_on_the_sentence(tokenizer, steps=150, seed=0):
  keras.utils.set_random_seed(seed)
  config = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16,
                        hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
  model = AlbertPretrainer(config)
  ids = np.array([tokenizer.cls_id] + tokenizer.encode(SENTENCE)
                 + [tokenizer.sep_id], np.int32)
  rng = np.random.default_rng(seed)
  batch, preds = 32, 2
  examples = steps * batch
  positions = np.stack([np.sort(rng.choice(np.arange(1, len(ids) - 1), preds,
                                           replace=False))
                        for _ in range(examples)]).astype(np.int32)
  inputs = np.tile(ids, [examples, 1])
  np.put_along_axis(inputs, positions, tokenizer.mask_id, axis=1)
  data = {"input_ids": inputs, "input_mask": np.ones_like(inputs),
          "segment_ids": np.zeros_like(inputs),
          "masked_lm_positions": positions,
          "masked_lm_ids": ids[positions],
          "masked_lm_weights": np.ones(positions.shape, np.float32),
          "next_sentence_labels": np.zeros([examples, 1], np.int32)}
  model.compile(optimizer=keras.optimizers.Adam(3e-3))
  history = model.fit(tf.data.Dataset.from_tensor_slices(data).batch(batch),
                      epochs=1, shuffle=False, verbose=0)
  return model, config, history.history


@pytest.fixture(scope="module")
def trained(tokenizer, tmp_path_factory):
  model, config, history = _train_on_the_sentence(tokenizer)
  directory = tmp_path_factory.mktemp("pretrain")
  prefix = checkpoints.save_weights(model, str(directory / "ckpt-1"), config)
  return prefix, history


@pytest.mark.slow
def test_fill_mask_predicts_the_memorised_token(trained, tokenizer, spm_file):
  prefix, history = trained
  assert history["masked_lm_accuracy"][-1] > 0.5  # it did learn
  ok = _maskable(tokenizer)
  cases = [_masked(tokenizer, p) for p in ([ok[0]], [ok[5]], [ok[-1]],
                                           [ok[2], ok[8]])]
  lines = []
  results = fm.run(fm.FillMaskArgs(
      checkpoint=os.path.dirname(prefix), texts=[c[0] for c in cases],
      top_k=3, spm_model_file=spm_file), log=lines.append)
  for (text, _, pieces), masks in zip(cases, results):
    assert [m[0][0] for m in masks] == pieces, text
    for predictions in masks:
      probabilities = [p for _, _, p in predictions]
      assert len(predictions) == 3
      assert probabilities == sorted(probabilities, reverse=True)
      assert 0.5 < probabilities[0] <= 1 and sum(probabilities) <= 1 + 1e-6
  # Printed: the text and what fills it, then one line per [MASK].
  assert lines[0].startswith(cases[0][0] + "  ->  ")
  assert lines[1].startswith(f"  [MASK] 1: {cases[0][2][0]} ")
  assert len(lines) == sum(1 + len(c[2]) for c in cases)


@pytest.mark.slow
def test_serve_fill_mask_signature_agrees_with_the_cli(trained, tokenizer,
                                                       spm_file, tmp_path):
  prefix, _ = trained
  ok = _maskable(tokenizer)
  texts = [_masked(tokenizer, [ok[1]])[0], _masked(tokenizer, [ok[2], ok[8]])[0],
           "今天[MASK]气很好"]
  expected = fm.run(fm.FillMaskArgs(checkpoint=prefix, texts=texts, top_k=4,
                                    spm_model_file=spm_file),
                    log=lambda m: None)
  path = export_lib.export(checkpoint=prefix,
                           export_dir=str(tmp_path / "sm"), model="pretrainer",
                           spm_model_file=spm_file, max_seq_length=MAX_SEQ)
  loaded = tf.saved_model.load(path)
  assert "serve_fill_mask" in loaded.signatures
  out = loaded.signatures["serve_fill_mask"](text=tf.constant(texts),
                                             top_k=tf.constant(4))
  out = {k: v.numpy() for k, v in out.items()}
  assert out["num_masks"].tolist() == [1, 2, 1]
  # The in-graph tokenizers survived saving and loading (see
  # MaskedTextEncoder: two SentencePiece models in one SavedModel).
  for row, text in enumerate(texts):
    ids = numpy_reference.masked_ids(tokenizer, text)
    positions = [i for i, t in enumerate(ids) if t == tokenizer.mask_id]
    assert out["masked_lm_positions"][row][:len(positions)].tolist() == (
        positions), text
  assert out["top_k_ids"].shape == (3, 2, 4)
  for row, masks in enumerate(expected):
    for m, predictions in enumerate(masks):
      assert out["top_k_ids"][row, m].tolist() == [i for _, i, _ in
                                                   predictions]
      assert [p.decode() for p in out["top_k_pieces"][row, m]] == [
          piece for piece, _, _ in predictions]
      assert_close_to_scale(out["top_k_probabilities"][row, m],
                            [p for _, _, p in predictions], rel=1e-5)
  # The padding row of a text with fewer masks is marked as such.
  assert out["top_k_ids"][0, 1].tolist() == [-1] * 4
  assert out["top_k_probabilities"][0, 1].tolist() == [0.0] * 4
  assert out["num_masks_past_length"].tolist() == [0, 0, 0]
  # More masks than fit: the answered ones and the cut ones are counted.
  many = "[MASK]" * (MAX_SEQ + 10)
  out = loaded.signatures["serve_fill_mask"](text=tf.constant([many, texts[1]]),
                                             top_k=tf.constant(2))
  assert out["num_masks"].numpy().tolist() == [MAX_SEQ - 2, 2]  # [CLS] [SEP]
  assert out["num_masks_past_length"].numpy().tolist() == [12, 0]


@pytest.mark.slow
def test_fill_mask_after_keras_clear_session(trained, spm_file):
  """keras.backend.clear_session() clears TF's kernels, which own the
  SentencePiece models of the encoder fill_mask keeps: built again."""
  prefix, _ = trained
  model, tok = fm.load(prefix, spm_model_file=spm_file)
  first = fm.fill_mask(model, tok, ["今天[MASK]气", "[MASK]民"])
  keras.backend.clear_session()
  assert fm.fill_mask(model, tok, ["今天[MASK]气", "[MASK]民"]) == first


# ------------------------------------------------------ bad input
@pytest.mark.slow
def test_bad_input_is_one_line_naming_it(trained, tokenizer, spm_file,
                                         tmp_path):
  prefix, _ = trained
  model, tok = fm.load(prefix, spm_model_file=spm_file)
  with pytest.raises(fm.FillMaskError, match="text 2 has no \\[MASK\\]"):
    fm.fill_mask(model, tok, ["a [MASK]", "no mask"])
  with pytest.raises(fm.FillMaskError, match="--top_k must be >= 1"):
    fm.fill_mask(model, tok, ["a [MASK]"], top_k=0)
  with pytest.raises(fm.FillMaskError, match="max_position_embeddings=64"):
    fm.fill_mask(model, tok, ["[MASK]" + "今天" * 40])
  with pytest.raises(fm.FillMaskError, match="--text or --input_file"):
    fm.read_texts(["a [MASK]"], str(tmp_path / "x.txt"))
  with pytest.raises(fm.FillMaskError, match="--input_file=.*does not exist"):
    fm.read_texts(None, str(tmp_path / "missing.txt"))
  lines = tmp_path / "lines.txt"
  lines.write_text("\n今天[MASK]气\n\n[MASK]民\n", encoding="utf-8")
  assert fm.read_texts(None, str(lines)) == ["今天[MASK]气", "[MASK]民"]

  # An encoder-only checkpoint (e.g. converted from keras-hub) has no head.
  encoder_only = str(tmp_path / "enc" / "ckpt-1")
  checkpoints.save_weights(AlbertEncoder(model.config), encoder_only,
                           model.config)
  with pytest.raises(fm.FillMaskError, match="has no masked_lm_head"):
    fm.load(encoder_only, spm_model_file=spm_file)
