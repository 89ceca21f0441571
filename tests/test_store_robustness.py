"""A store you can trust: damaged documents, a stale index, a full disk, two writers,
NaN. Real documents and real processes; the only fakes are an OSError injected where
a small file system cannot be had, and the file system itself (a tmpfs in a private
mount namespace) where it can.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, kbench_here, require_backends

from kbench.results import jsonfile
from kbench.results.result import RunResult
from kbench.results.store import (
    INDEX_NAME,
    ResultNotSaved,
    ResultStore,
    StoreLocked,
    low_space_warning,
    rescue_places,
    writer_lock,
)
from kbench.studies.sweep import load_sweep

TINY = {"model": "mlp", "dataset": "synthetic", "steps": 2, "warmup_steps": 1,
        "train_samples": 64, "test_samples": 16, "backend": "torch"}  # fmt: skip


def result(run_id: str, backend: str = "jax", ips: float = 10.0, **changes) -> RunResult:
    fields = dict(
        run_id=run_id,
        status="ok",
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": 32},
        started_at=f"2026-01-01T00:00:{len(run_id):02d}",
        wall_time_s=1.0,
        environment={"machine": {"hostname": "laptop", "gpu": {"devices": []}}},
        data={"synthetic": True, "name": "synthetic"},
        metrics={
            "images_per_sec": ips,
            "test_accuracy": 0.5,
            "memory": [{"kind": "process_peak_rss", "bytes": 2**30}],
        },  # fmt: skip
    )
    fields.update(changes)
    return RunResult(**fields)


def write_sweep(tmp_path: Path, batch_sizes=(8, 16)) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "settings": TINY,
                                    "matrix": {"batch_size": list(batch_sizes)}}))  # fmt: skip
    return path


def sweep_results(path: Path):
    """One good result per run of the sweep file, as a sweep would have written them."""
    sweep = load_sweep(path)
    return [
        result(
            f"r{i}",
            "torch",
            10.0 * (i + 1),
            config=run.config.to_dict(),
            sweep=sweep.provenance(run),
        )  # fmt: skip
        for i, run in enumerate(sweep.runs)
    ]


# 2. documents of the wrong type -------------------------------------------------

WRONG_TYPES = {
    "env-null": {"environment": None},
    "metrics-list": {"metrics": [1, 2]},
    "config-null": {"config": None},
    "started-number": {"started_at": 1767225600},
}


def test_a_document_of_the_wrong_type_is_skipped_once_by_every_reader(tmp_path):
    path = write_sweep(tmp_path)
    store = tmp_path / "s"
    good, bad_twin = sweep_results(path)
    ResultStore(store).add(good)
    # The second run's only document is damaged: it must count as not done.
    for name, change in WRONG_TYPES.items():
        document = dict(bad_twin.to_dict(), run_id=name, **change)
        (store / f"{name}.json").write_text(json.dumps(document))

    listing = kbench_here(["results", "--store", str(store)], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "1 runs in" in listing.stdout and "Traceback" not in listing.stderr
    for name in WRONG_TYPES:
        assert listing.stderr.count(f"{name}.json") == 1, listing.stderr
    assert "environment: expected an object; the document has null" in listing.stderr
    assert "metrics: expected an object; the document has a list" in listing.stderr
    assert "started_at: expected a string; the document has a number" in listing.stderr

    compare = kbench_here(["compare", "--store", str(store)], tmp_path)
    assert compare.returncode == 0 and "Traceback" not in compare.stderr, compare.stderr
    assert compare.stderr.count("config-null.json") == 1

    report = kbench_here(["report", "--store", str(store)], tmp_path)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    assert (store / "report.html").exists()

    dry = kbench_here(["sweep", str(path), "--store", str(store), "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr
    assert "2 runs, 1 already done, 1 to run" in dry.stdout, dry.stdout
    assert "counts as not done" in dry.stderr

    table = subprocess.run([sys.executable, "-m", "kbench.cli.distributed_table", "--store",
                            str(store)], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert table.returncode == 1 and "no data-parallel runs" in table.stderr, table.stderr
    assert table.stderr.count("config-null.json: skipped") == 1, table.stderr


# 3. the index is a cache ----------------------------------------------------------


def test_the_index_is_a_cache_checked_against_each_document(tmp_path):
    path = write_sweep(tmp_path, batch_sizes=(8, 16, 32, 64))
    store = tmp_path / "s"
    results = sweep_results(path)
    for r in results:
        ResultStore(store).add(r)
    assert len(ResultStore(store).entries()) == 4  # the index now holds all four
    truncated, noise, future, edited = (store / f"{r.run_id}.json" for r in results)
    truncated.write_text(truncated.read_text()[:200])
    noise.write_bytes(os.urandom(600))
    future.write_text(json.dumps(dict(json.loads(future.read_text()), schema_version=999)))
    # Same size, new content: only the modification time tells.
    text = edited.read_text()
    edited.write_text(text.replace('"laptop"', '"laptoq"'))
    assert len(text) == len(edited.read_text())

    listing = kbench_here(["results", "--store", str(store)], tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "1 runs in" in listing.stdout and "laptoq" in listing.stdout, listing.stdout
    assert "does not parse" in listing.stderr and "newer kbench" in listing.stderr
    assert "r0.json" in listing.stderr and "r1.json" in listing.stderr
    assert "r2.json" in listing.stderr and "r3.json" not in listing.stderr

    export = kbench_here(["results", "--store", str(store), "--export",
                         str(tmp_path / "x.csv")], tmp_path)  # fmt: skip
    assert export.returncode == 0, export.stderr
    assert "1 runs written" in export.stdout
    assert "3 unreadable documents left out" in export.stdout, export.stdout

    dry = kbench_here(["sweep", str(path), "--store", str(store), "--dry-run"], tmp_path)
    assert "4 runs, 1 already done, 3 to run" in dry.stdout, dry.stdout + dry.stderr
    assert ResultStore(store).done_keys() == {results[3].sweep["run_key"]: "ok"}
    # The index was rewritten with what the documents say now.
    lines = (store / INDEX_NAME).read_text().splitlines()
    assert [json.loads(line)["host"] for line in lines] == ["laptoq"]


def test_an_index_line_of_the_wrong_type_rebuilds_the_index(tmp_path):
    store = ResultStore(tmp_path)
    store.add(result("a1"))
    line = json.loads((tmp_path / INDEX_NAME).read_text())
    (tmp_path / INDEX_NAME).write_text(json.dumps(dict(line, config=None)) + "\n")
    assert [e.config["backend"] for e in store.entries()] == ["jax"]


# NaN and infinity: standard JSON --------------------------------------------------


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_written_as_null_with_their_places(tmp_path):
    nan = result("n1", metrics={"images_per_sec": math.nan, "final_train_loss": math.inf,
                                "losses": [1.0, -math.inf], "memory": []})  # fmt: skip
    ResultStore(tmp_path).add(nan)
    document = _strict((tmp_path / "n1.json").read_text())  # no bare NaN / Infinity
    assert document["metrics"]["images_per_sec"] is None
    assert document["metrics"]["losses"] == [1.0, None]
    assert document["non_finite"] == [
        "metrics.final_train_loss", "metrics.images_per_sec", "metrics.losses[1]"]  # fmt: skip
    _strict((tmp_path / INDEX_NAME).read_text().splitlines()[0])
    (entry,) = ResultStore(tmp_path).entries()
    assert entry.images_per_sec is None
    back = RunResult.load(tmp_path / "n1.json")
    assert back.metrics["final_train_loss"] is None and back.non_finite == document["non_finite"]


def test_a_version_2_document_with_bare_nan_is_read_with_its_places(tmp_path):
    data = result("old").to_dict()
    del data["non_finite"]
    data.update(schema_version=2, wall_time_s=math.nan)
    (tmp_path / "old.json").write_text(json.dumps(data))  # Python writes bare NaN
    back = RunResult.load(tmp_path / "old.json")
    assert back.wall_time_s is None and back.non_finite == ["wall_time_s"]


# 1. a store that cannot take a result ---------------------------------------------


def test_a_result_the_store_cannot_take_is_kept_aside_and_imports_back(tmp_path, monkeypatch):
    store = tmp_path / "s"
    ResultStore(store).add(result("a1"))
    before = sorted(p.name for p in store.iterdir())
    real_replace = os.replace

    def full_disk(src, dst):  # the store's file system is full; the rest is not
        if Path(dst).parent == store:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ResultNotSaved) as caught:
        ResultStore(store).add(result("b22", "torch", 20.0))
    monkeypatch.setattr(os, "replace", real_replace)

    message = str(caught.value)
    kept = rescue_places(store)[0]
    assert caught.value.kept == kept and (kept / "b22.json").exists()
    assert "No space left on device" in message and str(kept / "b22.json") in message
    assert sorted(p.name for p in store.iterdir()) == before + ["logs"]  # no temporary file
    command = message.split("import it with:\n  ")[1].splitlines()[0]
    assert command.startswith("kbench results --store ")
    merged = kbench_here(command.split()[1:], tmp_path)
    assert merged.returncode == 0 and "1 runs added" in merged.stdout, merged.stderr
    assert [e.run_id for e in ResultStore(store).entries()] == ["a1", "b22"]


def test_with_nowhere_to_keep_it_the_cache_takes_it_and_the_temp_file_goes(tmp_path, monkeypatch):
    store = tmp_path / "s"
    store.mkdir()
    (store / "logs").write_text("a file where the logs directory should be")
    monkeypatch.setenv("KBENCH_CACHE_DIR", str(tmp_path / "cache"))
    real_fsync = os.fsync
    calls = []

    def fail_first(fd):  # the write itself fails, after the temporary file was made
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fail_first)
    with pytest.raises(ResultNotSaved) as caught:
        ResultStore(store).add(result("c1"))
    assert caught.value.kept == rescue_places(store)[1]
    assert str(caught.value.kept).startswith(str(tmp_path / "cache" / "unsaved"))
    assert RunResult.load(caught.value.kept / "c1.json").run_id == "c1"
    assert sorted(p.name for p in store.iterdir()) == ["logs"]


def test_a_log_that_cannot_be_created_stops_kbench_run_before_it_starts(tmp_path):
    require_backends("torch")
    store = tmp_path / "s"
    store.mkdir()
    (store / "logs").write_text("a file where the logs directory should be")
    done = kbench_here(["run", "-b", "torch", "-m", "mlp", "--dataset", "synthetic", "--steps",
                       "2", "--store", str(store)], tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot write the log of the next run" in done.stderr
    assert not list(store.glob("*.json"))


def _unshare_works(tmp_path: Path) -> str:
    """Empty when this machine lets us mount a tmpfs in a private namespace, else why not."""
    if not shutil.which("unshare"):
        return "unshare is not installed"
    probe = tmp_path / "probe"
    probe.mkdir()
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none {probe}"],
        capture_output=True,
        text=True,
    )
    return "" if done.returncode == 0 else f"cannot mount a tmpfs with unshare -rm: {done.stderr}"


def test_a_disk_with_no_space_at_all_stops_kbench_run_before_the_worker(tmp_path):
    """For real, on a full tmpfs: an empty file can be created there, no line of a log."""
    require_backends("torch")
    why = _unshare_works(tmp_path)
    if why:
        pytest.skip(why)
    store = tmp_path / "s"
    store.mkdir()
    command = (
        f"mount -t tmpfs -o size=64k none {store} && "
        f"dd if=/dev/zero of={store}/filler bs=4k count=16 2>/dev/null; cd {ROOT} && "
        f"{sys.executable} -m kbench run -b torch -m mlp --dataset synthetic --steps 2 "
        f"--store {store}; echo exit $?; ls -A {store} {store}/logs"
    )
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True,
                          text=True, timeout=300, env=env)  # fmt: skip
    assert "exit 1" in done.stdout and "Traceback" not in done.stderr, done.stderr
    assert "cannot write the log of the next run" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    assert "epoch" not in done.stderr  # no worker ran
    assert ".log" not in done.stdout and ".json" not in done.stdout, done.stdout


@pytest.mark.slow
def test_a_full_disk_stops_the_sweep_and_keeps_the_finished_run(tmp_path):
    """For real: the store on a 200 KB tmpfs that a filler leaves almost no room on."""
    require_backends("torch")
    why = _unshare_works(tmp_path)
    if why:
        pytest.skip(why)
    path = write_sweep(tmp_path, batch_sizes=(8, 16))
    store = tmp_path / "s"
    store.mkdir()
    cache = tmp_path / "cache"
    script = tmp_path / "full.sh"
    script.write_text(textwrap.dedent(f"""\
        set -u
        mount -t tmpfs -o size=200k none {store}
        # leave about 12 KB: the logs fit, a result document with its sampler series does not
        dd if=/dev/zero of={store}/filler bs=4k count=47 2>/dev/null
        cd {ROOT}
        {sys.executable} -m kbench sweep {path} --store {store} \\
            > {tmp_path}/out 2> {tmp_path}/err
        echo "exit $?" >> {tmp_path}/out
        ls -a {store} > {tmp_path}/listing
        rm {store}/filler
        # the command the message gives, run as it says
        sh -c "$(grep -A1 'import it with' {tmp_path}/err | tail -1)" > {tmp_path}/merge 2>&1
        echo "exit $?" >> {tmp_path}/merge
        ls {store} > {tmp_path}/after
        """))  # fmt: skip
    env = dict(os.environ, HOME=str(tmp_path), KBENCH_CACHE_DIR=str(cache),
               PATH=f"{ROOT / 'scripts'}:{os.environ['PATH']}")  # fmt: skip
    done = subprocess.run(["unshare", "-rm", "sh", str(script)], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert done.returncode == 0, done.stderr + out + err
    assert "exit 1" in out and "Traceback" not in err, err
    assert "No space left on device" in err and "sweep t stopped" in err, err
    assert "MB free where results go" in err  # warned before it started
    assert "0 runs of this invocation finished and are saved, 1 not started" in err, err
    listing = (tmp_path / "listing").read_text().split()
    assert not [name for name in listing if name.endswith(".tmp")], listing
    assert not [name for name in listing if name.endswith(".json")], listing
    kept = list(cache.rglob("*.json"))
    assert len(kept) == 1 and RunResult.load(kept[0]).ok, err
    merge = (tmp_path / "merge").read_text()
    assert "1 runs added" in merge and "exit 0" in merge, merge
    assert f"{kept[0].name}" in (tmp_path / "after").read_text().split()


def test_low_space_is_told_before_a_sweep_starts(tmp_path):
    assert low_space_warning(tmp_path, 1) is None  # this machine has 200 MB to spare
    warning = low_space_warning(tmp_path, 10**9)  # 10^9 runs need petabytes
    assert "MB free where results go" in warning and "choose another --store" in warning


# 4. one writer at a time -------------------------------------------------------------

HOLDER = """\
import sys, time
from kbench.results.store import writer_lock
with writer_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path):
    require_backends("torch")
    store = tmp_path / "s"
    ResultStore(store).add(result("a1"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        second = kbench_here(["run", "-b", "torch", "-m", "mlp", "--dataset", "synthetic",
                             "--steps", "2", "--store", str(store)], tmp_path)  # fmt: skip
        assert time.monotonic() - started < 60
        assert second.returncode == 2, second.stderr
        assert f"process {holder.pid}" in second.stderr and str(store) in second.stderr
        assert "Traceback" not in second.stderr
        sweep = kbench_here(["sweep", str(write_sweep(tmp_path)), "--store", str(store)],
                           tmp_path)  # fmt: skip
        assert sweep.returncode == 2 and f"process {holder.pid}" in sweep.stderr, sweep.stderr
        assert len(list(store.glob("*.json"))) == 1  # neither ran anything
        ops = kbench_here(["ops", "--backend", "torch", "--sizes", "8", "--store", str(store)],
                         tmp_path)  # fmt: skip
        assert ops.returncode == 2 and f"process {holder.pid}" in ops.stderr, ops.stderr
        merge = kbench_here(["results", "--store", str(store), "--merge", str(tmp_path)], tmp_path)
        assert merge.returncode == 2 and f"process {holder.pid}" in merge.stderr
        # Reading takes no lock.
        listing = kbench_here(["results", "--store", str(store)], tmp_path)
        assert listing.returncode == 0 and "a1" in listing.stdout, listing.stderr
        dry = kbench_here(["sweep", str(write_sweep(tmp_path)), "--store", str(store),
                          "--dry-run"], tmp_path)  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        with pytest.raises(StoreLocked, match=f"process {holder.pid}"):
            with writer_lock(store):
                pass
    finally:
        holder.kill()  # as kill -9: the operating system releases the lock
        holder.wait()
    with writer_lock(store):  # free again; and re-entrant within one process
        with writer_lock(store):
            pass


def test_lock_module_imports_without_fcntl():
    """On Windows there is no fcntl: the store (its writer lock) must still import (it
    uses msvcrt). subprocess is imported first: a msvcrt it can import makes it Windows'."""
    code = (
        "import subprocess, sys, types; sys.modules['fcntl'] = None; "
        "sys.modules['msvcrt'] = types.ModuleType('msvcrt'); "
        "import kbench.results.store as m; print(m.fcntl is None)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr


def test_write_json_atomic_leaves_nothing_when_the_write_fails(tmp_path, monkeypatch):
    target = tmp_path / "x.json"
    jsonfile.write_json_atomic(target, {"a": 1})

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError):
        jsonfile.write_json_atomic(target, {"a": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert json.loads(target.read_text()) == {"a": 1}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_log_that_fills_up_during_the_run_loses_only_the_log(tmp_path, caplog):
    """/dev/full answers every write with ENOSPC, as a disk that fills mid-run does.
    Before: the log thread died on the first line, the worker blocked on its full pipe
    until the timeout, and closing the log raised OSError out of the run."""
    from kbench.run.engine import Worker

    chatty = "import sys\nfor i in range(20000): print('line', i, 'x' * 40)\nprint('last')"
    started = time.monotonic()
    worker = Worker.launch(
        [sys.executable, "-c", chatty], dict(os.environ), tmp_path, Path("/dev/full"),
        name="chatty worker",
    )  # fmt: skip
    timed_out = worker.wait(60.0)
    worker.close()
    assert worker.process.returncode == 0 and not timed_out
    assert worker.tail[-1] == "last"  # every line was still read
    assert time.monotonic() - started < 30
    assert [r for r in caplog.records if "stopped at this point" in r.getMessage()]
