"""Twin of :mod:`kbench_models.mlp3`: Flatten, Dense(128, relu), Dense(64, relu),
Dense(classes, softmax)."""

from __future__ import annotations

from .mlp import MLP


def build(input_shape=(1, 28, 28), num_classes=10) -> MLP:
    return MLP(input_shape, num_classes, hidden=(128, 64))
