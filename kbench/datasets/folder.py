"""Your own images: ``--dataset folder:PATH``, a directory of class folders (parent side).

The layout of Keras' ``image_dataset_from_directory`` and torchvision's
``ImageFolder``: one folder per class, named after it, holding its images (.jpeg,
.jpg, .png, .bmp, .ppm, .webp); classes are numbered in the sorted order of their
folder names. The split:

- ``PATH/train/<class>/`` and ``PATH/val/<class>/`` (or ``PATH/test/<class>/``): those
  are the training and test sets;
- ``PATH/<class>/`` only: a seeded 10 % of each class (``--seed``) is held out as the
  test set, the rest trains.

Nothing is decoded here: as for ``imagenet``, the prepared arrays hold the files'
paths and the worker decodes each batch as it trains (:mod:`kbench.datasets.stream`,
with Pillow, as RGB), resized (bilinear) to ``--image-size`` or else to the model's
own input height and width. The result records the folder, the class names and the
sample counts; a folder has no single file to hash, so it records no sha256.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from kbench.datasets.sources import DataUnavailable

FOLDER_PREFIX = "folder:"
DEFAULT_SIZE = (224, 224)  # a model without a 2-D input shape (never an image model)


def canonical(dataset: str) -> str:
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


def require_pillow() -> None:
    """Pillow decodes the images (in the worker); refuse early where this harness lacks it."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise DataUnavailable(
            "folder: data decodes images with Pillow, which this Python lacks; install it "
            "(pip install pillow, or scripts/setup_envs.sh) in the harness and in each "
            "backend's environment."
        ) from None


def folder_arrays(
    dataset: str,
    image_size: Optional[Tuple[int, int]],
    model_shape: Optional[Tuple[int, ...]],
    seed: int,
) -> Tuple[Dict[str, np.ndarray], str, int, Tuple[int, int, int]]:
    """Paths and labels of ``folder:PATH``, shuffled (seeded) so that a cut keeps every
    class; with the source text, the class count and the (H, W, 3) images become."""
    from kbench.datasets import stream

    require_pillow()
    path = canonical(dataset)[len(FOLDER_PREFIX) :]
    listing = stream.scan(Path(path), seed=seed, name=f"folder {path}")
    arrays = stream.listing_arrays(listing)
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        order = rng.permutation(len(arrays[f"y_{split}"]))
        arrays[f"x_{split}"] = arrays[f"x_{split}"][order]
        arrays[f"y_{split}"] = arrays[f"y_{split}"][order]
    if image_size is not None:
        size = (int(image_size[0]), int(image_size[1]))
    elif model_shape is not None and len(model_shape) == 3:
        size = (int(model_shape[0]), int(model_shape[1]))
    else:
        size = DEFAULT_SIZE
    classes = listing.classes
    shown = ", ".join(classes[:8]) + (f", ... ({len(classes)} in all)" if len(classes) > 8 else "")
    source = f"{listing.source}; classes {shown}"
    return arrays, source, len(classes), (size[0], size[1], 3)
