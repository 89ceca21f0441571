"""The user's own arrays: ``--dataset npz:path/to/data.npz`` (parent side).

The file holds ``x_train``, ``y_train``, ``x_test``, ``y_test`` (``numpy.savez``); labels
are integers from 0 (classes: the largest plus one, or ``--num-classes``); images are
channels last, (N, H, W, C) or (N, H, W), uint8 0-255 or floats in [0, 1] (stored as
uint8); sequences (N, steps, features) likewise; tokens (N, steps) integer ids. Checked
before any worker starts, and refused where a run would measure nothing or something else:
NaN or infinite values, values outside 0-255 or [0, 1], labels of one class only, a
truncated or damaged archive.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

from kbench.datasets.readers import NPZ_ERRORS, npz_too_large
from kbench.datasets.sources import DataUnavailable

NPZ_PREFIX = "npz:"
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
EXAMPLE = "np.savez(PATH, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)"
# ndim of x (without the sample axis) each kind of model input takes
SAMPLE_DIMS = {"image": (2, 3), "sequence": (2,), "tokens": (1,)}
TOKEN_MAX = 2**31 - 1  # tokens are stored as int32
SCAN_VALUES = 1 << 22  # values read at a time when every value of x is checked


@dataclass(frozen=True)
class NpzFacts:
    """What an .npz holds, read once: shapes, value and label ranges, sha256."""

    path: str
    sha256: str
    sample_shape: Tuple[int, ...]  # x without the sample axis, as stored
    x_integer: bool
    x_range: Tuple[float, float]
    label_range: Tuple[int, int]

    @property
    def num_classes(self) -> int:
        return max(2, self.label_range[1] + 1)

    def check_fits(self, model_kind: str, num_classes: Optional[int] = None) -> None:
        """Refuse arrays the model cannot take, or labels its output cannot hold."""
        dims = SAMPLE_DIMS[model_kind]
        shape = "x".join(map(str, self.sample_shape))
        if len(self.sample_shape) not in dims:
            wanted = {
                "image": "(N, H, W, C) or (N, H, W) images, channels last",
                "sequence": "(N, steps, features) sequences",
                "tokens": "(N, steps) integer word ids",
            }[model_kind]
            raise DataUnavailable(
                f"npz {self.path}: the model takes {model_kind} input, {wanted}; x_train "
                f"holds samples of shape {shape}. Reshape the arrays, or set the model "
                "file's INPUT_KIND."
            )
        if model_kind == "tokens" and not self.x_integer:
            raise DataUnavailable(
                f"npz {self.path}: a tokens model takes integer word ids; x_train holds "
                "floats. Store the ids as integers (x.astype('int32'))."
            )
        if model_kind == "tokens" and (self.x_range[0] < 0 or self.x_range[1] > TOKEN_MAX):
            raise DataUnavailable(
                f"npz {self.path}: expected word ids from 0 to {TOKEN_MAX} (stored as int32); "
                f"x holds ids from {self.x_range[0]:g} to {self.x_range[1]:g}. Renumber "
                "the words from 0."
            )
        if model_kind != "tokens":
            low, high = self.x_range
            if (self.x_integer and (low < 0 or high > 255)) or (
                not self.x_integer and (low < 0 or high > 1)
            ):
                raise DataUnavailable(
                    f"npz {self.path}: expected {model_kind} values as uint8 0-255 or floats "
                    f"in [0, 1]; x holds values from {low:g} to {high:g}. Scale them "
                    "(x / 255, or (x - x.min()) / (x.max() - x.min()))."
                )
        if num_classes is not None and self.label_range[1] >= num_classes:
            raise DataUnavailable(
                f"npz {self.path}: labels out of range: --num-classes {num_classes} gives "
                f"the model {num_classes} outputs (labels 0 to {num_classes - 1}); the "
                f"labels go up to {self.label_range[1]}. Raise --num-classes to at least "
                f"{self.label_range[1] + 1}, or drop it (the class count is then taken "
                "from the labels)."
            )


def inspect_npz(where: str) -> NpzFacts:
    """Check an .npz (a path, relative to the current folder or absolute)."""
    path = os.path.abspath(os.path.expanduser(where))
    if not os.path.isfile(path):
        raise DataUnavailable(
            f"npz {where!r}: expected an existing .npz file holding {', '.join(ARRAYS)}; "
            f"received a path that {'is a directory' if os.path.isdir(path) else 'does not exist'} "
            f"({path}). Write one with {EXAMPLE}."
        )
    stat = os.stat(path)
    return _inspect(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _inspect(path: str, mtime_ns: int, size: int) -> NpzFacts:
    arrays = load_npz(path)
    x_train, y_train, x_test, y_test = (arrays[name] for name in ARRAYS)
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.ndim < 2 or len(x) == 0 or len(x) != len(y):
            raise DataUnavailable(
                f"npz {path}: expected x_{split} of shape (N, ...) with N > 0 and y_{split} "
                f"of N labels; received x_{split} {x.shape} and y_{split} {y.shape}."
            )
        if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
            raise DataUnavailable(
                f"npz {path}: expected numbers in x_{split}; received dtype {x.dtype}."
            )
        if not np.issubdtype(y.dtype, np.integer) or y.reshape(len(y), -1).shape[1] != 1:
            raise DataUnavailable(
                f"npz {path}: expected y_{split} to hold one integer class label per sample "
                f"(shape (N,), from 0); received dtype {y.dtype}, shape {y.shape}. Convert "
                "one-hot labels with y.argmax(axis=1), floats with y.astype('int64')."
            )
    integer = [np.issubdtype(x.dtype, np.integer) for x in (x_train, x_test)]
    if x_train.shape[1:] != x_test.shape[1:] or integer[0] != integer[1]:
        raise DataUnavailable(
            f"npz {path}: expected x_train and x_test samples of one shape and kind; "
            f"received {x_train.shape[1:]} {x_train.dtype} and {x_test.shape[1:]} "
            f"{x_test.dtype}."
        )
    labels = np.concatenate([y_train.ravel(), y_test.ravel()])
    low, high = int(labels.min()), int(labels.max())
    if low < 0:
        raise DataUnavailable(
            f"npz {path}: labels out of range: expected class labels from 0; the labels "
            f"go down to {low}. Shift them (y - y.min()) or drop those samples."
        )
    classes = np.unique(y_train)
    if len(classes) < 2:
        raise DataUnavailable(
            f"npz {path}: expected labels of at least two classes; y_train holds one class "
            f"only (label {int(classes[0])}, all {len(y_train)} samples). A classifier of one "
            "class is right whatever it learns, so its accuracy measures nothing. Add samples "
            "of another class."
        )
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    ranges = [
        _value_range(path, f"x_{split}", x) for split, x in (("train", x_train), ("test", x_test))
    ]
    return NpzFacts(
        path=path, sha256=digest.hexdigest(), sample_shape=tuple(int(d) for d in x_train.shape[1:]),
        x_integer=bool(np.issubdtype(x_train.dtype, np.integer)),
        x_range=(min(r[0] for r in ranges), max(r[1] for r in ranges)), label_range=(low, high),
    )  # fmt: skip


def _value_range(path: str, name: str, x: np.ndarray) -> Tuple[float, float]:
    """(lowest, highest) value of ``x``, read a slice at a time; NaN or infinity refused."""
    per_sample = max(1, int(np.prod(x.shape[1:])))
    rows = max(1, SCAN_VALUES // per_sample)
    low, high, nan, inf, where = np.inf, -np.inf, 0, 0, []
    for start in range(0, len(x), rows):
        part = x[start : start + rows]
        if np.issubdtype(x.dtype, np.floating):
            finite = np.isfinite(part)
            if not finite.all():
                part_nan = int(np.isnan(part).sum())
                nan, inf = nan + part_nan, inf + part.size - np.count_nonzero(finite) - part_nan
                bad = np.flatnonzero(~finite.reshape(len(part), -1).all(axis=1)) + start
                where += bad[: 5 - len(where)].tolist()
                part = part[finite]
        if part.size:
            low, high = min(low, float(part.min())), max(high, float(part.max()))
    if nan or inf:
        count = " and ".join(f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "infinite")) if n)
        raise DataUnavailable(
            f"npz {path}: expected finite numbers in {name}; it holds {count} values (first "
            f"in samples {', '.join(map(str, where))}). Stored as uint8 they would silently "
            f"become 0. Replace them (np.nan_to_num({name}, nan=0.0)) or drop those samples."
        )
    return low, high


def load_npz(path: str) -> Dict[str, np.ndarray]:
    """The four arrays of ``path``, or a message naming the ones missing."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [name for name in ARRAYS if name not in archive.files]
            if missing:
                raise DataUnavailable(
                    f"npz {path}: expected the arrays {', '.join(ARRAYS)}; missing "
                    f"{', '.join(missing)} (the file holds: "
                    f"{', '.join(archive.files) or 'nothing'}). Write it with {EXAMPLE}."
                )
            too_large = npz_too_large(archive.zip, ARRAYS)
            if too_large:
                raise DataUnavailable(f"npz {path}: {too_large}")
            return {name: archive[name] for name in ARRAYS}
    except DataUnavailable:
        raise
    except NPZ_ERRORS as err:  # truncated, a bad CRC, not a zip archive, pickled arrays
        raise DataUnavailable(
            f"npz {path}: expected a numpy .npz archive ({EXAMPLE}); numpy cannot read it "
            f"({type(err).__name__}: {err}). If it was copied or downloaded, it may be "
            "truncated or damaged: write or copy it again."
        ) from None


def prepared_arrays(path: str, model_kind: str) -> Dict[str, np.ndarray]:
    """The arrays as kbench stores them: images and sequences uint8, labels int64, tokens int32."""
    arrays = load_npz(path)
    for split in ("train", "test"):
        x = arrays[f"x_{split}"]
        if model_kind == "tokens":
            x = x.astype(np.int32)
        else:
            if np.issubdtype(x.dtype, np.floating):
                x = np.round(x * 255.0)
            x = x.astype(np.uint8)
            if model_kind == "image" and x.ndim == 3:
                x = x[..., np.newaxis]
        arrays[f"x_{split}"] = x
        arrays[f"y_{split}"] = arrays[f"y_{split}"].reshape(-1).astype(np.int64)
    return arrays
