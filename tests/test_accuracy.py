"""Training is real: the MLP learns scikit-learn's digits under every backend
(the runs of tests/shared_sweep.py's "accuracy" group)."""

import pytest
import shared_sweep

pytestmark = pytest.mark.slow


def test_mlp_reaches_85_percent_on_digits_everywhere(request):
    """10 epochs of the MLP on digits, every backend (the shared sweep's "accuracy" group:
    10 epochs, batch 32, 3 warmup steps)."""
    backends = ("tensorflow", "jax", "torch", "torch-native", "mxnet")
    completed = shared_sweep.group(request, "accuracy", *backends)
    results = completed.results()
    assert sorted(r.config["backend"] for r in results) == sorted(backends)
    for r in results:
        assert r.ok, (r.config["backend"], r.reason)
        assert r.data["name"] == "digits" and not r.data["synthetic"]
        assert r.model["params"] == 8 * 8 * 128 + 128 + 128 * 10 + 10
        assert r.metrics["test_accuracy"] >= 0.85, (r.config["backend"], r.metrics)
        assert len(r.metrics["epoch_time_s"]) == 10
        # Loss went down: the last epoch's training loss is well under chance (ln 10 = 2.3).
        assert r.metrics["final_train_loss"] < 1.0
        # Keras 3 on JAX and PyTorch: TensorFlow, kept out while the generators were
        # seeded, and (on PyTorch) JAX, kept out while Keras loaded, were still not
        # imported when the run ended (ten epochs, evaluation)
        skipped = r.environment["framework"].get("imports_skipped") or []
        if r.config["backend"] in ("jax", "torch"):
            assert "tensorflow" in skipped, (r.config["backend"], skipped)
        if r.config["backend"] == "torch":
            assert "jax" in skipped, skipped
