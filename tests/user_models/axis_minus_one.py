"""A newcomer's functional model with a layer that names an axis by Keras' default
(``Concatenate(axis=-1)``): under channels_last it joins the two convolutions' channels
(8 channels); under channels_first (keras-mxnet's default) it joins the images' widths
(4 channels, twice as wide), so the BatchNormalization after it has 16 parameters on
MXNet, not 32: 612 parameters in all, not 628."""

from keras import layers, models

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    inputs = layers.Input(shape=tuple(input_shape))
    left = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    right = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    x = layers.Concatenate()([left, right])
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    return models.Model(inputs, layers.Dense(num_classes, activation="softmax")(x))
