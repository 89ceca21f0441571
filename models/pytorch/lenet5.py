"""Twin of :mod:`kbench_models.lenet5`: Conv2D(6, 5x5, "same", relu), AveragePooling2D(2),
Conv2D(16, 3x3, "valid", relu), AveragePooling2D(2), Flatten, Dense(120, relu),
Dense(84, relu), Dense(classes, softmax). Keras' "valid" pooling drops an odd last
row/column, as torch's does."""

from __future__ import annotations

import math
from typing import List

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import check_image_shape, valid_size
from ._layers import Conv2d, KerasLayer, KerasTwin, keras_init_


class LeNet5(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("lenet5", input_shape, minimum=8)
        self.conv1 = Conv2d(channels, 6, 5, padding="same")
        self.conv2 = Conv2d(6, 16, 3)
        height, width = (valid_size(size // 2, 3) // 2 for size in (height, width))
        self.flatten_chw = (16, height, width)
        self.fc1 = nn.Linear(math.prod(self.flatten_chw), 120)
        self.fc2 = nn.Linear(120, 84)
        self.classifier = nn.Linear(84, num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        x = torch.relu(self.fc2(x))
        return torch.softmax(self.classifier(x), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Conv2D", self.conv1),
            KerasLayer("Conv2D", self.conv2),
            KerasLayer("Dense", self.fc1, self.flatten_chw),
            KerasLayer("Dense", self.fc2),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(1, 28, 28), num_classes=10) -> LeNet5:
    return LeNet5(input_shape, num_classes)
