"""Too narrow for its data, for tests/test_hostile_models.py: the output has 3 units
whatever ``num_classes`` is. On 4 classes, tensorflow and torch fail on the labels past
the output while jax trains without a word; kbench refuses it alike on every backend."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    return keras.Sequential(
        [keras.Input(shape=tuple(input_shape)), layers.Flatten(), layers.Dense(3, "softmax")]
    )
