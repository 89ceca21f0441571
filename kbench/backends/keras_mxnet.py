"""MXNet under keras-mxnet, the Keras 2.2.4 fork, in its own environment.

Runs under numpy<1.24 and Keras 2.2 APIs: nothing here may import Keras 3-only code.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import os
import re
import traceback
from typing import Any, List, Optional, Sequence

from kbench.backends.base import Unsupported
from kbench.backends.keras_common import KerasBackend
from kbench.backends.mxnet_gluon import MXNetFramework, gpu_contexts
from kbench_models import short_name
from kbench_models.user import UserModelImportError, is_reference, is_saved_model

SLOW_PATH_WARNING = (
    "channels_last on keras-mxnet is the slow path: MXNet's convolution and pooling "
    "take NCHW, so keras-mxnet transposes the input and output of each of this model's "
    "{count} convolution and pooling layer(s) in every step (on GPU, studies measured it "
    "more than 10x slower than channels_first). For keras-mxnet's own speed use "
    "--data-format channels_first, its default."
)


def keras224_gap(err: BaseException, keras_root: Optional[str] = None) -> Optional[str]:
    """The layer, function or argument Keras 2.2.4 lacks, named from the error that building
    (or importing) a model raised; None for another kind of error. A TypeError raised in
    Keras' own code at ``keras_root`` (``add_weight`` called as Keras 3 takes it) is a call
    that Keras 2.2.4 takes otherwise."""
    if isinstance(err, UserModelImportError) and err.__cause__ is not None:
        err = err.__cause__
    if isinstance(err, ImportError) and "keras" in f"{err} {err.name}":
        named = re.search(r"cannot import name '([\w.]+)'", str(err))
        return f"`{named.group(1) if named else err.name}` (ImportError: {err})"
    if isinstance(err, AttributeError):
        owner = getattr(err, "obj", None)
        owner_name = getattr(owner, "__name__", None) or type(owner).__name__
        if err.name and "keras" in str(owner_name) + str(err):
            return f"`{owner_name}.{err.name}` (AttributeError: {err})"
        return None
    if isinstance(err, TypeError):
        text = str(err)
        if "Keyword argument not understood" in text:
            argument = err.args[1] if len(err.args) > 1 else text
            return f"the argument `{argument}` (Keyword argument not understood)"
        match = re.search(r"([\w.]+)\(\) got an unexpected keyword argument '(\w+)'", text)
        if match:
            return f"the argument `{match.group(2)}` of `{match.group(1)}` ({text})"
        return _raised_in_keras(err, keras_root)
    return None


def _raised_in_keras(err: TypeError, keras_root: Optional[str]) -> Optional[str]:
    """What a TypeError raised in Keras at ``keras_root`` says it lacks; None if Keras did not."""
    frames = traceback.extract_tb(err.__traceback__)
    if not keras_root or not frames:
        return None
    root = os.path.join(os.path.realpath(keras_root), "")
    if not os.path.realpath(frames[-1].filename).startswith(root):
        return None
    text = str(err)
    missing = re.search(r"([\w.]+)\(\) missing \d+ required positional arguments?: (.+)", text)
    if missing:
        return (
            f"a default for the argument {missing.group(2)} of `{missing.group(1)}` "
            f"(TypeError: {text})"
        )
    return f"the call as written, refused in Keras' `{frames[-1].name}` (TypeError: {text})"


def transposed_layers(model: Any) -> List[str]:
    """The layers keras-mxnet wraps in transposes under channels_last: convolutions and
    pooling over 4-D inputs (global pooling and Flatten reduce without one)."""
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
    hub_refusal = (
        "keras_hub needs Keras 3, and keras-mxnet is Keras 2.2.4 (no keras.ops, no "
        "functional models over dicts); run it on tensorflow, jax or torch"
    )
    learning_rate_argument = "lr"  # Keras 2.2.4's spelling

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

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        # A keras-mxnet Model takes its devices as it is created: K.Context chooses them for
        # training and inference alike (compile(context=...) would for training only).
        if is_saved_model(name):
            raise Unsupported(
                f"keras-mxnet (Keras {self.keras.__version__}) cannot read a Keras 3 saved "
                f"model ({short_name(name)}: the .keras zip format came with Keras 3); run it "
                "on tensorflow, jax or torch, or give mxnet the model's code as "
                "file.py:build."
            )
        gpus = self.switchboard.value("mxnet_gpus")
        scope = self.keras.backend.Context(gpu_contexts(gpus)) if gpus else contextlib.nullcontext()
        with scope:
            try:
                model = super().build(name, input_shape, num_classes)
            except (AttributeError, ImportError, TypeError, UserModelImportError) as err:
                missing = keras224_gap(err, os.path.dirname(self.keras.__file__))
                if missing is None or not is_reference(name):
                    raise
                raise Unsupported(
                    f"keras-mxnet (Keras {self.keras.__version__}) lacks {missing}, which "
                    f"{short_name(name)} uses; the model runs on the Keras 3 backends. To "
                    "run it on mxnet, write that part with layers Keras 2.2.4 has."
                ) from err
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

    def kernel_layout(self) -> str:
        # keras-mxnet keeps channels_first Conv2D kernels as (out, in, height, width)
        return "OIHW" if self.keras.backend.image_data_format() == "channels_first" else "HWIO"
