"""Layers, the encoder, heads and models: Keras only, no data files, no training.

Read in this order: `ops` -> `embedding` (the factorized V x E + E x H
embedding) -> `transformer` (the TransformerEncoderBlock) -> `encoder` (one
block reused for every layer: the sharing) -> `heads` -> `models`.
"""
