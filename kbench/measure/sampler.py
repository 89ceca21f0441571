"""Samples a worker process from the parent while it runs.

A thread reads, every ``interval_s`` (200 ms by default), the worker's CPU and
memory through psutil (the worker and its children), the machine's CPU load,
frequency and battery, and, where NVML answers, each GPU: the fraction of time a
kernel ran, the fraction of time device memory was read or written, device memory
used and total, the worker's own device memory, power, the energy counter, SM clock,
temperature and throttle reasons. RAPL energy is read where the kernel exposes it.

A source that cannot be read (no GPU, no NVML, no RAPL) is recorded as unavailable
with the reason; it never fails the run. The series is columnar: ``t`` (wall clock,
seconds since the epoch, comparable with the worker's stage markers) and one list
per metric, aligned with ``t``, ``None`` where a reading failed. Units are in the
names; :data:`LABELS` says what each one is.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import psutil

log = logging.getLogger(__name__)

# What each series holds; per-GPU series are named gpu<index>_<name>.
LABELS: Dict[str, str] = {
    "process_cpu_percent": "CPU time of the worker and its children, percent of one core",
    "process_rss_bytes": "resident memory of the worker and its children (psutil)",
    "system_cpu_percent": "CPU load of the whole machine, percent of all cores",
    "cpu_freq_mhz": "current CPU frequency (psutil.cpu_freq)",
    "battery_percent": "battery charge",
    "power_plugged": "1 on AC power, 0 on battery",
    "rapl_energy_j": "CPU package energy counter (Intel RAPL), joules",
    "kernel_time_percent": "GPU utilization as NVML defines it: percent of the sample "
    "period during which a kernel ran (not SM occupancy)",
    "memory_busy_percent": "percent of the sample period during which device memory was "
    "read or written (NVML 'memory utilization'; not memory used)",
    "memory_used_bytes": "device memory used by every process on the GPU (NVML)",
    "memory_total_bytes": "device memory in total (NVML)",
    "process_memory_bytes": "device memory of the worker and its children (NVML per process)",
    "power_w": "board power draw (NVML)",
    "energy_j": "energy counter since the driver loaded (NVML), joules",
    "sm_clock_mhz": "SM clock (NVML)",
    "temperature_c": "GPU core temperature (NVML)",
    "throttle_reasons": "bit mask of clock throttle reasons (NVML)",
}
COUNTERS = ("energy_j",)  # summarized by their increase over a window
TREE_REFRESH_S = 1.0


class SourceUnavailable(RuntimeError):
    """A source cannot be read on this machine; the message says why."""


def process_tree(root: psutil.Process) -> List[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def tree_usage(
    tree: List[psutil.Process], known: Dict[int, psutil.Process]
) -> Optional[Tuple[float, int]]:
    """CPU percent (since the previous call, per process) and RSS summed over a process
    tree; None once none of it is alive, which is nothing to read, not zero. ``known``
    keeps each pid's Process object between calls, as cpu_percent needs."""
    cpu, rss, alive = 0.0, 0, 0
    for proc in tree:
        process = known.setdefault(proc.pid, proc)
        try:
            cpu += process.cpu_percent(None)  # since the last call; 0.0 on the first
            rss += process.memory_info().rss
            alive += 1
        except psutil.Error:
            continue
    return (cpu, rss) if alive else None


def optional_sources(nvml: Any = None) -> Tuple[list, Dict[str, Dict[str, Any]]]:
    """The GPU (NVML) and RAPL sources this machine has, and why the others are absent."""
    sources, unavailable = [], {}
    for name, make in (("gpu", lambda: NvmlSource(nvml)), ("rapl", RaplSource)):
        try:
            sources.append(make())
        except SourceUnavailable as err:
            unavailable[name] = {"available": False, "reason": str(err)}
            log.debug("sampler: %s unavailable: %s", name, err)
    return sources, unavailable


class CpuSource:
    """psutil readings of the worker's process tree and the machine."""

    name = "cpu"

    def __init__(self) -> None:
        self._procs: Dict[int, psutil.Process] = {}
        psutil.cpu_percent(None)  # the first call only starts the interval

    def read(self, tree: List[psutil.Process]) -> Dict[str, Any]:
        usage = tree_usage(tree, self._procs)
        reading: Dict[str, Any] = {"system_cpu_percent": psutil.cpu_percent(None)}
        if usage:
            reading.update(process_cpu_percent=usage[0], process_rss_bytes=usage[1])
        try:
            frequency = psutil.cpu_freq()
        except (OSError, NotImplementedError):
            frequency = None
        if frequency:
            reading["cpu_freq_mhz"] = frequency.current
        battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
        if battery is not None:
            reading["battery_percent"] = battery.percent
            reading["power_plugged"] = (
                None if battery.power_plugged is None else int(battery.power_plugged)
            )
        return reading

    def describe(self) -> Dict[str, Any]:
        return {"available": True}

    def close(self) -> None:
        pass


class NvmlSource:
    """Every GPU NVML sees. ``nvml`` is the pynvml module, or a stand-in in tests."""

    name = "gpu"

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as err:
                raise SourceUnavailable("nvidia-ml-py (pynvml) is not installed") from err
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise SourceUnavailable(f"NVML: {type(err).__name__}: {err}") from err
        count = nvml.nvmlDeviceGetCount()
        if count == 0:
            nvml.nvmlShutdown()
            raise SourceUnavailable("NVML sees no GPU")
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.unsupported: Set[str] = set()
        self.devices = []
        for index, handle in enumerate(self.handles):
            name = nvml.nvmlDeviceGetName(handle)
            self.devices.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_bytes": int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                }
            )

    def _try(self, metric: str, read: Callable[[], Any]) -> Any:
        if metric in self.unsupported:
            return None
        try:
            return read()
        except self.nvml.NVMLError as err:
            if "NotSupported" in type(err).__name__ or "Not Supported" in str(err):
                self.unsupported.add(metric)
            return None

    def read(self, tree: List[psutil.Process]) -> Dict[str, Any]:
        nvml, pids = self.nvml, {p.pid for p in tree}
        reading: Dict[str, Any] = {}
        for index, handle in enumerate(self.handles):
            prefix = f"gpu{index}_"
            rates = self._try("utilization", lambda h=handle: nvml.nvmlDeviceGetUtilizationRates(h))
            if rates is not None:
                reading[prefix + "kernel_time_percent"] = rates.gpu
                reading[prefix + "memory_busy_percent"] = rates.memory
            memory = self._try("memory", lambda h=handle: nvml.nvmlDeviceGetMemoryInfo(h))
            if memory is not None:
                reading[prefix + "memory_used_bytes"] = int(memory.used)
                reading[prefix + "memory_total_bytes"] = int(memory.total)
            processes = self._try(
                "processes", lambda h=handle: nvml.nvmlDeviceGetComputeRunningProcesses(h)
            )
            if processes is not None:
                reading[prefix + "process_memory_bytes"] = sum(
                    int(p.usedGpuMemory or 0) for p in processes if p.pid in pids
                )
            scalars = (
                ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                ("energy_j", lambda h: nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0),
                ("sm_clock_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                (
                    "temperature_c",
                    lambda h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
                ),
                (
                    "throttle_reasons",
                    lambda h: int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
                ),
            )
            for metric, read in scalars:
                value = self._try(metric, lambda read=read, h=handle: read(h))
                if value is not None:
                    reading[prefix + metric] = value
        return reading

    def describe(self) -> Dict[str, Any]:
        return {
            "available": True,
            "devices": self.devices,
            "unsupported": sorted(self.unsupported),
        }

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


class RaplSource:
    """Intel RAPL package energy, where /sys/class/powercap exposes it readably."""

    name = "rapl"
    root = Path("/sys/class/powercap")

    def __init__(self) -> None:
        zones = sorted(self.root.glob("intel-rapl:[0-9]*")) if self.root.is_dir() else []
        zones = [z for z in zones if ":" not in z.name.split("intel-rapl:", 1)[1]]
        if not zones:
            raise SourceUnavailable(f"no RAPL package zones under {self.root}")
        try:
            self.ranges = [int((z / "max_energy_range_uj").read_text()) for z in zones]
            self.files = [z / "energy_uj" for z in zones]
            self.last = [int(f.read_text()) for f in self.files]
        except (OSError, ValueError) as err:
            raise SourceUnavailable(f"RAPL counters are not readable: {err}") from err
        self.total_uj = 0

    def read(self, tree: List[psutil.Process]) -> Dict[str, Any]:
        for i, path in enumerate(self.files):
            try:
                now = int(path.read_text())
            except (OSError, ValueError):
                return {}
            step = now - self.last[i]
            self.total_uj += step if step >= 0 else step + self.ranges[i]  # wrapped
            self.last[i] = now
        return {"rapl_energy_j": self.total_uj / 1e6}

    def describe(self) -> Dict[str, Any]:
        return {"available": True, "zones": [str(f.parent.name) for f in self.files]}

    def close(self) -> None:
        pass


@dataclass
class SamplerResult:
    interval_s: float
    sources: Dict[str, Dict[str, Any]]
    series: Dict[str, List[Any]] = field(default_factory=dict)
    summary: Dict[str, Dict[str, Dict[str, float]]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["labels"] = {
            name: LABELS.get(name.split("_", 1)[1] if name.startswith("gpu") else name, "")
            for name in self.series
            if name != "t"
        }
        return data


class Sampler:
    """``with Sampler(pid) as s: ...``; then ``s.result(windows)``."""

    def __init__(
        self,
        pid: int,
        interval_s: float = 0.2,
        nvml: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._root = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kbench-sampler", daemon=True)
        self._rows: List[Dict[str, Any]] = []
        self._tree_cache: List[psutil.Process] = []
        self._tree_at = float("-inf")
        optional, self.unavailable = optional_sources(nvml)
        self.sources: list = [CpuSource(), *optional]

    def __enter__(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for source in self.sources:
            source.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _tree(self) -> List[psutil.Process]:
        """The worker and its children, rescanned at most every TREE_REFRESH_S.

        Finding children reads every process on the machine (about 1 ms here, most of a
        sample's cost); a worker's children rarely change, so the list is reused.
        """
        now = time.monotonic()
        if now - self._tree_at >= TREE_REFRESH_S or not self._tree_cache:
            self._tree_cache = process_tree(self._root)
            self._tree_at = now
        return self._tree_cache

    def _sample(self) -> None:
        tree = self._tree()
        row: Dict[str, Any] = {"t": self.clock()}
        for source in self.sources:
            try:
                row.update(source.read(tree))
            except Exception as err:  # a flaky reading must never end the run
                log.debug("sampler: %s failed: %s", source.name, err)
        self._rows.append(row)

    def result(self, windows: Optional[Dict[str, Any]] = None) -> SamplerResult:
        names = sorted({key for row in self._rows for key in row} - {"t"})
        series = {"t": [row["t"] for row in self._rows]}
        for name in names:
            series[name] = [row.get(name) for row in self._rows]
        sources = {source.name: source.describe() for source in self.sources}
        sources.update(self.unavailable)
        return SamplerResult(
            interval_s=self.interval_s,
            sources=sources,
            series=series,
            summary=summarize(series, windows or {}),
        )


def summarize(
    series: Dict[str, List[Any]], windows: Dict[str, Any]
) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Mean and max of each series inside each window ``name -> (start, end)``.

    Counters (energy) get ``increase`` instead: last minus first reading in the window.
    """
    times = series.get("t", [])
    out: Dict[str, Dict[str, Dict[str, float]]] = {}
    for window, bounds in windows.items():
        if not bounds or bounds[0] is None or bounds[1] is None:
            continue
        start, end = bounds
        inside = [i for i, t in enumerate(times) if start <= t <= end]
        stats: Dict[str, Dict[str, float]] = {}
        for name, values in series.items():
            if name == "t":
                continue
            picked = [values[i] for i in inside if values[i] is not None]
            if not picked:
                continue
            if name.endswith(COUNTERS):
                stats[name] = {"increase": float(picked[-1] - picked[0]), "samples": len(picked)}
            else:
                stats[name] = {
                    "mean": float(sum(picked) / len(picked)),
                    "max": float(max(picked)),
                    "samples": len(picked),
                }
        out[window] = stats
    return out


def windows_from_markers(markers: Dict[str, Any], start: float, end: float) -> Dict[str, Any]:
    """The windows a result summarizes: whole run, warmup, measured."""
    return {
        "run": (start, end),
        "warmup": (markers.get("fit_start"), markers.get("warmup_end")),
        "measured": (markers.get("measured_start"), markers.get("measured_end")),
    }
