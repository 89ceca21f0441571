"""Keras model definitions shared by every backend.

Installed as ``kbench_models`` (never as a top-level ``models``). Nothing here
imports kbench, and nothing imports Keras at module level: the backend is fixed
when Keras is first imported, which only the worker process may do. Each model is
one ``build(input_shape, num_classes)`` function written against the layers that
Keras 3 and Keras 2.2.4 (keras-mxnet) share; layers follow the global
``image_data_format``, so the caller passes ``input_shape`` already laid out for it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Tuple


@dataclass(frozen=True)
class ModelSpec:
    """What the harness needs to know about a model without building it."""

    name: str
    module: str
    description: str
    input_shape: Tuple[int, ...]  # images: channels last (height, width, channels)
    num_classes: int
    # "image": input laid out per image_data_format; "sequence": (steps, features)
    input_kind: str = "image"

    def builder(self) -> Callable[..., Any]:
        return importlib.import_module(f".{self.module}", __name__).build


MODELS: Dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="mlp",
            module="mlp",
            description="Flatten, Dense(128, relu), Dense(classes, softmax)",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
        ModelSpec(
            name="small_cnn",
            module="small_cnn",
            description="Conv2D(64, 3, relu), Conv2D(32, 3, relu), Flatten, Dense(classes)",
            input_shape=(28, 28, 1),
            num_classes=10,
        ),
    )
}


def build(name: str, input_shape: Tuple[int, ...], num_classes: int) -> Any:
    """Build model ``name`` with the Keras that the current process imported."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; expected one of: {', '.join(MODELS)}")
    return MODELS[name].builder()(input_shape=tuple(input_shape), num_classes=num_classes)
