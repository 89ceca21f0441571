"""Data sets: IDX parsing, synthetic data, layouts, batch order, where Fashion-MNIST is found."""

import gzip
import struct

import numpy as np
import pytest

from kbench import datasets


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
    for key, stem in datasets.FASHION_MNIST_FILES.items():
        write_idx(directory / f"{stem}.gz", arrays[key])
    return arrays


def test_read_idx_plain_and_gzip(tmp_path):
    array = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    for name in ("a-idx3-ubyte", "b-idx3-ubyte.gz"):
        write_idx(tmp_path / name, array)
        np.testing.assert_array_equal(datasets.read_idx(tmp_path / name), array)


def test_read_idx_rejects_a_truncated_file(tmp_path):
    path = tmp_path / "bad-idx3-ubyte"
    write_idx(path, np.zeros((4, 2, 2)))
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(datasets.DataUnavailable, match="header says shape"):
        datasets.read_idx(path)


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
    monkeypatch.setattr(datasets, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    with pytest.raises(datasets.DataUnavailable) as info:
        datasets.prepare("fashion_mnist", tmp_path / "out")
    message = str(info.value)
    assert "--dataset synthetic" in message and "Keras cache" in message
    assert not (tmp_path / "out").exists()


def test_keras_cache_is_read_before_debian(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    fake_fashion_dir(tmp_path / ".keras" / "datasets" / "fashion-mnist")
    prepared = datasets.prepare("fashion_mnist", tmp_path / "out")
    assert prepared.source.startswith("Keras cache")


@pytest.mark.skipif(
    not datasets.DEBIAN_FASHION_MNIST.is_dir(),
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
    last = datasets.to_data_format(images, "channels_last")
    first = datasets.to_data_format(images, "channels_first")
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
