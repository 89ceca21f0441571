"""Issue 54, the third hostile round, items 1-3 and 6-10: nothing outside the store and
kbench's own marked working folders is touched, nothing in a store is lost or
overwritten by a look-alike, a budget has an end, and every run of ``kbench exec``
gets the same stdin and leaves no daemon behind.

Fast: the store, the flags and the clean-up are called directly; the exec cases run a
plain Python script (no framework import) through the real runner.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kbench.run import leftovers


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# ---- item 1: only kbench's own marked working folders are cleared ------------------


def test_a_folder_named_like_a_working_folder_but_unmarked_is_kept(tmp_path):
    users = tmp_path / f"kbench-{dead_pid()}-results"  # a user's store, named by chance
    (users / "notes").mkdir(parents=True)
    (users / "notes" / "todo.txt").write_text("mine")
    assert leftovers.remove_stale(tmp_path) == []
    assert (users / "notes" / "todo.txt").read_text() == "mine"


def test_only_a_marker_naming_the_folder_s_dead_pid_lets_it_go(tmp_path):
    pid = dead_pid()
    forged = tmp_path / f"kbench-{pid}-forged"  # a marker naming another PID is not its own
    forged.mkdir()
    (forged / leftovers.MARKER).write_text(f"{leftovers.TAG} {os.getpid()}\n")
    linked = tmp_path / f"kbench-{pid}-linked"  # a marker that is a link is not kbench's
    linked.mkdir()
    (linked / leftovers.MARKER).symlink_to(forged / leftovers.MARKER)
    ours = tmp_path / f"kbench-exec-{pid}-abcd1234"
    ours.mkdir()
    (ours / leftovers.MARKER).write_text(f"{leftovers.TAG} {pid}\n")
    assert leftovers.remove_stale(tmp_path) == [ours]
    assert forged.exists() and linked.exists()


def test_a_working_folder_is_marked_as_kbench_s_own_when_made(tmp_path, monkeypatch):
    monkeypatch.setattr(leftovers.tempfile, "tempdir", str(tmp_path))
    with leftovers.working_directory("ops") as directory:
        assert leftovers.marked(Path(directory), os.getpid())
