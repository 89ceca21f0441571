"""Read a prepared tensorflow-datasets image-classification set into an ``.npz`` file.

``python -m kbench.datasets.tfds_reader NAME OUT.npz [BATCH] [--data-dir DIR] [--size HxW]``,
a child process (:func:`kbench.datasets.sources.run_tfds_reader`), so that TensorFlow never
starts in the parent. Exit code 0, the arrays in ``OUT.npz`` and the builder's facts in
``OUT.npz.json``; or exit code 1 and one line on stderr saying why. NAME is
``name[/config][:version]``; the test split is ``test``, else ``validation``; ``--size``
resizes the images in TensorFlow (needed when their sizes differ).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from kbench.datasets.sources import DataUnavailable, import_tfds

TEST_SPLITS = ("test", "validation")


def check_name(tfds: Any, name: str) -> None:
    """Refuse an unregistered builder name, naming the closest registered ones."""
    base = name.split(":")[0].split("/")[0]
    known = tfds.list_builders(with_community_datasets=False)
    if base in known:
        return
    close = difflib.get_close_matches(base, known, n=4, cutoff=0.6)
    raise DataUnavailable(
        f"tfds:{name}: tensorflow-datasets {tfds.__version__} has no data set {base!r}"
        + (f"; close names: {', '.join(close)}" if close else "")
        + ". `python -c 'import tensorflow_datasets as t; print(t.list_builders())'` lists them."
    )


def read_tfds(
    name: str, batch: int, data_dir: Optional[str], size: Optional[Tuple[int, int]]
) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
    """Arrays and facts of any prepared image-classification builder (never downloaded).

    An unknown name is refused before TensorFlow is imported (tensorflow-datasets lists
    its builders without it): in 1-2 s instead of TensorFlow's start."""
    tfds = import_tfds()
    check_name(tfds, name)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as err:
        raise DataUnavailable(f"tfds:{name}: {type(err).__name__}: {err}") from None
    info = builder.info
    keys = getattr(info, "supervised_keys", None)
    label = info.features[keys[1]] if keys else None
    if keys is None or not hasattr(label, "num_classes"):
        raise DataUnavailable(
            f"tfds:{name}: expected an image-classification set (supervised keys image, "
            f"label with a class count); its features are {info.features}."
        )
    # an info read before the set was prepared lists no splits: reading them will say
    splits = list(info.splits.keys()) or ["train", "test"]
    test = next((s for s in TEST_SPLITS if s in splits), None)
    if "train" not in splits or test is None:
        raise DataUnavailable(
            f"tfds:{name}: expected a 'train' split and a 'test' or 'validation' split; it "
            f"has {', '.join(splits) or 'none'}."
        )
    arrays: Dict[str, np.ndarray] = {}
    for split, tfds_split in (("train", "train"), ("test", test)):
        try:
            dataset = builder.as_dataset(split=tfds_split, as_supervised=True)
        except Exception as err:
            raise DataUnavailable(
                f"tfds:{name}: not prepared in {data_dir or 'tfds data directory'} "
                f"({type(err).__name__}: {' '.join(str(err).split())[:200]}). kbench never "
                f"downloads through tfds: prepare it once (tfds build {name.split(':')[0]}, "
                "or tfds.load in Python), or point --data-dir at its data directory."
            ) from None
        if size is not None:
            import tensorflow as tf  # imported by as_dataset already

            dataset = dataset.map(
                lambda x, y: (tf.cast(tf.round(tf.image.resize(x, size)), tf.uint8), y)
            )
        try:
            parts = list(tfds.as_numpy(dataset.batch(batch)))
        except Exception as err:  # images of several sizes cannot be batched
            raise DataUnavailable(
                f"tfds:{name}: its images cannot be stacked ({type(err).__name__}); they "
                "differ in size. Pass --image-size HxW to resize them."
            ) from None
        images, labels = zip(*parts)
        x = np.concatenate(images)
        if x.ndim == 3:
            x = x[..., np.newaxis]
        arrays[f"x_{split}"] = x.astype(np.uint8)
        arrays[f"y_{split}"] = np.concatenate(labels).astype(np.int64)
    facts = {
        "full_name": info.full_name, "version": str(info.version),
        "splits": {"train": "train", "test": test}, "num_classes": int(label.num_classes),
    }  # fmt: skip
    return arrays, facts


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kbench.datasets.tfds_reader")
    parser.add_argument("name")
    parser.add_argument("out")
    parser.add_argument("batch", nargs="?", type=int, default=4096)
    parser.add_argument("--data-dir")
    parser.add_argument("--size", type=lambda text: tuple(int(d) for d in text.split("x")))
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    out = options.out
    try:
        arrays, facts = read_tfds(options.name, options.batch, options.data_dir, options.size)
    except Exception as err:  # not installed, not prepared: the parent says so or looks on
        message = " ".join(str(err).split())[:600]
        prefix = "" if isinstance(err, DataUnavailable) else f"{type(err).__name__}: "
        sys.stderr.write(f"{prefix}{message}\n")
        return 1
    with open(out, "wb") as handle:
        np.savez(handle, **arrays)
    with open(out + ".json", "w") as handle:
        json.dump(facts, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
