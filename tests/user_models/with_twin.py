"""A user model with its own PyTorch twin, for tests/test_user_model.py: ``build`` is
the Keras model (a convolution, batch normalization, a residual add, a softmax head);
``build_torch`` computes the same function as a ``kbench_models.pytorch.KerasTwin``,
so that torch-native runs it and ``kbench parity`` loads the Keras weights into it."""

import keras
from keras import layers

INPUT_SHAPE = (8, 8, 1)
NUM_CLASSES = 4


def build(input_shape, num_classes):
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Conv2D(6, 3, padding="same", activation="relu")(inputs)
    y = layers.Conv2D(6, 3, padding="same")(x)
    y = layers.BatchNormalization()(y)
    x = layers.Add()([x, layers.Activation("relu")(y)])
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def build_torch(input_shape, num_classes):
    """The twin: ``input_shape`` is (channels, height, width)."""
    import torch
    from torch import nn

    from kbench_models.pytorch._layers import (
        Conv2d,
        KerasLayer,
        KerasTwin,
        batch_norm,
        keras_init_,
    )

    channels, height, width = input_shape

    class Twin(KerasTwin):
        def __init__(self):
            super().__init__()
            self.conv_a = Conv2d(channels, 6, 3, padding="same")
            self.conv_b = Conv2d(6, 6, 3, padding="same")
            self.bn = batch_norm(6)  # Keras' epsilon and momentum
            self.flatten_chw = (6, height, width)
            self.dense = nn.Linear(6 * height * width, num_classes)
            keras_init_(self)

        def forward(self, x):
            x = torch.relu(self.conv_a(x))
            x = x + torch.relu(self.bn(self.conv_b(x)))
            return torch.softmax(self.dense(x.flatten(1)), dim=-1)

        def keras_layers(self):
            return [
                KerasLayer("Conv2D", self.conv_a),
                KerasLayer("Conv2D", self.conv_b),
                KerasLayer("BatchNormalization", self.bn),
                KerasLayer("Dense", self.dense, self.flatten_chw),
            ]

    return Twin()
