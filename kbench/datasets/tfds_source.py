"""Any tensorflow-datasets image set: ``--dataset tfds:NAME[/CONFIG][:VERSION]`` (parent side).

NAME is a tensorflow-datasets builder (``tfds:mnist``, ``tfds:cifar10``,
``tfds:imagenette/160px``, ``tfds:mnist:3.0.1`` or ``tfds:mnist:3.*.*``). It must be
an image-classification set (supervised keys image and label) that tfds has already
prepared in its data directory (``--data-dir``, else ``$TFDS_DATA_DIR`` or
``~/tensorflow_datasets``): kbench never downloads through tfds. The training set is
the ``train`` split and the test set the ``test`` split, else ``validation``.

It is read once, in a child process with every GPU hidden (tfds imports TensorFlow,
which the parent never does), and stored as kbench's prepared arrays like a built-in
set. ``--image-size HxW`` resizes the images there (bilinear), which a set whose
images differ in size needs. The result records the builder's full name, its version,
the splits used and the sample counts. An unknown name is refused before any worker
starts, with the closest registered names.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple

import numpy as np

from kbench.datasets.sources import DataUnavailable, TfdsUnavailable, run_tfds_reader

TFDS_PREFIX = "tfds:"
FORM = "tfds:NAME, tfds:NAME/CONFIG or tfds:NAME:VERSION (e.g. tfds:mnist, tfds:mnist:3.*.*)"
NAME = re.compile(r"^[a-z][a-z0-9_]*(/[\w.\-]+)?(:\d+(\.(\d+|\*)){0,2})?$")


def canonical(dataset: str) -> str:
    """``tfds:NAME...`` checked for its form (the name itself is checked when it is read)."""
    name = dataset[len(TFDS_PREFIX) :]
    if not NAME.match(name):
        raise DataUnavailable(
            f"tfds: expected {FORM}; received {dataset!r}. Names are lower case with "
            "underscores, as tfds.list_builders() prints them."
        )
    return dataset


def tfds_arrays(
    dataset: str, data_dir: Optional[str], image_size: Optional[Tuple[int, int]]
) -> Tuple[Dict[str, np.ndarray], str, Dict[str, Any]]:
    """The arrays of ``tfds:NAME``, a source text, and the reader's facts (name, version,
    splits, class count)."""
    name = canonical(dataset)[len(TFDS_PREFIX) :]
    options = ["--general"]
    if data_dir:
        options += ["--data-dir", data_dir]
    if image_size:
        options += ["--size", f"{int(image_size[0])}x{int(image_size[1])}"]
    try:
        arrays, facts = run_tfds_reader(name, options=options)
    except TfdsUnavailable as err:
        raise DataUnavailable(str(err)) from None
    except OSError as err:
        raise DataUnavailable(f"tfds:{name}: the reader process did not start: {err}") from err
    assert facts is not None  # --general always writes them
    source = (
        f"tensorflow-datasets {facts['full_name']} (version {facts['version']}), splits "
        f"{facts['splits']['train']} / {facts['splits']['test']}"
        + (f", resized to {image_size[0]}x{image_size[1]} (bilinear)" if image_size else "")
    )
    return arrays, source, facts
