"""``def build`` inside an ``if``, for tests/test_hostile_models.py: a valid model file
whose function is defined by module-level code, one way or another."""

import os

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4

if os.environ.get("WIDE_MODEL"):

    def build(input_shape, num_classes):
        inputs = keras.Input(shape=tuple(input_shape))
        x = layers.Flatten()(inputs)
        x = layers.Dense(64, activation="relu")(x)
        outputs = layers.Dense(num_classes, activation="softmax")(x)
        return keras.Model(inputs, outputs)

else:

    def build(input_shape, num_classes):
        inputs = keras.Input(shape=tuple(input_shape))
        x = layers.Flatten()(inputs)
        outputs = layers.Dense(num_classes, activation="softmax")(x)
        return keras.Model(inputs, outputs)
