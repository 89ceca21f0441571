"""The wider zoo trains through `kbench run`: sequences, tokens, published file formats."""

import pytest
from conftest import dump, require_backends, run_kbench
from test_datasets import write_cifar

pytestmark = pytest.mark.slow


def test_lstm_models_train_on_every_backend(home):
    backends = ("tensorflow", "jax", "torch", "mxnet")
    require_backends(*backends)
    completed = run_kbench(
        ["run", "--warm", "--backend", ",".join(backends), "--model", "lstm,lstm_embedding",
         "--dataset", "synthetic", "--steps", "2", "--warmup-steps", "1", "--batch-size", "8",
         "--train-samples", "32", "--test-samples", "16"],
        home,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    results = completed.results()
    assert len(results) == 8
    for r in results:
        expected = {"lstm": [250, 50], "lstm_embedding": [250]}[r.config["model"]]
        assert r.model["input_shape"] == expected
        assert r.data["kind"] == {"lstm": "sequence", "lstm_embedding": "tokens"}[r.config["model"]]
        assert r.model["params"] == {"lstm": 91_777, "lstm_embedding": 1_091_777}[r.config["model"]]
        assert r.model["flops"]["forward_per_sample"] == 2 * 4 * 128 * (50 + 128) * 250 + 2 * 128


def test_cifar_from_published_archive_resized_for_alexnet(home, tmp_path):
    require_backends("tensorflow", "mxnet")
    write_cifar(tmp_path / "data", "cifar-10", n_train=24, n_test=8, as_tar=True)
    completed = run_kbench(
        ["run", "--backend", "tensorflow,mxnet", "--model", "alexnet", "--dataset", "cifar10",
         "--data-dir", str(tmp_path / "data"), "--image-size", "64x64", "--steps", "2",
         "--warmup-steps", "1", "--batch-size", "8"],
        home,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    for r in completed.results():
        assert r.data["input_shape"] == [64, 64, 3] and not r.data["synthetic"]
        assert r.data["source"].startswith("--data-dir") and "resized to 64x64" in r.data["source"]
        assert r.model["params"] == 20_344_650
