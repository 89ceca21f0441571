"""Token data for the models that learn next tokens (decoder_lm): synthetic sequences and
a text file's bytes, each target the input shifted by one; sequence length and
vocabulary as settings; tokens/s beside samples/s; and the runs themselves on every
backend (tiny: 16 tokens, a vocabulary of 64, a few steps)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import kbench_here, require_backends

from kbench import datasets
from kbench.datasets import sources
from kbench.results.config import ConfigError, RunConfig
from kbench.run.protocol import WorkerTask
from kbench.run.worker import task_arrays
from kbench.views.tables import study_tables

slow = pytest.mark.slow

STEPS, VOCABULARY = 16, 64
TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity. "
) * 12  # 2,088 bytes: 130 sequences of 16


def shifted(x: np.ndarray, y: np.ndarray) -> bool:
    """Each target row is its input row moved one to the left (the last target new)."""
    return x.shape == y.shape and bool(np.array_equal(x[:, 1:], y[:, :-1]))


def test_synthetic_sequences_are_shifted_seeded_and_learnable():
    arrays = datasets.next_token_arrays(STEPS, VOCABULARY, 200, 40, seed=3)
    assert arrays["x_train"].shape == (200, STEPS) and arrays["x_test"].shape == (40, STEPS)
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        assert shifted(x, y), split
        assert x.min() >= 0 and max(x.max(), y.max()) < VOCABULARY
    again = datasets.next_token_arrays(STEPS, VOCABULARY, 200, 40, seed=3)
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)
    other = datasets.next_token_arrays(STEPS, VOCABULARY, 200, 40, seed=4)
    assert not np.array_equal(arrays["x_train"], other["x_train"])
    # a bigram holds: the most common successor of each token follows it ~80% of the time
    x, y = arrays["x_train"].reshape(-1), arrays["y_train"].reshape(-1)
    pairs = np.zeros((VOCABULARY, VOCABULARY), dtype=np.int64)
    np.add.at(pairs, (x, y), 1)
    assert 0.7 < pairs.max(axis=1).sum() / pairs.sum() < 0.9


def prepared(tmp_path: Path, dataset: str, **request) -> datasets.PreparedData:
    request = dict(input_shape=(STEPS,), model_kind="tokens", target="next_token") | request
    return datasets.prepare(dataset, tmp_path / "data", **request)


def test_the_worker_trains_on_the_input_shifted_by_one(tmp_path):
    """What the parent writes and the worker reads: inputs and next tokens, the data's
    sequence length and target recorded."""
    data = prepared(tmp_path, "synthetic", num_classes=VOCABULARY, train_samples=64,
                    test_samples=16)  # fmt: skip
    described = data.describe()
    assert (described["sequence_length"], described["target"]) == (STEPS, "next_token")
    assert described["num_classes"] == VOCABULARY and described["synthetic"] is True
    task = WorkerTask(
        config=RunConfig(backend="jax", model="decoder_lm", dataset="synthetic").to_dict(),
        data=data.to_dict(), order_path="", started_at=0.0, data_format="channels_last",
    )  # fmt: skip
    _, loss, arrays = task_arrays(task)
    assert loss == "sparse_categorical_crossentropy_from_logits"
    assert shifted(arrays["x_train"], arrays["y_train"]) and arrays["x_train"].shape == (64, STEPS)
    assert shifted(arrays["x_test"], arrays["y_test"])
    labelled = prepared(tmp_path, "synthetic", num_classes=2, vocabulary=1_000, target="label")
    wrong = WorkerTask(**{**task.to_dict(), "data": labelled.to_dict()})
    with pytest.raises(ValueError, match="learns next_token targets; received data prepared "
                                         "with label targets"):  # fmt: skip
        task_arrays(wrong)


def test_a_text_file_becomes_byte_tokens_in_sequences(tmp_path):
    path = tmp_path / "tale.txt"
    path.write_text(TEXT)
    data = prepared(tmp_path, f"text:{path}")
    count = (len(TEXT) - 1) // STEPS
    assert (data.train_samples, data.test_samples) == (count - count // 10, count // 10)
    assert (data.num_classes, data.sequence_length, data.synthetic) == (256, STEPS, False)
    assert "sha256" in data.source and data.sha256 is not None
    arrays = datasets.load_prepared(data.path)
    x = np.concatenate([arrays["x_train"], arrays["x_test"]])
    y = np.concatenate([arrays["y_train"], arrays["y_test"]])
    assert shifted(x, y)
    # read back, the sequences are the file, in order (the last byte a target only)
    assert sources.byte_text(x.reshape(-1)) == TEXT[: count * STEPS]
    assert sources.byte_text(y[-1]) == TEXT[count * STEPS - STEPS + 1 : count * STEPS + 1]
    assert sources.byte_tokens("é".encode()).tolist() == [195, 169]


def test_text_files_that_cannot_be_used_say_why_and_the_fix(tmp_path):
    empty, short = tmp_path / "empty.txt", tmp_path / "short.txt"
    empty.write_bytes(b"")
    short.write_text("x" * 40)  # 2 sequences need 2 * 16 + 1 bytes: 40 is enough for 2 only
    for where, said in (
        (tmp_path / "missing.txt", "a path that does not exist"),
        (tmp_path, "received a directory"),
        (empty, "received an empty file"),
    ):
        with pytest.raises(datasets.DataUnavailable, match=said) as caught:
            datasets.user_dataset(f"text:{where}")
        assert "expected text:PATH" in str(caught.value) and "Fix:" in str(caught.value)
    assert prepared(tmp_path, f"text:{short}").train_samples == 1
    with pytest.raises(datasets.DataUnavailable) as caught:
        prepared(tmp_path, f"text:{short}", input_shape=(20,))
    message = str(caught.value)
    assert "expected at least 41 bytes" in message and "received 40" in message
    assert "Fix: a longer file, or shorter sequences (--input-shape N with N at most 19)" in message


def test_settings_refuse_data_the_model_cannot_learn_from(tmp_path):
    path = tmp_path / "tale.txt"
    path.write_text(TEXT)
    config = RunConfig(
        backend="jax", model="decoder_lm", dataset=f"text:{path}", input_shape=(STEPS,)
    )
    assert config.dataset == f"text:{path}" and config.input_shape == (STEPS,)
    with pytest.raises(ConfigError, match="text with no labels: it trains models that learn "
                                          "the next token"):  # fmt: skip
        RunConfig(backend="jax", model="text_encoder", dataset=f"text:{path}")
    with pytest.raises(ConfigError, match="Use --dataset synthetic or --dataset text:PATH"):
        RunConfig(backend="jax", model="decoder_lm", dataset="imdb")
    with pytest.raises(ConfigError, match="only synthetic data takes them"):
        RunConfig(backend="jax", model="decoder_lm", dataset=f"text:{path}", num_classes=64)
    with pytest.raises(ConfigError, match="a path that does not exist"):
        RunConfig(backend="jax", model="decoder_lm", dataset=f"text:{tmp_path / 'none.txt'}")


def check_token_runs(results, backends, steps=STEPS):
    by_backend = {r.config["backend"]: r for r in results}
    assert sorted(by_backend) == sorted(backends), [r.config["backend"] for r in results]
    for backend in backends:
        r = by_backend[backend]
        if backend == "mxnet":
            assert r.status == "unsupported", (r.status, r.reason)
            assert "no loss object built from logits" in r.reason
            assert "Run it on tensorflow, jax, torch or torch-native" in r.reason
            continue
        assert r.ok, (backend, r.status, r.reason)
        m = r.metrics
        assert math.isfinite(m["final_train_loss"]) and math.isfinite(m["test_loss"]), backend
        # tokens/s is samples/s times the sequence length, recorded in the data
        assert r.data["sequence_length"] == steps and r.data["target"] == "next_token"
        assert m["tokens_per_sec"] == pytest.approx(m["images_per_sec"] * steps, rel=1e-12)
        assert r.model["input_shape"] == [steps]
    return by_backend


@slow
def test_decoder_lm_trains_on_every_backend(tmp_path):
    """Synthetic next tokens on the three Keras 3 backends and the torch twin; keras-mxnet
    says why it cannot. The losses start near ln(vocabulary) (logits, not probabilities)."""
    backends = ["tensorflow", "jax", "torch", "torch-native", "mxnet"]
    require_backends(*backends)
    done = kbench_here(
        ["run", "-b", ",".join(backends), "-m", "decoder_lm", "--dataset", "synthetic",
         "--input-shape", str(STEPS), "--num-classes", str(VOCABULARY), "--steps", "3",
         "--warmup-steps", "1", "--batch-size", "8", "--train-samples", "64",
         "--test-samples", "16", "--repeats", "1", "--threads", "1"],
        tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = check_token_runs(done.results(), backends)
    for backend in ("tensorflow", "jax", "torch", "torch-native"):
        first = runs[backend].metrics["epoch_train_loss"][0]
        assert abs(first - math.log(VOCABULARY)) < 0.5, (backend, first)
    # kbench compare shows the sequence length beside each token model's row
    throughput = study_tables(done.results())[0]
    assert throughput.headers[:2] == ["model", "sequence"], throughput.headers
    assert throughput.rows[0][1] == str(STEPS)


@slow
def test_decoder_lm_trains_on_a_text_file(tmp_path):
    require_backends("torch")
    path = tmp_path / "tale.txt"
    path.write_text(TEXT)
    done = kbench_here(
        ["run", "-b", "torch", "-m", "decoder_lm", "--dataset", f"text:{path}",
         "--input-shape", str(STEPS), "--steps", "2", "--warmup-steps", "1", "--batch-size",
         "8", "--threads", "1"],
        tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = check_token_runs(done.results(), ["torch"]).values()
    assert run.data["num_classes"] == 256 and run.model["num_classes"] == 256
    assert run.data["synthetic"] is False and run.data["sha256"]
