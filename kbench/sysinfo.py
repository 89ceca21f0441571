"""Facts about the machine and kbench itself, detected, never hard-coded (parent side)."""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Dict

import kbench

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info() -> Dict[str, Any]:
    """GPUs as NVML sees them, or why it cannot see any."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py (pynvml) is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return {"available": False, "reason": f"NVML: {type(err).__name__}: {err}"}
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            devices.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {
            "available": bool(devices),
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "devices": devices,
        }
    finally:
        pynvml.nvmlShutdown()


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


@functools.lru_cache(maxsize=1)
def kbench_info() -> Dict[str, Any]:
    return {"version": kbench.__version__, "git": git_revision()}
