"""The few places where Keras 3 and Keras 2.2.4 (keras-mxnet) need one spelling.

Model modules call these instead of reaching for a version- or format-specific API,
so that nothing else in ``models/`` branches on the Keras generation or on the data
format. Both generations read ``image_data_format`` from ``keras.backend`` and build
an L2 penalty from ``keras.regularizers.l2(factor)`` (a function in 2.2.4, an alias
of the ``L2`` class in Keras 3; the positional factor works for both).
"""

import math

from keras import backend, layers, regularizers


def channel_axis() -> int:
    """The channel axis of an image tensor (batch first) for the global data format.

    BatchNormalization must normalise over this axis: both Keras generations default
    to ``axis=-1``, which is wrong for ``channels_first`` (keras-mxnet's default).
    """
    return 1 if backend.image_data_format() == "channels_first" else -1


def l2(factor: float):
    """An L2 weight penalty of ``factor * sum(w ** 2)``."""
    return regularizers.l2(factor)


def _shape(x) -> tuple:
    """The shape of a symbolic tensor (batch first) in either Keras generation."""
    return tuple(backend.int_shape(x) if hasattr(backend, "int_shape") else x.shape)


def _spatial_size(x) -> tuple:
    """(height, width) of a symbolic image tensor in either Keras generation."""
    shape = _shape(x)
    return (
        tuple(shape[2:4]) if backend.image_data_format() == "channels_first" else tuple(shape[1:3])
    )


def pad_as_keras_same(x, kernel_size: int, strides: int):
    """Zero padding that makes a following ``padding="valid"`` convolution compute what
    Keras 3's ``padding="same"`` computes: the odd pixel of an uneven split goes to the
    bottom/right. keras-mxnet pads "same" symmetrically, so a strided "same" convolution
    computes another function there; written out, every backend agrees.
    """

    def split(size: int):
        total = max((math.ceil(size / strides) - 1) * strides + kernel_size - size, 0)
        return (total // 2, total - total // 2)

    height, width = _spatial_size(x)
    return layers.ZeroPadding2D((split(height), split(width)))(x)


def lstm(units: int):
    """An LSTM layer that computes the standard LSTM in both Keras generations.

    The activations are spelled out (Keras 2.2.4 defaults the recurrent one to
    hard_sigmoid). keras-mxnet's symbolic-loop LSTM (``unroll=False``, its default)
    returns wrong outputs (zeros for some samples, measured against a NumPy LSTM);
    its unrolled graph computes the standard LSTM to 4e-8, so under keras-mxnet the
    layer is unrolled. Keras 3 keeps its fused, rolled implementation.
    """
    keras_mxnet = backend.backend() == "mxnet"
    return layers.LSTM(
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        implementation=2,
        unroll=keras_mxnet,
    )


# -- attention (models/_attention.py): tensor operations inside layers --------------
#
# Keras 3 spells them keras.ops, Keras 2.2.4 keras.backend; the names used here
# (arange, cast, equal,
# expand_dims, greater, maximum, mean, not_equal, reshape, square, sqrt, sum) mean the same in both.
try:
    from keras import ops
except ImportError:  # Keras 2.2.4 (keras-mxnet)
    ops = backend


def dtype_of(x) -> str:
    """A tensor's dtype by name ("float32", "bfloat16") in either Keras generation: what a
    constant made inside a layer is cast to, since TensorFlow adds or multiplies two
    tensors only of one dtype (under a mixed policy a layer computes in bfloat16)."""
    if hasattr(backend, "standardize_dtype"):  # Keras 3
        return backend.standardize_dtype(x.dtype)
    return backend.dtype(x)


def patches_to_sequence(x):
    """A patch embedding's map, (height, width, dim) or (dim, height, width) per the
    data format, as a sequence (height * width, dim), patches in row-major order."""
    height, width = _spatial_size(x)
    if backend.image_data_format() == "channels_first":
        x = layers.Reshape((_shape(x)[1], height * width))(x)
        return layers.Permute((2, 1))(x)
    return layers.Reshape((height * width, _shape(x)[-1]))(x)


def sequence_length(x) -> int:
    """The steps of a symbolic (steps, dim) sequence tensor."""
    return int(_shape(x)[1])
