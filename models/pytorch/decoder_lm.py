"""Twin of :mod:`kbench_models.decoder_lm`: Embedding(vocabulary, 32), position
embedding, 2 pre-norm causal blocks, LayerNorm, Dense(vocabulary): next-token logits
(batch, steps, vocabulary), untied from the embedding. Token ids may come as integers
or as floats holding integers, as for the Keras model."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from ._attention import Block, LayerNorm, PositionEmbedding, causal_mask
from ._layers import KerasLayer, KerasTwin, keras_init_

DIM = 32
HEADS = 2
MLP_DIM = 64
BLOCKS = 2


class DecoderLM(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 1:
            raise ValueError(f"decoder_lm: input_shape must be (steps,); got {input_shape}")
        self.steps = int(input_shape[0])
        self.embedding = nn.Embedding(num_classes, DIM)
        self.positions = PositionEmbedding(self.steps, DIM)
        self.blocks = nn.ModuleList(Block(DIM, HEADS, MLP_DIM) for _ in range(BLOCKS))
        self.norm = LayerNorm(DIM)
        self.logits = nn.Linear(DIM, num_classes)
        keras_init_(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.positions(self.embedding(tokens.long()))
        mask = causal_mask(self.steps, x)
        for block in self.blocks:
            x = block(x, mask)
        return self.logits(self.norm(x))

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            KerasLayer("PositionEmbedding", self.positions),
            *(layer for block in self.blocks for layer in block.keras_layers()),
            KerasLayer("LayerNorm", self.norm),
            KerasLayer("Dense", self.logits),
        ]


def build(input_shape=(64,), num_classes=1_000) -> DecoderLM:
    return DecoderLM(input_shape, num_classes)
