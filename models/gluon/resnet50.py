"""Twin of :mod:`kbench_models.resnet50`: ResNet-50 v1 as ``keras.applications.ResNet50``
builds it (stride on the 1x1 convolutions, biases on every Conv2D, BatchNormalization
epsilon 1.001e-5), with GlobalAveragePooling2D and Dense(classes, softmax).

ZeroPadding2D(3) + "valid" 7x7 convolution is Gluon's ``padding=3``. ZeroPadding2D(1)
+ MaxPooling2D(3, 2) is a max pooling with ``pad=(1, 1)``: MXNet pads with -inf
instead of 0, which gives the same maximum because the pooled map comes out of a ReLU.
"""

from __future__ import annotations

from typing import List, Optional

from mxnet.gluon import HybridBlock, nn

from .._shapes import check_image_shape
from ._layers import Conv2D, KerasLayer, KerasTwin, batch_norm, keras_init

BN_EPSILON = 1.001e-5
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # filters, blocks, stride


def _bn(channels: int) -> nn.BatchNorm:
    return batch_norm(channels, epsilon=BN_EPSILON)


class Bottleneck(HybridBlock):
    def __init__(self, in_channels: int, filters: int, stride: int, conv_shortcut: bool):
        super().__init__()
        with self.name_scope():
            self.conv1 = Conv2D(in_channels, filters, 1, stride)
            self.bn1 = _bn(filters)
            self.conv2 = Conv2D(filters, filters, 3, padding="same")
            self.bn2 = _bn(filters)
            self.conv3 = Conv2D(filters, 4 * filters, 1)
            self.bn3 = _bn(4 * filters)
            self.shortcut: Optional[Conv2D] = None
            self.shortcut_bn: Optional[nn.BatchNorm] = None
            if conv_shortcut:
                self.shortcut = Conv2D(in_channels, 4 * filters, 1, stride)
                self.shortcut_bn = _bn(4 * filters)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
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
        with self.name_scope():
            self.stem = Conv2D(channels, 64, 7, 2, padding=3)
            self.stem_bn = _bn(64)
            self.blocks = nn.HybridSequential()
            in_channels = 64
            for filters, count, stride in STAGES:
                for block in range(count):
                    first = block == 0
                    self.blocks.add(Bottleneck(in_channels, filters, stride if first else 1, first))
                    in_channels = 4 * filters
            self.classifier = nn.Dense(num_classes, in_units=in_channels)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.relu(self.stem_bn(self.stem(x)))
        x = F.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
        x = F.mean(self.blocks(x), axis=(2, 3))  # GlobalAveragePooling2D
        return F.softmax(self.classifier(x), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        layers = [KerasLayer("Conv2D", self.stem), KerasLayer("BatchNormalization", self.stem_bn)]
        for block in self.blocks:
            layers += block.keras_layers()
        return layers + [KerasLayer("Dense", self.classifier)]


def build(input_shape=(3, 224, 224), num_classes=1000) -> ResNet50:
    return ResNet50(input_shape, num_classes)
