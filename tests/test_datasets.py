"""Data sets: IDX parsing, synthetic data, layouts, batch order, where Fashion-MNIST is found."""

import gzip
import struct

import numpy as np
import pytest

from kbench import datasets
from kbench.datasets import readers, sources


def write_idx(path, array):
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def fake_fashion_dir(directory, n_train=30, n_test=10):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28)),
        "y_train": rng.integers(0, 10, n_train),
        "x_test": rng.integers(0, 256, (n_test, 28, 28)),
        "y_test": rng.integers(0, 10, n_test),
    }
    for key, stem in readers.IDX_FILES.items():
        write_idx(directory / f"{stem}.gz", arrays[key])
    return arrays


def test_read_idx_plain_and_gzip(tmp_path):
    array = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    for name in ("a-idx3-ubyte", "b-idx3-ubyte.gz"):
        write_idx(tmp_path / name, array)
        np.testing.assert_array_equal(readers.read_idx(tmp_path / name), array)


def test_read_idx_rejects_a_truncated_file(tmp_path):
    path = tmp_path / "bad-idx3-ubyte"
    write_idx(path, np.zeros((4, 2, 2)))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(readers.CorruptData, match="header says shape"):
        readers.read_idx(path)


def test_fashion_mnist_from_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    arrays = fake_fashion_dir(tmp_path / "fm")
    prepared = datasets.prepare(
        "fashion_mnist", tmp_path / "out", data_dir=str(tmp_path / "fm"), train_samples=20
    )
    assert prepared.source.startswith("--data-dir")
    assert prepared.input_shape == (28, 28, 1) and prepared.train_samples == 20
    loaded = datasets.load_prepared(prepared.path)
    np.testing.assert_array_equal(loaded["x_train"][..., 0], arrays["x_train"][:20])
    np.testing.assert_array_equal(loaded["y_test"], arrays["y_test"])


def test_data_dir_missing_files_says_which(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(datasets.DataUnavailable, match="missing train-images-idx3-ubyte"):
        datasets.prepare("fashion_mnist", tmp_path / "out", data_dir=str(tmp_path / "empty"))


def test_fashion_mnist_unavailable_suggests_synthetic(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KBENCH_OFFLINE", "1")
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")

    # nor has tensorflow-datasets prepared it: its reader child would say so after importing
    # TensorFlow (seconds: test_env_and_demo's demo runs the real child)
    def not_prepared(name, batch=4096):
        raise sources.TfdsUnavailable(f"{name}: not prepared")

    monkeypatch.setattr(sources, "from_tfds", not_prepared)
    with pytest.raises(datasets.DataUnavailable) as info:
        datasets.prepare("fashion_mnist", tmp_path / "out")
    message = str(info.value)
    assert "--dataset synthetic" in message and "Keras cache" in message
    assert "tensorflow-datasets (TfdsUnavailable: fashion_mnist: not prepared)" in message
    assert not (tmp_path / "out").exists()


def test_keras_cache_is_read_before_debian(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    fake_fashion_dir(tmp_path / ".keras" / "datasets" / "fashion-mnist")
    prepared = datasets.prepare("fashion_mnist", tmp_path / "out")
    assert prepared.source.startswith("Keras cache")


def test_the_data_cache_and_the_stores_rescue_share_one_cache_folder(tmp_path, monkeypatch):
    """``$XDG_CACHE_HOME/kbench`` where KBENCH_CACHE_DIR is unset: the data sets are read
    from the same cache a result the store could not take is kept in (once only the
    store honoured XDG_CACHE_HOME)."""
    from kbench.facts import cache_dir
    from kbench.results.store import rescue_places

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KBENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KBENCH_OFFLINE", "1")  # found in the cache, or not at all
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    fake_fashion_dir(tmp_path / "xdg" / "kbench" / "datasets" / "fashion_mnist")
    prepared = datasets.prepare("fashion_mnist", tmp_path / "out")
    assert prepared.source.startswith("kbench cache") and str(tmp_path / "xdg") in prepared.source
    assert rescue_places(tmp_path / "store")[1].is_relative_to(tmp_path / "xdg" / "kbench")
    # KBENCH_CACHE_DIR before both (merged: the datasets' own test of the same folder)
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path / "own"))
    assert cache_dir() == tmp_path / "own"
    assert rescue_places(tmp_path / "store")[1].is_relative_to(tmp_path / "own")


@pytest.mark.skipif(
    not sources.DEBIAN_FASHION_MNIST.is_dir(),
    reason="Debian's dataset-fashion-mnist is not installed",
)
def test_debian_fashion_mnist_is_the_real_data_set(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    prepared = datasets.prepare("fashion_mnist", tmp_path / "out")
    assert (prepared.train_samples, prepared.test_samples) == (60000, 10000)
    assert prepared.source.startswith("Debian") and not prepared.synthetic
    y = datasets.load_prepared(prepared.path)["y_train"]
    assert np.bincount(y).tolist() == [6000] * 10


def test_synthetic_is_seeded_and_shaped(tmp_path):
    a = datasets.prepare(
        "synthetic",
        tmp_path / "a",
        input_shape=(5, 7, 3),
        num_classes=4,
        train_samples=16,
        test_samples=8,
        seed=3,
    )
    b = datasets.prepare(
        "synthetic",
        tmp_path / "b",
        input_shape=(5, 7, 3),
        num_classes=4,
        train_samples=16,
        test_samples=8,
        seed=3,
    )
    c = datasets.prepare(
        "synthetic",
        tmp_path / "c",
        input_shape=(5, 7, 3),
        num_classes=4,
        train_samples=16,
        test_samples=8,
        seed=4,
    )
    xa, xb, xc = (datasets.load_prepared(p.path)["x_train"] for p in (a, b, c))
    assert a.synthetic and "synthetic" in a.source
    assert xa.shape == (16, 5, 7, 3) and xa.dtype == np.uint8
    np.testing.assert_array_equal(xa, xb)
    assert not np.array_equal(xa, xc)
    assert set(datasets.load_prepared(a.path)["y_train"]) <= set(range(4))


def test_digits_split(tmp_path):
    prepared = datasets.prepare("digits", tmp_path)
    assert prepared.input_shape == (8, 8, 1)
    assert prepared.train_samples + prepared.test_samples == 1797


def test_channels_first_keeps_every_pixel_in_place():
    # Non-square, asymmetric, three channels: a swap of height and width would show.
    images = np.arange(2 * 3 * 5 * 3, dtype=np.uint8).reshape(2, 3, 5, 3)
    last = datasets.to_model_input(images, "image", "channels_last")
    first = datasets.to_model_input(images, "image", "channels_first")
    assert first.shape == (2, 3, 3, 5) and first.flags["C_CONTIGUOUS"]
    for n, h, w, c in np.ndindex(images.shape):
        assert first[n, c, h, w] == last[n, h, w, c] == np.float32(images[n, h, w, c]) / 255
    np.testing.assert_array_equal(first.transpose(0, 2, 3, 1), last)


def test_batch_order_is_seeded_and_drops_the_partial_batch():
    order = datasets.batch_order(10, 3, epochs=2, seed=0)
    assert order.shape == (2, 9)
    for epoch in order:
        assert len(set(epoch.tolist())) == 9
    np.testing.assert_array_equal(order, datasets.batch_order(10, 3, epochs=2, seed=0))
    assert not np.array_equal(order[0], order[1])


def test_batch_order_for_steps_cycles_through_small_data_sets():
    order = datasets.batch_order(4, 3, epochs=1, seed=0, total_steps=5)
    assert order.shape == (1, 15)
    assert np.bincount(order[0], minlength=4).min() >= 3


def test_batch_larger_than_data_is_explained():
    with pytest.raises(datasets.DataUnavailable, match="smaller --batch-size"):
        datasets.batch_order(5, 8, epochs=1, seed=0)


def write_cifar(directory, variant, n_train=6, n_test=4, as_tar=False):
    """CIFAR in its published 'python version' layout: pickled dicts of uint8 rows."""
    import pickle
    import tarfile

    rng = np.random.default_rng(7)
    label_key = b"labels" if variant == "cifar-10" else b"fine_labels"
    folder_name = "cifar-10-batches-py" if variant == "cifar-10" else "cifar-100-python"
    names = ([f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]) if variant == "cifar-10" \
        else (["train"], ["test"])  # fmt: skip
    folder = directory / folder_name
    folder.mkdir(parents=True)
    images = {}
    for split, split_names, n in (("train", names[0], n_train), ("test", names[1], n_test)):
        rows, labels = [], []
        for name in split_names:
            x = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
            y = rng.integers(0, 10, n).tolist()
            with open(folder / name, "wb") as handle:
                pickle.dump({b"data": x, label_key: y}, handle)
            rows.append(x)
            labels += y
        images[split] = (np.concatenate(rows), np.array(labels))
    if as_tar:
        with tarfile.open(directory / f"{variant}-python.tar.gz", "w:gz") as tar:
            tar.add(folder, arcname=folder_name)
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
    return images


@pytest.mark.parametrize("variant, name", [("cifar-10", "cifar10"), ("cifar-100", "cifar100")])
@pytest.mark.parametrize("as_tar", [False, True])
def test_cifar_python_version_folder_and_archive(tmp_path, variant, name, as_tar):
    written = write_cifar(tmp_path / "d", variant, as_tar=as_tar)
    prepared = datasets.prepare(name, tmp_path / "out", data_dir=str(tmp_path / "d"))
    arrays = datasets.load_prepared(prepared.path)
    rows, labels = written["train"]
    assert arrays["x_train"].shape == (len(rows), 32, 32, 3)
    # Row layout is three 32x32 planes (R, G, B): pixel (row 2, col 5) of image 0.
    for channel in range(3):
        assert arrays["x_train"][0, 2, 5, channel] == rows[0, channel * 1024 + 2 * 32 + 5]
    np.testing.assert_array_equal(arrays["y_train"], labels)
    assert prepared.num_classes == (10 if name == "cifar10" else 100)


def test_mnist_npz_as_keras_ships_it(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    np.savez(tmp_path / "mnist.npz", x_train=x, y_train=np.arange(5) % 10, x_test=x[:2],
             y_test=np.arange(2))  # fmt: skip
    prepared = datasets.prepare("mnist", tmp_path / "out", data_dir=str(tmp_path))
    arrays = datasets.load_prepared(prepared.path)
    np.testing.assert_array_equal(arrays["x_train"][..., 0], x)
    assert prepared.kind == "image" and prepared.input_shape == (28, 28, 1)


def test_imdb_reviews_become_keras_style_token_rows(tmp_path):
    reviews = np.empty(3, dtype=object)
    reviews[:] = [[5, 19999, 2], list(range(1, 400)), [7]]
    np.savez(tmp_path / "imdb.npz", x_train=reviews, y_train=np.array([1, 0, 1]),
             x_test=reviews[:1], y_test=np.array([0]))  # fmt: skip
    prepared = datasets.prepare("imdb", tmp_path / "out", data_dir=str(tmp_path))
    x = datasets.load_prepared(prepared.path)["x_train"]
    assert prepared.kind == "tokens" and x.shape == (3, 250) and x.dtype == np.int32
    # start token 1, ranks shifted by 3, ranks past the 20,000-word vocabulary -> 2 (OOV),
    # padded with 0 and truncated at the front
    assert x[0, -4:].tolist() == [1, 8, 2, 5] and not x[0, :-4].any()
    assert x[1, -1] == 399 + 3 and x[1, 0] == 399 + 3 - 249
    assert x[2, -2:].tolist() == [1, 10]


def test_token_rows_match_keras_conventions():
    rows = readers.token_rows([[1, 2, 3]], vocabulary=6, length=5)
    assert rows.tolist() == [[0, 1, 4, 5, 2]]  # 3 + 3 = 6 is outside a 6-word vocabulary


def test_bilinear_resize():
    image = np.array([[0, 100], [200, 250]], dtype=np.uint8).reshape(1, 2, 2, 1)
    up = datasets.resize_images(image, (4, 4))[0, :, :, 0]
    assert up.shape == (4, 4)
    assert up[0, 0] == 0 and up[3, 3] == 250  # corners keep their values
    assert up[0, 1] == 25 and up[1, 0] == 50  # a quarter of the way between neighbours
    assert datasets.resize_images(image, (2, 2)) is image
    assert datasets.resize_images(np.zeros((3, 32, 32, 3), np.uint8), (64, 48)).shape == (
        3, 64, 48, 3)  # fmt: skip


def test_real_images_resized_on_request(tmp_path):
    write_cifar(tmp_path / "d", "cifar-10")
    prepared = datasets.prepare("cifar10", tmp_path / "out", data_dir=str(tmp_path / "d"),
                                image_size=(64, 64))  # fmt: skip
    assert prepared.input_shape == (64, 64, 3) and "resized to 64x64" in prepared.source


@pytest.mark.parametrize(
    "kind, shape, dtype", [("sequence", (12, 5), np.uint8), ("tokens", (12,), np.int32)]
)
def test_synthetic_sequences_and_tokens(tmp_path, kind, shape, dtype):
    prepared = datasets.prepare("synthetic", tmp_path, input_shape=shape, num_classes=2,
                                model_kind=kind, vocabulary=100, train_samples=64)  # fmt: skip
    x = datasets.load_prepared(prepared.path)["x_train"]
    assert prepared.kind == kind and x.shape == (64,) + shape and x.dtype == dtype
    if kind == "tokens":
        assert 0 <= x.min() and x.max() < 100
        assert datasets.to_model_input(x, "tokens", "channels_first") is x
    else:
        model_x = datasets.to_model_input(x, "sequence", "channels_first")
        assert model_x.shape == x.shape and model_x.dtype == np.float32  # never transposed


# tensorflow-datasets' own mock data (no prepared data set here, no download), entered
# in the process that reads the data set: the child kbench starts for it
TFDS_MOCK_SITE = """
import sys
if "kbench.datasets.tfds_reader" in sys.orig_argv:
    from kbench.datasets import sources
    MOCK = sources.import_tfds().testing.mock_data(num_examples=12)  # kept: a context
    MOCK.__enter__()  # that is garbage-collected ends
"""


@pytest.mark.slow
@pytest.mark.own_processes("TensorFlow kept out of kbench's process")
def test_tensorflow_datasets_source_keeps_tensorflow_out_of_the_parent_and_home_keras_alone(
    tmp_path,
):
    import json
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TFDS_MOCK_SITE)
    env = {k: v for k, v in os.environ.items() if k != "KERAS_HOME"}
    env.update(HOME=str(tmp_path), KBENCH_CACHE_DIR=str(tmp_path / "cache"),
               KBENCH_OFFLINE="1", PYTHONPATH=str(site))  # fmt: skip
    code = (
        "import json, sys; from pathlib import Path; from kbench import datasets; "
        "p = datasets.prepare('cifar100', Path(sys.argv[1])); "
        "print(json.dumps([p.source, p.train_samples, list(p.input_shape), p.path, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))]))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    source, samples, shape, path, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert source == "tensorflow-datasets: cifar100"
    assert (samples, shape) == (12, [32, 32, 3])
    assert imported == []  # TensorFlow (and its GPU runtime) only ever in the child
    # tfds imports Keras, which writes keras.json: kbench steers it away from ~/.keras (the
    # child ran with HOME here, KERAS_HOME unset) into its cache
    assert not (tmp_path / ".keras").exists()
    assert (tmp_path / "cache" / "keras_home_for_tfds" / "keras.json").exists()
    y = datasets.load_prepared(path)["y_train"]
    assert y.dtype == np.int64 and y.max() < 100


@pytest.mark.slow
def test_an_unknown_tfds_name_is_refused_before_tensorflow_starts(tmp_path):
    """The reader lists tensorflow-datasets' builders without TensorFlow: a misspelt
    name costs no TensorFlow start (about 8 s of CPU here)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from kbench.datasets import tfds_reader as r; "
        "code = r.main(['mnistt', sys.argv[1]]); "
        "print(code, 'tensorflow' in sys.modules)"
    )
    env = dict(os.environ, KBENCH_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.npz")], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.stdout.split() == ["1", "False"], done.stdout + done.stderr[-3000:]
    assert "has no data set 'mnistt'; close names: mnist" in done.stderr
    assert not (tmp_path / "out.npz").exists()
