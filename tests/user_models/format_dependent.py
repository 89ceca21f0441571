"""A model whose computation depends on the data format, for tests/test_tune.py: it
scales each value by its position along the last axis, which is the one channel under
channels_last (no change) and the image's columns under channels_first. Weights moved
between the formats give the same function for every other layer; this one differs, so
`kbench tune` must refuse channels_first as "computes otherwise"."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def by_position(x):
    return x * keras.ops.cumsum(keras.ops.ones_like(x), axis=-1)


def build(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Lambda(by_position)(inputs)
    x = layers.Conv2D(4, 3, activation="relu")(x)
    x = layers.Flatten()(x)
    return keras.Model(inputs, layers.Dense(num_classes, activation="softmax")(x))
