"""Parity: every model, every backend, the same weights and batches (tiny, few steps)."""

import json

import pytest
from conftest import dump, require_backends, run_kbench

from kbench.run.runner import Runner
from kbench.studies import parity
from kbench_models import MODELS

pytestmark = pytest.mark.slow

BACKENDS = ("tensorflow", "jax", "torch", "torch-native", "mxnet")
SMALL_SHAPES = {"resnet50": (64, 64, 3), "lstm": (24, 8), "lstm_embedding": (24,)}
WITHOUT_BATCHNORM = ("mlp", "mlp3", "small_cnn", "lenet5", "alexnet", "lstm", "lstm_embedding")


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    require_backends(*BACKENDS)
    runner = Runner(output_dir=tmp_path_factory.mktemp("parity"))
    found = {}
    for model in MODELS:
        for row in parity.check_model(
            runner, model, BACKENDS, steps=2, batch_size=4, learning_rate=1e-3,
            dataset="synthetic", seed=0, tolerance=parity.Tolerance(), timeout_s=900,
            input_shape=SMALL_SHAPES.get(model),
        ):  # fmt: skip
            found[(row.model, row.backend)] = row
    return found


def test_every_model_ran_on_every_backend(rows):
    assert set(rows) == {(m, b) for m in MODELS for b in BACKENDS}
    for row in rows.values():
        assert row.status == "ok", (row.model, row.backend, row.reason)
        assert len(row.losses) == 2


@pytest.mark.parametrize("backend", ["jax", "torch", "torch-native"])
def test_keras3_backends_and_the_pytorch_port_match_tensorflow(rows, backend):
    for model in MODELS:
        row = rows[(model, backend)]
        assert row.passed, (model, backend, row.output_max_abs, row.loss_max_rel)
        assert row.output_max_abs < 1e-4


def test_noise_floor_tells_ill_conditioned_models_apart(rows):
    # A 1e-7 nudge of the weights: invisible in a shallow model, amplified in ResNet-50.
    shallow, deep = rows[("mlp", "tensorflow")], rows[("resnet50", "tensorflow")]
    assert shallow.noise_floor < 1e-5
    assert deep.noise_floor > 100 * shallow.noise_floor
    for (model, _backend), row in rows.items():
        assert row.noise_floor == rows[(model, "tensorflow")].noise_floor


def test_mxnet_matches_where_keras_mxnet_computes_the_same_function(rows):
    # The LSTMs included: keras-mxnet's rolled LSTM returns wrong outputs, so the
    # models unroll it there (models/_compat.py); that computes the standard LSTM.
    for model in WITHOUT_BATCHNORM:
        row = rows[(model, "mxnet")]
        assert row.passed and not row.notes, (model, row)
        assert row.output_max_abs < 1e-6


def test_every_model_passes_on_mxnet_with_its_batchnorm_difference_named(rows):
    for model in MODELS:
        assert rows[(model, "mxnet")].passed, rows[(model, "mxnet")]
    for model in ("resnet20", "resnet56", "resnet18", "resnet50", "vgg16"):
        assert any("gamma" in note for note in rows[(model, "mxnet")].notes)
        assert not rows[(model, "torch")].notes


def test_parity_command_exit_status_and_saved_comparisons(home):
    require_backends("tensorflow", "torch-native", "mxnet")
    ok = run_kbench(["parity", "--model", "mlp", "--backend", "tensorflow,torch-native",
                     "--output-dir", str(home / "ok")], home)  # fmt: skip
    assert ok.returncode == 0, dump(ok)
    assert "pass" in ok.stdout and "FAIL" not in ok.stdout
    saved = [json.loads(p.read_text()) for p in (home / "ok").glob("*.json")]
    assert {d["kind"] for d in saved} == {"parity"}
    native = next(d for d in saved if d["config"]["backend"] == "torch-native")
    assert native["metrics"]["parity"]["reference"] == "tensorflow"
    assert native["metrics"]["parity"]["output_max_abs"] < 1e-4
    # Held to an impossible tolerance, the same pair fails and the command says so.
    bad = run_kbench(["parity", "--model", "small_cnn", "--backend", "tensorflow,torch-native",
                      "--output-atol", "1e-30", "--loss-rtol", "1e-30",
                      "--output-dir", str(home / "bad")], home)  # fmt: skip
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "do not match" in bad.stdout


def test_torch_native_cannot_be_the_reference(home):
    completed = run_kbench(["parity", "--backend", "torch-native,tensorflow"], home)
    assert completed.returncode == 2 and "expected a Keras backend first" in completed.stderr
