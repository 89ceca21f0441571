"""Tables of the per-operator profiles (``kbench run --profile``), for ``kbench compare``
and ``kbench report``.

Three views: where each profiled run's operator time went by phase; the common
operators (``kbench ops`` names) side by side across backends, per model; and each
run's top operators. Times are per profiled step, so runs of different lengths read
alike. Runs whose profile is unsupported or failed are listed in the notes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Sequence, Tuple

from kbench.backends import BACKENDS
from kbench.profiling import PHASES
from kbench.results.result import RunResult
from kbench.views.tables import Table


def profiled(results: Sequence[RunResult]) -> List[RunResult]:
    """Finished runs that asked for a profile, in backend order."""
    order = {name: i for i, name in enumerate(BACKENDS)}
    found = [r for r in results if r.ok and isinstance(r.metrics.get("profile"), dict)]
    return sorted(
        found,
        key=lambda r: (
            r.config.get("model", ""),
            order.get(r.config.get("backend"), 99),
            r.started_at,
        ),
    )


def run_label(result: RunResult) -> str:
    config = result.config
    return f"{config.get('model')} / {config.get('backend')} ({config.get('mode', 'train')})"


def _ms_per_step(seconds: float, profile: Dict[str, Any]) -> str:
    return f"{seconds * 1e3 / max(profile.get('steps') or 1, 1):.2f}"


def phase_table(results: Sequence[RunResult]) -> Tuple[Table, List[str]]:
    rows, notes = [], []
    for result in results:
        profile = result.metrics["profile"]
        if profile.get("status") != "ok":
            notes.append(f"{run_label(result)}: {profile.get('status')}: {profile.get('reason')}")
            continue
        total = profile.get("op_time_s") or 0.0
        phases = profile.get("phases_s", {})
        rows.append(
            [
                run_label(result),
                str(profile.get("steps")),
                _ms_per_step(total, profile),
                *[f"{phases.get(p, 0.0) / total:.0%}" if total else "-" for p in PHASES],
                profile.get("tool", ""),
            ]
        )
    table = Table(
        title="Profiled operator time by phase (kbench run --profile)",
        headers=["run", "steps", "op ms/step", *PHASES, "profiler"],
        rows=rows,
        notes=[
            "op ms/step: the operators' self time per step, summed over threads (on a CPU "
            "it can exceed the step's wall time); the profiled steps ran after the measured "
            "ones, so throughput is measured without the profiler",
        ],
    )
    return table, notes


def common_ops_table(results: Sequence[RunResult]) -> List[Table]:
    """Per model: milliseconds per step in each common operator, backends as columns."""
    by_model: Dict[str, List[RunResult]] = defaultdict(list)
    for result in results:
        if result.metrics["profile"].get("status") == "ok":
            by_model[result.config.get("model", "?")].append(result)
    found = []
    for model, runs in by_model.items():
        columns: Dict[str, Dict[str, Any]] = {}
        for run in runs:  # newest wins where a backend ran twice
            columns[f"{run.config.get('backend')} ({run.config.get('mode', 'train')})"] = (
                run.metrics["profile"]
            )
        names: Dict[str, float] = defaultdict(float)
        for profile in columns.values():
            for name, seconds in profile.get("common_ops_s", {}).items():
                names[name] += seconds
        rows = [
            [name]
            + [
                _ms_per_step(p["common_ops_s"][name], p)
                if name in p.get("common_ops_s", {})
                else "-"
                for p in columns.values()
            ]
            for name in sorted(names, key=lambda n: -names[n])
        ]
        found.append(
            Table(
                title=f"{model}: ms per step in each common operator (kbench ops names)",
                headers=["operator", *columns],
                rows=rows,
                notes=[
                    "each framework's operators mapped to the names `kbench ops` benchmarks; "
                    "elementwise arithmetic, copies and the optimizer's maths are left out"
                ],
            )
        )
    return found


def top_ops_table(result: RunResult, top: int = 10) -> Table:
    profile = result.metrics["profile"]
    steps = max(profile.get("steps") or 1, 1)
    rows = [
        [
            str(rank),
            entry["op"],
            entry["phase"],
            entry.get("common") or "",
            f"{entry['seconds'] * 1e3 / steps:.3f}",
            f"{entry['share']:.1%}",
            f"{entry['calls_per_step']:g}",
            ", ".join(entry.get("layers", [])[:3]),
        ]
        for rank, entry in enumerate(profile.get("top_ops", [])[:top], start=1)
    ]
    return Table(
        title=f"Top operators: {run_label(result)}, {profile.get('device')}, "
        f"batch {profile.get('batch_size')}",
        headers=["#", "operator", "phase", "common", "ms/step", "share", "calls/step", "layers"],
        rows=rows,
        notes=[f"how phases were told apart: {profile.get('attribution')}"],
    )


def profile_tables(results: Sequence[RunResult]) -> List[Table]:
    """Every profile table for ``results``; none when no run was profiled."""
    runs = profiled(results)
    if not runs:
        return []
    phases, failures = phase_table(runs)
    phases.notes.extend(failures)
    ok = [r for r in runs if r.metrics["profile"].get("status") == "ok"]
    return [phases, *common_ops_table(ok), *[top_ops_table(r) for r in ok]]
