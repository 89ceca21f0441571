"""What a killed kbench leaves behind, and how the next one clears it.

A command's working directory (prepared data, per-run KERAS_HOME, task files) lives
under the system's temporary directory as ``kbench-[KIND-]PID-XXXXXXXX``: ``PID`` is
the process that made it. Python removes it when the command ends, even by Ctrl-C
or SIGTERM; ``kill -9`` leaves it. Each holds :data:`MARKER`, written as it is made:
``kbench-working-directory PID``. Every new working directory first removes the
directories of this user whose marker names the PID of their name and whose PID no
longer runs. A directory without that marker (a user's ``kbench-2024-results``, an
older kbench's) is never removed: a name alone says nothing of who made it.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from kbench.measure import processes
from kbench.results.config import RunConfig
from kbench.results.jsonfile import write_json_atomic

log = logging.getLogger(__name__)

PATTERN = re.compile(r"^kbench-(?:[a-z]+-)?(\d+)-[a-z0-9_]+$")
MARKER, TAG = ".kbench-owner", "kbench-working-directory"


def working_directory(kind: str = "") -> tempfile.TemporaryDirectory:
    """A temporary directory named with this process's PID, after clearing dead ones'."""
    remove_stale()
    middle = f"{kind}-" if kind else ""
    directory = tempfile.TemporaryDirectory(prefix=f"kbench-{middle}{os.getpid()}-")
    (Path(directory.name) / MARKER).write_text(f"{TAG} {os.getpid()}\n")
    return directory


def marked(directory: Path, pid: int) -> bool:
    """Whether ``directory`` holds kbench's marker naming ``pid`` (a plain file)."""
    try:
        if not stat.S_ISREG((directory / MARKER).lstat().st_mode):
            return False
        with open(directory / MARKER, "rb") as marker:
            return marker.read(100).split() == [TAG.encode(), str(pid).encode()]
    except OSError:
        return False


def remove_stale(root: Optional[Path] = None) -> List[Path]:
    """Remove this user's marked kbench working directories whose owner process is gone."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError as err:
        log.debug("leftovers: cannot list %s: %s", root, err)
        return removed
    for entry in entries:
        match = PATTERN.match(entry.name)
        owner = int(match.group(1)) if match else os.getpid()
        try:
            info = entry.lstat()
            # a PID kbench did not write (0), or this system cannot have: kept
            if owner == os.getpid() or owner <= 0 or processes.alive(owner):
                continue
        except (OSError, OverflowError):
            continue
        if not entry.is_dir() or entry.is_symlink() or info.st_uid != os.getuid():
            continue
        if not marked(entry, owner):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
            log.info("removed %s, left by kbench process %s, which is gone", entry, match[1])
    return removed


def write_interrupted(
    log_path: Path, run_id: str, config: RunConfig, started_at: float,
    sweep: Optional[Dict[str, Any]],
) -> Path:  # fmt: skip
    """``logs/<run_id>.interrupted.json``: why a log has no result. Not a result document
    (the store reads none under logs/): a resumed sweep runs it again."""
    path = log_path.with_name(f"{run_id}.interrupted.json")
    document = {
        "run_id": run_id, "status": "interrupted",
        "reason": "kbench was interrupted (Ctrl-C or SIGTERM) while this run was in "
        "progress; its worker was stopped and no result was stored. Run it again (the "
        "same kbench sweep command resumes with it).",
        "config": config.to_dict(), "sweep": sweep,
        "started_at": dt.datetime.fromtimestamp(started_at, dt.timezone.utc).isoformat(),
        "interrupted_at": dt.datetime.now(dt.timezone.utc).isoformat(), "log": log_path.name,
    }  # fmt: skip
    try:
        write_json_atomic(path, document)
    except OSError as err:  # a full disk must not hide the interrupt
        log.warning("%s: could not write %s: %s", config.label(), path, err)
    return path
