"""Twin of :mod:`kbench_models.vit_tiny`: Conv2D(32, 4, strides=4) patches read in
row-major order, then the attention trunk (position embedding, 2 pre-norm blocks,
LayerNorm), the mean over the patches, Dense(classes, softmax)."""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from .._attention_facts import DIM
from .._shapes import check_image_shape
from ._attention import Trunk
from ._layers import Conv2d, KerasLayer, KerasTwin, keras_init_

PATCH = 4


class ViTTiny(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("vit_tiny", input_shape, minimum=PATCH)
        self.patches = Conv2d(channels, DIM, PATCH, stride=PATCH)
        self.trunk = Trunk((height // PATCH) * (width // PATCH))
        self.classifier = nn.Linear(DIM, num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.trunk(self.patches(x).flatten(2).transpose(1, 2))  # (N, patches, DIM)
        return torch.softmax(self.classifier(x.mean(dim=1)), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Conv2D", self.patches),
            *self.trunk.keras_layers(),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(3, 32, 32), num_classes=10) -> ViTTiny:
    return ViTTiny(input_shape, num_classes)
