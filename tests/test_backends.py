"""Every backend trains both models for real, each backend in its own process (the
shared sweep's warm workers); the data-format runs below, one process per run, from one
``kbench run`` (keras-mxnet's in the shared sweep's worker)."""

import json
import re

import pytest
import shared_sweep
from conftest import ROOT, dump, require_backends, run_kbench

from kbench.results.result import SCHEMA_VERSION

pytestmark = pytest.mark.slow

BACKENDS = tuple(shared_sweep.EVERY_BACKEND)
MODELS = shared_sweep.MATRIX_MODELS
STEPS = shared_sweep.MATRIX_STEPS


def mlp_params(h, w, c, classes):
    return (h * w * c) * 128 + 128 + 128 * classes + classes


def small_cnn_params(h, w, c, classes):
    conv1 = 3 * 3 * c * 64 + 64
    conv2 = 3 * 3 * 64 * 32 + 32
    return conv1 + conv2 + (h - 4) * (w - 4) * 32 * classes + classes


@pytest.fixture(scope="module")
def matrix(request):
    """Both models on every backend: the shared sweep's "matrix" group
    (tests/shared_sweep.py), run in the sweep's warm worker of each backend, which ran
    the sweep's other groups before (the process-per-run path is what test_failures and
    the data-format test below run). (the sweep's home, the group's runs)"""
    group = shared_sweep.group(request, "matrix", *BACKENDS)
    return group.completed.output_dir.parent / "home", group


def test_every_backend_and_model_runs(matrix):
    _, group = matrix
    assert group.completed.returncode == 0, dump(group.completed)
    results = group.results()
    # a warm worker per backend, in the sweep's order of backends, each running the
    # models in turn, after the sweep's earlier groups (every run warm)
    assert [(r.config["model"], r.config["backend"]) for r in results] == [
        (m, b) for b in BACKENDS for m in MODELS
    ]
    for r in results:
        assert r.metrics.get("warm_worker", False) is True, r.config
        assert r.status == "ok", (r.config, r.reason)
        m = r.metrics
        assert m["images_per_sec"] > 0
        assert m["measured_steps"] == STEPS and m["warmup_steps"] == 2
        assert m["measured_images"] == STEPS * 16
        assert len(m["step_times_s"]) == STEPS
        assert 0 < m["step_time_s"]["p10"] <= m["step_time_s"]["p50"] <= m["step_time_s"]["p90"]
        assert 0.0 <= m["test_accuracy"] <= 1.0
        assert m["memory"][0]["kind"] == "process_peak_rss" and m["memory"][0]["bytes"] > 0


def test_parameter_counts_match_the_reference(matrix):
    _, group = matrix
    expected = {"mlp": 101_770, "small_cnn": 203_434}
    assert mlp_params(28, 28, 1, 10) == expected["mlp"]
    assert small_cnn_params(28, 28, 1, 10) == expected["small_cnn"]
    assert len(group.results()) == len(BACKENDS) * len(MODELS)
    for r in group.results():
        assert r.model["params"] == expected[r.config["model"]], r.config


def test_results_record_backend_format_threads_and_data(matrix):
    _, group = matrix
    assert len(group.results()) == len(BACKENDS) * len(MODELS)
    for r in group.results():
        backend = r.config["backend"]
        default = json.loads((ROOT / "keras_configs" / f"{backend}.json").read_text())
        framework = r.environment["framework"]
        assert framework["keras_backend"] == (None if backend == "torch-native" else backend)
        assert framework["image_data_format"] == default["image_data_format"]
        assert r.environment["keras_json"] == default
        assert r.environment["process_env"]["KERAS_BACKEND"] == backend
        assert int(r.environment["process_env"]["OMP_NUM_THREADS"]) >= 1
        assert framework["threads"]["requested"] >= 1
        assert framework["version"] and framework["name"]
        if backend != "torch-native":  # plain PyTorch: no Keras at all
            assert framework["keras_version"].startswith("2.2.4" if backend == "mxnet" else "3.")
        assert r.data["synthetic"] is True and "synthetic" in r.data["source"]
        assert r.environment["machine"]["cpu_logical_cores"] >= 1
        assert r.schema_version == SCHEMA_VERSION and r.kind == "train"


def test_terminal_shows_tables_and_logs_are_kept(matrix):
    """The sweep's closing tables: the group's row of each model, its speed against
    tensorflow (kbench run's tables are checked by the data-format test)."""
    _, group = matrix
    completed = group.completed
    # the title names every group's baseline: tensorflow, and those of groups without it
    speed = re.search(r"Speed against ([\w, -]+): median of per-round ratios", completed.stdout)
    assert speed and "tensorflow" in speed.group(1).split(", "), completed.stdout
    for model in MODELS:
        row = rf"^{model} \(synthetic\) +batch 16, steps {STEPS}, warmup 2, test n 64"
        assert len(re.findall(row, completed.stdout, re.MULTILINE)) >= 2, (model, row)
    logs = {p.stem for p in (completed.output_dir / "logs").glob("*.log")}
    run_ids = {r.run_id for r in group.results()}
    assert len(run_ids) == len(BACKENDS) * len(MODELS) and run_ids <= logs


def test_home_keras_is_never_touched(matrix):
    home, group = matrix
    assert group.completed.returncode == 0
    assert home.is_dir() and not (home / ".keras").exists()


def test_data_format_flag_overrides_the_default(request, home):
    """Non-square, three-channel input in channels_first: ``--data-format`` over
    tensorflow's and torch's default, through ``kbench run``; keras-mxnet, whose default
    it is, in the shared sweep's "data format" group (its warm worker; before: a worker
    of its own in this command). ``--data-format`` over keras-mxnet's default is
    test_switches' channels_last run."""
    require_backends("tensorflow", "torch", "mxnet")
    completed = run_kbench(
        ["run", "--repeats", "1", "--backend", "tensorflow,torch", "--model", "small_cnn",
         "--dataset", "synthetic", "--input-shape", "12x16x3", "--num-classes", "4",
         "--steps", "3", "--warmup-steps", "1", "--batch-size", "8", "--test-samples", "16",
         "--data-format", "channels_first"],
        home,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    # kbench run's terminal: a table per run and the comparison against the first
    # backend; a log kept per run (moved here from the matrix, now the shared sweep's)
    assert "vs tensorflow" in completed.stdout
    assert "small_cnn on synthetic (synthetic data), batch 8" in completed.stdout
    assert len(completed.results()) == 2
    logs = {p.stem for p in (completed.output_dir / "logs").glob("*.log")}
    assert logs == {r.run_id for r in completed.results()}
    (mxnet,) = shared_sweep.group(request, "data format", "mxnet").results()
    assert mxnet.ok, mxnet.reason
    assert mxnet.config["input_shape"] == [12, 16, 3] and mxnet.config["num_classes"] == 4
    for r in [*completed.results(), mxnet]:
        assert r.environment["framework"]["image_data_format"] == "channels_first"


@pytest.mark.own_processes("a setting read as a framework starts")
def test_channels_first_with_onednn_off_is_unsupported_before_it_starts(home):
    """Forced onto Eigen, a channels_first TensorFlow run is refused with its reason and
    the fix, never a traceback from the middle of training."""
    require_backends("tensorflow")
    args = ["run", "--backend", "tensorflow", "--model", "small_cnn", "--dataset",
            "synthetic", "--input-shape", "12x16x3", "--num-classes", "4", "--steps", "2",
            "--warmup-steps", "1", "--batch-size", "8", "--test-samples", "8",
            "--data-format", "channels_first", "--onednn", "off",
            "--sample-interval", "0"]  # fmt: skip
    completed = run_kbench(args, home)
    (result,) = completed.results()
    assert result.status == "unsupported", dump(completed)
    assert "Eigen CPU kernels, which cannot run NCHW" in result.reason
    assert "--jit-compile on, or --data-format channels_last" in result.reason


def forward_flops(model, h=28, w=28, c=1, classes=10):
    """Multiply-adds x2 of the Conv2D and Dense layers, by hand."""
    if model == "mlp":
        return 2 * (h * w * c * 128 + 128 * classes)
    conv1 = 2 * 9 * c * 64 * (h - 2) * (w - 2)
    conv2 = 2 * 9 * 64 * 32 * (h - 4) * (w - 4)
    return conv1 + conv2 + 2 * (h - 4) * (w - 4) * 32 * classes


def test_flops_and_compute_rate(matrix):
    _, group = matrix
    assert len(group.results()) == len(BACKENDS) * len(MODELS)
    for r in group.results():
        expected = forward_flops(r.config["model"])
        assert r.model["flops"]["forward_per_sample"] == expected, r.config["backend"]
        compute = r.metrics["compute"]
        assert compute["flops_per_sample"] == 3 * expected
        assert compute["achieved_gflops_per_sec"] == pytest.approx(
            r.metrics["images_per_sec"] * 3 * expected / 1e9
        )
        assert compute["peak_gflops_per_sec"] > 0  # measured on this CPU
        assert compute["peak_fraction"] == pytest.approx(
            compute["achieved_gflops_per_sec"] / compute["peak_gflops_per_sec"]
        )
