"""What every Keras backend does the same way, Keras 3 and Keras 2.2.4 alike: models from
``kbench_models``, ``model.fit`` over the runner's batches with a timing callback, weights
as numpy arrays by layer order, FLOPs from the layers' shapes (:func:`layer_flops`).
"""

from __future__ import annotations

import abc
import math
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends.base import Backend, BackendMismatch, Unsupported, counted_flops
from kbench.datasets.stream import is_streamed
from kbench_models import FROM_LOGITS

Weights = List[Tuple[str, List[np.ndarray]]]


def batch_sequence(
    keras: Any, x: Any, y: np.ndarray, batch_size: int, drop_last: bool = True
) -> Any:
    """Streamed images as a Keras Sequence: one decoded batch per step, in order."""

    class Batches(keras.utils.Sequence):
        def __init__(self) -> None:
            try:
                super().__init__(workers=1, use_multiprocessing=False)  # Keras 3
            except TypeError:
                super().__init__()  # Keras 2.2

        def __len__(self) -> int:
            return len(x) // batch_size if drop_last else -(-len(x) // batch_size)

        def __getitem__(self, index: int):
            part = slice(index * batch_size, (index + 1) * batch_size)
            return x[part], y[part]

    return Batches()


def _shapes(layer: Any) -> Tuple[Optional[tuple], Optional[tuple]]:
    try:
        return tuple(layer.input_shape), tuple(layer.output_shape)  # Keras 2.2
    except (AttributeError, RuntimeError, TypeError):
        pass
    try:
        return tuple(layer.input.shape), tuple(layer.output.shape)  # Keras 3
    except (AttributeError, ValueError, TypeError):
        return None, None


def layer_flops(layer: Any) -> int:
    """Multiply-adds x2 of one Conv2D, Dense or LSTM layer (0 for any other)."""
    kind = type(layer).__name__
    in_shape, out_shape = _shapes(layer)
    if in_shape is None or out_shape is None:
        return 0
    config = layer.get_config()
    if kind == "Conv2D":
        channels_first = config.get("data_format") == "channels_first"
        cin = in_shape[1] if channels_first else in_shape[-1]
        spatial = out_shape[2:] if channels_first else out_shape[1:-1]
        kh, kw = config["kernel_size"]
        return 2 * kh * kw * cin * config["filters"] * math.prod(spatial)
    if kind == "Dense":
        positions = math.prod(out_shape[1:-1]) if len(out_shape) > 2 else 1
        return 2 * in_shape[-1] * config["units"] * positions
    if kind == "LSTM":
        steps, features = in_shape[1], in_shape[2]
        units = config["units"]
        return 2 * 4 * units * (features + units) * steps
    return 0


class KerasBackend(Backend):
    """Model lifecycle through the Keras API; subclasses add the framework parts."""

    keras: Any = None

    @abc.abstractmethod
    def import_keras(self) -> Any: ...

    # how the Keras generation spells an optimizer's learning rate (Keras 2.2: ``lr``)
    learning_rate_argument = "learning_rate"

    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        optimizers = {"adam": self.keras.optimizers.Adam, "sgd": self.keras.optimizers.SGD}
        return optimizers[name](**{self.learning_rate_argument: learning_rate})

    def load_framework(self, data_format: str) -> None:
        self.keras = self.import_keras()
        got_backend = self.keras.backend.backend()
        got_format = self.keras.backend.image_data_format()
        if got_backend != self.name or got_format != data_format:
            raise BackendMismatch(
                f"Keras reports backend {got_backend!r} with {got_format!r}; the run asked for "
                f"{self.name!r} with {data_format!r}. Check KERAS_BACKEND and "
                f"{os.environ.get('KERAS_HOME', '$KERAS_HOME')}/keras.json."
            )

    def end_case(self) -> None:
        # it also resets Keras' dtype policy: next_case applies the next task's after it
        self.keras.backend.clear_session()

    @property
    def keras_generation(self) -> int:
        return int(self.keras.__version__.split(".")[0])

    def describe(self) -> Dict[str, Any]:
        info = super().describe()
        info.update(
            keras_version=self.keras.__version__, keras_backend=self.keras.backend.backend(),
            image_data_format=self.keras.backend.image_data_format(),
        )  # fmt: skip
        # kept out (keras3.OPTIONAL_IMPORTS) and still not imported as the run ends
        skipped = [m for m in getattr(self, "imports_skipped", None) or [] if m not in sys.modules]
        if skipped:
            info["imports_skipped"] = skipped
        return info

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        import kbench_models

        return kbench_models.build(name, tuple(input_shape), num_classes)

    def count_params(self, model: Any) -> int:
        return int(model.count_params())

    def output_shape(self, model: Any) -> List[int]:
        try:
            shape = model.output_shape  # Keras 2.2
        except AttributeError:
            shape = model.output.shape  # Keras 3
        return [int(d) for d in shape[1:]]

    def flops(self, model: Any) -> Dict[str, Any]:
        return counted_flops(sum(layer_flops(layer) for layer in model.layers))

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        model.compile(
            optimizer=self.make_optimizer(optimizer, learning_rate), loss=self.keras_loss(loss),
            metrics=["accuracy"],
        )  # fmt: skip

    def keras_loss(self, loss: str) -> Any:
        """The loss ``compile`` takes: its name, or for a ``..._from_logits`` name (a model
        whose output is logits, :data:`kbench_models.FROM_LOGITS`) the loss built from logits."""
        if not loss.endswith(FROM_LOGITS):
            return loss
        if not hasattr(self.keras.losses, "SparseCategoricalCrossentropy"):
            raise Unsupported(
                f"{loss}: Keras {self.keras.__version__} has no loss object built from logits "
                "(keras.losses.SparseCategoricalCrossentropy came with Keras 2.3), and its "
                "sparse targets for an output at every position must be shaped (N, steps, 1): "
                "kbench does not adapt either for it yet. Run it on tensorflow, jax, torch or "
                "torch-native."
            )
        return self.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def fit_epoch(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int, clock: Any
    ) -> Dict[str, float]:

        class StepTimer(self.keras.callbacks.Callback):  # on_batch_*: in Keras 2.2 and 3
            def on_batch_begin(self, batch, logs=None):
                clock.batch_begin()

            def on_batch_end(self, batch, logs=None):
                clock.batch_end(logs)

        once = dict(epochs=1, shuffle=False, verbose=0, callbacks=[StepTimer()])
        if not is_streamed(x):
            history = model.fit(x, y, batch_size=batch_size, **once)
        elif self.keras_generation == 2:
            batches = batch_sequence(self.keras, x, y, batch_size)
            history = model.fit_generator(batches, steps_per_epoch=len(batches), workers=0, **once)
        else:
            history = model.fit(batch_sequence(self.keras, x, y, batch_size), **once)
        logs = {key: float(values[-1]) for key, values in history.history.items()}
        if "acc" in logs:  # Keras 2.2 spelling
            logs["accuracy"] = logs.pop("acc")
        return logs

    def train_step(self, model: Any, x: np.ndarray, y: np.ndarray) -> float:
        result = model.train_on_batch(x, y)
        return float(result[0] if isinstance(result, (list, tuple)) else result)

    def evaluate(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int
    ) -> Tuple[float, float]:
        if not is_streamed(x):
            loss, accuracy = model.evaluate(x, y, batch_size=batch_size, verbose=0)
        elif self.keras_generation == 2:
            batches = batch_sequence(self.keras, x, y, batch_size, drop_last=False)
            loss, accuracy = model.evaluate_generator(batches, steps=len(batches), workers=0)
        else:
            batches = batch_sequence(self.keras, x, y, batch_size, drop_last=False)
            loss, accuracy = model.evaluate(batches, verbose=0)
        return float(loss), float(accuracy)

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        return np.asarray(model.predict_on_batch(batch))  # a host array: the device is done

    def get_weights(self, model: Any) -> Weights:
        return [
            (type(layer).__name__, [np.asarray(w) for w in layer.get_weights()])
            for layer in model.layers
            if layer.get_weights()
        ]

    def set_weights(
        self, model: Any, weights: Weights, source_format: str, source_kernel_layout: str = "HWIO"
    ) -> None:
        # Keras' Flatten moves channels last in either data format: only Conv2D kernel
        # layouts differ (keras-mxnet under channels_first)
        layers = [layer for layer in model.layers if layer.get_weights()]
        if len(layers) != len(weights):
            raise ValueError(
                f"weights: this model has {len(layers)} layers with weights; the source has "
                f"{len(weights)}"
            )
        for layer, (kind, arrays) in zip(layers, weights):
            arrays = [np.asarray(a) for a in arrays]
            if kind == "Conv2D" and source_kernel_layout != self.kernel_layout():
                # HWIO (Keras 3) <-> OIHW (keras-mxnet under channels_first)
                order = (3, 2, 0, 1) if source_kernel_layout == "HWIO" else (2, 3, 1, 0)
                arrays[0] = np.ascontiguousarray(arrays[0].transpose(order))
            expected = [tuple(int(d) for d in w.shape) for w in layer.get_weights()]
            if kind != type(layer).__name__ or [a.shape for a in arrays] != expected:
                raise ValueError(
                    f"weights: layer {layer.name} is {type(layer).__name__} with shapes "
                    f"{expected}; the source has {kind} with {[a.shape for a in arrays]}"
                )
            layer.set_weights(arrays)
