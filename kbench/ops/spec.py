"""What each benchmarked operation computes, on which inputs, and how it is checked.

Standard library and numpy only: the parent and the workers of every environment
import it (numpy 2 under Keras 3, numpy 1.23 under MXNet).

An operation's **size** ``n`` (``OpSpec.size_meaning``) is the side of the ``n x n``
matrices for GEMM, the elementwise ops and the normalizations, the side of the square
images for the convolutions, the hidden units for the LSTM cell: every operation gets
inputs of about ``n*n`` numbers (the convolutions 64 times as many), so a sweep over
``n`` reads the same way for all of them.

Inputs are drawn from ``numpy.random.default_rng([seed, crc32(op), n])`` in float64,
rounded to the benchmark's dtype, and the reference is computed in float64 from the
rounded values: a backend's difference from it is its own arithmetic, never the
rounding of its inputs. Layouts here are NHWC images, HWIO convolution kernels and
(in, out) dense kernels; a backend converts to its own outside the timed call
(:class:`kbench.ops.worker.OpsBackend`).

**Tolerance.** Each output must be within ``rtol * scale`` of the reference at
every element, where ``scale`` is the largest magnitude of the reference output
(for multilinear operations, the largest magnitude of the same operation applied to
the absolute values of the inputs, the bound that rounding error scales with: a
dot product that cancels to nearly zero is not held to its tiny result) and

    rtol = ulps * eps(dtype) * sqrt(K)

with ``K`` the number of terms summed into each output (1 for elementwise ops) and
``ulps`` per operation: 0 for operations that are exact in any arithmetic
(creation, ReLU, flatten), 16 for the transcendental activations (vectorised math
libraries differ by a few units in the last place), 8 to 32 for reductions. On a
GPU, float32 GEMM-like operations (GEMM, convolutions, dense backward, LSTM cell)
are allowed ``4 * 2**-10``: TensorFlow and JAX (and cuDNN convolutions under
PyTorch) use TF32 tensor cores by default on Ampere and later GPUs, which round
inputs to 10 mantissa bits.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

DTYPES: Tuple[str, ...] = ("float32", "float64", "float16")
DEFAULT_SIZES: Tuple[int, ...] = (64, 128, 256, 512)
MIN_SWEEP_SIZE = 64  # where --max-size starts its powers of two
TF32_RTOL = 4 * 2.0**-10

# Fixed dimensions of the operations whose size is not every dimension.
CONV_BATCH, CONV_CHANNELS, CONV_KERNEL = 4, 16, 3
LSTM_BATCH = 32
FLATTEN_MIDDLE = 8
BN_EPSILON = 1e-3  # Keras' BatchNormalization default, used by every backend here

# Roles of an operand, how a backend receives it (kbench.ops.worker.OpsBackend): array,
# image, conv_kernel, dense_kernel (each in the backend's layout), host (the numpy
# array), list (nested lists).


@dataclass(frozen=True)
class Operand:
    """One input of an operation: its name, role, shape and the normal law it is drawn from."""

    name: str
    shape: Tuple[int, ...]
    role: str = "array"
    mean: float = 0.0
    std: float = 1.0

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class OpSpec:
    """An operation as every backend must compute it."""

    name: str
    summary: str
    size_meaning: str
    operands: Callable[[int], List[Operand]]
    reference: Callable[..., Tuple[np.ndarray, ...]]  # float64 in, float64 out, canonical layouts
    outputs: Tuple[Tuple[str, str], ...] = (("y", "array"),)  # (name, role) per output
    ulps: float = 8.0
    reduction: Callable[[int], Tuple[int, ...]] = field(default=lambda n: (1,))  # K per output
    multilinear: bool = False  # scale from the operation on |inputs|
    gemm_like: bool = False  # TF32 on GPUs applies
    flops: Optional[Callable[[int], int]] = None  # floating-point operations per call

    def inputs(self, n: int, dtype: str, seed: int) -> Dict[str, Any]:
        """The operation's inputs at size ``n``: numpy arrays of ``dtype`` (lists for
        ``list`` operands), the same for every backend."""
        rng = np.random.default_rng([seed, zlib.crc32(self.name.encode()), n])
        arrays: Dict[str, Any] = {}
        for operand in self.operands(n):
            draw = rng.standard_normal(operand.shape) * operand.std + operand.mean
            arrays[operand.name] = draw.astype(dtype)
        return arrays

    def roles(self, n: int) -> Dict[str, str]:
        return {operand.name: operand.role for operand in self.operands(n)}

    def shapes(self, n: int) -> Dict[str, List[int]]:
        return {operand.name: list(operand.shape) for operand in self.operands(n)}

    def estimated_bytes(self, n: int, dtype: str) -> int:
        """Memory an operation needs at size ``n``, roughly: inputs and outputs of about
        the inputs' size in ``dtype``, three float64 copies for the reference and its
        scale, and 32 bytes per number of a Python list."""
        total = 0
        for operand in self.operands(n):
            per_element = 2 * np.dtype(dtype).itemsize + 3 * 8
            if operand.role == "list":
                per_element += 32
            total += operand.elements * per_element
        return int(total)

    def reference_outputs(self, inputs: Dict[str, Any]) -> Tuple[np.ndarray, ...]:
        return self.reference(**{k: np.asarray(v, dtype=np.float64) for k, v in inputs.items()})

    def scales(self, inputs: Dict[str, Any], references: Sequence[np.ndarray]) -> List[float]:
        """What each output's tolerance is relative to (see the module docstring)."""
        if self.multilinear:
            absolute = {k: np.abs(np.asarray(v, dtype=np.float64)) for k, v in inputs.items()}
            bounds = self.reference(**absolute)
            return [float(np.max(np.abs(b))) if np.size(b) else 0.0 for b in bounds]
        return [float(np.max(np.abs(r))) if np.size(r) else 0.0 for r in references]

    def rtols(self, n: int, dtype: str, gpu: bool) -> List[float]:
        eps = float(np.finfo(dtype).eps)
        rtols = [self.ulps * eps * math.sqrt(k) for k in self.reduction(n)]
        if gpu and dtype == "float32" and self.gemm_like:
            rtols = [max(r, TF32_RTOL) for r in rtols]
        return rtols


def check(
    spec: OpSpec, n: int, dtype: str, gpu: bool, inputs: Dict[str, Any],
    outputs: Sequence[np.ndarray],
) -> Dict[str, Any]:  # fmt: skip
    """Compare a backend's outputs (host arrays, canonical layouts) with the reference.

    Returns ``max_abs_diff`` and ``tolerance`` of the output that is furthest from
    passing, ``rtol``, ``relative_to`` (its scale), ``passed``, and per output when
    there are several; ``reason`` when an output has the wrong shape, dtype or
    non-finite values.
    """
    references = spec.reference_outputs(inputs)
    scales = spec.scales(inputs, references)
    rtols = spec.rtols(n, dtype, gpu)
    names = [name for name, _ in spec.outputs]
    if len(outputs) != len(references):
        return {"passed": False, "max_abs_diff": None, "tolerance": None,
                "reason": f"expected {len(references)} output(s); got {len(outputs)}"}  # fmt: skip
    per_output: Dict[str, Dict[str, Any]] = {}
    worst: Tuple[float, str] = (-1.0, names[0])
    reasons = []
    for name, out, ref, scale, rtol in zip(names, outputs, references, scales, rtols):
        out = np.asarray(out)
        tolerance = rtol * scale
        entry: Dict[str, Any] = {"tolerance": tolerance, "rtol": rtol, "relative_to": scale}
        if out.dtype != np.dtype(dtype):
            reasons.append(f"{name}: expected dtype {dtype}; got {out.dtype}")
        if out.size != ref.size:
            reasons.append(f"{name}: expected shape {list(ref.shape)}; got {list(out.shape)}")
            entry["max_abs_diff"] = None
        elif not np.all(np.isfinite(out)):
            reasons.append(f"{name}: the output has NaN or infinite values")
            entry["max_abs_diff"] = None
        else:
            # a 1-element result may come back as shape (1,) (MXNet has no 0-d arrays)
            diff = float(np.max(np.abs(out.astype(np.float64).reshape(ref.shape) - ref)))
            entry["max_abs_diff"] = diff
            ratio = diff / tolerance if tolerance > 0 else (0.0 if diff == 0 else math.inf)
            entry["passed"] = diff <= tolerance
            if ratio > worst[0]:
                worst = (ratio, name)
        per_output[name] = entry
    result = dict(per_output[worst[1]])
    result.pop("passed", None)
    result["passed"] = not reasons and all(e.get("passed") for e in per_output.values())
    if len(names) > 1:
        result["output"] = worst[1]
        result["outputs"] = per_output
    if reasons:
        result["reason"] = "; ".join(reasons)
    return result


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


def _conv_same(x, k):
    """NHWC x HWIO, stride 1, 'same' zero padding (odd kernels)."""
    b, h, w, c = x.shape
    kh, kw, _, o = k.shape
    ph, pw = kh // 2, kw // 2
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    y = np.zeros((b * h * w, o))
    for i in range(kh):
        for j in range(kw):
            y += padded[:, i : i + h, j : j + w, :].reshape(-1, c) @ k[i, j]
    return y.reshape(b, h, w, o)


def _conv_same_backward(x, k, g):
    """Gradients of sum(g * conv(x, k)) with respect to x and k."""
    b, h, w, c = x.shape
    kh, kw, _, o = k.shape
    ph, pw = kh // 2, kw // 2
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    grad_padded = np.zeros_like(padded)
    grad_k = np.zeros_like(k)
    g2 = g.reshape(-1, o)
    for i in range(kh):
        for j in range(kw):
            patch = padded[:, i : i + h, j : j + w, :].reshape(-1, c)
            grad_k[i, j] = patch.T @ g2
            grad_padded[:, i : i + h, j : j + w, :] += (g2 @ k[i, j].T).reshape(b, h, w, c)
    return grad_padded[:, ph : ph + h, pw : pw + w, :], grad_k


def _batch_norm(x, gamma, beta):
    mean = x.mean(axis=0)
    var = x.var(axis=0)  # biased, as every framework normalizes with
    return (x - mean) / np.sqrt(var + BN_EPSILON) * gamma + beta


def _lstm_cell(x, h, c, w, u, b):
    z = x @ w + h @ u + b
    i, f, g, o = np.split(z, 4, axis=-1)  # Keras' (and PyTorch's, MXNet's) gate order
    c2 = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c2), c2


def _square(n: int, role: str = "array", **law: float) -> List[Operand]:
    return [Operand("x", (n, n), role, **law)]


def _image(n: int) -> Tuple[int, ...]:
    return (CONV_BATCH, n, n, CONV_CHANNELS)


def _kernel() -> Operand:
    fan_in = CONV_KERNEL * CONV_KERNEL * CONV_CHANNELS
    shape = (CONV_KERNEL, CONV_KERNEL, CONV_CHANNELS, CONV_CHANNELS)
    return Operand("k", shape, "conv_kernel", std=fan_in**-0.5)


def _conv_flops(n: int) -> int:
    return 2 * CONV_BATCH * n * n * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL * CONV_KERNEL


SQUARE = "x is n x n"
ACTIVATION_LAW = dict(std=3.0)  # reaches the saturating parts of each curve


def _activation(name: str, summary: str, reference: Callable, ulps: float = 16) -> OpSpec:
    """An elementwise activation of an ``n x n`` input."""
    return OpSpec(name, summary, SQUARE, lambda n: _square(n, **ACTIVATION_LAW),
                  lambda x: (reference(x),), ulps=ulps)  # fmt: skip


# fmt: off
_SPECS = [
    OpSpec("create_numpy",
           "a tensor on the device from a numpy array (host to device copy, if any)",
           f"{SQUARE} (n*n numbers)", lambda n: _square(n, "host"), lambda x: (x,), ulps=0),
    OpSpec("create_list", "a tensor on the device from a nested Python list of floats",
           f"{SQUARE}, as a list of n lists of n floats", lambda n: _square(n, "list"),
           lambda x: (x,), ulps=0),
    _activation("sigmoid", "1 / (1 + exp(-x))", _sigmoid),
    _activation("relu", "max(x, 0)", lambda x: np.maximum(x, 0.0), ulps=0),
    _activation("tanh", "tanh(x)", np.tanh),
    _activation("softplus", "log(1 + exp(x)) (MXNet: Activation softrelu)",
                lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)),
    _activation("softsign", "x / (1 + |x|)", lambda x: x / (1.0 + np.abs(x))),
    OpSpec("dot", "dot product of two vectors", "x and y are vectors of n*n numbers",
           lambda n: [Operand("x", (n * n,)), Operand("y", (n * n,))],
           lambda x, y: (np.dot(x, y),), reduction=lambda n: (n * n,), multilinear=True,
           flops=lambda n: 2 * n * n),
    OpSpec("gemm", "matrix product a @ b", "a and b are n x n",
           lambda n: [Operand("a", (n, n)), Operand("b", (n, n))], lambda a, b: (a @ b,),
           reduction=lambda n: (n,), multilinear=True, gemm_like=True, flops=lambda n: 2 * n**3),
    OpSpec("flatten", "(batch, ...) -> (batch, features), as Keras' Flatten layer",
           f"x is n x {FLATTEN_MIDDLE} x ceil(n/{FLATTEN_MIDDLE}), flattened to "
           f"n x {FLATTEN_MIDDLE}*ceil(n/{FLATTEN_MIDDLE})",
           lambda n: [Operand("x", (n, FLATTEN_MIDDLE, -(-n // FLATTEN_MIDDLE)))],
           lambda x: (x.reshape(x.shape[0], -1),), ulps=0),
    OpSpec("l2_normalize", "each row of x divided by its L2 norm", SQUARE, lambda n: _square(n),
           lambda x: (x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True)),),
           reduction=lambda n: (n,)),
    OpSpec("batch_norm",
           "batch normalization forward in training mode: normalize each feature with the "
           f"batch's mean and biased variance (epsilon {BN_EPSILON:g}), then scale by gamma "
           "and shift by beta; moving statistics are not updated",
           "x is n x n: a batch of n samples of n features",
           lambda n: [Operand("x", (n, n), mean=0.5), Operand("gamma", (n,), mean=1.0, std=0.1),
                      Operand("beta", (n,), std=0.1)],
           lambda x, gamma, beta: (_batch_norm(x, gamma, beta),), ulps=32,
           reduction=lambda n: (n,)),
    OpSpec("conv2d",
           f"2-D convolution forward, {CONV_KERNEL}x{CONV_KERNEL} kernel, stride 1, 'same' "
           "padding, no bias",
           f"image side: x is {CONV_BATCH} x n x n x {CONV_CHANNELS} (NHWC), kernel "
           f"{CONV_KERNEL}x{CONV_KERNEL}, {CONV_CHANNELS} to {CONV_CHANNELS} channels",
           lambda n: [Operand("x", _image(n), "image"), _kernel()],
           lambda x, k: (_conv_same(x, k),), outputs=(("y", "image"),),
           reduction=lambda n: (CONV_KERNEL * CONV_KERNEL * CONV_CHANNELS,),
           multilinear=True, gemm_like=True, flops=_conv_flops),
    OpSpec("conv2d_backward",
           "2-D convolution backward: gradients with respect to the input and the kernel for "
           "an upstream gradient g (the forward pass is recorded once, outside the timing)",
           f"image side: x and g are {CONV_BATCH} x n x n x {CONV_CHANNELS} (NHWC), kernel "
           f"{CONV_KERNEL}x{CONV_KERNEL}, {CONV_CHANNELS} to {CONV_CHANNELS} channels",
           lambda n: [Operand("x", _image(n), "image"), _kernel(),
                      Operand("g", _image(n), "image")],
           _conv_same_backward, outputs=(("grad_x", "image"), ("grad_k", "conv_kernel")),
           reduction=lambda n: (CONV_KERNEL * CONV_KERNEL * CONV_CHANNELS, CONV_BATCH * n * n),
           multilinear=True, gemm_like=True, flops=lambda n: 2 * _conv_flops(n)),
    OpSpec("dense_backward",
           "gradients of x @ w + b with respect to x, w and b for an upstream gradient g "
           "(the forward pass is recorded once, outside the timing)",
           "x, w and g are n x n (a batch of n samples, n to n units); b has n",
           lambda n: [Operand("x", (n, n)), Operand("w", (n, n), "dense_kernel", std=n**-0.5),
                      Operand("b", (n,), std=0.1), Operand("g", (n, n))],
           lambda x, w, b, g: (g @ w.T, x.T @ g, g.sum(axis=0)),
           outputs=(("grad_x", "array"), ("grad_w", "dense_kernel"), ("grad_b", "array")),
           reduction=lambda n: (n, n, n), multilinear=True, gemm_like=True,
           flops=lambda n: 4 * n**3 + n * n),
    OpSpec("lstm_cell",
           "one LSTM step: z = x @ w + h @ u + b; gates i, f, g, o; c' = sigmoid(f) c + "
           "sigmoid(i) tanh(g); h' = sigmoid(o) tanh(c')",
           f"hidden units and input features; batch {LSTM_BATCH}: x, h, c are "
           f"{LSTM_BATCH} x n, w and u are n x 4n",
           lambda n: [Operand("x", (LSTM_BATCH, n)), Operand("h", (LSTM_BATCH, n)),
                      Operand("c", (LSTM_BATCH, n)),
                      Operand("w", (n, 4 * n), "dense_kernel", std=n**-0.5),
                      Operand("u", (n, 4 * n), "dense_kernel", std=n**-0.5),
                      Operand("b", (4 * n,), std=0.1)],
           _lstm_cell, outputs=(("h", "array"), ("c", "array")), ulps=16,
           reduction=lambda n: (2 * n, 2 * n), gemm_like=True,
           flops=lambda n: 2 * LSTM_BATCH * 2 * n * 4 * n),
]
# fmt: on

OPS: Dict[str, OpSpec] = {spec.name: spec for spec in _SPECS}


def sizes_up_to(max_size: int, min_size: int = MIN_SWEEP_SIZE) -> Tuple[int, ...]:
    """Powers of two from ``min_size`` (rounded up to one) to ``max_size``; at least
    ``max_size`` itself when it is below ``min_size``."""
    size = 1
    while size < min_size:
        size *= 2
    sizes = []
    while size <= max_size:
        sizes.append(size)
        size *= 2
    return tuple(sizes) or (max_size,)
