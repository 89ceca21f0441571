"""Shape and padding arithmetic shared by the native ports (``pytorch``, ``gluon``).

Standard library only: each port imports it under its own framework.
"""

from __future__ import annotations

import math
from typing import Tuple


def same_pads(size: int, kernel: int, stride: int) -> Tuple[int, int]:
    """Keras' padding "same" along one axis: (before, after); the odd cell goes after."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def same_size(size: int, stride: int) -> int:
    return math.ceil(size / stride)


def valid_size(size: int, kernel: int, stride: int = 1, pad: int = 0) -> int:
    """Output size of a "valid" convolution or pooling after symmetric padding ``pad``."""
    return (size + 2 * pad - kernel) // stride + 1


def check_image_shape(name: str, input_shape, minimum: int = 1) -> Tuple[int, int, int]:
    """``input_shape`` as (channels, height, width), with a message if it is not."""
    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 3 or min(shape) < 1 or min(shape[1:]) < minimum:
        raise ValueError(
            f"{name}: input_shape must be (channels, height, width), channels first, with "
            f"height and width at least {minimum}; got {tuple(input_shape)}"
        )
    return shape
