"""Twin of :mod:`kbench_models.vit_tiny`: Conv2D(32, 4, strides=4) patches read in
row-major order, then the attention trunk (position embedding, 2 pre-norm blocks,
LayerNorm), the mean over the patches, Dense(classes, softmax)."""

from __future__ import annotations

from typing import List

from mxnet.gluon import nn

from .._attention_facts import DIM
from .._shapes import check_image_shape
from ._attention import Trunk
from ._layers import Conv2D, KerasLayer, KerasTwin, keras_init

PATCH = 4


class ViTTiny(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        channels, height, width = check_image_shape("vit_tiny", input_shape, minimum=PATCH)
        with self.name_scope():
            self.patches = Conv2D(channels, DIM, PATCH, stride=PATCH)
            self.trunk = Trunk((height // PATCH) * (width // PATCH))
            self.classifier = nn.Dense(num_classes, in_units=DIM)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        x = F.transpose(F.reshape(self.patches(x), (0, 0, -1)), axes=(0, 2, 1))  # (N, patches, DIM)
        x = self.trunk(x)
        return F.softmax(self.classifier(F.mean(x, axis=1)), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Conv2D", self.patches),
            *self.trunk.keras_layers(),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(3, 32, 32), num_classes=10) -> ViTTiny:
    return ViTTiny(input_shape, num_classes)
