"""Side-by-side numbers for backends that ran the same thing.

Results are grouped by everything in their config except the backend and the
repeat index (and, when they come from several machines, by machine too: each
backend on each machine is then its own column, ``tensorflow @ host``). Within a
group, each backend's throughput is the median over its repeats with the range;
its speed against the baseline backend is the median of the per-round ratios
(round r of backend B over round r of the baseline), so a machine that drifts
during the command cannot pick the winner. Whether that ratio differs from 1 beyond
the noise between rounds is an order-statistics interval
(:mod:`kbench.views.significance`). A run measured while the machine was busy,
throttled or on battery (``metrics.quality.flags``, :mod:`kbench.measure.quality`)
lends its flags to its row. Rows measured on different CPUs, or one framework's rows
on different CPU kernel libraries (TensorFlow on oneDNN and on Eigen, PyTorch with
and without oneDNN), say so (``setup_flags``): their ratio compares the machines and
kernels as much as the backends.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.results.result import RunResult
from kbench.results.store import host_of
from kbench.views.names import dataset_label, model_label
from kbench.views.significance import RatioInterval, median_interval

IGNORED_IN_GROUPING = ("backend", "repeat", "timeout_s", "sample_interval_s")
MODEL_KINDS = ("train", "inference", "exec")  # results that compare() tabulates
# Which memory reading a table shows, in order of preference: what NVML charges
# the worker on the GPU, the framework's own peak, the whole device, host RSS.
MEMORY_PREFERENCE = ("process_nvml", "framework_peak", "device_used", "process_peak_rss")
MEMORY_LABELS = {
    "process_nvml": "GPU memory of the worker process (NVML, peak sampled)",
    "framework_peak": "framework peak allocation (its own counter)",
    "device_used": "GPU memory used on the whole device (NVML, peak sampled)",
    "process_peak_rss": "peak resident host memory of the worker (RSS)",
}
UTILIZATION_LABELS = {
    "gpu": "GPU utilization: % of time a kernel ran (NVML), mean over the measured window",
    "cpu": "CPU use of the worker: % of one core, mean over the measured window",
}


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Optional[Spread]:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class BackendRow:
    backend: str
    runs: int
    statuses: Dict[str, int]  # status -> count
    images_per_sec: Optional[Spread]
    ratio: Optional[Spread]  # per-round images_per_sec / baseline's
    test_accuracy: Optional[Spread]
    epoch_time_s: Optional[Spread]
    first_step_s: Optional[Spread]
    latency_p50_ms: Optional[Spread]  # inference only
    utilization: Optional[Spread] = None  # percent, see utilization_kind
    utilization_kind: Optional[str] = None  # gpu or cpu (UTILIZATION_LABELS)
    memory_bytes: Optional[Spread] = None  # see memory_kind
    memory_kind: Optional[str] = None  # a MEMORY_PREFERENCE kind
    memory_reason: Optional[str] = None  # why there is no memory_kind common to every run
    ratio_interval: Optional[RatioInterval] = None  # on the median per-round ratio
    # why some of its runs' numbers may not be trusted (busy machine, throttling, battery)
    quality_flags: List[str] = field(default_factory=list)
    # the CPU or kernel library that sets it apart from rows it stands beside
    setup_flags: List[str] = field(default_factory=list)

    @property
    def all_ok(self) -> bool:
        return set(self.statuses) == {"ok"}


@dataclass(frozen=True)
class ComparisonGroup:
    model: str
    dataset: str
    batch_size: Optional[int]  # None: kbench exec, the script's own
    mode: str
    synthetic: bool
    baseline: str
    rows: List[BackendRow] = field(default_factory=list)
    settings: Dict[str, object] = field(default_factory=dict)  # the group's whole config

    @property
    def title(self) -> str:
        dataset = dataset_label(self.dataset)
        data = f"{dataset} (synthetic data)" if self.synthetic else dataset
        mode = ", inference" if self.mode == "inference" else ""
        if self.batch_size is None:  # kbench exec: data and batch are the script's
            return f"{model_label(self.model)} on {data} data and batch{mode}"
        return f"{model_label(self.model)} on {data}, batch {self.batch_size}{mode}"


def group_key(result: RunResult) -> Tuple:
    return tuple(
        sorted((k, repr(v)) for k, v in result.config.items() if k not in IGNORED_IN_GROUPING)
    )


def varying_settings(groups: Sequence[ComparisonGroup]) -> List[str]:
    """The config settings whose values differ between groups (what tells rows apart)."""
    keys: List[str] = []
    for group in groups:
        for key in group.settings:
            if key not in keys and key not in IGNORED_IN_GROUPING:
                keys.append(key)
    return [k for k in keys if len({repr(g.settings.get(k)) for g in groups}) > 1]


def column_of(results: Sequence[RunResult]) -> Callable[[RunResult], str]:
    """How each of ``results`` is named as a row: its backend, or ``backend @ host``
    when they come from several machines (stores merged with ``kbench results --merge``)."""
    several_hosts = len({host_of(r) for r in results}) > 1

    def column(r: RunResult) -> str:
        return f"{r.config['backend']} @ {host_of(r)}" if several_hosts else r.config["backend"]

    return column


def in_column(result: RunResult, column: str) -> bool:
    """Whether ``result`` belongs to the row ``column`` (``backend`` or ``backend @ host``)."""
    backend, _, host = column.partition(" @ ")
    return result.config["backend"] == backend and (not host or host_of(result) == host)


def row_named(rows: Sequence[str], name: str) -> Optional[str]:
    """The row ``name`` means: itself, or a backend's first row (``jax`` for ``jax @ a``)."""
    return next((row for row in rows if name in (row, row.split(" @ ")[0])), None)


def compare(
    results: Sequence[RunResult],
    baseline: Optional[str] = None,
    column: Optional[Callable[[RunResult], str]] = None,
) -> List[ComparisonGroup]:
    """One group per distinct config; ``baseline`` defaults to the first backend run.

    With results from several machines, each row is a backend on a machine
    (``jax @ host``), and ``baseline`` may name a backend (its first machine) or a row.
    ``column`` names the rows (default: :func:`column_of` ``results``); pass the one of
    a larger set to name rows alike across calls (a report compares group by group).
    """
    results = [r for r in results if r.kind in MODEL_KINDS]  # parity and ops have own tables
    # a kbench exec script that trained nothing has no throughput to compare
    results = [r for r in results if not (r.ok and r.metrics.get("images_per_sec") is None)]
    column = column or column_of(results)
    groups: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        groups.setdefault(group_key(result), []).append(result)
    out = []
    for members in groups.values():
        backends = list(dict.fromkeys(column(r) for r in members))
        base = row_named(backends, baseline or "") or backends[0]
        base_by_round = {
            r.config.get("repeat", 0): r.metrics["images_per_sec"]
            for r in members
            if column(r) == base and r.ok
        }
        setups = setup_flags({b: [r for r in members if column(r) == b and r.ok] for b in backends})
        rows = []
        for backend in backends:
            runs = [r for r in members if column(r) == backend]
            ok = [r for r in runs if r.ok]
            statuses: Dict[str, int] = {}
            for r in runs:
                statuses[r.status] = statuses.get(r.status, 0) + 1
            ratios = [
                r.metrics["images_per_sec"] / base_by_round[r.config.get("repeat", 0)]
                for r in ok
                if r.config.get("repeat", 0) in base_by_round
            ]

            def spread(values: List[Optional[float]]) -> Optional[Spread]:
                return Spread.of([v for v in values if v is not None])

            utilization_kind, utilization = _utilization(ok)
            memory_kind, memory, memory_reason = _memory(ok)

            rows.append(
                BackendRow(
                    backend=backend,
                    runs=len(runs),
                    statuses=statuses,
                    images_per_sec=spread([r.metrics["images_per_sec"] for r in ok]),
                    ratio=Spread.of(ratios),
                    test_accuracy=spread([r.metrics.get("test_accuracy") for r in ok]),
                    epoch_time_s=spread([_mean(r.metrics.get("epoch_time_s")) for r in ok]),
                    first_step_s=spread([r.metrics.get("first_step_s") for r in ok]),
                    latency_p50_ms=spread([r.metrics.get("latency_ms", {}).get("p50") for r in ok]),
                    utilization=Spread.of(utilization),
                    utilization_kind=utilization_kind,
                    memory_bytes=Spread.of(memory),
                    memory_kind=memory_kind,
                    memory_reason=memory_reason,
                    ratio_interval=median_interval(ratios),
                    quality_flags=quality_flags(ok),
                    setup_flags=setups[backend],
                )
            )
        first = members[0]
        out.append(
            ComparisonGroup(
                model=first.config["model"],
                dataset=first.config["dataset"],
                batch_size=first.config["batch_size"],
                mode=first.config.get("mode", "train"),
                synthetic=bool(first.data.get("synthetic")),
                baseline=base,
                rows=rows,
                settings={k: v for k, v in first.config.items() if k not in ("backend", "repeat")},
            )
        )
    return out


def widest_ratio_half_width(
    results: Sequence[RunResult], baseline: Optional[str] = None, level: float = 0.95
) -> Optional[float]:
    """The widest half-width, relative to its median, of the per-round ratios' intervals
    over every compared backend and group (``--ratio-precision``); None while any ratio
    has fewer rounds than its interval needs to reach ``level`` (6 for 95%) or none."""
    widest = None
    for group in compare(results, baseline):
        for row in group.rows:
            if row.backend == group.baseline:
                continue
            interval = row.ratio_interval
            if interval is None or interval.coverage < level or interval.median <= 0:
                return None
            half = max(interval.median - interval.low, interval.high - interval.median)
            widest = max(widest or 0.0, half / interval.median)
    return widest


# the CPU features that change which kernels run (kbench.measure.sysinfo.KERNEL_FEATURES)
DECIDING_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni",
                     "amx_tile", "sve", "sve2")  # fmt: skip


def cpu_of(result: RunResult) -> str:
    """The CPU a run was measured on: its model and the features that decide kernels."""
    return cpu_text(result.environment.get("machine") or {})


def cpu_text(machine: Dict[str, Any]) -> str:
    """A machine's CPU (as ``sysinfo.machine()`` records it): its model and the
    features that decide kernels."""
    cpu = machine.get("cpu") or {}
    name = cpu.get("model") or machine.get("cpu_model") or "unknown CPU"
    features = cpu.get("features")
    if features is None:
        return name
    found = [f for f in DECIDING_FEATURES if f in features]
    return f"{name} ({', '.join(found) or 'none of ' + ', '.join(DECIDING_FEATURES[:3])})"


def kernels_of(result: RunResult) -> str:
    """The CPU kernel library a run's framework used, as its result records it."""
    return kernels_text(result.environment.get("framework") or {})


def kernels_text(framework: Dict[str, Any]) -> str:
    """The CPU kernel library of a framework as a backend describes it."""
    kernels = framework.get("cpu_kernels") or {}
    if kernels.get("library"):
        return str(kernels["library"])
    if "mkldnn_enabled" in kernels:  # PyTorch
        on = kernels["mkldnn_available"] and kernels["mkldnn_enabled"]
        return f"oneDNN {'on' if on else 'off'}, {kernels.get('cpu_capability') or '?'}"
    return "not recorded"


def setup_flags(runs: Dict[str, List[RunResult]]) -> Dict[str, List[str]]:
    """{row: flags} for the rows of one group (``runs``: each row's ok runs): the CPU of
    every row where the group spans several CPUs; the kernel library of every row of a
    framework whose rows (or runs) used several."""
    cpus = {b: sorted({cpu_of(r) for r in found}) for b, found in runs.items()}
    libraries = {b: sorted({kernels_of(r) for r in found}) for b, found in runs.items()}
    mixed_cpus = len({c for found in cpus.values() for c in found}) > 1
    flags: Dict[str, List[str]] = {}
    for row in runs:
        framework = row.split(" @ ")[0]
        beside = {lib for b in runs if b.split(" @ ")[0] == framework for lib in libraries[b]}
        flags[row] = []
        if mixed_cpus and cpus[row]:
            flags[row].append("CPU: " + " / ".join(cpus[row]))
        if len(beside) > 1 and libraries[row]:
            flags[row].append("kernels: " + " / ".join(libraries[row]))
    return flags


def quality_flags(runs: Sequence[RunResult]) -> List[str]:
    """The flags of ``runs`` (``metrics.quality.flags``), one line per kind of flag:
    a run's own text where one run has it (with its round, ``#2``, where the row has
    several runs), else ``busy in 2 of 3 runs: 54-75% of the cores ...``."""
    by_kind: Dict[str, List[Tuple[RunResult, str]]] = {}
    for r in runs:
        for flag in ((r.metrics.get("quality") or {}).get("flags")) or []:
            by_kind.setdefault(flag.split(":")[0], []).append((r, flag))
    out = []
    for kind, found in by_kind.items():
        if len(found) == 1:
            r, flag = found[0]
            out.append(flag + (f" (#{r.config.get('repeat', 0) + 1})" if len(runs) > 1 else ""))
            continue
        text = f"{kind} in {len(found)} of {len(runs)} runs"
        shares = [r.metrics["quality"].get("other_share") for r, _ in found]
        shares = [s for s in shares if isinstance(s, (int, float))]
        if kind == "busy" and shares:
            low, high = f"{min(shares):.0%}", f"{max(shares):.0%}"
            span = low if low == high else f"{low[:-1]}-{high}"
            text += f": {span} of the cores used by other processes"
        out.append(text)
    return out


def _utilization(runs: Sequence[RunResult]) -> Tuple[Optional[str], List[float]]:
    """GPU utilization where NVML was sampled, else the worker's CPU use."""
    for kind in ("gpu", "cpu"):
        values = []
        for r in runs:
            measured = ((r.sampler or {}).get("summary") or {}).get("measured", {})
            for name, stats in sorted(measured.items()):
                wanted = (
                    name.startswith("gpu") and name.endswith("kernel_time_percent")
                    if kind == "gpu"
                    else name == "process_cpu_percent"
                )
                if wanted and stats.get("mean") is not None:
                    values.append(stats["mean"])
                    break
        if values:
            return kind, values
    return None, []


def _memory(runs: Sequence[RunResult]) -> Tuple[Optional[str], List[float], Optional[str]]:
    """The most telling memory reading that every run has, per run its peak; or, where no
    kind was read in every run, why (readings recorded as ``bytes: None`` carry a reason:
    MXNet has no framework peak, NVML may not know a process's memory)."""
    for kind in MEMORY_PREFERENCE:
        values = []
        for r in runs:
            readings = [
                m["bytes"]
                for m in r.metrics.get("memory") or []
                if m.get("kind") == kind and m.get("bytes") is not None
            ]
            if readings:
                values.append(float(max(readings)))
        if values and len(values) == len(runs):
            return kind, values, None
    reasons = dict.fromkeys(
        f"{m.get('kind')}: {m.get('reason') or 'not measured'}"
        for r in runs
        for m in r.metrics.get("memory") or []
        if m.get("bytes") is None
    )
    if not runs:
        return None, [], None
    return None, [], "; ".join(reasons) or "no memory reading in every run"


def _mean(values: Optional[Sequence[float]]) -> Optional[float]:
    return sum(values) / len(values) if values else None
