"""Native MXNet Gluon twins of the Keras models, and weight transfer from Keras.

Installed as ``kbench_models.gluon``; imports mxnet (and neither Keras nor torch), so
only processes that have it import this package. Each model module here has the name
of its Keras counterpart in ``models/`` and one ``build(input_shape, num_classes)``
whose ``input_shape`` is channels first for images. A twin is a ``HybridBlock`` with
its parameters created and initialised as Keras initialises them, on the CPU; it
returns what the Keras model returns (softmax probabilities, the sigmoid probability
of shape (N, 1) for the binary LSTM heads, or decoder_lm's next-token logits), and
computes it the same way: Keras' padding rules, BatchNormalization epsilon and
momentum, an LSTM with one bias and Keras' gate order, the attention models' heads and
masks (``_attention``). It runs imperatively or hybridized alike.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Sequence, Tuple

import mxnet as mx
import numpy as np
from mxnet.gluon import Parameter, nn, rnn

from .. import MODELS
from .._shapes import conv_kernel_oihw
from .._shapes import expect_shape as _expect
from ._layers import Conv2D, KerasLayer, KerasTwin, blocks

__all__ = [
    "KerasTwin",
    "build",
    "keras_param_count",
    "load_keras_weights",
    "regularization_loss",
    "weight_penalties",
]

DATA_FORMATS = ("channels_last", "channels_first")
KERNEL_LAYOUTS = ("auto", "HWIO", "OIHW")


def build(name: str, input_shape: Tuple[int, ...], num_classes: int) -> KerasTwin:
    """The Gluon twin of ``kbench_models.MODELS[name]``, initialised on the CPU.

    ``input_shape`` is (channels, height, width) for images, (steps, features) for
    input_kind "sequence" and (steps,) for "tokens".
    """
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; expected one of: {', '.join(MODELS)}")
    module = importlib.import_module(f".{MODELS[name].module}", __name__)
    return module.build(input_shape=tuple(input_shape), num_classes=num_classes)


# -- weight transfer ----------------------------------------------------------------

Assignment = Tuple[Parameter, np.ndarray]


def _conv2d(layer: KerasLayer, arrays, data_format, kernel_layout, where) -> List[Assignment]:
    conv = layer.block
    weight = conv_kernel_oihw(arrays[0], conv.weight.shape, data_format, kernel_layout, where)
    assignments = [(conv.weight, weight)]
    if conv.bias is not None:
        _expect(where, "bias", arrays[1].shape, (conv.weight.shape[0],))
        assignments.append((conv.bias, arrays[1]))
    return assignments


def _batch_norm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    bn = layer.block
    targets = (bn.gamma, bn.beta, bn.running_mean, bn.running_var)
    names = ("gamma", "beta", "moving_mean", "moving_variance")
    for name, array in zip(names, arrays):
        _expect(where, name, array.shape, bn.gamma.shape)
    return list(zip(targets, arrays))


def _dense(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    dense = layer.block
    units, in_units = dense.weight.shape
    kernel, bias = arrays
    _expect(where, "kernel", kernel.shape, (in_units, units))
    _expect(where, "bias", bias.shape, (units,))
    if layer.flatten_chw is not None:
        # Keras' Flatten moves channels last before flattening in channels_first too
        # (Keras 3 and 2.2.4 alike), so its rows run (height, width, channels) in both
        # formats; Gluon's Dense flattens NCHW as (channels, height, width)
        channels, height, width = layer.flatten_chw
        kernel = kernel.reshape(height, width, channels, -1).transpose(2, 0, 1, 3)
        kernel = kernel.reshape(in_units, units)
    return [(dense.weight, kernel.T), (dense.bias, bias)]


def _lstm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    lstm = layer.block
    units4, features = lstm.l0_i2h_weight.shape
    units = units4 // 4
    kernel, recurrent, bias = arrays
    _expect(where, "kernel", kernel.shape, (features, 4 * units))
    _expect(where, "recurrent_kernel", recurrent.shape, (units, 4 * units))
    _expect(where, "bias", bias.shape, (4 * units,))
    # Keras' gate order i, f, c, o is Gluon's; Keras has one bias
    return [
        (lstm.l0_i2h_weight, kernel.T),
        (lstm.l0_h2h_weight, recurrent.T),
        (lstm.l0_i2h_bias, bias),
        (lstm.l0_h2h_bias, np.zeros_like(bias)),
    ]


def _embedding(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    embedding = layer.block
    _expect(where, "embeddings", arrays[0].shape, embedding.weight.shape)
    return [(embedding.weight, arrays[0])]


def _layer_norm(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    norm = layer.block
    for name, array in zip(("gamma", "beta"), arrays):
        _expect(where, name, array.shape, norm.gamma.shape)
    return [(norm.gamma, arrays[0]), (norm.beta, arrays[1])]


def _position_embedding(layer: KerasLayer, arrays, data_format, kernel_layout, where):
    positions = layer.block
    _expect(where, "embeddings", arrays[0].shape, positions.weight.shape)
    return [(positions.weight, arrays[0])]


_LOADERS: Dict[str, Tuple[Callable[..., List[Assignment]], Callable[[Any], int]]] = {
    # kind: (loader, number of Keras weight arrays)
    "Conv2D": (_conv2d, lambda conv: 1 if conv.bias is None else 2),
    "BatchNormalization": (_batch_norm, lambda bn: 4),
    "Dense": (_dense, lambda dense: 2),
    "LSTM": (_lstm, lambda lstm: 3),
    "Embedding": (_embedding, lambda embedding: 1),
    "LayerNorm": (_layer_norm, lambda norm: 2),
    "PositionEmbedding": (_position_embedding, lambda positions: 1),
}


def load_keras_weights(
    net: KerasTwin,
    keras_weights: Sequence[Tuple[str, Sequence[Any]]],
    data_format: str,
    *,
    kernel_layout: str = "auto",
) -> None:
    """Copy a Keras model's weights into its Gluon twin.

    ``keras_weights`` holds ``(layer class name, layer.get_weights())`` for every Keras
    layer that has weights, in ``model.layers`` order (as ``Backend.get_weights``
    exports them). ``data_format`` is the ``image_data_format`` the Keras model was
    built with. It does not change the row order of the first Dense kernel after a
    Flatten: Keras' Flatten puts channels last before flattening in either format, so
    those rows always run (height, width, channels) and are reordered for Gluon's NCHW
    flatten. Conv2D kernels are HWIO in Keras 3 and in keras-mxnet's channels_last, but
    OIHW in keras-mxnet's channels_first, which ``kernel_layout="auto"`` tells apart by
    shape (pass "HWIO" or "OIHW" where out == in == kernel size). Every layer is checked
    before anything is copied: on a mismatch this raises a ValueError naming the layer
    and leaves ``net`` unchanged.
    """
    if data_format not in DATA_FORMATS:
        raise ValueError(
            f"data_format must be one of {', '.join(DATA_FORMATS)}; got {data_format!r}"
        )
    if kernel_layout not in KERNEL_LAYOUTS:
        raise ValueError(
            f"kernel_layout must be one of {', '.join(KERNEL_LAYOUTS)}; got {kernel_layout!r}"
        )
    if not isinstance(net, KerasTwin):
        raise TypeError(
            f"expected a twin from kbench_models.gluon.build(); got {type(net).__name__}"
        )
    layers = net.keras_layers()
    keras_weights = list(keras_weights)
    if len(keras_weights) != len(layers):
        raise ValueError(
            f"{type(net).__name__}: expected {len(layers)} Keras layers with weights "
            f"({', '.join(layer.kind for layer in layers)}); got {len(keras_weights)} "
            f"({', '.join(str(kind) for kind, _ in keras_weights)})"
        )
    assignments: List[Assignment] = []
    for index, (layer, (kind, arrays)) in enumerate(zip(layers, keras_weights)):
        where = f"Keras layer {index} ({kind}) -> twin {layer.block.name!r}"
        if kind != layer.kind:
            raise ValueError(f"{where}: expected a {layer.kind} layer, got a {kind}")
        load, count = _LOADERS[layer.kind]
        arrays = [np.asarray(array) for array in arrays]
        if len(arrays) != count(layer.block):
            raise ValueError(
                f"{where}: expected {count(layer.block)} weight arrays, got {len(arrays)}"
            )
        assignments += load(layer, arrays, data_format, kernel_layout, where)
    for target, value in assignments:
        target.set_data(mx.nd.array(np.ascontiguousarray(value), dtype=target.dtype))


# -- what Keras adds to the loss and counts -----------------------------------------


def weight_penalties(net: mx.gluon.Block) -> List[Tuple[float, Parameter]]:
    """(l2 factor, kernel) of every Conv2D built with a Keras kernel_regularizer."""
    return [
        (block.l2, block.weight) for block in blocks(net) if isinstance(block, Conv2D) and block.l2
    ]


def regularization_loss(net: mx.gluon.Block, penalties=None) -> mx.nd.NDArray:
    """The weight penalty the Keras model adds to its loss: sum of l2 * sum(kernel**2)
    over the layers built with a kernel_regularizer; zero for the other models.

    ``penalties`` is ``weight_penalties(net)``, for callers that keep it between steps.
    Inside ``autograd.record()`` the penalty's gradient reaches the kernels.
    """
    penalties = weight_penalties(net) if penalties is None else penalties
    if not penalties:
        first = next(iter(net.collect_params().values()), None)
        context = first.list_ctx()[0] if first is not None else mx.cpu()
        return mx.nd.zeros((1,), ctx=context)
    terms = [factor * mx.nd.sum(mx.nd.square(weight.data())) for factor, weight in penalties]
    return mx.nd.add_n(*terms) if len(terms) > 1 else terms[0]


def keras_param_count(net: mx.gluon.Block) -> int:
    """What Keras' ``count_params()`` counts: every Gluon parameter (BatchNorm's moving
    mean and variance are parameters in Gluon too), counting one LSTM bias (Keras has
    one, Gluon two)."""
    total = sum(int(np.prod(p.shape)) for p in net.collect_params().values())
    for block in blocks(net):
        if isinstance(block, rnn.LSTM):
            total -= sum(
                int(np.prod(p.shape))
                for name, p in block.collect_params().items()
                if name.endswith("h2h_bias")
            )
    return total


def layer_flops(block: mx.gluon.Block, inputs, output) -> int:
    """Multiply-adds x2 of one Conv2D, Dense or LSTM call, as kbench's ``model_flops``
    counts them for Keras (per sample: divide by the batch)."""
    if isinstance(block, nn.Conv2D):
        out_channels, in_channels, kernel_h, kernel_w = block.weight.shape
        spatial = output.shape[2] * output.shape[3]
        return 2 * kernel_h * kernel_w * in_channels * out_channels * spatial
    if isinstance(block, nn.Dense):
        units, in_units = block.weight.shape
        # per position where it maps a sequence (flatten=False), as Keras' Dense does
        positions = int(np.prod(output.shape[1:-1])) if not block._flatten else 1
        return 2 * in_units * units * positions
    if isinstance(block, rnn.LSTM):
        units4, features = block.l0_i2h_weight.shape
        steps = inputs[0].shape[1]  # NTC
        return 2 * units4 * (features + units4 // 4) * steps
    return 0


def count_flops(net: KerasTwin, sample: mx.nd.NDArray) -> int:
    """Forward FLOPs of one sample, read off the blocks during one imperative pass
    (before the net is hybridized: a hybridized net calls no child's hooks)."""
    total = [0]

    def hook(block, inputs, output):
        total[0] += layer_flops(block, inputs, output)

    handles = [
        block.register_forward_hook(hook)
        for block in blocks(net)
        if isinstance(block, (nn.Conv2D, nn.Dense, rnn.LSTM))
    ]
    try:
        net(sample[:1])
    finally:
        for handle in handles:
            handle.detach()
    return int(total[0])
