"""Twin of :mod:`kbench_models.text_encoder`: Embedding(1,000, 32), the attention trunk
(position embedding, 2 pre-norm blocks whose attention masks id 0, LayerNorm), the mean
over the ids that are not 0, Dense(classes, softmax). Token ids may come as integers or
as floats holding integers, as for the Keras model."""

from __future__ import annotations

from typing import List

import mxnet as mx
from mxnet.gluon import nn

from .._attention_facts import DIM, check_token_input
from ._attention import Trunk, masked_mean, padding_mask
from ._layers import KerasLayer, KerasTwin, keras_init

VOCABULARY_SIZE = 1_000


class TextEncoder(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        check_token_input("text_encoder", input_shape, num_classes)
        with self.name_scope():
            # Keras' embeddings start as uniform(+-0.05)
            self.embedding = nn.Embedding(VOCABULARY_SIZE, DIM,
                                          weight_initializer=mx.init.Uniform(0.05))  # fmt: skip
            self.trunk = Trunk(int(input_shape[0]))
            self.classifier = nn.Dense(num_classes, in_units=DIM)
        keras_init(self)

    def hybrid_forward(self, F, tokens):  # noqa: N803 - Gluon's spelling
        x = self.trunk(self.embedding(tokens), padding_mask(F, tokens))
        return F.softmax(self.classifier(masked_mean(F, x, tokens)), axis=-1)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("Embedding", self.embedding),
            *self.trunk.keras_layers(),
            KerasLayer("Dense", self.classifier),
        ]


def build(input_shape=(64,), num_classes=2) -> TextEncoder:
    return TextEncoder(input_shape, num_classes)
