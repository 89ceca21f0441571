"""AlexNet for 64x64x3 input (CIFAR / Tiny-ImageNet images at 64x64).

The five convolutions of the single-GPU AlexNet as torchvision defines it (64, 192,
384, 256, 256 filters), with PyTorch's symmetric padding written as ZeroPadding2D +
"valid" so that a PyTorch twin computes the same thing:

    ZeroPadding2D(2), Conv2D(64, 11x11, stride 4), ReLU      64 -> 15
    MaxPooling2D(3, stride 2)                                 15 -> 7
    ZeroPadding2D(2), Conv2D(192, 5x5), ReLU                  7
    MaxPooling2D(3, stride 2)                                 7 -> 3
    ZeroPadding2D(1), Conv2D(384, 3x3), ReLU                  3
    ZeroPadding2D(1), Conv2D(256, 3x3), ReLU                  3
    ZeroPadding2D(1), Conv2D(256, 3x3), ReLU                  3
    MaxPooling2D(3, stride 2)                                 3 -> 1
    Flatten (256), Dense(4096, relu), Dense(4096, relu), Dense(classes, softmax)

No adaptive pooling to 6x6 (the 1x1 map is flattened as is) and no Dropout, so a
forward/backward pass is deterministic given the weights. 20,344,650 parameters for
64x64x3 and 10 classes. Input height and width must be at least 63.
"""

from keras import layers
from keras.models import Model

# (filters, kernel, stride, padding, max-pool after)
CONVS = (
    (64, 11, 4, 2, True),
    (192, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, False),
    (256, 3, 1, 1, True),
)


def build(input_shape=(64, 64, 3), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = inputs
    for filters, kernel, stride, padding, pool in CONVS:
        x = layers.ZeroPadding2D(padding)(x)
        x = layers.Conv2D(filters, kernel, strides=stride, activation="relu")(x)
        if pool:
            x = layers.MaxPooling2D(3, strides=2)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dense(4096, activation="relu")(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="alexnet")
