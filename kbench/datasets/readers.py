"""File formats of the public data sets, read into numpy arrays (parent side).

Every reader returns ``{"x_train", "y_train", "x_test", "y_test"}`` with images as
uint8 (N, H, W, C) and labels as int64, or raises :class:`FileNotFoundError` when
the files are not in ``directory``.
"""

from __future__ import annotations

import gzip
import pickle
import struct
import tarfile
from pathlib import Path
from typing import Dict, Optional

import numpy as np

Arrays = Dict[str, np.ndarray]

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}


class CorruptData(ValueError):
    """A file exists but does not hold what its format promises."""


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or gzip-compressed."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise CorruptData(f"{path}: not an unsigned-byte IDX file (header {raw[:4]!r}).")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise CorruptData(f"{path}: header says shape {shape}, file holds {data.size} bytes.")
    array = data.reshape(shape)
    return array.astype(np.int64) if ndim == 1 else array


def find_idx(directory: Path, stem: str) -> Optional[Path]:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def idx_directory(directory: Path) -> Arrays:
    """The four MNIST-format IDX files (MNIST, Fashion-MNIST), plain or .gz."""
    files = {key: find_idx(directory, stem) for key, stem in IDX_FILES.items()}
    missing = [IDX_FILES[key] for key, path in files.items() if path is None]
    if missing:
        raise FileNotFoundError(f"{directory}: missing {', '.join(missing)}")
    arrays = {key: read_idx(path) for key, path in files.items()}
    for split in ("x_train", "x_test"):
        arrays[split] = arrays[split][..., np.newaxis]  # (N, 28, 28, 1)
    return arrays


def keras_npz_images(path: Path) -> Arrays:
    """Keras' ``mnist.npz``: x_train (N, 28, 28) uint8, y_train, x_test, y_test."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in ("x_train", "y_train", "x_test", "y_test")}
    for split in ("x_train", "x_test"):
        if arrays[split].ndim == 3:
            arrays[split] = arrays[split][..., np.newaxis]
    for split in ("y_train", "y_test"):
        arrays[split] = arrays[split].astype(np.int64)
    return arrays


def _unpickle(handle) -> dict:
    return pickle.load(handle, encoding="bytes")


def cifar(directory: Path, variant: str) -> Arrays:
    """CIFAR-10 or CIFAR-100 in the "python version": the extracted folder or the .tar.gz.

    ``variant`` is "cifar-10" or "cifar-100". Images are stored as rows of 3072 bytes,
    channel planes (R, G, B) of 32x32 each.
    """
    folder = (
        directory / f"{variant}-batches-py"
        if variant == "cifar-10"
        else (directory / f"{variant}-python")
    )
    archive = directory / f"{variant}-python.tar.gz"
    if variant == "cifar-10":
        train_names, test_names, label_key = (
            [f"data_batch_{i}" for i in range(1, 6)],
            ["test_batch"],
            b"labels",
        )
    else:
        train_names, test_names, label_key = ["train"], ["test"], b"fine_labels"

    def load(open_member) -> Arrays:
        arrays = {}
        for split, names in (("train", train_names), ("test", test_names)):
            images, labels = [], []
            for name in names:
                with open_member(name) as handle:
                    batch = _unpickle(handle)
                images.append(np.asarray(batch[b"data"], dtype=np.uint8))
                labels.append(np.asarray(batch[label_key], dtype=np.int64))
            x = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            arrays[f"x_{split}"] = np.ascontiguousarray(x)
            arrays[f"y_{split}"] = np.concatenate(labels)
        return arrays

    if folder.is_dir():
        return load(lambda name: open(folder / name, "rb"))
    if archive.is_file():
        with tarfile.open(archive, "r:gz") as tar:
            prefix = tar.getnames()[0].split("/")[0]
            return load(lambda name: tar.extractfile(f"{prefix}/{name}"))
    raise FileNotFoundError(f"{directory}: neither {folder.name}/ nor {archive.name}")


def imdb_npz(path: Path) -> Dict[str, np.ndarray]:
    """Keras' ``imdb.npz``: reviews as lists of word ranks, labels 0/1 (raw, unpadded)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with np.load(path, allow_pickle=True) as archive:
        return {key: archive[key] for key in ("x_train", "y_train", "x_test", "y_test")}
