"""MXNet under keras-mxnet, the Keras 2.2.4 fork, in its own environment.

Runs under numpy<1.24 and Keras 2.2 APIs: nothing here may import Keras 3-only code.
"""

from __future__ import annotations

import collections
import collections.abc
from typing import Any

from kbench.backends.keras_common import KerasBackend
from kbench.backends.mxnet_common import MXNetFramework


class KerasMXNetBackend(MXNetFramework, KerasBackend):
    name = "mxnet"

    def import_keras(self) -> Any:
        # keras 2.2.4 still uses collections.Iterable, removed in Python 3.10.
        if not hasattr(collections, "Iterable"):
            collections.Iterable = collections.abc.Iterable  # type: ignore[attr-defined]
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="MXNet support in Keras")
            import keras

        return keras

    def seed(self, seed: int) -> None:
        self.seed_generators(seed)  # keras-mxnet draws initial weights with numpy

    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        optimizers = {"adam": self.keras.optimizers.Adam, "sgd": self.keras.optimizers.SGD}
        return optimizers[name](lr=learning_rate)

    def kernel_layout(self) -> str:
        # keras-mxnet keeps channels_first Conv2D kernels as (out, in, height, width)
        return "OIHW" if self.keras.backend.image_data_format() == "channels_first" else "HWIO"
