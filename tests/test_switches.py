"""Optimization switches: validated, applied where a backend has them, else not applicable."""

from __future__ import annotations

import pytest
from conftest import require_backends, run_kbench

from kbench.config import ConfigError, RunConfig
from kbench.switches import SWITCHES, SwitchBoard


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("jit_compile", "yes", "expected one of auto, on, off"),
        ("mixed_precision", "float61", "Did you mean 'float16'"),
        ("run_eagerly", "true", "expected true or false"),
        ("tf32", "fast", "expected one of auto, on, off"),
    ],
)
def test_bad_switch_values_are_refused(setting, value, message):
    with pytest.raises(ConfigError, match=message) as caught:
        RunConfig(backend="jax", model="mlp", **{setting: value})
    assert caught.value.setting == setting


def test_the_board_records_every_switch():
    board = SwitchBoard({"run_eagerly": True, "hybridize": True}, "jax")
    board.applied("run_eagerly", "compile(run_eagerly=True)")
    record = board.record()
    assert set(record) == set(SWITCHES)
    assert record["run_eagerly"]["status"] == "applied"
    assert record["hybridize"] == {
        "requested": True,
        "status": "not applicable",
        "detail": "jax has no hybridize switch",
    }
    assert record["jit_compile"]["status"] == "default"


@pytest.mark.slow
def test_switches_reach_the_frameworks_and_say_what_they_did(tmp_path):
    require_backends("tensorflow", "torch-native", "mxnet")
    common = ["--model", "mlp", "--dataset", "synthetic", "--steps", "2", "--warmup-steps", "1",
              "--batch-size", "8", "--train-samples", "32", "--test-samples", "8",
              "--sample-interval", "0", "--mixed-precision", "bfloat16"]  # fmt: skip
    done = run_kbench(
        ["run", "-b", "tensorflow,torch-native,mxnet", "--run-eagerly", *common], tmp_path
    )
    assert done.returncode == 0, done.stderr
    by_backend = {r.config["backend"]: r for r in done.results()}
    tf = by_backend["tensorflow"].environment["framework"]["switches"]
    assert tf["run_eagerly"]["status"] == "applied"
    assert tf["mixed_precision"]["status"] == "applied"
    assert "mixed_bfloat16" in tf["mixed_precision"]["detail"]
    assert tf["tf32"]["status"] == "default"  # no GPU: nothing to switch
    native = by_backend["torch-native"].environment["framework"]["switches"]
    assert "torch.autocast('cpu', dtype=torch.bfloat16)" in native["mixed_precision"]["detail"]
    assert native["run_eagerly"]["status"] == "not applicable"
    mxnet = by_backend["mxnet"].environment["framework"]["switches"]
    assert mxnet["mixed_precision"]["status"] == "not applicable"
    assert mxnet["run_eagerly"]["status"] == "not applicable"
    assert all(r.config["mixed_precision"] == "bfloat16" for r in by_backend.values())


def test_yaml_on_and_off_read_as_booleans_are_taken_as_on_and_off():
    assert RunConfig(backend="jax", model="mlp", jit_compile=False).jit_compile == "off"
    assert RunConfig(backend="jax", model="mlp", tf32=True).tf32 == "on"
