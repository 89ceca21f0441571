"""A GPT-style causal decoder language model over token ids, at toy size: token and
learned position embeddings, 2 pre-norm blocks whose attention sees only the current
and earlier positions, a final LayerNorm, and next-token logits at every position.
The blocks are :mod:`._attention`'s, composed from layers Keras 3 and keras-mxnet's
Keras 2.2.4 share.

Input (64,): 64 token ids in [0, vocabulary); ``num_classes`` is the vocabulary, of the
input embedding and of the output alike (1,000 by default). Output (64, vocabulary):
logits, no softmax (train with sparse categorical cross-entropy from logits); the
output at position t depends on tokens 0..t only (an additive -1e9 mask above the
diagonal of every score), so its target is the token at t + 1 (the registry's
``target="next_token"``) and a sequence may be right-padded with anything
(:mod:`.generation` reads the logits at the last real position). The output projection
is untied: a Dense(vocabulary) with a bias of its own, not the embedding's transpose.
No dropout; relu in the MLP (GPT-2 has gelu).

Embedding(1,000, 32), PositionEmbedding (64, 32), 2 blocks of dim 32, 2 heads, MLP 64,
a final LayerNorm, Dense(1,000). Parameters for 64 steps and a 1,000-token vocabulary:
  token embedding  1,000 * 32                               = 32,000
  positions        64 * 32                                  =  2,048
  2 blocks         2 * 8,544 (see :mod:`.vit_tiny`)         = 17,088
  final LayerNorm  2 * 32                                   =     64
  output           32 * 1,000 + 1,000                       = 33,000
  total                                                     = 84,200
"""

from keras import layers
from keras.models import Model

from . import _attention
from ._attention_facts import DIM


def build(input_shape=(64,), num_classes=1_000):
    inputs = layers.Input(shape=input_shape)
    x = layers.Embedding(num_classes, DIM)(inputs)
    outputs = layers.Dense(num_classes)(_attention.trunk(x, causal=True))
    return Model(inputs, outputs, name="decoder_lm")
