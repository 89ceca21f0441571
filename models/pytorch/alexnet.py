"""Twin of :mod:`kbench_models.alexnet`: five convolutions (64, 192, 384, 256, 256; the
Keras model's ZeroPadding2D(p) + "valid" is torch's ``padding=p``) with ReLU and three
MaxPooling2D(3, 2); Flatten, Dense(4096, relu) twice, Dense(classes, softmax)."""

from __future__ import annotations

import math
from typing import List

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import check_image_shape, valid_size
from ._layers import Conv2d, KerasLayer, KerasTwin, keras_init_

# (filters, kernel, stride, padding, max-pool after), as in the Keras model
CONVS = (
    (64, 11, 4, 2, True),
    (192, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, False),
    (256, 3, 1, 1, True),
)


class AlexNet(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("alexnet", input_shape, minimum=63)
        self.convs = nn.ModuleList()
        self.pools = []
        for filters, kernel, stride, padding, pool in CONVS:
            self.convs.append(Conv2d(channels, filters, kernel, stride, padding=padding))
            self.pools.append(pool)
            height, width = (valid_size(s, kernel, stride, padding) for s in (height, width))
            if pool:
                height, width = (valid_size(s, 3, 2) for s in (height, width))
            channels = filters
        self.flatten_chw = (channels, height, width)
        self.fc1 = nn.Linear(math.prod(self.flatten_chw), 4096)
        self.fc2 = nn.Linear(4096, 4096)
        self.classifier = nn.Linear(4096, num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, pool in zip(self.convs, self.pools):
            x = F.relu(conv(x))
            if pool:
                x = F.max_pool2d(x, 3, 2)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return torch.softmax(self.classifier(x), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [KerasLayer("Conv2D", conv) for conv in self.convs] + [
            KerasLayer("Dense", self.fc1, self.flatten_chw),
            KerasLayer("Dense", self.fc2),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(3, 64, 64), num_classes=10) -> AlexNet:
    return AlexNet(input_shape, num_classes)
