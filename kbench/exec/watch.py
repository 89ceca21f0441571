"""The user's command, watched to its end: ``kbench exec``'s own supervision.

A user's script may print without end, print lines that look like kbench's progress
protocol, start daemons that leave its process group and session, or leave a process
holding its output open. So, per run:

- output: read in chunks as it comes (the script never blocks on a full pipe), logged
  up to a limit, past it counted, not kept; a readable copy beside a log that holds
  terminal controls, and the exception line of the last traceback (:class:`LogKeeper`);
- progress: one line per epoch from the events file the instrumentation writes, its
  own channel (:class:`EpochFeed`): nothing the script prints can pose as an event;
- time: the script's time ends when its own process exits (``ended_at``); the output
  reader then gets :data:`READER_GRACE_S` to finish, and is left behind after it;
- processes: whatever the script started is stopped at the end
  (:func:`stop_leftovers`): its process group; every process seen below it while it
  ran; every process of its session; every process carrying the run's token
  (:data:`TOKEN_VARIABLE`) in its environment, which finds a daemon that called
  ``setsid``, closed its streams and was re-parented; and, on Linux, where kbench is the
  child subreaper while the script runs, every orphan re-parented to kbench, which
  finds one that also cleared its environment within one poll. Where the system has no
  subreaper, the result says that escaped processes cannot be ruled out.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import psutil

from kbench.measure import processes
from kbench.run.engine import LOG_TAIL_LINES, LogWriter, Outcome, Worker, start_sampler

log = logging.getLogger(__name__)

TOKEN_VARIABLE = "KBENCH_EXEC_TOKEN"  # in the environment of everything the script starts
LOG_LIMIT_BYTES = 64 * 2**20  # of the script's output kept in its log
READER_GRACE_S = 2.0  # for the output reader once the script has exited
TAIL_LINE_CHARS = 2000  # of one line kept in the tail (a progress bar's line has no end)
CHUNK_BYTES = 2**16
ADOPTED = "none: kbench was the child subreaper, so every orphan came to it and was stopped"
NOT_ADOPTED = (
    "cannot be ruled out: this system has no child subreaper (Linux's PR_SET_CHILD_SUBREAPER), "
    "so a process the script started that left its session and cleared its environment "
    "within one poll may still run"
)


class CannotStart(Exception):
    """The system could not start the command (the OSError is the argument)."""


@dataclass(frozen=True)
class ScriptOutcome(Outcome):
    """How the script ended (:class:`~kbench.run.engine.Outcome`), and more."""

    ended_at: float = 0.0  # time.time() as the script's own process ended (or was stopped)
    log: Dict[str, Any] = field(default_factory=dict)  # LogKeeper.summary()
    stopped: List[str] = field(default_factory=list)  # what it left running, stopped
    escaped: Optional[str] = None  # whether a process it started may have escaped, in words
    exception: Optional[str] = None  # the exception line of the last traceback printed


def watch(
    command: List[str], env: Dict[str, str], cwd: Path, log_path: Path, config: Any,
    events_path: Path, on_progress: Optional[Callable[[Any, Dict], None]] = None, nvml: Any = None,
    log_limit_bytes: int = LOG_LIMIT_BYTES, stdin: Any = None,
) -> ScriptOutcome:  # fmt: skip
    """Run ``command`` on the engine (:class:`kbench.run.engine.Worker`: its own process
    group and session, no channel, ``stdin`` as given, its output read by
    :class:`LogKeeper`), and stop all it started at the end. ``config`` needs
    ``label()``, ``timeout_s`` and ``sample_interval_s``; ``env`` must carry
    :data:`TOKEN_VARIABLE`."""
    started = time.time()
    with (
        contextlib.closing(LogKeeper(LogWriter.open(log_path), log_limit_bytes)) as kept,
        processes.adopting_orphans() as adopting,
    ):
        try:
            script = Worker.launch(
                command, env, cwd, kept.writer, name=config.label(), read_output=kept.read_from,
                stdin=stdin,
            )  # fmt: skip
        except OSError as err:  # not an executable file, no rights to run it
            raise CannotStart(err) from None
        sampler = start_sampler(script.pid, config.sample_interval_s, nvml)
        seen = Seen(script.pid)
        feed = EpochFeed(events_path, config, on_progress)

        def poll() -> None:
            seen.update()
            feed.poll()

        try:
            timed_out = script.wait(config.timeout_s, config.label(), poll)  # every POLL_S
            ended_at = time.time()
        except BaseException:  # Ctrl-C: take everything down with us
            script.stop()
            stop_leftovers(script.pid, env[TOKEN_VARIABLE], seen, started)
            raise
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
        stopped = stop_leftovers(script.pid, env[TOKEN_VARIABLE], seen, started)
        script.threads[0].join(READER_GRACE_S)
        if script.threads[0].is_alive():
            log.warning("%s: a process kbench could not find still holds the script's "
                        "output open; its log ends here", config.label())  # fmt: skip
        feed.poll()
    return ScriptOutcome(
        returncode=script.process.returncode, timed_out=timed_out, log_tail=list(kept.tail),
        ended_at=ended_at, log=kept.summary(), stopped=stopped, sampler=sampler,
        exception=kept.exception, escaped=ADOPTED if adopting else NOT_ADOPTED,
    )  # fmt: skip


class Seen:
    """Every process seen below the script while it ran (pid and start time, so that a
    number the system gave to another process since is not taken for it)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.started: Dict[int, float] = {}

    def update(self) -> None:
        for proc in processes.descendants(self.root):
            with contextlib.suppress(psutil.Error):
                self.started.setdefault(proc.pid, proc.create_time())

    def alive(self) -> List[psutil.Process]:
        found = []
        for pid, created in self.started.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    found.append(proc)
        return found


def stop_leftovers(root: int, token: str, seen: Seen, started: float) -> List[str]:
    """Kill what the script (``root``, ended or stopped) left running: its group, the
    processes seen below it, those of its session, those carrying ``token``; return
    them as ``name (pid N)``. kbench itself and its parents are never touched."""
    processes.kill_tree(root)
    try:
        spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    except psutil.Error:
        spared = {os.getpid()}
    found = {proc.pid: proc for proc in seen.alive() + processes.adopted(started - 1, root)}
    for proc in psutil.process_iter():
        if proc.pid not in spared and proc.pid not in found and _started_by(proc, root, token):
            with contextlib.suppress(psutil.Error):
                if proc.create_time() >= started - 1:
                    found[proc.pid] = proc
    stopped = []
    for pid, proc in sorted(found.items()):
        with contextlib.suppress(psutil.Error):
            if pid in spared or proc.status() == psutil.STATUS_ZOMBIE:
                processes.reap(proc)
                continue
            name = proc.name()
            proc.kill()
            processes.reap(proc)
            stopped.append(f"{name} (pid {pid})")
    if stopped:
        log.warning("stopped %d process(es) the script left running: %s",
                    len(stopped), ", ".join(stopped))  # fmt: skip
    return stopped


def _started_by(proc: psutil.Process, root: int, token: str) -> bool:
    """Whether ``proc`` is in the session the script led, or carries its token."""
    try:
        # (a process now numbered ``root`` is another's: the script was reaped)
        if hasattr(os, "getsid") and proc.pid != root and os.getsid(proc.pid) == root:
            return True
        if hasattr(os, "getuid") and proc.uids().real != os.getuid():
            return False  # another user's: its environment cannot be read
        return proc.environ().get(TOKEN_VARIABLE) == token
    except (psutil.Error, OSError):
        return False


# colour and cursor codes (CSI and OSC sequences, lone escapes) a terminal would act on
CONTROLS = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
TRACEBACK = "Traceback (most recent call last):"


def readable(line: str) -> str:
    """``line`` as a terminal would have left it: colour codes removed, each ``\b``
    taking back a character, each ``\r`` starting the line over (what follows
    overwrites what was there)."""
    line = CONTROLS.sub("", line)
    if "\b" not in line and "\r" not in line:
        return line
    shown: List[str] = []
    column = 0
    for char in line:
        if char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        else:
            if column < len(shown):
                shown[column] = char
            else:
                shown.append(char)
            column += 1
    return "".join(shown).rstrip()


class LogKeeper:
    """The script's output: the first ``limit`` bytes to the log, the rest counted; the
    last lines (:data:`LOG_TAIL_LINES`, each up to :data:`TAIL_LINE_CHARS`, readable)
    kept for the result and, where the log was cut, written at its end; a readable
    copy of the log (:func:`readable`) where the script printed terminal controls; the
    exception line of the last traceback (``exception``)."""

    def __init__(self, writer: LogWriter, limit: int) -> None:
        self.writer, self.limit = writer, limit
        self.printed = self.kept = 0
        self.tail: collections.deque = collections.deque(maxlen=LOG_TAIL_LINES)
        self.exception: Optional[str] = None
        self.readable = LogWriter.open(self.readable_path)  # removed at the end if the same
        self.controls = False  # whether the script printed terminal controls
        self._in_traceback = False
        self._line = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lock = threading.Lock()
        self._closed = False

    @property
    def readable_path(self) -> Path:
        return Path(self.writer.path).with_suffix(".txt")

    @property
    def cut(self) -> bool:
        return self.printed > self.kept

    def read_from(self, stream: Any) -> None:
        """Read ``stream`` (the script's stdout) to its end, or until closed."""
        fd = stream.fileno()
        while not self._closed:
            try:
                chunk = os.read(fd, CHUNK_BYTES)
            except OSError:
                return
            if not chunk:
                return
            self.feed(chunk)

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            self.printed += len(chunk)
            self._add_to_tail(self._decoder.decode(chunk))
            room = self.limit - self.kept
            if room <= 0:
                return
            self.writer.write(chunk[:room].decode("utf-8", errors="replace"))
            self.kept += min(room, len(chunk))
            if len(chunk) > room:
                self.writer.write(
                    f"\n[kbench: the log is cut here, after the first {self.limit:,} bytes of "
                    "the script's output; the rest was read and counted, not kept]\n"
                )

    def _add_to_tail(self, text: str) -> None:
        *ended, rest = text.split("\n")
        for part in ended:
            self._ended(self._line + part)
            self._line = ""
        self._line = (self._line + rest)[-TAIL_LINE_CHARS:]

    def _ended(self, raw: str) -> None:
        """One whole line of output: into the readable log, the tail and the watch
        for tracebacks."""
        line = readable(raw)
        self.controls = self.controls or line != raw
        if self.kept < self.limit:
            self.readable.write(line + "\n")
        self.tail.append(line[-TAIL_LINE_CHARS:])
        if line.startswith(TRACEBACK):
            self._in_traceback = True
        elif self._in_traceback and line.strip() and not line[:1].isspace():
            self.exception, self._in_traceback = line.strip()[:TAIL_LINE_CHARS], False

    def summary(self) -> Dict[str, Any]:
        """The result's ``metrics.log``: bytes printed and kept, where it was cut, and
        the readable copy's file name (None: the log is readable as it is)."""
        return {"printed_bytes": self.printed, "kept_bytes": self.kept, "limit_bytes": self.limit,
                "cut_at_bytes": self.kept if self.cut else None,
                "readable": self.readable_path.name if self.controls else None}  # fmt: skip

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._add_to_tail(self._decoder.decode(b"", final=True))
            if self._line:
                self._ended(self._line)
                self._line = ""
            if self.cut:
                log.warning("the script printed %s bytes; its log keeps the first %s and "
                            "its last lines", f"{self.printed:,}", f"{self.kept:,}")  # fmt: skip
                self.writer.write(
                    f"[kbench: the script printed {self.printed:,} bytes in all; "
                    f"its last {len(self.tail)} lines were:]\n"
                    + "".join(line + "\n" for line in self.tail)
                )
        self.writer.close()
        self.readable.close()
        if not self.controls:  # the log itself is readable
            with contextlib.suppress(OSError):
                self.readable_path.unlink()


class EpochFeed:
    """The epochs in the instrumentation's events file, as it grows, shown as ``kbench
    run`` shows a worker's (``on_progress(config, {"event": "epoch", ...})``)."""

    def __init__(self, path: Path, config: Any, on_progress: Optional[Callable]) -> None:
        self.path, self.config, self.on_progress = Path(path), config, on_progress
        self.offset = 0
        self.epochs = 0  # of the fit in progress, where it said

    def poll(self) -> None:
        if self.on_progress is None:
            return
        try:
            with open(self.path, "rb") as events:
                events.seek(self.offset)
                data = events.read()
        except OSError:  # not written yet
            return
        whole = data.rfind(b"\n") + 1  # a line being written waits for the next read
        self.offset += whole
        for line in data[:whole].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                self._show(event)

    def _show(self, event: Dict[str, Any]) -> None:
        if event.get("event") == "fit_begin":
            epochs = (event.get("params") or {}).get("epochs")
            self.epochs = epochs if _number(epochs) else 0
        elif event.get("event") == "epoch":
            epoch, seconds = event.get("epoch"), event.get("seconds")
            loss = (event.get("logs") or {}).get("loss")
            self.on_progress(self.config, {
                "event": "epoch", "epoch": (epoch if _number(epoch) else 0) + 1,
                "epochs": self.epochs, "loss": loss if _number(loss) else math.nan,
                "seconds": seconds if _number(seconds) else math.nan,
            })  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
