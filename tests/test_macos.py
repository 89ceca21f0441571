"""macOS: the powermetrics GPU source on a recorded sample (tests/macos/, hand-written
from the documented plist format, not captured on a Mac), the sampler without root,
and torch's Apple GPU (MPS) device choice. The system check (``processes.SYSTEM``) and
``torch.backends.mps.is_available`` are patched: this machine is Linux without an
Apple GPU. Nothing here ran on a Mac."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbench.measure import powermetrics, processes
from kbench.measure.nvml import SourceUnavailable
from kbench.measure.powermetrics import PowermetricsSource, parse_sample, split_documents
from kbench.measure.sampler import Sampler, optional_sources

SAMPLE = Path(__file__).parent / "macos" / "powermetrics_gpu_power.plist"


@pytest.fixture
def on_macos(monkeypatch):
    monkeypatch.setattr(processes, "SYSTEM", "Darwin")


def documents():
    found, rest = split_documents(SAMPLE.read_bytes())
    assert rest == b""  # the stream ends with a separator
    return found


def test_the_plist_samples_give_active_residency_and_power():
    first, second = (parse_sample(d) for d in documents())
    assert first["gpu0_active_percent"] == pytest.approx(75.0)  # idle_ratio 0.25
    assert first["gpu0_power_w"] == pytest.approx(8.0)  # 1600 mJ over 0.2 s
    assert first["gpu_energy_mj"] == 1600
    assert second["gpu0_active_percent"] == pytest.approx(90.0)
    assert second["gpu0_power_w"] == pytest.approx(12.0)  # 3000 mJ over 0.25 s


def test_a_sample_without_the_gpu_keys_gives_nothing_not_zero():
    bare = documents()[0].replace(b"<key>gpu</key>", b"<key>not_gpu</key>")
    assert parse_sample(bare) == {}


def test_split_keeps_a_document_cut_short_for_the_next_chunk():
    data = SAMPLE.read_bytes()
    found, rest = split_documents(data[:1800])
    assert len(found) == 1 and rest  # the second document is incomplete
    found, rest = split_documents(rest + data[1800:])
    assert len(found) == 1 and rest == b""


def test_as_root_the_source_reads_a_powermetrics_stream(on_macos):
    # a process writing the recorded stream stands in for powermetrics (macOS only)
    code = f"import sys; sys.stdout.buffer.write(open({str(SAMPLE)!r}, 'rb').read())"
    writer = [sys.executable, "-c", code]
    source = PowermetricsSource(argv=writer, euid=0)
    try:
        deadline = time.monotonic() + 20
        reading = {}
        while not reading and time.monotonic() < deadline:
            time.sleep(0.05)
            reading = source.read([])
        source._reader.join(timeout=10)
        reading.update(source.read([]))  # whatever came after the first read
        assert reading["gpu0_active_percent"] == pytest.approx(90.0)  # the last sample's
        assert reading["gpu0_power_w"] == pytest.approx(12.0)
        assert reading["gpu0_energy_j"] == pytest.approx(4.6)  # 1.6 J + 3.0 J, each once
        assert source.read([]) == {}  # no new sample: nothing repeated
        described = source.describe()
        assert described["samples"] == 2 and described["method"] == powermetrics.METHOD
        assert "parse_errors" not in described
    finally:
        source.close()


def test_the_real_command_is_the_gpu_power_sampler_in_plist():
    assert powermetrics.command(0.2) == [
        "powermetrics", "--samplers", "gpu_power", "-f", "plist", "-i", "200"
    ]  # fmt: skip


def test_without_root_gpu_is_unavailable_with_the_reason(on_macos):
    with pytest.raises(SourceUnavailable) as caught:
        PowermetricsSource(euid=501)
    assert str(caught.value) == powermetrics.NO_ROOT_REASON
    assert "needs root" in powermetrics.NO_ROOT_REASON


def test_powermetrics_missing_is_a_reason_not_a_crash(on_macos):
    with pytest.raises(SourceUnavailable, match="could not be started"):
        PowermetricsSource(argv=["/nonexistent/powermetrics"], euid=0)


def test_not_on_macos_powermetrics_says_so():
    if processes.SYSTEM == "Darwin":
        pytest.skip("this is macOS")
    with pytest.raises(SourceUnavailable, match="macOS only"):
        PowermetricsSource(euid=0)


def test_the_sampler_on_macos_without_root_records_cpu_and_rss_and_says_why_not_gpu(
    on_macos, monkeypatch
):
    if os.geteuid() == 0:
        # the tests run as root here: the sampler would start powermetrics, absent on Linux
        monkeypatch.setattr(powermetrics.os, "geteuid", lambda: 501)
    sources, unavailable = optional_sources()
    assert not any(s.name == "gpu" for s in sources)
    assert unavailable["gpu"] == {"available": False, "reason": powermetrics.NO_ROOT_REASON}
    with Sampler(os.getpid(), interval_s=0.02) as sampler:
        time.sleep(0.1)
    result = sampler.result().to_dict()
    assert result["sources"]["gpu"]["reason"] == powermetrics.NO_ROOT_REASON
    assert result["series"]["process_rss_bytes"][-1] > 0
    assert result["series"]["system_cpu_percent"]


# ------------------------------------------------------------------ torch on an Apple GPU


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_device_choice_prefers_cuda_then_mps_then_cpu(torch, monkeypatch):
    from kbench.backends.torch_native import choose_device

    if not torch.cuda.is_available():
        assert choose_device(torch, "auto") == "cpu"  # this machine: neither
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert choose_device(torch, "auto") == "mps"
    assert choose_device(torch, "gpu") == "mps"
    assert choose_device(torch, "cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert choose_device(torch, "auto") == "cuda"


# A worker-like process per case: starting a backend pins cores, sets torch's thread
# pools once per process and (for --device cpu) KERAS_TORCH_DEVICE.
START_BACKEND = """
import json, os, sys
import torch
torch.backends.mps.is_available = lambda: True  # an Apple GPU as torch reports one
torch.cuda.is_available = lambda: False
from kbench.backends.torch_native import TorchNativeBackend
backend = TorchNativeBackend(threads=1)
backend.start("channels_first", device=sys.argv[1])
info = backend.framework_info()
print(json.dumps({"device": backend.device.type, "gpus": backend.gpus,
                  "device_used": info["device_used"], "devices": info["devices"],
                  "keras_torch_device": os.environ.get("KERAS_TORCH_DEVICE")}))
"""


@pytest.fixture(scope="module")
def started(torch):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    env.pop("KERAS_TORCH_DEVICE", None)
    runs = {
        device: subprocess.Popen([sys.executable, "-c", START_BACKEND, device], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for device in ("gpu", "cpu")
    }  # fmt: skip
    out = {}
    for device, proc in runs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-2000:]
        out[device] = json.loads(stdout.strip().splitlines()[-1])
    return out


@pytest.mark.slow  # two worker-like processes import torch
@pytest.mark.own_processes("a setting read as a framework starts")
def test_torch_native_runs_on_mps_where_it_is_and_the_result_says_so(started):
    run = started["gpu"]  # --device gpu: no NoGpu, the Apple GPU counts
    assert run["device"] == "mps" and run["gpus"] == 1
    assert run["device_used"] == "mps" and "mps" in run["devices"]
    assert run["keras_torch_device"] is None  # Keras picks MPS by itself


@pytest.mark.slow
@pytest.mark.own_processes("a setting read as a framework starts")
def test_device_cpu_stays_on_the_cpu_beside_an_apple_gpu(started):
    run = started["cpu"]
    assert run["device"] == "cpu" and run["gpus"] == 0 and run["device_used"] == "cpu"
    assert run["keras_torch_device"] == "cpu"  # Keras' torch backend would pick MPS
