"""Issue 54, the third hostile round, items 1-3 and 6-10: nothing outside the store and
kbench's own marked working folders is touched, nothing in a store is lost or
overwritten by a look-alike, a budget has an end, and every run of ``kbench exec``
gets the same stdin and leaves no daemon behind.

Fast: the store, the flags and the clean-up are called directly; the exec cases run a
plain Python script (no framework import) through the real runner.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import ROOT, dump, kbench_here, require_backends
from test_store import result

from kbench.cli import app
from kbench.cli.arguments import duration
from kbench.exec import runner as exec_runner
from kbench.exec.environment import ExecConfig
from kbench.measure import processes
from kbench.results import jsonfile
from kbench.results.config import ConfigError
from kbench.results.store import LockError, ResultStore, open_log, writer_lock
from kbench.run import leftovers
from kbench.studies import tune
from kbench.studies.slurm import SlurmOptions


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


# ---- item 2: no write through a link planted in a store ----------------------------


@pytest.fixture
def planted(tmp_path):
    """A store of two runs, and a file outside it that a planted link may point at."""
    store = ResultStore(tmp_path / "s")
    store.add(result("a1", "jax", 10.0))
    store.add(result("b1", "torch", 20.0))
    outside = tmp_path / "home" / ".bashrc"
    outside.parent.mkdir()
    outside.write_text("the user's own\n")
    return store.directory, outside


def test_compare_md_planted_as_a_link_is_refused_and_its_target_kept(tmp_path, planted):
    store, outside = planted
    (store / "compare.md").symlink_to(outside)
    done = kbench_here(["compare", "--store", str(store)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{store / 'compare.md'} is a symbolic link (to {outside})" in done.stderr
    assert "Traceback" not in done.stderr
    assert outside.read_text() == "the user's own\n"


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_a_lock_file_planted_as_a_link_is_not_truncated(tmp_path, planted, how):
    store, outside = planted
    getattr(store / ".lock", "symlink_to" if how == "symlink" else "hardlink_to")(outside)
    done = kbench_here(["results", "--store", str(store), "--merge", str(store)], tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"expected to create the lock file {store / '.lock'}" in done.stderr
    assert outside.read_text() == "the user's own\n"


def test_every_store_file_kbench_writes_refuses_a_link(planted):
    store, outside = planted
    for name in ("index.jsonl", "tune.json", "c1.json"):
        (store / name).unlink(missing_ok=True)
        (store / name).symlink_to(outside)
        with pytest.raises(jsonfile.LinkRefused, match=f"{name} is a symbolic link"):
            jsonfile.write_text_atomic(store / name, "x")
    (store / "logs").mkdir()
    (store / "logs" / "r1.log").symlink_to(outside)
    with pytest.raises(jsonfile.LinkRefused, match="r1.log is a symbolic link"):
        open_log(store, "r1")
    assert outside.read_text() == "the user's own\n"
    with writer_lock(store):  # the store's own lock file still locks
        pass
    (store / ".lock").unlink()
    (store / ".lock").symlink_to(outside)
    with pytest.raises(LockError, match="is a symbolic link"):
        with writer_lock(store):
            pass


# ---- item 3: the --sbatch filter sees prefixes and clusters as sbatch does ---------


@pytest.mark.parametrize("words", [
    ["--arr=0-99"], ["--arr", "0-99"], ["--outp=/tmp/x"], ["--err=/tmp/x"], ["--wra=id"],
    ["--pars"], ["-vo", "/tmp/x"], ["-ofile"], ["-Hva", "0-9"], ["-e", "/tmp/x"], ["--array"],
])  # fmt: skip
def test_sbatch_options_that_sbatch_reads_as_kbench_s_own_are_refused(words):
    with pytest.raises(ConfigError, match="other than the array, output and error"):
        SlurmOptions(sbatch=tuple(words))


def test_sbatch_options_of_the_user_s_own_still_pass():
    words = ("--partition=debug", "--time", "00:30:00", "-Jtest", "-N", "2", "-pdebug",
             "--gres=gpu:1", "--account=lab", "--exclusive", "-H", "--wait")  # fmt: skip
    assert SlurmOptions(sbatch=words).sbatch == words


# ---- item 10: a merge reads its sources, writes nothing into them -------------------


def snapshot(folder: Path):
    return sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*"))


def test_merge_writes_nothing_into_its_source(tmp_path):
    source = ResultStore(tmp_path / "src")
    source.add(result("a1", "jax", 10.0))
    (tmp_path / "src" / "index.jsonl").unlink()  # copied by hand: documents, no index
    bare = snapshot(tmp_path / "src")
    stale = ResultStore(tmp_path / "stale")
    stale.add(result("b1", "torch", 20.0))
    result("c1", "torch", 30.0).save(tmp_path / "stale")
    indexed = snapshot(tmp_path / "stale")  # its index lacks c1
    done = kbench_here(["results", "--store", str(tmp_path / "all"), "--merge",
                        str(tmp_path / "src"), str(tmp_path / "stale")], tmp_path)  # fmt: skip
    assert done.returncode == 0 and "3 runs added" in done.stdout, done.stderr
    assert snapshot(tmp_path / "src") == bare
    assert snapshot(tmp_path / "stale") == indexed


# ---- item 6: a duplicate run id with other content is refused, naming both ----------


def test_a_merged_duplicate_with_other_content_is_refused_naming_both(tmp_path):
    ResultStore(tmp_path / "all").add(result("a1", "jax", 10.0, host="laptop"))
    ResultStore(tmp_path / "same").add(result("a1", "jax", 10.0, host="laptop"))
    ResultStore(tmp_path / "other").add(result("a1", "jax", 99.0, host="cluster"))
    done = kbench_here(["results", "--store", str(tmp_path / "all"), "--merge",
                        str(tmp_path / "same"), str(tmp_path / "other")], tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "0 runs added, 1 already there; 1 refused" in done.stdout
    assert (
        f"{tmp_path / 'other' / 'a1.json'}: not merged: run a1 is already in this store as "
        f"{tmp_path / 'all' / 'a1.json'} (from laptop), with other content than "
        f"{tmp_path / 'other' / 'a1.json'} (from cluster)"
    ) in done.stderr
    [kept] = ResultStore(tmp_path / "all").results()
    assert kept.metrics["images_per_sec"] == 10.0


# ---- item 7: a budget has an end, and so has every phase of tune ------------------


@pytest.mark.parametrize("text", ["1e308h", "1e306m", "1e308", "8000000", "200h"])
def test_a_budget_past_a_week_or_infinite_is_refused_naming_the_limit(text, capsys):
    with pytest.raises(argparse.ArgumentTypeError, match=r"at most a week \(604800 s\)"):
        duration(text)
    with pytest.raises(SystemExit) as ended:
        app.build_parser().parse_args(["tune", "-b", "torch", "-m", "mlp", "--budget", text])
    assert ended.value.code == 2
    assert "--budget: expected at most a week (604800 s)" in capsys.readouterr().err
    assert duration("168h") == 604800.0


def test_tune_help_names_both_limits(capsys):
    with pytest.raises(SystemExit):
        app.build_parser().parse_args(["tune", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "at most a week" in shown
    assert f"ends after {tune.MAX_ROUNDS} rounds at most" in shown


def test_a_search_that_never_settles_ends_after_a_bounded_number_of_rounds(monkeypatch):
    """An infinite deadline (what 1e308h was) still ends: rounds are counted."""

    def trial(name):
        return SimpleNamespace(state="measuring", worker=SimpleNamespace(alive=True, name=name),
                               document=SimpleNamespace(ok=True),
                               candidate=SimpleNamespace(backend="torch", name=name))  # fmt: skip

    done = []

    def measure(trials):
        done.append(len(trials))
        if len(done) > 1000:
            raise RuntimeError("the rounds do not end")

    tuner = tune.Tuner.__new__(tune.Tuner)
    tuner.measure, tuner._halve = measure, lambda trials, reference: None
    trials = [trial("default"), trial("threads=1")]
    monkeypatch.setattr(tune, "best_of", lambda trials, reference: (reference, "undecided"))
    ended = tuner.rounds(trials, trials[0], float("inf"), 0.0, float("inf"))
    assert ended == f"{tune.MAX_ROUNDS} rounds, the most a phase takes"
    assert len(done) == tune.MAX_ROUNDS <= 1000


# ---- item 8: every run of kbench exec reads the same stdin ------------------------

READS_STDIN = (
    "import sys\ndata = sys.stdin.buffer.read()\nprint('got', len(data), 'bytes:', data)\n"
)


def test_every_backend_s_run_gets_the_same_piped_stdin(tmp_path, home):
    require_backends("torch", "jax")
    script = tmp_path / "t.py"
    script.write_text(READS_STDIN)
    store = tmp_path / "s"
    done = subprocess.run(
        [sys.executable, "-m", "kbench", "exec", "-b", "torch,jax", "--store", str(store),
         "--", "python", str(script)],
        input=b"learning_rate=3\n", capture_output=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, HOME=str(home), KBENCH_CACHE_DIR=str(home / "cache")),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    results = ResultStore(store).results()
    assert sorted(r.config["backend"] for r in results) == ["jax", "torch"]
    got = {r.config["backend"]: [line for line in r.metrics["log_tail"] if "got" in line]
           for r in results}  # fmt: skip
    assert got == {b: ["got 16 bytes: b'learning_rate=3\\n'"] for b in ("torch", "jax")}
    assert {r.metrics["stdin"] for r in results} == {
        "16 bytes, kbench's stdin read once: every run's"
    }


def test_stdin_past_the_limit_is_refused_before_any_run(tmp_path, home, monkeypatch):
    require_backends("jax")
    monkeypatch.setattr(exec_runner, "STDIN_LIMIT_BYTES", 8)
    read, write = os.pipe()
    os.write(write, b"x" * 9)
    os.close(write)
    saved = os.dup(0)
    try:
        os.dup2(read, 0)
        done = kbench_here(["exec", "-b", "jax", "--store", str(tmp_path / "s"), "--",
                            "python", "-c", READS_STDIN], home)  # fmt: skip
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    assert done.returncode == 2, dump(done)
    assert "expected at most 8 bytes on stdin" in done.stderr
    assert not list((tmp_path / "s").glob("*.json"))


# ---- item 9: a daemon that double-forks, setsid()s and clears its environment -------

ESCAPES = """
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open("escaped.pid", "w") as f:
            f.write(str(os.getpid()))
        for fd in (0, 1, 2):
            os.close(fd)
        os.execve("/bin/sleep", ["sleep", "60"], {})  # no kbench token left
    os._exit(0)
"""  # the script ends at once: nothing below it is seen by a poll


@pytest.mark.skipif(processes.SYSTEM != "Linux", reason="Linux's child subreaper")
def test_an_escaping_daemon_is_adopted_and_stopped(tmp_path):
    require_backends("jax")
    pid_file = tmp_path / "escaped.pid"
    try:
        [run] = exec_runner.ExecRunner(output_dir=tmp_path / "s").run_all(
            [ExecConfig("jax", ("python", "-c", ESCAPES), name="escapes", cwd=str(tmp_path))]
        )
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 5
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not psutil.pid_exists(pid), "the daemon outlived the run (and no zombie stays)"
        assert f"(pid {pid})" in " ".join(run.metrics["processes_stopped"]), run.metrics
        assert run.metrics["processes_escaped"].startswith("none: kbench was the child subreaper")
    finally:
        if pid_file.exists() and psutil.pid_exists(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_without_a_subreaper_the_result_says_escapes_cannot_be_ruled_out(tmp_path, monkeypatch):
    require_backends("jax")
    monkeypatch.setattr(processes, "SYSTEM", "Darwin")
    [run] = exec_runner.ExecRunner(output_dir=tmp_path / "s").run_all(
        [ExecConfig("jax", ("python", "-c", "pass"), name="quiet", cwd=str(tmp_path))]
    )
    assert run.ok, run.reason
    assert run.metrics["processes_escaped"].startswith("cannot be ruled out: this system has no")


def test_a_slurm_folder_planted_as_a_link_is_refused_and_its_target_kept(tmp_path):
    """``STORE/.slurm`` linked to a folder outside the store: a submission writes nothing
    there (its folder is refused, naming the link)."""
    import datetime as dt

    from kbench.results.jsonfile import LinkRefused
    from kbench.studies import slurm

    store, outside = tmp_path / "store", tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (store / ".slurm").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkRefused, match=r"\.slurm is a symbolic link"):
        slurm.submission_directory(store, dt.datetime.now(dt.timezone.utc))
    assert list(outside.iterdir()) == []
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = slurm.submission_directory(fresh, dt.datetime.now(dt.timezone.utc))
    assert made.parent == (fresh / ".slurm").resolve() and made.is_dir()
