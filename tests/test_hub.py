"""KerasHub models by name (kbench_models.hub): a ``hub:`` model built from its
configuration trains on two backends with keras_hub's own parameter count, the backends
without Keras 3 refuse it with the reason, ``--model-args`` errors teach, and a preset
that is neither cached nor downloadable is refused in seconds, saying why."""

from __future__ import annotations

import json
import time

import pytest
import shared_sweep
from conftest import run_kbench

from kbench.results.config import ConfigError, RunConfig
from kbench_models import hub, spec_for

needs_keras_hub = pytest.mark.skipif(
    hub.source_root() is None, reason="keras-hub is not installed in this Python"
)


def bert_classifier_params(vocabulary, hidden, layers, intermediate, steps, classes, segments=2):
    """keras_hub's BertBackbone + BertTextClassifier, counted by hand: token, position and
    segment embeddings and their LayerNorm; per layer the attention's four Dense (with
    bias), a LayerNorm, the two feed-forward Dense, a LayerNorm; the pooler Dense; the
    classifier's Dense. (keras_hub's count_params gives the same: 139,586 for the
    done-when configuration, 2 layers of 64 over 1,000 ids, 2 classes.)"""
    embeddings = (vocabulary + steps + segments) * hidden + 2 * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden
    layer += hidden * intermediate + intermediate + intermediate * hidden + hidden + 2 * hidden
    return embeddings + layers * layer + hidden * hidden + hidden + hidden * classes + classes


def test_the_hand_count_is_keras_hubs_for_the_done_when_configuration():
    assert bert_classifier_params(1000, 64, 2, 128, 64, 2) == 139_586


@pytest.mark.slow
def test_a_configured_bert_classifier_trains_on_two_backends_and_the_others_refuse_it(request):
    """The shared sweep's "hub" group: BertTextClassifier from a tiny configuration, 2 steps
    on tensorflow and torch; torch-native and mxnet record it unsupported, with why."""
    runs = shared_sweep.group(request, "hub", *shared_sweep.HUB_BACKENDS).results()
    by_backend = {r.config["backend"]: r for r in runs}
    assert sorted(by_backend) == sorted(shared_sweep.HUB_BACKENDS)
    a = shared_sweep.HUB_ARGS
    expected = bert_classifier_params(
        a["vocabulary_size"], a["hidden_dim"], a["num_layers"], a["intermediate_dim"],
        a["max_sequence_length"], 2,
    )  # fmt: skip
    for backend in ("tensorflow", "torch"):
        r = by_backend[backend]
        assert r.ok, (backend, r.reason)
        assert r.model["params"] == expected == 4_450
        assert r.model["input_shape"] == [16] and r.data["kind"] == "tokens"
        assert r.metrics["tokens_per_sec"] > 0
        source = r.model["source"]
        assert source["hub"] == "BertTextClassifier" and source["kind"] == "classifier"
        assert source["keras_hub"] == r.environment["framework"]["keras_hub_version"]
        assert (
            source["args"]
            == r.config["model_args"]
            == (
                "hidden_dim=16,intermediate_dim=32,max_sequence_length=16,num_heads=2,"
                "num_layers=1,vocabulary_size=100"
            )
        )
    assert by_backend["tensorflow"].model["source"] == by_backend["torch"].model["source"]
    native, mxnet = by_backend["torch-native"], by_backend["mxnet"]
    assert native.status == "unsupported" and "no PyTorch twin" in native.reason
    assert "-b torch" in native.reason
    assert mxnet.status == "unsupported" and "keras-mxnet is Keras 2.2.4" in mxnet.reason


def config(model="hub:BertTextClassifier", model_args=None, **more):
    return RunConfig(backend="jax", model=model, model_args=model_args, dataset="synthetic", **more)


@needs_keras_hub
def test_model_args_are_parsed_made_canonical_and_bad_ones_taught():
    made = config(model_args={"vocabulary_size": 50, "num_layers": 1, "num_heads": 1,
                              "hidden_dim": 8, "intermediate_dim": 16, "dropout": 0.0})  # fmt: skip
    assert made.model_args == (
        "dropout=0.0,hidden_dim=8,intermediate_dim=16,num_heads=1,num_layers=1,vocabulary_size=50"
    )
    assert RunConfig.from_dict(made.to_dict()) == made
    spec = spec_for(made.model, made.model_args)
    assert spec.input_shape == (512,) and spec.vocabulary_size == 50  # BertBackbone's default
    assert spec.from_logits and spec.target == "label"
    wrong = {
        "num_layer=2": "did you mean 'num_layers'?",
        "vocabulary_size=1000": "needs num_layers, num_heads, hidden_dim, intermediate_dim",
        "num_layers": "expected key=value pairs",
        "num_layers=1,num_layers=2": "given twice",
    }
    for text, taught in wrong.items():
        with pytest.raises(ConfigError) as err:
            config(model_args=text)
        assert err.value.setting == "model_args" and taught in err.value.message, err.value
    with pytest.raises(ConfigError, match="did you mean 'BertTextClassifier'"):
        config(model="hub:BertTextClasifier", model_args="vocabulary_size=9")
    with pytest.raises(ConfigError, match="only hub: models take a configuration"):
        RunConfig(backend="jax", model="mlp", model_args="a=1")
    causal = spec_for(
        "hub:GPT2CausalLM",
        "vocabulary_size=64,num_layers=1,num_heads=1,hidden_dim=8,intermediate_dim=16,"
        "max_sequence_length=12",
    )
    assert causal.target == "next_token" and causal.num_classes == 64
    assert causal.input_shape == (12,)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "kagglehub"))
    hub.resolve.cache_clear()
    yield tmp_path / "kagglehub"
    hub.resolve.cache_clear()


@needs_keras_hub
def test_a_preset_neither_cached_nor_downloadable_is_refused_in_seconds(empty_cache, monkeypatch):
    monkeypatch.setattr(hub, "NETWORK_HOST", "kbench-offline.invalid")  # never resolves
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        config(model="hub:BertTextClassifier/bert_tiny_en_uncased")
    assert time.monotonic() - started < hub.NETWORK_TIMEOUT_S + 2
    message = err.value.message
    assert err.value.setting == "model"
    assert "kaggle://keras/bert/keras/bert_tiny_en_uncased" in message
    assert "not in the KerasHub cache" in message and str(empty_cache) in message
    assert "cannot download it (kbench-offline.invalid:" in message
    with pytest.raises(ConfigError, match="did you mean 'bert_tiny_en_uncased'"):
        config(model="hub:BertTextClassifier/bert_tiny_en_uncase")


@needs_keras_hub
def test_kbench_run_refuses_an_uncached_preset_in_seconds_with_the_reason(empty_cache, home):
    """The whole command, as a user types it: exit 2 before any worker starts."""
    started = time.monotonic()
    done = run_kbench(
        ["run", "-b", "jax,torch", "-m", "hub:BertTextClassifier/bert_tiny_en_uncased",
         "--dataset", "synthetic"],
        home, env={"KAGGLEHUB_CACHE": str(empty_cache)}, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert done.returncode == 2, done.stderr
    assert "--model: hub:BertTextClassifier/bert_tiny_en_uncased: preset" in done.stderr
    assert "not in the KerasHub cache" in done.stderr
    assert "cannot download it" in done.stderr or "never downloads inside a run" in done.stderr


@needs_keras_hub
def test_a_cached_preset_gives_the_data_its_vocabulary_and_length(empty_cache, monkeypatch):
    folder = empty_cache / "models/keras/bert/keras/bert_tiny_en_uncased/3"
    folder.mkdir(parents=True)
    backbone = {"vocabulary_size": 321, "max_sequence_length": 24, "num_layers": 1}
    (folder / "config.json").write_text(json.dumps({"class_name": "BertBackbone",
                                                    "config": backbone}))  # fmt: skip
    (folder / "model.weights.h5").write_bytes(b"")
    made = config(model="hub:BertTextClassifier/bert_tiny_en_uncased")
    spec = spec_for(made.model, made.model_args)
    assert spec.vocabulary_size == 321 and spec.input_shape == (24,)
    assert spec.hub.preset_dir == str(folder) and spec.hub.handle.endswith("/3")
    with pytest.raises(ConfigError, match="a preset fixes the backbone's configuration"):
        config(model="hub:BertTextClassifier/bert_tiny_en_uncased", model_args="num_layers=2")
    # a preset folder: made absolute, as a user model's path is (the worker runs elsewhere)
    monkeypatch.chdir(folder.parent)
    made = config(model="hub:BertTextClassifier/3")
    assert made.model == f"hub:BertTextClassifier/{folder}"
    assert config(model_args="preset=./3").model_args == f"preset={folder}"
    with pytest.raises(ConfigError, match="the preset holds a BertBackbone; GPT2CausalLM is built"):
        config(model="hub:GPT2CausalLM/3")
