"""A sweep's comparisons in warm interleaved windows (``measure: windows``, ``kbench sweep
--windows``, ``kbench reproduce --reduced`` of a study whose claims are backend ratios).

:func:`kbench.studies.sweep.in_windows` has made each setting's runs one comparison (a
run per backend, with ``window_s``); each is measured as ``kbench run`` measures several
backends (:func:`kbench.studies.rounds.run_plan`), one after another, and the settings
that need fresh processes run as a sweep's runs always do.

Resuming: a comparison's documents (one per backend, :mod:`kbench.results.comparison`)
are in the store from its first round on, without their sweep provenance; once it has
stopped, :func:`mark` writes them again with it (``sweep.run_key`` its backend's run, so
the plan finds the run done; ``sweep.windows.comparison`` and ``.stopped``). A comparison
cut short (Ctrl-C, a kill, a full disk) is measured again whole, its earlier documents
first marked superseded (:data:`SUPERSEDED`) so that nothing counts them beside the new.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from kbench.results.analysis import compare
from kbench.results.comparison import is_comparison
from kbench.results.config import ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.run.runner import Runner
from kbench.studies import rounds
from kbench.studies.sweep import (
    Progress,
    Sweep,
    SweepRun,
    ToDo,
    comparisons,
    fresh_reason,
    in_windows,
    run_key,
    sweep_plan,
    sweep_run_of,
)
from kbench.views.tables import interval_text, render, setting_cell

log = logging.getLogger(__name__)

SUPERSEDED = (
    "superseded: its sweep comparison was measured again from the start (it had been cut "
    "short, or --force / --retry-failed asked)"
)


def comparison_key(runs: Sequence[SweepRun]) -> str:
    """A comparison's identity: a hash of its runs' keys."""
    joined = ",".join(sorted(run.key for run in runs))
    return hashlib.sha1(joined.encode()).hexdigest()[:16]


def windowed(runs: Sequence[SweepRun]) -> bool:
    return runs[0].config.window_s is not None


def comparisons_of(sweep: Sweep) -> List[List[SweepRun]]:
    """The comparisons of ``sweep`` measured in windows, in order."""
    return [group for group in comparisons(sweep.runs) if windowed(group)]


def whole_comparisons(sweep: Sweep, plan: ToDo) -> ToDo:
    """``plan`` with every comparison in windows that has a run to do run whole: its
    backends are measured together or not at all."""
    to_run = {run.key for run in plan.to_run}
    for group in comparisons(sweep.runs):
        if windowed(group) and any(run.key in to_run for run in group):
            to_run |= {run.key for run in group}
    return ToDo(
        [run for run in sweep.runs if run.key in to_run],
        [(run, status) for run, status in plan.done if run.key not in to_run],
    )


# what the plan says ----------------------------------------------------------------


def label_of(config: RunConfig, varying: Sequence[str]) -> str:
    """``mlp batch_size=16``: the model and the other settings that vary in the sweep."""
    rest = [v for v in varying if v not in ("backend", "model", "repeat", "window_s")]
    return " ".join([config.model, *(f"{v}={setting_cell(getattr(config, v))}" for v in rest)])


def plan_text(sweep: Sweep, states: Dict[str, str], varying: Sequence[str]) -> str:
    """The plan of a sweep in windows: one row per comparison (its backends, how it is
    measured, its state), then what the windows do."""
    rows = []
    for i, group in enumerate(comparisons(sweep.runs), start=1):
        configs = [run.config for run in group]
        backends = list(dict.fromkeys(c.backend for c in configs))
        if windowed(group):
            how = "warm windows"
        else:
            repeats = len({c.repeat for c in configs})
            how = f"fresh x{repeats}: {fresh_reason(configs)}"
        kinds = sorted({states[run.key] for run in group})
        rows.append([str(i), label_of(configs[0], varying), ", ".join(backends), how,
                     " / ".join(kinds)])  # fmt: skip
    table = render(["#", "setting", "backends", "measured in", "state"], rows)
    assert sweep.windows is not None
    return f"{table}\nwarm windows: {sweep.windows.text()}"


# running ---------------------------------------------------------------------------


@dataclasses.dataclass
class EarlierWindows:
    """The comparison documents the store held before this invocation, by the key of the
    sweep run whose worker measured them (read once: :meth:`read`)."""

    store: Path
    by_run: Dict[str, List[RunResult]]

    @classmethod
    def read(cls, store: Path, sweep: Sweep) -> EarlierWindows:
        found = ResultStore(store)
        by_run: Dict[str, List[RunResult]] = {}
        if not found.exists():
            return cls(store, by_run)
        for result in found.results():
            if result.superseded or not is_comparison(result):
                continue
            key = _worker_run(result, sweep.name)
            if key is not None:
                by_run.setdefault(key, []).append(result)
        return cls(store, by_run)

    def supersede(self, runs: Sequence[SweepRun]) -> int:
        """Mark superseded (:data:`SUPERSEDED`) the earlier documents of ``runs``; how many
        windows they held."""
        store = ResultStore(self.store)
        count = 0
        for run in runs:
            for result in self.by_run.pop(run.key, []):
                window = dict(result.metrics["window"], superseded=SUPERSEDED)
                store.add(replace(result, metrics=dict(result.metrics, window=window)))
                count += len(result.metrics["windows"]["list"])
        return count


def _worker_run(result: RunResult, sweep_name: str) -> Optional[str]:
    """The sweep run whose worker measured this window: from its provenance, or (a
    comparison cut short before its windows were marked) from its settings."""
    if result.sweep is not None:
        return sweep_run_of(result) if result.sweep.get("name") == sweep_name else None
    try:
        return run_key(RunConfig.from_dict(dict(result.config, repeat=0)))
    except (ConfigError, TypeError, ValueError):
        return None


def run_comparisons(
    sweep: Sweep, to_run: Sequence[SweepRun], runner: Runner, progress: Progress,
    varying: Sequence[str], baseline: Optional[str] = None,
) -> List[RunResult]:  # fmt: skip
    """The runs of ``to_run`` that need fresh processes, then each comparison in windows
    (:func:`measure_comparison`); every result is in the store as this returns."""
    assert sweep.windows is not None
    fresh = [run for run in to_run if run.config.window_s is None]
    results: List[RunResult] = []
    if fresh:
        results += rounds.run_plan(sweep_plan(sweep, fresh), runner, report=progress)[0]
    groups = [g for g in comparisons(to_run) if windowed(g)]
    earlier = EarlierWindows.read(runner.output_dir, sweep)
    for i, group in enumerate(groups, start=1):
        label = label_of(group[0].config, varying)
        backends = ", ".join(run.config.backend for run in group)
        what = f"comparison {i}/{len(groups)}, {label}: {backends} in warm windows"
        progress.write(progress.line(what))
        dropped = earlier.supersede(group)
        if dropped:
            progress.write(f"  {label}: {dropped} earlier window(s) {SUPERSEDED}")
        started = time.monotonic()
        found, reason = measure_comparison(runner, sweep, group, baseline)
        seconds = (time.monotonic() - started) / len(group)
        for result in found:  # a document per backend
            progress.finished(result, seconds)
        results += found
        progress.write(progress.line(f"{label}: {summary(found, baseline)}; stopped: {reason}"))
    return results


def measure_comparison(
    runner: Runner, sweep: Sweep, group: Sequence[SweepRun], baseline: Optional[str] = None
) -> Tuple[List[RunResult], str]:
    """One comparison's backends in warm interleaved windows until its stop rule says
    (:func:`kbench.studies.rounds.run_plan`); its results, marked (:func:`mark`), and
    why it stopped."""
    assert sweep.windows is not None
    settings = sweep.windows
    configs = [run.config for run in group]
    plan = rounds.windows_plan(configs, baseline, settings.ratio_precision, settings.ratio_budget_s)
    found, reason = rounds.run_plan(plan, runner)
    return mark(runner.output_dir, sweep, group, found, reason), reason


def mark(
    store: Path, sweep: Sweep, group: Sequence[SweepRun], found: Sequence[RunResult], reason: str
) -> List[RunResult]:
    """Write ``found`` (a document per backend) again with their sweep provenance (module
    docstring). The marked results, in their order."""
    by_backend = {run.config.backend: run for run in group}
    comparison = comparison_key(group)
    marked = []
    for result in found:
        run = by_backend[result.config["backend"]]
        windows = {"run_key": run.key, "comparison": comparison, "stopped": reason}
        marked.append(replace(result, sweep=dict(sweep.provenance(run), windows=windows)))
    ResultStore(store).add_all(marked)  # each tried; those the store cannot take kept aside
    return marked


def summary(found: Sequence[RunResult], baseline: Optional[str] = None) -> str:
    """``12 rounds (1 dropped); torch x0.83 (95%: 0.80-0.85)``: each backend's ratio to
    the baseline, with its interval, over the rounds that count."""
    windows = [w for r in found for w in (r.metrics.get("windows") or {}).get("list") or []]
    rounds_ran = {w["round"] for w in windows if w.get("status") == "ok"}
    dropped = {w["round"] for w in windows if w.get("dropped")}
    parts = [f"{len(rounds_ran)} rounds" + (f" ({len(dropped)} dropped)" if dropped else "")]
    if not rounds_ran:
        parts.append("no round counted, so no ratio")
    for group in compare(found, baseline):
        for row in group.rows:
            if row.backend == group.baseline:
                continue
            interval = row.ratio_interval
            if not row.all_ok:
                parts.append(f"{row.backend} " + ", ".join(sorted(row.statuses)).upper())
            elif interval is None:
                parts.append(f"{row.backend}: no ratio")
            else:
                parts.append(f"{row.backend} / {group.baseline} {interval_text(interval, '.3f')}")
    return "; ".join(parts)


def as_asked(
    sweep: Sweep,
    windows: Optional[bool] = None,
    window_s: Optional[float] = None,
    ratio_precision: Optional[float] = None,
    ratio_budget_s: Optional[float] = None,
) -> Sweep:
    """``sweep`` measured as the file (``windows`` None) or the command line (True:
    ``--windows``, False: ``--fresh-processes``) asks: in windows (:func:`in_windows`, the file's
    window settings with the given ones on top), or as the file's runs. A window setting
    given for a sweep of fresh processes is refused."""
    on = sweep.measure == "windows" if windows is None else windows
    given = {"window_s": window_s, "ratio_precision": ratio_precision,
             "ratio_budget_s": ratio_budget_s}  # fmt: skip
    given = {name: value for name, value in given.items() if value is not None}
    if not on:
        if given:
            flag = {"window_s": "--window", "ratio_precision": "--ratio-precision",
                    "ratio_budget_s": "--ratio-budget"}[next(iter(given))]  # fmt: skip
            raise ConfigError(
                flag.lstrip("-").replace("-", "_"),
                f"expected {flag} with warm windows (measure: windows in {sweep.file}, or "
                f"--windows); received it for a sweep of fresh processes. Add --windows, "
                "or drop it.",
            )
        return sweep
    return in_windows(sweep, replace(sweep.window_settings, **given))
