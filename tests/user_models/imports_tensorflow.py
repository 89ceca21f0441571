"""A user model that imports TensorFlow itself, for tests/test_user_model.py: on JAX and
PyTorch kbench seeds TensorFlow when something first imports it (not while it seeds the
other generators). The build refuses, failing the run, unless TensorFlow's global seed
is the run's (0) and Keras still finds TensorFlow."""

import keras
from keras import layers


def build(input_shape, num_classes):
    from keras.src.utils.module_utils import tensorflow as keras_handle
    from tensorflow.python.eager import context

    if context.global_seed() != 0:
        raise RuntimeError(f"TensorFlow's global seed is {context.global_seed()}, not 0")
    if not keras_handle.available:
        raise RuntimeError("Keras does not find TensorFlow, which this file imported")
    inputs = keras.Input(shape=tuple(input_shape))
    outputs = layers.Dense(num_classes, activation="softmax")(layers.Flatten()(inputs))
    return keras.Model(inputs, outputs)
