"""ResNet v1 for CIFAR, as the Keras CIFAR-10 ResNet example (``cifar10_resnet.py``,
``resnet_v1``) defines it; ``resnet20`` and ``resnet56`` are its depths 20 and 56.

Depth 6n+2: a 3x3 Conv2D(16) stem, then three stages of n residual blocks with
16, 32 and 64 filters. A block is Conv2D(3x3) - BN - ReLU - Conv2D(3x3) - BN, added
to the shortcut, then ReLU. The first block of stages 2 and 3 halves the resolution
(stride 2 on its first convolution) and its shortcut is a 1x1 Conv2D with stride 2
and no BatchNormalization; every other shortcut is the identity. Every Conv2D has a
bias, padding "same" (for stride 2 Keras pads the odd pixel bottom/right; written out
as ZeroPadding2D so that keras-mxnet, which pads symmetrically, computes the same),
``he_normal`` initialisation and an L2(1e-4) kernel penalty. The head is
AveragePooling2D(8), Flatten, Dense(classes, softmax, ``he_normal``).

Parameters, including BatchNormalization moving statistics (``count_params()``),
for 32x32x3 input and 10 classes: ResNet-20 274,442; ResNet-56 861,770.
"""

from keras import layers
from keras.models import Model

from ._compat import channel_axis, l2, pad_as_keras_same


def _conv_bn(x, filters, kernel_size=3, strides=1, activation="relu", batch_norm=True):
    """The example's ``resnet_layer`` with ``conv_first=True``."""
    if strides != 1 and kernel_size > 1:
        x = pad_as_keras_same(x, kernel_size, strides)  # portable "same" (see _compat)
    x = layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding="same" if strides == 1 or kernel_size == 1 else "valid",
        kernel_initializer="he_normal",
        kernel_regularizer=l2(1e-4),
    )(x)
    if batch_norm:
        x = layers.BatchNormalization(axis=channel_axis())(x)
    if activation is not None:
        x = layers.Activation(activation)(x)
    return x


def resnet_v1(depth, input_shape=(32, 32, 3), num_classes=10, name=None):
    if (depth - 2) % 6 != 0:
        raise ValueError(f"ResNet v1 depth must be 6n+2 (20, 32, 44, 56, ...); got {depth}")
    blocks = (depth - 2) // 6
    inputs = layers.Input(shape=input_shape)
    filters = 16
    x = _conv_bn(inputs, filters)
    for stage in range(3):
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            y = _conv_bn(x, filters, strides=strides)
            y = _conv_bn(y, filters, activation=None)
            if strides != 1:
                x = _conv_bn(x, filters, 1, strides, activation=None, batch_norm=False)
            x = layers.add([x, y])
            x = layers.Activation("relu")(x)
        filters *= 2
    x = layers.AveragePooling2D(pool_size=8)(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax", kernel_initializer="he_normal")(x)
    return Model(inputs, outputs, name=name or f"resnet{depth}")
