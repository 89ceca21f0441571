"""Operator micro-benchmarks: ``kbench ops``.

Each operation is defined once (:mod:`kbench.ops.spec`: inputs, float64 reference,
tolerance) and implemented once per framework family: ``keras.ops`` for TensorFlow,
JAX and PyTorch (:mod:`~kbench.ops.keras_ops`), plain PyTorch
(:mod:`~kbench.ops.torch_ops`), MXNet's ``mx.nd`` (:mod:`~kbench.ops.mxnet_ops`). A
worker process per backend (:mod:`~kbench.ops.worker`) checks, then times, each
operation at each size; :mod:`~kbench.ops.runner` starts them and stores one result per
backend (``kind="ops"``); :mod:`kbench.views.ops` draws them.

Importing this package imports no framework and nothing of the parent side.

May import: kbench.run, kbench.results, kbench.backends, kbench.measure.
"""

from kbench.ops.spec import DEFAULT_SIZES, DTYPES, OPS, OpSpec, sizes_up_to

__all__ = ["DEFAULT_SIZES", "DTYPES", "OPS", "OpSpec", "sizes_up_to"]
