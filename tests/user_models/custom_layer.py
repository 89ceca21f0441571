"""A custom layer written as Keras 3 writes one: ``add_weight`` without a name, which
Keras 2.2.4 (keras-mxnet) requires (a case of tests/test_hostile_models.py's list, run
among tests/test_user_model.py's refusals)."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


class Scale(layers.Layer):
    """Multiplies each feature by a learned factor."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        return x * self.scale


def build(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Flatten()(inputs)
    x = Scale()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)
