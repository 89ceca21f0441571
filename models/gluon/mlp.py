"""Twin of :mod:`kbench_models.mlp` (and, with two hidden layers, of ``mlp3``):
Flatten, Dense(128, relu), Dense(classes, softmax)."""

from __future__ import annotations

import math
from typing import List, Sequence

from mxnet.gluon import nn

from .._shapes import check_image_shape
from ._layers import KerasLayer, KerasTwin, keras_init


class MLP(KerasTwin):
    def __init__(self, input_shape, num_classes: int, hidden: Sequence[int] = (128,)) -> None:
        super().__init__()
        self.flatten_chw = check_image_shape(type(self).__name__, input_shape)
        sizes = [math.prod(self.flatten_chw), *hidden]
        with self.name_scope():
            self.hidden = nn.HybridSequential()
            for in_units, units in zip(sizes, sizes[1:]):
                self.hidden.add(nn.Dense(units, activation="relu", in_units=in_units))
            self.classifier = nn.Dense(num_classes, in_units=sizes[-1])
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        # Dense flattens its input as (channels, height, width)
        return F.softmax(self.classifier(self.hidden(x)), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        denses = [*self.hidden, self.classifier]
        return [KerasLayer("Dense", denses[0], self.flatten_chw)] + [
            KerasLayer("Dense", dense) for dense in denses[1:]
        ]


def build(input_shape=(1, 28, 28), num_classes=10) -> MLP:
    return MLP(input_shape, num_classes, hidden=(128,))
