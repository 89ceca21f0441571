"""ImageNet-style folders: listed in the parent, decoded batch by batch in the worker."""

from __future__ import annotations

import numpy as np
import pytest
import shared_sweep
from PIL import Image
from shared_sweep import image_folder

from kbench import datasets
from kbench.datasets import DataUnavailable
from kbench.datasets.stream import LoadingClock, StreamedImages, scan


def test_pixels_keep_their_place_in_both_layouts(tmp_path):
    # 3 rows x 5 columns, one red pixel at row 0, column 4: height and width must not swap.
    pixels = np.zeros((3, 5, 3), dtype=np.uint8)
    pixels[0, 4] = (255, 0, 0)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    clock = LoadingClock()
    last = StreamedImages(np.array([str(tmp_path / "a.png")] * 2), (3, 5), "channels_last", clock)
    first = StreamedImages(last.paths, (3, 5), "channels_first", clock)
    assert last.shape == (2, 3, 5, 3) and first.shape == (2, 3, 3, 5)
    view = last[np.array([1])]  # rows by index: nothing is read
    assert isinstance(view, StreamedImages) and len(view) == 1 and clock.images == 0
    batch = last[0:2]
    assert batch.dtype == np.float32 and batch.shape == (2, 3, 5, 3)
    assert batch[0, 0, 4, 0] == 1.0 and batch[0, 0, 4, 1] == 0.0 and batch[0, 2, 0].sum() == 0
    channels_first = first[0:1]
    assert channels_first[0, 0, 0, 4] == 1.0 and channels_first[0, 1, 0, 4] == 0.0
    assert clock.images == 3 and clock.seconds > 0


def test_scan_reads_both_layouts_and_refuses_an_empty_folder(tmp_path):
    listing = scan(image_folder(tmp_path / "split"))
    assert listing.classes == ["n01", "n02", "n03"]
    assert (len(listing.train), len(listing.test)) == (24, 6)
    assert {label for _, label in listing.test} == {0, 1, 2}
    flat = scan(image_folder(tmp_path / "flat", split=False), test_fraction=0.2)
    assert (len(flat.train), len(flat.test)) == (24, 6) and "held out" in flat.source
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataUnavailable, match="class folders"):
        scan(tmp_path / "empty")
    with pytest.raises(DataUnavailable, match="--data-dir"):
        datasets.prepare("imagenet", tmp_path / "out")


def test_prepared_imagenet_holds_paths_not_pixels(tmp_path):
    root = image_folder(tmp_path / "images")
    data = datasets.prepare(
        "imagenet", tmp_path / "out", data_dir=str(root), image_size=(16, 24), train_samples=9
    )
    assert data.streamed and data.input_shape == (16, 24, 3) and data.num_classes == 3
    assert data.train_samples == 9
    arrays = datasets.load_prepared(data.path)
    assert arrays["x_train"].dtype.kind == "U"  # file paths
    assert len(set(arrays["y_train"].tolist())) == 3  # shuffled before the cut
    x = datasets.to_model_input(arrays["x_train"], "image", "channels_first", (16, 24))
    assert x[0:2].shape == (2, 3, 16, 24)


@pytest.mark.slow
def test_every_backend_trains_from_a_streamed_image_folder(request):
    """The shared sweep's "stream" group: the MLP, 2 epochs of batch 4, on image_folder()
    resized to 16x16, every backend."""
    backends = ["tensorflow", "jax", "torch", "torch-native", "mxnet"]
    done = shared_sweep.group(request, "stream", *backends)
    assert sorted(r.config["backend"] for r in done.results()) == sorted(backends)
    for result in done.results():
        assert result.ok and result.data["streamed"] and result.data["input_shape"] == [16, 16, 3]
        loading = result.metrics["data_loading"]
        assert loading["streamed_images"] >= 2 * 6 * 4  # every training batch was decoded
        assert loading["streamed_decode_s"] > 0
        assert result.metrics["test_accuracy"] > 0.5  # three colours: learnable in 2 epochs
