"""The operations through Keras 3's ``keras.ops``: one definition for TensorFlow, JAX and
PyTorch, on whichever framework this worker's Keras was started with. What
``keras.ops`` does not cover, waiting for the device and taking gradients (a
persistent ``tf.GradientTape``, ``jax.vjp``, ``torch.autograd.grad``), is a few lines
per framework in :data:`FRAMEWORK_PARTS`.

Images are in the ``image_data_format`` of the backend's keras.json; convolution
kernels are HWIO and dense kernels (in, out), as Keras keeps them. Imported only under
Keras 3.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Sequence, Tuple

import numpy as np

from kbench.ops.spec import BN_EPSILON
from kbench.ops.torch_ops import torch_gradients
from kbench.ops.worker import OpsBackend, calling

Gradients = Callable[[Callable[..., Any], Sequence[Any], Any], Callable[[], Tuple[Any, ...]]]


def _tensorflow_sync(outputs: Any, gpu: bool) -> None:
    if gpu:  # on the CPU, TensorFlow's eager ops finish before they return
        import tensorflow as tf

        tf.test.experimental.sync_devices()


def _tensorflow_gradients(fn, inputs, cotangent):
    import tensorflow as tf

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(inputs)
        out = fn(*inputs)
    return lambda: tuple(tape.gradient(out, list(inputs), output_gradients=cotangent))


def _jax_sync(outputs: Any, gpu: bool) -> None:
    import jax

    jax.block_until_ready(outputs)


def _jax_gradients(fn, inputs, cotangent):
    import jax

    _, pullback = jax.vjp(fn, *inputs)
    return lambda: pullback(cotangent)


def _torch_sync(outputs: Any, gpu: bool) -> None:
    if gpu:
        import torch

        torch.cuda.synchronize()


FRAMEWORK_PARTS: Dict[str, Tuple[Callable[[Any, bool], None], Gradients]] = {
    "tensorflow": (_tensorflow_sync, _tensorflow_gradients),
    "jax": (_jax_sync, _jax_gradients),
    "torch": (_torch_sync, torch_gradients),
}


class KerasOps(OpsBackend):
    def __init__(self, gpu: bool, dtype: str, image_data_format: str) -> None:
        super().__init__(gpu, dtype, image_data_format)
        import keras

        self.ops = keras.ops
        self.name = keras.backend.backend()
        self.layouts = {"image": "NCHW"} if image_data_format == "channels_first" else {}
        self._sync, self._gradients = FRAMEWORK_PARTS[self.name]

    def tensor(self, array: np.ndarray) -> Any:
        return self.ops.convert_to_tensor(array, dtype=self.dtype)

    def host(self, value: Any) -> np.ndarray:
        return np.asarray(self.ops.convert_to_numpy(value))

    def sync(self, outputs: Any) -> None:
        self._sync(outputs, self.gpu)

    def op_create_numpy(self, x):
        """keras.ops.convert_to_tensor(numpy array)"""
        return lambda: self.ops.convert_to_tensor(x, dtype=self.dtype)

    def op_create_list(self, x):
        """keras.ops.convert_to_tensor(nested list)"""
        return lambda: self.ops.convert_to_tensor(x, dtype=self.dtype)

    op_sigmoid = calling("ops.sigmoid", "keras.ops.sigmoid")
    op_relu = calling("ops.relu", "keras.ops.relu")
    op_tanh = calling("ops.tanh", "keras.ops.tanh")
    op_softplus = calling("ops.softplus", "keras.ops.softplus")
    op_softsign = calling("ops.softsign", "keras.ops.softsign")
    op_dot = calling("ops.dot", "keras.ops.dot (vectors)")
    op_gemm = calling("ops.matmul", "keras.ops.matmul")

    def op_flatten(self, x):
        """keras.ops.reshape(x, (batch, -1)), as keras.layers.Flatten"""
        shape = (x.shape[0], -1)
        return lambda: self.ops.reshape(x, shape)

    op_l2_normalize = calling(
        "ops.normalize", "keras.ops.normalize(x, axis=-1, order=2)", axis=-1, order=2
    )

    def op_batch_norm(self, x, gamma, beta):
        """keras.ops.moments over the batch, then keras.ops.batch_normalization"""

        def run():
            mean, variance = self.ops.moments(x, axes=[0])
            return self.ops.batch_normalization(
                x, mean, variance, axis=-1, offset=beta, scale=gamma, epsilon=BN_EPSILON
            )

        return run

    def _conv(self, x, k):
        return self.ops.conv(x, k, strides=1, padding="same", data_format=self.image_data_format)

    def op_conv2d(self, x, k):
        """keras.ops.conv(padding='same')"""
        return lambda: self._conv(x, k)

    def op_conv2d_backward(self, x, k, g):
        """gradients of keras.ops.conv by the framework's autodiff"""
        return self._gradients(self._conv, (x, k), g)

    def op_dense_backward(self, x, w, b, g):
        """gradients of keras.ops.matmul + keras.ops.add by the framework's autodiff"""

        def dense(x, w, b):
            return self.ops.add(self.ops.matmul(x, w), b)

        return self._gradients(dense, (x, w, b), g)

    def op_lstm_cell(self, x, h, c, w, u, b):
        """keras.ops: matmul, add, split, sigmoid, tanh, multiply"""
        ops = self.ops

        def step():
            z = ops.add(ops.add(ops.matmul(x, w), ops.matmul(h, u)), b)
            i, f, g, o = ops.split(z, 4, axis=-1)
            c2 = ops.add(ops.multiply(ops.sigmoid(f), c), ops.multiply(ops.sigmoid(i), ops.tanh(g)))
            return ops.multiply(ops.sigmoid(o), ops.tanh(c2)), c2

        return step
