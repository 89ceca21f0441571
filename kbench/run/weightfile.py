"""Model weights as a plain .npz: how parity moves initial weights between workers.

Layer by layer in Keras layer order, each layer's arrays as its Keras ``get_weights()``
gives them, plus what a reader needs to lay them out for itself: the data format
the model was built in (it orders the first Dense kernel after a Flatten) and the
Conv2D kernel layout (HWIO in Keras 3; OIHW in keras-mxnet under channels_first).
No pickle: numpy arrays and a JSON header only.
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
