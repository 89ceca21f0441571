"""The operations in MXNet's imperative API (``mx.nd``), with ``mx.autograd`` for the
backward ones. Runs in the MXNet environment (numpy 1.23, no Keras 3): nothing here
imports Keras, and the worker does not import keras-mxnet for an operator run.

Native layouts: images NCHW, convolution kernels OIHW, dense kernels (out, in) as
``FullyConnected`` takes them. MXNet has no 0-d arrays: a dot product of two
vectors is an array of shape (1,), which the check accepts for a scalar.
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from kbench.backends.base import Backend
from kbench.backends.keras_mxnet import KerasMXNetBackend
from kbench.ops.spec import BN_EPSILON, CONV_KERNEL
from kbench.ops.worker import OpsBackend, calling


class MXNetRuntime(KerasMXNetBackend):
    """MXNet's thread and memory settings as model runs apply them, without keras-mxnet."""

    def load_framework(self, data_format: str) -> None:
        import mxnet  # noqa: F401 - starts the engine with the thread settings in force

        self.keras = None

    def describe(self) -> Dict[str, Any]:
        info = Backend.describe(self)
        info.update(keras_version=None, keras_backend=None, image_data_format="channels_first")
        return info


class MXNetOps(OpsBackend):
    name = "mxnet"
    layouts = {"image": "NCHW", "conv_kernel": "OIHW", "dense_kernel": "OI"}

    @classmethod
    def runtime(cls, backend: str, threads: int) -> Backend:
        return MXNetRuntime(threads=threads)

    def __init__(self, gpu: bool, dtype: str, image_data_format: str = "channels_first") -> None:
        super().__init__(gpu, dtype, image_data_format)
        import mxnet as mx

        self.mx = mx
        self.nd = mx.nd
        self.ctx = mx.gpu(0) if gpu else mx.cpu()

    def tensor(self, array: np.ndarray) -> Any:
        return self.nd.array(array, ctx=self.ctx, dtype=array.dtype)

    def host(self, value: Any) -> np.ndarray:
        return value.asnumpy()

    def sync(self, outputs: Any) -> None:
        self.nd.waitall()

    def _gradients(self, fn, inputs, cotangent):
        for x in inputs:
            x.attach_grad()
        with self.mx.autograd.record():
            out = fn(*inputs)

        def backward():
            out.backward(cotangent, retain_graph=True)
            return tuple(x.grad for x in inputs)

        return backward

    def op_create_numpy(self, x):
        """mx.nd.array(numpy array, ctx=...)"""
        return lambda: self.nd.array(x, ctx=self.ctx, dtype=self.dtype)

    def op_create_list(self, x):
        """mx.nd.array(nested list, ctx=..., dtype=...)"""
        return lambda: self.nd.array(x, ctx=self.ctx, dtype=self.dtype)

    op_sigmoid = calling("nd.sigmoid", "mx.nd.sigmoid")
    op_relu = calling("nd.relu", "mx.nd.relu")
    op_tanh = calling("nd.tanh", "mx.nd.tanh")
    op_softplus = calling(
        "nd.Activation", "mx.nd.Activation(act_type='softrelu')", act_type="softrelu"
    )
    op_softsign = calling("nd.softsign", "mx.nd.softsign")
    op_dot = calling("nd.dot", "mx.nd.dot (vectors)")
    op_gemm = calling("nd.dot", "mx.nd.dot (matrices)")
    op_flatten = calling("nd.flatten", "mx.nd.flatten")
    op_l2_normalize = calling(
        "nd.L2Normalization", "mx.nd.L2Normalization(mode='instance')", mode="instance"
    )

    def op_batch_norm(self, x, gamma, beta):
        """mx.nd.BatchNorm(fix_gamma=False) in autograd.train_mode"""
        nd, units = self.nd, x.shape[1]
        # MXNet keeps BatchNorm's parameters in float32 for float16 data, and requires it
        params = "float32" if self.dtype == "float16" else self.dtype
        gamma, beta = gamma.astype(params), beta.astype(params)
        moving_mean = nd.zeros((units,), ctx=self.ctx, dtype=params)
        moving_var = nd.ones((units,), ctx=self.ctx, dtype=params)

        def run():
            with self.mx.autograd.train_mode():
                return nd.BatchNorm(x, gamma, beta, moving_mean, moving_var, eps=BN_EPSILON,
                                    fix_gamma=False, axis=1)  # fmt: skip

        return run

    def _conv(self, x, k):
        size, pad = (CONV_KERNEL, CONV_KERNEL), (CONV_KERNEL // 2, CONV_KERNEL // 2)
        return self.nd.Convolution(x, k, kernel=size, pad=pad, num_filter=k.shape[0], no_bias=True)

    def op_conv2d(self, x, k):
        """mx.nd.Convolution"""
        return lambda: self._conv(x, k)

    def op_conv2d_backward(self, x, k, g):
        """mx.autograd backward of mx.nd.Convolution"""
        return self._gradients(self._conv, (x, k), g)

    def op_dense_backward(self, x, w, b, g):
        """mx.autograd backward of mx.nd.FullyConnected"""

        def dense(x, w, b):
            return self.nd.FullyConnected(x, w, b, num_hidden=w.shape[0])

        return self._gradients(dense, (x, w, b), g)

    def op_lstm_cell(self, x, h, c, w, u, b):
        """mx.nd: FullyConnected x2, split, sigmoid, tanh (as gluon.rnn.LSTMCell)"""
        nd, gates = self.nd, w.shape[0]

        def step():
            z = nd.FullyConnected(x, w, b, num_hidden=gates) + nd.FullyConnected(
                h, u, num_hidden=gates, no_bias=True
            )
            i, f, g, o = nd.split(z, num_outputs=4, axis=1)
            c2 = nd.sigmoid(f) * c + nd.sigmoid(i) * nd.tanh(g)
            return nd.sigmoid(o) * nd.tanh(c2), c2

        return step
