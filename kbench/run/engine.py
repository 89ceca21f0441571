"""The parent side of every worker process, one engine for every kind of run: a fresh run
and ``--warm`` (:mod:`kbench.run.runner`), warm windows (:mod:`kbench.run.windows`), the
ranks of a data-parallel run (:mod:`kbench.distributed.launcher`), ``kbench exec``'s
script (:mod:`kbench.exec.watch`) and ``kbench ops``' workers (:mod:`kbench.ops.runner`).

A :class:`Worker` runs in its own process group (stopped as a whole); a thread reads its
output into the run's log and relays its progress events. With ``channel`` it is told
commands on stdin and answers on a reply pipe (:mod:`kbench.run.protocol`); an answer
that does not come in time, a pipe that closes or a ``failed`` answer raises
:class:`WorkerGone` with the verdict of how it ended. The sampler is the caller's (a
run's whole life, a window, every rank); :func:`judge` turns an ending into a status.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import psutil

from kbench.measure import processes
from kbench.measure.sampler import Sampler
from kbench.results import ending
from kbench.run.protocol import (
    REPLY_FD_VARIABLE,
    WorkerReply,
    open_reply_pipe,
    parse_progress,
    read_replies,
)

log = logging.getLogger(__name__)

KILL_GRACE_S = 5.0  # after SIGTERM, before SIGKILL
FINISH_TIMEOUT_S = 30.0  # for a worker told to finish to exit
LOG_TAIL_LINES = 40
POLL_S = 0.25  # how often a wait looks whether the worker is still there (and polls)
EXIT_GRACE_S = 2.0  # for the answer of a worker that has exited, still in the pipe
TIMED_OUT = object()  # no answer in time
OnProgress = Callable[[Any, Dict], None]


@dataclass(frozen=True)
class Outcome:
    """How a process ran to its end, its log's last lines, the sampler that watched it."""

    returncode: Optional[int]
    timed_out: bool
    log_tail: List[str]
    sampler: Optional[Sampler] = None


class WorkerGone(Exception):
    """The worker ended or was stopped; ``verdict`` says how (its status and reason)."""

    def __init__(self, verdict: ending.Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class LogWriter:
    """The worker's log file, written line by line (each write whole: several readers may
    share one). A write that fails (a full disk) stops the log, once, with a warning; the
    output is still read, so the worker never blocks on a full pipe, and the run goes on."""

    def __init__(self, file, path: Path) -> None:
        self.file, self.path = file, path
        self.failed: Optional[str] = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> LogWriter:
        return cls(open(path, "w"), path)

    def write(self, line: str) -> None:
        with self._lock:
            if self.failed:
                return
            try:
                self.file.write(line)
                self.file.flush()
            except OSError as err:
                self.failed = err.strerror or str(err)
                log.warning(
                    "the log %s stopped at this point: %s; the run goes on, its log is "
                    "incomplete", self.path, self.failed,
                )  # fmt: skip

    def close(self) -> None:
        # what a failed write left in the buffer cannot be written either
        with contextlib.suppress(OSError):
            self.file.close()


@dataclass
class Worker:
    """One process the engine started, and what it has said so far (module docstring)."""

    name: str  # what logs and reasons call it
    process: subprocess.Popen
    log_file: LogWriter
    tail: collections.deque
    replies: Optional[queue.Queue] = None  # the reply pipe's answers, with a channel
    threads: List[threading.Thread] = field(default_factory=list)
    gone: Optional[ending.Verdict] = None  # how it ended, once it did
    closed: bool = False
    owns_log: bool = True  # False: a log shared with other processes, closed by its owner

    @classmethod
    def launch(
        cls, command: Sequence[str], env: Dict[str, str], cwd: Path,
        log_to: Union[Path, LogWriter], *, name: str, progress_of: Any = None,
        on_progress: Optional[OnProgress] = None, channel: bool = False, prefix: str = "",
        read_output: Optional[Callable[[Any], None]] = None, stdin: Any = None,
    ) -> Worker:  # fmt: skip
        """Start ``command``: output to ``log_to`` after ``prefix`` (or to ``read_output``),
        progress to ``on_progress(progress_of, event)``; ``channel``: stdin and a reply pipe,
        else ``stdin`` (None: kbench's own)."""
        log_file = LogWriter.open(log_to) if isinstance(log_to, Path) else log_to
        popen_args: Dict[str, Any] = {} if stdin is None else {"stdin": stdin}
        pipe = open_reply_pipe() if channel else None
        if pipe is not None:
            env = dict(env, **{REPLY_FD_VARIABLE: pipe.value})
            popen_args = dict(pipe.popen_args, stdin=subprocess.PIPE)
        text = {} if read_output else {"text": True, "errors": "replace"}
        try:
            process = processes.start(  # its own process group: stopped as a whole
                list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                cwd=cwd, **text, **popen_args,
            )  # fmt: skip
        except BaseException:
            if pipe is not None:
                os.close(pipe.read_fd)
            if isinstance(log_to, Path):
                log_file.close()
            raise
        finally:
            if pipe is not None:
                pipe.close_write_end()  # the worker holds its own copy
        worker = cls(
            name, process, log_file, collections.deque(maxlen=LOG_TAIL_LINES),
            queue.Queue() if pipe else None, owns_log=isinstance(log_to, Path),
        )  # fmt: skip
        reader = read_output or (
            lambda stream: relay_output(
                stream, log_file, worker.tail, prefix, progress_of, on_progress
            )  # fmt: skip
        )
        worker.threads.append(threading.Thread(target=reader, args=(process.stdout,), daemon=True))
        if pipe is not None:
            args = (pipe.read_fd, worker.replies)
            worker.threads.append(threading.Thread(target=read_replies, args=args, daemon=True))
        for thread in worker.threads:
            thread.start()
        return worker

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.gone is None

    def send(self, command: Dict[str, Any]) -> None:
        """One command on stdin (to a worker that is gone: nothing; its pipe says how)."""
        with contextlib.suppress(OSError, ValueError):  # BrokenPipeError is an OSError
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()

    def request(self, command: Dict[str, Any], what: str, timeout_s: float, **said: str):
        self.send(command)
        return self.await_reply(what, timeout_s, **said)

    def await_reply(
        self, what: str, timeout_s: float, late: str = "", died: str = ""
    ) -> Dict[str, Any]:
        """The worker's next answer; :class:`WorkerGone` where it answered ``failed``, died
        (pipe closed, or exited with no answer in :data:`EXIT_GRACE_S`; reason: ``died``) or
        did not answer within ``timeout_s`` (then it is stopped; reason: ``late``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._next_reply(deadline)
            if reply is TIMED_OUT:
                self.stop()
                self._end(ending.timed_out(
                    late or f"the warm worker did not answer {what} within {timeout_s:g} s "
                    "and was stopped", self.tail,
                ))  # fmt: skip
            if reply is None:  # the pipe closed, or the worker exited: it ended
                self._wait_exit()
                self._drain_output()
                how = processes.describe_exit(self.process.returncode)
                reason = (died or "the warm worker {how} during " + what).format(how=how)
                self._end(ending.no_result("WorkerCrashed", how, reason, self.tail))
            if reply["event"] == "failed":
                self._wait_exit()
                self._drain_output()
                self._end(ending.reported(reply["status"], reply["error"], self.tail))
            if reply["event"] == "garbled":
                log.warning("%s: a garbled reply was ignored: %s", self.name, reply["line"])
                continue
            return reply

    def _next_reply(self, deadline: float) -> Any:
        """The reply pipe's next item; None once it closed or the process exited."""
        exited_at: Optional[float] = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return TIMED_OUT
            with contextlib.suppress(queue.Empty):
                return self.replies.get(timeout=min(left, POLL_S))
            if self.process.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at >= EXIT_GRACE_S:
                    return None

    def _end(self, verdict: ending.Verdict) -> None:
        self.gone = verdict
        raise WorkerGone(verdict)

    def _wait_exit(self) -> None:
        try:
            self.process.wait(timeout=FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()

    def _drain_output(self) -> None:  # the last lines (a crash's message) into the tail
        self.threads[0].join(timeout=5)

    def wait(
        self, timeout_s: float, label: str = "", poll: Optional[Callable[[], None]] = None
    ) -> bool:
        """Wait for the process to end, ``poll()`` every :data:`POLL_S`; past ``timeout_s``
        stop it: True."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.process.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
                return False
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    log.warning("%s: past its %g s timeout; stopping it", label or self.name,
                                timeout_s)  # fmt: skip
                    self.stop()
                    return True
            if poll is not None:
                poll()

    def stop(self) -> None:
        """Stop the process group (SIGTERM), then kill it after a grace period."""
        if not processes.stop_tree(self.process.pid):
            return
        try:
            self.process.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            processes.kill_tree(self.process.pid)
            self.process.wait()

    def close(self, now: bool = False) -> None:
        """End it: told to finish where it has a channel and is well (``now``: stopped, as on
        Ctrl-C); what is left of its tree is killed, its readers joined, its log closed."""
        if self.closed:
            return
        if self.process.poll() is None:
            if now or not self.alive or self.replies is None:
                self.stop()
            else:
                self.send({"do": "finish"})
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
                self._wait_exit()
        processes.kill_tree(self.process.pid)  # whatever the worker left behind
        for thread in self.threads:
            thread.join(timeout=10)
        if self.owns_log:
            self.log_file.close()
        self.closed = True


def relay_output(
    stream: Any, log_file: LogWriter, tail: collections.deque, prefix: str = "",
    progress_of: Any = None, on_progress: Optional[OnProgress] = None,
) -> None:  # fmt: skip
    """Each line of a worker's output into its log; progress events to ``on_progress``,
    other lines into ``tail``. The pipe is closed at its end (else each run leaked one)."""
    with stream:
        for line in stream:
            log_file.write(prefix + line)
            event = parse_progress(line)
            if event is None:
                tail.append(line.rstrip("\n"))
            elif event and on_progress:
                try:
                    on_progress(progress_of, event)
                except Exception as err:  # showing progress must never stop the reading
                    log.debug("progress event not shown: %s", err)


def start_sampler(
    pid: int, interval_s: float, nvml: Any = None, companions: Sequence[int] = ()
) -> Optional[Sampler]:
    """A started :class:`Sampler` on ``pid``'s tree; None for no interval or no process."""
    if interval_s <= 0:
        return None
    try:
        sampler = Sampler(pid, interval_s, nvml=nvml, companions=companions)
        sampler.__enter__()
    except psutil.Error as err:  # the worker died before the first sample
        log.debug("sampler not started: %s", err)
        return None
    return sampler


def judge(outcome: Outcome, reply: Optional[WorkerReply], config: Any) -> ending.Verdict:
    """How a worker ended: ``timeout``; ``ok`` only when it replied ok *and* exited 0;
    else the error it reported, with its own status; else ``failed``, how it exited."""
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
    if reply is not None and reply.status == "ok":
        return ending.no_result(
            "WorkerExit", how, f"the worker reported its result, then {how} instead of exiting "
            "cleanly", outcome.log_tail,
        )  # fmt: skip
    return ending.no_result(
        "WorkerCrashed", how, f"the worker {how} without reporting a result", outcome.log_tail
    )
