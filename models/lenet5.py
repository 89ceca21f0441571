"""LeNet-5 style CNN for MNIST-sized input.

Conv2D(6, 5x5, padding "same", relu), AveragePooling2D(2), Conv2D(16, 3x3, padding
"valid", relu), AveragePooling2D(2), Flatten, Dense(120, relu), Dense(84, relu),
Dense(classes, softmax).

The first convolution pads ("same") so that 28x28 MNIST digits keep the 28x28 map
that the original network got from its 32x32 padded input; the second is unpadded,
as in the original (which used 5x5 there; this variant uses 3x3). For 28x28x1 input:
28 -> pool 14 -> conv 12 -> pool 6, Flatten gives 6*6*16 = 576 features and the
model has 81,290 parameters with 10 classes.
"""

from keras import layers
from keras.models import Model


def build(input_shape=(28, 28, 1), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = layers.Conv2D(6, 5, padding="same", activation="relu")(inputs)
    x = layers.AveragePooling2D(2)(x)
    x = layers.Conv2D(16, 3, padding="valid", activation="relu")(x)
    x = layers.AveragePooling2D(2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(120, activation="relu")(x)
    x = layers.Dense(84, activation="relu")(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="lenet5")
