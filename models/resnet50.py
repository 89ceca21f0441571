"""ResNet-50 (v1) for ImageNet, layer for layer as ``keras.applications.ResNet50``
(Keras 3) builds it with ``weights=None``, written against the layers that Keras 3
and Keras 2.2.4 share.

Stem: ZeroPadding2D(3), Conv2D(64, 7x7, stride 2), BN, ReLU, ZeroPadding2D(1),
MaxPooling2D(3, stride 2). Four stages of bottleneck blocks (3, 4, 6, 3 blocks;
64, 128, 256, 512 bottleneck filters, 4x that many out). A block is Conv2D(1x1,
stride s) - BN - ReLU - Conv2D(3x3, "same") - BN - ReLU - Conv2D(1x1, 4f) - BN, added
to the shortcut, then ReLU; the first block of each stage has a Conv2D(1x1, 4f,
stride s) + BN shortcut, s = 1 in stage 1 and 2 afterwards (the stride sits on the
1x1 convolutions, as in Keras). Every Conv2D has a bias; BatchNormalization uses
epsilon 1.001e-5. Head: GlobalAveragePooling2D, Dense(classes, softmax).

53 Conv2D, 53 BatchNormalization and 1 Dense layer; 25,636,712 parameters for
224x224x3 and 1000 classes (25,583,592 trainable + 53,120 moving statistics).
"""

from keras import layers
from keras.models import Model

from ._compat import channel_axis

BN_EPSILON = 1.001e-5


def _bn(x):
    return layers.BatchNormalization(axis=channel_axis(), epsilon=BN_EPSILON)(x)


def _bottleneck(x, filters, strides=1, conv_shortcut=False):
    if conv_shortcut:
        shortcut = _bn(layers.Conv2D(4 * filters, 1, strides=strides)(x))
    else:
        shortcut = x
    x = layers.Conv2D(filters, 1, strides=strides)(x)
    x = layers.Activation("relu")(_bn(x))
    x = layers.Conv2D(filters, 3, padding="same")(x)
    x = layers.Activation("relu")(_bn(x))
    x = _bn(layers.Conv2D(4 * filters, 1)(x))
    x = layers.add([shortcut, x])
    return layers.Activation("relu")(x)


def _stage(x, filters, blocks, first_stride):
    x = _bottleneck(x, filters, strides=first_stride, conv_shortcut=True)
    for _ in range(blocks - 1):
        x = _bottleneck(x, filters)
    return x


def build(input_shape=(224, 224, 3), num_classes=1000):
    inputs = layers.Input(shape=input_shape)
    x = layers.ZeroPadding2D(((3, 3), (3, 3)))(inputs)
    x = layers.Conv2D(64, 7, strides=2)(x)
    x = layers.Activation("relu")(_bn(x))
    x = layers.ZeroPadding2D(((1, 1), (1, 1)))(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = _stage(x, 64, 3, first_stride=1)
    x = _stage(x, 128, 4, first_stride=2)
    x = _stage(x, 256, 6, first_stride=2)
    x = _stage(x, 512, 3, first_stride=2)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="resnet50")
