"""Facts about the machine and kbench itself, detected, never hard-coded (parent side)."""

from __future__ import annotations

import functools
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import kbench

PROJECT_ROOT = Path(kbench.__file__).resolve().parent.parent  # the checkout


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info() -> Dict[str, Any]:
    """GPUs as NVML sees them, or why it cannot see any.

    An NVML error after ``nvmlInit`` (a GPU whose handle needs permissions, a GPU that
    is lost) marks that device with the error instead of failing the description; the
    driver's version likewise. Any other device is described as usual.
    """
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as err:  # NVMLError, or whatever a mismatched binding raises
        return {"available": False, "reason": f"NVML: {type(err).__name__}: {err}"}
    try:
        return _describe_gpus(pynvml)
    except Exception as err:
        return {"available": False, "reason": f"NVML: {type(err).__name__}: {err}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # nothing to do about a failed shutdown
            pass


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _describe_gpus(pynvml: Any) -> Dict[str, Any]:
    devices = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        device: Dict[str, Any] = {"index": index}
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            device["name"] = _text(pynvml.nvmlDeviceGetName(handle))
            device["memory_total_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception as err:
            device["error"] = f"{type(err).__name__}: {err}"
            devices.append(device)
            continue
        for key, read in (
            ("pci_bus_id", lambda h=handle: _text(pynvml.nvmlDeviceGetPciInfo(h).busId)),
            ("uuid", lambda h=handle: _text(pynvml.nvmlDeviceGetUUID(h))),
        ):
            try:
                device[key] = read()
            except Exception as err:
                device[key] = None
                device.setdefault("errors", {})[key] = f"{type(err).__name__}: {err}"
        devices.append(device)
    info: Dict[str, Any] = {
        "available": any("error" not in d for d in devices),
        "devices": devices,
    }
    if devices and not info["available"]:
        info["reason"] = "no GPU could be read: " + "; ".join(
            f"GPU {d['index']}: {d['error']}" for d in devices
        )
    try:
        info["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        info["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
    except Exception as err:
        info.setdefault("driver", None)
        info.setdefault("cuda_driver_version", None)
        info["driver_error"] = f"{type(err).__name__}: {err}"
    return info


def git_revision() -> Dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    try:
        return {"sha": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


@functools.lru_cache(maxsize=1)
def machine() -> Dict[str, Any]:
    import psutil

    try:
        frequency = psutil.cpu_freq()
    except (OSError, NotImplementedError):  # absent on some virtual machines
        frequency = None
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "cpu_max_mhz": frequency.max if frequency and frequency.max else None,
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
n = 2048
a = np.random.default_rng(0).random((n, n), dtype=np.float32)
b = a.copy()
a @ b
times = []
for _ in range(5):
    start = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - start)
print(json.dumps({"gflops_per_sec": 2 * n**3 / min(times) / 1e9}))
"""


@functools.lru_cache(maxsize=8)
def cpu_matmul_peak(threads: int) -> Dict[str, Any]:
    """float32 matrix-multiply speed of this CPU with ``threads`` threads, measured.

    The reference for "fraction of peak" on CPU: numpy's BLAS, 2048x2048, best of 5,
    in a fresh process with the thread variables a worker gets.
    """
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
        "available": True,
        "gflops_per_sec": measured["gflops_per_sec"],
        "threads": threads,
        "method": "numpy float32 2048x2048 matmul, best of 5, fresh process",
    }


@functools.lru_cache(maxsize=1)
def kbench_info() -> Dict[str, Any]:
    return {"version": kbench.__version__, "git": git_revision()}
