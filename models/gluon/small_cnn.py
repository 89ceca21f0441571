"""Twin of :mod:`kbench_models.small_cnn`: Conv2D(64, 3, relu), Conv2D(32, 3, relu),
Flatten, Dense(classes, softmax); "valid" convolutions."""

from __future__ import annotations

import math
from typing import List

from mxnet.gluon import nn

from .._shapes import check_image_shape
from ._layers import Conv2D, KerasLayer, KerasTwin, keras_init


class SmallCNN(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("small_cnn", input_shape, minimum=5)
        self.flatten_chw = (32, height - 4, width - 4)
        with self.name_scope():
            self.conv1 = Conv2D(channels, 64, 3)
            self.conv2 = Conv2D(64, 32, 3)
            self.classifier = nn.Dense(num_classes, in_units=math.prod(self.flatten_chw))
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return F.softmax(self.classifier(x), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Conv2D", self.conv1),
            KerasLayer("Conv2D", self.conv2),
            KerasLayer("Dense", self.classifier, self.flatten_chw),
        ]


def build(input_shape=(1, 28, 28), num_classes=10) -> SmallCNN:
    return SmallCNN(input_shape, num_classes)
