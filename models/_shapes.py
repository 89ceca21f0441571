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


# -- Keras weights into the native ports (numpy only) ---------------------------------


def expect_shape(where: str, what: str, got, want) -> None:
    if tuple(got) != tuple(want):
        raise ValueError(f"{where}: {what} has shape {tuple(got)}, expected {tuple(want)}")


def conv_kernel_oihw(kernel, weight_shape, data_format: str, kernel_layout: str, where: str):
    """A Keras Conv2D kernel as (out, in, height, width), the native ports' layout.

    ``kernel_layout`` is "HWIO" (Keras 3), "OIHW" (keras-mxnet under channels_first) or
    "auto": told apart by shape, refused where the shape reads both ways.
    """
    out_channels, in_channels, kernel_h, kernel_w = (int(d) for d in weight_shape)
    shapes = {
        "HWIO": (kernel_h, kernel_w, in_channels, out_channels),
        "OIHW": (out_channels, in_channels, kernel_h, kernel_w),
    }
    if kernel_layout == "auto":
        # keras-mxnet (Keras 2.2.4) keeps channels_first kernels as (out, in, h, w)
        allowed = ["HWIO", "OIHW"] if data_format == "channels_first" else ["HWIO"]
        matches = [layout for layout in allowed if tuple(kernel.shape) == shapes[layout]]
        if len(matches) == 2:  # only when out == in == kernel height == width
            raise ValueError(
                f"{where}: kernel shape {tuple(kernel.shape)} reads as HWIO (Keras 3) and as "
                "OIHW (keras-mxnet, channels_first) alike; pass kernel_layout='HWIO' or 'OIHW'"
            )
        if not matches:
            wanted = " or ".join(f"{shapes[layout]} ({layout})" for layout in allowed)
            raise ValueError(f"{where}: kernel has shape {tuple(kernel.shape)}, expected {wanted}")
        kernel_layout = matches[0]
    expect_shape(where, f"{kernel_layout} kernel", kernel.shape, shapes[kernel_layout])
    return kernel.transpose(3, 2, 0, 1) if kernel_layout == "HWIO" else kernel
