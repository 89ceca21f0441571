"""Short names for what people read: a user model's file, not its absolute path.

A result keeps the model's and the data's full path and sha256 (``kbench results
--export`` writes them); tables, comparison titles, figures and the report show
``my_model.py:build``, ``model.keras``, ``npz:data.npz`` or ``folder:photos``.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Tuple

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


def model_labels(models: Iterable[str]) -> Dict[str, str]:
    """A label per model: its short name (``net.py:build``), or, where several user
    model files share one, as much of each path as tells them apart
    (``a/net.py:build``, ``b/net.py:build``)."""
    models = list(dict.fromkeys(m for m in models if isinstance(m, str)))
    labels = {m: model_label(m) for m in models}
    clashes: Dict[str, List[str]] = {}
    for model, label in labels.items():
        clashes.setdefault(label, []).append(model)
    for clashing in clashes.values():
        if len(clashing) < 2:
            continue
        tails = {m: labels[m] for m in clashing}
        for depth in range(2, 1 + max(len(_where(m)[0].split("/")) for m in clashing)):
            tails = {m: _path_tail(m, depth) for m in clashing}
            if len(set(tails.values())) == len(clashing):
                break
        labels.update(tails)
    return labels


def _where(model: str) -> Tuple[str, str]:
    """A user model's path and function (none for a saved model)."""
    if model.endswith(".keras") or ":" not in model:
        return model, ""
    where, _, function = model.rpartition(":")
    return where, function


def _path_tail(model: str, depth: int) -> str:
    where, function = _where(model)
    tail = "/".join(where.replace("\\", "/").split("/")[-depth:])
    return tail + (f":{function}" if function else "")
