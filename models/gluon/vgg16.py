"""Twin of :mod:`kbench_models.vgg16`: VGG-16 with BatchNormalization for CIFAR-sized
input: 13 "same" 3x3 Conv2D-BN-ReLU in five blocks, each closed by MaxPooling2D(2);
Flatten, Dense(512, relu), Dense(classes, softmax)."""

from __future__ import annotations

import math
from typing import List

from mxnet.gluon import nn

from .._shapes import check_image_shape
from ._layers import Conv2D, KerasLayer, KerasTwin, batch_norm, keras_init

BLOCKS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


class VGG16(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("vgg16", input_shape, minimum=32)
        self.pool_after = []  # indexes of the convolutions that close a block
        with self.name_scope():
            self.convs = nn.HybridSequential()
            self.bns = nn.HybridSequential()
            for block in BLOCKS:
                for filters in block:
                    self.convs.add(Conv2D(channels, filters, 3, padding="same"))
                    self.bns.add(batch_norm(filters))
                    channels = filters
                self.pool_after.append(len(self.convs) - 1)
            pools = len(BLOCKS)
            self.flatten_chw = (channels, height >> pools, width >> pools)
            self.fc = nn.Dense(512, activation="relu", in_units=math.prod(self.flatten_chw))
            self.classifier = nn.Dense(num_classes, in_units=512)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        for index, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            x = F.relu(bn(conv(x)))
            if index in self.pool_after:
                x = F.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max")
        return F.softmax(self.classifier(self.fc(x)), axis=-1)

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
