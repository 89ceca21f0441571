"""The sampler: CPU always, GPUs through NVML (a stand-in here), never failing the run."""

import os
import subprocess
import sys

from fake_nvml import GIB, FakeNvml

from kbench.measure import sampler


def busy_process(seconds):
    """A separate process spinning on the CPU, as a worker would."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def test_nvml_path_with_a_stand_in_module():
    nvml = FakeNvml()
    worker = busy_process(0.6)
    with sampler.Sampler(worker.pid, interval_s=0.05, nvml=nvml) as s:
        worker.wait()
    result = s.result()
    series = result.series
    assert len(series["t"]) >= 4 and series["t"] == sorted(series["t"])
    assert set(series["gpu0_kernel_time_percent"]) == {57}
    assert set(series["gpu0_memory_busy_percent"]) == {23}
    assert set(series["gpu0_memory_used_bytes"]) == {4 * GIB}
    assert set(series["gpu0_memory_total_bytes"]) == {16 * GIB}
    # Only the worker's own device memory counts, not every process on the GPU.
    assert set(series["gpu0_process_memory_bytes"]) - {0} == {2**20}
    assert set(series["gpu0_power_w"]) == {150.0}
    energy = series["gpu0_energy_j"]
    assert energy == sorted(energy) and energy[-1] > energy[0]
    assert "gpu0_throttle_reasons" not in series
    gpu = result.sources["gpu"]
    assert gpu["available"] and gpu["devices"][0]["name"] == "Fake GPU 16GB"
    assert gpu["unsupported"] == ["throttle_reasons"]
    labels = result.to_dict()["labels"]
    assert "kernel ran" in labels["gpu0_kernel_time_percent"]
    assert "not memory used" in labels["gpu0_memory_busy_percent"]
    assert nvml.initialised == 0  # shut down again
    assert max(series["process_cpu_percent"]) > 20


def test_without_nvml_cpu_is_sampled_and_the_gpu_reason_recorded():
    class Broken(FakeNvml):
        def nvmlInit(self):  # noqa: N802
            raise self.NVMLError("NVML Shared Library Not Found")

    worker = busy_process(0.3)
    with sampler.Sampler(worker.pid, interval_s=0.05, nvml=Broken()) as s:
        worker.wait()
    result = s.result()
    assert result.sources["gpu"] == {
        "available": False,
        "reason": "NVML: NVMLError: NVML Shared Library Not Found",
    }
    assert result.sources["cpu"]["available"]
    assert max(result.series["process_rss_bytes"]) > 2**20
    assert not any(name.startswith("gpu") for name in result.series)


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
    assert summary["measured"]["gpu0_energy_j"] == {"increase": 7.0, "samples": 3}
    assert "x" not in summary
