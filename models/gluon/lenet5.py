"""Twin of :mod:`kbench_models.lenet5`: Conv2D(6, 5x5, "same", relu), AveragePooling2D(2),
Conv2D(16, 3x3, "valid", relu), AveragePooling2D(2), Flatten, Dense(120, relu),
Dense(84, relu), Dense(classes, softmax). Keras' "valid" pooling drops an odd last
row/column, as MXNet's "valid" pooling convention does."""

from __future__ import annotations

import math
from typing import List

from mxnet.gluon import nn

from .._shapes import check_image_shape, valid_size
from ._layers import Conv2D, KerasLayer, KerasTwin, keras_init


class LeNet5(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("lenet5", input_shape, minimum=8)
        height, width = (valid_size(size // 2, 3) // 2 for size in (height, width))
        self.flatten_chw = (16, height, width)
        with self.name_scope():
            self.conv1 = Conv2D(channels, 6, 5, padding="same")
            self.conv2 = Conv2D(6, 16, 3)
            self.fc1 = nn.Dense(120, activation="relu", in_units=math.prod(self.flatten_chw))
            self.fc2 = nn.Dense(84, activation="relu", in_units=120)
            self.classifier = nn.Dense(num_classes, in_units=84)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.Pooling(F.relu(self.conv1(x)), kernel=(2, 2), stride=(2, 2), pool_type="avg")
        x = F.Pooling(F.relu(self.conv2(x)), kernel=(2, 2), stride=(2, 2), pool_type="avg")
        return F.softmax(self.classifier(self.fc2(self.fc1(x))), axis=-1)

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
