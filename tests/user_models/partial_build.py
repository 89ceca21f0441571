"""``build`` made with functools.partial, for tests/test_hostile_models.py: a valid
model file though no ``def build`` stands in it."""

import functools

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def dense_net(input_shape, num_classes, width):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Flatten()(inputs)
    x = layers.Dense(width, activation="relu")(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


build = functools.partial(dense_net, width=16)
