"""A model kbench does not ship, for tests/test_user_model.py: a small functional
network with a residual add, dropout and batch normalization, written against the
layers Keras 3 and Keras 2.2.4 (keras-mxnet) share."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    shortcut = x
    y = layers.Conv2D(8, 3, padding="same")(x)
    y = layers.BatchNormalization()(y)
    y = layers.Activation("relu")(y)
    x = layers.Add()([shortcut, y])
    x = layers.Flatten()(x)
    x = layers.Dropout(0.25)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)
