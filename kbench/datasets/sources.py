"""Where the real data sets come from, in order (parent side).

1. ``--data-dir`` (the files as their publishers ship them, see :data:`EXPECTED`)
2. the Keras cache, ``~/.keras/datasets`` (read only: kbench never writes ~/.keras)
3. kbench's cache (:func:`kbench.facts.cache_dir`: ``$KBENCH_CACHE_DIR``, else
   ``$XDG_CACHE_HOME/kbench``, else ``~/.cache/kbench``)
4. Debian's ``dataset-fashion-mnist`` package (Fashion-MNIST only)
5. tensorflow-datasets data already prepared in ``$TFDS_DATA_DIR`` or
   ``~/tensorflow_datasets`` (never downloaded through tfds)
6. a download of the publisher's files into kbench's cache (``KBENCH_OFFLINE=1`` stops it)

When every place fails, :class:`DataUnavailable` lists what was tried and how to
get the data, or to use ``--dataset synthetic``.

A text file of the user's own is a source of next-token data: ``--dataset text:PATH``
(:func:`text_arrays`), its bytes the tokens (:func:`byte_tokens`: vocabulary 256, no
training of a tokenizer), cut into sequences of the model's length, the last tenth of
them held out for the test; the result records the file's path, size and sha256.

Any tensorflow-datasets image set is a source too: ``--dataset
tfds:NAME[/CONFIG][:VERSION]`` (``tfds:mnist``, ``tfds:imagenette/160px``,
``tfds:mnist:3.*.*``; :func:`tfds_arrays`), an image-classification set that tfds has
already prepared in its data directory (``--data-dir``, else ``$TFDS_DATA_DIR`` or
``~/tensorflow_datasets``): kbench never downloads through tfds. The result records the
builder's full name, its version, the splits used and the sample counts. tfds is always
read in a child process with every GPU hidden (:mod:`kbench.datasets.tfds_reader`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.datasets import readers
from kbench.facts import cache_dir
from kbench_models.generation import next_token_pairs

log = logging.getLogger(__name__)

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
KERAS_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
TFDS_PREFIX = "tfds:"
TFDS_FORM = "tfds:NAME, tfds:NAME/CONFIG or tfds:NAME:VERSION (e.g. tfds:mnist, tfds:mnist:3.*.*)"
TEXT_PREFIX = "text:"
BYTE_VOCABULARY = 256  # byte_tokens: every byte value is a token
TFDS_NAME = re.compile(r"^[a-z][a-z0-9_]*(/[\w.\-]+)?(:\d+(\.(\d+|\*)){0,2})?$")

Arrays = Dict[str, np.ndarray]


class DataUnavailable(RuntimeError):
    """A real data set could not be found or fetched; the message says how to get it."""


# name -> the reader of a directory, what it expects there, its Keras cache folder, downloads
READERS: Dict[str, Callable[[Path], Arrays]] = {
    "fashion_mnist": readers.idx_directory,
    "mnist": lambda d: (
        readers.keras_npz_images(d / "mnist.npz")
        if (d / "mnist.npz").is_file()
        else readers.idx_directory(d)
    ),
    "cifar10": lambda d: readers.cifar(d, "cifar-10"),
    "cifar100": lambda d: readers.cifar(d, "cifar-100"),
    "imdb": lambda d: readers.keras_npz(d / "imdb.npz"),
}
EXPECTED = {
    "fashion_mnist": "the four IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, "
    "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (plain or .gz)",
    "mnist": "mnist.npz (as Keras downloads it) or the four MNIST IDX files",
    "cifar10": "cifar-10-batches-py/ or cifar-10-python.tar.gz",
    "cifar100": "cifar-100-python/ or cifar-100-python.tar.gz",
    "imdb": "imdb.npz (as Keras downloads it)",
}
KERAS_CACHE_SUBDIR = {"fashion_mnist": "fashion-mnist"}
DOWNLOADS: Dict[str, List[Tuple[str, str]]] = {
    "fashion_mnist": [
        (KERAS_URL + f"{stem}.gz", f"{stem}.gz") for stem in readers.IDX_FILES.values()
    ],
    "mnist": [(KERAS_URL + "mnist.npz", "mnist.npz")],
    "cifar10": [(CIFAR_URL + "cifar-10-python.tar.gz", "cifar-10-python.tar.gz")],
    "cifar100": [(CIFAR_URL + "cifar-100-python.tar.gz", "cifar-100-python.tar.gz")],
    "imdb": [(KERAS_URL + "imdb.npz", "imdb.npz")],
}
TFDS_SETS = ("mnist", "fashion_mnist", "cifar10", "cifar100")  # tfds has them by these names


def load(name: str, data_dir: Optional[str] = None) -> Tuple[Arrays, str]:
    """The arrays of real data set ``name`` and a description of where they came from."""
    places = [("--data-dir", Path(data_dir))] if data_dir else []
    places.append(
        ("Keras cache", Path.home() / ".keras/datasets" / KERAS_CACHE_SUBDIR.get(name, ""))
    )
    places.append(("kbench cache", cache_dir() / "datasets" / name))
    if name == "fashion_mnist":
        places.append(("Debian dataset-fashion-mnist", DEBIAN_FASHION_MNIST))
    tried = []
    for label, directory in places:
        try:
            arrays = READERS[name](directory)
        except FileNotFoundError as err:
            if label == "--data-dir":
                raise DataUnavailable(
                    f"--data-dir {directory}: expected {EXPECTED[name]} for {name}; {err}."
                ) from err
            tried.append(f"{label} ({directory})")
            continue
        except readers.CorruptData as err:
            raise DataUnavailable(f"{name}: {err} Delete or replace the file.") from err
        log.debug("%s from %s (%s)", name, label, directory)
        return arrays, f"{label}: {directory}"

    if name in TFDS_SETS:
        try:
            return from_tfds(name), f"tensorflow-datasets: {name}"
        except Exception as err:  # not installed, not prepared: try the next place
            tried.append(f"tensorflow-datasets ({type(err).__name__}: {str(err)[:120]})")

    cache = cache_dir() / "datasets" / name
    try:
        download(name, cache)
    except OSError as err:
        raise DataUnavailable(
            f"{name} not found (looked in: {'; '.join(tried)}) and the download failed: "
            f"{err}. Fix: pass --data-dir DIR holding {EXPECTED[name]}, put them in {cache}, "
            f"or use --dataset synthetic."
        ) from err
    return READERS[name](cache), f"downloaded: {cache}"


def download(name: str, directory: Path) -> None:
    if os.environ.get("KBENCH_OFFLINE") == "1":
        raise OSError("downloads are off (KBENCH_OFFLINE=1)")
    directory.mkdir(parents=True, exist_ok=True)
    for url, filename in DOWNLOADS[name]:
        target = directory / filename
        if target.exists():
            continue
        log.info("downloading %s", url)
        partial = target.with_name(target.name + ".part")
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
        partial.replace(target)


def import_tfds() -> Any:
    """tensorflow_datasets, imported with KERAS_HOME in kbench's cache: it imports Keras,
    which would write ~/.keras/keras.json (workers get their own KERAS_HOME anyway)."""
    home = cache_dir() / "keras_home_for_tfds"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["KERAS_HOME"] = str(home)
    import tensorflow_datasets as tfds

    return tfds


def from_tfds(name: str, batch: int = 4096) -> Arrays:
    """A built-in data set that tensorflow-datasets has already prepared (no download)."""
    return run_tfds_reader(name, batch)[0]


def run_tfds_reader(
    name: str, batch: int = 4096, options: Sequence[str] = ()
) -> Tuple[Arrays, Dict[str, Any]]:
    """The arrays of a tfds data set and its facts, read in a child process with every GPU
    hidden: tensorflow-datasets imports TensorFlow, which in this long-lived parent could
    hold GPU memory beside the workers being measured. :class:`TfdsUnavailable` with the
    child's one line if it fails."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="kbench-tfds-") as tmp:
        out = Path(tmp) / "arrays.npz"
        command = [sys.executable, "-m", "kbench.datasets.tfds_reader", name, str(out), str(batch)]
        done = subprocess.run([*command, *options], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            raise TfdsUnavailable(lines[-1])
        with np.load(out) as data:
            arrays = {key: data[key] for key in data.files}
        return arrays, json.loads(Path(str(out) + ".json").read_text())


class TfdsUnavailable(RuntimeError):
    """tensorflow-datasets is not installed here, or has not prepared the data set."""


def canonical_tfds(dataset: str) -> str:
    """``tfds:NAME...`` checked for its form (the name itself is checked when it is read)."""
    name = dataset[len(TFDS_PREFIX) :]
    if not TFDS_NAME.match(name):
        raise DataUnavailable(
            f"tfds: expected {TFDS_FORM}; received {dataset!r}. Names are lower case with "
            "underscores, as tfds.list_builders() prints them."
        )
    return dataset


def tfds_arrays(
    dataset: str, data_dir: Optional[str], image_size: Optional[Tuple[int, int]]
) -> Tuple[Arrays, str, Dict[str, Any]]:
    """The arrays of ``tfds:NAME``, a source text, and the reader's facts."""
    name = canonical_tfds(dataset)[len(TFDS_PREFIX) :]
    options = []
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
    source = (
        f"tensorflow-datasets {facts['full_name']} (version {facts['version']}), splits "
        f"{facts['splits']['train']} / {facts['splits']['test']}"
        + (f", resized to {image_size[0]}x{image_size[1]} (bilinear)" if image_size else "")
    )
    return arrays, source, facts


def byte_tokens(text: bytes) -> np.ndarray:
    """kbench's tokenizer: each byte of ``text`` (UTF-8 as stored) is one token in
    [0, 256), int32. :func:`byte_text` reads tokens back."""
    return np.frombuffer(text, dtype=np.uint8).astype(np.int32)


def byte_text(tokens: Any) -> str:
    """Byte tokens back to text (bytes that are not UTF-8 shown as U+FFFD)."""
    return bytes(np.asarray(tokens, dtype=np.uint8).tolist()).decode("utf-8", "replace")


def canonical_text(dataset: str) -> str:
    """``text:PATH`` with PATH absolute, after checking that it is a file with text in it."""
    where = dataset[len(TEXT_PREFIX) :]
    path = os.path.abspath(os.path.expanduser(where)) if where else ""
    problem = (
        "received no path" if not where
        else f"received a path that does not exist ({path})" if not os.path.exists(path)
        else f"received a directory ({path})" if not os.path.isfile(path)
        else f"received an empty file ({path}, 0 bytes)" if os.path.getsize(path) == 0
        else None
    )  # fmt: skip
    if problem:
        raise DataUnavailable(
            f"text: expected text:PATH, a text file whose bytes kbench cuts into sequences of "
            f"tokens; {problem}. Fix: name a file with text in it (relative paths start at the "
            "current folder), or use --dataset synthetic."
        )
    return TEXT_PREFIX + path


def text_arrays(dataset: str, steps: int) -> Tuple[Arrays, str, str]:
    """``text:PATH`` as next-token data: its byte tokens cut into sequences of ``steps``
    tokens one after another (each target the next ``steps`` tokens, the input shifted by
    one), the last tenth of the sequences (at least one) held out as the test split. The
    arrays (x and y of each split, (N, steps) int32), the source text, the file's
    sha256."""
    path = canonical_text(dataset)[len(TEXT_PREFIX) :]
    raw = Path(path).read_bytes()
    tokens = byte_tokens(raw)
    count = (len(tokens) - 1) // steps  # each sequence needs the token after it
    if count < 2:
        raise DataUnavailable(
            f"text:{path}: expected at least {2 * steps + 1} bytes (two sequences of {steps} "
            f"tokens, one to train on and one to test, and the token after them); received "
            f"{len(tokens)}. Fix: a longer file, or shorter sequences (--input-shape N with N "
            f"at most {max((len(tokens) - 1) // 2, 1)})."
        )
    starts = np.arange(count)[:, None] * steps + np.arange(steps + 1)
    sequences = tokens[starts]
    held_out = max(1, count // 10)
    x, y = next_token_pairs(sequences)
    arrays = {
        "x_train": x[:-held_out], "y_train": y[:-held_out],
        "x_test": x[-held_out:], "y_test": y[-held_out:],
    }  # fmt: skip
    sha256 = hashlib.sha256(raw).hexdigest()
    source = (
        f"text: {path} ({len(raw):,} bytes, sha256 {sha256}), byte tokens (vocabulary "
        f"{BYTE_VOCABULARY}), {count} sequences of {steps} one after another, the last "
        f"{held_out} held out"
    )
    return arrays, source, sha256
