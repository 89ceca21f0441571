"""Twin of :mod:`kbench_models.text_encoder`: Embedding(1,000, 32), the attention trunk
(position embedding, 2 pre-norm blocks whose attention masks id 0, LayerNorm), the mean
over the ids that are not 0, Dense(classes, softmax). Token ids may come as integers or
as floats holding integers, as for the Keras model."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from .._attention_facts import DIM, check_token_input
from ._attention import Trunk, masked_mean, padding_mask
from ._layers import KerasLayer, KerasTwin, keras_init_

VOCABULARY_SIZE = 1_000


class TextEncoder(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        check_token_input("text_encoder", input_shape, num_classes)
        self.embedding = nn.Embedding(VOCABULARY_SIZE, DIM)
        self.trunk = Trunk(int(input_shape[0]))
        self.classifier = nn.Linear(DIM, num_classes)
        keras_init_(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.long()
        x = self.embedding(tokens)
        x = self.trunk(x, padding_mask(tokens, x.dtype))
        return torch.softmax(self.classifier(masked_mean(x, tokens)), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            *self.trunk.keras_layers(),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(64,), num_classes=2) -> TextEncoder:
    return TextEncoder(input_shape, num_classes)
