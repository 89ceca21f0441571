"""Twin of :mod:`kbench_models.decoder_lm`: Embedding(vocabulary, 32), the attention
trunk with a causal mask (position embedding, 2 pre-norm blocks, LayerNorm),
Dense(vocabulary): next-token logits (batch, steps, vocabulary), untied from the
embedding. Token ids may come as integers or as floats holding integers, as for the
Keras model."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from .._attention_facts import DIM, check_token_input
from ._attention import Trunk, causal_mask
from ._layers import KerasLayer, KerasTwin, keras_init_


class DecoderLM(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        check_token_input("decoder_lm", input_shape, num_classes)
        self.steps = int(input_shape[0])
        self.embedding = nn.Embedding(num_classes, DIM)
        self.trunk = Trunk(self.steps)
        self.logits = nn.Linear(DIM, num_classes)
        keras_init_(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens.long())
        return self.logits(self.trunk(x, causal_mask(self.steps, x)))

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            *self.trunk.keras_layers(),
            KerasLayer("Dense", self.logits),
        ]


def build(input_shape=(64,), num_classes=1_000) -> DecoderLM:
    return DecoderLM(input_shape, num_classes)
