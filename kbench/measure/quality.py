"""Whether a measured window can be trusted: what else the machine was doing meanwhile,
read from the sampler's series over the window:

- **busy**: CPU of processes other than the worker's tree (the machine's load as cores
  less the tree's), averaged over the samples inside the window and the first after it.
  What counts is what did not fit in the cores the run left free: ``max(0, others -
  (machine cores - cores given)) / cores given``, flagged above ``BUSY_THRESHOLD``
  (``--busy-threshold``). The parent's sampler thread counts as other (about 1% of a core).
- **slow clock**: the mean CPU frequency below ``CLOCK_FRACTION`` of psutil's maximum
  (all-core turbo sits below the single-core maximum: only a deep drop is flagged).
- **throttled**: NVML clock event reasons of a thermal or power kind (``THROTTLE_BITS``).
- **on battery**: ``power_plugged`` was 0 in any sample.
- **stalled** (a warm window's steps, :func:`stall_flag`): one step, counted from the end
  of the step before, took ``STALL_FACTOR`` times the window's median, and more than that
  median by ``STALL_SHARE`` of the window's time and ``STALL_MIN_S`` (a worker stopped
  and continued, or swapped out).
- **shared GPU**: other compute processes NVML lists on the worker's GPUs (per GPU the
  most in any sample, added), whatever they do; unknown, with the reason, where NVML
  listed none of the worker's PIDs (in a container the worker would count as other).

Each figure is ``None`` where its series is missing: unknown, never fine. Before a run,
:func:`preflight` samples the machine's CPU load for a second and warns if it is busy
(``--wait-quiet S`` waits; ``KBENCH_SKIP_PREFLIGHT=1`` skips it, as the tests do).
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil

from kbench.measure import sysinfo

log = logging.getLogger(__name__)

BUSY_THRESHOLD = 0.25  # share of the given cores used by other processes
CLOCK_FRACTION = 0.6  # mean CPU frequency below this share of the maximum is flagged
# NVML clock event reasons that mean the clocks were held down (nvml.h names)
THROTTLE_BITS: Dict[int, str] = {
    0x4: "software power cap", 0x8: "hardware slowdown", 0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown", 0x80: "power brake",
}  # fmt: skip
THROTTLE_SERIES = re.compile(r"^(gpu\d+)_throttle_reasons$")
NEIGHBOUR_SERIES = re.compile(r"^gpu(\d+)_other_processes$")
GPU_NEIGHBOURS = 1  # other compute processes on the worker's GPUs that flag a run
STALL_FACTOR = 5.0  # a step this many times the window's median step, over its median by
STALL_SHARE = 0.4  # more than this share of the window's time
STALL_MIN_S = 0.5  # and this long (no time slice or collector pause): the worker stood still


@dataclass(frozen=True)
class Quality:
    """What else went on during one window, and the flags it earned (short reasons)."""

    window: str
    samples: int  # sampler readings inside the window
    cores_given: int
    machine_cores: int
    busy_threshold: float
    other_cores: Optional[float] = None  # mean CPU of other processes, in cores
    other_share: Optional[float] = None  # of the cores given, beyond those left free
    cpu_clock_fraction: Optional[float] = None  # mean frequency / maximum
    cpu_freq_max_mhz: Optional[float] = None
    gpu_throttled: Dict[str, List[str]] = field(default_factory=dict)  # gpuN -> reasons
    on_battery: Optional[bool] = None
    # other compute processes on the worker's GPUs (most seen in a sample, per GPU, added)
    gpu_other_processes: Optional[int] = None
    gpu_other_memory_bytes: Optional[int] = None  # None: none listed, or NVML did not know
    gpu_neighbours: Dict[str, Dict[str, Any]] = field(default_factory=dict)  # gpuN -> figures
    gpu_neighbours_reason: Optional[str] = None  # why the figures are unknown
    flags: List[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _in_window(series: Dict[str, List[Any]], name: str, start: float, end: float) -> List[float]:
    times = series.get("t") or []
    values = series.get(name) or []
    return [float(v) for t, v in zip(times, values) if start <= t <= end and v is not None]


def other_cores(
    series: Dict[str, List[Any]], start: float, end: float, machine_cores: int
) -> Tuple[Optional[float], int]:
    """Mean CPU of everything but the worker's tree over [start, end], in cores, and the
    samples it rests on (inside, and the first after: a reading covers the time before it)."""
    times = series.get("t") or []
    after = next((i for i, t in enumerate(times) if t > end), None)
    picked = [i for i, t in enumerate(times) if start <= t <= end] + (
        [after] if after is not None else []
    )
    system = series.get("system_cpu_percent") or []
    worker = series.get("process_cpu_percent") or []
    others = [
        max(0.0, system[i] * machine_cores / 100.0 - worker[i] / 100.0)
        for i in picked
        if i < min(len(system), len(worker)) and system[i] is not None and worker[i] is not None
    ]
    return (sum(others) / len(others) if others else None), len(others)


def assess(
    series: Dict[str, List[Any]], window: Optional[Sequence[Optional[float]]],
    threads: Optional[int] = None, busy_threshold: float = BUSY_THRESHOLD,
    machine_cores: Optional[int] = None, cpu_freq_max_mhz: Optional[float] = None,
    window_name: str = "measured", worker_gpus: Optional[Dict[str, Any]] = None,
) -> Optional[Quality]:  # fmt: skip
    """The quality of ``window`` (start, end) from ``series``; None without edges. The
    machine's figures default to this one's; ``worker_gpus``: the sampler's (None: all)."""
    if not window or window[0] is None or window[1] is None:
        return None
    if not 0 < busy_threshold <= 1:
        raise ValueError(
            f"busy_threshold: expected a share of the cores above 0 and at most 1 (0.25 "
            f"flags a run when others used a quarter of its cores); got {busy_threshold!r}"
        )
    start, end = float(window[0]), float(window[1])
    cores = machine_cores or os.cpu_count() or 1
    given = min(threads or cores, cores)
    if cpu_freq_max_mhz is None:
        cpu_freq_max_mhz = sysinfo.max_cpu_mhz()
    others, samples = other_cores(series, start, end, cores)
    flags: List[str] = []
    share = None
    if others is not None:
        share = max(0.0, others - (cores - given)) / given
        if share > busy_threshold:
            flags.append(f"busy: {share:.0%} of the cores used by other processes")
    clock = None
    freqs = _in_window(series, "cpu_freq_mhz", start, end)
    if freqs and cpu_freq_max_mhz:
        clock = sum(freqs) / len(freqs) / cpu_freq_max_mhz
        if clock < CLOCK_FRACTION:
            flags.append(f"slow clock: CPU at {clock:.0%} of its {cpu_freq_max_mhz:,.0f} MHz")
    throttled = gpu_throttled(series, start, end)
    flags += [f"throttled: {gpu} {', '.join(reasons)}" for gpu, reasons in throttled.items()]
    plugged = _in_window(series, "power_plugged", start, end)
    battery = (min(plugged) == 0) if plugged else None
    if battery:
        flags.append("on battery")
    neighbours = gpu_neighbours(series, start, end, worker_gpus)
    if neighbours.count is not None and neighbours.count >= GPU_NEIGHBOURS:
        flags.append(neighbours.flag())
    return Quality(
        window=window_name, samples=samples, cores_given=given, machine_cores=cores,
        busy_threshold=busy_threshold, other_cores=others, other_share=share,
        cpu_clock_fraction=clock, cpu_freq_max_mhz=cpu_freq_max_mhz or None,
        gpu_throttled=throttled, on_battery=battery, gpu_other_processes=neighbours.count,
        gpu_other_memory_bytes=neighbours.memory_bytes, gpu_neighbours=neighbours.per_gpu,
        gpu_neighbours_reason=neighbours.reason, flags=flags,
    )  # fmt: skip


def stall_flag(step_ends: Sequence[float]) -> Optional[str]:
    """``stalled: ...`` where a window stood still (module docstring); ``step_ends``: each
    step's end, the untimed first step's included, so the time between steps counts."""
    spans = [b - a for a, b in zip(step_ends, step_ends[1:])]
    if len(spans) < 3:
        return None
    median, longest, total = statistics.median(spans), max(spans), sum(spans)
    lost = longest - median
    if longest <= STALL_FACTOR * median or lost <= max(STALL_SHARE * total, STALL_MIN_S):
        return None
    return (
        f"stalled: one step took {longest:.2f} s against a median of {median * 1000:.1f} ms, "
        f"{lost / total:.0%} of the window (the worker stood still)"
    )


def gpu_throttled(series: Dict[str, List[Any]], start: float, end: float) -> Dict[str, List[str]]:
    throttled = {}
    for name in sorted(series):
        match = THROTTLE_SERIES.match(name)
        seen = 0
        for value in _in_window(series, name, start, end) if match else ():
            seen |= int(value)
        reasons = [text for bit, text in THROTTLE_BITS.items() if seen & bit]
        if reasons:
            throttled[match.group(1)] = reasons
    return throttled


@dataclass(frozen=True)
class Neighbours:
    """Other compute processes on the worker's GPUs during a window."""

    count: Optional[int] = None
    memory_bytes: Optional[int] = None
    per_gpu: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    reason: Optional[str] = None

    def flag(self) -> str:
        known = self.memory_bytes is not None
        memory = f"using {self.memory_bytes / 2**20:,.0f} MiB" if known else "memory unknown"
        plural = "process" if self.count == 1 else "processes"
        return f"shared GPU: {self.count} other {plural} {memory}"


def gpu_neighbours(
    series: Dict[str, List[Any]], start: float, end: float, worker_gpus: Optional[Dict] = None
) -> Neighbours:
    """The other processes on the worker's GPUs in [start, end] (see the module docstring)."""
    listed = {int(m.group(1)) for m in map(NEIGHBOUR_SERIES.match, series) if m}
    if not listed:
        return Neighbours()  # no NVML process listing: nothing known, nothing to say
    if worker_gpus is not None and worker_gpus.get("method") != "nvml_pids":
        return Neighbours(
            reason="NVML listed none of the worker's PIDs (a container's PID namespace, or "
            "the worker used no GPU), so its processes cannot be told from others'"
        )
    indices = sorted(listed if worker_gpus is None else set(worker_gpus.get("indices") or ()))
    per_gpu: Dict[str, Dict[str, Any]] = {}
    for index in indices:
        counts = _in_window(series, f"gpu{index}_other_processes", start, end)
        if not counts:
            continue
        memory = _in_window(series, f"gpu{index}_other_memory_bytes", start, end)
        per_gpu[f"gpu{index}"] = {
            "processes": int(max(counts)), "memory_bytes": int(max(memory)) if memory else None,
        }  # fmt: skip
    if not per_gpu:
        return Neighbours(reason="no NVML process listing inside the window")
    count = sum(gpu["processes"] for gpu in per_gpu.values())
    known = [gpu["memory_bytes"] for gpu in per_gpu.values() if gpu["memory_bytes"] is not None]
    return Neighbours(count, sum(known) if known else None, per_gpu)


PREFLIGHT_SKIP_ENV = "KBENCH_SKIP_PREFLIGHT"  # "1": no pre-flight sample (the tests set it)


@dataclass(frozen=True)
class Preflight:
    """The machine's CPU load before a run started, and how long kbench waited."""

    load: float  # share of all cores busy, 0..1, in the last one-second sample
    busy: bool
    waited_s: float
    samples: int


def preflight(
    threshold: float = BUSY_THRESHOLD, wait_quiet_s: float = 0.0,
    sample: Callable[[], float] = lambda: psutil.cpu_percent(interval=1.0),
    clock: Callable[[], float] = time.monotonic,
) -> Preflight:  # fmt: skip
    """Sample the CPU load for a second, again while busy and ``wait_quiet_s`` allows."""
    began = clock()
    load = sample() / 100.0
    samples = 1
    while load > threshold and clock() - began < wait_quiet_s:
        if samples == 1:
            log.info("the machine is busy (%.0f%% of the CPU in use); waiting up to %.0f s for "
                     "it to quieten (--wait-quiet)", load * 100, wait_quiet_s)  # fmt: skip
        load = sample() / 100.0
        samples += 1
    waited, busy = clock() - began, load > threshold
    if busy:
        log.warning(
            "the machine is already busy before the run: %.0f%% of the CPU in use by other "
            "processes%s; the numbers will be flagged if it stays so (close other work, or "
            "pass --wait-quiet SECONDS to wait for it to quieten)",
            load * 100, f" after waiting {waited:.0f} s" if wait_quiet_s else "",
        )  # fmt: skip
    elif samples > 1:
        log.info("the machine quietened after %.0f s (%.0f%% CPU in use)", waited, load * 100)
    return Preflight(load=load, busy=busy, waited_s=waited, samples=samples)


def preflight_unless_skipped(threshold: float, wait_quiet_s: float) -> Optional[Preflight]:
    if os.environ.get(PREFLIGHT_SKIP_ENV) == "1":
        return None
    return preflight(threshold, wait_quiet_s)
