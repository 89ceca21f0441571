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
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional

from kbench.results.config import ConfigError, FileError
from kbench.results.store import INDEX_NAME
from kbench.run.runner import Runner
from kbench.studies.slurm import (
    is_slurm_record,
    move_documents,
    newest_entries,
    ran_since,
    task_units,
)
from kbench.studies.sweep import Progress, SweepRun, execute, load_sweep

log = logging.getLogger("kbench")


def task_runs(manifest: dict, index: int) -> tuple:
    """The sweep and the runs of task ``index``; ConfigError when the file no longer
    declares one of them."""
    sweep = load_sweep(Path(manifest["sweep_file"]), manifest["reduced"], manifest["max_runs"])
    by_key = {run.key: run for run in sweep.runs}
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
    runner = Runner(output_dir=own, busy_threshold=manifest["busy_threshold"])
    progress = Progress(total=len(runs))
    lost = 0
    units = task_units(runs, "run", manifest["warm"])
    with runner.session([run.config for run in runs]) as session:
        for unit in units:
            todo = _not_done(unit, store, manifest["submitted_at"])
            if not todo:
                continue
            execute(sweep, todo, session, progress, warm=manifest["warm"])
            lost += move_documents(own, store)
    (own / INDEX_NAME).unlink(missing_ok=True)
    return 1 if lost else 0


def _not_done(unit: List[SweepRun], store: Path, submitted_at: str) -> List[SweepRun]:
    newest = newest_entries(store)
    todo = []
    for run in unit:
        entry = newest.get(run.key)
        if ran_since(entry, submitted_at) and not is_slurm_record(entry):
            log.info("%s: already in %s, not run again", run.config.label(), store)
        else:
            todo.append(run)
    return todo


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
