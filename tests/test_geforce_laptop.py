"""A GeForce laptop under Windows (WDDM), as NVML answers there, through the real
nvidia-ml-py binding against the stand-in library (tests/nvml_standin): NVML lists the
worker's process with NVML_VALUE_NOT_AVAILABLE for its memory, and the board answers
NOT_SUPPORTED for power and the energy counter (GeForce 10-series mobile parts). Every
unknown is None or absent with its reason, never 0. Not run on Windows: NVML's answers
are the stand-in's."""

from __future__ import annotations

import pytest
from test_nvml_binding import run_with, standin_root, worker_on_gpu  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def laptop(standin_root):  # noqa: F811
    gtx_1060 = worker_on_gpu(memory=None, name="NVIDIA GeForce GTX 1060", power_mw=None,
                             energy_mj=None, gpu_util=64)  # fmt: skip
    return run_with(standin_root, [gtx_1060], name="wddm.conf")


def test_wddm_process_memory_is_none_with_the_reason(laptop):
    (process,) = [m for m in laptop["memory"] if m["kind"] == "process_nvml"]
    assert process["bytes"] is None
    assert "NVML_VALUE_NOT_AVAILABLE" in process["reason"] and "WDDM" in process["reason"]
    assert "gpu0_process_memory_bytes" not in laptop["sampler"]["series"]  # never 0


def test_unsupported_power_and_energy_are_unknown_with_the_reason(laptop):
    series = laptop["sampler"]["series"]
    assert "gpu0_power_w" not in series and "gpu0_energy_j" not in series
    unsupported = laptop["sampler"]["sources"]["gpu"]["unsupported"]["gpu0"]
    assert "NotSupported" in unsupported["power_w"] and "NotSupported" in unsupported["energy_j"]
    energy = laptop["energy"]
    assert energy["available"] is False and energy.get("measured_j") is None
    assert "power_w" in energy["reason"] and "NotSupported" in energy["reason"]


def test_what_the_board_does_report_is_kept(laptop):
    series = laptop["sampler"]["series"]
    assert max(v for v in series["gpu0_kernel_time_percent"] if v is not None) == 64
    assert any(v for v in series["gpu0_memory_used_bytes"] if v)
    device = laptop["sampler"]["sources"]["gpu"]["devices"][0]
    assert device["name"] == "NVIDIA GeForce GTX 1060"
