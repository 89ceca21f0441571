"""A worker stops when the kbench process that started it is gone.

The runner stops its worker on Ctrl-C, SIGTERM or a timeout; ``kill -9`` of the
runner cannot. Without a watch an orphaned worker trains on until it next writes to
its closed output pipe (seconds later) or to the end. :func:`watch_parent` starts a
daemon thread that checks every ``interval_s`` whether the process's parent is gone
(:class:`kbench.measure.processes.ParentWatch`: re-parented on POSIX, no longer
running on Windows), or, given ``pid`` (a data-parallel run's rank, whose parent may
be torchrun, watches kbench itself), whether that process is, and then kills the
worker's process group (itself and whatever it started), so it ends within a second
of kbench.

Imports the standard library and :mod:`kbench.measure.processes` (psutil), which
both environments have: it runs under both.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Optional

from kbench.measure.processes import ParentWatch, alive, kill_own_group

INTERVAL_S = 0.25


def watch_parent(pid: Optional[int] = None, interval_s: float = INTERVAL_S) -> threading.Thread:
    parent = ParentWatch()
    watched = pid or parent.parent
    gone = parent.gone if pid is None else lambda: not alive(pid)

    def watch() -> None:
        while not gone():
            time.sleep(interval_s)
        try:  # the output pipe was the parent's: it may be closed
            sys.stderr.write(f"[worker] parent process {watched} is gone; stopping\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        kill_own_group()
        os._exit(1)

    thread = threading.Thread(target=watch, name="kbench-parent-watch", daemon=True)
    thread.start()
    return thread
