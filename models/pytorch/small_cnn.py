"""Twin of :mod:`kbench_models.small_cnn`: Conv2D(64, 3, relu), Conv2D(32, 3, relu),
Flatten, Dense(classes, softmax); "valid" convolutions."""

from __future__ import annotations

import math
from typing import List

import torch
from torch import nn

from .._shapes import check_image_shape
from ._layers import Conv2d, KerasLayer, KerasTwin, keras_init_


class SmallCNN(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("small_cnn", input_shape, minimum=5)
        self.conv1 = Conv2d(channels, 64, 3)
        self.conv2 = Conv2d(64, 32, 3)
        self.flatten_chw = (32, height - 4, width - 4)
        self.classifier = nn.Linear(math.prod(self.flatten_chw), num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return torch.softmax(self.classifier(x.flatten(1)), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Conv2D", self.conv1),
            KerasLayer("Conv2D", self.conv2),
            KerasLayer("Dense", self.classifier, self.flatten_chw),
        ]


def build(input_shape=(1, 28, 28), num_classes=10) -> SmallCNN:
    return SmallCNN(input_shape, num_classes)
