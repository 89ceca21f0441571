"""Twin of :mod:`kbench_models.vgg16`: VGG-16 with BatchNormalization for CIFAR-sized
input: 13 "same" 3x3 Conv2D-BN-ReLU in five blocks, each closed by MaxPooling2D(2);
Flatten, Dense(512, relu), Dense(classes, softmax)."""

from __future__ import annotations

import math
from typing import List

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import check_image_shape
from ._layers import Conv2d, KerasLayer, KerasTwin, batch_norm, keras_init_

BLOCKS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


class VGG16(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("vgg16", input_shape, minimum=32)
        self.convs = nn.ModuleList()
        self.bns = nn.ModuleList()
        self.pool_after = []  # indexes of the convolutions that close a block
        for block in BLOCKS:
            for filters in block:
                self.convs.append(Conv2d(channels, filters, 3, padding="same"))
                self.bns.append(batch_norm(filters))
                channels = filters
            self.pool_after.append(len(self.convs) - 1)
        pools = len(BLOCKS)
        self.flatten_chw = (channels, height >> pools, width >> pools)
        self.fc = nn.Linear(math.prod(self.flatten_chw), 512)
        self.classifier = nn.Linear(512, num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            x = F.relu(bn(conv(x)))
            if index in self.pool_after:
                x = F.max_pool2d(x, 2)
        x = F.relu(self.fc(x.flatten(1)))
        return torch.softmax(self.classifier(x), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = []
        for conv, bn in zip(self.convs, self.bns):
            layers += [KerasLayer("Conv2D", conv), KerasLayer("BatchNormalization", bn)]
        return layers + [
            KerasLayer("Dense", self.fc, self.flatten_chw),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(3, 32, 32), num_classes=10) -> VGG16:
    return VGG16(input_shape, num_classes)
