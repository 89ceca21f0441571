"""A model file that raises while it is imported (a bad-input test)."""

import keras

SETTINGS = {"width": 8}


def _read_settings():
    return SETTINGS["depth"]  # KeyError: the line a user must see


DEPTH = _read_settings()


def build(input_shape, num_classes):
    return keras.Sequential([keras.layers.Dense(num_classes)])
