"""VGG-16 for CIFAR-sized input, with BatchNormalization.

Five blocks of 3x3 convolutions (padding "same", stride 1): 64, 64 / 128, 128 /
256, 256, 256 / 512, 512, 512 / 512, 512, 512 -- 13 in all. Each convolution has a
bias and is followed by BatchNormalization and ReLU (the layout of torchvision's
``vgg16_bn`` features and of kuangliu/pytorch-cifar's VGG16); MaxPooling2D(2) closes
every block, so 32x32 becomes 1x1. Classifier: Flatten, Dense(512, relu),
Dense(classes, softmax). No Dropout, so a forward/backward pass is deterministic
given the weights (the Keras / PyTorch parity checks rely on that).

14,999,370 parameters for 32x32x3 and 10 classes (including 8,448 BatchNormalization
moving statistics). Input height and width must be at least 32.
"""

from keras import layers
from keras.models import Model

from ._compat import channel_axis

BLOCKS = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def build(input_shape=(32, 32, 3), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = inputs
    for block in BLOCKS:
        for filters in block:
            x = layers.Conv2D(filters, 3, padding="same")(x)
            x = layers.BatchNormalization(axis=channel_axis())(x)
            x = layers.Activation("relu")(x)
        x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(512, activation="relu")(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="vgg16")
