"""Hostile and careless scripts under ``kbench exec`` (and the progress protocol that
``kbench run``'s workers share): lines that pose as kbench's events, a command that
does not exist, daemons that leave the process group and session, output without
end, a usage error, a report whose names matplotlib cannot lay out, and kbench's
epoch lines beside Keras' own progress bar.

Fast: plain Python scripts (no framework import) through the real runner, the real
supervision and the CLI; one slow test trains a tiny Keras model with its progress bar.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Iterator, List

import psutil
import pytest
from conftest import ROOT, dump, kbench_here, require_backends, run_kbench

from kbench.exec.environment import ExecConfig
from kbench.exec.runner import ExecRunner
from kbench.exec.watch import EpochFeed, LogKeeper
from kbench.results.config import ConfigError
from kbench.run.engine import LogWriter, Worker
from kbench.run.protocol import parse_progress, show_progress

SCRIPTS = ROOT / "tests" / "user_scripts"
BAD_EVENTS = [
    '@kbench {"event": "epoch"}',
    '@kbench {"event": "epoch", "epoch": "one", "epochs": null, "loss": [], "seconds": {}}',
    '@kbench {"event": "step", "step": 1}',
    '@kbench {"event": "profile", "steps": true}',
    '@kbench {"event": 5}',
    "@kbench [1, 2]",
    '@kbench {"event": "epoch", "epo',
    "@kbench not json at all",
    '@kbench {"event": "epoch", "epoch": 1, "epochs": 1e999999, "loss": 1, "seconds": 10e999}',
    '@kbench {"event": "step", "step": 1, "steps": 1' + "0" * 400 + "}",
]
# prints every bad event, then more than a pipe holds: a reader that died would block it
PRINTS_BAD_EVENTS = f"""
import sys
for line in {BAD_EVENTS!r}:
    print(line, flush=True)
sys.stdout.write(("x" * 99 + "\\n") * 20000)
print("the end", flush=True)
"""


def config(name: str, command, work: Path, **settings) -> ExecConfig:
    return ExecConfig("jax", tuple(command), name=name, cwd=str(work), **settings)


# ---- case 5: malformed progress lines neither kill the reader nor hang the run ----


def test_malformed_events_are_skipped_not_raised(caplog):
    label = config("odd", ["python", "x.py"], Path("/"))
    for line in BAD_EVENTS:
        event = parse_progress(line + "\n")
        assert event is not None  # a line that starts with the prefix is never output
        show_progress(label, event)  # skipped: no KeyError, TypeError, OverflowError
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    # a well-formed one is still shown
    with caplog.at_level("INFO", logger="kbench"):
        show_progress(label, parse_progress(
            '@kbench {"event": "epoch", "epoch": 2, "epochs": 3, "loss": 0.5, "seconds": 1.5}'
        ))  # fmt: skip
    assert "epoch 2/3, loss 0.5000, 1.5 s" in caplog.text


def test_a_worker_printing_malformed_events_ends_with_its_result(tmp_path):
    """``kbench run``'s supervision (a user model's print reaches the same reader)."""
    settings = config("odd", ["python", "x.py"], tmp_path, timeout_s=60, sample_interval_s=0)
    started = time.monotonic()
    worker = Worker.launch(
        [sys.executable, "-c", PRINTS_BAD_EVENTS], dict(os.environ), tmp_path,
        tmp_path / "log.txt", name="odd", progress_of=settings, on_progress=show_progress,
    )  # fmt: skip
    timed_out = worker.wait(settings.timeout_s)
    worker.close()
    assert not timed_out and worker.process.returncode == 0
    assert time.monotonic() - started < 30
    assert worker.tail[-1] == "the end"


def test_exec_of_a_script_printing_malformed_events_ends_promptly(home, tmp_path):
    require_backends("jax")
    script = tmp_path / "odd.py"
    script.write_text(PRINTS_BAD_EVENTS)
    store = tmp_path / "store"
    started = time.monotonic()
    done = run_kbench(
        ["exec", "-b", "jax", "--timeout", "60", "--store", str(store), "--", "python",
         str(script)],
        home, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, dump(done)
    [result] = done.results()
    assert result.ok and result.wall_time_s < 30, result.reason
    assert result.metrics["log_tail"][-1] == "the end"
    assert time.monotonic() - started < 45
    assert "Traceback" not in done.stderr


# ---- case 7: a command that cannot start is refused, exit 2 ----------------------


def test_a_command_that_does_not_exist_exits_2_with_a_teaching_error(home, tmp_path):
    require_backends("torch")
    done = kbench_here(["exec", "-b", "torch", "--store", str(tmp_path / "s"), "--",
                       "/nonexistent/cmd"], home)  # fmt: skip
    assert done.returncode == 2, dump(done)
    assert "kbench exec: error: --command:" in done.stderr
    assert "'/nonexistent/cmd'" in done.stderr and "no such file" in done.stderr
    assert "python train.py" in done.stderr  # the fix
    assert "Traceback" not in done.stderr and "FileNotFoundError" not in done.stderr
    assert not list((tmp_path / "s").glob("*.json"))


def test_programs_not_on_path_or_not_executable_are_refused_before_any_run(tmp_path):
    require_backends("jax")
    plain = tmp_path / "run.sh"
    plain.write_text("echo hi\n")  # not executable
    runner = ExecRunner(output_dir=tmp_path / "store")
    with pytest.raises(ConfigError, match="on PATH.*'no-such-program-kb'"):
        runner.run_all([config("x", ["no-such-program-kb", "a"], tmp_path)])
    with pytest.raises(ConfigError, match="could not be started.*chmod \\+x"):
        runner.run_all([config("ok", ["python", "-c", "pass"], tmp_path),
                        config("x", ["./run.sh"], tmp_path)])  # fmt: skip
    assert not list((tmp_path / "store").glob("*.json"))  # refused before the first run


# ---- case 8: nothing the script started outlives the run -------------------------

DAEMONS = """
import os, sys, time

def daemon(name, setsid=True, close=False, setpgid=False, clean_env=False, twice=False):
    if os.fork():
        return
    if twice and os.fork():
        os._exit(0)
    if setsid:
        os.setsid()
    if setpgid:
        os.setpgid(0, 0)
    with open(name + ".pid", "w") as f:
        f.write(str(os.getpid()))
    if close:
        for fd in (0, 1, 2):
            os.close(fd)
    if clean_env:  # no kbench token left: found by its session or by the tree only
        os.execve("/bin/sleep", ["sleep", "60"], {})
    time.sleep(60)
    os._exit(0)

daemon("closed", close=True, twice=True)     # the issue's: setsid, streams closed
daemon("holds_stdout")                       # setsid, keeps kbench's pipe open
daemon("own_group", setsid=False, setpgid=True, clean_env=True)  # the session finds it
daemon("own_session", clean_env=True)        # seen below the script while it ran
time.sleep(1.5)
print("script done", flush=True)
"""


@pytest.fixture
def daemon_pids(tmp_path) -> Iterator[List[Path]]:
    files = [tmp_path / f"{name}.pid" for name in
             ("closed", "holds_stdout", "own_group", "own_session")]  # fmt: skip
    yield files
    for path in files:  # whatever a failure left: the processes this test started
        if path.exists():
            try:
                os.kill(int(path.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.skipif(not hasattr(os, "setsid"), reason="POSIX sessions")
def test_daemons_are_stopped_and_the_script_time_ends_with_the_script(tmp_path, daemon_pids):
    require_backends("jax")
    started = time.monotonic()
    [result] = ExecRunner(output_dir=tmp_path / "store").run_all(
        [config("daemons", ["python", "-c", DAEMONS], tmp_path, sample_interval_s=0.1)]
    )
    elapsed = time.monotonic() - started
    assert result.ok, result.reason
    assert result.wall_time_s < 6, result.wall_time_s  # was 12 s: the reader's wait
    assert elapsed < 15
    pids = [int(path.read_text()) for path in daemon_pids]
    deadline = time.monotonic() + 5
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in pids if not gone(pid)] == []
    stopped = " ".join(result.metrics["processes_stopped"])
    assert all(f"pid {pid})" in stopped for pid in pids), stopped
    assert "script done" in result.metrics["log_tail"]


# ---- case 10: usage error, a capped log, a quiet report ----------------------------


def test_the_exec_usage_error_names_the_command(home):
    done = kbench_here(["exec", "-b", "jax", "--"], home)
    assert done.returncode == 2
    assert done.stderr.startswith("kbench exec: error: --command: expected the command")
    assert "['--']" not in done.stderr


def test_a_script_printing_without_end_has_its_log_cut_and_said(tmp_path):
    require_backends("jax")
    script = (
        "import sys\n"
        "sys.stdout.write('a' * 300000)\n"  # one line with no end
        "for i in range(30000): print('line', i)\n"
        "print('the end')\n"
    )
    runner = ExecRunner(output_dir=tmp_path / "store", log_limit_bytes=100_000)
    [result] = runner.run_all([config("loud", ["python", "-c", script], tmp_path)])
    assert result.ok, result.reason
    log = result.metrics["log"]
    assert log["printed_bytes"] > 600_000 and log["cut_at_bytes"] == 100_000
    text = (tmp_path / "store" / "logs" / f"{result.run_id}.log").read_text()
    assert len(text) < 110_000
    assert "the log is cut here, after the first 100,000 bytes" in text
    assert text.rstrip().endswith("line 29999\nthe end")  # its last lines, after the cut
    assert result.metrics["log_tail"][-1] == "the end"
    assert all(len(line) <= 2000 for line in result.metrics["log_tail"])


def test_a_log_within_its_limit_is_kept_whole(tmp_path):
    keeper = LogKeeper(LogWriter.open(tmp_path / "log"), limit=100)
    keeper.feed("été\nok".encode())
    keeper.close()
    assert (tmp_path / "log").read_text() == "été\nok"
    assert keeper.summary()["cut_at_bytes"] is None and list(keeper.tail) == ["été", "ok"]


def test_a_report_with_names_matplotlib_cannot_lay_out_warns_nothing(tmp_path):
    from test_report import fake_result

    from kbench.views.report import write_report

    results = [fake_result("torch"), fake_result("jax", rate=500.0)]
    for result in results:
        result.config["model"] = "m" * 400
    gc.collect()  # what earlier tests of this process left is not the report's to warn
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = write_report(results, tmp_path / "r.html")
    assert summary.path.exists()
    assert [str(w.message) for w in caught] == []


# ---- issue 31 case 2: events never mixed into the script's output ------------------


def test_an_event_glued_to_a_progress_bar_is_read():
    glued = '\r4/4 ━━━━ 0s 3ms/step - loss: 0.0837@kbench {"event": "epoch", "epoch": 1}\n'
    assert parse_progress(glued) == {"event": "epoch", "epoch": 1}
    assert parse_progress("mail me @kbench about it\n") is None  # output, kept


def test_exec_reads_epochs_from_the_events_file(tmp_path):
    shown = []
    feed = EpochFeed(tmp_path / "events.jsonl", "cfg", lambda c, e: shown.append(e))
    feed.poll()  # no file yet
    lines = [{"event": "fit_begin", "params": {"epochs": 2}},
             {"event": "epoch", "epoch": 0, "logs": {"loss": 0.25}, "seconds": 1.0},
             {"event": "epoch", "epoch": "x", "logs": None}]  # fmt: skip
    with open(tmp_path / "events.jsonl", "w") as events:
        events.write("".join(json.dumps(e) + "\n" for e in lines) + '{"event": "ep')
    feed.poll()
    assert shown[0] == {"event": "epoch", "epoch": 1, "epochs": 2, "loss": 0.25, "seconds": 1.0}
    assert len(shown) == 2 and shown[1]["epoch"] == 1  # odd fields: shown as unknown


@pytest.mark.slow
@pytest.mark.own_processes("the user's own script, run as the user runs it")
def test_keras_progress_bar_and_kbench_epoch_lines_stay_apart(home, tmp_path):
    require_backends("jax")
    store = tmp_path / "store"
    done = run_kbench(["exec", "-b", "jax", "--store", str(store), "--", "python",
                       str(SCRIPTS / "progress_bar.py")], home)  # fmt: skip
    assert done.returncode == 0, dump(done)
    [result] = done.results()
    assert "epoch 1/2, loss" in done.stderr and "epoch 2/2, loss" in done.stderr
    log = (store / "logs" / f"{result.run_id}.log").read_text()
    assert "Epoch 2/2" in log and "@kbench" not in log
    assert not any("@kbench" in line for line in result.metrics["log_tail"])
    assert result.metrics["epochs"] == 2
