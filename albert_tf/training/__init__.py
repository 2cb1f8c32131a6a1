"""The one trainer, its callbacks, optimizers, checkpoints, the runtime
(precision, strategy) and the output_dir rules (fingerprint, lock).
"""
