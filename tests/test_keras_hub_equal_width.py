"""export_keras_hub for an encoder with embedding_size == hidden_size (the
demo's albert_zh_l4_h128): ours has no E->H projection, keras-hub's
AlbertBackbone always has one; the export writes it as the identity, and
keras-hub's own reader then gives our outputs."""

import numpy as np
import pytest

from albert_tf import export_keras_hub
from albert_tf.core.config import AlbertConfig
from albert_tf.converters import keras_hub_interop
from albert_tf.data import tokenization
from albert_tf.modeling.encoder import AlbertEncoder
from albert_tf.training import checkpoints
from tests import test_keras_hub_roundtrip as roundtrip
from tests.fixtures_data import tiny_spm_model

keras_hub = pytest.importorskip("keras_hub")


def test_equal_width_encoder_exports_with_an_identity_projection(tmp_path):
  (tmp_path / "spm").mkdir()
  spm_file = tiny_spm_model(tmp_path / "spm", roundtrip.CORPUS, 120)
  tokenizer = tokenization.load_tokenizer(spm_model_file=spm_file)
  config = AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16,
                        hidden_size=16, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32)
  encoder = roundtrip._random_encoder(config)  # pylint: disable=protected-access
  assert encoder.embedding.projection is None
  prefix = checkpoints.save_weights(encoder, str(tmp_path / "ckpt" / "ckpt-1"),
                                    config)
  preset = str(tmp_path / "preset")
  export_keras_hub.export(prefix, preset, spm_model_file=spm_file,
                          log=lambda m: None)
  backbone = keras_hub.models.AlbertBackbone.from_preset(preset)
  projection = backbone.embeddings_projection
  np.testing.assert_array_equal(np.asarray(projection.kernel), np.eye(16))
  assert not np.any(np.asarray(projection.bias))
  inputs = roundtrip._features(tokenizer, roundtrip.LOWERCASE_TEXTS)  # pylint: disable=protected-access
  ours = {k: np.asarray(v) for k, v in encoder(inputs).items()}
  theirs = {k: np.asarray(v) for k, v in backbone(
      keras_hub_interop.keras_hub_inputs(inputs)).items()}
  assert np.max(np.abs(ours["sequence_output"])) > 0.5
  roundtrip._assert_same_outputs(theirs, ours, inputs["input_mask"])  # pylint: disable=protected-access
  # Back to albert_tf: the same encoder; a projection that is not the
  # identity is refused in one line, not dropped.
  back = keras_hub_interop.encoder_from_keras_hub(backbone)
  for a, b in zip(back.weights, encoder.weights):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  projection.kernel.assign(np.eye(16, dtype=np.float32) * 2)
  with pytest.raises(ValueError, match="embedding projection is not the "
                     "identity"):
    keras_hub_interop.encoder_from_keras_hub(backbone)
