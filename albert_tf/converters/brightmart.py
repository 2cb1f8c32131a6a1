"""brightmart's albert_zh own layout: detection and renaming to the original names.

brightmart's *_google releases already use Google's names and need nothing
from here. The own-layout releases store one shared BERT-style layer under
bert/encoder/layer_shared and the embedding projection as word_embeddings_2;
`brightmart_to_original` renames those so that the single original-name map
(original.py) loads them. Reading the file itself is tf1.py's job.
"""

import re

from albert_tf.converters.errors import ConversionError
from albert_tf.converters.shared import BERT_LAYER_MODULES

BRIGHTMART_RELEASES = (
    "brightmart albert_zh *_google releases (albert_tiny_zh_google, "
    "albert_small_zh_google, albert_base_zh_google ...) in Google's layout, "
    "and the own-layout releases with bert/encoder/layer_shared "
    "(albert_tiny_zh, albert_small_zh, albert_base_zh, albert_large_zh, "
    "albert_xlarge_zh; not the preln xxlarge)")


def brightmart_to_original(tensors):
  """brightmart's own layout -> original names (embedding_layout="brightmart").

  word_embeddings_2 [E, H] (no bias) becomes the projection kernel; position
  and type embeddings [*, H] and the LayerNorm over H keep their names (the
  model's brightmart embedding expects those widths). Returns (tensors,
  unconsumed).
  """
  out, unconsumed = {}, []
  layer = "bert/encoder/layer_shared/"
  for name, value in tensors.items():
    if name == "bert/embeddings/word_embeddings_2":
      out["bert/encoder/embedding_hidden_mapping_in/kernel"] = value
    elif name.startswith(layer):
      module, _, leaf = name[len(layer):].rpartition("/")
      if module not in BERT_LAYER_MODULES:
        unconsumed.append(name)
        continue
      out["bert/encoder/transformer/group_0/inner_group_0/"
          f"{BERT_LAYER_MODULES[module]}/{leaf}"] = value
    elif re.match(r"^bert/encoder/layer_\d+/", name):
      raise ConversionError(
          f"{name}: brightmart checkpoint without layer sharing is not "
          f"supported; supported: {BRIGHTMART_RELEASES}")
    else:
      out[name] = value
  return out, unconsumed
