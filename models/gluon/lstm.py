"""Twin of :mod:`kbench_models.lstm`: LSTM(128) over (steps, features), returning the
last output, then Dense(1, sigmoid) for 2 classes or Dense(classes, softmax).

Gluon's fused LSTM has Keras' gate order (i, f, c, o) and two biases; the twin keeps
``h2h_bias`` at zero and frozen, so SGD updates the single Keras bias, and
``keras_param_count`` leaves it out (see ``_layers.lstm``).
"""

from __future__ import annotations

from typing import List

from mxnet.gluon import HybridBlock, nn

from ._layers import KerasLayer, KerasTwin, keras_init, lstm

UNITS = 128


class Encoder(HybridBlock):
    """LSTM(128, tanh, recurrent activation sigmoid), last output only."""

    def __init__(self, features: int) -> None:
        super().__init__()
        with self.name_scope():
            self.lstm = lstm(features, UNITS)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        # (batch, steps, units) -> the last step's output, (batch, units)
        return F.squeeze(F.slice_axis(self.lstm(x), axis=1, begin=-1, end=None), axis=1)


class Head(HybridBlock):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be 2 (binary) or more; got {num_classes}")
        self.binary = num_classes == 2
        with self.name_scope():
            self.dense = nn.Dense(1 if self.binary else num_classes, in_units=UNITS)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        logits = self.dense(x)
        return F.sigmoid(logits) if self.binary else F.softmax(logits, axis=-1)


class LSTMClassifier(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 2:
            raise ValueError(f"lstm: input_shape must be (steps, features); got {input_shape}")
        with self.name_scope():
            self.encoder = Encoder(int(input_shape[1]))
            self.head = Head(num_classes)
        keras_init(self)

    def hybrid_forward(self, F, x):  # noqa: N803 - Gluon's spelling
        return self.head(self.encoder(x))

    def keras_layers(self) -> List[KerasLayer]:
        return [KerasLayer("LSTM", self.encoder.lstm), KerasLayer("Dense", self.head.dense)]


def build(input_shape=(250, 50), num_classes=2) -> LSTMClassifier:
    return LSTMClassifier(input_shape, num_classes)
