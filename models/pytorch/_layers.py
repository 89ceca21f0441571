"""Building blocks that compute what the Keras layers in ``models/`` compute.

Each twin is a :class:`KerasTwin`: an ``nn.Module`` whose ``keras_layers()`` lists
its weighted layers in the order of the Keras model's ``model.layers``, which is
what :func:`kbench_models.pytorch.load_keras_weights` walks. Keras (3 and 2.2.4
alike) orders ``model.layers`` by depth from the output, deepest first, and breaks
ties by a depth-first traversal from the output that visits a merge's inputs in
order; so in a residual block whose shortcut has a convolution, that convolution
comes level with (and before) the main branch's layer at the same distance from
the ``add``. The twins spell the resulting order out, block by block.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from .._shapes import same_pads

# Keras' BatchNormalization defaults: torch's momentum is the weight of the new batch
KERAS_BN_EPSILON = 1e-3
KERAS_BN_MOMENTUM = 0.99


@dataclass(frozen=True)
class KerasLayer:
    """One Keras layer with weights, and the twin module that holds them.

    ``kind`` is the Keras class name. ``flatten_chw`` is set on the first Dense after
    a Flatten of an image tensor: the (channels, height, width) it flattens, to reorder
    the Keras kernel's (height, width, channels) rows (see ``load_keras_weights``).
    """

    kind: str
    module: nn.Module
    flatten_chw: Optional[Tuple[int, int, int]] = None


class KerasTwin(nn.Module, abc.ABC):
    """A PyTorch model that computes the same function as one Keras model."""

    @abc.abstractmethod
    def keras_layers(self) -> List[KerasLayer]:
        """The weighted layers in the Keras model's ``model.layers`` order."""


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` with Keras' padding and an optional L2 kernel penalty.

    ``padding`` is "valid", "same" (Keras' rule: where the total padding is odd,
    as for stride 2 on an even size, the extra row/column goes bottom/right), or an
    int for ZeroPadding2D(p) followed by a "valid" convolution. ``l2`` is the factor
    of the Keras ``kernel_regularizer=l2(...)``, collected by ``regularization_loss``.
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
    ) -> None:
        if padding not in ("valid", "same") and not isinstance(padding, int):
            raise ValueError(f'padding must be "valid", "same" or an int; got {padding!r}')
        # stride 1 with an odd kernel pads evenly: leave it to the convolution itself
        self.dynamic_same = padding == "same" and not (stride == 1 and kernel_size % 2 == 1)
        static = {"valid": 0, "same": (kernel_size - 1) // 2}.get(padding, padding)
        super().__init__(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=0 if self.dynamic_same else static,
            bias=bias,
        )
        self.l2 = l2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.dynamic_same:
            return super().forward(x)
        (kernel_h, kernel_w), (stride_h, stride_w) = self.kernel_size, self.stride
        top, bottom = same_pads(x.shape[-2], kernel_h, stride_h)
        left, right = same_pads(x.shape[-1], kernel_w, stride_w)
        if top == bottom and left == right:
            return F.conv2d(x, self.weight, self.bias, self.stride, (top, left))
        x = F.pad(x, (left, right, top, bottom))
        return F.conv2d(x, self.weight, self.bias, self.stride)


class BatchNorm2d(nn.BatchNorm2d):
    """Keras' BatchNormalization over the channel axis of an NCHW tensor.

    Epsilon and momentum as Keras has them, and the moving variance updated as Keras
    3 updates it, with the biased batch variance (torch uses the unbiased one): after
    torch's update, the batch's share is scaled by (n - 1) / n. That costs a few
    operations on per-channel vectors, no pass over the batch. (Keras 2.2.4 on
    TensorFlow used the unbiased variance.)
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.track_running_stats):
            return super().forward(x)
        self._check_input_dim(x)
        self.num_batches_tracked.add_(1)
        # torch updates a copy (the backward may keep what it was given), to
        # (1 - m) previous + m unbiased; the buffer gets m biased = m unbiased (n-1)/n
        updated = self.running_var.clone()
        out = F.batch_norm(
            x, self.running_mean, updated, self.weight, self.bias, True, self.momentum, self.eps
        )
        count = x.numel() // x.shape[1]
        with torch.no_grad():
            share = updated - (1 - self.momentum) * self.running_var
            self.running_var.copy_(updated - share / count)
        return out


def batch_norm(channels: int, epsilon: float = KERAS_BN_EPSILON) -> BatchNorm2d:
    """Keras' BatchNormalization(epsilon) on NCHW; torch's momentum is 1 - Keras'."""
    return BatchNorm2d(channels, eps=epsilon, momentum=1.0 - KERAS_BN_MOMENTUM)


def he_normal_(weight: torch.Tensor) -> None:
    """Keras' ``he_normal``: truncated normal (at 2 std) of std sqrt(2 / fan_in)."""
    fan_in = weight[0].numel()  # in_channels * kernel_h * kernel_w, or in_features
    # 0.8796... is the std of a standard normal truncated at +-2; Keras divides by it
    std = math.sqrt(2.0 / fan_in) / 0.87962566103423978
    # inverse-CDF sampling (nn.init.trunc_normal_ resamples in a loop: slow on CPU)
    bound = math.erf(2.0 / math.sqrt(2.0))  # 2 * Phi(2) - 1
    with torch.no_grad():
        weight.uniform_(-bound, bound).erfinv_().mul_(std * math.sqrt(2.0))
        weight.clamp_(-2 * std, 2 * std)


def keras_init_(module: nn.Module) -> None:
    """Keras' default initialisers: glorot_uniform kernels, zero biases, uniform(+-0.05)
    embeddings; LSTM orthogonal recurrent kernel and forget-gate bias 1."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        elif isinstance(layer, nn.Embedding):
            nn.init.uniform_(layer.weight, -0.05, 0.05)
        elif isinstance(layer, nn.LSTM):
            units = layer.hidden_size
            for name, value in layer.named_parameters():
                if name.startswith("weight_ih"):
                    nn.init.xavier_uniform_(value)
                elif name.startswith("weight_hh"):
                    nn.init.orthogonal_(value)
                else:
                    nn.init.zeros_(value)
                    if name.startswith("bias_ih"):
                        nn.init.ones_(value[units : 2 * units])  # unit_forget_bias


def global_average_pool(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=(2, 3))
