"""The few places where Keras 3 and Keras 2.2.4 (keras-mxnet) need one spelling.

Model modules call these instead of reaching for a version- or format-specific API,
so that nothing else in ``models/`` branches on the Keras generation or on the data
format. Both generations read ``image_data_format`` from ``keras.backend`` and build
an L2 penalty from ``keras.regularizers.l2(factor)`` (a function in 2.2.4, an alias
of the ``L2`` class in Keras 3; the positional factor works for both).
"""

from keras import backend, regularizers


def channel_axis() -> int:
    """The channel axis of an image tensor (batch first) for the global data format.

    BatchNormalization must normalise over this axis: both Keras generations default
    to ``axis=-1``, which is wrong for ``channels_first`` (keras-mxnet's default).
    """
    return 1 if backend.image_data_format() == "channels_first" else -1


def l2(factor: float):
    """An L2 weight penalty of ``factor * sum(w ** 2)``."""
    return regularizers.l2(factor)
