"""One task of a sweep submitted to Slurm (:mod:`kbench.studies.slurm`), on its node:
``python -m kbench.studies.slurm_node STORE/.slurm/<submission>/tasks.json``.

The task reads its runs (``SLURM_ARRAY_TASK_ID``'s run keys) from the sweep file,
skips each run the store already has a result of from this submission (a task requeued
by Slurm runs nothing twice), and runs the others in fresh worker processes into its
own folder (``task-<i>/``, under that folder's writer lock: the sweep's lock, held by
the submitter, is not waited on). As each run (or warm worker) ends, its document and
log move into the store with ``os.replace``: atomic on one filesystem, so a reader sees
whole documents. Exits 0 when every run of the task has its result in the store, 1
when one could not be moved there, 2 when the task cannot start (its file changed).

A task of a sweep in warm windows (the manifest's ``windows``) that is one comparison
(:func:`run_comparison`) measures it as a local sweep does
(:func:`kbench.studies.sweep_windows.measure_comparison`: its backends' warm workers
side by side in this allocation, a window each in turn), into its folder; once the
comparison has stopped and its windows are marked, they move into the store, the first
round's last. It is measured whole, or not at all when every backend's run already has
its result from this submission; windows a killed attempt of the task left (Slurm
requeued it) are superseded first.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional

from kbench.distributed.launcher import run_distributed
from kbench.results.config import ConfigError, FileError
from kbench.results.store import INDEX_NAME, IndexEntry
from kbench.run.runner import Runner
from kbench.studies import sweep_windows
from kbench.studies.slurm import (
    is_slurm_record,
    move_documents,
    newest_entries,
    ran_since,
    task_units,
)
from kbench.studies.sweep import (
    Progress,
    Sweep,
    SweepRun,
    WindowSettings,
    execute,
    in_windows,
    load_sweep,
)

log = logging.getLogger("kbench")


def task_runs(manifest: dict, index: int) -> tuple:
    """The sweep and the runs of task ``index``; ConfigError when the file no longer
    declares one of them. A sweep in warm windows (the manifest's ``windows``) is
    returned so (:func:`~kbench.studies.sweep.in_windows`), and a task's runs are found
    among its comparisons' runs and the file's own (a setting the submitter kept in fresh
    processes, one backend after --filter, keeps its keys)."""
    sweep = load_sweep(Path(manifest["sweep_file"]), manifest["reduced"], manifest["max_runs"])
    by_key = {run.key: run for run in sweep.runs}
    if manifest.get("windows") is not None:
        sweep = in_windows(sweep, WindowSettings(**manifest["windows"]))
        by_key.update({run.key: run for run in sweep.runs})
    keys = manifest["tasks"][index]
    missing = [key for key in keys if key not in by_key]
    if missing:
        raise ConfigError(
            "sweep",
            f"expected {manifest['sweep_file']} to declare the runs submitted with it; "
            f"{len(missing)} of task {index}'s runs are gone (the file changed after "
            "submission). Run kbench sweep again: it submits the file as it is now.",
        )
    return sweep, [by_key[key] for key in keys]


def run_task(manifest_path: Path, index: int) -> int:
    manifest = json.loads(manifest_path.read_text())
    sweep, runs = task_runs(manifest, index)
    store = Path(manifest["store"])
    own = manifest_path.parent / f"task-{index}"
    log.info("task %d: %s", index, ", ".join(run.config.label() for run in runs))
    runner = Runner(
        output_dir=own, busy_threshold=manifest["busy_threshold"], data_parallel=run_distributed
    )
    if sweep_windows.windowed(runs):
        lost = run_comparison(sweep, runs, runner, store, manifest)
    else:
        lost = _run_fresh(sweep, runs, runner, store, manifest)
    (own / INDEX_NAME).unlink(missing_ok=True)
    return 1 if lost else 0


def _run_fresh(
    sweep: Sweep, runs: List[SweepRun], runner: Runner, store: Path, manifest: dict
) -> int:
    """The task's runs in fresh processes (or warm workers' runs), each not yet done;
    the number of documents not moved into the store."""
    progress = Progress(total=len(runs))
    lost = 0
    units = task_units(runs, "run", manifest["warm"])
    with runner.session([run.config for run in runs]) as session:
        for unit in units:
            todo = _not_done(unit, store, manifest["submitted_at"])
            if not todo:
                continue
            execute(sweep, todo, session, progress, warm=manifest["warm"])
            lost += move_documents(runner.output_dir, store)
    return lost


def run_comparison(
    sweep: Sweep, runs: List[SweepRun], runner: Runner, store: Path, manifest: dict
) -> int:
    """The task's comparison in warm windows (module docstring); the number of
    documents not moved into the store."""
    newest = newest_entries(store)
    if all(_done(newest.get(run.key), manifest["submitted_at"]) for run in runs):
        log.info("this comparison is in %s already: not measured again", store)
        return 0
    own = runner.output_dir
    dropped = sweep_windows.EarlierWindows.read(own, sweep).supersede(runs)
    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:  # a requeued task's moved ones
        dropped += sweep_windows.EarlierWindows.read(store, sweep).supersede(runs)
    if dropped:
        log.info("%d earlier window(s) %s", dropped, sweep_windows.SUPERSEDED)
    baseline = manifest.get("baseline")
    found, reason = sweep_windows.measure_comparison(runner, sweep, runs, baseline)
    log.info("%s; stopped: %s", sweep_windows.summary(found, baseline), reason)
    first = {r.run_id for r in found if int(r.config.get("repeat", 0)) == 0}
    return move_documents(own, store, last=first)


def _not_done(unit: List[SweepRun], store: Path, submitted_at: str) -> List[SweepRun]:
    newest = newest_entries(store)
    todo = []
    for run in unit:
        if _done(newest.get(run.key), submitted_at):
            log.info("%s: already in %s, not run again", run.config.label(), store)
        else:
            todo.append(run)
    return todo


def _done(entry: Optional[IndexEntry], submitted_at: str) -> bool:
    """Whether ``entry`` is a result a run of this submission wrote itself."""
    return entry is not None and ran_since(entry, submitted_at) and not is_slurm_record(entry)


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    index = os.environ.get("SLURM_ARRAY_TASK_ID")
    if len(args) != 1 or index is None or not index.isdigit():
        log.error(
            "expected: python -m kbench.studies.slurm_node TASKS.json, in a Slurm array task "
            "(SLURM_ARRAY_TASK_ID set); received %s with SLURM_ARRAY_TASK_ID=%s",
            args, index,
        )  # fmt: skip
        return 2
    try:
        return run_task(Path(args[0]), int(index))
    except (ConfigError, FileError) as err:
        log.error("%s", err)
        return 2


if __name__ == "__main__":
    sys.exit(main())
