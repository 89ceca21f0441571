"""Runs of several machines told apart: a store merged from laptops, a sweep run on a
cluster's nodes. A machine is what :func:`kbench.results.analysis.measured_machines`
groups by, said in words by :func:`hardware_text`. No median and no ratio mixes machines,
and a table that sets them side by side says so (:func:`mixed_note`). Machines that ran
one sweep file share its run keys: :func:`newest_per_machine` keeps the newest result of
a run on each. :func:`machine_table` is what ``kbench results --merge`` prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from kbench.results.analysis import (
    ComparisonGroup,
    compare,
    cpu_of,
    kernels_of,
    measured_machines,
    varying_settings,
)
from kbench.results.result import RunResult
from kbench.results.store import host_of, load_runs
from kbench.views.tables import (
    SHORT_NAMES,
    Table,
    flagged,
    group_title,
    model_labels,
    ratio_text,
    setting_cell,
    spread_text,
)


def newest_per_machine(results: Sequence[RunResult]) -> List[RunResult]:
    """The newest result of each sweep run on each machine, where that leaves several
    machines' runs; else the newest of each sweep run. A result that did not finish and was
    rerun on another machine is left out; results of no sweep are kept, in order."""
    overall = _newest(results, lambda r, key: key)
    per_machine = _newest(results, lambda r, key: (key, host_of(r)))
    kept = {id(r) for r in per_machine.values() if r.ok or overall[_run_key(r)] is r}
    chosen = [r for r in results if not _run_key(r) or id(r) in kept]
    if several_machines(chosen) is None:
        return [r for r in results if not _run_key(r) or overall[_run_key(r)] is r]
    return chosen


def load_per_machine(stores: Sequence[Path], filters: Sequence[str] = ()) -> List[RunResult]:
    """:func:`kbench.results.store.load_runs`, by :func:`newest_per_machine`."""
    return newest_per_machine(load_runs(stores, filters, latest_only=False))


def _run_key(result: RunResult) -> Optional[str]:
    return (result.sweep or {}).get("run_key")


def _newest(
    results: Sequence[RunResult], key: Callable[[RunResult, str], Any]
) -> Dict[Any, RunResult]:
    """The newest result per ``key`` (of a result and its run key), over sweep runs; of
    two started at once, the later in ``results`` (as the store's index orders them)."""
    newest: Dict[Any, RunResult] = {}
    for r in results:
        run_key = _run_key(r)
        if run_key:
            k = key(r, run_key)
            if k not in newest or r.started_at >= newest[k].started_at:
                newest[k] = r
    return newest


def several_machines(results: Sequence[RunResult]) -> Optional[Dict[str, List[RunResult]]]:
    machines = measured_machines(results)
    return machines if len(machines) > 1 else None


def mixed_note(machines: Sequence[str], what: str = "a table per machine") -> str:
    return (
        f"These runs come from {len(machines)} machines ({', '.join(machines)}): {what}; "
        "no median and no ratio is computed across machines"
    )


def hardware_text(runs: Sequence[RunResult]) -> str:
    """What one machine's runs ran on: ``CPU AMD EPYC (avx2, fma); no GPU; kernels:
    jax XLA ..., torch oneDNN on, AVX2``. Several CPUs under one name are all named,
    and said to be mixed."""
    cpus = list(dict.fromkeys(cpu_of(r) for r in runs if r.ok))
    mixed = len(cpus) > 1
    text = ("CPUs (mixed under one name) " if mixed else "CPU ") + (" / ".join(cpus) or "unknown")
    gpus = list(
        dict.fromkeys(
            str(device.get("name") or "GPU")
            for r in runs
            if r.ok
            for device in (r.environment.get("machine") or {}).get("gpu", {}).get("devices") or []
        )
    )
    text += "; GPU " + ", ".join(gpus) if gpus else "; no GPU"
    kernels = [f"{b} {' / '.join(found)}" for b, found in kernel_libraries(runs).items()]
    return text + ("; kernels: " + ", ".join(kernels) if kernels else "")


def kernel_libraries(runs: Sequence[RunResult]) -> Dict[str, List[str]]:
    found: Dict[str, Dict[str, None]] = {}
    for r in runs:
        if r.ok and kernels_of(r) != "not recorded":
            found.setdefault(r.config["backend"], {})[kernels_of(r)] = None
    return {backend: list(libraries) for backend, libraries in found.items()}


def machine_table(results: Sequence[RunResult], baseline: Optional[str] = None) -> Optional[Table]:
    """A row per setting, machine and backend (img/s, the ratio to ``baseline`` on the same
    machine, test accuracy), the hardware in the notes; None for fewer than two machines."""
    machines = several_machines(results)
    if machines is None:
        return None
    base = baseline or next(r.config["backend"] for runs in machines.values() for r in runs)
    groups = {host: compare(runs, base) for host, runs in machines.items()}
    varying = varying_settings(
        [g.settings for found in groups.values() for g in found],
        skip=("dataset", "batch_size", "mode"),
    )
    labels = {host: _labels(found, varying) for host, found in groups.items()}
    kernels = {host: kernel_libraries(runs) for host, runs in machines.items()}
    differ = _kernels_differ(kernels)
    rows = []
    for label in dict.fromkeys(text for found in labels.values() for text in found):
        for host, found in groups.items():
            for group, text in zip(found, labels[host]):
                if text == label:
                    rows += _rows(label, host, group, base, kernels[host] if differ else None)
    headers = ["setting", "machine", "backend", "img/s: median (min-max, n)"]
    headers += [f"vs {base}, same machine", "test acc"] + (["CPU kernels"] if differ else [])
    notes = [mixed_note(list(machines), "a row per machine and backend")]
    notes += [f"{host}: {hardware_text(runs)}" for host, runs in machines.items()]
    return Table("Per machine: headline figures", headers, rows, notes)


def _labels(groups: Sequence[ComparisonGroup], varying: Sequence[str]) -> List[str]:
    models = model_labels(g.model for g in groups)
    out = []
    for group in groups:
        parts = [
            f"{SHORT_NAMES.get(k, k.replace('_', ' '))} {setting_cell(group.settings.get(k), k)}"
            for k in varying
        ]
        title = group_title(group, models[group.model])
        out.append(title + (f" ({', '.join(parts)})" if parts else ""))
    return out


def _kernels_differ(kernels: Dict[str, Dict[str, List[str]]]) -> bool:
    backends = {b for found in kernels.values() for b in found}
    return any(len({lib for found in kernels.values() for lib in found.get(b, [])}) > 1
               for b in backends)  # fmt: skip


def _rows(
    label: str, host: str, group: ComparisonGroup, baseline: str,
    kernels: Optional[Dict[str, List[str]]],
) -> List[List[str]]:  # fmt: skip
    rows = []
    for row in group.rows:
        rate = (
            ", ".join(s.upper() for s in row.statuses)
            if row.images_per_sec is None
            else flagged(spread_text(row.images_per_sec, ",.0f"), row)
        )
        ratio = ratio_text(row, baseline) if group.baseline == baseline else (
            f"- [no {baseline} run on {host}]")  # fmt: skip
        cells = [label, host, row.backend, rate, ratio, spread_text(row.test_accuracy, ".3f")]
        if kernels is not None:
            cells.append(" / ".join(kernels.get(row.backend, [])) or "not recorded")
        rows.append(cells)
    return rows
