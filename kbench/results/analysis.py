"""What a set of results says, computed once: which runs compare, their per-round
ratios and the intervals on them, whether two backends computed the same thing. The stop
rule, ``kbench compare``, ``kbench report``, ``tune``, claims, parity and the Python API
read it; :mod:`kbench.views` only formats it. One run's figures are
:mod:`kbench.results.readings`'.

**Grouping.** Results are grouped by their config but for the backend and the repeat,
and by machine when they come from several (a row is ``tensorflow @ host``, with no
ratio to another machine's baseline). Runs of a user model whose file changed, or on
data whose identity changed (:func:`identity`), are grouped apart, each group saying how
(``apart``); a row whose model has another parameter count than the baseline's has no
ratio and says why.

**Ratios.** A backend's throughput is the median over its repeats with the range; its
speed against the baseline is the median of the per-round ratios (:func:`round_ratios`),
so a machine that drifts during the command cannot pick the winner; whether it differs
from 1 beyond the noise between rounds is the order-statistics interval on that median
(:func:`kbench.measure.stats.median_interval`, :func:`clear`; :func:`half_width` for
``--ratio-precision``).

**Flags.** A run measured while the machine was busy, throttled or on battery lends its
flags to its row; rows measured on different CPUs, or one framework's rows on different
CPU kernel libraries, say so (:func:`setup_flags`): their ratio compares those as much as
the backends.

**Same computation.** :class:`Tolerance` and :func:`differences`: outputs before training
and each step's loss against a reference that started from the same weights.
"""

from __future__ import annotations

import collections
import hashlib
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from kbench.measure.stats import LEVEL, MedianInterval, median_interval
from kbench.results import readings
from kbench.results.comparison import share_span
from kbench.results.readings import MEMORY_KINDS, UTILIZATION_KINDS, memory_peak
from kbench.results.result import RunResult
from kbench.results.store import host_of

IGNORED_IN_GROUPING = ("backend", "repeat", "timeout_s", "sample_interval_s")
MODEL_KINDS = ("train", "inference", "generate", "exec")  # results that compare() tabulates


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
    utilization_kind: Optional[str] = None  # gpu or cpu
    utilization_gpus: int = 1  # GPUs a utilization is the mean over (the most of any run)
    memory_bytes: Optional[Spread] = None  # the largest per-GPU peak of memory_kind
    memory_kind: Optional[str] = None  # a MEMORY_KINDS kind
    memory_reason: Optional[str] = None  # why there is no memory_kind common to every run
    memory_gpus: int = 1  # devices a run's readings of memory_kind span (the most of any)
    memory_sum: Optional[Spread] = None  # the sum over those devices, where several
    # NVML's figure far above the framework's own peak: what the framework reserved
    memory_reserved_note: Optional[str] = None
    ratio_interval: Optional[MedianInterval] = None  # on the median per-round ratio
    # why some of its runs' numbers may not be trusted (busy machine, throttling, battery)
    quality_flags: List[str] = field(default_factory=list)
    # the CPU or kernel library that sets it apart from rows it stands beside
    setup_flags: List[str] = field(default_factory=list)
    # why it has no ratio to the baseline: another parameter count ("parameters ...")
    apart: Optional[str] = None
    params: Tuple[int, ...] = ()  # the parameter counts its runs recorded

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
    # how it differs from groups of the same settings (model file, parameters, data)
    apart: List[str] = field(default_factory=list)
    variant: str = ""  # the same, short, for a row label: "model ab12cd34, input 28x28x1"
    sequence_length: Optional[int] = None  # a token model's: the tokens of one sample


# grouping ----------------------------------------------------------------------------


def settings_key(result: RunResult) -> Tuple:
    """The run's config but for the backend and repeat (what makes rows comparable)."""
    return tuple(
        sorted((k, repr(v)) for k, v in result.config.items() if k not in IGNORED_IN_GROUPING)
    )


def group_key(result: RunResult) -> Tuple:
    return settings_key(result) + identity(result)


USER_DATA = ("npz:", "folder:", "tfds:")  # data named by the user: its identity recorded


def identity(result: RunResult) -> Tuple[Tuple[str, Any], ...]:
    """What a run ran, beyond its settings: a user model's sha256, the input shape, and the
    user's own data's sha256, folder listing, tfds version, class and sample counts."""
    data = result.data or {}
    shape = data.get("input_shape")
    facts: List[Tuple[str, Any]] = [
        ("model", ((result.model or {}).get("source") or {}).get("sha256")),
        ("input", tuple(shape) if isinstance(shape, list) else shape),
    ]
    if str(result.config.get("dataset", "")).startswith(USER_DATA):
        facts += [
            ("data", data.get("sha256")),
            ("version", data.get("version")),
            ("listing", data.get("source") if data.get("streamed") else None),
            ("classes", data.get("num_classes")),
            ("train", data.get("train_samples")),
            ("test", data.get("test_samples")),
        ]
    return tuple((name, _hashable(value)) for name, value in facts)


def _hashable(value: Any) -> Any:
    return tuple(map(_hashable, value)) if isinstance(value, (list, tuple)) else value


FACT_TEXT = {  # how a difference in each fact of identity() reads
    "model": lambda a, b: f"model file changed: sha256 {_short(a)} vs {_short(b)}",
    "input": lambda a, b: f"input {_shape(a)} vs {_shape(b)}",
    "data": lambda a, b: f"data file changed: sha256 {_short(a)} vs {_short(b)}",
    "version": lambda a, b: f"data version {a} vs {b}",
    "listing": lambda a, b: "data folder changed (its files or classes differ)",
    "classes": lambda a, b: f"classes {_count(a)} vs {_count(b)}",
    "train": lambda a, b: f"training samples {_count(a)} vs {_count(b)}",
    "test": lambda a, b: f"test samples {_count(a)} vs {_count(b)}",
    "params": lambda a, b: f"parameters {_count(a)} vs {_count(b)}",
}
FACT_SHORT = {  # and how a group's own value reads beside its label
    "model": lambda v: f"model {_short(v)}",
    "input": lambda v: f"input {_shape(v)}",
    "data": lambda v: f"data {_short(v)}",
    "version": lambda v: f"data version {v}",
    "listing": lambda v: f"folder listing {_short(_digest(v))}",
    "classes": lambda v: f"{_count(v)} classes",
    "train": lambda v: f"train n {_count(v)}",
    "test": lambda v: f"test n {_count(v)}",
    "params": lambda v: f"{_count(v)} parameters",
}


def _digest(text: Any) -> Optional[str]:
    return hashlib.sha256(text.encode()).hexdigest() if isinstance(text, str) else None


def _short(sha: Any) -> str:
    return f"{sha[:8]}.." if isinstance(sha, str) else "not recorded"


def _shape(shape: Any) -> str:
    return "x".join(map(str, shape)) if isinstance(shape, tuple) else "not recorded"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "not recorded"


def params_of(runs: Iterable[RunResult]) -> List[int]:
    found = [(r.model or {}).get("params") for r in runs if r.ok]
    return sorted({p for p in found if isinstance(p, int)})


def group_facts(members: Sequence[RunResult]) -> Dict[str, Any]:
    params = params_of(members)
    return dict(identity(members[0]), params=params[0] if len(params) == 1 else None)


def apart_notes(groups: Dict[Tuple, List[RunResult]]) -> Dict[Tuple, Tuple[List[str], str]]:
    """For each group that shares its settings with another: how it differs from the first
    other one, in words (``model file changed: sha256 ab12cd34.. vs ...``) and short."""
    facts = {key: group_facts(members) for key, members in groups.items()}
    by_settings: Dict[Tuple, List[Tuple]] = {}
    for key, members in groups.items():
        by_settings.setdefault(settings_key(members[0]), []).append(key)
    notes: Dict[Tuple, Tuple[List[str], str]] = {}
    for keys in by_settings.values():
        if len(keys) < 2:
            continue
        varying = [n for n in FACT_TEXT if len({repr(facts[k].get(n)) for k in keys}) > 1]
        for key in keys:
            mine, other = facts[key], facts[keys[1] if key == keys[0] else keys[0]]
            reasons = [
                FACT_TEXT[name](value, other.get(name))
                for name, value in mine.items()
                if value != other.get(name)
                and not (name == "params" and (value is None or other.get(name) is None))
            ]
            variant = ", ".join(FACT_SHORT[n](mine.get(n)) for n in varying if n in mine)
            notes[key] = (reasons or ["runs recorded differently"], variant)
    return notes


def varying_settings(configs: Sequence[Dict[str, Any]], skip: Sequence[str] = ()) -> List[str]:
    """The settings (but the backend, repeat, model and ``skip``) whose values differ
    between ``configs`` (what tells groups apart), in order of first appearance."""
    keys: List[str] = []
    for config in configs:
        keys += [k for k in config if k not in keys]
    ignored = {*IGNORED_IN_GROUPING, "model", *skip}
    return [k for k in keys if k not in ignored and len({repr(c.get(k)) for c in configs}) > 1]


def column_of(results: Sequence[RunResult]) -> Callable[[RunResult], str]:
    """A row's name: the backend, or ``backend @ host`` where ``results`` span machines."""
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


def by_machine(results: Sequence[RunResult]) -> Dict[str, List[RunResult]]:
    machines: Dict[str, List[RunResult]] = {}
    for result in results:
        machines.setdefault(host_of(result), []).append(result)
    return machines


def measured_machines(results: Sequence[RunResult]) -> Dict[str, List[RunResult]]:
    """The model runs by machine, of the machines with a finished run (one that failed
    before it reached a machine, a Slurm task that never started, is a failure)."""
    machines = by_machine([r for r in results if r.kind in MODEL_KINDS])
    return {host: runs for host, runs in machines.items() if any(r.ok for r in runs)}


def compared_runs(results: Sequence[RunResult]) -> List[RunResult]:
    """The results a comparison tabulates: model runs (parity and ops have tables of their
    own), not superseded, and not a kbench exec script that trained nothing."""
    return [
        r
        for r in results
        if r.kind in MODEL_KINDS
        and not r.superseded
        and not (r.ok and r.metrics.get("images_per_sec") is None)
    ]


def grouped(results: Sequence[RunResult]) -> Dict[Tuple, List[RunResult]]:
    groups: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        groups.setdefault(group_key(result), []).append(result)
    return groups


def compare(
    results: Sequence[RunResult],
    baseline: Optional[str] = None,
    column: Optional[Callable[[RunResult], str]] = None,
) -> List[ComparisonGroup]:
    """One group per distinct config and :func:`identity`; ``baseline`` (default: the
    first backend) may name a backend or a row (``jax @ host``). ``column`` names the rows
    (default: :func:`column_of`): a larger set's names rows alike across calls."""
    results = compared_runs(results)
    column = column or column_of(results)
    groups = grouped(results)
    notes = apart_notes(groups)
    out = []
    for key, members in groups.items():
        found = row_ratios(members, baseline, column)
        runs = {row.backend: [r for r in members if column(r) == row.backend] for row in found}
        setups = setup_flags({b: [r for r in mine if r.ok] for b, mine in runs.items()})
        rows = [backend_row(row, runs[row.backend], setups[row.backend]) for row in found]
        apart, variant = notes.get(key, ([], ""))
        config = members[0].config
        settings = {k: v for k, v in config.items() if k not in ("backend", "repeat")}
        out.append(ComparisonGroup(
            config["model"], config["dataset"], config["batch_size"], config.get("mode", "train"),
            bool(members[0].data.get("synthetic")), found[0].baseline, rows, settings, apart,
            variant, members[0].data.get("sequence_length"),
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class RowRatios:
    backend: str
    baseline: str
    ratios: List[float]
    apart: Optional[str] = None  # why it has no ratio (other machine, parameter count)


def row_ratios(
    members: Sequence[RunResult], baseline: Optional[str], column: Callable[[RunResult], str],
    strict: bool = False,
) -> List[RowRatios]:  # fmt: skip
    """Each row of one group (``members``) with its per-round ratios to the baseline row:
    only where both ran on one machine a model of the same parameter count."""
    backends = list(dict.fromkeys(column(r) for r in members))
    base = row_named(backends, baseline or "") or backends[0]
    base_params = params_of(r for r in members if column(r) == base)
    base_by_round = dict(throughputs((r for r in members if column(r) == base), strict))
    out = []
    for backend in backends:
        runs = [r for r in members if column(r) == backend]
        apart = machine_apart(backend, base) or params_apart(
            params_of(runs), base_params, base, backend == base
        )
        ratios = [] if apart else round_ratios(throughputs(runs, strict), base_by_round)
        out.append(RowRatios(backend, base, ratios, apart))
    return out


def machine_apart(row: str, base: str) -> Optional[str]:
    """Why a row has no ratio to the baseline row: they ran on different machines."""
    host, base_host = row.partition(" @ ")[2], base.partition(" @ ")[2]
    if host == base_host:
        return None
    return f"on {host}, the baseline on {base_host}: no ratio across machines"


def params_apart(mine: List[int], base: List[int], base_name: str, is_base: bool) -> Optional[str]:
    """Why a row has no ratio to the baseline row: its runs built models of other
    parameter counts (or of several); None where the counts agree or are unknown."""
    if len(mine) > 1:
        return f"parameters {' vs '.join(f'{p:,}' for p in mine)} between its runs: no ratio"
    if is_base or not mine or not base or mine == base:
        return None
    counts = " or ".join(f"{p:,}" for p in base)
    return f"parameters {mine[0]:,} vs {counts} on {base_name}: no ratio"


def backend_row(ratios: RowRatios, runs: Sequence[RunResult], setups: List[str]) -> BackendRow:
    ok = [r for r in runs if r.ok]

    def spread(values: Iterable[Optional[float]]) -> Optional[Spread]:
        return Spread.of([v for v in values if v is not None])

    used = row_utilization(ok)
    memory = row_memory(ok)
    return BackendRow(
        ratios.backend, len(runs), dict(collections.Counter(r.status for r in runs)),
        images_per_sec=spread(rate for _, rate in throughputs(runs)),
        ratio=Spread.of(ratios.ratios),
        test_accuracy=spread(r.metrics.get("test_accuracy") for r in ok),
        epoch_time_s=spread(readings.epoch_time(r) for r in ok),
        first_step_s=spread(r.metrics.get("first_step_s") for r in ok),
        latency_p50_ms=spread(r.metrics.get("latency_ms", {}).get("p50") for r in ok),
        utilization=Spread.of(used.values), utilization_kind=used.kind,
        utilization_gpus=used.devices, memory_bytes=Spread.of(memory.largest),
        memory_kind=memory.kind, memory_reason=memory.reason, memory_gpus=memory.devices,
        memory_sum=Spread.of(memory.sums) if memory.devices > 1 else None,
        memory_reserved_note=reserved_note(ratios.backend, ok, memory.kind, memory.largest),
        ratio_interval=median_interval(ratios.ratios), quality_flags=quality_flags(ok),
        setup_flags=setups, apart=ratios.apart, params=tuple(params_of(runs)),
    )  # fmt: skip


# per-round ratios and their intervals ---------------------------------------------------


def throughputs(runs: Iterable[RunResult], strict: bool = False) -> List[Tuple[int, float]]:
    """``(round, images_per_sec)`` of each of ``runs``' rounds that count
    (:func:`~kbench.results.readings.round_throughputs`, ``strict`` there), run after run."""
    return [pair for run in runs for pair in readings.round_throughputs(run, strict).items()]


def round_ratios(mine: Iterable[Tuple[Any, float]], base: Dict[Any, float]) -> List[float]:
    """Each of ``mine``'s (round, figure) over ``base``'s figure of the same round, where it
    has one (not zero): the per-round ratios."""
    return [value / base[key] for key, value in mine if base.get(key)]


def clear(interval: Optional[MedianInterval]) -> bool:
    """Whether a ratio's interval lies wholly above or below 1 (with more than one round)."""
    return interval is not None and interval.n > 1 and not interval.low <= 1.0 <= interval.high


def half_width(interval: Optional[MedianInterval], level: float = LEVEL) -> float:
    """The interval's widest half-width relative to its median; infinite while it has fewer
    rounds than ``level`` needs (6 for 95%), or none."""
    if interval is None or interval.coverage < level or interval.median <= 0:
        return math.inf
    return max(interval.high - interval.median, interval.median - interval.low) / interval.median


def widest_ratio_half_width(
    results: Sequence[RunResult], baseline: Optional[str] = None, level: float = LEVEL
) -> Optional[float]:
    """The widest :func:`half_width` over every group's ratios (``--ratio-precision``); None
    while any has too few rounds for ``level``, or none. Of quiet rounds only."""
    results = compared_runs(results)
    column = column_of(results)
    widths = [
        half_width(median_interval(row.ratios), level)
        for members in grouped(results).values()
        for row in row_ratios(members, baseline, column, strict=True)
        if row.backend != row.baseline
    ]
    if not widths or math.inf in widths:
        return None
    return max(widths)


# what sets rows apart: CPUs, kernel libraries, a busy machine --------------------------


# the CPU features that change which kernels run (kbench.measure.sysinfo.KERNEL_FEATURES)
DECIDING_FEATURES = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni",
                     "amx_tile", "sve", "sve2")  # fmt: skip


def cpu_of(result: RunResult) -> str:
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
    return kernels_text(result.environment.get("framework") or {})


def kernels_text(framework: Dict[str, Any]) -> str:
    kernels = framework.get("cpu_kernels") or {}
    if kernels.get("library"):
        return str(kernels["library"])
    if "mkldnn_enabled" in kernels:  # PyTorch
        on = kernels["mkldnn_available"] and kernels["mkldnn_enabled"]
        return f"oneDNN {'on' if on else 'off'}, {kernels.get('cpu_capability') or '?'}"
    return "not recorded"


def setup_flags(runs: Dict[str, List[RunResult]]) -> Dict[str, List[str]]:
    """{row: flags} of one group (``runs``: each row's ok runs): each row's CPU where they
    span several; its kernel library where its framework's rows (or runs) used several."""
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
    """A line per kind of flag of ``runs``: one run's own text (``#2``: its round), or
    ``busy in 2 of 3 runs: 54-75% of the cores ...``."""
    by_kind: Dict[str, List[Tuple[RunResult, str]]] = {}
    for r in runs:
        for flag in ((r.metrics.get("quality") or {}).get("flags")) or []:
            by_kind.setdefault(flag.split(":")[0], []).append((r, flag))
    out = []
    for kind, found in by_kind.items():
        if len(found) == 1:
            r, flag = found[0]
            out.append(flag + (f" (#{readings.round_of(r) + 1})" if len(runs) > 1 else ""))
            continue
        text = f"{kind} in {len(found)} of {len(runs)} runs"
        shares = [r.metrics["quality"].get("other_share") for r, _ in found]
        shares = [s for s in shares if isinstance(s, (int, float))]
        if kind == "busy" and shares:
            text += f": {share_span(shares)} of the cores used by other processes"
        out.append(text)
    return out


# utilization and memory of a row ------------------------------------------------------


@dataclass(frozen=True)
class RowUtilization:
    kind: Optional[str]  # gpu or cpu; None: none was sampled
    values: List[float]  # each run's (its GPUs' mean)
    devices: int = 1  # the most GPUs any run's figure is the mean over


def row_utilization(runs: Sequence[RunResult]) -> RowUtilization:
    for kind in UTILIZATION_KINDS:
        found = [u for u in (readings.utilization(r, kind) for r in runs) if u is not None]
        if found:
            return RowUtilization(kind, [u.percent for u in found], max(u.devices for u in found))
    return RowUtilization(None, [])


@dataclass(frozen=True)
class RowMemory:
    kind: Optional[str]  # the kind every run has; None: there is none (reason says why)
    largest: List[float]  # per run: its largest per-GPU peak of the kind
    sums: List[float]  # per run that read several devices: the sum of their peaks
    devices: int = 1  # the most devices any run's readings of the kind span
    reason: Optional[str] = None


def row_memory(runs: Sequence[RunResult]) -> RowMemory:
    """The first of :data:`MEMORY_KINDS` every run read, each run's largest per-GPU peak
    (and sum over several); or, where no kind was read in every run, why."""
    for kind in MEMORY_KINDS:
        peaks = [memory_peak(r, kind) for r in runs]
        if runs and None not in peaks:
            return RowMemory(
                kind,
                [float(p.largest) for p in peaks],  # type: ignore[union-attr]
                [float(p.total) for p in peaks if p.total is not None],  # type: ignore[union-attr]
                max(p.devices for p in peaks),  # type: ignore[union-attr]
            )
    if not runs:
        return RowMemory(None, [], [])
    reasons = dict.fromkeys(reason for r in runs for reason in readings.unknown_memory(r))
    return RowMemory(None, [], [], reason="; ".join(reasons) or "no memory reading in every run")


def reserved_note(
    backend: str, runs: Sequence[RunResult], kind: Optional[str], values: Sequence[float]
) -> Optional[str]:
    """Where NVML charges the worker over 1 GiB and twice more than the framework's own
    peak, say that the rest is the CUDA context and what the framework reserved, and why:
    its default (JAX preallocates 75% of the GPU) or the option the runs asked for. On an
    H100, JAX's small_cnn held 60 GiB by NVML for a 392 MiB peak (torch: 1.1 GiB for 354
    MiB, its CUDA context and cache: no note)."""
    peaks = [memory_peak(r, "framework_peak") for r in runs]
    if kind != "process_nvml" or not runs or None in peaks or len(peaks) != len(values):
        return None
    held = statistics.median(values)
    peak = statistics.median(p.largest for p in peaks)  # type: ignore[union-attr]
    if held - peak < 2**30 or held < 2 * peak:
        return None
    options = (runs[0].environment.get("framework") or {}).get("memory_options") or {}
    requested = {k: v for k, v in (options.get("requested") or {}).items() if v}
    why = (
        "asked for: " + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in requested.items())
        if requested
        else f"its default: {options.get('framework_default') or 'unknown'}"
    )
    return (
        f"{backend}: its own peak allocation was {peak / 2**20:,.0f} MiB; the rest of the "
        f"{held / 2**30:,.1f} GiB NVML counts is the CUDA context and what it reserved ({why})"
    )


# the same computation -----------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """How far a backend's outputs and losses may lie from a reference's that started
    from the same weights and trained on the same batches. Defaults chosen from
    measurements on this project's 2-core CPU machine.

    Outputs: float32 probabilities agree to about 1e-6 or better between correct
    implementations; 1e-4 leaves room for other hardware. Losses: over 3 SGD steps at
    learning rate 1e-3 and batch 8, correct implementations drift apart by up to 5.2e-3:
    VGG-16 on MXNet Gluon against TensorFlow, whose gradients agree to 3e-14 in float64;
    in float32 the two libraries' convolutions round apart by about 2e-5, which flips
    the sign of a pre-ReLU value near zero below the 7th BatchNorm, and 13 BatchNorm
    layers amplify that. 1e-2 leaves room; keras-mxnet's VGG-16, which does not train
    BatchNorm's gamma, drifts by 2e-2.
    """

    output_atol: float = 1e-4  # largest |difference| of float32 probabilities
    loss_rtol: float = 1e-2  # largest |difference| of a step's loss, relative to it
    noise_factor: float = 10.0  # or this many times the model's measured noise floor
    note: str = "float32: the parity tolerance (kbench parity)"  # what it is for, in words

    def describe(self) -> str:
        return (
            f"outputs within {self.output_atol:g} absolute; losses within {self.loss_rtol:g} "
            f"relative at every step, or within {self.noise_factor:g}x the model's noise floor "
            "(the drift of the reference retrained from weights nudged by 1e-7) where larger"
        )


FLOAT32 = Tolerance()
BFLOAT16 = Tolerance(
    5e-2, 5e-2, note="bfloat16 keeps 8 bits of mantissa: outputs within 0.05, losses within 5%"
)


def differences(
    reference_outputs: Any, outputs: Any, reference_losses: Sequence[float],
    losses: Sequence[float], tolerance: Tolerance, noise_floor: float = 0.0,
) -> Dict[str, Any]:  # fmt: skip
    """The largest differences from the reference's, and whether they lie within
    ``tolerance`` (``passed``; a loss may drift by ``noise_factor`` x ``noise_floor``
    where larger). A value not finite fails; ValueError when the shapes differ."""
    ref_out = np.asarray(reference_outputs, dtype=np.float64)
    out = np.asarray(outputs, dtype=np.float64)
    ref_loss = np.asarray(reference_losses, dtype=np.float64)
    loss = np.asarray(losses, dtype=np.float64)
    if out.shape != ref_out.shape or loss.shape != ref_loss.shape:
        raise ValueError(
            f"outputs {out.shape} / losses {loss.shape} do not match the reference's "
            f"{ref_out.shape} / {ref_loss.shape}"
        )
    drift = np.abs(loss - ref_loss)
    outputs_finite = bool(np.all(np.isfinite(out)))
    losses_finite = bool(np.all(np.isfinite(loss)))
    inf = float("inf")
    output_max_abs = float(np.max(np.abs(out - ref_out), initial=0.0)) if outputs_finite else inf
    loss_max_abs = float(np.max(drift, initial=0.0)) if losses_finite else inf
    relative = drift / np.maximum(np.abs(ref_loss), 1e-12)
    loss_max_rel = float(np.max(relative, initial=0.0)) if losses_finite else inf
    loss_limit = max(tolerance.loss_rtol, tolerance.noise_factor * noise_floor)
    return {
        "output_max_abs": output_max_abs, "loss_max_abs": loss_max_abs,
        "loss_max_rel": loss_max_rel, "noise_floor": noise_floor,
        "passed": output_max_abs <= tolerance.output_atol and loss_max_rel <= loss_limit,
    }  # fmt: skip


def what_differs(
    figures: Dict[str, Any], tolerance: Tolerance, reference: str = "the reference's"
) -> Optional[str]:
    """In words, which of :func:`differences`' figures lies outside ``tolerance`` (a loss
    relative to ``reference``); None when they passed."""
    if figures["passed"]:
        return None
    parts = []
    if not figures["output_max_abs"] <= tolerance.output_atol:
        parts.append(
            f"outputs before training differ by up to {figures['output_max_abs']:.2g} "
            f"(tolerance {tolerance.output_atol:g})"
        )
    loss_limit = max(tolerance.loss_rtol, tolerance.noise_factor * figures["noise_floor"])
    if not figures["loss_max_rel"] <= loss_limit:
        parts.append(
            f"a training step's loss differs by up to {figures['loss_max_rel']:.2%} of "
            f"{reference} (tolerance {loss_limit:.2%})"
        )
    return "; ".join(parts) or "a value is not finite"


# greedy tokens across backends (--mode generate) -----------------------------------------


def token_agreement(results: Sequence[RunResult]) -> Dict[str, Dict[str, Any]]:
    """By run id, each ok generate run's greedy tokens against its reference's: the run
    of the same settings (and round, where there is one) on the backend whose weights it
    decoded with (the same weights' digest). ``same``: every token equal; else
    ``first_difference``: the first position (of any row) where they part, its row, and
    the gap between the two largest logits there, the reference's and this run's (a
    small gap is a near tie that rounding can flip); ``reference_run``: the reference's
    run id. No reference: ``why``. What ``kbench run`` records in each non-reference
    document as ``metrics.generation_agreement``."""
    ran = [r for r in results if r.kind == "generate" and r.ok and "generation" in r.metrics]
    by_settings: Dict[Tuple, List[RunResult]] = {}
    for result in ran:
        by_settings.setdefault(group_key(result), []).append(result)
    return {result.run_id: _agreement(result, by_settings[group_key(result)]) for result in ran}


def _agreement(result: RunResult, members: Sequence[RunResult]) -> Dict[str, Any]:
    weights = result.metrics["generation"]["weights"]
    source, digest = weights.get("from"), weights.get("sha256")
    if weights.get("note"):  # no reference ran before it: its own weights, apart
        return {"reference": None, "why": "its own weights (no Keras backend ran before it)"}
    if source == result.config["backend"]:  # its own weights: it is the reference
        return {"reference": source, "is_reference": True, "same": True}
    candidates = [
        r for r in members
        if r.config["backend"] == source
        and r.metrics["generation"]["weights"].get("sha256") == digest
    ]  # fmt: skip
    same_round = [r for r in candidates if r.config.get("repeat") == result.config.get("repeat")]
    if not candidates:
        return {"reference": source, "why": f"no run of {source} with these weights here"}
    reference = (same_round or candidates)[0]
    mine = np.asarray(result.metrics["generation"]["tokens"])
    theirs = np.asarray(reference.metrics["generation"]["tokens"])
    if mine.shape != theirs.shape:
        return {"reference": source, "why": f"tokens {mine.shape} vs {theirs.shape}"}
    parted = mine != theirs
    found = {"reference": source, "reference_run": reference.run_id, "tokens": int(mine.size)}
    if not parted.any():
        return dict(found, same=True)
    position = int(np.argmax(parted.any(axis=0)))
    row = int(np.argmax(parted[:, position]))
    gaps = (
        reference.metrics["generation"]["logit_gaps"],
        result.metrics["generation"]["logit_gaps"],
    )
    return dict(found, same=False, first_difference={
        "position": position, "row": row,
        "reference_gap": gaps[0][row][position], "gap": gaps[1][row][position],
    })  # fmt: skip
