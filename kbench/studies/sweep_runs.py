"""A sweep run against its store: the runs a filter selects, the plan (what the store
already holds, what runs now), and the runs, made under the store's writer lock.

``kbench sweep`` and ``kbench reproduce`` both come through here; the CLI prints what
these functions return::

    sweep = select_runs(load_sweep(path, reduced=True), ["backend=jax,torch"])
    with planned_sweep(sweep, store_for(sweep), lock=True) as planned:
        results = run_planned(planned, on_progress=print_event)
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from kbench.distributed.launcher import run_distributed
from kbench.measure import quality
from kbench.results import store as store_mod
from kbench.results.config import ConfigError, RunConfig
from kbench.results.lock import writer_lock
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore
from kbench.run.runner import Runner, look_before_runs
from kbench.studies import rounds, sweep_windows
from kbench.studies.sweep import RUN_FIELDS, Progress, Sweep, SweepError, ToDo, sweep_plan, to_do
from kbench.views import machines

log = logging.getLogger(__name__)


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
        planned = to_do(sweep, done, force, retry_failed)
        if sweep.windows is not None:  # a comparison in windows runs whole or not at all
            planned = sweep_windows.whole_comparisons(sweep, planned)
        yield PlannedSweep(
            sweep=sweep,
            varying=list(sweep.varying() if varying is None else varying),
            store=store,
            plan=planned,
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


def run_planned(
    planned: PlannedSweep,
    *,
    warm: bool = False,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    on_progress: Optional[Callable[[RunConfig, Dict], None]] = None,
    baseline: Optional[str] = None,
) -> List[RunResult]:
    """Run what the plan says is not done; each result is in the store as it returns.
    A sweep in windows (``sweep.windows``) measures its comparisons so
    (:func:`kbench.studies.sweep_windows.run_comparisons`; ``baseline``: each one's
    baseline where it has that backend). Raises :class:`SweepStopped` when a result
    cannot be written."""
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
    try:
        if sweep.windows is not None:
            return sweep_windows.run_comparisons(
                sweep, to_run, runner, progress, planned.varying, baseline
            )
        return rounds.run_plan(sweep_plan(sweep, to_run, warm), runner, report=progress)[0]
    except store_mod.StoreWriteError as err:
        not_started = (
            "the rest were not saved (a warm worker's runs are saved as it ends)"
            if warm
            else "the comparison in progress is measured again whole when you resume"
            if sweep.windows is not None
            else f"{len(to_run) - progress.done - 1} not started"
        )
        raise SweepStopped(
            f"{err}\nsweep {planned.sweep.name} stopped: {progress.done} runs of this "
            f"invocation finished and are saved, {not_started}. Free some space, then run "
            "the same command again: it resumes, skipping the runs that are done."
        ) from err


def stored_results(store: Path, sweep: Sweep) -> List[RunResult]:
    """The newest result of every run of ``sweep`` that ``store`` holds (all of the
    file's runs, not only the selected ones), on each machine that ran it (a store
    merged from machines that ran the same file keeps each one's)."""
    stored = ResultStore(store).results([Filter("sweep", (sweep.name,))], latest_only=False)
    return machines.newest_per_machine(stored)
