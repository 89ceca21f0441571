"""Constants of the attention models that the Keras definitions (:mod:`._attention`)
and the native twins share. Standard library only."""

MASKED = -1e9  # added to a score that must not be attended to
EPSILON = 1e-5  # LayerNorm's (PyTorch's default)
