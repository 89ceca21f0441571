"""Optimization switches: validated, applied where a backend has them, else not applicable."""

from __future__ import annotations

import html
import re

import pytest
import shared_sweep
from conftest import dump, require_backends, run_kbench

from kbench.backends.switches import SWITCHES, SwitchBoard
from kbench.cli.app import build_parser
from kbench.cli.arguments import settings_of
from kbench.results.config import ConfigError, RunConfig
from kbench.views import report
from kbench.views.report import Comparison


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("jit_compile", "yes", "expected one of auto, on, off"),
        ("mixed_precision", "float61", "Did you mean 'float16'"),
        ("run_eagerly", "true", "expected true or false"),
        ("tf32", "fast", "expected one of auto, on, off"),
        ("mxnet_gpus", -1, "expected a non-negative integer; received -1"),
        ("mxnet_gpus", "2", "expected a non-negative integer; received '2'"),
        ("mxnet_gpus", True, "expected a non-negative integer; received True"),
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
    assert record["mxnet_gpus"] == {"requested": 0, "status": "default", "detail": "left as it is"}
    assert SwitchBoard({"mxnet_gpus": 2}, "torch").record()["mxnet_gpus"] == {
        "requested": 2,
        "status": "not applicable",
        "detail": "torch has no mxnet_gpus switch",
    }


def test_a_warm_workers_next_board_keeps_the_start_up_switches_and_takes_the_runs_own():
    first = SwitchBoard({"onednn": "on", "mixed_precision": "bfloat16"}, "tensorflow")
    first.applied("onednn", "oneDNN on: asked for")
    first.applied("mixed_precision", "keras.mixed_precision.set_dtype_policy('mixed_bfloat16')")
    nxt = first.for_next_run({"onednn": "on", "run_eagerly": True})
    assert nxt.value("mixed_precision") == "off" and nxt.value("run_eagerly") is True
    record = nxt.record()
    assert record["onednn"]["detail"] == "oneDNN on: asked for"  # as the framework started
    assert record["mixed_precision"]["status"] == "default"  # the run's own, not the last's
    assert record["run_eagerly"]["requested"] is True  # the run's own, applied at compile
    with pytest.raises(ValueError, match=r"other start-up switches \(onednn\)"):
        first.for_next_run({"onednn": "off"})
    assert {n for n, s in SWITCHES.items() if s.per_run} == {
        "jit_compile",
        "run_eagerly",
        "torch_compile",
        "mixed_precision",
        "hybridize",
    }


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"device": "cpu"}, "with --device cpu, which hides every GPU. Drop --device cpu"),
        (
            {"distributed": "mxnet-sync", "workers": 2},
            "--distributed mxnet-sync gives each worker process one device; received "
            "--mxnet-gpus 2 too",
        ),
    ],
)
def test_mxnet_gpus_is_refused_where_no_gpu_can_serve_it(settings, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        RunConfig(backend="mxnet", model="mlp", mxnet_gpus=2, **settings)
    assert caught.value.setting == "mxnet_gpus"
    assert RunConfig(backend="mxnet", model="mlp", mxnet_gpus=2).mxnet_gpus == 2


def test_run_flags_set_the_switches():
    args = build_parser().parse_args(
        ["run", "-b", "tensorflow", "--run-eagerly", "--mixed-precision", "bfloat16"]
    )
    settings = settings_of(args)
    assert settings["run_eagerly"] is True and settings["mixed_precision"] == "bfloat16"
    config = RunConfig(backend="tensorflow", model="mlp", **settings)
    assert config.run_eagerly is True and config.mixed_precision == "bfloat16"


@pytest.mark.slow
def test_switches_reach_the_frameworks_and_say_what_they_did(request):
    """The shared sweep's "switches" group (tests/shared_sweep.py): eager bfloat16 runs in
    each backend's warm worker, which then runs the later groups with the switches off."""
    backends = ("tensorflow", "torch-native", "mxnet")
    group = shared_sweep.group(request, "switches", *backends)
    by_backend = {r.config["backend"]: r for r in group.results()}
    assert sorted(by_backend) == sorted(backends)
    assert all(r.ok for r in by_backend.values()), [r.reason for r in by_backend.values()]
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
    # a later run of the same warm worker (the "stream" group) has its own switches: off
    later = {
        r.config["backend"]: r for r in group.completed.results()
        if (r.sweep or {}).get("group") == "stream"
    }  # fmt: skip
    for backend, switched in by_backend.items():
        after = later[backend]
        assert after.metrics.get("warm_worker") and switched.metrics.get("warm_worker")
        assert after.started_at > switched.started_at
        record = after.environment["framework"]["switches"]
        assert record["mixed_precision"]["status"] in ("default", "not applicable"), backend
        assert record["run_eagerly"]["status"] in ("default", "not applicable"), backend
    tf_after = later["tensorflow"].environment["framework"]["switches"]
    float32 = "keras.mixed_precision.set_dtype_policy('float32')"
    assert tf_after["mixed_precision"]["detail"] == float32
    assert tf_after["run_eagerly"]["detail"] == "compile(run_eagerly=False)"
    native_after = later["torch-native"].environment["framework"]["switches"]
    assert native_after["mixed_precision"]["detail"] == "float32 throughout"


def test_yaml_on_and_off_read_as_booleans_are_taken_as_on_and_off():
    assert RunConfig(backend="jax", model="mlp", jit_compile=False).jit_compile == "off"
    assert RunConfig(backend="jax", model="mlp", tf32=True).tf32 == "on"


TINY_MXNET = ["--dataset", "synthetic", "--steps", "2", "--warmup-steps", "1", "--batch-size", "8",
              "--train-samples", "32", "--test-samples", "8", "--sample-interval", "0"]  # fmt: skip


@pytest.mark.slow
def test_channels_last_on_keras_mxnet_warns_that_it_is_the_slow_path(tmp_path):
    require_backends("mxnet")
    done = run_kbench(
        ["run", "--warm", "-b", "mxnet", "--model", "mlp,small_cnn", "--data-format",
         "channels_last", *TINY_MXNET],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, dump(done)
    by_model = {r.config["model"]: r for r in done.results()}
    cnn, mlp = by_model["small_cnn"], by_model["mlp"]
    assert cnn.environment["framework"]["image_data_format"] == "channels_last"
    (warning,) = cnn.environment["framework"]["warnings"]
    assert warning.startswith("channels_last on keras-mxnet is the slow path")
    assert "2 convolution and pooling layer(s)" in warning and "channels_first" in warning
    assert cnn.warnings == [warning]
    assert mlp.warnings == []  # no convolution, nothing transposed
    assert f"mxnet/small_cnn: {warning}" in done.stderr  # logged when the run ended
    assert f"warning: mxnet/small_cnn: {warning}" in done.stdout  # under the run table
    compared = Comparison.of(done.results()).text()
    assert f"warning: mxnet, small_cnn (synthetic): {warning}" in compared
    summary = report.summary_html(done.results(), "mxnet", [])
    assert html.escape(warning) in summary  # the HTML summary
    assert [r.metrics.get("warm_worker", False) for r in (mlp, cnn)] == [False, True]  # one worker
    # the default device, recorded as the context keras-mxnet bound to
    for run in (cnn, mlp):
        switch = run.environment["framework"]["switches"]["mxnet_gpus"]
        assert switch["status"] == "default" and switch["detail"].endswith("[cpu(0)]"), switch


@pytest.mark.slow
def test_asking_mxnet_for_gpus_it_does_not_see_fails_the_run_and_says_how_to_fix_it(tmp_path):
    require_backends("mxnet", "mxnet-gluon")
    args = ["run", "-b", "mxnet,mxnet-gluon", "--repeats", "1", "--model", "mlp"]
    done = run_kbench([*args, "--mxnet-gpus", "2", *TINY_MXNET], tmp_path)
    assert done.returncode == 1, dump(done)
    keras_mxnet, gluon = done.results()
    assert keras_mxnet.status == "failed"
    assert keras_mxnet.error["type"] == "NoGpu"
    assert keras_mxnet.error["message"].startswith(
        "--mxnet-gpus 2: expected 2 GPU(s) visible to MXNet; received 0. This MXNet 1.9.1 is "
        "a CPU build: install its CUDA build (KBENCH_GPU=1 scripts/setup_envs.sh mxnet "
        "rebuilds envs/mxnet)"
    )
    assert keras_mxnet.error["message"].endswith(
        "or drop --mxnet-gpus to train on mxnet's default device."
    )
    assert gluon.ok, gluon.reason  # Gluon has no such switch: it says so and trains
    switch = gluon.environment["framework"]["switches"]["mxnet_gpus"]
    assert switch["status"] == "not applicable" and "one device (cpu(0))" in switch["detail"]
