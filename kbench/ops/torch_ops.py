"""The operations in plain PyTorch (backend ``torch-native``), no Keras.

Native layouts: images NCHW, convolution kernels OIHW, dense kernels (out, in) as
``torch.nn.Linear`` and ``torch.nn.LSTMCell`` keep them. Forward operations run
under ``torch.no_grad()``; backward ones record the forward pass once and time
``torch.autograd.grad``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbench.ops.base import OpsBackend
from kbench.ops.spec import BN_EPSILON, CONV_KERNEL


class TorchOps(OpsBackend):
    name = "torch-native"
    layouts = {"image": "NCHW", "conv_kernel": "OIHW", "dense_kernel": "OI"}

    def __init__(self, gpu: bool, dtype: str, image_data_format: str = "channels_first") -> None:
        super().__init__(gpu, dtype, image_data_format)
        import torch

        self.torch = torch
        self.functional = torch.nn.functional
        self.device = torch.device("cuda" if gpu else "cpu")
        self.torch_dtype = getattr(torch, dtype)

    def tensor(self, array: np.ndarray) -> Any:
        return self.torch.as_tensor(array, device=self.device)

    def host(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy()

    def sync(self, outputs: Any) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def _forward(self, fn):
        torch = self.torch

        def run():
            with torch.no_grad():
                return fn()

        return run

    def _gradients(self, fn, inputs, cotangent):
        leaves = [x.detach().requires_grad_(True) for x in inputs]
        out = fn(*leaves)
        autograd = self.torch.autograd
        return lambda: autograd.grad(out, leaves, grad_outputs=cotangent, retain_graph=True)

    def op_create_numpy(self, x):
        """torch.as_tensor(numpy array, device=...)"""
        return lambda: self.torch.as_tensor(x, device=self.device)

    def op_create_list(self, x):
        """torch.tensor(nested list, dtype=..., device=...)"""
        return lambda: self.torch.tensor(x, dtype=self.torch_dtype, device=self.device)

    def op_sigmoid(self, x):
        """torch.sigmoid"""
        return self._forward(lambda: self.torch.sigmoid(x))

    def op_relu(self, x):
        """torch.relu"""
        return self._forward(lambda: self.torch.relu(x))

    def op_tanh(self, x):
        """torch.tanh"""
        return self._forward(lambda: self.torch.tanh(x))

    def op_softplus(self, x):
        """torch.nn.functional.softplus"""
        return self._forward(lambda: self.functional.softplus(x))

    def op_softsign(self, x):
        """torch.nn.functional.softsign"""
        return self._forward(lambda: self.functional.softsign(x))

    def op_dot(self, x, y):
        """torch.dot"""
        return self._forward(lambda: self.torch.dot(x, y))

    def op_gemm(self, a, b):
        """torch.matmul"""
        return self._forward(lambda: self.torch.matmul(a, b))

    def op_flatten(self, x):
        """torch.flatten(x, 1)"""
        return self._forward(lambda: self.torch.flatten(x, 1))

    def op_l2_normalize(self, x):
        """torch.nn.functional.normalize(x, p=2, dim=-1)"""
        return self._forward(lambda: self.functional.normalize(x, p=2.0, dim=-1))

    def op_batch_norm(self, x, gamma, beta):
        """torch.nn.functional.batch_norm(training=True), no running statistics"""
        return self._forward(lambda: self.functional.batch_norm(
            x, None, None, gamma, beta, training=True, eps=BN_EPSILON))  # fmt: skip

    def _conv(self, x, k):
        return self.functional.conv2d(x, k, padding=CONV_KERNEL // 2)

    def op_conv2d(self, x, k):
        """torch.nn.functional.conv2d"""
        return self._forward(lambda: self._conv(x, k))

    def op_conv2d_backward(self, x, k, g):
        """torch.autograd.grad of torch.nn.functional.conv2d"""
        return self._gradients(self._conv, (x, k), g)

    def op_dense_backward(self, x, w, b, g):
        """torch.autograd.grad of torch.nn.functional.linear"""
        return self._gradients(self.functional.linear, (x, w, b), g)

    def op_lstm_cell(self, x, h, c, w, u, b):
        """torch.nn.LSTMCell (one fused step)"""
        torch = self.torch
        units = h.shape[1]
        cell = torch.nn.LSTMCell(x.shape[1], units, device=self.device, dtype=self.torch_dtype)
        with torch.no_grad():
            cell.weight_ih.copy_(w)
            cell.weight_hh.copy_(u)
            cell.bias_ih.copy_(b)
            cell.bias_hh.zero_()
        return self._forward(lambda: cell(x, (h, c)))
