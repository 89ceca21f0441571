"""Seeded, learnable synthetic data of any shape, for every kind of model input.

Each class has a fixed random template and every sample is its class template plus
noise, so a model can learn it and accuracy means something. Images and sequences
are uint8 (scaled to [0, 1] by the worker, like real images); tokens are int32
indices whose distribution depends on the class.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np


def synthetic_arrays(
    kind: str,
    shape: Tuple[int, ...],
    classes: int,
    n_train: int,
    n_test: int,
    seed: int,
    vocabulary: int = 0,
) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "tokens":
        # Class c draws most tokens from its own band of the vocabulary.
        bands = np.linspace(1, vocabulary, classes + 1).astype(np.int64)
        arrays = {}
        for split, n in (("train", n_train), ("test", n_test)):
            labels = rng.integers(0, classes, size=n)
            low, high = bands[labels][:, None], bands[labels + 1][:, None]
            own = low + (rng.random((n,) + shape) * (high - low)).astype(np.int64)
            noise = rng.integers(1, vocabulary, size=(n,) + shape)
            pick = rng.random((n,) + shape) < 0.7
            arrays[f"x_{split}"] = np.where(pick, own, noise).astype(np.int32)
            arrays[f"y_{split}"] = labels.astype(np.int64)
        return arrays
    templates = rng.random((classes,) + tuple(shape), dtype=np.float32) * 127.5
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, classes, size=n)
        samples = rng.random((n,) + tuple(shape), dtype=np.float32) * 127.5
        samples += templates[labels]
        arrays[f"x_{split}"] = samples.astype(np.uint8)
        arrays[f"y_{split}"] = labels.astype(np.int64)
    return arrays
