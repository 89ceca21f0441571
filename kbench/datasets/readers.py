"""File formats of the public data sets, read into numpy arrays (parent side).

Every reader returns ``{"x_train", "y_train", "x_test", "y_test"}`` (images uint8
(N, H, W, C), labels int64), or raises :class:`FileNotFoundError` when the files are not
there and :class:`CorruptData` naming a file that does not hold what its format promises.
Pickles (CIFAR batches, ``imdb.npz``'s word lists) are read with :class:`DataUnpickler`,
which refuses any class or function they name beyond plain data: a planted file cannot
run code here.
"""

from __future__ import annotations

import codecs
import gzip
import importlib
import math
import pickle
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, Callable, Dict, Optional, Sequence

import numpy as np
import psutil

Arrays = Dict[str, np.ndarray]

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte", "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte", "y_test": "t10k-labels-idx1-ubyte",
}  # fmt: skip


class CorruptData(ValueError):
    """A file exists but does not hold what its format promises."""


# how numpy and zipfile say an .npz is truncated, damaged or not one (a bad CRC, a damaged
# deflate stream, a missing array)
NPZ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError)
NPZ_MAX_BYTES = 64 * 2**30  # the most an .npz's arrays may hold once read (and the free memory)


def npz_too_large(archive: zipfile.ZipFile, names: Sequence[str]) -> Optional[str]:
    """Why the arrays ``names`` of an open ``.npz`` archive are too large to read, else
    None; from what the file declares, before any is read (a 4 KB file can declare 730 GiB
    in a .npy header's shape, and a deflated entry can inflate a thousandfold): each
    array's larger of its zip entry's size and its header's shape times its item size,
    held against :data:`NPZ_MAX_BYTES` and the memory free."""
    declared = {}
    for name in names:
        members = archive.namelist()
        info = archive.getinfo(f"{name}.npy" if f"{name}.npy" in members else name)
        with archive.open(info) as handle:
            version = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else (
                np.lib.format.read_array_header_2_0)  # fmt: skip
            shape, _, dtype = read(handle)
        declared[name] = max(info.file_size, math.prod(shape) * dtype.itemsize)
    total, free = sum(declared.values()), psutil.virtual_memory().available
    if total <= min(NPZ_MAX_BYTES, free):
        return None
    sizes = ", ".join(f"{name} {_gib(size)}" for name, size in declared.items())
    return (
        f"its arrays declare {_gib(total)} once read ({sizes}); kbench reads at most "
        f"{_gib(NPZ_MAX_BYTES)} of arrays, and {_gib(free)} of memory is free. Use a "
        "smaller subset, or check that the file is what you meant."
    )


def _gib(size: float) -> str:
    return f"{size / 2**30:,.1f} GiB" if size >= 2**30 else f"{size / 2**20:,.1f} MiB"


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


def idx_directory(directory: Path) -> Arrays:
    """The four MNIST-format IDX files (MNIST, Fashion-MNIST), plain or .gz."""
    files = {
        key: next((directory / n for n in (stem, stem + ".gz") if (directory / n).is_file()), None)
        for key, stem in IDX_FILES.items()
    }
    missing = [IDX_FILES[key] for key, path in files.items() if path is None]
    if missing:
        raise FileNotFoundError(f"{directory}: missing {', '.join(missing)}")
    arrays = {key: read_idx(path) for key, path in files.items()}
    for split in ("x_train", "x_test"):
        arrays[split] = arrays[split][..., np.newaxis]  # (N, 28, 28, 1)
    return arrays


def keras_npz_images(path: Path) -> Arrays:
    """Keras' ``mnist.npz``: x_train (N, 28, 28) uint8, y_train, x_test, y_test."""
    arrays = keras_npz(path)
    for split in ("x_train", "x_test"):
        if arrays[split].ndim == 3:
            arrays[split] = arrays[split][..., np.newaxis]
    for split in ("y_train", "y_test"):
        arrays[split] = arrays[split].astype(np.int64)
    return arrays


def _numpy_attr(module: str, name: str) -> Any:
    """``numpy._core.<module>.<name>`` (numpy 2), else ``numpy.core.<module>.<name>``."""
    for package in ("numpy._core", "numpy.core"):
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"numpy has no {module}.{name}")


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 pickles bytes at protocol 2, and nothing else."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with {encoding!r}, not latin1")
    return codecs.encode(text, "latin1")


# (module, name) -> how to get it: numpy's rebuild functions (under numpy 1's and 2's
# names) and the bytes of a Python 3 protocol 2 pickle
_ALLOWED: Dict[tuple, Callable[[], Any]] = {
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
    ("_codecs", "encode"): lambda: _latin1_encode,
    **{
        (f"{package}.{module}", name): lambda module=module, name=name: _numpy_attr(module, name)
        for package in ("numpy.core", "numpy._core")
        for module, name in (
            ("multiarray", "_reconstruct"), ("multiarray", "scalar"), ("numeric", "_frombuffer"),
        )
    },
}  # fmt: skip


class DataUnpickler(pickle.Unpickler):
    """An unpickler for data files: plain data and numpy arrays (by numpy's own rebuild
    functions); any other class or function a pickle names is refused before it runs."""

    def find_class(self, module: str, name: str) -> Any:
        make = _ALLOWED.get((module, name))
        if make is None:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which a data file has no need of (allowed: "
                "dicts, lists, bytes, strings, numbers, numpy arrays)"
            )
        return make()


def safe_unpickle(handle: IO[bytes], where: str) -> Any:
    """The object pickled in ``handle`` (Python 2 strings as bytes), else :class:`CorruptData`."""
    try:
        return DataUnpickler(handle, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, OverflowError, MemoryError) as err:  # fmt: skip
        raise CorruptData(
            f"{where}: not read: {err}. kbench reads pickled data files with a restricted "
            "unpickler and runs nothing they name; a file that asks for more is not the "
            "published data set."
        ) from None


def _cifar_batch(handle: IO[bytes], where: str, label_key: bytes) -> tuple:
    """(uint8 rows of 3072 values, int64 labels) of one CIFAR batch file, a dict."""
    batch = safe_unpickle(handle, where)
    if not isinstance(batch, dict):
        raise CorruptData(
            f"{where}: expected a CIFAR batch (a dict with b'data' and its labels); "
            f"received {type(batch).__name__}."
        )
    rows = _batch_array(batch, b"data", np.uint8, where)
    labels = _batch_array(batch, label_key, np.int64, where)
    if rows.ndim != 2 or rows.shape[1] != 3 * 32 * 32 or labels.shape != (len(rows),):
        raise CorruptData(
            f"{where}: expected b'data' of shape (N, 3072) and N labels; received "
            f"{rows.shape} and {labels.shape}."
        )
    return rows, labels


def cifar(directory: Path, variant: str) -> Arrays:
    """CIFAR-10 or CIFAR-100 (``variant``), "python version": the folder or the .tar.gz."""
    archive = directory / f"{variant}-python.tar.gz"
    if variant == "cifar-10":
        folder, label_key = directory / "cifar-10-batches-py", b"labels"
        train_names, test_names = [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]
    else:
        folder, label_key = directory / f"{variant}-python", b"fine_labels"
        train_names, test_names = ["train"], ["test"]

    def load(open_member, where: Callable[[str], str]) -> Arrays:
        arrays = {}
        for split, names in (("train", train_names), ("test", test_names)):
            images, labels = [], []
            for name in names:
                with open_member(name) as handle:
                    rows, batch_labels = _cifar_batch(handle, where(name), label_key)
                images.append(rows)
                labels.append(batch_labels)
            x = np.concatenate(images).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            arrays[f"x_{split}"] = np.ascontiguousarray(x)
            arrays[f"y_{split}"] = np.concatenate(labels)
        return arrays

    if folder.is_dir():
        return load(lambda name: open(folder / name, "rb"), lambda name: str(folder / name))
    if archive.is_file():
        try:
            with tarfile.open(archive, "r:gz") as tar:
                prefix = tar.getnames()[0].split("/")[0]
                return load(
                    lambda name: _tar_member(tar, f"{prefix}/{name}", archive),
                    lambda name: f"{archive}:{prefix}/{name}",
                )
        except (tarfile.TarError, EOFError, zlib.error, IndexError, OSError) as err:
            raise CorruptData(
                f"{archive}: not a readable {variant}-python.tar.gz ({err})."
            ) from None
    raise FileNotFoundError(f"{directory}: neither {folder.name}/ nor {archive.name}")


def _tar_member(tar: tarfile.TarFile, name: str, archive: Path) -> IO[bytes]:
    try:
        handle = tar.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise CorruptData(f"{archive}: expected the file {name} in the archive; it is not there.")
    return handle


def _batch_array(batch: dict, key: bytes, dtype: type, where: str) -> np.ndarray:
    """``batch[key]`` as an array of ``dtype``, or :class:`CorruptData` naming the file."""
    if key not in batch:
        raise CorruptData(
            f"{where}: expected a CIFAR batch with {key!r}; it holds "
            f"{', '.join(sorted(map(repr, batch)))}."
        )
    try:
        return np.asarray(batch[key], dtype=dtype)
    except (TypeError, ValueError, OverflowError) as err:
        raise CorruptData(f"{where}: {key!r} is not an array of numbers ({err}).") from None


def keras_npz(path: Path) -> Dict[str, np.ndarray]:
    """The four arrays of a Keras ``.npz`` as they are: ``imdb.npz``'s reviews as lists of
    word ranks (object arrays, read with :class:`DataUnpickler`), labels 0/1."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with zipfile.ZipFile(path) as archive:
            too_large = npz_too_large(archive, list(IDX_FILES))
            if too_large:
                raise CorruptData(f"{path}: {too_large}")
            return {key: _npy_member(archive, key, f"{path}:{key}.npy") for key in IDX_FILES}
    except CorruptData:
        raise
    except NPZ_ERRORS as err:
        raise CorruptData(f"{path}: not a readable .npz archive ({err}).") from None


# Keras' imdb.load_data: 1 starts a review, 2 is out of vocabulary, ranks shifted by 3
IMDB_START, IMDB_OOV, IMDB_INDEX_FROM = 1, 2, 3


def token_rows(reviews: Sequence[Sequence[int]], vocabulary: int, length: int) -> np.ndarray:
    """Reviews of word ranks to int32 (N, length) rows, as Keras' imdb loader and
    ``pad_sequences`` make them: start token, ranks shifted by 3, ranks past the vocabulary
    out of vocabulary, padded and truncated at the front."""
    rows = np.zeros((len(reviews), length), dtype=np.int32)
    for i, review in enumerate(reviews):
        tokens = np.asarray(review, dtype=np.int64) + IMDB_INDEX_FROM
        tokens = np.concatenate(([IMDB_START], tokens))
        tokens[tokens >= vocabulary] = IMDB_OOV
        tokens = tokens[-length:]
        rows[i, length - len(tokens) :] = tokens
    return rows


def _npy_member(archive: zipfile.ZipFile, key: str, where: str) -> np.ndarray:
    """One array of an .npz; one of Python objects read with :class:`DataUnpickler`."""
    try:
        handle = archive.open(f"{key}.npy")
    except KeyError:
        raise CorruptData(f"{where}: expected the array {key}; the archive lacks it.") from None
    with handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
        else:
            raise CorruptData(f"{where}: .npy format version {version} is not read here.")
        if not dtype.hasobject:
            handle.seek(0)
            return np.lib.format.read_array(handle, allow_pickle=False)
        array = safe_unpickle(handle, where)
    if not isinstance(array, np.ndarray) or array.shape != shape:
        raise CorruptData(f"{where}: expected an array of shape {shape}; it holds another thing.")
    return array
