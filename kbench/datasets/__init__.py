"""Data sets: found and prepared once in the parent, read by every worker.

The parent resolves a data set to numpy arrays in one ``.npz`` that every backend's
worker reads, so all backends train on byte-identical data in one batch order
(:func:`batch_order`). Images and sequences are stored as uint8 (channels last) and
scaled by the worker; tokens as int32. For ``imagenet`` and ``folder:`` the ``.npz``
holds file paths, decoded batch by batch in the worker (:mod:`kbench.datasets.stream`).
``synthetic`` data is seeded and learnable, of any shape: each sample is its class's
fixed random template plus noise; tokens are drawn mostly from their class's band.
For a model that learns next tokens (``target="next_token"``) the data is sequences
instead, each target the input shifted by one (``kbench_models.generation``):
synthetic ones follow a seeded successor of each token 80 % of the time (learnable by a
bigram), ``text:PATH`` is a file's bytes (:func:`kbench.datasets.sources.text_arrays`).

Only numpy and the standard library: the worker side (:func:`load_prepared`,
:func:`to_model_input`) runs under every environment.

May import: kbench_models (its next-token pairs), nothing else in kbench.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from kbench.datasets import npz, readers, sources, stream
from kbench.datasets.npz import NPZ_PREFIX
from kbench.datasets.sources import BYTE_VOCABULARY, TEXT_PREFIX, TFDS_PREFIX, DataUnavailable
from kbench.datasets.stream import FOLDER_PREFIX
from kbench_models.generation import next_token_pairs

__all__ = [
    "DATASETS", "FOLDER_PREFIX", "NPZ_PREFIX", "TEXT_PREFIX", "TFDS_PREFIX", "DataUnavailable",
    "DatasetSpec", "PreparedData", "batch_order", "dataset_spec", "load_prepared", "prepare",
    "target_refusal", "to_model_input", "user_dataset",
]  # fmt: skip

SYNTHETIC_DEFAULT_SAMPLES = (2048, 512)  # train, test


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    kind: str  # "image", "tokens", or "any" (synthetic: whatever the model takes)
    description: str
    input_shape: Optional[Tuple[int, ...]] = None
    num_classes: Optional[int] = None
    vocabulary: Optional[int] = None  # tokens only


DATASETS: Dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("fashion_mnist", "image", "Fashion-MNIST, 60k/10k 28x28 grey", (28, 28, 1), 10),
        DatasetSpec("mnist", "image", "MNIST digits, 60k/10k 28x28 grey", (28, 28, 1), 10),
        DatasetSpec("cifar10", "image", "CIFAR-10, 50k/10k 32x32 colour", (32, 32, 3), 10),
        DatasetSpec("cifar100", "image", "CIFAR-100, fine labels, 50k/10k 32x32", (32, 32, 3), 100),
        DatasetSpec(
            "imdb", "tokens", "IMDB reviews as 250 word ids (20,000-word vocabulary), 25k/25k",
            (250,), 2, vocabulary=20_000,
        ),
        DatasetSpec("digits", "image", "scikit-learn's 8x8 digits, 1437/360", (8, 8, 1), 10),
        DatasetSpec(
            "imagenet", "image", "a local directory of class folders (ImageNet's layout), "
            "decoded batch by batch as it trains; 224x224 unless --image-size", (224, 224, 3),
            1000,
        ),
        DatasetSpec("synthetic", "any", "seeded class templates plus noise, any shape"),
    )
}  # fmt: skip


def dataset_spec(name: str) -> DatasetSpec:
    """A built-in set's spec, or that of the user's ``npz:``, ``folder:`` or ``tfds:`` data."""
    if name.startswith(NPZ_PREFIX):
        return DatasetSpec(name, "any", f"your arrays: {name[len(NPZ_PREFIX) :]}")
    if name.startswith(FOLDER_PREFIX):
        return DatasetSpec(name, "image", f"your image folders: {name[len(FOLDER_PREFIX) :]}")
    if name.startswith(TFDS_PREFIX):
        return DatasetSpec(name, "image", f"tensorflow-datasets {name[len(TFDS_PREFIX) :]}")
    if name.startswith(TEXT_PREFIX):
        text = f"your text as byte tokens: {name[len(TEXT_PREFIX) :]}"
        return DatasetSpec(name, "tokens", text, num_classes=BYTE_VOCABULARY,
                           vocabulary=BYTE_VOCABULARY)  # fmt: skip
    return DATASETS[name]


def user_dataset(name: str) -> Optional[str]:
    """``folder:PATH`` or ``text:PATH`` (made absolute) or ``tfds:NAME`` checked for its
    form, else None."""
    if name.startswith(FOLDER_PREFIX):
        return stream.canonical_folder(name)
    if name.startswith(TFDS_PREFIX):
        return sources.canonical_tfds(name)
    if name.startswith(TEXT_PREFIX):
        return sources.canonical_text(name)
    return None


def target_refusal(dataset: str, model: str, target: str) -> Optional[str]:
    """Why ``dataset`` cannot train ``model``, whose ``target`` is ``label`` or
    ``next_token``; None where it can."""
    next_token = dataset == "synthetic" or dataset.startswith(TEXT_PREFIX)
    if target == "next_token" and not next_token:
        return (
            f"model {model!r} learns each position's next token; dataset {dataset!r} holds a "
            "label per sample. Use --dataset synthetic or --dataset text:PATH (a text file)."
        )
    if target != "next_token" and dataset.startswith(TEXT_PREFIX):
        return (
            f"dataset {dataset!r} is text with no labels: it trains models that learn the "
            f"next token (decoder_lm); model {model!r} learns a label per sample. Use "
            "--model decoder_lm, or another dataset."
        )
    return None


@dataclass(frozen=True)
class PreparedData:
    """A data set written to ``path`` as x_train, y_train, x_test, y_test."""

    path: str
    name: str
    kind: str  # "image", "sequence" or "tokens"
    source: str
    synthetic: bool
    input_shape: Tuple[int, ...]  # images: (height, width, channels)
    num_classes: int
    train_samples: int
    test_samples: int
    prepare_time_s: float
    streamed: bool = False  # x_* hold image file paths, decoded by the worker per batch
    sha256: Optional[str] = None  # the user's own file (npz:, text:), hashed as read
    version: Optional[str] = None  # a tensorflow-datasets set's version (tfds:)
    sequence_length: Optional[int] = None  # tokens: the tokens of one sample
    target: str = "label"  # or "next_token": y is x shifted by one, (N, sequence_length)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["input_shape"] = list(self.input_shape)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> PreparedData:
        return cls(**{**data, "input_shape": tuple(data["input_shape"])})

    def describe(self) -> Dict[str, Any]:
        """What a result records about its data (everything but the temporary path)."""
        return {key: value for key, value in self.to_dict().items() if key != "path"}


def prepare(
    dataset: str, out_dir: Path, *, data_dir: Optional[str] = None,
    train_samples: Optional[int] = None, test_samples: Optional[int] = None,
    input_shape: Optional[Tuple[int, ...]] = None, num_classes: Optional[int] = None,
    image_size: Optional[Tuple[int, int]] = None, model_kind: str = "image",
    vocabulary: Optional[int] = None, seed: int = 0, target: str = "label",
) -> PreparedData:  # fmt: skip
    """Load ``dataset``, cut it as asked, and write it under ``out_dir``. ``input_shape``,
    ``num_classes``, ``model_kind`` and ``vocabulary`` (the model's) shape synthetic data;
    ``image_size`` resizes real images (``folder:`` ones, without it, to ``input_shape``).
    ``target="next_token"``: sequences whose targets are the inputs shifted by one
    (synthetic, of ``num_classes`` tokens, or ``text:``, both ``input_shape[0]`` long)."""
    start = time.perf_counter()
    spec = dataset_spec(dataset)
    refusal = target_refusal(dataset, "the model", target)
    if refusal:
        raise DataUnavailable(refusal)
    if target == "next_token":
        if not input_shape:
            raise ValueError("prepare: next-token data needs input_shape, (steps,)")
        loaded = _load_next_tokens(dataset, tuple(input_shape), num_classes, train_samples,
                                   test_samples, seed)  # fmt: skip
    else:
        loaded = _load(dataset, spec, data_dir, train_samples, test_samples, input_shape,
                       num_classes, image_size, model_kind, vocabulary, seed)  # fmt: skip
    if loaded.resized:
        image_size = None  # resized by the reader already
    arrays = loaded.arrays
    _cut(arrays, dataset, train_samples, test_samples)
    streamed_shape, source = _fit_images(loaded, image_size)
    key = hashlib.sha1(
        repr((dataset, source, train_samples, test_samples, input_shape, num_classes,
              image_size, model_kind, vocabulary, seed, target)).encode()
    ).hexdigest()[:12]  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = dataset.split(":")[0] if ":" in dataset else dataset
    path = out_dir / f"{stem}-{key}.npz"
    np.savez(path, **arrays)
    shape = streamed_shape or tuple(int(d) for d in arrays["x_train"].shape[1:])
    return PreparedData(
        path=str(path), name=dataset, kind=loaded.kind, source=source,
        synthetic=dataset == "synthetic", input_shape=shape,
        num_classes=loaded.classes, train_samples=len(arrays["x_train"]),
        test_samples=len(arrays["x_test"]), prepare_time_s=time.perf_counter() - start,
        streamed=streamed_shape is not None, sha256=loaded.sha256, version=loaded.version,
        sequence_length=shape[0] if loaded.kind == "tokens" else None, target=target,
    )  # fmt: skip


@dataclass
class _Loaded:
    """A data set as read, before it is cut and resized."""

    arrays: Dict[str, np.ndarray]  # x_train, y_train, x_test, y_test
    source: str
    kind: str
    classes: int
    sha256: Optional[str] = None  # npz:
    version: Optional[str] = None  # tfds:
    folder_shape: Optional[Tuple[int, ...]] = None  # streamed: decoded per batch at this shape
    resized: bool = False  # the reader resized the images already (tfds:)


def _load(
    dataset: str, spec: DatasetSpec, data_dir: Optional[str], train_samples: Optional[int],
    test_samples: Optional[int], input_shape: Optional[Tuple[int, ...]],
    num_classes: Optional[int], image_size: Optional[Tuple[int, int]], model_kind: str,
    vocabulary: Optional[int], seed: int,
) -> _Loaded:  # fmt: skip
    if dataset.startswith(FOLDER_PREFIX):
        arrays, source, classes, shape = stream.folder_arrays(
            dataset, image_size, input_shape, seed
        )
        return _Loaded(arrays, source, "image", classes, folder_shape=shape)
    if dataset.startswith(TFDS_PREFIX):
        arrays, source, facts = sources.tfds_arrays(dataset, data_dir, image_size)
        classes, version = facts["num_classes"], facts["version"]
        return _Loaded(arrays, source, "image", classes, version=version, resized=True)
    if dataset.startswith(NPZ_PREFIX):
        facts = npz.inspect_npz(dataset[len(NPZ_PREFIX) :])
        facts.check_fits(model_kind, num_classes)
        arrays = npz.prepared_arrays(facts.path, model_kind)
        classes = num_classes or facts.num_classes
        source = f"npz: {facts.path} (sha256 {facts.sha256})"
        return _Loaded(arrays, source, model_kind, classes, sha256=facts.sha256)
    if dataset == "synthetic":
        classes = num_classes or 10
        arrays = synthetic_arrays(
            model_kind, tuple(input_shape or (28, 28, 1)), classes,
            train_samples or SYNTHETIC_DEFAULT_SAMPLES[0],
            test_samples or SYNTHETIC_DEFAULT_SAMPLES[1], seed, vocabulary=vocabulary or 0,
        )  # fmt: skip
        source = f"synthetic (seed {seed}, class templates plus noise)"
        return _Loaded(arrays, source, model_kind, classes)
    if dataset == "digits":
        return _Loaded(*_load_digits(seed), kind="image", classes=10)
    if dataset == "imagenet":
        return _load_imagenet(data_dir, image_size or spec.input_shape[:2], seed)
    arrays, source = sources.load(dataset, data_dir)
    if spec.kind == "tokens":  # cut to the spec's vocabulary and length
        for split in ("x_train", "x_test"):
            arrays[split] = readers.token_rows(arrays[split], spec.vocabulary, spec.input_shape[0])
        arrays = {k: v.astype(np.int64) if k.startswith("y") else v for k, v in arrays.items()}
    return _Loaded(arrays, source, spec.kind, spec.num_classes)


def _load_next_tokens(
    dataset: str, shape: Tuple[int, ...], num_classes: Optional[int], train: Optional[int],
    test: Optional[int], seed: int,
) -> _Loaded:  # fmt: skip
    """Next-token data: synthetic sequences, or a text file's (``text:PATH``)."""
    if dataset.startswith(TEXT_PREFIX):
        arrays, source, sha256 = sources.text_arrays(dataset, int(shape[0]))
        return _Loaded(arrays, source, "tokens", BYTE_VOCABULARY, sha256=sha256)
    vocabulary = num_classes or 1_000
    counts = (train or SYNTHETIC_DEFAULT_SAMPLES[0], test or SYNTHETIC_DEFAULT_SAMPLES[1])
    arrays = next_token_arrays(int(shape[0]), vocabulary, *counts, seed)
    source = (
        f"synthetic (seed {seed}, token sequences: each token's seeded successor 80% of the time)"
    )
    return _Loaded(arrays, source, "tokens", vocabulary)


def next_token_arrays(
    steps: int, vocabulary: int, n_train: int, n_test: int, seed: int, follow: float = 0.8
) -> Dict[str, np.ndarray]:
    """Synthetic sequences of ``steps`` tokens in [0, ``vocabulary``): the first drawn
    uniformly, each next one the previous token's seeded successor (a permutation of the
    vocabulary) with probability ``follow``, else uniform. x and y of each split, (N,
    steps) int32, y the next tokens (x shifted by one)."""
    rng = np.random.default_rng(seed)
    successor = rng.permutation(vocabulary)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        sequences = np.empty((n, steps + 1), dtype=np.int32)
        sequences[:, 0] = rng.integers(0, vocabulary, size=n)
        for t in range(steps):
            drawn = rng.integers(0, vocabulary, size=n)
            sequences[:, t + 1] = np.where(
                rng.random(n) < follow, successor[sequences[:, t]], drawn
            )
        arrays[f"x_{split}"], arrays[f"y_{split}"] = next_token_pairs(sequences)
    return arrays


def _load_imagenet(data_dir: Optional[str], size: Tuple[int, ...], seed: int) -> _Loaded:
    if data_dir is None:
        raise DataUnavailable(
            "imagenet: expected --data-dir, a directory of class folders "
            "(DIR/train/<class>/*.JPEG and DIR/val/<class>/*.JPEG); it is never "
            "downloaded. Or use --dataset synthetic --input-shape 224x224x3 "
            "--num-classes 1000."
        )
    listing = stream.scan(Path(data_dir), seed=seed)
    arrays = stream.listing_arrays(listing, seed)
    shape = (int(size[0]), int(size[1]), 3)
    return _Loaded(arrays, listing.source, "image", len(listing.classes), folder_shape=shape)


def _cut(
    arrays: Dict[str, np.ndarray], dataset: str, train: Optional[int], test: Optional[int]
) -> None:
    for split, limit in (("train", train), ("test", test)):
        have = len(arrays[f"x_{split}"])
        if limit is not None and limit > have:
            raise DataUnavailable(
                f"{split}_samples: {dataset} has {have} {split} samples; received a request "
                f"for {limit}. Ask for at most that many."
            )
        if limit is not None:
            arrays[f"x_{split}"] = arrays[f"x_{split}"][:limit]
            arrays[f"y_{split}"] = arrays[f"y_{split}"][:limit]


def _fit_images(
    loaded: _Loaded, image_size: Optional[Tuple[int, int]]
) -> Tuple[Optional[Tuple[int, ...]], str]:
    """(the shape streamed images are decoded to, None for arrays held whole, which are
    resized to ``image_size`` in place; the source, saying how images were resized)."""
    source = loaded.source
    streamed = ", decoded and resized to {}x{} (bilinear) batch by batch"
    if loaded.folder_shape is not None:
        shape = loaded.folder_shape
        return shape, source + streamed.format(shape[0], shape[1])
    if image_size is not None and loaded.kind == "image":
        for split in ("x_train", "x_test"):
            loaded.arrays[split] = resize_images(loaded.arrays[split], image_size)
        source += f", resized to {image_size[0]}x{image_size[1]} (bilinear)"
    return None, source


def resize_images(images: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """Bilinear resize of uint8 (N, H, W, C) images to (N, size[0], size[1], C): half-pixel
    centres, edges clamped (as OpenCV and tf.image.resize do without antialiasing)."""
    height, width = images.shape[1:3]
    if (height, width) == tuple(size):
        return images

    def axis(n_in: int, n_out: int):
        centres = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        low = np.clip(np.floor(centres).astype(np.int64), 0, n_in - 1)
        high = np.clip(low + 1, 0, n_in - 1)
        weight = np.clip(centres - low, 0.0, 1.0).astype(np.float32)
        return low, high, weight

    rows_low, rows_high, row_weight = axis(height, size[0])
    cols_low, cols_high, col_weight = axis(width, size[1])
    x = images.astype(np.float32)
    x = (x[:, rows_low] * (1 - row_weight)[None, :, None, None]
         + x[:, rows_high] * row_weight[None, :, None, None])  # fmt: skip
    x = (x[:, :, cols_low] * (1 - col_weight)[None, None, :, None]
         + x[:, :, cols_high] * col_weight[None, None, :, None])  # fmt: skip
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def synthetic_arrays(
    kind: str, shape: Tuple[int, ...], classes: int, n_train: int, n_test: int, seed: int,
    vocabulary: int = 0,
) -> Dict[str, np.ndarray]:  # fmt: skip
    """Class templates plus noise (see the module's docstring), x and y of each split."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    if kind == "tokens":  # class c draws most tokens from its own band of the vocabulary
        bands = np.linspace(1, vocabulary, classes + 1).astype(np.int64)
    else:
        templates = rng.random((classes,) + shape, dtype=np.float32) * 127.5
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, classes, size=n)
        if kind == "tokens":
            low, high = bands[labels][:, None], bands[labels + 1][:, None]
            own = low + (rng.random((n,) + shape) * (high - low)).astype(np.int64)
            noise = rng.integers(1, vocabulary, size=(n,) + shape)
            pick = rng.random((n,) + shape) < 0.7
            arrays[f"x_{split}"] = np.where(pick, own, noise).astype(np.int32)
        else:
            samples = rng.random((n,) + shape, dtype=np.float32) * 127.5 + templates[labels]
            arrays[f"x_{split}"] = samples.astype(np.uint8)
        arrays[f"y_{split}"] = labels.astype(np.int64)
    return arrays


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
        "x_train": images[train], "y_train": labels[train], "x_test": images[test],
        "y_test": labels[test],
    }  # fmt: skip
    return arrays, "scikit-learn load_digits (80/20 split)"


def batch_order(
    n_samples: int, batch_size: int, epochs: int, seed: int, total_steps: Optional[int] = None
) -> np.ndarray:
    """Sample indices for every step, (epochs, steps_per_epoch * batch_size): one seeded
    permutation per epoch, so that every backend sees the same mini-batches in the same
    order, the last partial batch dropped; with ``total_steps``, one pass of that many."""
    rng = np.random.default_rng(seed)
    if total_steps is not None:
        needed = total_steps * batch_size
        chunks = [rng.permutation(n_samples) for _ in range(-(-needed // n_samples))]
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


def load_prepared(path: str) -> Dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


def to_model_input(
    x: np.ndarray, kind: str, data_format: str, streamed_size: Optional[Tuple[int, int]] = None
) -> Any:
    """Stored samples as the model takes them: images and sequences float32 in [0, 1] (NCHW
    for channels_first), tokens unchanged, streamed images a :class:`StreamedImages`."""
    if streamed_size is not None:
        return stream.StreamedImages(x, tuple(streamed_size), data_format)
    if kind == "tokens":
        return x
    x = x.astype(np.float32) / 255.0
    if kind == "image" and data_format == "channels_first":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def labels_for_loss(y: np.ndarray, loss: str) -> np.ndarray:
    """int labels as the loss wants them: (N, 1) float32 for binary cross-entropy."""
    if loss == "binary_crossentropy":
        return y.astype(np.float32).reshape(-1, 1)
    return y
