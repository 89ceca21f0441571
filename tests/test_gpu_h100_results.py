"""Result documents from the first real GPU kbench ran on, read back by today's code.

``tests/gpu_h100/`` holds documents written on an NVIDIA H100 80GB HBM3 (driver
580.159.04; torch 2.11.0+cu130, JAX 0.11.2 with its CUDA 13 plugin, Keras 3.15.1) by
``scripts/gpu_smoke.sh torch,jax,torch-native small_cnn`` on 2026-11-27: ``smoke/`` the
three backends with the sampler and --profile, ``memory/`` JAX under its default,
--gpu-memory-growth and --gpu-memory-fraction 0.25. Nothing in them is edited.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kbench.results.ending import device_used, summary_line
from kbench.results.result import RunResult, shape_problems

ROOT = Path(__file__).resolve().parent.parent
H100 = Path(__file__).resolve().parent / "gpu_h100"
MIB = 2**20


def results(folder: str):
    return [RunResult.load(p) for p in sorted((H100 / folder).glob("*.json"))]


def script(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_documents_load_and_name_the_device_each_run_used():
    runs = results("smoke")
    assert [r.config["backend"] for r in runs] == ["torch", "jax", "torch-native"]
    assert all(not shape_problems(r.to_dict()) for r in runs)
    assert [device_used(r) for r in runs] == ["cuda", "cuda:0", "cuda"]
    assert summary_line(runs[1]).startswith("jax/small_cnn on cuda:0: ok, 44,742 img/s")


def test_jax_memory_options_as_nvml_saw_them():
    """JAX's default took 75% of the 81,559 MiB card, growth what it needed, a fraction
    of 0.25 a quarter: the options did what the flags say, on a real GPU."""
    held = {}
    for r in results("memory"):
        (nvml,) = [m["bytes"] for m in r.metrics["memory"] if m["kind"] == "process_nvml"]
        held[(r.config["gpu_memory_growth"], r.config["gpu_memory_fraction"])] = nvml / MIB
    total = 81_559
    assert held[(False, None)] == pytest.approx(0.75 * total, rel=0.01)
    assert held[(True, None)] < 0.02 * total
    assert held[(False, 0.25)] == pytest.approx(0.25 * total, rel=0.03)
    printed = script("scripts/gpu_smoke_report.py", "memory", str(H100 / "memory"))  # reads only
    assert "jax           default       ok               392 MiB      61,444 MiB" in printed


def copied(folder: str, tmp_path: Path) -> Path:
    """A copy of a fixture store: reading a store writes its index and compare.md."""
    store = tmp_path / folder
    shutil.copytree(H100 / folder, store)
    return store


def test_compare_says_what_the_jax_figure_holds_and_leaves_torch_alone(tmp_path):
    out = script("-m", "kbench", "compare", "--store", str(copied("smoke", tmp_path)))
    memory = out[out.index("Peak memory") :]
    assert "60.0 GiB" in memory
    assert "jax: its own peak allocation was 392 MiB; the rest of the 60.0 GiB" in memory
    assert "preallocates 75% of GPU memory" in memory
    assert "torch: its own peak" not in memory  # 1.1 GiB for 354 MiB: its CUDA context
    assert "10 (gpu)" in out  # NVML's utilization of the torch run


def test_the_smoke_printout_reads_each_gpu_the_worker_used(tmp_path):
    printed = script("scripts/gpu_smoke_report.py", "smoke", str(copied("smoke", tmp_path)))
    assert printed.count("(nvml_pids: GPUs on which NVML listed a process of the worker)") == 3
    assert "worker (NVML per process) 61,456 MiB" in printed
    assert "energy 54.5 J (counter)" in printed


def test_the_check_judges_the_h100_machines_own_python():
    """``probe.json``: kbench/setup/probe.py's report of the H100 image's Python (torch
    2.11.0+cu130 and JAX 0.11.2 with its CUDA 13 plugin), run by the smoke check's first
    stage. Held against the keras3 plan with CUDA 13 (the image's own), the check finds
    one CUDA throughout, nothing owned twice, nothing unresolved, a driver that fits, and
    TensorFlow missing: the one thing wrong there."""
    import dataclasses
    import json

    from kbench.setup import check, platforms

    report = json.loads((H100 / "probe.json").read_text())
    wanted = dataclasses.replace(platforms.plan("keras3", "gpu"), cuda="13")
    verdict = check.judge(report, wanted)
    text = "\n".join(verdict.lines)
    assert verdict.problems == ["tensorflow is not installed in keras3; expected it there "
                                "(run the set-up again)"], text  # fmt: skip
    assert "torch 2.11.0+cu130 (torch): CUDA 13.0 build, cuDNN 9.19.0" in text
    assert "CUDA libraries: CUDA 13 only" in text and "files owned by two packages: none" in text
    assert "driver: 580.159.04 (supports CUDA 13.0)" in text
    # against the plan kbench builds (CUDA 12), the same Python is wrong, and says why
    assert len(check.judge(report, platforms.plan("keras3", "gpu")).problems) > 1
