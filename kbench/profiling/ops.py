"""What one profiled operator cost, and the common name it goes by.

Each framework's capture (``torch_capture``, ``tf_capture``, ``jax_capture``) turns
its profiler's events into :class:`OpTime` records: the framework's own operator name,
the Keras layer where the profiler tells it, the phase of the training step, and the
self time (nested operators' time excluded, so times add up). :func:`common_name`
maps the framework's name to the operation names ``kbench ops`` benchmarks, so one
model's breakdown reads the same on every backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

# The phases of a training step. "other" is what belongs to none of them: metrics,
# step counters, the framework's bookkeeping.
PHASES: Tuple[str, ...] = ("data", "forward", "backward", "update", "other")


@dataclass(frozen=True)
class OpTime:
    op: str  # the framework's name: aten::mm, Conv2DBackpropFilter, dot_general
    phase: str  # one of PHASES
    seconds: float  # self time
    layer: Optional[str] = None  # the Keras layer, where the profiler names it

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase: expected one of {', '.join(PHASES)}; got {self.phase!r}")


# (pattern on the lower-cased framework name, common name forward, common name backward)
_COMMON = (
    (re.compile(r"conv(?!ert)"), "conv2d", "conv2d_backward"),  # not convert_element_type
    (re.compile(r"matmul|gemm|addmm|\bmm\b|aten::mm|bmm|dot|linear"), "gemm", "dense_backward"),
    (re.compile(r"batch_?norm"), "batch_norm", "batch_norm"),
    (re.compile(r"relu|threshold_backward|clamp_min"), "relu", "relu"),
    (re.compile(r"softplus"), "softplus", "softplus"),
    (re.compile(r"softsign"), "softsign", "softsign"),
    (re.compile(r"sigmoid|logistic"), "sigmoid", "sigmoid"),
    (re.compile(r"tanh"), "tanh", "tanh"),
    (re.compile(r"softmax|cross_?entropy|nll_loss|log_softmax"), "softmax_loss", "softmax_loss"),
    (re.compile(r"reshape|flatten|\bview\b|aten::view"), "flatten", "flatten"),
    (re.compile(r"l2_?norm|aten::norm|\bnorm\b"), "l2_norm", "l2_norm"),
)
# Keras layer name -> common name, for frameworks that split a layer into primitive
# ops (TensorFlow's BatchNormalization is moments, sub, mul...).
_LAYERS = (
    (re.compile(r"batch_normalization"), "batch_norm"),
    (re.compile(r"^lstm"), "lstm_cell"),
)


def common_name(op: str, phase: str, layer: Optional[str] = None) -> Optional[str]:
    """The ``kbench ops`` name of a framework operator, or None for the rest
    (elementwise arithmetic, copies, optimizer maths)."""
    if phase in ("update", "other"):
        return None  # the optimizer's arithmetic; work whose place in the step is unknown
    text = op.lower()
    for pattern, forward, backward in _COMMON:
        if pattern.search(text):
            return backward if phase == "backward" else forward
    if layer:
        for pattern, name in _LAYERS:
            if pattern.search(layer.lower()):
                return name
    return None
