"""The HTML report.

Slow: real runs (torch-native and jax, tiny MLP on synthetic data; those that can share
a warm worker share one, and the timed-out run goes through the CLI), one report
written from them, checked as a file and rendered in headless Chromium.
Fast: hand-made documents for what this machine lacks (a GPU, an out-of-memory run),
for older documents, and for text that must be escaped.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from conftest import Completed, dump, require_backends, run_kbench

from kbench.measure.processes import usable_cores
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.run.runner import Runner
from kbench.views import setting_plots, throughput_plots, timeline_plots
from kbench.views.report import ReportSummary, write_report

# Two backends whose workers start quickly (torch-native needs no Keras), so the whole
# fixture stays near a minute on two busy cores.
BACKENDS = ("torch-native", "jax")
TINY = [
    "--model", "mlp", "--dataset", "synthetic", "--train-samples", "64", "--test-samples", "32",
    "--warmup-steps", "2",
]  # fmt: skip


@pytest.fixture(scope="module")
def real_results(tmp_path_factory: pytest.TempPathFactory) -> List[RunResult]:
    require_backends(*BACKENDS)
    home = tmp_path_factory.mktemp("home")
    out = home / "results"
    first = BACKENDS[0]
    tiny = dict(model="mlp", dataset="synthetic", train_samples=64, test_samples=32, warmup_steps=2)
    # both backends, two repeats; then one backend at other settings. What is read here is
    # the report, not fresh-process timings: the runs that can share a worker share a warm
    # one (torch-native's four, jax's two; one more thread than the cores is a worker of
    # its own)
    configs = [
        RunConfig(backend=backend, steps=6, batch_size=16, repeat=repeat, **tiny)
        for repeat in (0, 1)
        for backend in BACKENDS
    ]
    configs += [
        RunConfig(backend=first, steps=6, batch_size=32, **tiny),
        RunConfig(backend=first, steps=6, batch_size=16, threads=usable_cores() + 1, **tiny),
        RunConfig(backend=first, epochs=2, batch_size=16, **tiny),
    ]
    ran = Runner(output_dir=out, warm=True).run_all(configs)
    assert [r.status for r in ran] == ["ok"] * len(configs), [(r.run_id, r.reason) for r in ran]
    assert sum(bool(r.metrics.get("warm_worker")) for r in ran) == 4  # 7 runs, 3 workers
    # a run that cannot finish, through the CLI in a worker of its own: it exits 1 and
    # records the run as a timeout
    failing = ["run", "-b", first, "--steps", "6", "--batch-size", "64", "--timeout", "0.5"]
    done = run_kbench([*failing, *TINY, "--store", str(out)], home)
    assert done.returncode == 1, dump(done)
    results = Completed(0, "", "", out).results()
    assert [r.status for r in results].count("timeout") == 1, [r.status for r in results]
    return results


@pytest.fixture(scope="module")
def real_report(real_results, tmp_path_factory) -> ReportSummary:
    directory = tmp_path_factory.mktemp("report")
    return write_report(real_results, directory / "report.html", title="kbench <test> report")


def images_in(text: str) -> List[str]:
    return re.findall(r"<img\b[^>]*>", text)


@pytest.mark.slow
def test_report_is_one_self_contained_file(real_report: ReportSummary) -> None:
    path = real_report.path
    assert sorted(p.name for p in path.parent.iterdir()) == ["report.html"]
    text = path.read_text(encoding="utf-8")
    for external in ('src="http', "src='http", 'src="//', "<link", "@import", "url("):
        assert external not in text, external
    images = images_in(text)
    assert images and all('src="data:image/png;base64,' in img for img in images)
    assert len(images) == len(real_report.figures)
    assert text.count("<script") == 1
    assert "kbench &lt;test&gt; report" in text and "<test>" not in text

    figures = real_report.figures
    for title in (
        throughput_plots.THROUGHPUT,
        throughput_plots.SPEED_RATIO,
        setting_plots.BATCH_SIZE,
        setting_plots.THREADS,
    ):
        assert title in figures, (title, figures, real_report.skipped)
    assert setting_plots.ACCURACY in figures  # the --epochs 2 run has two epochs of accuracy
    assert setting_plots.RUNTIME_ACCURACY in figures  # several settings trained
    # one timeline per backend and setting (not per repeat), the timed-out run's included
    timelines = [
        f[len(timeline_plots.TIMELINE_PREFIX) :] for f in figures if f.startswith("Timeline")
    ]
    assert sorted(timelines) == sorted(
        [
            "torch-native, mlp, batch 16, steps 6",
            "jax, mlp, batch 16, steps 6",
            f"torch-native, mlp, batch 16, steps 6, threads {usable_cores() + 1}",
            "torch-native, mlp, batch 16, epochs 2",
            "torch-native, mlp, batch 32, steps 6",
            "torch-native, mlp, batch 64, steps 6",
        ]
    )

    # nothing varied the GPU memory fraction, so that figure (only) is skipped, saying why
    assert real_report.skipped == [
        f"{setting_plots.MEMORY_FRACTION}: gpu_memory_fraction was the same in every run"
    ]
    assert "gpu_memory_fraction was the same in every run" in text

    # the timed-out run is in the failures table with its reason; synthetic data is marked
    failures = text[text.index('id="failures"') :]
    assert "TIMEOUT" in failures and "timeout and was killed" in failures
    assert "Marked: torch-native, mlp, batch 64, steps 6: TIMEOUT." in text  # in the bars
    assert "SYNTHETIC DATA" in text
    assert "process_peak_rss: peak resident host memory" in text  # the memory table's kind


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium is not installed: the report cannot be rendered here"
        if os.environ.get("KBENCH_REQUIRE_ALL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    command = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
        "--virtual-time-budget=5000", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_report_renders_in_chromium(real_report: ReportSummary, tmp_path: Path) -> None:
    url = real_report.path.resolve().as_uri()
    expected = len(images_in(real_report.path.read_text(encoding="utf-8")))
    dom = run_chromium("--dump-dom", url, profile=tmp_path / "profile")
    loaded = re.search(r'<body[^>]*\bdata-images-loaded="(\d+)"', dom.stdout)
    assert loaded, f"no data-images-loaded on <body>; chromium said:\n{dom.stderr[-2000:]}"
    assert int(loaded.group(1)) == expected > 0

    shot = tmp_path / "report.png"
    done = run_chromium(
        f"--screenshot={shot}", "--window-size=1280,4000", url, profile=tmp_path / "profile"
    )
    assert shot.is_file(), done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- fast

T0 = 1_800_000_000.0
GIB = 2**30


def fake_result(
    backend: str,
    *,
    status: str = "ok",
    rate: float = 1000.0,
    batch_size: int = 64,
    repeat: int = 0,
    gpu: bool = False,
    fraction: Optional[float] = None,
    sampler: bool = True,
    new_fields: bool = True,
    reason: Optional[str] = None,
    kind: str = "train",
) -> RunResult:
    """A plausible document, as a run on a machine with (or without) a GPU writes it."""
    ok = status == "ok"
    config = {
        "backend": backend, "model": "resnet20", "dataset": "cifar10", "batch_size": batch_size,
        "epochs": None, "steps": 40, "warmup_steps": 5, "threads": None, "repeat": repeat,
        "timeout_s": 1800.0, "sample_interval_s": 0.2,
        "mode": "inference" if kind == "inference" else "train",
        "gpu_memory_fraction": fraction, "gpu_memory_growth": False,
    }  # fmt: skip
    devices = [{"index": 0, "name": "NVIDIA H100", "memory_total_bytes": 80 * GIB}]
    machine_gpu = (
        {"available": True, "driver": "550.1", "cuda_driver_version": "12.4", "devices": devices}
        if gpu
        else {"available": False, "reason": "NVML: NVMLError_LibraryNotFound"}
    )
    environment = {
        "kbench": {"version": "0.1.0", "git": {"sha": "0123456789abcdef", "dirty": False}},
        "machine": {
            "hostname": "box",
            "cpu_model": "Test CPU",
            "cpu_logical_cores": 8,
            "cpu_physical_cores": 4,
            "memory_total_bytes": 64 * GIB,
            "gpu": machine_gpu,
        },  # fmt: skip
        "interpreter": "/envs/x/bin/python",
        "process_env": {"OMP_NUM_THREADS": "8"},
        "framework": {"name": backend, "version": "1.0", "devices": ["gpu:0" if gpu else "cpu"]},
    }
    markers = {"first_step_start": T0 + 2.0, "measured_start": T0 + 3.0, "measured_end": T0 + 5.0}
    metrics: Dict[str, Any] = {}
    if ok:
        memory = [{"kind": "process_peak_rss", "bytes": 3 * GIB, "source": "getrusage"}]
        if gpu:
            memory += [
                {"kind": "framework_peak", "bytes": int(6 * GIB * (fraction or 1)), "source": "x"},
                {"kind": "process_nvml", "bytes": int(7 * GIB * (fraction or 1)), "source": "x"},
                {"kind": "device_used", "bytes": 8 * GIB, "source": "x"},
            ]
        metrics = {
            "images_per_sec": rate,
            "test_accuracy": 0.5,
            "memory": memory,
            "markers": markers,
            "warmup_steps": 5,
        }
        if kind == "inference":
            metrics["latency_ms"] = {"p50": 20.0, "p90": 22.0, "p99": 25.0}
        elif kind == "parity":
            metrics = {"max_abs_diff": 1e-6}
        elif new_fields:
            metrics["step_ends_s"] = [0.8 + 0.05 * i for i in range(45)]
            metrics["epoch_train_accuracy"] = [0.3, 0.45]
    series: Dict[str, List[Any]] = {
        "t": [T0 + 0.2 * i for i in range(30)],
        "process_rss_bytes": [GIB * min(i, 10) / 4 for i in range(30)],
        "process_cpu_percent": [90.0] * 30,
    }
    if gpu:
        series["gpu0_kernel_time_percent"] = [0] * 10 + [95] * 15 + [None] * 5
        series["gpu0_process_memory_bytes"] = [GIB * min(i, 20) / 3 for i in range(30)]
        series["gpu0_memory_used_bytes"] = [GIB * min(i, 20) / 2.5 for i in range(30)]
    labels = {
        "gpu0_kernel_time_percent": "GPU utilization as NVML defines it: percent of the "
        "sample period during which a kernel ran (not SM occupancy)"
    }
    return RunResult(
        run_id=f"20260101T00000{repeat}Z-{backend}-resnet20-{batch_size}-{status}-{fraction}",
        status=status,
        config=config,
        started_at=f"2026-01-01T00:00:0{repeat}+00:00",
        wall_time_s=6.0,
        environment=environment,
        data={"name": "cifar10", "synthetic": False},
        metrics=metrics,
        reason=reason if not ok else None,
        error=None if ok else {"type": "X", "message": "", "traceback": "", "log_tail": "a\nb"},
        sampler={"interval_s": 0.2, "series": series, "labels": labels, "sources": {}}
        if sampler
        else None,
        kind=kind,
    )


def test_gpu_runs_label_memory_mark_oom_and_plot_the_memory_fraction(tmp_path: Path) -> None:
    oom = "ResourceExhaustedError: OOM when allocating tensor with shape [256,64,32,32]"
    results = [
        fake_result("tensorflow", gpu=True, rate=900.0, fraction=0.5),
        fake_result("jax", gpu=True, rate=1500.0, fraction=0.5),
        fake_result("tensorflow", gpu=True, rate=1000.0),
        fake_result("jax", gpu=True, rate=1600.0),
        fake_result("tensorflow", gpu=True, batch_size=256, status="oom", reason=oom),
        fake_result("jax", gpu=True, batch_size=256, rate=2000.0),
    ]
    summary = write_report(results, tmp_path / "r.html", baseline="jax")
    text = summary.path.read_text(encoding="utf-8")
    assert setting_plots.MEMORY_FRACTION in summary.figures
    assert setting_plots.BATCH_SIZE in summary.figures
    assert "percent of the sample period during which a kernel ran" in text  # its label
    assert "has no effect" not in text  # a GPU was there: the fraction mattered
    # the OOM run: marked in the throughput figure's caption, listed with its reason
    assert "tensorflow, resnet20, batch 256: OOM" in text
    assert html.escape(oom) in text[text.index('id="failures"') :]
    # the memory table, as kbench compare's: the first kind every run read, named
    assert "process_nvml: GPU memory of the worker process (NVML, peak sampled)" in text
    assert any(s.startswith(setting_plots.THREADS) for s in summary.skipped)
    assert "SYNTHETIC" not in text


def test_memory_fraction_without_a_gpu_says_it_has_no_effect(tmp_path: Path) -> None:
    results = [
        fake_result("torch", fraction=0.5),
        fake_result("jax", fraction=0.5, rate=1200.0),
        fake_result("torch"),
        fake_result("jax", rate=1300.0),
    ]
    summary = write_report(results, tmp_path / "r.html")
    assert setting_plots.MEMORY_FRACTION in summary.figures
    text = summary.path.read_text(encoding="utf-8")
    assert "here it has no effect" in text
    assert "Speed against torch" in text  # the first backend seen is the baseline


def test_older_documents_and_sampler_off_are_skipped_with_reasons(tmp_path: Path) -> None:
    results = [
        fake_result("torch", new_fields=False, sampler=False),
        fake_result("jax", new_fields=False, sampler=False, rate=2000.0),
    ]
    summary = write_report(results, tmp_path / "r.html")
    skipped = "\n".join(summary.skipped)
    assert f"{timeline_plots.TIMELINES}: no run has sampler series" in skipped
    assert f"{setting_plots.ACCURACY}: the documents have no per-epoch accuracy" in skipped
    assert any("sampler off" in note for note in summary.notes)
    assert summary.figures == [throughput_plots.THROUGHPUT, throughput_plots.SPEED_RATIO]


def test_one_backend_has_no_ratio_figure(tmp_path: Path) -> None:
    summary = write_report([fake_result("torch")], tmp_path / "r.html")
    assert f"{throughput_plots.SPEED_RATIO}: only one backend ran (torch): nothing to compare" in (
        summary.skipped
    )
    timelines = [f for f in summary.figures if f.startswith(timeline_plots.TIMELINE_PREFIX)]
    assert timelines == [f"{timeline_plots.TIMELINE_PREFIX}torch, resnet20, batch 64"]


def test_text_from_documents_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert('x')</script>"
    results = [fake_result("torch"), fake_result("jax", status="failed", reason=evil)]
    summary = write_report(results, tmp_path / "r.html", title="<b>mine</b>")
    text = summary.path.read_text(encoding="utf-8")
    assert evil not in text and html.escape(evil) in text
    assert "<b>mine</b>" not in text
    assert text.count("<script") == 1  # only the image counter


def test_bad_input_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected one of the backends that ran"):
        write_report([fake_result("torch")], tmp_path / "r.html", baseline="mxnet")
    with pytest.raises(ValueError, match="at least one result"):
        write_report([], tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_inference_runs_are_plotted_and_parity_runs_noted(tmp_path: Path) -> None:
    results = [
        fake_result("torch", kind="inference", rate=5000.0),
        fake_result("jax", kind="inference", rate=7000.0),
        fake_result("torch"),
        fake_result("jax", rate=1500.0),
        fake_result("torch", kind="parity"),
    ]
    summary = write_report(results, tmp_path / "r.html")
    assert summary.figures[:2] == [throughput_plots.THROUGHPUT, throughput_plots.SPEED_RATIO]
    assert f"{timeline_plots.TIMELINE_PREFIX}jax, resnet20, batch 64, inference" in summary.figures
    assert any("1 parity run(s)" in note for note in summary.notes)
    text = summary.path.read_text(encoding="utf-8")
    assert "resnet20, batch 64, inference" in text and "no step_ends_s" not in text


def test_a_store_whose_every_comparison_was_left_out_is_reported_not_a_crash(
    tmp_path: Path,
) -> None:
    """Before: `kbench report` on a tune whose every window was dropped (measured while
    the machine was busy) stopped with "ValueError: not enough values to unpack": the
    comparison of a group leaves its dropped windows out, and had nothing left. A
    comparison whose every round was dropped now has its figures, flagged; what is left
    out whole is a comparison measured again (superseded): the same nothing left."""
    results = [fake_result("torch"), fake_result("jax", rate=1500.0)]
    for result in results:
        result.metrics["window"] = {"superseded": "superseded: measured again from the start"}
    summary = write_report(results, tmp_path / "r.html")
    assert summary.path.is_file()
    assert any(note.startswith("2 comparison document(s) superseded") for note in summary.notes)
    assert throughput_plots.THROUGHPUT not in summary.figures
