"""Tokenizers, the pretraining TFRecord reader and its checks, TSV and CoNLL readers.

`tokenization` imports no TensorFlow (Beam workers tokenize with it).
"""
