"""Twin of :mod:`kbench_models.resnet_cifar` (ResNet v1 for CIFAR, depth 6n+2);
``resnet20`` and ``resnet56`` are its depths 20 and 56.

Every convolution pads "same" the Keras way (a stride-2 3x3 convolution on an even
size pads bottom/right only), has a bias and an L2(1e-4) kernel penalty, which
:func:`kbench_models.pytorch.regularization_loss` returns. Initialisation is
``he_normal`` for convolutions and the classifier, as in Keras.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import check_image_shape, same_size
from ._layers import Conv2d, KerasLayer, KerasTwin, batch_norm, he_normal_, keras_init_

L2 = 1e-4
POOL = 8


def _conv(in_channels: int, filters: int, kernel_size: int = 3, stride: int = 1) -> Conv2d:
    return Conv2d(in_channels, filters, kernel_size, stride, padding="same", l2=L2)


class ResidualBlock(nn.Module):
    """Conv-BN-ReLU-Conv-BN plus the shortcut (a strided 1x1 Conv2D, no BN, where the
    block downsamples), then ReLU."""

    def __init__(self, in_channels: int, filters: int, stride: int) -> None:
        super().__init__()
        self.conv_a = _conv(in_channels, filters, stride=stride)
        self.bn_a = batch_norm(filters)
        self.conv_b = _conv(filters, filters)
        self.bn_b = batch_norm(filters)
        self.shortcut: Optional[Conv2d] = None
        if stride != 1:
            self.shortcut = _conv(in_channels, filters, kernel_size=1, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn_a(self.conv_a(x)))
        y = self.bn_b(self.conv_b(y))
        if self.shortcut is not None:
            x = self.shortcut(x)
        return F.relu(x + y)

    def keras_layers(self) -> List[KerasLayer]:
        # the shortcut convolution is as far from the add as bn_b, and add's first input
        layers = [
            KerasLayer("Conv2D", self.conv_a),
            KerasLayer("BatchNormalization", self.bn_a),
            KerasLayer("Conv2D", self.conv_b),
        ]
        if self.shortcut is not None:
            layers.append(KerasLayer("Conv2D", self.shortcut))
        return layers + [KerasLayer("BatchNormalization", self.bn_b)]


class ResNetV1(KerasTwin):
    def __init__(self, depth: int, input_shape, num_classes: int) -> None:
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError(f"ResNet v1 depth must be 6n+2 (20, 32, 44, 56, ...); got {depth}")
        channels, height, width = check_image_shape(f"resnet{depth}", input_shape)
        height, width = (same_size(same_size(size, 2), 2) // POOL for size in (height, width))
        if min(height, width) < 1:
            raise ValueError(
                f"resnet{depth}: input height and width must be at least 29 (the final "
                f"feature map is pooled by {POOL}); got input_shape {tuple(input_shape)}"
            )
        blocks = (depth - 2) // 6
        self.stem = _conv(channels, 16)
        self.stem_bn = batch_norm(16)
        layers, in_channels = [], 16
        for stage, filters in enumerate((16, 32, 64)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(ResidualBlock(in_channels, filters, stride))
                in_channels = filters
        self.blocks = nn.Sequential(*layers)
        self.flatten_chw = (in_channels, height, width)
        self.classifier = nn.Linear(math.prod(self.flatten_chw), num_classes)
        keras_init_(self)
        for layer in self.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                he_normal_(layer.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.avg_pool2d(self.blocks(x), POOL)
        return torch.softmax(self.classifier(x.flatten(1)), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [KerasLayer("Conv2D", self.stem), KerasLayer("BatchNormalization", self.stem_bn)]
        for block in self.blocks:
            layers += block.keras_layers()
        return layers + [KerasLayer("Dense", self.classifier, self.flatten_chw)]
