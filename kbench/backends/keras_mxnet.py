"""MXNet under keras-mxnet, the Keras 2.2.4 fork, in its own environment.

Runs under numpy<1.24 and Keras 2.2 APIs: nothing here may import Keras 3-only code.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
from typing import Any, List, Sequence

from kbench.backends.keras_common import KerasBackend
from kbench.backends.mxnet_common import MXNetFramework, gpu_contexts

SLOW_PATH_WARNING = (
    "channels_last on keras-mxnet is the slow path: MXNet's convolution and pooling "
    "take NCHW, so keras-mxnet transposes the input and output of each of this model's "
    "{count} convolution and pooling layer(s) in every step (on GPU, studies measured it "
    "more than 10x slower than channels_first). For keras-mxnet's own speed use "
    "--data-format channels_first, its default."
)


def transposed_layers(model: Any) -> List[str]:
    """The layers keras-mxnet wraps in transposes under channels_last: convolutions and
    pooling over images, whose inputs have 4 or more dimensions (global pooling and
    Flatten reduce without one)."""
    names = []
    for layer in model.layers:
        kind = type(layer).__name__
        if (
            getattr(layer, "data_format", None) == "channels_last"
            and ("Conv" in kind or "Pooling" in kind)
            and not kind.startswith("Global")
            and len(getattr(layer, "input_shape", None) or ()) > 3  # shared layers: none
        ):
            names.append(layer.name)
    return names


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

    def apply_switches(self) -> None:
        self.require_gpus(self.switchboard.value("mxnet_gpus"), self.gpus)

    def seed(self, seed: int) -> None:
        self.seed_generators(seed)  # keras-mxnet draws initial weights with numpy

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        # A keras-mxnet Model takes its context (the devices its MXNet Module binds to)
        # when it is created; K.Context is the fork's scope for choosing it, and holds for
        # training and inference alike (compile(context=...) would for training only).
        gpus = self.switchboard.value("mxnet_gpus")
        scope = self.keras.backend.Context(gpu_contexts(gpus)) if gpus else contextlib.nullcontext()
        with scope:
            model = super().build(name, input_shape, num_classes)
        used = ", ".join(str(c) for c in getattr(model, "_context", None) or []) or "unknown"
        if gpus:
            detail = (
                f"keras.backend.Context({gpu_contexts(gpus)}): the model's MXNet Module binds to "
                f"[{used}]; each batch is split into {gpus} slices, one per GPU"
            )
        else:
            detail = f"keras-mxnet's default device (the first GPU if any, else cpu()): [{used}]"
        self.switchboard.applied("mxnet_gpus", detail)
        transposed = transposed_layers(model)
        if transposed:
            self.warn(SLOW_PATH_WARNING.format(count=len(transposed)))
        return model

    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        optimizers = {"adam": self.keras.optimizers.Adam, "sgd": self.keras.optimizers.SGD}
        return optimizers[name](lr=learning_rate)

    def kernel_layout(self) -> str:
        # keras-mxnet keeps channels_first Conv2D kernels as (out, in, height, width)
        return "OIHW" if self.keras.backend.image_data_format() == "channels_first" else "HWIO"
