"""LSTM text classifier on integer tokens: Embedding(20,000, 50), LSTM(128), binary
output (the :mod:`.lstm` model with an embedding in front).

Input (250,): 250 token ids in [0, 20,000), given as integers or as floats holding
integers. Head and loss as in :mod:`.lstm`. 1,091,777 parameters for 2 classes:
Embedding 1,000,000, LSTM 91,648, Dense 129.
"""

from keras import layers
from keras.models import Model

from .lstm import encoder, head

VOCABULARY_SIZE = 20_000
EMBEDDING_DIM = 50


def build(input_shape=(250,), num_classes=2):
    inputs = layers.Input(shape=input_shape)
    x = layers.Embedding(VOCABULARY_SIZE, EMBEDDING_DIM)(inputs)
    outputs = head(encoder(x), num_classes)
    return Model(inputs, outputs, name="lstm_embedding")
