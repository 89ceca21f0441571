"""Twin of :mod:`kbench_models.resnet_cifar` (ResNet v1 for CIFAR, depth 6n+2);
``resnet20`` and ``resnet56`` are its depths 20 and 56.

Every convolution pads "same" the Keras way (a stride-2 3x3 convolution on an even
size pads bottom/right only, so each block is told its input size), has a bias and
an L2(1e-4) kernel penalty, which :func:`kbench_models.gluon.regularization_loss`
returns. Initialisation is ``he_normal`` for convolutions and the classifier, as in
Keras.
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from mxnet.gluon import HybridBlock, nn

from .._shapes import check_image_shape, same_size
from ._layers import Conv2D, HeNormal, KerasLayer, KerasTwin, batch_norm, keras_init

L2 = 1e-4
POOL = 8


def _conv(in_channels, filters, size, kernel_size=3, stride=1) -> Conv2D:
    return Conv2D(in_channels, filters, kernel_size, stride, padding="same", l2=L2,
                  input_size=size, weight_initializer=HeNormal())  # fmt: skip


class ResidualBlock(HybridBlock):
    """Conv-BN-ReLU-Conv-BN plus the shortcut (a strided 1x1 Conv2D, no BN, where the
    block downsamples), then ReLU. ``size`` is the (height, width) of its input."""

    def __init__(self, in_channels: int, filters: int, stride: int, size: Tuple[int, int]):
        super().__init__()
        out_size = tuple(same_size(s, stride) for s in size)
        with self.name_scope():
            self.conv_a = _conv(in_channels, filters, size, stride=stride)
            self.bn_a = batch_norm(filters)
            self.conv_b = _conv(filters, filters, out_size)
            self.bn_b = batch_norm(filters)
            self.shortcut: Optional[Conv2D] = None
            if stride != 1:
                self.shortcut = _conv(in_channels, filters, size, kernel_size=1, stride=stride)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
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
        pooled = [same_size(same_size(size, 2), 2) // POOL for size in (height, width)]
        if min(pooled) < 1:
            raise ValueError(
                f"resnet{depth}: input height and width must be at least 29 (the final "
                f"feature map is pooled by {POOL}); got input_shape {tuple(input_shape)}"
            )
        blocks = (depth - 2) // 6
        size = (height, width)
        with self.name_scope():
            self.stem = _conv(channels, 16, size)
            self.stem_bn = batch_norm(16)
            self.blocks = nn.HybridSequential()
            in_channels = 16
            for stage, filters in enumerate((16, 32, 64)):
                for block in range(blocks):
                    stride = 2 if stage > 0 and block == 0 else 1
                    self.blocks.add(ResidualBlock(in_channels, filters, stride, size))
                    size = tuple(same_size(s, stride) for s in size)
                    in_channels = filters
            self.flatten_chw = (in_channels, *pooled)
            self.classifier = nn.Dense(num_classes, in_units=math.prod(self.flatten_chw),
                                       weight_initializer=HeNormal())  # fmt: skip
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.Pooling(self.blocks(x), kernel=(POOL, POOL), stride=(POOL, POOL), pool_type="avg")
        return F.softmax(self.classifier(x), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [KerasLayer("Conv2D", self.stem), KerasLayer("BatchNormalization", self.stem_bn)]
        for block in self.blocks:
            layers += block.keras_layers()
        return layers + [KerasLayer("Dense", self.classifier, self.flatten_chw)]
