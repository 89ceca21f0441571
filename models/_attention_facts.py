"""The sizes and constants the attention models' Keras definitions (:mod:`._attention`)
and their native twins share. Standard library only."""

DIM = 32  # the width of every token (patch) vector
HEADS = 2  # of DIM // HEADS = 16 each
MLP_DIM = 64  # a block's hidden MLP width
BLOCKS = 2
MASKED = -1e9  # added to a score that must not be attended to
EPSILON = 1e-5  # LayerNorm's (PyTorch's default)
