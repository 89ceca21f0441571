"""Model FLOPs per sample, counted from a built Keras model (worker side).

Counts the multiply-adds (2 FLOPs each) of the layers that dominate compute:
Conv2D, Dense and LSTM. Elementwise work (activations, normalization, pooling,
additions) is left out, as is usual for "model FLOPs". Training is taken as three
times the forward pass (forward, and a backward pass of about twice its cost).
Works with Keras 3 and Keras 2.2.4 layers alike.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

METHOD = (
    "multiply-adds x2 of Conv2D, Dense and LSTM layers from the built model's shapes; "
    "elementwise layers not counted; training = 3 x forward"
)


def _shapes(layer: Any) -> Tuple[Optional[tuple], Optional[tuple]]:
    """(input shape, output shape) of a layer in either Keras generation."""
    try:
        return tuple(layer.input_shape), tuple(layer.output_shape)  # Keras 2.2
    except (AttributeError, RuntimeError, TypeError):
        pass
    try:
        return tuple(layer.input.shape), tuple(layer.output.shape)  # Keras 3
    except (AttributeError, ValueError, TypeError):
        return None, None


def layer_flops(layer: Any) -> int:
    kind = type(layer).__name__
    in_shape, out_shape = _shapes(layer)
    if in_shape is None or out_shape is None:
        return 0
    config = layer.get_config()
    if kind == "Conv2D":
        channels_first = config.get("data_format") == "channels_first"
        cin = in_shape[1] if channels_first else in_shape[-1]
        spatial = out_shape[2:] if channels_first else out_shape[1:-1]
        kh, kw = config["kernel_size"]
        return 2 * kh * kw * cin * config["filters"] * math.prod(spatial)
    if kind == "Dense":
        positions = math.prod(out_shape[1:-1]) if len(out_shape) > 2 else 1
        return 2 * in_shape[-1] * config["units"] * positions
    if kind == "LSTM":
        steps, features = in_shape[1], in_shape[2]
        units = config["units"]
        return 2 * 4 * units * (features + units) * steps
    return 0


def model_flops(model: Any) -> Dict[str, Any]:
    # int(): keras-mxnet reports shapes as numpy integers
    forward = int(sum(layer_flops(layer) for layer in model.layers))
    return {"forward_per_sample": forward, "train_per_sample": 3 * forward, "method": METHOD}
