"""Twin of :mod:`kbench_models.mlp` (and, with two hidden layers, of ``mlp3``):
Flatten, Dense(128, relu), Dense(classes, softmax)."""

from __future__ import annotations

import math
from typing import List, Sequence

import torch
from torch import nn

from .._shapes import check_image_shape
from ._layers import KerasLayer, KerasTwin, keras_init_


class MLP(KerasTwin):
    def __init__(self, input_shape, num_classes: int, hidden: Sequence[int] = (128,)) -> None:
        super().__init__()
        self.flatten_chw = check_image_shape(type(self).__name__, input_shape)
        sizes = [math.prod(self.flatten_chw), *hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.classifier = nn.Linear(sizes[-1], num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for dense in self.hidden:
            x = torch.relu(dense(x))
        return torch.softmax(self.classifier(x), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        denses = [*self.hidden, self.classifier]
        return [KerasLayer("Dense", denses[0], self.flatten_chw)] + [
            KerasLayer("Dense", dense) for dense in denses[1:]
        ]


def build(input_shape=(1, 28, 28), num_classes=10) -> MLP:
    return MLP(input_shape, num_classes, hidden=(128,))
