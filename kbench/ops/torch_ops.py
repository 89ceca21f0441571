"""The operations in plain PyTorch (backend ``torch-native``), no Keras.

Native layouts: images NCHW, convolution kernels OIHW, dense kernels (out, in) as
``torch.nn.Linear`` and ``torch.nn.LSTMCell`` keep them. Forward operations run
under ``torch.no_grad()``; backward ones record the forward pass once and time
``torch.autograd.grad``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbench.ops.spec import BN_EPSILON, CONV_KERNEL
from kbench.ops.worker import OpsBackend, calling


def torch_gradients(fn, inputs, cotangent):
    """The gradients of ``fn`` at ``inputs`` for ``cotangent``: the forward recorded once,
    ``torch.autograd.grad`` timed (keras.ops on torch takes them so too)."""
    import torch

    leaves = [x.detach().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    return lambda: torch.autograd.grad(out, leaves, grad_outputs=cotangent, retain_graph=True)


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

    _gradients = staticmethod(torch_gradients)

    def op_create_numpy(self, x):
        """torch.as_tensor(numpy array, device=...)"""
        return lambda: self.torch.as_tensor(x, device=self.device)

    def op_create_list(self, x):
        """torch.tensor(nested list, dtype=..., device=...)"""
        return lambda: self.torch.tensor(x, dtype=self.torch_dtype, device=self.device)

    op_sigmoid = calling("torch.sigmoid", "torch.sigmoid")
    op_relu = calling("torch.relu", "torch.relu")
    op_tanh = calling("torch.tanh", "torch.tanh")
    op_softplus = calling("functional.softplus", "torch.nn.functional.softplus")
    op_softsign = calling("functional.softsign", "torch.nn.functional.softsign")
    op_dot = calling("torch.dot", "torch.dot")
    op_gemm = calling("torch.matmul", "torch.matmul")

    def op_flatten(self, x):
        """torch.flatten(x, 1)"""
        return self._forward(lambda: self.torch.flatten(x, 1))

    op_l2_normalize = calling(
        "functional.normalize", "torch.nn.functional.normalize(x, p=2, dim=-1)", p=2.0, dim=-1
    )

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
