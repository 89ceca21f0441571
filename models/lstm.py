"""LSTM sequence classifier (IMDB-style): LSTM(128) over (steps, features), then a
binary output.

Input (250, 50): 250 steps of 50 features, e.g. pre-embedded IMDB reviews. With the
default 2 classes the head is Dense(1, sigmoid) and the loss binary cross-entropy;
with more classes it is Dense(classes, softmax) for sparse categorical
cross-entropy. The LSTM's recurrent activation is set to "sigmoid" explicitly
(Keras 3's default; Keras 2.2.4 defaults to "hard_sigmoid"), so every backend runs
the same cell; see ``_compat.lstm`` for what keras-mxnet needs besides.

91,777 parameters for (250, 50) and 2 classes: LSTM 4 * (128 * (50 + 128) + 128) =
91,648, Dense 129. The count does not depend on the number of steps.
"""

from keras import layers
from keras.models import Model

from . import _compat

UNITS = 128


def encoder(x):
    """The recurrent part shared with :mod:`.lstm_embedding`."""
    return _compat.lstm(UNITS)(x)


def head(x, num_classes):
    if num_classes < 2:
        raise ValueError(f"num_classes must be 2 (binary) or more; got {num_classes}")
    if num_classes == 2:
        return layers.Dense(1, activation="sigmoid")(x)
    return layers.Dense(num_classes, activation="softmax")(x)


def build(input_shape=(250, 50), num_classes=2):
    inputs = layers.Input(shape=input_shape)
    outputs = head(encoder(inputs), num_classes)
    return Model(inputs, outputs, name="lstm")
