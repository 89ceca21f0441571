"""A newcomer's functional model with layers that name an axis by Keras' default
(``axis=-1``): Concatenate and BatchNormalization. Under channels_last that is the
channels; under channels_first (keras-mxnet's default) it is the image's width, so MXNet
builds another model (BatchNormalization over 8 columns, not 12 channels)."""

from keras import layers, models

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    inputs = layers.Input(shape=tuple(input_shape))
    left = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
    right = layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = layers.Concatenate()([left, right])
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    return models.Model(inputs, layers.Dense(num_classes, activation="softmax")(x))
