"""Twin of :mod:`kbench_models.lstm`: LSTM(128) over (steps, features), returning the
last output, then Dense(1, sigmoid) for 2 classes or Dense(classes, softmax).

Keras' LSTM has one bias and torch's two: the twin keeps ``bias_hh`` at zero and
frozen (``requires_grad=False``), so SGD updates the single Keras bias, and
``keras_param_count`` leaves it out.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn

from ._layers import KerasLayer, KerasTwin, keras_init_

UNITS = 128


class Encoder(nn.Module):
    """LSTM(128, tanh, recurrent activation sigmoid), last output only."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, UNITS, batch_first=True)
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (hidden, _) = self.lstm(x)
        return hidden[-1]


class Head(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be 2 (binary) or more; got {num_classes}")
        self.binary = num_classes == 2
        self.dense = nn.Linear(UNITS, 1 if self.binary else num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.dense(x)
        return torch.sigmoid(logits) if self.binary else torch.softmax(logits, dim=-1)


class LSTMClassifier(KerasTwin):
    def __init__(self, input_shape, num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 2:
            raise ValueError(f"lstm: input_shape must be (steps, features); got {input_shape}")
        self.encoder = Encoder(int(input_shape[1]))
        self.head = Head(num_classes)
        keras_init_(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))

    def keras_layers(self) -> List[KerasLayer]:
        return [KerasLayer("LSTM", self.encoder.lstm), KerasLayer("Dense", self.head.dense)]


def build(input_shape=(250, 50), num_classes=2) -> LSTMClassifier:
    return LSTMClassifier(input_shape, num_classes)
