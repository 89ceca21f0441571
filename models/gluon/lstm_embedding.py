"""Twin of :mod:`kbench_models.lstm_embedding`: Embedding(20,000, 50), then the
:mod:`.lstm` encoder and head. Token ids may come as integers or as floats holding
integers, as for the Keras model."""

from __future__ import annotations

from typing import List

import mxnet as mx
from mxnet.gluon import nn

from ._layers import KerasLayer, KerasTwin, keras_init
from .lstm import Encoder, Head

VOCABULARY_SIZE = 20_000
EMBEDDING_DIM = 50


class LSTMEmbeddingClassifier(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"lstm_embedding: input_shape must be (steps,); got {input_shape}")
        with self.name_scope():
            # Keras' embeddings start as uniform(+-0.05)
            self.embedding = nn.Embedding(VOCABULARY_SIZE, EMBEDDING_DIM,
                                          weight_initializer=mx.init.Uniform(0.05))  # fmt: skip
            self.encoder = Encoder(EMBEDDING_DIM)
            self.head = Head(num_classes)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        return self.head(self.encoder(self.embedding(x)))

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            KerasLayer("LSTM", self.encoder.lstm),
            KerasLayer("Dense", self.head.dense),
        ]


def build(input_shape=(250,), num_classes=2) -> LSTMEmbeddingClassifier:
    return LSTMEmbeddingClassifier(input_shape, num_classes)
