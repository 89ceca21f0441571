"""Operator micro-benchmarks: ``kbench ops``.

Each operation (tensor creation, activations, dot product, GEMM, flatten,
normalization, 2-D convolution forward and backward, dense backward, an LSTM cell
step) is defined once per framework family: through Keras 3's ``keras.ops`` for
TensorFlow, JAX and PyTorch (:mod:`kbench.ops.keras_ops`), in plain PyTorch
(:mod:`kbench.ops.torch_ops`) and in MXNet's ``mx.nd`` (:mod:`kbench.ops.mxnet_ops`).
What an operation computes, its inputs at each size and its float64 numpy
reference live in :mod:`kbench.ops.spec`, shared by all of them.

Every backend runs in its own worker process (:mod:`kbench.ops.worker`), which
checks each operation at each size against the reference, then times it.
:mod:`kbench.ops.runner` starts and supervises the
workers and writes one result per backend (``kind="ops"``) to a results store;
:mod:`kbench.views.ops` turns results into tables and figures.

Importing this package imports no framework and nothing of the parent side.

May import: kbench.run, kbench.results, kbench.backends, kbench.measure.
"""

from kbench.ops.spec import DEFAULT_SIZES, DTYPES, OPS, OpSpec, sizes_up_to

__all__ = ["DEFAULT_SIZES", "DTYPES", "OPS", "OpSpec", "sizes_up_to"]
