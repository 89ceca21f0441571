"""Parity: every model, every backend, the same weights and batches (tiny, few steps)."""

import json

import pytest
from conftest import dump, fused_rnn_refused, kbench_here, require_backends

from kbench.measure.processes import usable_cores
from kbench.run.runner import Runner
from kbench.studies import parity
from kbench_models import MODELS as ZOO
from kbench_models import spec_for

BACKENDS = ("tensorflow", "jax", "torch", "torch-native", "mxnet")
# mxnet-gluon beside them on one model of each kind of layer (dense, convolution,
# BatchNormalization with residuals, LSTM); test_gluon checks every model's Gluon twin
# against Keras in one process
GLUON_MODELS = ("mlp", "small_cnn", "resnet20", "lstm")
MODELS = list(ZOO)
# keras-mxnet has no loss from logits for next-token targets: its decoder_lm runs are
# unsupported, with the reason (tests/test_token_data.py)
ON_MXNET = [name for name in MODELS if spec_for(name).target == "label"]
# smaller inputs where no assertion reads the size (the attention models: 16 patches of
# 4x4 and 16 tokens instead of 64; tests/test_attention_models.py builds them at their
# registered size)
SMALL_SHAPES = {
    "resnet50": (64, 64, 3), "lstm": (24, 8), "lstm_embedding": (24,),
    "vit_tiny": (16, 16, 3), "text_encoder": (16,), "decoder_lm": (16,),
}  # fmt: skip
WITHOUT_BATCHNORM = ("mlp", "mlp3", "small_cnn", "lenet5", "alexnet", "lstm", "lstm_embedding")


def on_backend(model, backend):
    """Whether the backend runs the model (else its row is unsupported, saying why)."""
    return backend != "mxnet" or model in ON_MXNET


def backends_for(model):
    return BACKENDS + (("mxnet-gluon",) if model in GLUON_MODELS else ())


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """{model: (rows, its parity documents)}.

    One warm worker per backend runs every model (kbench.studies.parity.check_models):
    the reference first, exporting each model's weights, then the other backends side
    by side, as many as there are cores, loading them.
    """
    require_backends(*BACKENDS, "mxnet-gluon")
    store = tmp_path_factory.mktemp("parity")
    runner = Runner(output_dir=store)
    settings = dict(
        steps=2, batch_size=4, learning_rate=1e-3, dataset="synthetic", seed=0,
        tolerance=parity.Tolerance(), timeout_s=900, input_shapes=SMALL_SHAPES,
        parallel=usable_cores(),
    )  # fmt: skip
    rows = parity.check_models(runner, {m: backends_for(m) for m in MODELS}, **settings)
    saved = [json.loads(path.read_text()) for path in store.glob("*.json")]
    return {
        model: (
            [r for r in rows if r.model == model],
            [d for d in saved if d["config"]["model"] == model],
        )
        for model in MODELS
    }


@pytest.fixture(scope="module")
def rows(checked):
    return {(row.model, row.backend): row for found, _ in checked.values() for row in found}


@pytest.mark.slow
def test_every_model_ran_on_every_backend(rows):
    assert set(rows) == {(m, b) for m in MODELS for b in backends_for(m)}
    for row in rows.values():
        if fused_rnn_refused(row.model, row.backend):
            assert row.status == "unsupported" and "MXNET_MKLDNN_ENABLED=0" in row.reason, row
            continue
        if not on_backend(row.model, row.backend):  # checked with mxnet's other rows
            continue
        assert row.status == "ok", (row.model, row.backend, row.reason)
        assert len(row.losses) == 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch", "torch-native"])
def test_keras3_backends_and_the_pytorch_port_match_tensorflow(rows, backend):
    for model in MODELS:
        row = rows[(model, backend)]
        assert row.passed, (model, backend, row.output_max_abs, row.loss_max_rel)
        assert row.output_max_abs < 1e-4


@pytest.mark.slow
def test_noise_floor_tells_ill_conditioned_models_apart(rows):
    # A 1e-7 nudge of the weights: invisible in a shallow model, amplified in ResNet-50.
    shallow, deep = rows[("mlp", "tensorflow")], rows[("resnet50", "tensorflow")]
    assert shallow.noise_floor < 1e-5
    assert deep.noise_floor > 100 * shallow.noise_floor
    for (model, backend), row in rows.items():
        if fused_rnn_refused(model, backend) or not on_backend(model, backend):
            continue  # a refused row measured nothing
        assert row.noise_floor == rows[(model, "tensorflow")].noise_floor


@pytest.mark.slow
def test_mxnet_matches_where_keras_mxnet_computes_the_same_function(rows):
    # The LSTMs included: keras-mxnet's rolled LSTM returns wrong outputs, so the
    # models unroll it there (models/_compat.py); that computes the standard LSTM.
    for model in WITHOUT_BATCHNORM:
        row = rows[(model, "mxnet")]
        assert row.passed and not row.notes, (model, row)
        assert row.output_max_abs < 1e-6


@pytest.mark.slow
def test_every_model_passes_on_mxnet_with_its_batchnorm_difference_named(rows):
    for model in ON_MXNET:
        assert rows[(model, "mxnet")].passed, rows[(model, "mxnet")]
    for model in set(MODELS) - set(ON_MXNET):  # a row that says why, not a mismatch
        row = rows[(model, "mxnet")]
        assert row.status == "unsupported" and "from logits" in row.reason, row
        assert parity.verdict(row).startswith("unsupported (")
    for model in ("resnet20", "resnet56", "resnet18", "resnet50", "vgg16"):
        assert any("gamma" in note for note in rows[(model, "mxnet")].notes)
        assert not rows[(model, "torch")].notes


@pytest.mark.slow
def test_mxnet_gluon_matches_tensorflow_and_counts_what_keras_counts(rows, checked):
    for model in GLUON_MODELS:
        if fused_rnn_refused(model, "mxnet-gluon"):  # test_every_model_ran... checks why
            continue
        row = rows[(model, "mxnet-gluon")]
        assert row.passed and row.output_max_abs < 1e-4, row
        assert not row.notes, row  # no known differences: Gluon is not Keras
        by_backend = {d["config"]["backend"]: d for d in checked[model][1]}
        assert by_backend["mxnet-gluon"]["metrics"]["parity"]["passed"]
        # counted off the Gluon blocks, as kbench.backends.keras_common counts Keras layers
        gluon, keras_model = by_backend["mxnet-gluon"]["model"], by_backend["tensorflow"]["model"]
        assert gluon["flops"] == keras_model["flops"], model
        assert gluon["params"] == keras_model["params"], model


@pytest.mark.slow
def test_parity_command_exit_status_and_saved_comparisons(home):
    require_backends("tensorflow", "torch-native", "mxnet")
    ok = kbench_here(["parity", "--model", "mlp", "--backend", "tensorflow,torch-native",
                     "--store", str(home / "ok")], home, timeout=900)  # fmt: skip
    assert ok.returncode == 0, dump(ok)
    assert "pass" in ok.stdout and "FAIL" not in ok.stdout
    saved = [json.loads(p.read_text()) for p in (home / "ok").glob("*.json")]
    assert {d["kind"] for d in saved} == {"parity"}
    native = next(d for d in saved if d["config"]["backend"] == "torch-native")
    assert native["metrics"]["parity"]["reference"] == "tensorflow"
    assert native["metrics"]["parity"]["output_max_abs"] < 1e-4
    # Held to an impossible tolerance, the same pair fails and the command says so.
    bad = kbench_here(["parity", "--model", "small_cnn", "--backend", "tensorflow,torch-native",
                      "--output-atol", "1e-30", "--loss-rtol", "1e-30",
                      "--store", str(home / "bad")], home, timeout=900)  # fmt: skip
    assert bad.returncode == 1 and "FAIL" in bad.stdout and "do not match" in bad.stdout


def test_torch_native_cannot_be_the_reference(home):
    completed = kbench_here(["parity", "--backend", "torch-native,tensorflow"], home)
    assert completed.returncode == 2 and "expected a Keras backend first" in completed.stderr
