"""A sweep run against its store: the runs a filter selects, the plan (what the store
already holds, what runs now), and the runs, made under the store's writer lock.

``kbench sweep`` and ``kbench reproduce`` both come through here; the CLI prints what
these functions return::

    sweep = select_runs(load_sweep(path, reduced=True), ["backend=jax,torch"])
    with planned_sweep(sweep, store_for(sweep), lock=True) as planned:
        results = run_planned(planned, on_progress=print_event)

Every kind of sweep is plans for :func:`kbench.studies.rounds.run_plan`
(:func:`sweep_plans`): the runs in fresh processes one plan, grouped by repeat, and, in
warm interleaved windows (``measure: windows``, ``kbench sweep --windows``, ``kbench
reproduce --reduced`` of a study whose claims are backend ratios), each comparison its
own: :func:`kbench.studies.sweep.in_windows` has made each setting's runs one comparison
(a run per backend, with ``window_s``), measured as ``kbench run`` measures several
backends, one after another.

Resuming: a comparison's documents (one per backend, :mod:`kbench.results.comparison`)
are in the store from its first round on, without their sweep provenance; once it has
stopped, :func:`mark` writes them again with it (``sweep.run_key`` its backend's run, so
the plan finds the run done; ``sweep.windows.comparison`` and ``.stopped``). A comparison
cut short (Ctrl-C, a kill, a full disk) is measured again whole, its earlier documents
first marked superseded (:data:`SUPERSEDED`) so that nothing counts them beside the new.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from kbench.distributed.launcher import run_distributed
from kbench.measure import quality
from kbench.results import store as store_mod
from kbench.results.analysis import compare
from kbench.results.comparison import is_comparison
from kbench.results.config import ConfigError, RunConfig, flag_for
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore, writer_lock
from kbench.run.runner import Runner, look_before_runs
from kbench.studies import rounds
from kbench.studies.sweep import (
    RUN_FIELDS,
    Progress,
    Sweep,
    SweepError,
    SweepRun,
    ToDo,
    comparisons,
    comparisons_of,
    fresh_reason,
    in_windows,
    run_key,
    sweep_plan,
    sweep_run_of,
    to_do,
    windowed,
)
from kbench.views import machines
from kbench.views.tables import interval_text, render, setting_cell

log = logging.getLogger(__name__)

SUPERSEDED = (
    "superseded: its sweep comparison was measured again from the start (it had been cut "
    "short, or --force / --retry-failed asked)"
)


class SweepStopped(RuntimeError):
    """A result could not be written (a full disk): the runs finished so far are saved;
    the message says how many and how to resume."""


@dataclass(frozen=True)
class PlannedSweep:
    """The selected runs of a sweep, planned against the store that holds its results."""

    sweep: Sweep  # only the selected runs
    varying: List[str]  # the settings that vary in the whole file, in RunConfig order
    store: Path
    plan: ToDo

    def states(self) -> List[str]:
        """Each selected run's state, in order: "done (ok)" (its newest result's status) or
        "to run"."""
        status = {id(run): status for run, status in self.plan.done}
        return [
            f"done ({status[id(run)]})" if id(run) in status else "to run"
            for run in self.sweep.runs
        ]


def store_for(sweep: Sweep) -> Path:
    """Where a sweep's results go by default: results/NAME, results/NAME-reduced."""
    return Path("results") / (sweep.name + ("-reduced" if sweep.reduced else ""))


def select_runs(sweep: Sweep, filters: Sequence[str]) -> Sweep:
    """The runs of ``sweep`` whose settings pass every ``NAME=VALUE[,VALUE]`` filter.
    A filter on no run setting, or one that keeps nothing, is refused with the values
    the file has; a value no run has beside one that matches is warned about."""
    parsed = [Filter.parse(f) for f in filters]
    for f in parsed:
        if f.name not in RUN_FIELDS:
            raise SweepError(sweep.file, "--filter", f"unknown setting {f.name!r}")
    runs = [
        run
        for run in sweep.runs
        if all(str(getattr(run.config, f.name, None)) in f.values for f in parsed)
    ]
    if not runs and parsed:
        raise SweepError(sweep.file, "--filter", _selects_nothing(sweep, parsed))
    for f in parsed:  # a typo beside a good value drops runs without a word otherwise
        present = {str(getattr(run.config, f.name)) for run in sweep.runs}
        for value in f.values:
            if value not in present:
                log.warning(
                    "--filter %s=%s: no run of %s has %s=%s; its values: %s",
                    f.name, value, sweep.file, f.name, value, ", ".join(sorted(present)),
                )  # fmt: skip
    return replace(sweep, runs=runs)


def _selects_nothing(sweep: Sweep, filters: Sequence[Filter]) -> str:
    """Which values each filtered setting has in the file, for filters that kept no run."""
    parts = []
    for f in filters:
        values = sorted({str(getattr(run.config, f.name)) for run in sweep.runs})
        shown = ", ".join(values[:20]) + (
            f" (and {len(values) - 20} more)" if len(values) > 20 else ""
        )
        parts.append(f"{f.name} has {shown}")
    given = " ".join(f"--filter {f.name}={','.join(f.values)}" for f in filters)
    return (
        f"expected a filter that keeps at least one of the file's {len(sweep.runs)} runs; "
        f"{given} keeps none. In this file {'; '.join(parts)}."
    )


@contextlib.contextmanager
def planned_sweep(
    sweep: Sweep,
    store: Path,
    *,
    varying: Optional[Sequence[str]] = None,
    force: bool = False,
    retry_failed: bool = False,
    lock: bool = True,
) -> Iterator[PlannedSweep]:
    """Plan ``sweep`` against ``store``, holding the store's writer lock (``lock``) until
    the block ends: a second sweep into this store is refused here instead of running
    the same runs again. A dry run only reads (``lock=False``). ``varying``: the settings
    that vary in the whole file, when ``sweep`` holds only some of its runs."""
    with writer_lock(store_mod.check_output_dir(store)) if lock else contextlib.nullcontext():
        results = ResultStore(store)
        done = results.done_keys() if results.exists() else {}
        for name, why in results.unreadable:
            log.warning("%s: skipped, its run counts as not done: %s", store / name, why)
        yield PlannedSweep(
            sweep=sweep,
            varying=list(sweep.varying() if varying is None else varying),
            store=store,
            plan=to_do(sweep, done, force, retry_failed),
        )


def check_warm(sweep: Sweep, warm: bool) -> None:
    """``--warm`` (fresh-process runs sharing a worker) refused for a sweep in windows."""
    if sweep.windows is not None and warm:
        raise ConfigError(
            "warm",
            "expected --warm for fresh-process runs only; received it with warm windows "
            "(measure: windows or --windows), whose workers are warm already. Drop --warm, "
            "or add --fresh-processes.",
        )


def sweep_plans(
    sweep: Sweep, runs: Sequence[SweepRun], warm: bool = False, baseline: Optional[str] = None
) -> List[Tuple[List[SweepRun], rounds.Plan]]:
    """``runs`` as plans for :func:`kbench.studies.rounds.run_plan`, each with its runs:
    those in fresh processes (or ``warm`` workers, or the file's ``warm``) one plan, round
    by round (:func:`~kbench.studies.sweep.sweep_plan`), then each comparison in warm windows its
    own (``baseline``'s worker first where it has that backend), until its stop rule says."""
    fresh = [run for run in runs if run.config.window_s is None]
    plans = [(fresh, sweep_plan(sweep, fresh, warm or sweep.warm))] if fresh else []
    for group in comparisons_of(runs):
        assert sweep.windows is not None
        settings = sweep.windows
        plan = rounds.windows_plan(
            [run.config for run in group], baseline, settings.ratio_precision,
            settings.ratio_budget_s,
        )  # fmt: skip
        plans.append((group, plan))
    return plans


def run_planned(
    planned: PlannedSweep,
    *,
    warm: bool = False,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    on_progress: Optional[Callable[[RunConfig, Dict], None]] = None,
    baseline: Optional[str] = None,
) -> List[RunResult]:
    """Run what the plan says is not done (:func:`sweep_plans`); each result is in the
    store as it returns (a comparison in windows: once it stops, :func:`mark`; its earlier
    documents superseded first). Raises :class:`SweepStopped` when a result cannot be written."""
    to_run = planned.plan.to_run
    if not to_run:
        return []
    sweep = planned.sweep
    check_warm(sweep, warm)
    progress = Progress(total=len(sweep.runs), skipped=len(planned.plan.done))
    look_before_runs(planned.store, len(to_run), busy_threshold, wait_quiet_s, "the sweep")
    runner = Runner(
        output_dir=planned.store, on_progress=on_progress, busy_threshold=busy_threshold,
        data_parallel=run_distributed,
    )  # fmt: skip
    plans = sweep_plans(sweep, to_run, warm, baseline)
    count = sum(1 for _, plan in plans if plan.schedule == "windows")
    earlier = EarlierWindows.read(planned.store, sweep) if count else None
    results: List[RunResult] = []
    index = 0
    try:
        for runs, plan in plans:
            if earlier is None or plan.schedule != "windows":
                results += rounds.run_plan(plan, runner, report=progress)[0]
                continue
            index += 1
            label = label_of(runs[0].config, planned.varying)
            backends = ", ".join(run.config.backend for run in runs)
            progress.write(progress.line(
                f"comparison {index}/{count}, {label}: {backends} in warm windows"
            ))  # fmt: skip
            dropped = earlier.supersede(runs)
            if dropped:
                progress.write(f"  {label}: {dropped} earlier window(s) {SUPERSEDED}")
            started = time.monotonic()
            found, reason = measure_comparison(runner, sweep, runs, plan)
            seconds = (time.monotonic() - started) / len(runs)
            for result in found:  # a document per backend
                progress.finished(result, seconds)
            results += found
            line = f"{label}: {summary(found, baseline)}; stopped: {reason}"
            progress.write(progress.line(line))
    except store_mod.StoreWriteError as err:
        not_started = (
            "the rest were not saved (a warm worker's runs are saved as it ends)"
            if warm or sweep.warm
            else "the comparison in progress is measured again whole when you resume"
            if sweep.windows is not None
            else f"{len(to_run) - progress.done - 1} not started"
        )
        raise SweepStopped(
            f"{err}\nsweep {planned.sweep.name} stopped: {progress.done} runs of this "
            f"invocation finished and are saved, {not_started}. Free some space, then run "
            "the same command again: it resumes, skipping the runs that are done."
        ) from err
    return results


def stored_results(store: Path, sweep: Sweep) -> List[RunResult]:
    """The newest result of every run of ``sweep`` that ``store`` holds (all of the
    file's runs, not only the selected ones), on each machine that ran it (a store
    merged from machines that ran the same file keeps each one's)."""
    stored = ResultStore(store).results([Filter("sweep", (sweep.name,))], latest_only=False)
    return machines.newest_per_machine(stored)


def comparison_key(runs: Sequence[SweepRun]) -> str:
    """A comparison's identity: a hash of its runs' keys."""
    joined = ",".join(sorted(run.key for run in runs))
    return hashlib.sha1(joined.encode()).hexdigest()[:16]


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
            shared = ", in warm workers (the file's warm)" if sweep.warm else ""
            how = f"fresh x{repeats}{shared}: {fresh_reason(configs)}"
        kinds = sorted({states[run.key] for run in group})
        rows.append([str(i), label_of(configs[0], varying), ", ".join(backends), how,
                     " / ".join(kinds)])  # fmt: skip
    table = render(["#", "setting", "backends", "measured in", "state"], rows)
    assert sweep.windows is not None
    return f"{table}\nwarm windows: {sweep.windows.text()}"


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


def measure_comparison(
    runner: Runner, sweep: Sweep, group: Sequence[SweepRun], plan: rounds.Plan
) -> Tuple[List[RunResult], str]:
    """One comparison's windows ``plan`` (:func:`sweep_plans`) run until its stop rule
    says; its results, marked (:func:`mark`), and why it stopped."""
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
            flag = flag_for(next(iter(given)))
            raise ConfigError(
                flag.lstrip("-").replace("-", "_"),
                f"expected {flag} with warm windows (measure: windows in {sweep.file}, or "
                f"--windows); received it for a sweep of fresh processes. Add --windows, "
                "or drop it.",
            )
        return sweep
    return in_windows(sweep, replace(sweep.window_settings, **given))
