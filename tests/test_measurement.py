"""Measurement end to end: sampler windows, repeats, inference, options, out-of-memory."""

import math

import psutil
import pytest
import shared_sweep
from conftest import dump, require_backends, run_kbench
from nvml_standin import CompilerMissing, StandinDevice, build_standin, standin_env, write_config

from kbench.cli.app import build_parser
from kbench.cli.arguments import settings_of
from kbench.views import tables


@pytest.fixture(scope="module")
def interleaved(tmp_path_factory):
    """Two backends, two repeats, one thread, CPU forced, a memory fraction asked for."""
    require_backends("torch", "jax")
    home = tmp_path_factory.mktemp("home")
    completed = run_kbench(
        ["run", "--backend", "torch,jax", "--model", "small_cnn", "--dataset", "synthetic",
         "--steps", "25", "--warmup-steps", "3", "--batch-size", "32", "--test-samples", "32",
         "--repeats", "2", "--threads", "1", "--device", "cpu", "--gpu-memory-fraction", "0.5",
         "--sample-interval", "0.05"],
        home,
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    return completed


@pytest.mark.slow
def test_repeats_run_round_by_round(interleaved):
    order = [(r.config["backend"], r.config["repeat"]) for r in interleaved.results()]
    assert order == [("torch", 0), ("jax", 0), ("torch", 1), ("jax", 1)]
    assert "n=2" in interleaved.stdout and "vs torch" in interleaved.stdout


@pytest.mark.slow
def test_sampler_series_is_sliced_by_the_workers_markers(interleaved):
    for r in interleaved.results():
        s, markers = r.sampler, r.metrics["markers"]
        t = s["series"]["t"]
        assert t == sorted(t) and len(t) >= 5
        assert markers["fit_start"] <= markers["warmup_end"] <= markers["measured_end"]
        assert t[0] <= markers["measured_start"] and markers["measured_end"] <= t[-1] + 0.5
        measured = s["summary"]["measured"]
        assert measured["process_rss_bytes"]["samples"] >= 2
        assert measured["process_cpu_percent"]["max"] > 10
        assert s["summary"]["run"]["process_rss_bytes"]["max"] > 50 * 2**20
        assert s["sources"]["cpu"]["available"]
        assert s["sources"]["gpu"]["available"] in (True, False)
        assert r.metrics["energy"]["available"] in (True, False)
        assert "kernel ran" in s["labels"].get("gpu0_kernel_time_percent", "kernel ran")


@pytest.mark.slow
def test_threads_device_and_memory_options_are_recorded(interleaved):
    for r in interleaved.results():
        framework = r.environment["framework"]
        assert len(framework["threads"]["cpu_affinity"]) == 1
        assert r.environment["process_env"]["OMP_NUM_THREADS"] == "1"
        assert r.environment["process_env"]["CUDA_VISIBLE_DEVICES"] == ""
        options = framework["memory_options"]
        assert options["requested"] == {"gpu_memory_fraction": 0.5, "gpu_memory_growth": False}
        assert options["gpus_visible"] == 0
        assert options["framework_default"]
        if r.config["backend"] == "torch":
            assert framework["threads"]["framework"]["intra_op"] == 1
            assert options["applied"] == {"gpu_memory_fraction": "not applicable: no GPU visible"}
        else:
            assert options["applied"] == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
        kinds = [m["kind"] for m in r.metrics["memory"]]
        assert kinds == ["process_peak_rss"]  # no GPU: no framework peak, no NVML readings


@pytest.mark.slow
def test_inference_mode_reports_latency_percentiles(request):
    """tensorflow, small_cnn, 1.5 s of inference after 3 warm-up batches of 16: the shared
    sweep's "inference" group (tests/shared_sweep.py), in its warm tensorflow worker."""
    group = shared_sweep.group(request, "inference", "tensorflow")
    assert group.completed.returncode == 0, dump(group.completed)
    (r,) = group.results()
    m = r.metrics
    assert r.kind == "inference" and r.config["duration_s"] == 1.5
    assert m["measured_time_s"] >= 1.5 and m["measured_batches"] == len(m["latencies_s"]) >= 3
    assert m["images_per_sec"] == pytest.approx(m["batches_per_sec"] * 16)
    latency = m["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"]
    assert m["warmup_steps"] == 3 and m["first_step_s"] > 0
    assert "latency p90" in tables.run_table([r])  # the table kbench run prints


def test_inference_flags_reach_the_run_settings():
    """Fast: kbench run's --mode inference --duration, as the inference run above takes
    them, become the runs' settings."""
    args = build_parser().parse_args(
        ["run", "--backend", "tensorflow", "--model", "small_cnn", "--dataset", "synthetic",
         "--mode", "inference", "--duration", "1.5", "--warmup-steps", "3", "--batch-size",
         "16", "--test-samples", "16", "--train-samples", "16"]
    )  # fmt: skip
    settings = settings_of(args)
    assert (settings["mode"], settings["duration_s"]) == ("inference", 1.5)
    assert (settings["warmup_steps"], settings["batch_size"]) == (3, 16)


@pytest.mark.slow
@pytest.mark.own_processes("a worker that runs out of memory")
def test_out_of_memory_is_its_own_status(home):
    """An allocation larger than this machine's memory fails at once, on CPU too."""
    require_backends("torch-native", "jax")
    side = math.ceil(math.sqrt(1.5 * psutil.virtual_memory().total / (128 * 4)))
    completed = run_kbench(
        ["run", "--backend", "torch-native,jax", "--model", "mlp", "--dataset", "synthetic",
         "--input-shape", f"{side}x{side}x1", "--num-classes", "2", "--train-samples", "1",
         "--test-samples", "1", "--batch-size", "1", "--steps", "1", "--warmup-steps", "0",
         "--sample-interval", "0", "--repeats", "1"],
        home,
    )  # fmt: skip
    assert completed.returncode == 1
    torch_run, jax_run = completed.results()
    assert torch_run.status == jax_run.status == "oom", dump(completed)
    assert "can't allocate memory" in torch_run.reason
    assert "RESOURCE_EXHAUSTED" in jax_run.reason
    assert "oom" in completed.stdout and torch_run.sampler is None


@pytest.mark.slow
@pytest.mark.own_processes("the stand-in NVML library a worker loads")
def test_runner_with_a_stand_in_nvml_records_gpu_series_memory_and_energy(tmp_path):
    """The real binding on the stand-in library (tests/nvml_standin), the worker on GPU 0."""
    require_backends("torch-native")
    try:
        lib = build_standin(tmp_path / "lib")
    except CompilerMissing as err:
        pytest.skip(str(err))
    config = write_config(tmp_path / "nvml.conf", [StandinDevice(processes=[("children", 2**20)])])
    completed = run_kbench(
        ["run", "--backend", "torch-native", "--model", "mlp", "--dataset", "synthetic",
         "--steps", "150", "--warmup-steps", "2", "--batch-size", "64", "--test-samples", "64",
         "--sample-interval", "0.05"],
        tmp_path, env=standin_env(lib, config),
    )  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    (r,) = completed.results()
    series = r.sampler["series"]
    assert set(series["gpu0_kernel_time_percent"]) == {57}
    memory = {m["kind"]: m for m in r.metrics["memory"]}
    assert memory["process_nvml"]["bytes"] == 2**20 and memory["process_nvml"]["device"] == "gpu0"
    assert memory["device_used"]["bytes"] == 4 * 2**30 - 256 * 2**20  # v2: less reserved
    energy = r.metrics["energy"]  # the stand-in's counter grows 1.5 J per reading
    assert energy["available"] and energy["method"] == "counter", energy
    samples = r.sampler["summary"]["measured"]["gpu0_energy_j"]["samples"]
    assert 1.5 * (samples - 1) <= energy["measured_j"] <= 1.5 * (samples + 1)
    assert energy["images_per_joule"] == pytest.approx(
        r.metrics["measured_images"] / energy["measured_j"]
    )
    summary = r.sampler["summary"]["measured"]
    assert summary["gpu0_power_w"]["mean"] == 150.0
