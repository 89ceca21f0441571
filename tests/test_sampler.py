"""The sampler: CPU always, GPUs through NVML (the real binding on a stand-in library
here, see tests/nvml_standin), never failing the run."""

import json
import os
import subprocess
import sys

import pytest
from nvml_standin import (
    GIB,
    CompilerMissing,
    StandinDevice,
    build_standin,
    standin_env,
    write_config,
)

from kbench.measure import sampler

# A busy worker sampled from a subprocess whose binding loads the stand-in.
BUSY_SAMPLE = r"""
import json, subprocess, sys
from kbench.measure import sampler
code = "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass"
worker = subprocess.Popen([sys.executable, "-c", code])
with sampler.Sampler(worker.pid, interval_s=0.05) as s:
    worker.wait()
print(json.dumps(s.result().to_dict()))
"""


def peak(values):
    """The largest reading; a sample taken after the worker ended has none."""
    return max(v for v in values if v is not None)


def sample_with_standin(tmp_path, devices, fails=None):
    try:
        lib = build_standin(tmp_path / "lib")
    except CompilerMissing as err:
        pytest.skip(str(err))
    config = write_config(tmp_path / "nvml.conf", devices, fails)
    done = subprocess.run([sys.executable, "-c", BUSY_SAMPLE], env=standin_env(lib, config),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_nvml_path_through_the_binding(tmp_path):
    not_supported = {"nvmlDeviceGetCurrentClocksEventReasons": (3, 0)}
    device = StandinDevice(name="Stand-in 16GB", processes=[("children", 2**20), (1, 2**30)],
                           fails=not_supported)  # fmt: skip
    result = sample_with_standin(tmp_path, [device])
    series = result["series"]
    assert len(series["t"]) >= 4 and series["t"] == sorted(series["t"])
    assert set(series["gpu0_kernel_time_percent"]) == {57}
    assert set(series["gpu0_memory_busy_percent"]) == {23}
    assert set(series["gpu0_memory_used_bytes"]) == {4 * GIB - 256 * 2**20}  # v2
    assert set(series["gpu0_memory_total_bytes"]) == {16 * GIB}
    # Only the worker's own device memory counts, not every process on the GPU.
    assert set(series["gpu0_process_memory_bytes"]) - {None} == {2**20}
    assert set(series["gpu0_power_w"]) == {150.0}
    energy = series["gpu0_energy_j"]
    assert energy == sorted(energy) and energy[-1] > energy[0]
    assert "gpu0_throttle_reasons" not in series
    gpu = result["sources"]["gpu"]
    assert gpu["available"] and gpu["devices"][0]["name"] == "Stand-in 16GB"
    assert list(gpu["unsupported"]["gpu0"]) == ["throttle_reasons"]
    labels = result["labels"]
    assert "kernel ran" in labels["gpu0_kernel_time_percent"]
    assert "not memory used" in labels["gpu0_memory_busy_percent"]
    assert peak(series["process_cpu_percent"]) > 20


def test_without_nvml_cpu_is_sampled_and_the_gpu_reason_recorded(tmp_path):
    result = sample_with_standin(tmp_path, [StandinDevice()], fails={"nvmlInitWithFlags": (9, 0)})
    assert result["sources"]["gpu"] == {
        "available": False,
        "reason": "NVML: NVMLError_DriverNotLoaded: Driver Not Loaded",
    }
    assert result["sources"]["cpu"]["available"]
    assert peak(result["series"]["process_rss_bytes"]) > 2**20
    assert not any(name.startswith("gpu") for name in result["series"])


def test_real_pynvml_never_fails_the_sampler():
    with sampler.Sampler(os.getpid(), interval_s=0.05) as s:
        pass
    gpu = s.result().sources["gpu"]
    if gpu["available"]:
        assert gpu["devices"]
    else:
        assert "NVML" in gpu["reason"] or "pynvml" in gpu["reason"]


def test_summary_per_window_and_counters():
    series = {
        "t": [0.0, 1.0, 2.0, 3.0, 4.0],
        "gpu0_kernel_time_percent": [0, 50, 100, None, 10],
        "gpu0_energy_j": [10.0, 12.0, 15.0, 19.0, 20.0],
    }
    summary = sampler.summarize(series, {"warm": (0.0, 1.0), "measured": (1.0, 3.0), "x": None})
    assert summary["warm"]["gpu0_kernel_time_percent"] == {"mean": 25.0, "max": 50.0, "samples": 2}
    assert summary["measured"]["gpu0_kernel_time_percent"]["mean"] == 75.0
    assert summary["measured"]["gpu0_energy_j"] == {
        "increase": 7.0,
        "samples": 3,
        "covered_fraction": 1.0,
    }
    assert "x" not in summary
