"""A worker stops when the kbench process that started it is gone.

The runner stops its worker on Ctrl-C, SIGTERM or a timeout; ``kill -9`` of the
runner cannot. Without a watch an orphaned worker trains on until it next writes to
its closed output pipe (seconds later) or to the end. :func:`watch_parent` starts a
daemon thread that checks every ``interval_s`` whether the process's parent changed
(an orphan is adopted by init or a subreaper) and then kills the worker's process
group (itself and whatever it started), so it ends within a second of its parent.

Imports only the standard library: it runs under both environments.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

INTERVAL_S = 0.25


def watch_parent(interval_s: float = INTERVAL_S) -> threading.Thread:
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        try:  # the output pipe was the parent's: it may be closed
            sys.stderr.write(f"[worker] parent process {parent} is gone; stopping\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if os.getpgid(0) == os.getpid():  # leads its own group (the runner made it so)
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)

    thread = threading.Thread(target=watch, name="kbench-parent-watch", daemon=True)
    thread.start()
    return thread
