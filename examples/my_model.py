"""Your own model for kbench: ``kbench run --model examples/my_model.py:build``.

kbench imports this file only in the worker process of each run, after choosing the
backend, so write it against the ``keras`` package as if for one backend; the same
file then runs on tensorflow, jax and torch (Keras 3) and on mxnet (keras-mxnet,
Keras 2.2.4) where it uses only layers and arguments Keras 2.2.4 has. A layer or an
argument that Keras 2.2.4 lacks makes the mxnet run ``unsupported``, naming it.

The contract, the same as the zoo's models in ``models/``:

- ``build(input_shape, num_classes)`` returns a Keras model (``keras.Model`` or
  ``keras.Sequential``). ``input_shape`` comes laid out for the run's
  ``image_data_format``, e.g. (28, 28, 1) for channels_last and (1, 28, 28) for
  channels_first (mxnet's default), so pass it on as it is and let the layers follow
  the global data format (no ``data_format=`` arguments). The model outputs
  ``num_classes`` probabilities (softmax) for the default loss. Another function
  name works too: ``--model examples/my_model.py:build_small``.
- Optional hooks, as plain literals (kbench reads them without running the file):
  ``INPUT_SHAPE`` and ``NUM_CLASSES``, the defaults for ``--dataset synthetic``;
  ``INPUT_KIND``: "image" (default), "sequence" (steps, features) or "tokens"
  (steps,) with ``VOCABULARY_SIZE``; ``LOSS``: the loss the output is made for,
  "sparse_categorical_crossentropy" (default) or "binary_crossentropy" (one sigmoid
  output, two classes).
- The file may import modules beside it (its folder is put first on ``sys.path``).
- Optional PyTorch twin for ``--backend torch-native`` (and ``kbench parity``): a
  function named after the Keras one plus ``_torch`` (``build_torch`` for ``build``;
  here ``build_small_torch``), taking ``input_shape`` channels first, returning a
  ``kbench_models.pytorch.KerasTwin``: a ``torch.nn.Module`` computing the same function
  whose ``keras_layers()`` lists the Keras model's weighted layers in order, so that
  parity loads the Keras weights into it. Without one, torch-native is ``unsupported``.

Every result records this file's path, the function and the file's sha256, so two
results of "the same" model are known to be the same code.

Try it:

    kbench run -b tensorflow,jax,torch,mxnet --model examples/my_model.py:build \\
        --dataset synthetic --steps 20
    kbench parity --model examples/my_model.py:build_small -b tensorflow,torch-native
"""

import keras
from keras import layers

INPUT_SHAPE = (28, 28, 1)  # default for --dataset synthetic (channels last)
NUM_CLASSES = 10  # default for --dataset synthetic
INPUT_KIND = "image"
LOSS = "sparse_categorical_crossentropy"


def _block(x, filters):
    """Two 3x3 convolutions with batch normalization and an identity shortcut."""
    shortcut = x
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
    y = layers.BatchNormalization()(y)
    y = layers.Activation("relu")(y)
    y = layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
    y = layers.BatchNormalization()(y)
    y = layers.Add()([shortcut, y])
    return layers.Activation("relu")(y)


def build(input_shape, num_classes):
    """A small residual CNN: stem, two residual blocks, pooling, dropout, softmax."""
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = _block(x, 16)
    x = layers.MaxPooling2D(2)(x)
    x = _block(x, 16)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def build_small(input_shape, num_classes):
    """The same idea without the residual blocks, to compare against."""
    inputs = keras.Input(shape=tuple(input_shape))
    x = layers.Conv2D(16, 3, activation="relu")(inputs)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Flatten()(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def build_small_torch(input_shape, num_classes):
    """The PyTorch twin of build_small (torch-native); ``input_shape`` is (C, H, W)."""
    import torch
    from torch import nn

    from kbench_models.pytorch._layers import Conv2d, KerasLayer, KerasTwin, keras_init_

    channels, height, width = input_shape
    flatten_chw = (16, (height - 2) // 2, (width - 2) // 2)  # after the valid 3x3, pool 2

    class SmallTwin(KerasTwin):
        def __init__(self):
            super().__init__()
            self.conv = Conv2d(channels, 16, 3)  # "valid", as Keras' default
            self.dense = nn.Linear(flatten_chw[0] * flatten_chw[1] * flatten_chw[2], num_classes)
            keras_init_(self)  # Keras' initialisers (parity overwrites them anyway)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.conv(x)), 2)
            return torch.softmax(self.dense(x.flatten(1)), dim=-1)

        def keras_layers(self):
            # Dense after Flatten: the twin reorders the Keras kernel's rows, given the
            # (channels, height, width) it flattens
            return [KerasLayer("Conv2D", self.conv), KerasLayer("Dense", self.dense, flatten_chw)]

    return SmallTwin()
