"""The parent side of every worker process, one engine for every kind of run: a fresh run
and ``--warm`` (:mod:`kbench.run.runner`), warm windows (:mod:`kbench.run.windows`), the
ranks of a data-parallel run (:mod:`kbench.distributed.launcher`), ``kbench exec``'s
script (:mod:`kbench.exec.watch`) and ``kbench ops``' worker (:mod:`kbench.ops.runner`).

A :class:`Worker` is one process the engine started: in its own process group, so that
it is stopped as a whole; its output read by a thread, line by line into the run's log
(prefixed by the process's name where several share one log) with its progress events
relayed (or by the caller's own reader: ``kbench exec``'s script may print anything). With
``channel`` it is told commands on stdin and answers each on a reply pipe of its own
(:mod:`kbench.run.protocol`): :meth:`Worker.request` awaits an answer for a given time, and
an answer that does not come (the worker is stopped), a pipe that closes (the worker died)
or a ``failed`` answer raises :class:`WorkerGone` with the verdict of how it ended.
:meth:`Worker.wait` waits for a process to end by itself, past its timeout stopping it;
:meth:`Worker.close` ends it (told to finish, or stopped) and kills whatever of its tree is
left. :func:`supervise` is one process run to its end. The sampler
(:class:`kbench.measure.sampler.Sampler`) is the caller's: over a run's whole life, a
window, or every process of a data-parallel run. :func:`judge` turns how a worker ended
and what it replied into a status.
"""

from __future__ import annotations

import collections
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
POLL_S = 0.25  # how often a wait for an answer looks whether the worker is still there
EXIT_GRACE_S = 2.0  # for the answer of a worker that has exited, still in the pipe
TIMED_OUT = object()  # no answer in time
OnProgress = Callable[[Any, Dict], None]


@dataclass(frozen=True)
class Outcome:
    """How a process ran to its end: its exit code, whether it was stopped past its
    timeout, its log's last lines, the sampler that watched it."""

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
    """The worker's log file, written line by line. A write that fails (a disk that
    fills during the run) stops the log, once, with a warning; the worker's output is
    still read, so the worker never blocks on a full pipe, and the run goes on. Several
    processes' readers may share one (a data-parallel run's): each write is whole."""

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
        try:
            self.file.close()
        except OSError:  # what a failed write left in the buffer cannot be written either
            pass


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
        """Start ``command``: output to ``log_to`` (a path: a log of its own), each line
        after ``prefix``, progress events to ``on_progress(progress_of, event)``; with
        ``channel``, commands on stdin and a reply pipe, else ``stdin`` (None: kbench's
        own). ``read_output(stdout)``: the caller reads the output itself (bytes),
        instead of the line reader."""
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

    # -------------------------------------------------------------- with a channel

    def send(self, command: Dict[str, Any]) -> None:
        """One command on the worker's stdin (a worker that is gone: nothing; its reply
        pipe says how it went)."""
        try:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def request(self, command: Dict[str, Any], what: str, timeout_s: float, **said: str):
        """Send ``command`` and await its answer (:meth:`await_reply`)."""
        self.send(command)
        return self.await_reply(what, timeout_s, **said)

    def await_reply(
        self, what: str, timeout_s: float, late: str = "", died: str = ""
    ) -> Dict[str, Any]:
        """The worker's next answer; raises :class:`WorkerGone` when it failed (its
        ``failed`` answer), died (the reason: ``died`` with ``{how}`` it exited, default
        "the warm worker ... during ``what``"), or did not answer within ``timeout_s``
        (then it is stopped; the reason: ``late``, default that it did not answer). A
        worker is dead when its reply pipe closes, or when it has exited and no answer
        came within :data:`EXIT_GRACE_S` (a process it started may hold the pipe open)."""
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
        """The next item of the reply pipe (None: it closed), None where the process has
        exited and nothing came within :data:`EXIT_GRACE_S`, or :data:`TIMED_OUT`."""
        exited_at: Optional[float] = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return TIMED_OUT
            try:
                return self.replies.get(timeout=min(left, POLL_S))
            except queue.Empty:
                pass
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

    def _drain_output(self) -> None:
        """Let the output reader take the worker's last lines (a crash's message) into
        the tail before a verdict quotes them."""
        self.threads[0].join(timeout=5)

    # -------------------------------------------------------------- to its end

    def wait(
        self, timeout_s: float, label: str = "", poll: Optional[Callable[[], None]] = None,
        poll_s: float = 0.25,
    ) -> bool:  # fmt: skip
        """Wait for the process to end by itself, calling ``poll()`` every ``poll_s``
        meanwhile; past ``timeout_s`` stop it. True when it was stopped so."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.process.wait(timeout=max(0.0, min(poll_s, deadline - time.monotonic())))
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
        stop_group(self.process)

    def close(self, now: bool = False, finish: bool = True) -> None:
        """End it: told to finish where it has a channel and is well (``now``: stopped at
        once, as on Ctrl-C); whatever of it is left is killed; its readers joined, its
        log closed. Closing twice does nothing more."""
        if self.closed:
            return
        if self.process.poll() is None:
            if now or not self.alive or self.replies is None or not finish:
                self.stop()
            else:
                self.send({"do": "finish"})
                try:
                    self.process.stdin.close()
                except OSError:
                    pass
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
    """A reader thread's target: each line of a worker's output into its log; progress
    events to ``on_progress``, every other line into ``tail`` (the log's last lines).
    The pipe is closed at its end (left open, each run leaked a file object)."""
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
    """A :class:`Sampler` on ``pid``'s tree, started; None when ``interval_s`` is 0 or
    the process ended before the first sample."""
    if interval_s <= 0:
        return None
    try:
        sampler = Sampler(pid, interval_s, nvml=nvml, companions=companions)
        sampler.__enter__()
    except psutil.Error as err:  # the worker died before the first sample
        log.debug("sampler not started: %s", err)
        return None
    return sampler


def supervise(
    command: List[str], env: Dict[str, str], cwd: Path, log_path: Path, config: Any,
    on_progress: Optional[OnProgress] = None, nvml: Any = None,
) -> Outcome:  # fmt: skip
    """Run ``command`` to its end, without a channel: its log and progress, its sampler,
    stopped past ``config.timeout_s``. ``config`` needs only ``label()``, ``timeout_s``
    and ``sample_interval_s`` (``kbench ops`` passes its own)."""
    worker = Worker.launch(
        command, env, cwd, log_path, name=config.label(), progress_of=config,
        on_progress=on_progress,
    )  # fmt: skip
    sampler = start_sampler(worker.pid, config.sample_interval_s, nvml)
    try:
        timed_out = worker.wait(config.timeout_s, config.label())
    except BaseException:  # Ctrl-C: take the worker down with us, write nothing
        worker.stop()
        raise
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
        worker.close()
    return Outcome(worker.process.returncode, timed_out, list(worker.tail), sampler)


def judge(outcome: Outcome, reply: Optional[WorkerReply], config: Any) -> ending.Verdict:
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
    if reply is not None and reply.status == "ok":
        return ending.no_result(
            "WorkerExit", how, f"the worker reported its result, then {how} instead of exiting "
            "cleanly", outcome.log_tail,
        )  # fmt: skip
    return ending.no_result(
        "WorkerCrashed", how, f"the worker {how} without reporting a result", outcome.log_tail
    )


def stop_group(process: subprocess.Popen) -> None:
    """Stop a worker's process group (SIGTERM), then kill it after a grace period."""
    if not processes.stop_tree(process.pid):
        return
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        processes.kill_tree(process.pid)
        process.wait()
