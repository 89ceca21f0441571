"""The wider zoo trains: sequences, tokens, published file formats (the runs of
tests/shared_sweep.py's "lstm" and "cifar" groups)."""

import pytest
import shared_sweep

pytestmark = pytest.mark.slow


def test_lstm_models_train_on_every_backend(request):
    """The shared sweep's "lstm" group: both LSTM models, 2 steps of batch 8 on synthetic
    data, on every Keras backend."""
    completed = shared_sweep.group(request, "lstm", "tensorflow", "jax", "torch", "mxnet")
    results = completed.results()
    assert len(results) == 8
    for r in results:
        assert r.ok, (r.config, r.reason)
        expected = {"lstm": [250, 50], "lstm_embedding": [250]}[r.config["model"]]
        assert r.model["input_shape"] == expected
        assert r.data["kind"] == {"lstm": "sequence", "lstm_embedding": "tokens"}[r.config["model"]]
        assert r.model["params"] == {"lstm": 91_777, "lstm_embedding": 1_091_777}[r.config["model"]]
        assert r.model["flops"]["forward_per_sample"] == 2 * 4 * 128 * (50 + 128) * 250 + 2 * 128


def test_cifar_from_published_archive_resized_for_alexnet(request):
    """The shared sweep's "cifar" group: AlexNet on a CIFAR-10 archive as published
    (write_cifar, 24 training images), resized to 64x64, 2 steps."""
    completed = shared_sweep.group(request, "cifar", "tensorflow", "mxnet")
    assert sorted(r.config["backend"] for r in completed.results()) == ["mxnet", "tensorflow"]
    for r in completed.results():
        assert r.data["input_shape"] == [64, 64, 3] and not r.data["synthetic"]
        assert r.data["source"].startswith("--data-dir") and "resized to 64x64" in r.data["source"]
        assert r.model["params"] == 20_344_650
