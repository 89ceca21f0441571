"""A BERT-style text encoder classifier over token ids, at toy size: token and learned
position embeddings, 2 pre-norm encoder blocks whose attention never looks at padding,
a mean over the tokens that are not padding, softmax head. The blocks are
:mod:`._attention`'s, composed from layers Keras 3 and keras-mxnet's Keras 2.2.4 share.

Input (64,): 64 token ids in [0, 1,000), integers or floats holding integers; id 0 is
padding: an additive mask (-1e9 on its column of every score) keeps it out of
attention, and the pooling averages over the other tokens only (zero if all are
padding). So a padded position's token never changes the output. Unlike BERT, the
blocks are pre-norm (as :mod:`.decoder_lm`'s), there is no [CLS] token, segment
embedding or embedding LayerNorm, and the MLP uses relu.

Embedding(1,000, 32), PositionEmbedding (64, 32), 2 blocks of dim 32, 2 heads, MLP 64,
a final LayerNorm, Dense(classes, softmax). Parameters for 64 steps and 2 classes:
  token embedding  1,000 * 32                               = 32,000
  positions        64 * 32                                  =  2,048
  2 blocks         2 * 8,544 (see :mod:`.vit_tiny`)         = 17,088
  final LayerNorm  2 * 32                                   =     64
  head             32 * 2 + 2                               =     66
  total                                                     = 51,266
"""

from keras import layers
from keras.models import Model

from . import _attention
from ._attention_facts import DIM

VOCABULARY_SIZE = 1_000


def build(input_shape=(64,), num_classes=2):
    if num_classes < 2:
        raise ValueError(f"text_encoder: num_classes must be 2 or more; got {num_classes}")
    inputs = layers.Input(shape=input_shape)
    x = layers.Embedding(VOCABULARY_SIZE, DIM)(inputs)
    x = _attention.trunk(x, mask=_attention.padding_mask(inputs))
    x = _attention.masked_mean_over_steps(x, inputs)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="text_encoder")
