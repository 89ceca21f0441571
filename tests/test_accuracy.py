"""Training is real: the MLP learns scikit-learn's digits under every backend."""

import pytest
from conftest import dump, require_backends, run_kbench

pytestmark = pytest.mark.slow


def test_mlp_reaches_85_percent_on_digits_everywhere(home):
    backends = ("tensorflow", "jax", "torch", "torch-native", "mxnet")
    require_backends(*backends)
    completed = run_kbench(
        [
            "run",
            "--backend",
            ",".join(backends),
            "--model",
            "mlp",
            "--dataset",
            "digits",
            "--epochs",
            "10",
            "--batch-size",
            "32",
            "--warmup-steps",
            "3",
        ],
        home,
    )
    assert completed.returncode == 0, dump(completed)
    results = completed.results()
    assert len(results) == len(backends)
    for r in results:
        assert r.data["name"] == "digits" and not r.data["synthetic"]
        assert r.model["params"] == 8 * 8 * 128 + 128 + 128 * 10 + 10
        assert r.metrics["test_accuracy"] >= 0.85, (r.config["backend"], r.metrics)
        assert len(r.metrics["epoch_time_s"]) == 10
        # Loss went down: the last epoch's training loss is well under chance (ln 10 = 2.3).
        assert r.metrics["final_train_loss"] < 1.0
