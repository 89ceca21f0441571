"""ResNet-18 for CIFAR (the common CIFAR variant, as in kuangliu/pytorch-cifar).

Stem: Conv2D(64, 3x3, stride 1) - BN - ReLU, no max-pool. Four stages of two
BasicBlocks with 64, 128, 256 and 512 filters; the first block of stages 2-4 has
stride 2. A BasicBlock is Conv2D(3x3) - BN - ReLU - Conv2D(3x3) - BN, added to the
shortcut, then ReLU; the shortcut is a 1x1 Conv2D (with the block's stride) + BN where
the shape changes, else the identity. Head: GlobalAveragePooling2D, Dense(classes,
softmax). Convolutions have no bias (BatchNormalization follows each one) and use
Keras' default initialisation; no weight penalty.

Padding is symmetric, as PyTorch's ``padding=1``: stride-1 3x3 convolutions use
"same" and stride-2 ones ZeroPadding2D(1) then "valid" (Keras' "same" would pad
bottom/right only), so a PyTorch twin computes the same thing.

11,183,562 parameters for 32x32x3 and 10 classes: 11,173,962 trainable (the
PyTorch model's count) plus 9,600 BatchNormalization moving statistics. The count
does not depend on the input size.
"""

from keras import layers
from keras.models import Model

from ._compat import channel_axis


def _conv3x3(x, filters, strides=1):
    if strides == 1:
        return layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
    x = layers.ZeroPadding2D(1)(x)
    return layers.Conv2D(filters, 3, strides=strides, padding="valid", use_bias=False)(x)


def _basic_block(x, filters, strides, project):
    shortcut = x
    if project:
        shortcut = layers.Conv2D(filters, 1, strides=strides, use_bias=False)(x)
        shortcut = layers.BatchNormalization(axis=channel_axis())(shortcut)
    y = _conv3x3(x, filters, strides)
    y = layers.BatchNormalization(axis=channel_axis())(y)
    y = layers.Activation("relu")(y)
    y = _conv3x3(y, filters)
    y = layers.BatchNormalization(axis=channel_axis())(y)
    x = layers.add([shortcut, y])
    return layers.Activation("relu")(x)


def build(input_shape=(32, 32, 3), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = _conv3x3(inputs, 64)
    x = layers.BatchNormalization(axis=channel_axis())(x)
    x = layers.Activation("relu")(x)
    channels = 64
    for filters, first_stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            strides = first_stride if block == 0 else 1
            x = _basic_block(x, filters, strides, project=strides != 1 or channels != filters)
            channels = filters
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="resnet18")
