"""Image folders read batch by batch: ImageNet, which does not fit in memory.

Parent side, :func:`scan` lists a directory of class folders (``DIR/train/<class>/``
and ``DIR/val/<class>/``, the layout of ImageNet's CLS-LOC set and of
torchvision's ``ImageFolder``) into file paths and labels; nothing is decoded.

Worker side, :class:`StreamedImages` stands where an array of images would: taking
rows with an index array narrows it without reading anything, slicing a range of
rows decodes just those files (Pillow), resizes them (bilinear) and lays them out
as the model takes them. The time spent decoding is counted in :data:`LOADING`,
so a result can report data loading apart from compute.

Only numpy, Pillow and the standard library: this runs under every environment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp")


@dataclass
class LoadingClock:
    """Seconds spent reading and decoding streamed images in this process."""

    seconds: float = 0.0
    images: int = 0

    def reset(self) -> None:
        self.seconds, self.images = 0.0, 0


LOADING = LoadingClock()


# ----------------------------------------------------------------- parent side


@dataclass(frozen=True)
class FolderListing:
    classes: List[str]
    train: List[Tuple[str, int]]
    test: List[Tuple[str, int]]
    source: str


def scan(
    root: Path, test_fraction: float = 0.1, seed: int = 0, name: str = "imagenet"
) -> FolderListing:
    """Files and labels of an image-folder data set; classes sorted by folder name.

    With ``train/`` and ``val/`` (or ``test/``) under ``root`` those are the splits;
    with class folders directly under ``root``, a seeded ``test_fraction`` of each
    class is held out.
    """
    from kbench.datasets.sources import DataUnavailable

    root = Path(root)
    train_dir = root / "train"
    test_dir = next((root / d for d in ("val", "test") if (root / d).is_dir()), None)
    base = train_dir if train_dir.is_dir() else root
    classes = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    if not classes:
        fix = (
            "Point --data-dir at it, or use --dataset synthetic --input-shape 224x224x3 "
            "--num-classes 1000."
            if name == "imagenet"
            else "Give the folder that holds one folder per class."
        )
        raise DataUnavailable(
            f"{name}: expected a directory of class folders ({root}/train/<class>/*.JPEG "
            f"and {root}/val/<class>/*.JPEG, or {root}/<class>/*.JPEG); found no class "
            f"folder. {fix}"
        )
    index = {name: i for i, name in enumerate(classes)}

    def files(folder: Path) -> List[Tuple[str, int]]:
        out = []
        for name in classes:
            if not (folder / name).is_dir():
                continue
            for path in sorted((folder / name).iterdir()):
                if path.suffix.lower() in EXTENSIONS:
                    out.append((str(path), index[name]))
        return out

    if base is train_dir and test_dir is not None:
        train, test = files(train_dir), files(test_dir)
        source = f"image folders {train_dir} and {test_dir}"
    else:
        everything = files(base)
        rng = np.random.default_rng(seed)
        held = set()
        for label in range(len(classes)):
            members = [i for i, (_, y) in enumerate(everything) if y == label]
            count = int(round(len(members) * test_fraction))
            held.update(rng.permutation(members)[:count].tolist())
        train = [f for i, f in enumerate(everything) if i not in held]
        test = [f for i, f in enumerate(everything) if i in held]
        source = f"image folders {base} ({test_fraction:.0%} of each class held out)"
    if not train or not test:
        raise DataUnavailable(
            f"{name}: found {len(train)} training and {len(test)} test images under {root} "
            f"(extensions {', '.join(EXTENSIONS)}); both splits need at least one."
        )
    return FolderListing(classes, train, test, source)


def listing_arrays(listing: FolderListing) -> Dict[str, np.ndarray]:
    """Paths and labels as arrays, stored like any prepared data set (no pixels)."""
    arrays = {}
    for split, items in (("train", listing.train), ("test", listing.test)):
        arrays[f"x_{split}"] = np.array([path for path, _ in items])
        arrays[f"y_{split}"] = np.array([label for _, label in items], dtype=np.int64)
    return arrays


# ----------------------------------------------------------------- worker side


class StreamedImages:
    """Image files standing in for a float32 array of shape (N, H, W, 3) or (N, 3, H, W)."""

    dtype = np.dtype(np.float32)
    ndim = 4

    def __init__(
        self,
        paths: np.ndarray,
        size: Tuple[int, int],
        data_format: str = "channels_last",
        clock: LoadingClock = LOADING,
    ) -> None:
        self.paths = np.asarray(paths)  # of str
        self.size = (int(size[0]), int(size[1]))  # (height, width) each image is resized to
        self.data_format = data_format
        self.clock = clock

    @property
    def shape(self) -> Tuple[int, ...]:
        height, width = self.size
        if self.data_format == "channels_first":
            return (len(self.paths), 3, height, width)
        return (len(self.paths), height, width, 3)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return self.decode(self.paths[key])
        if isinstance(key, (int, np.integer)):
            return self.decode(self.paths[key : key + 1 or None])[0]
        # rows by index: a narrower view, nothing read yet
        return StreamedImages(self.paths[np.asarray(key)], self.size, self.data_format, self.clock)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.decode(self.paths)
        return array if dtype is None else array.astype(dtype)

    def decode(self, paths: Sequence[str]) -> np.ndarray:
        from PIL import Image

        start = time.perf_counter()
        height, width = self.size
        batch = np.empty((len(paths), height, width, 3), dtype=np.float32)
        for row, path in enumerate(paths):
            with Image.open(path) as image:
                image = image.convert("RGB").resize((width, height), Image.BILINEAR)
                batch[row] = np.asarray(image, dtype=np.float32) / 255.0
        if self.data_format == "channels_first":
            batch = np.ascontiguousarray(batch.transpose(0, 3, 1, 2))
        self.clock.seconds += time.perf_counter() - start
        self.clock.images += len(paths)
        return batch


def is_streamed(x: Any) -> bool:
    return isinstance(x, StreamedImages)
