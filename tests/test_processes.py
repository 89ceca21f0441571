"""kbench.measure.processes: worker start, process trees, stops, kills, parent watch
and pinning. The Linux branches run as they are; the Windows and macOS branches run
here with the module's system check (``processes.SYSTEM``) patched, on real processes
wherever psutil does the work (psutil is the same on every system). Nothing here ran
on Windows or macOS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from suite_plugin import suite_cores

from kbench.measure import processes

ROOT = Path(__file__).resolve().parents[1]
SLEEPER = "import time; time.sleep(60)"
# a process that starts a sleeping child, prints the child's pid, and sleeps
TREE = (
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def run_python(code: str, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env, **kwargs)  # fmt: skip


@pytest.fixture
def tree():
    """A real worker-like tree started by processes.start: (Popen, child pid)."""
    parent = processes.start([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    yield parent, child
    for pid in (child, parent.pid):
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    parent.wait()


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not processes.alive(pid):
            return True
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------ Linux, as it is


def test_linux_worker_leads_its_own_group_and_the_group_kill_takes_its_children(tree):
    parent, child = tree
    assert os.getpgid(parent.pid) == parent.pid  # setsid: its own session and group
    assert os.getpgid(child) == parent.pid
    processes.kill_tree(parent.pid)
    assert parent.wait(timeout=5) == -signal.SIGKILL
    assert gone(child)
    processes.kill_tree(parent.pid)  # nothing left: no error


def test_linux_stop_is_sigterm_to_the_group_and_false_once_gone(tree):
    parent, child = tree
    assert processes.stop_tree(parent.pid) is True
    assert parent.wait(timeout=5) == -signal.SIGTERM
    assert gone(child)
    done = processes.start([sys.executable, "-c", "pass"])
    done.wait()
    assert processes.stop_tree(done.pid) is False  # its group is empty: nothing to stop


def test_exit_descriptions_keep_the_linux_wording():
    assert processes.describe_exit(3) == "exited with code 3"
    assert processes.describe_exit(-signal.SIGKILL) == (
        "was killed by signal SIGKILL (the kernel's out-of-memory killer does this; see dmesg)"
    )
    assert processes.describe_exit(-signal.SIGSEGV) == "was killed by signal SIGSEGV"
    assert processes.signal_name(-signal.SIGTERM) == "SIGTERM"


def test_alive_counts_a_zombie_as_gone_and_sends_no_signal():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert processes.alive(os.getpid()) is True
    assert processes.alive(proc.pid) is False  # exited, not yet reaped
    proc.wait()
    assert processes.alive(proc.pid) is False


def test_sigterm_raises_keyboard_interrupt_inside_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        with processes.interrupt_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is before


def test_linux_pinning_uses_the_first_allowed_cores():
    allowed = suite_cores()  # the pytest worker runs on its share: the child gets them all
    if len(allowed) < 2:
        pytest.skip("one core: nothing to pin to fewer")
    code = (
        f"import json, os; os.sched_setaffinity(0, {allowed}); "
        "from kbench.measure import processes; print(json.dumps(processes.pin_cores(1)))"
    )
    done = run_python(code)
    assert json.loads(done.stdout) == {"cpu_affinity": allowed[:1]}
    code = code.replace("pin_cores(1)", f"pin_cores({len(allowed)})")
    assert json.loads(run_python(code).stdout) == {"cpu_affinity": allowed}


def test_linux_peak_rss_is_kib_times_1024():
    reading = processes.peak_rss()
    assert reading["bytes"] >= psutil.Process().memory_info().rss * 0.5
    assert reading["bytes"] % 1024 == 0 and "VmHWM" in reading["source"]


# ------------------------------------------------------------------ Windows, patched


@pytest.fixture
def on_windows(monkeypatch):
    monkeypatch.setattr(processes, "SYSTEM", "Windows")


def test_windows_starts_a_new_process_group(on_windows):
    assert processes.group_options() == {
        "creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0x200)
    }


def test_windows_kill_takes_the_tree_through_psutil(tree, monkeypatch):
    parent, child = tree
    monkeypatch.setattr(processes, "SYSTEM", "Windows")
    monkeypatch.setattr(os, "killpg", None)  # Windows has none: this branch must not need it
    processes.kill_tree(parent.pid)
    assert parent.wait(timeout=5) == -signal.SIGKILL  # psutil's kill (TerminateProcess there)
    assert gone(child)
    processes.kill_tree(parent.pid)  # gone: no error


def test_windows_stop_sends_ctrl_break_to_the_group(on_windows, monkeypatch):
    sent = []
    monkeypatch.setattr(signal, "CTRL_BREAK_EVENT", 1, raising=False)  # Windows' value
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert processes.stop_tree(4242) is True
    assert sent == [(4242, 1)]

    def vanished(pid, sig):
        raise OSError(87, "The parameter is incorrect")  # what Windows says for a gone pid

    monkeypatch.setattr(os, "kill", vanished)
    assert processes.stop_tree(4242) is False


def test_windows_stops_and_kills_single_processes_through_psutil(on_windows):
    for action in (processes.stop_pid, processes.kill_pid):
        proc = subprocess.Popen([sys.executable, "-c", SLEEPER])
        action(proc.pid)
        assert proc.wait(timeout=5) in (-signal.SIGTERM, -signal.SIGKILL)
        action(proc.pid)  # gone: no error


def test_windows_parent_watch_notices_a_parent_that_is_gone():
    # middle starts a watcher (Windows branch) and exits when told; the test reaps it,
    # as Windows forgets an ended process. The watcher says gone() at once, then when it
    # turns (or after 20 s).
    watcher = (
        "import time\n"
        "from kbench.measure import processes\n"
        "processes.SYSTEM = 'Windows'\n"
        "watch = processes.ParentWatch()\n"
        "print(watch.gone(), flush=True)\n"
        "deadline = time.monotonic() + 20\n"
        "while not watch.gone() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(watch.gone(), flush=True)\n"
    )
    middle = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {watcher!r}], stdin=subprocess.DEVNULL)\n"
        "sys.stdin.readline()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", middle], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    first = proc.stdout.readline().strip()  # the parent is alive
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)  # reaped: no process has the parent's pid and creation time
    second = proc.stdout.readline().strip()
    assert (first, second) == ("False", "True")


def test_windows_kill_own_group_kills_what_the_worker_started():
    code = (
        "import subprocess, sys, time\n"
        "from kbench.measure import processes\n"
        "processes.SYSTEM = 'Windows'\n"
        f"child = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}])\n"
        "time.sleep(0.2)\n"
        "processes.kill_own_group()\n"
        "print(child.wait(timeout=5))\n"
    )
    assert run_python(code).stdout.strip() == str(-signal.SIGKILL)


def test_windows_pins_through_psutil_too(monkeypatch):
    allowed = suite_cores()
    if len(allowed) < 2:
        pytest.skip("one core: nothing to pin to fewer")
    code = (
        f"import json, os\nos.sched_setaffinity(0, {allowed})\n"
        "from kbench.measure import processes\nprocesses.SYSTEM = 'Windows'\n"
        "print(json.dumps(processes.pin_cores(1)))\n"
    )
    assert len(json.loads(run_python(code).stdout)["cpu_affinity"]) == 1


# ------------------------------------------------------------------ macOS, patched


def test_macos_is_recorded_as_not_pinned_with_the_reason(monkeypatch):
    monkeypatch.setattr(processes, "SYSTEM", "Darwin")
    before = psutil.Process().cpu_affinity()
    settings = processes.pin_cores(1)
    assert settings["cpu_affinity"] is None
    assert "macOS has no CPU affinity" in settings["cpu_affinity_reason"]
    assert psutil.Process().cpu_affinity() == before  # nothing was touched


def test_macos_peak_rss_is_already_in_bytes(monkeypatch):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    monkeypatch.setattr(processes, "SYSTEM", "Darwin")
    darwin = processes.peak_rss()["bytes"]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert before <= darwin <= after  # ru_maxrss as it is: bytes on macOS
    assert processes.group_options() == {"start_new_session": True}


@pytest.mark.skipif(processes.SYSTEM != "Linux", reason="VmHWM is Linux's /proc")
def test_peak_rss_is_the_process_own_not_its_parents():
    """Linux keeps ru_maxrss across fork and exec: a small child of a large parent read the
    parent's peak (every runtime worker of a sweep read the sweep process's 137 MiB)."""
    held = bytearray(256 * 2**20)
    held[::4096] = b"\1" * len(held[::4096])  # resident, not only reserved
    code = (
        "import json; from kbench.measure import processes; print(json.dumps(processes.peak_rss()))"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    peak = json.loads(child.stdout)
    assert psutil.Process().memory_info().rss > 256 * 2**20
    assert 0 < peak["bytes"] < 128 * 2**20, peak
    assert "VmHWM" in peak["source"]
    del held
