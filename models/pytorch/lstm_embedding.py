"""Twin of :mod:`kbench_models.lstm_embedding`: Embedding(20,000, 50), then the
:mod:`.lstm` encoder and head. Token ids may come as integers or as floats holding
integers, as for the Keras model."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from ._layers import KerasLayer, KerasTwin, keras_init_
from .lstm import Encoder, Head

VOCABULARY_SIZE = 20_000
EMBEDDING_DIM = 50


class LSTMEmbeddingClassifier(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"lstm_embedding: input_shape must be (steps,); got {input_shape}")
        self.embedding = nn.Embedding(VOCABULARY_SIZE, EMBEDDING_DIM)
        self.encoder = Encoder(EMBEDDING_DIM)
        self.head = Head(num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embedding(x.long())))

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            KerasLayer("LSTM", self.encoder.lstm),
            KerasLayer("Dense", self.head.dense),
        ]


def build(input_shape=(250,), num_classes=2) -> LSTMEmbeddingClassifier:
    return LSTMEmbeddingClassifier(input_shape, num_classes)
