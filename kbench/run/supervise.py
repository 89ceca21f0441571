"""One worker process, supervised: its own process group, its output logged and its
progress relayed, the sampler on its process tree, the timeout enforced, and how it
ended judged as a status (``ok``, ``failed``, ``oom``, ``timeout``) with the pieces
of :mod:`kbench.results.ending`.

The runner (:mod:`kbench.run.runner`) and ``kbench ops`` (:mod:`kbench.ops.runner`)
supervise their workers with it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import psutil

from kbench.measure import processes
from kbench.measure.sampler import Sampler
from kbench.results import ending
from kbench.results.config import RunConfig
from kbench.run.task import WorkerReply, parse_progress

log = logging.getLogger(__name__)

KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class Outcome:
    returncode: int
    timed_out: bool
    log_tail: List[str]
    sampler: Optional[Sampler] = None


def supervise(
    command: List[str],
    env: Dict[str, str],
    run_dir: Path,
    log_path: Path,
    config: RunConfig,
    on_progress: Optional[Callable[[Any, Dict], None]] = None,
    nvml: Any = None,
) -> Outcome:
    """Run ``command`` in its own process group: log its output, relay its progress,
    sample it, and stop it past ``config.timeout_s``. ``config`` needs only
    ``label()``, ``timeout_s`` and ``sample_interval_s`` (``kbench ops`` passes its own)."""
    tail: collections.deque = collections.deque(maxlen=LOG_TAIL_LINES)
    with contextlib.closing(LogWriter.open(log_path)) as log_file:
        process = processes.start(  # its own process group: killed as a whole
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=run_dir,
            text=True,
            errors="replace",
        )
        reader = threading.Thread(
            target=relay_output, args=(process, log_file, tail, config, on_progress), daemon=True
        )
        reader.start()
        sampler = None
        if config.sample_interval_s > 0:
            try:
                sampler = Sampler(process.pid, config.sample_interval_s, nvml=nvml)
                sampler.__enter__()
            except psutil.Error as err:  # the worker died before the first sample
                log.debug("sampler not started: %s", err)
                sampler = None
        timed_out = False
        try:
            process.wait(timeout=config.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            log.warning("%s: past its %g s timeout; stopping it", config.label(), config.timeout_s)
            stop_group(process)
        except BaseException:  # Ctrl-C: take the worker down with us, write nothing
            stop_group(process)
            raise
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
            processes.kill_tree(process.pid)  # whatever the worker left behind
        reader.join(timeout=10)
    return Outcome(
        returncode=process.returncode,
        timed_out=timed_out,
        log_tail=list(tail),
        sampler=sampler,
    )


class LogWriter:
    """The worker's log file, written line by line. A write that fails (a disk that
    fills during the run) stops the log, once, with a warning; the worker's output is
    still read, so the worker never blocks on a full pipe, and the run goes on."""

    def __init__(self, file, path: Path) -> None:
        self.file, self.path = file, path
        self.failed: Optional[str] = None

    @classmethod
    def open(cls, path: Path) -> LogWriter:
        return cls(open(path, "w"), path)

    def write(self, line: str) -> None:
        if self.failed:
            return
        try:
            self.file.write(line)
            self.file.flush()
        except OSError as err:
            self.failed = err.strerror or str(err)
            log.warning(
                "the log %s stopped at this point: %s; the run goes on, its log is incomplete",
                self.path,
                self.failed,
            )

    def close(self) -> None:
        try:
            self.file.close()
        except OSError:  # what a failed write left in the buffer cannot be written either
            pass


def relay_output(process, log_file: LogWriter, tail, config: RunConfig, on_progress) -> None:
    """A reader thread's target: each line of the worker's output into its log; progress
    events to ``on_progress``, every other line into ``tail`` (the log's last lines).
    The pipe is closed at its end (left open, each run leaked a file object)."""
    with process.stdout:
        for line in process.stdout:
            log_file.write(line)
            event = parse_progress(line)
            if event is None:
                tail.append(line.rstrip("\n"))
            elif event and on_progress:
                try:
                    on_progress(config, event)
                except Exception as err:  # showing progress must never stop the reading
                    log.debug("progress event not shown: %s", err)


def judge(outcome: Outcome, reply: Optional[WorkerReply], config: RunConfig) -> ending.Verdict:
    """How a worker ended, as a :class:`~kbench.results.ending.Verdict`: ``timeout`` past
    its timeout; ``ok`` only when it replied ok *and* exited 0; else the error it
    reported, with its own status (``failed``, ``oom``, ``unsupported``); else ``failed``,
    how it exited (``kbench exec`` and data-parallel runs judge their own way)."""
    if outcome.timed_out:
        return ending.timed_out(
            f"the worker ran past the {config.timeout_s:g} s timeout and was killed",
            outcome.log_tail,
        )
    if reply is not None and reply.status == "ok" and outcome.returncode == 0:
        return ending.OK
    if reply is not None and reply.error:
        return ending.reported(reply.status, reply.error, outcome.log_tail)
    how = processes.describe_exit(outcome.returncode)
    return ending.no_result(
        "WorkerCrashed", how, f"the worker {how} without reporting a result", outcome.log_tail
    )


def stop_group(process: subprocess.Popen) -> None:
    """Stop the worker's process group (SIGTERM), then kill it after a grace period."""
    if not processes.stop_tree(process.pid):
        return
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        processes.kill_tree(process.pid)
        process.wait()
