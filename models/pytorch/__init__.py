"""Native PyTorch twins of the Keras models, and weight transfer from Keras.

Installed as ``kbench_models.pytorch``; imports torch, so only processes that have
it import this package (``kbench_models`` itself never does). Each model module here
has the name of its Keras counterpart in ``models/`` and one ``build(input_shape,
num_classes)`` whose ``input_shape`` is channels first for images. A twin returns what
the Keras model returns (softmax probabilities, or the sigmoid probability of shape
(N, 1) for the binary LSTM heads), and computes it the same way: Keras' padding
rules, BatchNormalization epsilon and momentum, Dense/Conv2D initialisers, and an
LSTM with one bias.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from .. import MODELS
from .._shapes import conv_kernel_oihw
from .._shapes import expect_shape as _expect
from ._layers import KerasLayer, KerasTwin

__all__ = [
    "KerasTwin",
    "build",
    "keras_param_count",
    "load_keras_weights",
    "regularization_loss",
]

DATA_FORMATS = ("channels_last", "channels_first")
KERNEL_LAYOUTS = ("auto", "HWIO", "OIHW")


def build(name: str, input_shape: Tuple[int, ...], num_classes: int) -> KerasTwin:
    """The twin of ``kbench_models.MODELS[name]``.

    ``input_shape`` is (channels, height, width) for images, (steps, features) for
    input_kind "sequence" and (steps,) for "tokens".
    """
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; expected one of: {', '.join(MODELS)}")
    module = importlib.import_module(f".{MODELS[name].module}", __name__)
    return module.build(input_shape=tuple(input_shape), num_classes=num_classes)


# -- weight transfer ----------------------------------------------------------------

Assignment = Tuple[torch.Tensor, np.ndarray]


def _conv2d(layer: KerasLayer, arrays, data_format, kernel_layout, where) -> List[Assignment]:
    conv = layer.module
    weight = conv_kernel_oihw(arrays[0], conv.weight.shape, data_format, kernel_layout, where)
    assignments = [(conv.weight, weight)]
    if conv.bias is not None:
        _expect(where, "bias", arrays[1].shape, (conv.weight.shape[0],))
        assignments.append((conv.bias, arrays[1]))
    return assignments


def _batch_norm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    bn = layer.module
    targets = (bn.weight, bn.bias, bn.running_mean, bn.running_var)
    names = ("gamma", "beta", "moving_mean", "moving_variance")
    for name, array in zip(names, arrays):
        _expect(where, name, array.shape, (bn.num_features,))
    return list(zip(targets, arrays))


def _dense(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    linear = layer.module
    kernel, bias = arrays
    _expect(where, "kernel", kernel.shape, (linear.in_features, linear.out_features))
    _expect(where, "bias", bias.shape, (linear.out_features,))
    if layer.flatten_chw is not None:
        # Keras' Flatten moves channels last before flattening in channels_first too
        # (Keras 3 and 2.2.4 alike), so its rows run (height, width, channels) in both
        # formats; the twin flattens NCHW as (channels, height, width)
        channels, height, width = layer.flatten_chw
        kernel = kernel.reshape(height, width, channels, -1).transpose(2, 0, 1, 3)
        kernel = kernel.reshape(linear.in_features, linear.out_features)
    return [(linear.weight, kernel.T), (linear.bias, bias)]


def _lstm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    lstm = layer.module
    features, units = lstm.input_size, lstm.hidden_size
    kernel, recurrent, bias = arrays
    _expect(where, "kernel", kernel.shape, (features, 4 * units))
    _expect(where, "recurrent_kernel", recurrent.shape, (units, 4 * units))
    _expect(where, "bias", bias.shape, (4 * units,))
    # Keras' gate order i, f, c, o is torch's i, f, g, o; Keras has one bias
    return [
        (lstm.weight_ih_l0, kernel.T),
        (lstm.weight_hh_l0, recurrent.T),
        (lstm.bias_ih_l0, bias),
        (lstm.bias_hh_l0, np.zeros_like(bias)),
    ]


def _embedding(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    embedding = layer.module
    _expect(where, "embeddings", arrays[0].shape, tuple(embedding.weight.shape))
    return [(embedding.weight, arrays[0])]


def _layer_norm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    norm = layer.module
    for name, array in zip(("gamma", "beta"), arrays):
        _expect(where, name, array.shape, tuple(norm.weight.shape))
    return [(norm.weight, arrays[0]), (norm.bias, arrays[1])]


def _position_embedding(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    positions = layer.module
    _expect(where, "embeddings", arrays[0].shape, tuple(positions.weight.shape))
    return [(positions.weight, arrays[0])]


_LOADERS: Dict[str, Tuple[Callable[..., List[Assignment]], Callable[[nn.Module], int]]] = {
    # kind: (loader, number of Keras weight arrays)
    "Conv2D": (_conv2d, lambda conv: 1 if conv.bias is None else 2),
    "BatchNormalization": (_batch_norm, lambda bn: 4),
    "Dense": (_dense, lambda linear: 2),
    "LSTM": (_lstm, lambda lstm: 3),
    "Embedding": (_embedding, lambda embedding: 1),
    "LayerNorm": (_layer_norm, lambda norm: 2),
    "PositionEmbedding": (_position_embedding, lambda positions: 1),
}


def load_keras_weights(
    module: KerasTwin,
    keras_weights: Sequence[Tuple[str, Sequence[Any]]],
    data_format: str,
    *,
    kernel_layout: str = "auto",
) -> None:
    """Copy a Keras model's weights into its twin.

    ``keras_weights`` holds ``(layer class name, layer.get_weights())`` for every Keras
    layer that has weights, in ``model.layers`` order. ``data_format`` is the
    ``image_data_format`` the Keras model was built with. It does not change the row
    order of the first Dense kernel after a Flatten: Keras' Flatten puts channels last
    before flattening in either format, so those rows always run (height, width,
    channels) and are reordered for the twin's NCHW flatten. It does change Conv2D
    kernels: HWIO in Keras 3 and in keras-mxnet's channels_last, but OIHW in
    keras-mxnet's channels_first, which ``kernel_layout="auto"`` tells apart by shape
    (pass "HWIO" or "OIHW" where out == in == kernel size). Every layer is checked before
    anything is copied: on a mismatch this raises a ValueError naming the layer and
    leaves ``module`` unchanged.
    """
    if data_format not in DATA_FORMATS:
        raise ValueError(
            f"data_format must be one of {', '.join(DATA_FORMATS)}; got {data_format!r}"
        )
    if kernel_layout not in KERNEL_LAYOUTS:
        raise ValueError(
            f"kernel_layout must be one of {', '.join(KERNEL_LAYOUTS)}; got {kernel_layout!r}"
        )
    if not isinstance(module, KerasTwin):
        raise TypeError(
            f"expected a twin from kbench_models.pytorch.build(); got {type(module).__name__}"
        )
    layers = module.keras_layers()
    names = {id(sub): name for name, sub in module.named_modules()}
    keras_weights = list(keras_weights)
    if len(keras_weights) != len(layers):
        raise ValueError(
            f"{type(module).__name__}: expected {len(layers)} Keras layers with weights "
            f"({', '.join(layer.kind for layer in layers)}); got {len(keras_weights)} "
            f"({', '.join(str(kind) for kind, _ in keras_weights)})"
        )
    assignments: List[Assignment] = []
    for index, (layer, (kind, arrays)) in enumerate(zip(layers, keras_weights)):
        where = f"Keras layer {index} ({kind}) -> twin {names[id(layer.module)]!r}"
        if kind != layer.kind:
            raise ValueError(f"{where}: expected a {layer.kind} layer, got a {kind}")
        load, count = _LOADERS[layer.kind]
        arrays = [np.asarray(array) for array in arrays]
        if len(arrays) != count(layer.module):
            raise ValueError(
                f"{where}: expected {count(layer.module)} weight arrays, got {len(arrays)}"
            )
        assignments += load(layer, arrays, data_format, kernel_layout, where)
    with torch.no_grad():
        for target, value in assignments:
            value = torch.from_numpy(np.ascontiguousarray(value))
            target.copy_(value.to(device=target.device, dtype=target.dtype))


# -- what Keras adds to the loss and counts -----------------------------------------


def regularization_loss(module: nn.Module) -> torch.Tensor:
    """The weight penalty the Keras model adds to its loss: sum of l2 * sum(kernel**2)
    over the layers built with a kernel_regularizer; zero for the other models."""
    total = None
    for layer in module.modules():
        factor = getattr(layer, "l2", 0.0)
        if factor:
            term = factor * layer.weight.square().sum()
            total = term if total is None else total + term
    if total is None:
        first = next(module.parameters(), None)
        return torch.zeros((), device=None if first is None else first.device)
    return total


def keras_param_count(module: nn.Module) -> int:
    """What Keras' ``count_params()`` counts: the parameters and the BatchNormalization
    moving mean and variance, counting one LSTM bias (Keras has one, torch two)."""
    total = sum(p.numel() for p in module.parameters())
    for layer in module.modules():
        if isinstance(layer, nn.modules.batchnorm._BatchNorm) and layer.track_running_stats:
            total += layer.running_mean.numel() + layer.running_var.numel()
        elif isinstance(layer, nn.LSTM) and layer.bias:
            total -= sum(p.numel() for n, p in layer.named_parameters() if "bias_hh" in n)
    return total
