"""Short names for what people read: a user model's file, not its absolute path.

A result keeps the model's and the data's full path and sha256 (``kbench results
--export`` writes them); tables, comparison titles, figures and the report show
``my_model.py:build``, ``model.keras``, ``npz:data.npz`` or ``folder:photos``.
"""

from __future__ import annotations

import os

from kbench.results.config import short_name

PATH_PREFIXES = ("npz:", "folder:")  # data sets named by a path on this machine


def model_label(model: object) -> str:
    """A zoo name unchanged; a user model's file name (with its function)."""
    return short_name(model) if isinstance(model, str) else str(model)


def dataset_label(dataset: object) -> str:
    """A built-in or tfds name unchanged; a data file or folder by its last part."""
    if not isinstance(dataset, str):
        return str(dataset)
    for prefix in PATH_PREFIXES:
        if dataset.startswith(prefix):
            return prefix + os.path.basename(dataset[len(prefix) :].rstrip("/"))
    return dataset
