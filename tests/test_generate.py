"""``--mode generate``: greedy decoding of decoder_lm timed per token, with the same
weights on every backend so that the greedy tokens can agree; the refusals of what
cannot generate. Tiny: 16 positions, a vocabulary of 64, 4 new tokens, two backends."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import kbench_here, require_backends

from kbench.results.analysis import token_agreement
from kbench.results.config import PROMPT_TOKENS, ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.studies.rounds import record_token_agreement
from kbench.views.report import Comparison

slow = pytest.mark.slow

STEPS, VOCABULARY, NEW, BATCH = 16, 64, 4, 2


@pytest.mark.parametrize(
    "settings, says",
    [
        (dict(backend="jax", model="resnet20"),
         "decodes tokens with a causal language model (decoder_lm"),
        (dict(backend="torch", model="text_encoder", dataset="synthetic"),
         "which classifies sequences of word ids. Use -m decoder_lm, or --mode inference"),
        (dict(backend="mxnet", model="decoder_lm"),
         "runs on tensorflow, jax, torch, torch-native, mxnet-gluon; received 'mxnet'"),
        (dict(backend="onnxruntime", model="decoder_lm"),
         "whose weights are its exporter's, not the reference's"),
        (dict(backend="jax", model="decoder_lm", time_budget_s=5.0),
         "measures whole generations for --duration seconds"),
        (dict(backend="jax", model="decoder_lm", max_new_tokens=57),
         f"the prompt ({PROMPT_TOKENS} tokens) and the new tokens must fit the model's window "
         "of 64 (the sequence length); received --max-new-tokens 57. Lower it to at most 56"),
    ],
)  # fmt: skip
def test_what_cannot_generate_is_refused_with_the_fix(settings, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        RunConfig(mode="generate", **settings)


def test_generate_takes_synthetic_tokens_by_default_and_the_length_only_with_the_mode():
    config = RunConfig(backend="jax", model="decoder_lm", mode="generate")
    assert (config.dataset, config.max_new_tokens) == ("synthetic", 32)
    assert config.label() == "jax/decoder_lm generate"
    with pytest.raises(ConfigError, match="--max-new-tokens sets the length of --mode generate"):
        RunConfig(backend="jax", model="decoder_lm", dataset="synthetic", max_new_tokens=4)


@slow
def test_greedy_tokens_agree_across_backends_with_the_same_weights(tmp_path):
    """jax (the reference: it writes its initial weights) and the torch twin (it loads
    them) decode the same tokens; each result holds time to first token, per-token latency
    and tokens/s; kbench run and kbench compare show them and the agreement."""
    backends = ["jax", "torch-native"]
    require_backends(*backends)
    done = kbench_here(
        ["run", "-b", ",".join(backends), "-m", "decoder_lm", "--mode", "generate",
         "--input-shape", str(STEPS), "--num-classes", str(VOCABULARY), "--max-new-tokens",
         str(NEW), "--batch-size", str(BATCH), "--duration", "0.1", "--threads", "1",
         "--train-samples", "16", "--test-samples", "4"],
        tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = done.results()
    runs = {r.config["backend"]: r for r in results}
    assert sorted(runs) == sorted(backends) and all(r.kind == "generate" for r in results)
    for backend, r in runs.items():
        m, made = r.metrics, r.metrics["generation"]
        assert (made["prompt_tokens"], made["new_tokens"], made["window"]) == (
            PROMPT_TOKENS,
            NEW,
            STEPS,
        )
        tokens = np.asarray(made["tokens"])
        assert tokens.shape == (BATCH, NEW) and 0 <= tokens.min() and tokens.max() < VOCABULARY
        assert len(made["per_token_s"]) == made["generations"] * (NEW - 1), backend
        assert len(made["time_to_first_token_s"]) == made["generations"] >= 1
        assert made["time_to_first_token_ms"] > 0 and made["per_token_ms"]["p50"] > 0
        assert m["latency_ms"] == made["per_token_ms"]
        spent = sum(made["time_to_first_token_s"]) + sum(made["per_token_s"])
        assert made["tokens_per_sec"] == pytest.approx(
            made["generations"] * BATCH * NEW / spent, rel=1e-6
        )
        assert m["tokens_per_sec"] == pytest.approx(made["tokens_per_sec"], rel=1e-9)
        assert "no key/value cache" in made["method"]
    # the same weights: written by the reference, loaded by the twin
    written, loaded = (runs[b].metrics["generation"]["weights"] for b in backends)
    assert (written["from"], written["loaded"]) == ("jax", False)
    assert (loaded["from"], loaded["loaded"]) == ("jax", True)
    assert written["sha256"] == loaded["sha256"]
    twin = runs["torch-native"].metrics["generation"]
    assert twin["tokens"] == runs["jax"].metrics["generation"]["tokens"]
    assert twin["prompt"] == runs["jax"].metrics["generation"]["prompt"]
    np.testing.assert_allclose(twin["logit_gaps"], runs["jax"].metrics["generation"]["logit_gaps"],
                               atol=1e-4)  # fmt: skip
    agreement = token_agreement(results)
    assert agreement[runs["jax"].run_id]["is_reference"]
    assert agreement[runs["torch-native"].run_id] == {
        "reference": "jax",
        "reference_run": runs["jax"].run_id,
        "same": True,
        "tokens": BATCH * NEW,
    }
    # kbench run recorded it in the twin's document (not in the reference's)
    assert (
        runs["torch-native"].metrics["generation_agreement"]
        == agreement[runs["torch-native"].run_id]
    )
    assert "generation_agreement" not in runs["jax"].metrics
    assert "same tokens" in done.stdout and f"yes, {BATCH * NEW} tokens" in done.stdout
    shown = Comparison.of(results).text()
    assert "generation (greedy" in shown and f"yes, {BATCH * NEW} tokens" in shown

    # a token that parts: the first position where it does, and the logit gaps there
    parted = dataclasses.replace(runs["torch-native"], metrics=dict(runs["torch-native"].metrics))
    made = dict(twin, tokens=[list(row) for row in twin["tokens"]])
    made["tokens"][1][2] = (made["tokens"][1][2] + 1) % VOCABULARY
    parted.metrics["generation"] = made
    found = token_agreement([runs["jax"], parted])[parted.run_id]
    assert found["same"] is False
    reference_gaps = runs["jax"].metrics["generation"]["logit_gaps"]
    assert found["first_difference"] == {
        "position": 2, "row": 1, "reference_gap": reference_gaps[1][2],
        "gap": twin["logit_gaps"][1][2],
    }  # fmt: skip
    recorded = record_token_agreement([runs["jax"], parted], tmp_path / "again")
    assert recorded[1].metrics["generation_agreement"] == found
    saved = RunResult.load(tmp_path / "again" / f"{parted.run_id}.json")
    assert saved.metrics["generation_agreement"]["first_difference"]["row"] == 1
    assert not (tmp_path / "again" / f"{runs['jax'].run_id}.json").exists()

    # a twin that ran before any Keras backend decoded with its own weights: not compared
    alone = dataclasses.replace(runs["torch-native"], metrics=dict(runs["torch-native"].metrics))
    own = dict(twin["weights"], **{"from": "torch-native", "loaded": False, "note": "own"})
    alone.metrics["generation"] = dict(twin, weights=own)
    assert token_agreement([runs["jax"], alone])[alone.run_id]["why"].startswith("its own weights")
    bare = {k: v for k, v in alone.metrics.items() if k != "generation_agreement"}
    alone = dataclasses.replace(alone, metrics=bare)
    assert "generation_agreement" not in record_token_agreement([alone], tmp_path)[0].metrics
