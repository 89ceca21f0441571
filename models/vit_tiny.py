"""A tiny Vision Transformer for CIFAR-shaped images (ViT, Dosovitskiy et al. 2020, at
toy size): patch embedding, learned position embedding, 2 pre-norm encoder blocks,
mean pooling, softmax head. The blocks are :mod:`._attention`'s, composed from layers
Keras 3 and keras-mxnet's Keras 2.2.4 share.

Patch embedding: Conv2D(32, 4, strides=4) (one 4x4 patch per output pixel, following
``image_data_format``), the 8x8 map read as 64 patches in row-major order (Reshape, and
a Permute under channels_first: ``_compat.patches_to_sequence``). Then
PositionEmbedding (64, 32); 2 blocks of dim 32, 2 heads (16 each), MLP 64; a final
LayerNorm; the mean over the 64 patches; Dense(classes, softmax).

Parameters for 32x32x3 input and 10 classes (height and width must be multiples of 4):
  patch Conv2D     4 * 4 * 3 * 32 + 32                      =  1,568
  positions        64 * 32                                  =  2,048
  one block        norms 2 * 2 * 32 = 128; attention 4 * (32 * 32 + 32) = 4,224;
                   MLP (32 * 64 + 64) + (64 * 32 + 32) = 4,192   =  8,544
  2 blocks                                                  = 17,088
  final LayerNorm  2 * 32                                   =     64
  head             32 * 10 + 10                             =    330
  total                                                     = 21,098
"""

from keras import layers
from keras.models import Model

from . import _attention, _compat
from ._attention_facts import DIM

PATCH = 4


def build(input_shape=(32, 32, 3), num_classes=10):
    inputs = layers.Input(shape=input_shape)
    x = layers.Conv2D(DIM, PATCH, strides=PATCH)(inputs)
    x = _attention.trunk(_compat.patches_to_sequence(x))
    x = _attention.mean_over_steps(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return Model(inputs, outputs, name="vit_tiny")
