"""Runs on Keras 3; keras-mxnet (Keras 2.2.4) has no LayerNormalization layer."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Flatten()(inputs)
    x = layers.Dense(16, activation="relu")(x)
    x = layers.LayerNormalization()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def build_grouped(input_shape, num_classes):
    """Conv2D's ``groups`` argument, which Keras 2.2.4 does not take."""
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Conv2D(4, 3, padding="same")(inputs)
    x = layers.Conv2D(4, 3, padding="same", groups=2)(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)
