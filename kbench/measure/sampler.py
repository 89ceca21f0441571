"""Samples a worker process from the parent while it runs.

A thread reads, every ``interval_s`` (200 ms by default), the worker's CPU and
memory through psutil (the worker and its children), the machine's CPU load,
frequency and battery, and, where NVML answers, each GPU: the fraction of time a
kernel ran, the fraction of time device memory was read or written, device memory
used and total, the worker's own device memory, power, the energy counter, SM clock,
temperature and throttle reasons. RAPL energy is read where the kernel exposes it.
On an NVIDIA Jetson the GPU is read from sysfs instead (:mod:`kbench.measure.jetson`);
on macOS from ``powermetrics`` when kbench runs as root (:mod:`kbench.measure.powermetrics`).
``KBENCH_SYSTEM_ROOT`` moves where ``/sys``, ``/proc`` and ``/etc`` are read (tests point
it at a fake Jetson tree).

A source that cannot be read (no GPU, no NVML, no RAPL) is recorded as unavailable with
the reason; one that fails mid-run is marked failed with the error and not read again:
neither fails the run. How each GPU is read is in :mod:`kbench.measure.nvml`.

The summary (:func:`scoped_summary`) covers only the GPUs the worker used: those on which
NVML listed its PIDs, else those its ``CUDA_VISIBLE_DEVICES`` names (by PCI bus id;
``sources.gpu.worker_gpus`` says which and how). Energy over a window is a counter's
increase interpolated to the window's edges, or, without a counter, the sampled power
integrated over the window.

The series is columnar: ``t`` (wall clock, seconds since the epoch, comparable with the
worker's stage markers) and one list per metric aligned with it, ``None`` where a reading
failed. Units are in the names; :data:`LABELS` says what each one is.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil

from kbench.measure import jetson, processes, sysinfo
from kbench.measure.nvml import NvmlSource, SourceUnavailable, error_text, visible_devices_of
from kbench.measure.powermetrics import PowermetricsSource

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
    "memory_used_bytes": "device memory used by every process on the GPU (NVML; without "
    "driver-reserved memory where the v2 query exists, see sources.gpu.devices)",
    "memory_total_bytes": "device memory in total (NVML)",
    "process_memory_bytes": "device memory of the worker and its children (NVML per process)",
    "other_processes": "compute processes on the GPU other than the worker's (NVML)",
    "other_memory_bytes": "device memory of the GPU's other compute processes (NVML)",
    "power_w": "board power draw (NVML; a Jetson's GPU rail; powermetrics' GPU energy "
    "over its interval on macOS)",
    "energy_j": "energy counter since the driver loaded (NVML), joules",
    "sm_clock_mhz": "SM clock (NVML)",
    "temperature_c": "GPU core temperature (NVML)",
    "throttle_reasons": "bit mask of clock event (throttle) reasons (NVML; the event-reasons "
    "call where the driver has it)",
    "load_percent": "GPU load of a Jetson (devfreq): percent of the governor's window the GPU "
    "was busy (not NVML's kernel time)",
    "freq_mhz": "GPU frequency of a Jetson (devfreq cur_freq)",
    "shared_memory_bytes": "memory a Jetson's GPU driver (nvmap) allocated from the memory it "
    "shares with the CPU (NvMapMemUsed), every process",
    "active_percent": "Apple GPU active residency (powermetrics): percent of the interval "
    "the GPU was not idle",
    "board_power_w": "a Jetson's board power: its INA3221 input rail, or the sum of its rails",
    "board_energy_j": "a Jetson's board energy: board_power_w integrated over the samples",
    "rail_power_w": "one INA3221 power rail of a Jetson (rail_<name>_power_w)",
}
COUNTERS = ("energy_j",)  # summarized by their increase over a window
TREE_REFRESH_S = 1.0


def process_tree(root: psutil.Process) -> List[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def pid_tree(pid: int) -> List[psutil.Process]:
    """``pid`` and its children; empty once it is gone."""
    try:
        return process_tree(psutil.Process(pid))
    except psutil.Error:
        return []


def tree_usage(
    tree: List[psutil.Process], known: Dict[int, psutil.Process]
) -> Optional[Tuple[float, int]]:
    """CPU percent (since the last call) and RSS summed over a process tree; None once
    none of it lives. ``known`` keeps each pid's Process between calls, as cpu_percent needs."""
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


ROOT_VARIABLE = "KBENCH_SYSTEM_ROOT"  # where /sys, /proc and /etc are read (tests: a fake tree)


def gpu_source(nvml: Any = None, interval_s: float = 0.2) -> Any:
    """This machine's ``gpu`` source: a Jetson's sysfs, macOS powermetrics, else NVML."""
    root = Path(os.environ.get(ROOT_VARIABLE) or "/")
    if jetson.is_jetson(root):
        return jetson.JetsonSource(root)
    if processes.SYSTEM == "Darwin":
        return PowermetricsSource(interval_s)
    return NvmlSource(nvml)


def optional_sources(
    nvml: Any = None, interval_s: float = 0.2
) -> Tuple[list, Dict[str, Dict[str, Any]]]:
    """The GPU and RAPL sources this machine has, and why the others are absent."""
    sources, unavailable = [], {}
    for name, make in (("gpu", lambda: gpu_source(nvml, interval_s)), ("rapl", RaplSource)):
        try:
            sources.append(make())
        except SourceUnavailable as err:
            unavailable[name] = {"available": False, "reason": str(err)}
            log.debug("sampler: %s unavailable: %s", name, err)
        except Exception as err:  # a source that breaks while opening is no source
            unavailable[name] = {"available": False, "reason": f"failed to open: {error_text(err)}"}
            log.warning("sampler: %s could not be opened: %s", name, err)
    return sources, unavailable


class CpuSource:
    """psutil readings of the machine: CPU load and frequency, battery."""

    name = "cpu"

    def __init__(self) -> None:
        psutil.cpu_percent(None)  # the first call only starts the interval

    def read(self, tree: List[psutil.Process]) -> Dict[str, Any]:
        reading: Dict[str, Any] = {"system_cpu_percent": psutil.cpu_percent(None)}
        frequency = sysinfo.cpu_frequency()
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
    # several processes sampled (a data-parallel run): the pid each series prefix names
    processes: Optional[Dict[str, int]] = None

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        names = list(self.processes or {})
        data["labels"] = {name: label_of(name, names) for name in self.series if name != "t"}
        if self.processes is None:
            del data["processes"]
        else:
            data["note"] = (
                "one column per process of the run (<process>_...), their sums under the "
                "single-process names; processes: the pid each prefix names"
            )
        return data


def label_of(name: str, prefixes: Sequence[str] = ()) -> str:
    """What series ``name`` holds, in words; a process's own series says whose."""
    for prefix in prefixes:
        if name.startswith(prefix + "_"):
            rest = name[len(prefix) + 1 :]
            metric = rest.split("_", 1)[1] if rest.startswith("gpu") else rest
            return f"{prefix}: " + PROCESS_LABELS.get(metric, LABELS.get(metric, ""))
    if prefixes and name in ("process_cpu_percent", "process_rss_bytes"):
        return "sum over the run's processes on this host: " + LABELS[name]
    base = name.split("_", 1)[1] if GPU_SERIES.match(name) else name
    return LABELS.get(base) or (LABELS["rail_power_w"] if name.startswith("rail_") else "")


PROCESS_LABELS = {  # a series of one of several processes
    "process_cpu_percent": "CPU time of this process and its children, percent of one core",
    "process_rss_bytes": "resident memory of this process and its children (psutil)",
    "process_memory_bytes": "device memory of this process and its children (NVML)",
}


class Sampler:
    """``with Sampler(pid) as s: ...``; then ``s.result(windows)``. It samples the worker
    ``pid`` with its children, or, ``per_process`` (a data-parallel run), every process
    :meth:`add` names as it appears: then each one's CPU and RSS are series of their own
    (``worker0_process_cpu_percent``), their sums under the single-process names, and each
    one's device memory ``<name>_gpu<i>_process_memory_bytes`` where NVML knows it. A
    source whose ``read`` raises is marked failed from then on; the others go on. The
    block's start and end are ``started_at`` and ``ended_at``: ``result()`` without
    windows summarizes it as ``run`` (so do ``series`` and ``summary``)."""

    def __init__(
        self, pid: Optional[int] = None, interval_s: float = 0.2, nvml: Any = None,
        clock: Callable[[], float] = time.time, companions: Sequence[int] = (),
        per_process: bool = False,
    ) -> None:  # fmt: skip
        """``companions``: PIDs of the same measurement's processes idle meanwhile (the other
        warm workers); the GPU source counts them and their children apart from others."""
        self.interval_s = interval_s
        self.clock = clock
        self.per_process = per_process
        self._lock = threading.Lock()
        self._roots: Dict[str, psutil.Process] = {}
        self.pids: Dict[str, int] = {}
        self.visible: Dict[str, Dict[str, Any]] = {}  # name -> its CUDA_VISIBLE_DEVICES
        if pid is not None:
            self._add("worker", psutil.Process(pid))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kbench-sampler", daemon=True)
        self._rows: List[Dict[str, Any]] = []
        self._trees: Dict[str, List[psutil.Process]] = {}
        self._tree_at: Dict[str, float] = {}
        self._known: Dict[int, psutil.Process] = {}
        optional, self.unavailable = optional_sources(nvml, interval_s)
        self.sources: list = [CpuSource(), *optional]
        self.failed: Dict[str, str] = {}
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        if companions:  # (process_tree of one that already ended: none)
            companion_pids = {p.pid for c in companions for p in pid_tree(c)}
            for source in self.sources:
                if isinstance(source, NvmlSource):
                    source.companion_pids = companion_pids

    def add(self, name: str, pid: int) -> None:
        """Sample ``pid`` and its children as ``name`` from now on (one gone: not added)."""
        try:
            self._add(name, psutil.Process(pid))
        except psutil.Error as err:
            log.debug("sampler: %s (pid %d) not added: %s", name, pid, err)

    def _add(self, name: str, process: psutil.Process) -> None:
        visible = visible_devices_of(process)
        with self._lock:
            self._roots[name] = process
            self.pids[name] = process.pid
            self.visible[name] = visible

    def __enter__(self) -> Sampler:
        """The first reading now where there is a process, then one every interval."""
        self.started_at = self.clock()
        if self._roots:
            self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()  # after the reading in progress, 5 s at most
        self._thread.join(timeout=5)
        for source in self.sources:
            source.close()
        self.ended_at = self.clock()

    def _loop(self) -> None:
        """A reading every interval. One that raises is skipped (sampling never ends the
        run): the first error a warning, the rest debug, so one always failing is seen once."""
        warned = False
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as err:  # a flaky reading must never end the run
                log.log(logging.DEBUG if warned else logging.WARNING, "sampler: %s", err)
                warned = True

    def _tree(self, name: str) -> List[psutil.Process]:
        """A process and its children, rescanned at most every TREE_REFRESH_S (finding
        children reads every process on the machine: most of a sample's cost)."""
        now = time.monotonic()
        if now - self._tree_at.get(name, float("-inf")) >= TREE_REFRESH_S:
            self._trees[name] = process_tree(self._roots[name])
            self._tree_at[name] = now
        return self._trees[name]

    def _sample(self) -> None:
        with self._lock:
            names = list(self._roots)
        for name in names:  # read during the worker's exec: read again
            if not self.visible[name].get("known"):
                found = visible_devices_of(self._roots[name])
                with self._lock:
                    self.visible[name] = found
        trees = {name: self._tree(name) for name in names}
        row: Dict[str, Any] = {"t": self.clock()}
        row.update(self._usage(trees))
        everyone = [p for tree in trees.values() for p in tree]
        for source in [s for s in self.sources if s.name not in self.failed]:
            try:
                row.update(source.read(everyone))
            except Exception as err:  # a broken source must never end the run
                self.failed[source.name] = error_text(err)
                log.warning("sampler: %s failed, not read again: %s", source.name, error_text(err))
        if self.per_process:
            for source in self.sources:
                if isinstance(source, NvmlSource) and source.name not in self.failed:
                    row.update(gpu_per_process(source, trees))
        self._rows.append(row)

    def _usage(self, trees: Dict[str, List[psutil.Process]]) -> Dict[str, Any]:
        """The sampled processes' CPU and RSS: each one's (``per_process``) and in all."""
        usage: Dict[str, Any] = {}
        total_cpu, total_rss, alive = 0.0, 0, False
        for name, tree in trees.items():
            found = tree_usage(tree, self._known)
            if found is None:
                continue
            if self.per_process:
                usage[f"{name}_process_cpu_percent"], usage[f"{name}_process_rss_bytes"] = found
            total_cpu, total_rss, alive = total_cpu + found[0], total_rss + found[1], True
        if alive:
            usage.update(process_cpu_percent=total_cpu, process_rss_bytes=total_rss)
        return usage

    def result(self, windows: Optional[Dict[str, Any]] = None) -> SamplerResult:
        """The series so far and their summary over ``windows`` (``{name: (start, end)}``;
        None: ``run``, the block so far), safe while sampling goes on."""
        if windows is None and self.started_at is not None:
            windows = {"run": (self.started_at, self.ended_at or self.clock())}
        rows = list(self._rows)
        with self._lock:
            visible = list(self.visible.values())
        names = sorted({key for row in rows for key in row} - {"t"})
        series = {"t": [row["t"] for row in rows]} | {n: [r.get(n) for r in rows] for n in names}
        sources = {source.name: source.describe() for source in self.sources}
        for name, error in self.failed.items():
            sources[name]["failed_error"] = error
        sources.update(self.unavailable)
        summary = scoped_summary(series, windows or {}, self.sources, visible, sources)
        return SamplerResult(
            interval_s=self.interval_s, sources=sources, series=series, summary=summary,
            processes=dict(self.pids) if self.per_process else None,
        )  # fmt: skip

    @property
    def series(self) -> Dict[str, Any]:
        return self.result().series

    @property
    def summary(self) -> Dict[str, Any]:
        return self.result().summary


def gpu_per_process(source: NvmlSource, trees: Dict[str, List[psutil.Process]]) -> Dict:
    """Each process's own device memory, from the source's last listing (unknown: absent)."""
    out = {}
    for gpu in source.gpus:
        if gpu.processes is None or gpu.failed:
            continue
        for name, tree in trees.items():
            pids = {p.pid for p in tree}
            mine = [used for pid, used in gpu.processes if pid in pids]
            if mine and all(used is not None for used in mine):
                out[f"{name}_gpu{gpu.index}_process_memory_bytes"] = sum(map(int, mine))
    return out


GPU_SERIES = re.compile(r"^gpu(\d+)_")


def scoped_summary(
    series: Dict[str, List[Any]], windows: Dict[str, Any], sources: list,
    visible: List[Dict[str, Any]], described: Dict[str, Dict[str, Any]],
) -> Dict[str, Dict[str, Dict[str, Any]]]:  # fmt: skip
    """:func:`summarize` over the non-GPU series and the worker's GPUs; a window without a
    GPU's worker memory or energy gets ``{"samples": 0, "reason": ...}`` (never 0)."""
    gpu = next((s for s in sources if isinstance(s, NvmlSource)), None)
    if gpu is None:
        return summarize(series, windows)
    scopes = [gpu.worker_gpus(v) for v in visible] or [gpu.worker_gpus({"known": False})]
    indices = sorted({i for scope in scopes for i in scope["indices"]})
    used = dict(scopes[0], indices=indices)
    if len(scopes) > 1:
        used["note"] = "; ".join(dict.fromkeys(s["note"] for s in scopes))
        used["method"] = "+".join(dict.fromkeys(s["method"] for s in scopes))
    described.setdefault("gpu", {})["worker_gpus"] = used
    kept = {
        name: values
        for name, values in series.items()
        if not GPU_SERIES.match(name) or int(GPU_SERIES.match(name).group(1)) in indices
    }
    summary = summarize(kept, windows)
    for stats in summary.values():
        for state in gpu.gpus:
            if state.index not in indices:
                continue
            prefix = f"gpu{state.index}_"
            if prefix + "process_memory_bytes" not in stats:
                reason = state.process_memory_reason() or "no reading inside this window"
                stats[prefix + "process_memory_bytes"] = {"samples": 0, "reason": reason}
            if prefix + "energy_j" not in stats and prefix + "power_w" not in stats:
                why = [
                    f"{metric}: {state.unsupported.get(metric) or state.errors.get(metric)}"
                    for metric in ("energy_j", "power_w")
                    if state.unsupported.get(metric) or state.errors.get(metric)
                ]
                stats[prefix + "energy_j"] = {
                    "samples": 0,
                    "reason": "neither an energy counter nor power readings in this window"
                    + (f" ({'; '.join(why)})" if why else "")
                    + (f"; the GPU failed: {state.failed}" if state.failed else ""),
                }
    return summary


def value_at(points: List[Tuple[float, float]], t: float) -> float:
    """The series at time ``t``, linear between samples, held beyond the first and last."""
    if t <= points[0][0]:
        return points[0][1]
    if t >= points[-1][0]:
        return points[-1][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return v1 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def _around(
    points: List[Tuple[float, float]], start: float, end: float
) -> List[Tuple[float, float]]:
    """The samples inside [start, end] and the nearest one on either side."""
    before = [p for p in points if p[0] < start][-1:]
    after = [p for p in points if p[0] > end][:1]
    return before + [p for p in points if start <= p[0] <= end] + after


def integral(points: List[Tuple[float, float]], start: float, end: float) -> float:
    """Trapezoid integral of the piecewise-linear series over [start, end]."""
    times = [start, *[t for t, _ in points if start < t < end], end]
    values = [value_at(points, t) for t in times]
    return sum((t1 - t0) * (v0 + v1) / 2 for t0, t1, v0, v1 in
               zip(times, times[1:], values, values[1:]))  # fmt: skip


def summarize(
    series: Dict[str, List[Any]], windows: Dict[str, Any]
) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """Mean and max of each series inside each window ``name -> (start, end)``. Counters
    (energy) get ``increase`` instead: the counter interpolated to the window's end minus
    it at its start, from the samples inside and the nearest one on either side. Power
    (``*power_w``) also gets ``integral_j``, the power integrated over the window the
    same way (the energy where a board has no counter). ``covered_fraction``: how much of
    the window lay between samples (beyond them the first or last reading is held)."""
    times = series.get("t", [])
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for window, bounds in windows.items():
        if not bounds or bounds[0] is None or bounds[1] is None:
            continue
        start, end = bounds
        inside = [i for i, t in enumerate(times) if start <= t <= end]
        stats: Dict[str, Dict[str, Any]] = {}
        for name, values in series.items():
            if name == "t":
                continue
            points = [(times[i], float(v)) for i, v in enumerate(values) if v is not None]
            picked = [values[i] for i in inside if values[i] is not None]
            near = _around(points, start, end)
            covered = 1.0
            if near and end > start:
                covered = (min(end, near[-1][0]) - max(start, near[0][0])) / (end - start)
            if name.endswith(COUNTERS):
                if len(near) < 2:
                    continue
                stats[name] = {
                    "increase": value_at(near, end) - value_at(near, start),
                    "samples": len(picked), "covered_fraction": max(0.0, min(1.0, covered)),
                }  # fmt: skip
                continue
            if not picked:
                continue
            stats[name] = {
                "mean": float(sum(picked) / len(picked)), "max": float(max(picked)),
                "samples": len(picked),
            }  # fmt: skip
            if name.endswith("power_w") and len(near) >= 2:
                stats[name]["integral_j"] = integral(near, start, end)
                stats[name]["covered_fraction"] = max(0.0, min(1.0, covered))
        out[window] = stats
    return out


def windows_from_markers(markers: Dict[str, Any], start: float, end: float) -> Dict[str, Any]:
    """The windows a result summarizes: whole run, warmup, measured."""
    return {
        "run": (start, end),
        "warmup": (markers.get("fit_start"), markers.get("warmup_end")),
        "measured": (markers.get("measured_start"), markers.get("measured_end")),
    }
