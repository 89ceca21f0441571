"""Worker processes, the same way on every system: start one in its own group, stop
or kill its whole tree, tell whether a process lives, describe how it ended, pin it
to cores. The systems differ in this one place:

=====================  ====================================  ===============================
what                   Linux and macOS (POSIX)               Windows
=====================  ====================================  ===============================
own group              ``start_new_session=True`` (setsid)   ``CREATE_NEW_PROCESS_GROUP``
stop (Ctrl-C, timeout) SIGTERM to the group                  CTRL_BREAK_EVENT to the group
kill                   SIGKILL to the group                  psutil: every descendant, then it
is it alive            psutil (zombies count as gone)        psutil
pin to cores           ``psutil.Process.cpu_affinity``       ``psutil.Process.cpu_affinity``
                       (Linux; macOS has none: recorded)
parent gone            ``getppid()`` changed (re-parented)   no process with the parent's pid
                                                             and creation time
peak RSS               Linux: ``VmHWM`` (/proc/self/status;  psutil ``peak_wset``
                       ``ru_maxrss`` keeps the parent's
                       peak across fork and exec); macOS:
                       ``ru_maxrss`` (bytes)
adopt orphans          Linux: ``PR_SET_CHILD_SUBREAPER``;    none
                       macOS: none
=====================  ====================================  ===============================

Windows has no group kill: a process the worker left running after it ended is no
longer below it, so :func:`kill_tree` cannot find it there. The system is
:data:`SYSTEM`, read once (tests patch it). Runs under both environments.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import psutil

log = logging.getLogger(__name__)

SYSTEM = platform.system()  # "Linux", "Darwin" (macOS) or "Windows"
NO_AFFINITY_REASON = {
    "Darwin": "macOS has no CPU affinity call (the scheduler places threads itself): "
    "the worker is not pinned; its thread pools are still limited to the threads asked for",
}
OOM_HINT = " (the kernel's out-of-memory killer does this; see dmesg)"


def windows() -> bool:
    return SYSTEM == "Windows"


def group_options() -> Dict[str, Any]:
    """``Popen`` arguments for a group of its own (a terminal's Ctrl-C reaches kbench only)."""
    if windows():
        return {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)}
    return {"start_new_session": True}


def start(command: Sequence[str], **popen_args: Any) -> subprocess.Popen:
    return subprocess.Popen(list(command), **group_options(), **popen_args)


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


@contextlib.contextmanager
def adopting_orphans() -> Iterator[bool]:
    """While in the block, this process is a child subreaper: a process below it whose
    parent ends is re-parented to it, not to init, however it left its group, session
    and environment, so that it can be found (:func:`adopted`) and stopped. Yields
    False where the system has none (only Linux has)."""
    prctl = None
    if SYSTEM == "Linux":
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl
    adopting = prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield adopting
    finally:
        if adopting:
            prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def adopted(since: float, but: int) -> List[psutil.Process]:
    """This process's children started since ``since`` (``time.time()``), ``but`` one:
    as a subreaper, the orphans of what it started."""
    found = []
    for proc in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if proc.pid != but and proc.create_time() >= since:
                found.append(proc)
    return found


def reap(proc: psutil.Process) -> None:
    """Collect the exit of ``proc`` if it is this process's child (an adopted orphan
    killed or ended), so that no zombie of it stays."""
    with contextlib.suppress(psutil.Error, ChildProcessError):
        if proc.ppid() == os.getpid():
            proc.wait(timeout=5)  # psutil collects a child's exit (waitpid)


def descendants(pid: int) -> List[psutil.Process]:
    """Every process below ``pid`` (empty once it is gone or cannot be read)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def stop_tree(pid: int) -> bool:
    """Ask the group led by ``pid`` to stop (SIGTERM; CTRL_BREAK_EVENT on Windows, which
    ends a Python worker as Ctrl-C would). False when it is already gone."""
    try:
        if windows():
            os.kill(pid, signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
        else:
            os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    except OSError as err:  # Windows: the process ended between the check and the call
        if not windows():
            raise
        log.debug("CTRL_BREAK_EVENT to %d: %s", pid, err)
        return False
    return True


def kill_tree(pid: int) -> None:
    """Kill the group led by ``pid`` (Windows: every descendant still below it, then it)."""
    if not windows():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        return
    tree = descendants(pid)
    with contextlib.suppress(psutil.Error):
        tree.insert(0, psutil.Process(pid))
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def stop_pid(pid: int) -> None:
    """Ask one process (not its group) to stop: SIGTERM, or TerminateProcess on Windows."""
    _signal_pid(pid, signal.SIGTERM, "terminate")


def kill_pid(pid: int) -> None:
    """Kill one process: SIGKILL, or TerminateProcess on Windows."""
    _signal_pid(pid, getattr(signal, "SIGKILL", 9), "kill")


def _signal_pid(pid: int, number: int, method: str) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, psutil.Error):
        if windows():
            getattr(psutil.Process(pid), method)()
        else:
            os.kill(pid, number)


def kill_own_group() -> None:
    """Kill the group this process leads (Windows: its descendants): its parent is gone."""
    if windows():
        for proc in descendants(os.getpid()):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        return
    if os.getpgid(0) == os.getpid():  # leads its own group (the runner made it so)
        os.killpg(os.getpid(), signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not). Never sends
    a signal: ``os.kill(pid, 0)`` would end the process on Windows."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:  # another user's process: it exists
        return True
    except psutil.Error:
        return False


class ParentWatch:
    """Whether this process's parent is gone: POSIX re-parents an orphan (``getppid()``
    changes); on Windows no process has the parent's pid and creation time."""

    def __init__(self) -> None:
        self.parent = os.getppid()
        self.created: Optional[float] = None
        if windows():
            with contextlib.suppress(psutil.Error):
                self.created = psutil.Process(self.parent).create_time()

    def gone(self) -> bool:
        if not windows():
            return os.getppid() != self.parent
        try:
            return psutil.Process(self.parent).create_time() != self.created
        except psutil.Error:
            return True


def watch_parent(pid: Optional[int] = None, interval_s: float = 0.25) -> threading.Thread:
    """A daemon thread that kills this worker's process group within ``interval_s`` of its
    parent being gone, or, given ``pid`` (a data-parallel rank under torchrun watches
    kbench), of that process. A ``kill -9`` of the runner cannot stop its worker: the
    orphan would train on, and nobody would read its reply."""
    parent = ParentWatch()
    watched = pid or parent.parent
    gone = parent.gone if pid is None else lambda: not alive(pid)

    def watch() -> None:
        while not gone():
            time.sleep(interval_s)
        with contextlib.suppress(OSError, ValueError):  # the parent's pipe may be closed
            sys.stderr.write(f"[worker] parent process {watched} is gone; stopping\n")
            sys.stderr.flush()
        kill_own_group()
        os._exit(1)

    thread = threading.Thread(target=watch, name="kbench-parent-watch", daemon=True)
    thread.start()
    return thread


def describe_exit(code: int) -> str:
    """How a process ended, in words: "exited with code 3", "was killed by signal SIGKILL
    (the kernel's out-of-memory killer ...)" (negative codes: POSIX only)."""
    if code >= 0:
        return f"exited with code {code}"
    name = signal_name(code)
    how = f"was killed by signal {name}"
    if name == "SIGKILL":
        how += OOM_HINT
    return how


def signal_name(code: int) -> str:
    """The name of the signal behind a negative return code (``SIGKILL``)."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return str(-code)


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM (CTRL_BREAK) raises KeyboardInterrupt in the block; main thread only."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    names = ["SIGTERM"] + (["SIGBREAK"] if windows() else [])
    previous = {}
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        for number in [getattr(signal, name) for name in names if hasattr(signal, name)]:
            previous[number] = signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def usable_cores() -> int:
    """How many cores this process may run on: its CPU affinity where the system has one
    (``taskset``, a cpuset, a batch allocation), else all. A run's thread count defaults
    to it: more threads than cores make spinning thread pools wait on each other (on 2
    cores, two 2-thread trainings side by side ran 6x slower than two 1-thread ones)."""
    if hasattr(os, "sched_getaffinity"):
        with contextlib.suppress(OSError):
            return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def pin_cores(threads: int) -> Dict[str, Any]:
    """Pin this process to its first ``threads`` allowed cores when fewer than all; what a
    result records (``cpu_affinity``, or None and ``cpu_affinity_reason``)."""
    process = psutil.Process()
    if not hasattr(process, "cpu_affinity") or SYSTEM in NO_AFFINITY_REASON:
        reason = NO_AFFINITY_REASON.get(
            SYSTEM, f"psutil has no cpu_affinity on {SYSTEM}: the worker is not pinned"
        )
        return {"cpu_affinity": None, "cpu_affinity_reason": reason}
    try:
        cores = sorted(process.cpu_affinity())
        if threads < len(cores):
            cores = cores[:threads]
            process.cpu_affinity(cores)
    except (psutil.Error, OSError, ValueError) as err:
        return {
            "cpu_affinity": None,
            "cpu_affinity_reason": f"cpu_affinity failed, not pinned: {type(err).__name__}: {err}",
        }
    return {"cpu_affinity": cores}


def peak_rss() -> Dict[str, Any]:
    """This process's peak resident memory: ``{"bytes": ..., "source": ...}``."""
    if windows():
        info = psutil.Process().memory_info()
        return {"bytes": int(info.peak_wset), "source": "psutil memory_info().peak_wset "
                "(peak working set) of the worker"}  # fmt: skip
    if SYSTEM == "Linux":  # ru_maxrss holds the parent's peak: Linux keeps it across exec
        with contextlib.suppress(OSError, ValueError, StopIteration):
            with open("/proc/self/status") as status:
                line = next(n for n in status if n.startswith("VmHWM:"))
            return {"bytes": int(line.split()[1]) * 1024,
                    "source": "VmHWM of /proc/self/status (the worker's own peak)"}  # fmt: skip
    import resource  # POSIX only

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    unit = 1 if SYSTEM == "Darwin" else 1024  # bytes on macOS, KiB on Linux
    return {"bytes": int(peak) * unit, "source": "getrusage(RUSAGE_SELF).ru_maxrss of the worker"}
