"""Data sets: found and prepared once in the parent, read by every worker.

The parent resolves a data set to numpy arrays (images as uint8, channels last;
labels as int64) and writes them to one ``.npz`` that every backend's worker reads,
so all backends train on byte-identical data. The worker side only needs numpy:
:func:`load_prepared` and :func:`to_data_format`.

Fashion-MNIST is looked for, in order, in ``--data-dir``, the Keras cache
(``~/.keras/datasets/fashion-mnist``, read only), kbench's cache, Debian's
``dataset-fashion-mnist`` package, and finally downloaded into kbench's cache.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import struct
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

log = logging.getLogger(__name__)

FASHION_MNIST_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
FASHION_MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
SYNTHETIC_DEFAULT_SAMPLES = (2048, 512)  # train, test


class DataUnavailable(RuntimeError):
    """A real data set could not be found or fetched; the message says how to get it."""


@dataclass(frozen=True)
class PreparedData:
    """A data set written to ``path`` as x_train, y_train, x_test, y_test."""

    path: str
    name: str
    source: str
    synthetic: bool
    input_shape: Tuple[int, ...]  # (height, width, channels)
    num_classes: int
    train_samples: int
    test_samples: int
    prepare_time_s: float

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["input_shape"] = list(self.input_shape)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> PreparedData:
        return cls(**{**data, "input_shape": tuple(data["input_shape"])})

    def describe(self) -> Dict[str, Any]:
        """What a result records about its data (everything but the temporary path)."""
        data = self.to_dict()
        del data["path"]
        return data


def kbench_cache_dir() -> Path:
    return Path(os.environ.get("KBENCH_CACHE_DIR") or Path.home() / ".cache" / "kbench")


# --------------------------------------------------------------------------- parent side


def prepare(
    dataset: str,
    out_dir: Path,
    *,
    data_dir: Optional[str] = None,
    train_samples: Optional[int] = None,
    test_samples: Optional[int] = None,
    input_shape: Optional[Tuple[int, ...]] = None,
    num_classes: Optional[int] = None,
    seed: int = 0,
) -> PreparedData:
    """Load ``dataset``, cut it to the requested sizes and write it under ``out_dir``."""
    start = time.perf_counter()
    if dataset == "fashion_mnist":
        arrays, source = _load_fashion_mnist(data_dir)
        classes = 10
    elif dataset == "digits":
        arrays, source = _load_digits(seed)
        classes = 10
    elif dataset == "synthetic":
        shape = tuple(input_shape or (28, 28, 1))
        classes = num_classes or 10
        n_train = train_samples or SYNTHETIC_DEFAULT_SAMPLES[0]
        n_test = test_samples or SYNTHETIC_DEFAULT_SAMPLES[1]
        arrays = synthetic_arrays(shape, classes, n_train, n_test, seed)
        source = f"synthetic (seed {seed}, class templates plus noise)"
    else:  # config validation keeps this unreachable
        raise ValueError(f"unknown dataset {dataset!r}")

    for split, limit in (("train", train_samples), ("test", test_samples)):
        if limit is not None and limit > len(arrays[f"x_{split}"]):
            raise DataUnavailable(
                f"{split}_samples: {dataset} has {len(arrays[f'x_{split}'])} {split} samples; "
                f"received a request for {limit}. Ask for at most that many."
            )
        if limit is not None:
            arrays[f"x_{split}"] = arrays[f"x_{split}"][:limit]
            arrays[f"y_{split}"] = arrays[f"y_{split}"][:limit]

    key = hashlib.sha1(
        repr(
            (dataset, source, train_samples, test_samples, input_shape, num_classes, seed)
        ).encode()
    ).hexdigest()[:12]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dataset}-{key}.npz"
    np.savez(path, **arrays)
    return PreparedData(
        path=str(path),
        name=dataset,
        source=source,
        synthetic=dataset == "synthetic",
        input_shape=tuple(int(d) for d in arrays["x_train"].shape[1:]),
        num_classes=classes,
        train_samples=len(arrays["x_train"]),
        test_samples=len(arrays["x_test"]),
        prepare_time_s=time.perf_counter() - start,
    )


def synthetic_arrays(
    shape: Tuple[int, ...], classes: int, n_train: int, n_test: int, seed: int
) -> Dict[str, np.ndarray]:
    """Seeded, learnable images: each class is a fixed random template plus noise."""
    rng = np.random.default_rng(seed)
    templates = rng.random((classes,) + tuple(shape), dtype=np.float32) * 127.5
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, classes, size=n)
        images = rng.random((n,) + tuple(shape), dtype=np.float32) * 127.5
        images += templates[labels]
        arrays[f"x_{split}"] = images.astype(np.uint8)
        arrays[f"y_{split}"] = labels.astype(np.int64)
    return arrays


def fashion_mnist_locations(data_dir: Optional[str]) -> List[Tuple[str, Path]]:
    """Where Fashion-MNIST is looked for, in order, with a name for each place."""
    places = []
    if data_dir:
        places.append(("--data-dir", Path(data_dir)))
    places += [
        ("Keras cache", Path.home() / ".keras" / "datasets" / "fashion-mnist"),
        ("kbench cache", kbench_cache_dir() / "datasets" / "fashion-mnist"),
        ("Debian dataset-fashion-mnist", DEBIAN_FASHION_MNIST),
    ]
    return places


def _find_idx(directory: Path, stem: str) -> Optional[Path]:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def _load_fashion_mnist(data_dir: Optional[str]) -> Tuple[Dict[str, np.ndarray], str]:
    places = fashion_mnist_locations(data_dir)
    for label, directory in places:
        files = {key: _find_idx(directory, stem) for key, stem in FASHION_MNIST_FILES.items()}
        if all(files.values()):
            log.debug("Fashion-MNIST from %s (%s)", label, directory)
            arrays = {key: read_idx(path) for key, path in files.items()}
            for split in ("x_train", "x_test"):
                arrays[split] = arrays[split][..., np.newaxis]  # (N, 28, 28, 1)
            return arrays, f"{label}: {directory}"
        if data_dir and label == "--data-dir":
            missing = [stem for key, stem in FASHION_MNIST_FILES.items() if not files[key]]
            raise DataUnavailable(
                f"--data-dir {directory}: expected the Fashion-MNIST idx files (plain or .gz); "
                f"missing {', '.join(missing)}."
            )
    cache = places[-2][1]
    try:
        _download_fashion_mnist(cache)
    except OSError as err:
        looked = "; ".join(f"{label} ({path})" for label, path in places)
        raise DataUnavailable(
            f"Fashion-MNIST not found (looked in: {looked}) and the download from "
            f"{FASHION_MNIST_URL} failed: {err}. Fix: pass --data-dir DIR holding the four idx "
            "files, run `apt-get install dataset-fashion-mnist`, or use --dataset synthetic."
        ) from err
    return _load_fashion_mnist(None)


def _download_fashion_mnist(directory: Path) -> None:
    if os.environ.get("KBENCH_OFFLINE") == "1":
        raise OSError("downloads are off (KBENCH_OFFLINE=1)")
    directory.mkdir(parents=True, exist_ok=True)
    for stem in FASHION_MNIST_FILES.values():
        target = directory / f"{stem}.gz"
        if target.exists():
            continue
        log.info("downloading %s", FASHION_MNIST_URL + target.name)
        with urllib.request.urlopen(FASHION_MNIST_URL + target.name, timeout=60) as response:
            partial = target.with_suffix(".part")
            partial.write_bytes(response.read())
            partial.replace(target)


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or gzip-compressed."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype_code != 0x08:
        raise DataUnavailable(f"{path}: not an unsigned-byte IDX file (header {raw[:4]!r}).")
    shape = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DataUnavailable(f"{path}: header says shape {shape}, file holds {data.size} bytes.")
    array = data.reshape(shape)
    return array.astype(np.int64) if ndim == 1 else array


def _load_digits(seed: int) -> Tuple[Dict[str, np.ndarray], str]:
    """scikit-learn's bundled 8x8 digits, split 80/20 with a seeded permutation."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise DataUnavailable(
            "dataset digits needs scikit-learn in the harness environment: "
            "pip install scikit-learn (scripts/setup_envs.sh installs it)."
        ) from err
    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., np.newaxis]
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(len(labels) * 0.8)
    train, test = order[:cut], order[cut:]
    arrays = {
        "x_train": images[train],
        "y_train": labels[train],
        "x_test": images[test],
        "y_test": labels[test],
    }
    return arrays, "scikit-learn load_digits (80/20 split)"


def batch_order(
    n_samples: int, batch_size: int, epochs: int, seed: int, total_steps: Optional[int] = None
) -> np.ndarray:
    """Sample indices for every step, shape (epochs, steps_per_epoch * batch_size).

    One seeded permutation per epoch, drawn here once so that every backend sees the
    same mini-batches in the same order. The last partial batch is dropped. With
    ``total_steps`` the order is one pass of exactly that many steps, cycling
    through permutations when the data set is smaller.
    """
    rng = np.random.default_rng(seed)
    if total_steps is not None:
        needed = total_steps * batch_size
        chunks, have = [], 0
        while have < needed:
            chunks.append(rng.permutation(n_samples))
            have += n_samples
        return np.concatenate(chunks)[:needed].reshape(1, needed).astype(np.int64)
    steps = n_samples // batch_size
    if steps == 0:
        raise DataUnavailable(
            f"batch_size {batch_size} is larger than the {n_samples} training samples; "
            "use a smaller --batch-size or more --train-samples."
        )
    return np.stack(
        [rng.permutation(n_samples)[: steps * batch_size] for _ in range(epochs)]
    ).astype(np.int64)


# --------------------------------------------------------------------------- worker side


def load_prepared(path: str) -> Dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


def to_data_format(images: np.ndarray, data_format: str) -> np.ndarray:
    """uint8 (N, H, W, C) images to float32 in [0, 1], laid out for ``data_format``."""
    x = images.astype(np.float32) / 255.0
    if data_format == "channels_first":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x
