"""Facts about the machine and kbench itself, detected, never hard-coded (parent side)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import psutil

from kbench.facts import PROJECT_ROOT, VERSION
from kbench.measure.nvml import error_text, text_of

# The instruction-set features that decide which kernels a framework runs: TensorFlow
# turns oneDNN on by default only with the VNNI/BF16/AMX ones; oneDNN, XLA, MKL and
# OpenBLAS pick their code paths by AVX2/FMA/AVX-512 (x86) and NEON/SVE (ARM). Names as
# Linux's /proc/cpuinfo spells them (ARM's NEON is "asimd" there).
KERNEL_FEATURES: Tuple[str, ...] = (
    "sse4_2", "avx", "avx2", "fma",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni",
    "amx_tile", "amx_int8", "amx_bf16",
    "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16",
)  # fmt: skip
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x61": "Apple", "0xc0": "Ampere", "0x48": "HiSilicon",
                    "0x51": "Qualcomm", "0x4e": "NVIDIA"}  # fmt: skip


def parse_cpuinfo(text: str, machine: str) -> Dict[str, Any]:
    """Vendor, model and kernel-deciding features from the text of ``/proc/cpuinfo``
    (x86: ``vendor_id``, ``model name``, ``flags``; ARM: ``CPU implementer``, ``Features``)."""
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    implementer = fields.get("CPU implementer", "").lower()
    return {
        "vendor": fields.get("vendor_id") or ARM_IMPLEMENTERS.get(implementer, implementer or None),
        "model": fields.get("model name") or fields.get("Model") or None, "architecture": machine,
        "features": [name for name in KERNEL_FEATURES if name in flags], "source": "/proc/cpuinfo",
    }  # fmt: skip


def _sysctl(name: str) -> Optional[str]:
    try:
        done = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def cpu_features() -> Dict[str, Any]:
    """The CPU's vendor, model and :data:`KERNEL_FEATURES`: ``/proc/cpuinfo``, macOS'
    ``sysctl``; elsewhere the features are unknown (``None``), not none."""
    machine = platform.machine()
    with contextlib.suppress(OSError):
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(), machine)
    if sys.platform == "darwin":
        brand = _sysctl("machdep.cpu.brand_string")
        if machine == "arm64":
            features = ["asimd"] + (["bf16"] if _sysctl("hw.optional.arm.FEAT_BF16") == "1" else [])
            return {"vendor": "Apple", "model": brand, "architecture": machine,
                    "features": features, "source": "sysctl"}  # fmt: skip
        flags = " ".join(filter(None, (_sysctl("machdep.cpu.features"),
                                       _sysctl("machdep.cpu.leaf7_features")))).lower()  # fmt: skip
        flags = flags.replace("avx1.0", "avx").replace("avx512vnni", "avx512_vnni")
        return {"vendor": _sysctl("machdep.cpu.vendor"), "model": brand, "architecture": machine,
                "features": [f for f in KERNEL_FEATURES if f in flags.split()],
                "source": "sysctl"}  # fmt: skip
    return {"vendor": None, "model": platform.processor() or None, "architecture": machine,
            "features": None, "source": f"not read on {sys.platform}"}  # fmt: skip


def gpu_info() -> Dict[str, Any]:
    """GPUs as NVML sees them, or why it cannot. An NVML error after ``nvmlInit`` marks that
    device (or the driver's version) with the error; the others are described as usual."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError, or whatever a mismatched binding raises
        return {"available": False, "reason": f"NVML: {error_text(err)}"}
    try:
        return _describe_gpus(pynvml)
    except Exception as err:
        return {"available": False, "reason": f"NVML: {error_text(err)}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # nothing to do about a failed shutdown
            pass


def _describe_gpus(pynvml: Any) -> Dict[str, Any]:
    devices = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        device: Dict[str, Any] = {"index": index}
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device["name"] = text_of(pynvml.nvmlDeviceGetName(handle))
            device["memory_total_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception as err:
            device["error"] = error_text(err)
            devices.append(device)
            continue
        for key, read in (
            ("pci_bus_id", lambda h=handle: text_of(pynvml.nvmlDeviceGetPciInfo(h).busId)),
            ("uuid", lambda h=handle: text_of(pynvml.nvmlDeviceGetUUID(h))),
        ):
            try:
                device[key] = read()
            except Exception as err:
                device[key] = None
                device.setdefault("errors", {})[key] = error_text(err)
        devices.append(device)
    info: Dict[str, Any] = {
        "available": any("error" not in d for d in devices), "devices": devices,
    }  # fmt: skip
    if devices and not info["available"]:
        info["reason"] = "no GPU could be read: " + "; ".join(
            f"GPU {d['index']}: {d['error']}" for d in devices
        )
    try:
        info["driver"] = text_of(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        info["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception as err:
        info.setdefault("driver", None)
        info.setdefault("cuda_driver_version", None)
        info["driver_error"] = error_text(err)
    return info


def cpu_frequency() -> Any:
    """``psutil.cpu_freq()``: current, min and max MHz; None where the system has none."""
    try:
        return psutil.cpu_freq()
    except (OSError, NotImplementedError):  # absent on some virtual machines
        return None


def max_cpu_mhz() -> Optional[float]:
    frequency = cpu_frequency()
    return frequency.max if frequency and frequency.max else None


@functools.lru_cache(maxsize=1)
def machine() -> Dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        # the model /proc/cpuinfo or sysctl names, else what Python knows of the processor
        "cpu_model": cpu_features()["model"] or platform.processor() or platform.machine(),
        "cpu": cpu_features(),
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_max_mhz": max_cpu_mhz(),
        "memory_total_bytes": psutil.virtual_memory().total,
        "gpu": gpu_info(),
    }


MATMUL_PEAK_CODE = r"""
import os, sys, time, json
threads = int(sys.argv[1])
import psutil
process = psutil.Process()
if hasattr(process, "cpu_affinity") and sys.platform != "darwin":  # as processes.pin_cores
    cores = sorted(process.cpu_affinity())
    if threads < len(cores):
        process.cpu_affinity(cores[:threads])
import numpy as np
n = 1024
a = np.random.default_rng(0).random((n, n), dtype=np.float32)
b = a.copy()
a @ b
times = []
for _ in range(10):
    start = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - start)
print(json.dumps({"gflops_per_sec": 2 * n**3 / min(times) / 1e9}))
"""


@functools.lru_cache(maxsize=8)
def cpu_matmul_peak(threads: int) -> Dict[str, Any]:
    """This CPU's float32 matmul speed with ``threads`` threads, the reference for CPU
    "fraction of peak": numpy, 1024x1024 (2048's peak in a third of the time), best of 10,
    in a fresh process with a worker's thread variables."""
    env = dict(os.environ)
    env.update({key: str(threads) for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS")})  # fmt: skip
    try:
        done = subprocess.run(
            [sys.executable, "-c", MATMUL_PEAK_CODE, str(threads)],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        measured = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as err:
        return {"available": False, "reason": f"matmul peak not measured: {err}"}
    return {
        "available": True, "gflops_per_sec": measured["gflops_per_sec"], "threads": threads,
        "method": "numpy float32 1024x1024 matmul, best of 10, fresh process",
    }  # fmt: skip


@functools.lru_cache(maxsize=1)
def kbench_info() -> Dict[str, Any]:
    def git(*args: str) -> str:
        run = ["git", "-C", str(PROJECT_ROOT), *args]
        return subprocess.run(run, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        sha, dirty = git("rev-parse", "HEAD").strip(), bool(git("status", "--porcelain"))
        found = {"sha": sha, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        found = {"sha": None, "dirty": None}
    return {"version": VERSION, "git": found}
