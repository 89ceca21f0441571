"""Image folders read batch by batch: ImageNet, which does not fit in memory, and your
own images (``--dataset folder:PATH``).

Parent side, :func:`scan` lists a directory of one folder per class (ImageNet's, Keras'
``image_dataset_from_directory`` and torchvision's ``ImageFolder`` layout; classes in
sorted order) into paths and labels: ``DIR/train/`` and ``DIR/val/`` (or ``test/``) are the
splits, else a seeded 10 % of each class is held out; hidden entries are skipped. Refused,
with the names: a link out of the data folder, a class folder without images, one class
only, a validation class that training lacks. Worker side, :class:`StreamedImages` stands
where an array of images would: slicing rows decodes just those files (Pillow, RGB),
resized and laid out as the model takes them, the time counted in :data:`LOADING`.

Only numpy, Pillow and the standard library: this runs under every environment.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.datasets.sources import DataUnavailable

log = logging.getLogger(__name__)

EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp")
FOLDER_PREFIX = "folder:"
DEFAULT_SIZE = (224, 224)  # a model without a 2-D input shape (never an image model)


class UnreadableImage(ValueError):
    """An image file of a data set that Pillow cannot decode; the message names it."""


@dataclass
class LoadingClock:
    """Seconds spent reading and decoding streamed images in this process."""

    seconds: float = 0.0
    images: int = 0


LOADING = LoadingClock()


@dataclass(frozen=True)
class FolderListing:
    classes: List[str]
    train: List[Tuple[str, int]]
    test: List[Tuple[str, int]]
    source: str


def scan(
    root: Path, test_fraction: float = 0.1, seed: int = 0, name: str = "imagenet"
) -> FolderListing:
    """Files and labels of an image-folder data set, as the module's docstring says."""
    root = Path(root)
    train_dir = root / "train"
    test_dir = next((root / d for d in ("val", "test") if (root / d).is_dir()), None)
    base = train_dir if train_dir.is_dir() else root
    classes = class_folders(base, root, name) if base.is_dir() else []
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
    if len(classes) == 1:
        raise DataUnavailable(
            f"{name}: expected at least two class folders in {base}; found one, "
            f"{classes[0]!r}. A classifier of one class is right whatever it learns, so its "
            "accuracy measures nothing. Add a folder of another class."
        )
    split = base is train_dir and test_dir is not None
    if split:
        _require_known_classes(test_dir, train_dir, classes, root, name)
    index = {name: i for i, name in enumerate(classes)}

    def files(folder: Path) -> List[Tuple[str, int]]:
        """The images of each class folder, sorted; hidden files (``._x.jpg``) left out."""
        out = []
        for name in classes:
            if (folder / name).is_dir():
                out += [
                    (str(path), index[name])
                    for path in sorted((folder / name).iterdir())
                    if path.suffix.lower() in EXTENSIONS and not path.name.startswith(".")
                ]
        return out

    if split:
        train, test = files(train_dir), files(test_dir)
        source = f"image folders {train_dir} and {test_dir}"
    else:
        train, test = _hold_out(files(base), len(classes), test_fraction, seed)
        source = f"image folders {base} ({test_fraction:.0%} of each class held out)"
    _require_images(base, classes, train if split else train + test, name)
    if not train or not test:
        raise DataUnavailable(
            f"{name}: found {len(train)} training and {len(test)} test images under {root} "
            f"(extensions {', '.join(EXTENSIONS)}); both splits need at least one."
        )
    return FolderListing(classes, train, test, source)


def class_folders(base: Path, root: Path, name: str = "folder") -> List[str]:
    """The class folders of ``base``, sorted; hidden ones are skipped and said."""
    inside = {Path(base).resolve(), Path(root).resolve()}
    classes, hidden, leaving = [], [], []
    for path in sorted(Path(base).iterdir()):
        if not path.is_dir():
            continue
        if path.name.startswith("."):
            hidden.append(path.name)
        elif path.is_symlink() and not any(
            path.resolve() == folder or folder in path.resolve().parents for folder in inside
        ):
            leaving.append(f"{path.name} -> {path.resolve()}")
        else:
            classes.append(path.name)
    if hidden:
        log.info("%s: hidden folders are not classes, skipped: %s", base, ", ".join(hidden))
    if leaving:
        raise DataUnavailable(
            f"{name}: expected class folders inside {base}; these are links that lead out "
            f"of it: {', '.join(leaving)}. kbench follows no link out of the data folder. "
            "Copy (or move) the images into the folder, or remove the links."
        )
    return classes


def _require_known_classes(
    test_dir: Path, train_dir: Path, classes: List[str], root: Path, name: str
) -> None:
    """Refuse validation classes that training lacks (their images would be dropped)."""
    unknown = sorted(set(class_folders(test_dir, root, name)) - set(classes))
    if unknown:
        shown = ", ".join(unknown[:10]) + (f" ({len(unknown)} in all)" if len(unknown) > 10 else "")
        raise DataUnavailable(
            f"{name}: every class of {test_dir} must be one of {train_dir}; these are not: "
            f"{shown}. A model trained without them cannot be scored on them. Add their "
            f"training images to {train_dir}, or remove them from {test_dir}."
        )


def _require_images(
    base: Path, classes: List[str], items: List[Tuple[str, int]], name: str
) -> None:
    """Refuse class folders with no image: each would be an output the model never sees."""
    counts = np.bincount([label for _, label in items], minlength=len(classes))
    empty = [classes[i] for i in np.flatnonzero(counts == 0)]
    if empty and len(empty) < len(classes):
        raise DataUnavailable(
            f"{name}: these class folders of {base} hold no image "
            f"({', '.join(EXTENSIONS)}): {', '.join(empty[:10])}"
            f"{f' ({len(empty)} in all)' if len(empty) > 10 else ''}. Each would be a class "
            "the model is never shown. Add their images, or remove the folders."
        )


def _hold_out(
    everything: List[Tuple[str, int]], classes: int, test_fraction: float, seed: int
) -> Tuple[List[Tuple[str, int]], List[Tuple[str, int]]]:
    rng = np.random.default_rng(seed)
    held = set()
    for label in range(classes):
        members = [i for i, (_, y) in enumerate(everything) if y == label]
        count = int(round(len(members) * test_fraction))
        held.update(rng.permutation(members)[:count].tolist())
    train = [f for i, f in enumerate(everything) if i not in held]
    test = [f for i, f in enumerate(everything) if i in held]
    return train, test


def listing_arrays(listing: FolderListing, seed: int) -> Dict[str, np.ndarray]:
    """Paths and labels as arrays, the classes mixed (seeded) so that a cut keeps them all."""
    arrays = {}
    rng = np.random.default_rng(seed)
    for split, items in (("train", listing.train), ("test", listing.test)):
        order = rng.permutation(len(items))
        arrays[f"x_{split}"] = np.array([path for path, _ in items])[order]
        arrays[f"y_{split}"] = np.array([label for _, label in items], dtype=np.int64)[order]
    return arrays


def canonical_folder(dataset: str) -> str:
    """``folder:PATH`` with PATH absolute, after checking that it is a directory."""
    where = dataset[len(FOLDER_PREFIX) :]
    if not where:
        raise DataUnavailable(
            "folder: expected folder:PATH, a directory of class folders; received no path."
        )
    path = os.path.abspath(os.path.expanduser(where))
    if not os.path.isdir(path):
        raise DataUnavailable(
            f"folder {where!r}: expected a directory of class folders (PATH/<class>/*.jpg, or "
            f"PATH/train/<class>/ and PATH/val/<class>/); received a path that "
            f"{'is a file' if os.path.exists(path) else 'does not exist'} ({path}). Check "
            "the path (relative paths start at the current folder)."
        )
    return FOLDER_PREFIX + path


def folder_arrays(
    dataset: str, image_size: Optional[Tuple[int, int]], model_shape: Optional[Tuple[int, ...]],
    seed: int,
) -> Tuple[Dict[str, np.ndarray], str, int, Tuple[int, int, int]]:  # fmt: skip
    """Paths and labels of ``folder:PATH`` (:func:`listing_arrays`), the source text, the
    class count and the (H, W, 3) the images become."""
    try:  # the worker decodes the images with Pillow: refuse early where the harness lacks it
        import PIL  # noqa: F401
    except ImportError:
        raise DataUnavailable(
            "folder: data decodes images with Pillow, which this Python lacks; install it "
            "(pip install pillow, or scripts/setup_envs.sh) in the harness and in each "
            "backend's environment."
        ) from None
    path = canonical_folder(dataset)[len(FOLDER_PREFIX) :]
    listing = scan(Path(path), seed=seed, name=f"folder {path}")
    arrays = listing_arrays(listing, seed)
    image = model_shape[:2] if model_shape is not None and len(model_shape) == 3 else DEFAULT_SIZE
    size = image_size or image
    classes = listing.classes
    shown = ", ".join(classes[:8]) + (f", ... ({len(classes)} in all)" if len(classes) > 8 else "")
    source = f"{listing.source}; classes {shown}"
    return arrays, source, len(classes), (int(size[0]), int(size[1]), 3)


class StreamedImages:
    """Image files standing in for a float32 array of shape (N, H, W, 3) or (N, 3, H, W)."""

    dtype = np.dtype(np.float32)
    ndim = 4

    def __init__(
        self, paths: np.ndarray, size: Tuple[int, int], data_format: str = "channels_last",
        clock: LoadingClock = LOADING,
    ) -> None:  # fmt: skip
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
            try:  # truncated, not an image, too large
                with Image.open(str(path)) as image:
                    image = image.convert("RGB").resize((width, height), Image.BILINEAR)
                    batch[row] = np.asarray(image, dtype=np.float32) / 255.0
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                raise UnreadableImage(
                    f"{path}: not a readable image ({type(err).__name__}: {err}). Replace or "
                    "delete the file (or move it out of the class folder)."
                ) from None
        if self.data_format == "channels_first":
            batch = np.ascontiguousarray(batch.transpose(0, 3, 1, 2))
        self.clock.seconds += time.perf_counter() - start
        self.clock.images += len(paths)
        return batch


def is_streamed(x: Any) -> bool:
    return isinstance(x, StreamedImages)
