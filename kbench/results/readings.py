"""Typed readings of one result document's metrics, read once for every table, plot,
verdict, stop rule and export (:mod:`kbench.results.analysis` compares them across runs).

- **Peak memory** (:func:`memory_peaks`), per kind (``process_nvml``: what NVML charges
  the worker on a GPU; ``framework_peak``: the allocator's own; ``device_used``: the whole
  device; ``process_peak_rss``: the worker's host memory) and per device: its largest
  reading. Tables show the **largest per-GPU peak** and, over several GPUs, the **sum**
  beside it, labelled. ``bytes: None`` is unknown, with its reason: never 0.
- **Utilization** (:func:`utilization`): NVML's share of the measured window in which a
  kernel ran, per GPU and their mean; or the worker's CPU use (% of one core).
- **Throughput** (:func:`round_throughputs`): img/s by round, what per-round ratios divide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from kbench.results.comparison import is_comparison, round_figures
from kbench.results.result import RunResult

# The memory kinds a result records, in order of preference for a table of one kind.
MEMORY_KINDS = ("process_nvml", "framework_peak", "device_used", "process_peak_rss")
GPU_KERNEL_TIME = re.compile(r"^gpu(\d+)_kernel_time_percent$")
UTILIZATION_KINDS = ("gpu", "cpu")  # in order of preference


@dataclass(frozen=True)
class MemoryPeak:
    kind: str
    per_device: Tuple[Tuple[str, int], ...]  # (device, bytes); device "" where unnamed

    @property
    def largest(self) -> int:
        """The largest per-device peak: what one GPU (or the host) had to hold."""
        return max(value for _, value in self.per_device)

    @property
    def devices(self) -> int:
        return len(self.per_device)

    @property
    def total(self) -> Optional[int]:
        """The sum of the per-device peaks where there are several, else None."""
        return sum(value for _, value in self.per_device) if self.devices > 1 else None


def memory_peaks(result: RunResult) -> Dict[str, MemoryPeak]:
    found: Dict[str, Dict[str, int]] = {}
    for reading in result.metrics.get("memory") or []:
        value = reading.get("bytes")
        if value is None or not reading.get("kind"):
            continue
        devices = found.setdefault(reading["kind"], {})
        device = str(reading.get("device") or "")
        devices[device] = max(devices.get(device, int(value)), int(value))
    return {kind: MemoryPeak(kind, tuple(devices.items())) for kind, devices in found.items()}


def memory_peak(result: RunResult, kind: str) -> Optional[MemoryPeak]:
    return memory_peaks(result).get(kind)


def unknown_memory(result: RunResult) -> List[str]:
    """``kind: reason`` of each reading recorded as unknown (``bytes: None``): MXNet has no
    framework peak, NVML may not know a process's memory."""
    return [
        f"{m.get('kind')}: {m.get('reason') or 'not measured'}"
        for m in result.metrics.get("memory") or []
        if m.get("bytes") is None
    ]


@dataclass(frozen=True)
class Utilization:
    """``gpu`` (NVML's share of time a kernel ran) or ``cpu`` (% of one core), measured window."""

    kind: str
    percent: float  # the mean over per_device
    per_device: Tuple[Tuple[str, float], ...]  # (gpuN, percent), or (("process", percent),)

    @property
    def devices(self) -> int:
        return len(self.per_device)


def utilization(result: RunResult, kind: str) -> Optional[Utilization]:
    measured = ((result.sampler or {}).get("summary") or {}).get("measured") or {}
    found: List[Tuple[str, float]] = []
    for name, stats in measured.items():
        mean = (stats or {}).get("mean")
        if not isinstance(mean, (int, float)) or isinstance(mean, bool):
            continue
        gpu = GPU_KERNEL_TIME.match(name)
        if kind == "gpu" and gpu:
            found.append((f"gpu{gpu.group(1)}", float(mean)))
        elif kind == "cpu" and name == "process_cpu_percent":
            found.append(("process", float(mean)))
    if not found:
        return None
    found.sort(key=lambda item: int(item[0][3:]) if item[0].startswith("gpu") else 0)
    return Utilization(kind, sum(p for _, p in found) / len(found), tuple(found))


def round_of(result: RunResult) -> int:
    return int(result.config.get("repeat", 0) or 0)


def round_throughputs(result: RunResult, strict: bool = False) -> Dict[int, float]:
    """``{round: images_per_sec}``: a finished fresh run's (its round its ``repeat``), a
    warm comparison's counted windows' (also where it failed later); {} for any other or
    a superseded one. ``strict``: none where every round was dropped (its flagged figures
    are for the tables; a stop rule or a choice waits for quiet rounds)."""
    if result.superseded:
        return {}
    if is_comparison(result):
        return round_figures(result.metrics, strict)
    rate = result.metrics.get("images_per_sec")
    if not result.ok or not isinstance(rate, (int, float)):
        return {}
    return {round_of(result): float(rate)}


def epoch_time(result: RunResult) -> Optional[float]:
    """The mean wall time of a result's epochs (s), or None."""
    values = [v for v in result.metrics.get("epoch_time_s") or [] if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def no_gpu_reason(results: Sequence[RunResult]) -> Optional[str]:
    """Why no run had a GPU (the machine's, or the framework's under --device cpu), or None."""
    reasons = []
    for r in results:
        gpu = r.environment.get("machine", {}).get("gpu", {})
        options = (r.environment.get("framework") or {}).get("memory_options") or {}
        if not (gpu.get("available") and gpu.get("devices")):
            reasons.append(gpu.get("reason") or "the machine has no GPU")
        elif options.get("gpus_visible") == 0:
            reasons.append("the machine has a GPU, but the worker saw none (--device cpu)")
        else:
            return None
    return reasons[0] if reasons else "no runs"
