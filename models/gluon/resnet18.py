"""Twin of :mod:`kbench_models.resnet18`: ResNet-18 for CIFAR (3x3 stem, no max-pool,
BasicBlocks 64-512, GlobalAveragePooling2D, Dense(classes, softmax)).

The Keras model pads symmetrically (stride-1 "same", and ZeroPadding2D(1) before the
stride-2 convolutions), which is Gluon's ``padding=1``. Convolutions have no bias.
"""

from __future__ import annotations

from typing import List, Optional

from mxnet.gluon import HybridBlock, nn

from .._shapes import check_image_shape
from ._layers import Conv2D, KerasLayer, KerasTwin, batch_norm, keras_init

STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (filters, first block's stride)


def _conv3x3(in_channels: int, filters: int, stride: int = 1) -> Conv2D:
    return Conv2D(in_channels, filters, 3, stride, padding=1, bias=False)


class BasicBlock(HybridBlock):
    def __init__(self, in_channels: int, filters: int, stride: int) -> None:
        super().__init__()
        with self.name_scope():
            self.conv_a = _conv3x3(in_channels, filters, stride)
            self.bn_a = batch_norm(filters)
            self.conv_b = _conv3x3(filters, filters)
            self.bn_b = batch_norm(filters)
            self.shortcut: Optional[Conv2D] = None
            self.shortcut_bn: Optional[nn.BatchNorm] = None
            if stride != 1 or in_channels != filters:
                self.shortcut = Conv2D(in_channels, filters, 1, stride, bias=False)
                self.shortcut_bn = batch_norm(filters)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        shortcut = x
        if self.shortcut is not None:
            shortcut = self.shortcut_bn(self.shortcut(x))
        y = F.relu(self.bn_a(self.conv_a(x)))
        y = self.bn_b(self.conv_b(y))
        return F.relu(shortcut + y)

    def keras_layers(self) -> List[KerasLayer]:
        a = [KerasLayer("Conv2D", self.conv_a), KerasLayer("BatchNormalization", self.bn_a)]
        b = [KerasLayer("Conv2D", self.conv_b), KerasLayer("BatchNormalization", self.bn_b)]
        if self.shortcut is None:
            return a + b
        # the shortcut's Conv2D and BN sit level with conv_b and bn_b, and come first
        shortcut = [
            KerasLayer("Conv2D", self.shortcut),
            KerasLayer("BatchNormalization", self.shortcut_bn),
        ]
        return a + [shortcut[0], b[0], shortcut[1], b[1]]


class ResNet18(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, _, _ = check_image_shape("resnet18", input_shape)
        with self.name_scope():
            self.stem = _conv3x3(channels, 64)
            self.stem_bn = batch_norm(64)
            self.blocks = nn.HybridSequential()
            in_channels = 64
            for filters, first_stride in STAGES:
                for block in range(2):
                    stride = first_stride if block == 0 else 1
                    self.blocks.add(BasicBlock(in_channels, filters, stride))
                    in_channels = filters
            self.classifier = nn.Dense(num_classes, in_units=in_channels)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.mean(self.blocks(x), axis=(2, 3))  # GlobalAveragePooling2D
        return F.softmax(self.classifier(x), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [KerasLayer("Conv2D", self.stem), KerasLayer("BatchNormalization", self.stem_bn)]
        for block in self.blocks:
            layers += block.keras_layers()
        return layers + [KerasLayer("Dense", self.classifier)]


def build(input_shape=(3, 32, 32), num_classes=10) -> ResNet18:
    return ResNet18(input_shape, num_classes)
