"""Building blocks that compute what the Keras layers in ``models/`` compute, in Gluon.

Each twin is a :class:`KerasTwin`: a ``HybridBlock`` whose ``keras_layers()`` lists
its weighted layers in the order of the Keras model's ``model.layers``, which is
what :func:`kbench_models.gluon.load_keras_weights` walks (the order rule is in
``kbench_models.pytorch._layers``: deepest first, a projection shortcut level with,
and before, the main branch's layer at the same distance from the ``add``).

Gluon graphs have static shapes once hybridized, so a layer whose padding depends on
its input size (Keras' "same" with stride 2) is told that size when it is built;
the twins know it from their ``input_shape``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

from .._shapes import same_pads

# Keras' BatchNormalization defaults; MXNet's momentum means what Keras' does
KERAS_BN_EPSILON = 1e-3
KERAS_BN_MOMENTUM = 0.99

# Keras' glorot_uniform: U(+-sqrt(6 / (fan_in + fan_out))), fans as Keras counts them
GLOROT_UNIFORM = mx.init.Xavier(rnd_type="uniform", factor_type="avg", magnitude=3)


@dataclass(frozen=True)
class KerasLayer:
    """One Keras layer with weights, and the Gluon block that holds them.

    ``kind`` is the Keras class name. ``flatten_chw`` is set on the first Dense after
    a Flatten of an image tensor: the (channels, height, width) it flattens, to reorder
    the Keras kernel's (height, width, channels) rows (see ``load_keras_weights``).
    """

    kind: str
    block: mx.gluon.Block
    flatten_chw: Optional[Tuple[int, int, int]] = None


class KerasTwin(HybridBlock, abc.ABC):
    """A Gluon model that computes the same function as one Keras model."""

    @abc.abstractmethod
    def keras_layers(self) -> List[KerasLayer]:
        """The weighted layers in the Keras model's ``model.layers`` order."""


def blocks(block: mx.gluon.Block) -> Iterator[mx.gluon.Block]:
    """``block`` and every block below it, depth first."""
    yield block
    for child in block._children.values():
        yield from blocks(child)


class Conv2D(nn.Conv2D):
    """``nn.Conv2D`` (NCHW, OIHW weight) with Keras' padding and an optional L2 penalty.

    ``padding`` is "valid", "same" (Keras' rule: where the total padding is odd, as
    for stride 2 on an even size, the extra row/column goes bottom/right), or an int
    for ZeroPadding2D(p) followed by a "valid" convolution. "same" other than stride 1
    with an odd kernel depends on the input's size: pass ``input_size`` (height,
    width). ``l2`` is the factor of the Keras ``kernel_regularizer=l2(...)``, collected
    by ``regularization_loss``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: Union[str, int] = "valid",
        bias: bool = True,
        l2: float = 0.0,
        input_size: Optional[Sequence[int]] = None,
        weight_initializer: Optional[mx.init.Initializer] = None,
    ) -> None:
        if padding not in ("valid", "same") and not isinstance(padding, int):
            raise ValueError(f'padding must be "valid", "same" or an int; got {padding!r}')
        pads = [(0, 0), (0, 0)]  # (before, after) for height and width
        if padding == "same":
            if stride == 1 and kernel_size % 2 == 1:
                pads = [((kernel_size - 1) // 2,) * 2] * 2
            elif input_size is None:
                raise ValueError(
                    f'Conv2D(kernel {kernel_size}, stride {stride}, padding "same"): the '
                    "padding depends on the input size here; pass input_size=(height, width)"
                )
            else:
                pads = [same_pads(int(size), kernel_size, stride) for size in input_size]
        elif isinstance(padding, int):
            pads = [(padding, padding)] * 2
        symmetric = all(before == after for before, after in pads)
        # an uneven split is an explicit pad in front of an unpadded convolution
        self.pad_width = None if symmetric else (0, 0, 0, 0, *pads[0], *pads[1])
        super().__init__(
            out_channels,
            kernel_size,
            strides=stride,
            padding=(pads[0][0], pads[1][0]) if symmetric else (0, 0),
            use_bias=bias,
            in_channels=in_channels,
            weight_initializer=weight_initializer,
        )
        self.l2 = l2

    def hybrid_forward(self, F, x, weight, bias=None):  # noqa: N803 - Gluon's spelling
        if self.pad_width is not None:
            x = F.pad(x, mode="constant", pad_width=self.pad_width, constant_value=0)
        return super().hybrid_forward(F, x, weight, bias)


def batch_norm(channels: int, epsilon: float = KERAS_BN_EPSILON) -> nn.BatchNorm:
    """Keras' BatchNormalization(epsilon) over the channels of NCHW.

    MXNet moves the statistics as Keras 3 does (momentum 0.99 on the old value, the
    biased batch variance), in the backward pass rather than the forward one.
    """
    return nn.BatchNorm(axis=1, momentum=KERAS_BN_MOMENTUM, epsilon=epsilon, in_channels=channels)


class HeNormal(mx.init.Initializer):
    """Keras' ``he_normal``: truncated normal (at 2 std) of std sqrt(2 / fan_in)."""

    def _init_weight(self, name, arr):
        fan_in = math.prod(arr.shape[1:])  # in_channels * kernel_h * kernel_w, or in_units
        # 0.8796... is the std of a standard normal truncated at +-2; Keras divides by it
        std = math.sqrt(2.0 / fan_in) / 0.87962566103423978
        bound = math.erf(2.0 / math.sqrt(2.0))  # 2 * Phi(2) - 1: inverse-CDF sampling
        uniform = mx.nd.random.uniform(-bound, bound, shape=arr.shape, ctx=arr.context)
        normal = mx.nd.erfinv(uniform) * (std * math.sqrt(2.0))
        arr[:] = mx.nd.clip(normal, -2 * std, 2 * std)


def lstm(features: int, units: int) -> mx.gluon.rnn.LSTM:
    """Keras' LSTM(units, tanh, recurrent activation sigmoid) as Gluon's fused layer.

    The gate order is Keras' (i, f, c, o). Initialisation as Keras: glorot_uniform
    input kernel, orthogonal recurrent kernel, zero bias but 1 for the forget gate.
    Keras has one bias, Gluon two: ``h2h_bias`` stays zero and frozen
    (``grad_req="null"``), and ``keras_param_count`` leaves it out.
    """
    layer = mx.gluon.rnn.LSTM(
        units,
        layout="NTC",
        input_size=features,
        h2h_weight_initializer=mx.init.Orthogonal(scale=1.0, rand_type="normal"),
        i2h_bias_initializer=mx.init.LSTMBias(forget_bias=1.0),
    )
    layer.l0_h2h_bias.grad_req = "null"
    return layer


def keras_init(twin: mx.gluon.Block) -> None:
    """Initialise every parameter: glorot_uniform where a block set no initialiser of
    its own (Dense and Conv2D kernels), zero biases, BatchNorm as Keras starts it."""
    twin.initialize(GLOROT_UNIFORM)
