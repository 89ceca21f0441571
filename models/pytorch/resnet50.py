"""Twin of :mod:`kbench_models.resnet50`: ResNet-50 v1 as ``keras.applications.ResNet50``
builds it (stride on the 1x1 convolutions, biases on every Conv2D, BatchNormalization
epsilon 1.001e-5), with GlobalAveragePooling2D and Dense(classes, softmax).

ZeroPadding2D(3) + "valid" 7x7 convolution is torch's ``padding=3``. ZeroPadding2D(1)
+ MaxPooling2D(3, 2) is ``MaxPool2d(3, 2, padding=1)``: torch pads with -inf instead
of 0, which gives the same maximum because the pooled map comes out of a ReLU.
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import check_image_shape
from ._layers import Conv2d, KerasLayer, KerasTwin, batch_norm, global_average_pool, keras_init_

BN_EPSILON = 1.001e-5
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # filters, blocks, stride


def _bn(channels: int) -> nn.BatchNorm2d:
    return batch_norm(channels, epsilon=BN_EPSILON)


class Bottleneck(nn.Module):
    def __init__(self, in_channels: int, filters: int, stride: int, conv_shortcut: bool):
        super().__init__()
        self.conv1 = Conv2d(in_channels, filters, 1, stride)
        self.bn1 = _bn(filters)
        self.conv2 = Conv2d(filters, filters, 3, padding="same")
        self.bn2 = _bn(filters)
        self.conv3 = Conv2d(filters, 4 * filters, 1)
        self.bn3 = _bn(4 * filters)
        self.shortcut: Optional[Conv2d] = None
        self.shortcut_bn: Optional[nn.BatchNorm2d] = None
        if conv_shortcut:
            self.shortcut = Conv2d(in_channels, 4 * filters, 1, stride)
            self.shortcut_bn = _bn(4 * filters)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        if self.shortcut is not None:
            shortcut = self.shortcut_bn(self.shortcut(x))
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        return F.relu(shortcut + x)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [
            KerasLayer("Conv2D", self.conv1),
            KerasLayer("BatchNormalization", self.bn1),
            KerasLayer("Conv2D", self.conv2),
            KerasLayer("BatchNormalization", self.bn2),
        ]
        conv3 = KerasLayer("Conv2D", self.conv3)
        bn3 = KerasLayer("BatchNormalization", self.bn3)
        if self.shortcut is None:
            return layers + [conv3, bn3]
        # the shortcut's Conv2D and BN sit level with conv3 and bn3, and come first
        return layers + [
            KerasLayer("Conv2D", self.shortcut),
            conv3,
            KerasLayer("BatchNormalization", self.shortcut_bn),
            bn3,
        ]


class ResNet50(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, _, _ = check_image_shape("resnet50", input_shape)
        self.stem = Conv2d(channels, 64, 7, 2, padding=3)
        self.stem_bn = _bn(64)
        blocks, in_channels = [], 64
        for filters, count, stride in STAGES:
            for block in range(count):
                first = block == 0
                blocks.append(Bottleneck(in_channels, filters, stride if first else 1, first))
                in_channels = 4 * filters
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(in_channels, num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.max_pool2d(x, 3, 2, padding=1)
        x = global_average_pool(self.blocks(x))
        return torch.softmax(self.classifier(x), dim=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [KerasLayer("Conv2D", self.stem), KerasLayer("BatchNormalization", self.stem_bn)]
        for block in self.blocks:
            layers += block.keras_layers()
        return layers + [KerasLayer("Dense", self.classifier)]


def build(input_shape=(3, 224, 224), num_classes=1000) -> ResNet50:
    return ResNet50(input_shape, num_classes)
