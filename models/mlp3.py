"""Three-layer perceptron: Flatten, Dense(128, relu), Dense(64, relu), Dense(classes, softmax).

109,386 parameters for 28x28x1 input (784 features) and 10 classes.
"""

from keras import layers
from keras.models import Model


def build(input_shape=(28, 28, 1), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = layers.Flatten()(inputs)
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dense(64, activation="relu")(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="mlp3")
