"""Small CNN: Conv2D(64, 3, relu), Conv2D(32, 3, relu), Flatten, Dense(classes, softmax).

203,434 parameters for 28x28x1 input and 10 classes.
"""

from keras import layers
from keras.models import Model


def build(input_shape=(28, 28, 1), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = layers.Conv2D(64, 3, activation="relu")(inputs)
    x = layers.Conv2D(32, 3, activation="relu")(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="small_cnn")
