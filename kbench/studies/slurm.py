"""A sweep's runs as the tasks of one Slurm job array, into the sweep's one store.

The submitter plans the sweep against its store as a local sweep does, holding the
store's writer lock; the runs to do become the tasks of one ``sbatch --array`` job
(``%N``: ``--max-parallel``). A task is the runs of one comparison (one setting and
repeat, every backend: their ratios are taken on one node), or with ``--per-task run``
one run, or with ``--warm`` one warm worker's runs. In warm windows
(:mod:`kbench.studies.sweep_runs`) a task is one comparison, measured on its node as a
local sweep measures it and submitted whole or not at all (:func:`runs_to_do`), the
windows an earlier task left superseded first (:func:`drop_earlier_windows`). A task runs
``python -m kbench.studies.slurm TASKS.json`` (:func:`main`) with the submitter's
interpreter, from its directory: the checkout, its environments and the store must be at
the same paths on a filesystem every node shares.

In the store, ``.slurm/<submission>/`` holds ``tasks.json`` (the sweep file, its
settings, each task's run keys; written before ``sbatch``), ``job.json`` (the job id,
after), ``task-<i>.out`` (a task's output), ``task-<i>/`` (its own working store, under
that folder's writer lock: no node waits on the sweep's) and ``settled.json`` once every
task has ended and been accounted for. A task skips each run the store has a result of
from this submission (a task Slurm requeued runs nothing twice) and moves each finished
run's document and log into the store with ``os.replace``, atomic on one filesystem (a
comparison's first round last); nodes never write the index, a cache every reader
reconciles with the documents (:mod:`kbench.results.store`). A task exits 0 when every
run has its result in the store, 1 when one could not be moved there, 2 when it cannot
start (its sweep file changed).

The submitter polls ``squeue`` (and ``sacct`` where accounting answers) and the store,
printing a line when a task or a count changes; Ctrl-C leaves the job running. The same
command again follows the store's earlier submissions, records each run a task left
without a result (the task failed, was cancelled, timed out, preempted, its node failed)
as a ``failed``, ``timeout`` or ``oom`` result whose reason is Slurm's (``sacct`` State
and Reason, exit code, node), which does not count as done, and submits what remains. A
result a run wrote itself counts as done, as in a local sweep.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Collection, Dict, List, Optional, Sequence, Set, Tuple

from kbench.distributed.launcher import run_distributed
from kbench.measure import sysinfo
from kbench.results import ending
from kbench.results.config import ConfigError, FileError
from kbench.results.jsonfile import refuse_link, write_text_atomic
from kbench.results.result import RunResult
from kbench.results.store import INDEX_NAME, IndexEntry, ResultStore, latest_per_run
from kbench.run.runner import Runner
from kbench.studies import rounds
from kbench.studies.sweep import (
    Progress,
    Sweep,
    SweepRun,
    WindowSettings,
    comparisons_of,
    in_windows,
    load_sweep,
    sweep_plan,
    to_do,
    windowed,
    worker_groups,
)
from kbench.studies.sweep_runs import (
    SUPERSEDED,
    EarlierWindows,
    label_of,
    measure_comparison,
    summary,
    sweep_plans,
)

log = logging.getLogger(__name__)

SLURM_DIR = ".slurm"  # in the store
PER_TASK = ("comparison", "run")
# States a task leaves only to end (or, preempted with requeue, to be pending again).
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT", "UNLISTED")  # fmt: skip
STATUS_OF_STATE = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}
# why a task waited (sacct keeps the last one on an ended task): not why it ended
WAITING = ("Priority", "Resources", "Dependency", "BeginTime", "ReqNodeNotAvail")
RECORD_PART = "slurm"  # run ids of the records of runs a Slurm task left without a result
# kbench's own: sbatch takes any unambiguous prefix of a long option (--arr) and clusters
# of short ones (-vo FILE), so both are refused (:func:`own_option`)
OWN_OPTIONS = ("--array", "--output", "--error", "--parsable", "--wrap")
OWN_LETTERS = "aoe"
# sbatch's short options that take a value: the rest of a cluster after one is its value
VALUE_LETTERS = "ABbCcDdeFGiIJkLMmNnopqStwx"
JOB_ID = re.compile(r"[0-9]+")  # what sbatch --parsable prints (before any ";cluster")
FAILED_POLLS = 30  # squeue failing this many times in a row ends the wait (the jobs go on)


class SlurmError(RuntimeError):
    """A Slurm tool failed; the message says which, with what it printed."""


@dataclass(frozen=True)
class SlurmOptions:
    """``kbench sweep --executor slurm``'s settings, checked on creation."""

    partition: Optional[str] = None
    max_parallel: Optional[int] = None
    sbatch: Tuple[str, ...] = ()  # more sbatch options, as words
    per_task: str = "comparison"
    poll_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_parallel is not None and self.max_parallel < 1:
            raise ConfigError(
                "max_parallel",
                f"expected a positive number of tasks at a time; received {self.max_parallel}.",
            )
        if self.per_task not in PER_TASK:
            raise ConfigError(
                "per_task", f"expected one of {', '.join(PER_TASK)}; received {self.per_task!r}."
            )
        if not self.poll_s > 0:
            raise ConfigError("poll", f"expected seconds > 0; received {self.poll_s}.")
        for word in self.sbatch:
            if own_option(word):
                raise ConfigError(
                    "sbatch",
                    f"expected sbatch options other than the array, output and error, which "
                    f"kbench sets; received {word!r}. Drop it (--max-parallel sets the %N of "
                    "the array).",
                )

    @classmethod
    def parse_sbatch(cls, text: Optional[str]) -> Tuple[str, ...]:
        """``--sbatch "--gres=gpu:1 --time=00:30:00"`` as words (shell quoting)."""
        try:
            return tuple(shlex.split(text or ""))
        except ValueError as err:
            raise ConfigError(
                "sbatch", f"expected sbatch options in shell quoting; {err}: {text!r}."
            ) from None


def own_option(word: str) -> bool:
    """Whether sbatch would read ``word`` as one of kbench's own options: a prefix of
    one (``--arr=0-9``, ``--outp``), or a cluster of short ones that holds one (``-vo``)."""
    if word.startswith("--"):
        name = word[2:].split("=", 1)[0]
        return bool(name) and any(own.startswith("--" + name) for own in OWN_OPTIONS)
    for letter in word[1:] if word.startswith("-") else "":
        if letter in OWN_LETTERS:
            return True
        if letter in VALUE_LETTERS:  # what follows is its value
            return False
    return False


def check_tools() -> None:
    """Refuse (exit 2) a machine without Slurm's client tools on the PATH."""
    missing = [tool for tool in ("sbatch", "squeue", "scancel") if shutil.which(tool) is None]
    if missing:
        raise ConfigError(
            "executor",
            f"expected Slurm's {', '.join(missing)} on the PATH for --executor slurm; "
            "received none. Run the sweep on a Slurm login node, or use --executor local.",
        )


def check_windows(options: SlurmOptions) -> None:
    """Refuse (exit 2) what a sweep in warm windows cannot do on Slurm, before anything runs."""
    if options.per_task == "run":
        raise ConfigError(
            "per_task",
            "expected --per-task comparison (the default) for a sweep in warm windows: a "
            "comparison's backends are measured in turn by warm workers in one task, so its "
            "runs cannot be tasks of their own; received --per-task run. Drop --per-task run, "
            "or add --fresh-processes to run the file's fresh-process runs one per task.",
        )


def task_units(runs: Sequence[SweepRun], per_task: str, warm: bool) -> List[List[SweepRun]]:
    """The runs of each task, in the sweep's order. ``comparison``: the runs of one
    setting and repeat (every backend), so that their ratios are taken on one node (a
    comparison in warm windows, its runs one per backend with ``window_s``: one task that
    measures it whole); ``run``: one run each, or with ``warm`` the runs one warm worker
    shares."""
    if per_task == "run":
        return worker_groups(runs) if warm else [[run] for run in runs]
    units: Dict[str, List[SweepRun]] = {}
    for run in runs:
        settings = {k: v for k, v in run.config.to_dict().items() if k != "backend"}
        units.setdefault(json.dumps(settings, sort_keys=True, default=str), []).append(run)
    return list(units.values())


# Slurm's tools ---------------------------------------------------------------------


def _tool(command: List[str], check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmError(f"{' '.join(command[:2])}: {err}") from None
    if check and done.returncode != 0:
        raise SlurmError(
            f"{shlex.join(command)} exited {done.returncode}: "
            f"{' '.join((done.stderr or done.stdout).split())[:500]}"
        )
    return done


@dataclass(frozen=True)
class TaskState:
    """One array task as Slurm reports it."""

    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED by 0, ..., UNLISTED
    reason: str = ""
    exit_code: str = ""
    node: str = ""

    @property
    def word(self) -> str:
        return self.state.split()[0] if self.state else "UNLISTED"

    @property
    def ended(self) -> bool:
        return self.word in ENDED

    def describe(self) -> str:
        parts = [self.state]
        waited = self.ended and (self.reason.endswith("Limit") or self.reason in WAITING)
        if self.reason and self.reason not in ("None", "(null)") and not waited:
            parts.append(f"reason {self.reason}")
        if self.exit_code and self.exit_code != "0:0":
            parts.append(f"exit code {self.exit_code}")
        if self.node and self.node not in ("None assigned", "(null)"):
            parts.append(f"on {self.node}")
        return ", ".join(parts)


UNLISTED = TaskState(
    "UNLISTED",
    "neither squeue nor sacct lists it: cancelled before it started (Slurm keeps no record "
    "of an array task cancelled while pending), or its record expired",
)


@dataclass
class Queue:
    """``squeue`` and ``sacct`` for one job array's tasks; ``sacct`` only where the
    cluster's accounting answers (a cluster without it: squeue's record of ended tasks,
    kept for MinJobAge)."""

    accounting: Optional[bool] = None
    # (job, task) -> when squeue first showed it ended while sacct did not yet
    ending_since: Dict[Tuple[str, int], float] = field(default_factory=dict)
    accounting_lag_s: float = 30.0

    def states(self, job_id: str) -> Dict[int, TaskState]:
        found: Dict[int, TaskState] = {}
        if self.accounting is not False and shutil.which("sacct"):
            done = _tool(["sacct", "-n", "-P", "-X", "-j", job_id,
                          "-o", "JobID,State,Reason,ExitCode,NodeList"], check=False)  # fmt: skip
            self.accounting = done.returncode == 0
            if not self.accounting:
                log.debug("sacct: %s", (done.stderr or done.stdout).strip())
            found.update(_parse(done.stdout if self.accounting else "", job_id))
        done = _tool(["squeue", "-h", "-r", "--states=all", "-j", job_id,
                      "-o", "%i|%T|%r|-|%N"], check=False)  # fmt: skip
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            raise SlurmError(f"squeue -j {job_id}: {(done.stderr or done.stdout).strip()[:300]}")
        for index, state in _parse(done.stdout, job_id).items():
            if index not in found or not state.ended:  # squeue knows best what still runs
                found[index] = TaskState(state.state, state.reason, found.get(
                    index, state).exit_code, state.node)  # fmt: skip
            if self.accounting and state.ended and not found[index].exit_code:
                # accounting records an end a moment later: wait for its exit code
                since = self.ending_since.setdefault((job_id, index), time.monotonic())
                if time.monotonic() - since < self.accounting_lag_s:
                    found[index] = TaskState("COMPLETING", state.reason, "", state.node)
        return found


def _parse(text: str, job_id: str) -> Dict[int, TaskState]:
    """``JOB_TASK|State|Reason|...`` lines; collapsed ranges of pending tasks skipped
    (``squeue -r`` and ``sacct -X`` list each task that started or ended)."""
    out: Dict[int, TaskState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        job, _, task = parts[0].partition("_")
        if job != job_id or not task.isdigit():
            continue
        parts += [""] * 5
        if parts[3] and ":" not in parts[3]:  # squeue: the dependency column, no exit code
            parts[3] = ""
        out[int(task)] = TaskState(parts[1].strip(), parts[2].strip(), parts[3].strip(),
                                   parts[4].strip())  # fmt: skip
    return out


# submissions -------------------------------------------------------------------------


@dataclass
class Submission:
    """One ``sbatch --array`` of a sweep, as kept in ``STORE/.slurm/<name>/``."""

    directory: Path
    manifest: Dict
    job_id: Optional[str] = None
    states: Dict[int, TaskState] = field(default_factory=dict)

    @property
    def tasks(self) -> List[List[str]]:
        return self.manifest["tasks"]

    @property
    def submitted_at(self) -> str:
        return self.manifest["submitted_at"]

    def keys(self) -> Set[str]:
        return {key for task in self.tasks for key in task}

    def output(self, index: int) -> Path:
        return self.directory / f"task-{index}.out"

    def settle(self) -> None:
        write_text_atomic(self.directory / "settled.json", json.dumps({"job_id": self.job_id}))

    def all_ended(self) -> bool:
        return bool(self.states) and all(
            self.states.get(i, UNLISTED).ended for i in range(len(self.tasks))
        )


def open_submissions(store: Path) -> List[Submission]:
    """The store's submissions not yet settled, oldest first."""
    out = []
    for directory in sorted((store / SLURM_DIR).glob("*/")):
        job = directory / "job.json"
        if not job.is_file() or (directory / "settled.json").exists():
            continue
        try:
            manifest = json.loads((directory / "tasks.json").read_text())
            job_id = str(json.loads(job.read_text())["job_id"])
            if not JOB_ID.fullmatch(job_id):
                raise ValueError(f"expected a job id of digits; received {job_id[:200]!r}")
        except (OSError, ValueError, KeyError) as err:
            log.warning("%s: not read (%s); its tasks are not followed", directory, err)
            continue
        out.append(Submission(directory, manifest, job_id))
    return out


def submission_directory(store: Path, now: dt.datetime) -> Path:
    """``STORE/.slurm/<time>/``, made; a ``.slurm`` that is a link (planted to lead out of
    the store) is refused, naming it."""
    slurm = refuse_link(store.resolve() / SLURM_DIR)
    slurm.mkdir(exist_ok=True)
    directory = slurm / f"{now:%Y%m%dT%H%M%S%fZ}"
    directory.mkdir()
    return directory


def submit(
    sweep: Sweep, store: Path, units: Sequence[Sequence[SweepRun]], options: SlurmOptions,
    settings: Dict,
) -> Submission:  # fmt: skip
    """Write the manifest, ``sbatch --array`` the tasks, then write the job id."""
    now = dt.datetime.now(dt.timezone.utc)
    directory = submission_directory(store, now)
    manifest = dict(
        settings,
        sweep_file=str(Path(sweep.file).resolve()),
        reduced=sweep.reduced,
        store=str(store.resolve()),
        submitted_at=now.isoformat(),
        tasks=[[run.key for run in unit] for unit in units],
    )
    write_text_atomic(directory / "tasks.json", json.dumps(manifest, indent=1))
    script = directory / "task.sh"
    script.write_text(
        "#!/bin/sh\n# one task of a kbench sweep: its runs, by SLURM_ARRAY_TASK_ID\n"
        f"exec {shlex.quote(sys.executable)} -m kbench.studies.slurm "
        f"{shlex.quote(str(directory / 'tasks.json'))}\n"
    )
    array = f"0-{len(units) - 1}" + (f"%{options.max_parallel}" if options.max_parallel else "")
    command = ["sbatch", "--parsable", f"--array={array}", f"--job-name=kbench-{sweep.name}",
               f"--output={directory}/task-%a.out", f"--chdir={os.getcwd()}"]  # fmt: skip
    if options.partition:
        command.append(f"--partition={options.partition}")
    command += [*options.sbatch, str(script)]
    printed = _tool(command).stdout.strip()
    job_id = printed.split(";")[0]
    if not JOB_ID.fullmatch(job_id):  # another sbatch, or a wrapper: no job to follow
        raise SlurmError(
            f"sbatch: expected a job id (digits: its --parsable output); received "
            f"{printed[:200]!r}. Use Slurm's own sbatch; cancel any job this submitted."
        )
    write_text_atomic(directory / "job.json", json.dumps({"job_id": job_id}))
    return Submission(directory, manifest, job_id)


# results of the tasks ------------------------------------------------------------------


def move_documents(folder: Path, store: Path, last: Collection[str] = ()) -> int:
    """Move the result documents and logs a task wrote in its own ``folder`` into the
    store (``os.replace``: atomic on one filesystem), the documents of the run ids in
    ``last`` after the others (a comparison's first windows: it is done only when all of
    them are in); the number that could not be."""
    lost = 0
    moves = sorted(((p, store / p.name) for p in folder.glob("*.json")),
                   key=lambda move: move[0].stem in last)  # fmt: skip
    if (folder / "logs").is_dir():
        (store / "logs").mkdir(exist_ok=True)
        moves += [(p, store / "logs" / p.name) for p in (folder / "logs").iterdir()]
    for source, target in moves:
        try:
            os.replace(source, target)
        except OSError as err:
            log.error("%s: not moved into %s: %s", source, target.parent, err)
            lost += source.suffix == ".json"
    return lost


def is_slurm_record(entry: IndexEntry) -> bool:
    """Whether a stored result is kbench's record of a run a Slurm task left without one."""
    return entry.run_id.split("-")[1:2] == [RECORD_PART]


def newest_entries(store: Path) -> Dict[str, IndexEntry]:
    """run key -> the newest readable result of it in ``store``."""
    results = ResultStore(store)
    if not results.exists():
        return {}
    return {e.run_key: e for e in latest_per_run(results.entries()) if e.run_key}


def ran_since(entry: Optional[IndexEntry], submitted_at: str) -> bool:
    """Whether ``entry`` is a result of a submission made at ``submitted_at`` (or later)."""
    return entry is not None and _instant(entry.started_at) >= _instant(submitted_at)


def _instant(text: str) -> float:
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def record_ended(
    sweep: Sweep, submission: Submission, index: int, runs: Sequence[SweepRun], store: Path
) -> List[RunResult]:
    """Record each of ``runs`` (task ``index`` ended without their results) as a result
    whose reason is Slurm's."""
    state = submission.states.get(index, UNLISTED)
    status = STATUS_OF_STATE.get(state.word, "failed")
    task = f"{submission.job_id}_{index}"
    reason = ending.first_line(
        f"Slurm task {task} ended before this run had a result: {state.describe()}; "
        f"its output: {submission.output(index)}"
    )
    error = {"type": "SlurmTaskEnded", "job": task, "state": state.state, "reason": state.reason,
             "exit_code": state.exit_code, "node": state.node}  # fmt: skip
    host = state.node or "no node (the task never started)"
    environment = {"kbench": sysinfo.kbench_info(), "machine": {"hostname": host}}
    now = time.time()
    kept = []
    for run in runs:
        result = ending.run_result(
            run_id=ending.new_run_id(RECORD_PART, run.config.backend), kind=run.config.mode,
            config=run.config.to_dict(), verdict=ending.Verdict(status, reason, error),
            started_at=now, ended_at=now, environment=environment, data={},
            sweep=sweep.provenance(run),
        )  # fmt: skip
        ResultStore(store).add(result)
        kept.append(result)
    return kept


# waiting ----------------------------------------------------------------------------


@dataclass
class Watch:
    """The submitter's view of its submissions: polls Slurm and the store, records
    runs that tasks left without a result, prints what changed."""

    sweep: Sweep
    store: Path
    submissions: List[Submission]
    queue: Queue = field(default_factory=Queue)
    write: Callable[[str], None] = print
    started: float = field(default_factory=time.monotonic)
    shown: Dict[Tuple[str, int], str] = field(default_factory=dict)
    last_line: str = ""
    recorded: List[RunResult] = field(default_factory=list)
    failed_polls: int = 0

    def runs_of(self, submission: Submission, index: int) -> List[SweepRun]:
        by_key = {run.key: run for run in self.sweep.runs}
        return [by_key[key] for key in submission.tasks[index] if key in by_key]

    def poll(self) -> bool:
        """One look; True when every task of every submission has ended. A Slurm tool
        that fails is warned of and asked again, :data:`FAILED_POLLS` times in a row."""
        try:
            states = [self.queue.states(sub.job_id or "") for sub in self.submissions]
        except SlurmError as err:
            self.failed_polls += 1
            if self.failed_polls >= FAILED_POLLS:
                raise SlurmError(f"{err} ({FAILED_POLLS} times in a row; the jobs go on)") from None
            log.warning("%s; asking again (%d of %d)", err, self.failed_polls, FAILED_POLLS)
            return False
        self.failed_polls = 0
        for sub, found in zip(self.submissions, states):
            sub.states = found
            for index in range(len(sub.tasks)):  # what a task killed mid-move left behind
                folder = sub.directory / f"task-{index}"
                if sub.states.get(index, UNLISTED).ended and folder.is_dir():
                    move_documents(folder, self.store)
        newest = newest_entries(self.store)
        for sub in self.submissions:
            for index in range(len(sub.tasks)):
                state = sub.states.get(index, UNLISTED)
                self._show_task(sub, index, state)
                missing = [run for run in self.runs_of(sub, index)
                           if not ran_since(newest.get(run.key), sub.submitted_at)]  # fmt: skip
                if state.ended and missing:
                    self.recorded += record_ended(self.sweep, sub, index, missing, self.store)
            if sub.all_ended():
                sub.settle()
        self._show_counts(newest_entries(self.store))
        return all(sub.all_ended() for sub in self.submissions)

    def wait(self, poll_s: float) -> None:
        while not self.poll():
            time.sleep(poll_s)

    def _show_task(self, sub: Submission, index: int, state: TaskState) -> None:
        words = state.describe()
        if self.shown.get((sub.job_id or "", index)) == words:
            return
        self.shown[(sub.job_id or "", index)] = words
        labels = ", ".join(run.config.label() for run in self.runs_of(sub, index))
        self.write(f"  task {sub.job_id}_{index} [{labels}]: {words}")

    def _show_counts(self, newest: Dict[str, IndexEntry]) -> None:
        counts = {"queued": 0, "running": 0, "done": 0, "failed": 0}
        ok = failed = 0
        total = 0
        for sub in self.submissions:
            for index in range(len(sub.tasks)):
                word = sub.states.get(index, UNLISTED).word
                kind = ("done" if word == "COMPLETED" else "failed" if word in ENDED
                        else "queued" if word in ("PENDING", "REQUEUED", "CONFIGURING")
                        else "running")  # fmt: skip
                counts[kind] += 1
            for key in sub.keys():
                total += 1
                entry = newest.get(key)
                if ran_since(entry, sub.submitted_at):
                    ok += entry.status == "ok"
                    failed += entry.status != "ok"
        tasks = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        line = f"tasks: {tasks} | runs: {ok + failed}/{total} in the store, {failed} not ok"
        if line != self.last_line:
            self.last_line = line
            elapsed = int(time.monotonic() - self.started)
            self.write(f"[{elapsed // 60}m{elapsed % 60:02d}s] {line}")


def run_on_slurm(
    sweep: Sweep,
    store: Path,
    options: SlurmOptions,
    *,
    force: bool = False,
    retry_failed: bool = False,
    warm: bool = False,
    settings: Optional[Dict] = None,
    write: Callable[[str], None] = print,
) -> List[RunResult]:
    """Follow the store's earlier submissions, submit the runs of ``sweep`` that are not
    done and not in flight as one job array, and wait until every task has ended.
    Returns this invocation's results (read from the store). The caller holds the
    store's writer lock; KeyboardInterrupt leaves the jobs running."""
    check_tools()
    earlier = open_submissions(store)
    watch = Watch(sweep, store, earlier, write=write)
    if earlier:
        write(f"following {len(earlier)} earlier submission(s): job "
              f"{', '.join(s.job_id or '?' for s in earlier)}")  # fmt: skip
        watch.poll()
    in_flight = {key for sub in earlier if not sub.all_ended() for key in sub.keys()}
    to_run = [run for run in runs_to_do(sweep, store, force, retry_failed)
              if run.key not in in_flight]  # fmt: skip
    first = time.time()
    if to_run:
        drop_earlier_windows(sweep, store, to_run, write)
        units = task_units(to_run, options.per_task, warm)
        windows = asdict(sweep.windows) if sweep.windows is not None else None
        sub = submit(sweep, store, units, options,
                     dict(settings or {}, warm=warm, windows=windows))  # fmt: skip
        watch.submissions.append(sub)
        where = f" on partition {options.partition}" if options.partition else ""
        write(f"submitted job {sub.job_id}{where}: {len(units)} tasks, {len(to_run)} runs "
              f"(task outputs in {sub.directory}/)")  # fmt: skip
    elif not in_flight:
        write("nothing to submit: every run has a result")
        return []
    watch.wait(options.poll_s)
    since = "its submission" if to_run else "this command started"
    write(f"all tasks ended, {time.time() - first:.0f}s after {since}")
    newest = newest_entries(store)
    keys = {key for sub in watch.submissions for key in sub.keys()}
    return [RunResult.load(store / newest[k].file) for k in sorted(keys) if k in newest]


def runs_to_do(sweep: Sweep, store: Path, force: bool, retry_failed: bool) -> List[SweepRun]:
    """The runs of ``sweep`` to submit: those without a result in ``store``, those whose
    newest result is the record of a task Slurm ended, and (``force``, ``retry_failed``)
    as a local sweep; a comparison in warm windows with one of them, whole."""
    newest = newest_entries(store).items()
    done = {key: entry.status for key, entry in newest if not is_slurm_record(entry)}
    return to_do(sweep, done, force, retry_failed).to_run


def drop_earlier_windows(
    sweep: Sweep, store: Path, runs: Sequence[SweepRun], write: Callable[[str], None] = print
) -> int:
    """Before the comparisons in warm windows of ``runs`` are submitted: mark dropped
    (:data:`~kbench.studies.sweep_runs.SUPERSEDED`) the windows an earlier measuring
    of them left in ``store`` (a task failed, cancelled, or its node lost), as a local
    sweep does before it measures a comparison again; how many."""
    groups = comparisons_of(runs)
    if not groups or not ResultStore(store).exists():
        return 0
    earlier = EarlierWindows.read(store, sweep)
    count = 0
    for group in groups:
        dropped = earlier.supersede(group)
        if dropped:
            write(f"  {label_of(group[0].config, sweep.varying())}: {dropped} earlier window(s) "
                  f"{SUPERSEDED}")  # fmt: skip
        count += dropped
    return count


# on the node: one task -----------------------------------------------------------------


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
    log.info("task %d: %s", index, ", ".join(run.config.label() for run in runs))
    runner = Runner(
        output_dir=manifest_path.parent / f"task-{index}",
        busy_threshold=manifest["busy_threshold"], data_parallel=run_distributed,
    )  # fmt: skip
    newest = newest_entries(store)
    todo = []
    for run in runs:  # a task Slurm requeued skips what it moved into the store before
        if _done(newest.get(run.key), manifest["submitted_at"]):
            log.info("%s: already in %s, not run again", run.config.label(), store)
        else:
            todo.append(run)
    lost = 0
    if todo and windowed(runs):  # a comparison is measured whole
        lost = _run_comparison(sweep, runs, runner, store, manifest.get("baseline"))
    elif todo:
        lost = _run_fresh(sweep, runs, todo, runner, store, manifest["warm"])
    (runner.output_dir / INDEX_NAME).unlink(missing_ok=True)
    return 1 if lost else 0


def _run_fresh(
    sweep: Sweep, runs: List[SweepRun], todo: List[SweepRun], runner: Runner, store: Path,
    warm: bool,
) -> int:  # fmt: skip
    """The task's runs to do in fresh processes (or warm workers' runs), each worker's
    documents moved into the store as it ends; the number not moved there."""
    progress = Progress(total=len(runs), skipped=len(runs) - len(todo))
    lost = 0
    with runner.session([run.config for run in todo]) as session:
        for unit in task_units(todo, "run", warm):
            rounds.run_plan(sweep_plan(sweep, unit, warm), session, report=progress)
            lost += move_documents(runner.output_dir, store)
    return lost


def _run_comparison(
    sweep: Sweep, runs: List[SweepRun], runner: Runner, store: Path, baseline: Optional[str]
) -> int:
    """The task's comparison in warm windows (module docstring); the number of
    documents not moved into the store."""
    own = runner.output_dir
    dropped = EarlierWindows.read(own, sweep).supersede(runs)
    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0:  # a requeued task's moved ones
        dropped += EarlierWindows.read(store, sweep).supersede(runs)
    if dropped:
        log.info("%d earlier window(s) %s", dropped, SUPERSEDED)
    ((_, plan),) = sweep_plans(sweep, runs, baseline=baseline)
    found, reason = measure_comparison(runner, sweep, runs, plan)
    log.info("%s; stopped: %s", summary(found, baseline), reason)
    first = {r.run_id for r in found if int(r.config.get("repeat", 0)) == 0}
    return move_documents(own, store, last=first)


def _done(entry: Optional[IndexEntry], submitted_at: str) -> bool:
    """Whether ``entry`` is a result a run of this submission wrote itself."""
    return entry is not None and ran_since(entry, submitted_at) and not is_slurm_record(entry)


def main(argv: Optional[List[str]] = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    index = os.environ.get("SLURM_ARRAY_TASK_ID")
    if len(args) != 1 or index is None or not index.isdigit():
        log.error(
            "expected: python -m kbench.studies.slurm TASKS.json, in a Slurm array task "
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
