"""Side-by-side numbers for backends that ran the same thing.

Results are grouped by everything in their config except the backend and the
repeat index (and, when they come from several machines, by machine too: each
backend on each machine is then its own column, ``tensorflow @ host``, with no ratio
to a baseline of another machine; :func:`by_machine` splits them for a table per
machine, as ``kbench compare`` prints them). Within a
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

A ratio is computed only between runs of the same thing: runs of a user model whose
file changed (its sha256), or on data whose identity changed (input shape; a data
file's sha256, a folder's listing, a tensorflow-datasets version, class and sample
counts) are grouped apart, each group saying how it differs (``apart``); within a
group, a row whose model has another parameter count than the baseline's (a user
model whose layers depend on the backend) has no ratio and says why. Where several
user model files share a file name, labels carry enough of their paths to tell them
apart (:func:`model_labels`).
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

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
    # NVML's figure far above the framework's own peak: what the framework reserved
    memory_reserved_note: Optional[str] = None
    ratio_interval: Optional[RatioInterval] = None  # on the median per-round ratio
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
    label: str = ""  # the model's name among the others compared (model_labels)
    # how it differs from groups of the same settings (model file, parameters, data)
    apart: List[str] = field(default_factory=list)
    variant: str = ""  # the same, short, for a row label: "model ab12cd34, input 28x28x1"

    @property
    def title(self) -> str:
        dataset = dataset_label(self.dataset)
        data = f"{dataset} (synthetic data)" if self.synthetic else dataset
        mode = ", inference" if self.mode == "inference" else ""
        model = (self.label or model_label(self.model)) + (
            f" ({self.variant})" if self.variant else ""
        )
        if self.batch_size is None:  # kbench exec: data and batch are the script's
            return f"{model} on {data} data and batch{mode}"
        return f"{model} on {data}, batch {self.batch_size}{mode}"


def settings_key(result: RunResult) -> Tuple:
    """The run's config but for the backend and repeat (what makes rows comparable)."""
    return tuple(
        sorted((k, repr(v)) for k, v in result.config.items() if k not in IGNORED_IN_GROUPING)
    )


def group_key(result: RunResult) -> Tuple:
    """What a run is grouped by: its settings and what it ran (:func:`identity`)."""
    return settings_key(result) + identity(result)


USER_DATA = ("npz:", "folder:", "tfds:")  # data named by the user: its identity recorded


def identity(result: RunResult) -> Tuple[Tuple[str, Any], ...]:
    """What a run ran, beyond its settings: a user model's file content (sha256) and the
    data's shape, and for the user's own data its file's sha256, a folder's listing, a
    tensorflow-datasets version, and its class and sample counts (``result.data``, as
    :meth:`kbench.datasets.PreparedData.describe` records it)."""
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
    """The parameter counts that ``runs`` recorded (those that finished), each once."""
    found = [(r.model or {}).get("params") for r in runs if r.ok]
    return sorted({p for p in found if isinstance(p, int)})


def group_facts(members: Sequence[RunResult]) -> Dict[str, Any]:
    """A group's identity facts, with its parameter count where its runs agree on one."""
    facts = dict(identity(members[0]))
    params = params_of(members)
    facts["params"] = params[0] if len(params) == 1 else None
    return facts


def differences(mine: Dict[str, Any], other: Dict[str, Any]) -> List[str]:
    """How one group's facts (:func:`group_facts`) differ from another's, in words:
    ``model file changed: sha256 ab12cd34.. vs cd34ef56..``, ``parameters 7,850 vs ...``."""
    return [
        FACT_TEXT[name](value, other.get(name))
        for name, value in mine.items()
        if value != other.get(name)
        and not (name == "params" and (value is None or other.get(name) is None))
    ]


def apart_notes(groups: Dict[Tuple, List[RunResult]]) -> Dict[Tuple, Tuple[List[str], str]]:
    """For each group (by :func:`group_key`) that shares its settings with another: how
    it differs from the first other one, in words and as a short variant text."""
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
            other = keys[1] if key == keys[0] else keys[0]
            mine = facts[key]
            reasons = differences(mine, facts[other]) or ["runs recorded differently"]
            variant = ", ".join(FACT_SHORT[n](mine.get(n)) for n in varying if n in mine)
            notes[key] = (reasons, variant)
    return notes


def model_labels(models: Iterable[str]) -> Dict[str, str]:
    """A label per model: its short name (``net.py:build``), or, where several user
    model files share one, as much of each path as tells them apart
    (``a/net.py:build``, ``b/net.py:build``)."""
    models = list(dict.fromkeys(m for m in models if isinstance(m, str)))
    labels = {m: model_label(m) for m in models}
    clashes: Dict[str, List[str]] = {}
    for model, label in labels.items():
        clashes.setdefault(label, []).append(model)
    for clashing in clashes.values():
        if len(clashing) < 2:
            continue
        tails = {m: labels[m] for m in clashing}
        for depth in range(2, 1 + max(len(_where(m)[0].split("/")) for m in clashing)):
            tails = {m: _path_tail(m, depth) for m in clashing}
            if len(set(tails.values())) == len(clashing):
                break
        labels.update(tails)
    return labels


def _where(model: str) -> Tuple[str, str]:
    """A user model's path and function (none for a saved model)."""
    if model.endswith(".keras") or ":" not in model:
        return model, ""
    where, _, function = model.rpartition(":")
    return where, function


def _path_tail(model: str, depth: int) -> str:
    where, function = _where(model)
    tail = "/".join(where.replace("\\", "/").split("/")[-depth:])
    return tail + (f":{function}" if function else "")


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
    """One group per distinct config and :func:`identity` (what ran: a user model's
    file content, the data); ``baseline`` defaults to the first backend run.

    With results from several machines, each row is a backend on a machine
    (``jax @ host``), and ``baseline`` may name a backend (its first machine) or a row.
    ``column`` names the rows (default: :func:`column_of` ``results``); pass the one of
    a larger set to name rows alike across calls (a report compares group by group).
    """
    results = [r for r in results if r.kind in MODEL_KINDS]  # parity and ops have own tables
    results = [r for r in results if not r.dropped]  # a warm window's round left out, and said
    # a kbench exec script that trained nothing has no throughput to compare
    results = [r for r in results if not (r.ok and r.metrics.get("images_per_sec") is None)]
    column = column or column_of(results)
    groups: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        groups.setdefault(group_key(result), []).append(result)
    labels = model_labels(r.config["model"] for r in results)
    notes = apart_notes(groups)
    out = []
    for key, members in groups.items():
        first = members[0]
        apart, variant = notes.get(key, ([], ""))
        rows, base = compare_rows(members, baseline, column)
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
                label=labels.get(first.config["model"], ""),
                apart=apart,
                variant=variant,
            )
        )
    return out


def compare_rows(
    members: Sequence[RunResult], baseline: Optional[str], column: Callable[[RunResult], str]
) -> Tuple[List[BackendRow], str]:
    """The rows of one group, and the baseline row's name. A row's ratio is to the
    baseline round by round, and only where both ran a model of the same parameter
    count (else the row says why it has none, ``apart``)."""
    backends = list(dict.fromkeys(column(r) for r in members))
    base = row_named(backends, baseline or "") or backends[0]
    base_params = params_of(r for r in members if column(r) == base)
    base_by_round = {
        r.config.get("repeat", 0): r.metrics["images_per_sec"]
        for r in members
        if column(r) == base and r.ok
    }
    setups = setup_flags({b: [r for r in members if column(r) == b and r.ok] for b in backends})
    rows = []
    for backend in backends:
        runs = [r for r in members if column(r) == backend]
        apart = machine_apart(backend, base) or params_apart(
            params_of(runs), base_params, base, backend == base
        )
        rows.append(
            backend_row(backend, runs, {} if apart else base_by_round, setups[backend], apart)
        )
    return rows, base


def machine_apart(row: str, base: str) -> Optional[str]:
    """Why a row has no ratio to the baseline row: they ran on different machines
    (rows ``backend @ host``); a ratio compares backends on one machine only."""
    host, base_host = row.partition(" @ ")[2], base.partition(" @ ")[2]
    if host == base_host:
        return None
    return f"on {host}, the baseline on {base_host}: no ratio across machines"


def by_machine(results: Sequence[RunResult]) -> Dict[str, List[RunResult]]:
    """``results`` by the machine they ran on (:func:`~kbench.results.store.host_of`:
    hostname, and GPU where there was one), in order of first appearance."""
    machines: Dict[str, List[RunResult]] = {}
    for result in results:
        machines.setdefault(host_of(result), []).append(result)
    return machines


def params_apart(mine: List[int], base: List[int], base_name: str, is_base: bool) -> Optional[str]:
    """Why a row has no ratio to the baseline row: its runs built models of other
    parameter counts (or of several); None where the counts agree or are unknown."""
    if len(mine) > 1:
        return f"parameters {' vs '.join(f'{p:,}' for p in mine)} between its runs: no ratio"
    if is_base or not mine or not base or mine == base:
        return None
    counts = " or ".join(f"{p:,}" for p in base)
    return f"parameters {mine[0]:,} vs {counts} on {base_name}: no ratio"


def backend_row(
    backend: str,
    runs: Sequence[RunResult],
    base_by_round: Dict[int, float],
    setups: List[str],
    apart: Optional[str] = None,
) -> BackendRow:
    """One row: ``runs`` of one backend, their ratios to ``base_by_round`` (the
    baseline's throughput by round; empty: no ratio, ``apart`` says why)."""
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
    return BackendRow(
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
        memory_reserved_note=reserved_note(backend, ok, memory_kind, memory),
        ratio_interval=median_interval(ratios),
        quality_flags=quality_flags(ok),
        setup_flags=setups,
        apart=apart,
        params=tuple(params_of(runs)),
    )


def parameter_mismatches(results: Sequence[RunResult]) -> List[str]:
    """One line per model and setting whose runs built models of different parameter
    counts on different backends (a user model whose layers depend on the backend):
    kbench promises the same model on every backend, so a run that finds otherwise
    says so and fails. Empty where every group's runs agree."""
    lines = []
    for group in compare(results):
        if any(row.apart for row in group.rows):
            sizes = "; ".join(
                f"{row.backend}: {' and '.join(f'{p:,}' for p in row.params)}"
                for row in group.rows
                if row.params
            )
            lines.append(
                f"error: {group.title}: the backends built models of different parameter "
                f"counts ({sizes}), so their speeds compare different models. Its layers "
                "depend on the backend: build the same layers on every backend, then compare."
            )
    return lines


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
        values = [peak for peak in (_peak(r, kind) for r in runs) if peak is not None]
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


def reserved_note(
    backend: str, runs: Sequence[RunResult], kind: Optional[str], values: Sequence[float]
) -> Optional[str]:
    """Where NVML charges the worker over 1 GiB and twice more than the framework's own
    peak, say that the rest is the CUDA context and what the framework reserved, and why:
    its default (JAX preallocates 75% of the GPU) or the option the runs asked for. On an
    H100, JAX's small_cnn held 60 GiB by NVML for a 392 MiB peak (torch: 1.1 GiB for 354
    MiB, its CUDA context and cache: no note)."""
    peaks = [_peak(r, "framework_peak") for r in runs]
    if kind != "process_nvml" or not runs or None in peaks or len(peaks) != len(values):
        return None
    held, peak = statistics.median(values), statistics.median(peaks)  # type: ignore[arg-type]
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


def _peak(run: RunResult, kind: str) -> Optional[float]:
    """A run's largest memory reading of ``kind``, or None."""
    readings = [
        m["bytes"]
        for m in run.metrics.get("memory") or []
        if m.get("kind") == kind and m.get("bytes") is not None
    ]
    return float(max(readings)) if readings else None


def _mean(values: Optional[Sequence[float]]) -> Optional[float]:
    return sum(values) / len(values) if values else None
