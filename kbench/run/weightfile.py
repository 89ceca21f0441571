"""Parity, worker side: model weights as a plain .npz (how initial weights move between
workers) and :func:`replay`, the same weights and batches trained on every backend.

The file holds each layer's Keras ``get_weights()`` arrays in layer order, the data
format the model was built in (it orders the first Dense kernel after a Flatten) and the
Conv2D kernel layout. No pickle: numpy arrays and a JSON header only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

Weights = List[Tuple[str, List[np.ndarray]]]


def save(path: Path, weights: Weights, **meta: Any) -> None:
    arrays = {}
    layers = []
    for index, (kind, layer_arrays) in enumerate(weights):
        layers.append({"type": kind, "arrays": len(layer_arrays)})
        for j, array in enumerate(layer_arrays):
            arrays[f"{index:04d}_{j}"] = np.asarray(array)
    header = json.dumps({"layers": layers, **meta})
    np.savez(path, __header__=np.frombuffer(header.encode(), dtype=np.uint8), **arrays)


def _header(archive: Any) -> Dict[str, Any]:
    return json.loads(archive["__header__"].tobytes().decode())


def layer_types(path: Path) -> List[str]:
    """The layers' types in order, from the header alone (no array is read)."""
    with np.load(path, allow_pickle=False) as archive:
        return [layer["type"] for layer in _header(archive)["layers"]]


def load(path: Path) -> Tuple[Weights, Dict[str, Any]]:
    with np.load(path, allow_pickle=False) as archive:
        header = _header(archive)
        weights = [
            (layer["type"], [archive[f"{index:04d}_{j}"] for j in range(layer["arrays"])])
            for index, layer in enumerate(header.pop("layers"))
        ]
    return weights, header


def replay(
    backend: Any, model: Any, arrays: Dict[str, np.ndarray], order: np.ndarray, *,
    parity: Dict[str, Any], batch_size: int, learning_rate: float, loss: str, data_format: str,
) -> Dict[str, Any]:  # fmt: skip
    """The reference (no ``weights_in``) saves its initial weights to ``weights_out``; every
    other loads them. Each records its outputs on one batch, then each loss of
    ``parity["steps"]`` steps of plain SGD on the runner's batch order."""
    backend.compile(model, "sgd", learning_rate, loss)
    loaded = bool(parity.get("weights_in"))
    if loaded:  # the reference's weights, read once
        initial, source = load(Path(parity["weights_in"]))
        backend.set_weights(model, initial, source["data_format"], source["kernel_layout"])
    else:  # this run's own, read once (copies: training does not change them)
        initial = backend.get_weights(model)
        source = {"data_format": data_format, "kernel_layout": backend.kernel_layout()}
        save(Path(parity["weights_out"]), initial, **source)
    probe = arrays["x_test"][:batch_size]
    outputs = backend.predict(model, probe)
    indices = order.reshape(-1)

    def train_steps() -> list:
        losses = []
        for step in range(parity["steps"]):
            batch = indices[step * batch_size : (step + 1) * batch_size]
            x, y = arrays["x_train"][batch], arrays["y_train"][batch]
            losses.append(backend.train_step(model, x, y))
        return losses

    losses = train_steps()
    noise_losses = None
    if not loaded:
        # The noise floor: the same training from weights nudged by about one float32
        # rounding step. How far its losses drift is how much this model and setting
        # amplify rounding alone.
        rng = np.random.default_rng(parity.get("seed", 0))
        nudged = [
            (kind, [a * (1 + 1e-7 * rng.choice([-1.0, 1.0], size=np.shape(a))).astype(a.dtype)
                    for a in arrays_])
            for kind, arrays_ in initial
        ]  # fmt: skip
        backend.set_weights(model, nudged, data_format, backend.kernel_layout())
        # Not compiled again (a second trace of the training step: 9 s for ResNet-56 on
        # TensorFlow): plain SGD keeps nothing but its step count, which does not change
        # its update, and each step's loss is that batch's alone (train_on_batch resets
        # Keras 3's loss tracker; keras-mxnet, PyTorch and Gluon return the batch's loss).
        noise_losses = train_steps()
    return {
        "layer_types": sorted({kind for kind, _ in initial}),
        "outputs": np.asarray(outputs, dtype=np.float64).tolist(), "losses": losses,
        "noise_losses": noise_losses, "steps": parity["steps"], "learning_rate": learning_rate,
        "weights_from": "the reference run" if loaded else "this run", "source_layout": source,
    }  # fmt: skip
