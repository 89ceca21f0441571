"""Sweep files: checked before anything runs, expanded in order, resumed after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import ROOT, kbench_here, require_backends, run_kbench

from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.studies.sweep import Progress, SweepError, load_sweep, parse_sweep, worker_groups
from kbench.views import tables

TINY = {"model": "mlp", "dataset": "synthetic", "steps": 2, "warmup_steps": 1,
        "train_samples": 64, "test_samples": 16}  # fmt: skip


def sweep(**sections):
    return dict({"name": "t", "settings": dict(TINY)}, **sections)


def error_of(document) -> SweepError:
    with pytest.raises(SweepError) as caught:
        parse_sweep(document, "f.yaml")
    return caught.value


@pytest.mark.parametrize(
    "document, where, message",
    [
        ("just text", "", "expected a mapping"),
        (sweep(matrx={"backend": ["jax"]}), "matrx", "Did you mean 'matrix'"),
        (sweep(matrix={"backend": "jax"}), "matrix.backend", "non-empty list"),
        (sweep(matrix={"backend": []}), "matrix.backend", "non-empty list"),
        (sweep(matrix={"backend": ["jax"], "batch_size": [8, 0]}), "matrix.batch_size[1]",
         "batch_size: expected a positive integer; received 0"),
        (sweep(matrix={"backend": ["jax", "tensorflo"]}), "matrix.backend[1]",
         "Did you mean 'tensorflow'"),
        (sweep(matrix={"backend": ["jax"], "batchsize": [8]}), "matrix.batchsize",
         "Did you mean 'batch_size'"),
        (sweep(matrix={"backend": ["jax"]}, repeats=0), "repeats", "positive integer"),
        (sweep(matrix={"backend": ["jax"], "repeat": [0, 1]}), "matrix.repeat", "use repeats"),
        (dict(sweep(matrix={"backend": ["jax"]}), name="a b"), "name", "letters, digits"),
        (sweep(matrix={"backend": ["jax", "jax"]}), "matrix", "declared twice"),
        (sweep(groups=[{"settings": {"backend": "jax"}, "reduced": {"repeats": 2}}]),
         "groups[0].reduced.repeats", "whole file"),
        (sweep(settings=dict(TINY, backend="jax", batch_size=8), matrix={"batch_size": [8]}),
         "settings.batch_size", "not both"),
        (sweep(groups=[{"settings": {"backend": "jax", "model": "lstm",
                                     "dataset": "fashion_mnist"}}]),
         "groups[0].settings.dataset", "takes sequences"),
        (sweep(settings={"model": "mlp", "dataset": "fashion_mnist", "num_classes": 3},
               matrix={"backend": ["jax"]}), "a run with", "only synthetic data takes them"),
        (sweep(settings=dict(TINY, window_s=1.0), matrix={"backend": ["jax", "torch"]}),
         "settings.window_s", "at the top of the file (measure: windows"),
        (sweep(matrix={"backend": ["jax"]}, measure="window"), "measure", "Did you mean 'windows'"),
        (sweep(matrix={"backend": ["jax"]}, window=0), "window", "above 0"),
        (sweep(matrix={"backend": ["jax"]}, warm="yes"), "warm", "true or false"),
        (sweep(groups=[{"settings": {"backend": "jax"}, "reduced": {"warm": True}}]),
         "groups[0].reduced.warm", "whole file"),
    ],
)  # fmt: skip
def test_bad_sweep_files_name_the_place_and_the_fix(document, where, message):
    err = error_of(document)
    assert err.where.startswith(where) and message in err.message, str(err)


def test_unreadable_and_unparsable_files(tmp_path):
    with pytest.raises(SweepError, match="readable YAML file"):
        load_sweep(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("name: x\nmatrix: [unclosed\n")
    with pytest.raises(SweepError, match="does not parse") as caught:
        load_sweep(tmp_path / "bad.yaml")
    # read fast by libyaml, then again by PyYAML's own reader for a message that quotes
    # the line, with a caret under where the list opened
    assert "    matrix: [unclosed\n            ^" in caught.value.message
    (tmp_path / "deep.yaml").write_text("name: x\nmatrix: " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(SweepError, match="nested too deep"):  # before: RecursionError
        load_sweep(tmp_path / "deep.yaml")
    # a chain of 994 merge keys: libyaml reads it, building it recursed (found in review)
    merges = "name: x\nsettings: " + "{<<: " * 994 + "{x: 1}" + "}" * 994
    (tmp_path / "merges.yaml").write_text(merges)
    with pytest.raises(SweepError, match="nested too deep"):
        load_sweep(tmp_path / "merges.yaml")
    # read, but deeper than any sweep: refused with the depth, as a study file is
    (tmp_path / "forty.yaml").write_text("name: x\ndescription: " + "[" * 40 + "]" * 40)
    with pytest.raises(SweepError, match="nested at most 32 deep"):
        load_sweep(tmp_path / "forty.yaml")


def test_without_libyaml_sweeps_load_and_fail_the_same(tmp_path, monkeypatch):
    """PyYAML built without libyaml (no CSafeLoader) reads with its own reader."""
    shipped = load_sweep(ROOT / "sweeps" / "lenet_epochs.yaml")
    monkeypatch.delattr(yaml, "CSafeLoader")
    assert load_sweep(ROOT / "sweeps" / "lenet_epochs.yaml") == shipped
    (tmp_path / "tab.yaml").write_text("name: x\nsettings:\t{}\n")  # libyaml takes the tab
    with pytest.raises(SweepError, match="does not parse"):
        load_sweep(tmp_path / "tab.yaml")
    (tmp_path / "deep.yaml").write_text("name: x\nmatrix: " + "[" * 1_000 + "]" * 1_000)
    with pytest.raises(SweepError, match="nested too deep"):
        load_sweep(tmp_path / "deep.yaml")


def test_expansion_interleaves_backends_and_reduced_sections_win():
    document = sweep(
        repeats=2,
        matrix={"backend": ["torch", "jax"], "batch_size": [8, 16]},
        groups=[{"name": "g1", "settings": {"train_samples": 1000}},
                {"name": "g2", "matrix": {"batch_size": [4]}}],
        reduced={"settings": {"train_samples": 64}, "repeats": 1},
    )  # fmt: skip
    full = parse_sweep(document, "f.yaml")
    labels = [(r.group, r.config.batch_size, r.config.backend, r.config.repeat) for r in full.runs]
    assert labels[:4] == [("g1", 8, "torch", 0), ("g1", 8, "jax", 0),
                          ("g1", 16, "torch", 0), ("g1", 16, "jax", 0)]  # fmt: skip
    assert labels[4:6] == [("g2", 4, "torch", 0), ("g2", 4, "jax", 0)]
    assert len(full.runs) == 12 and full.runs[6].config.repeat == 1
    assert full.runs[0].config.train_samples == 1000  # the group's setting
    reduced = parse_sweep(document, "f.yaml", reduced=True)
    assert len(reduced.runs) == 6  # one repeat
    # the file's reduced section is applied after the group's own settings
    assert {r.config.train_samples for r in reduced.runs} == {64}
    assert len({r.key for r in full.runs}) == 12
    assert full.varying() == ["backend", "batch_size", "train_samples", "repeat"]


def test_a_warm_sweep_shares_a_worker_within_each_repeat_only():
    """--warm: each repeat's runs that can share a worker process share one (backend,
    data format, threads, switches alike); a repeat never shares with another, so the
    rounds stay interleaved; a data-parallel run is always its own. (The shared sweep,
    tests/shared_sweep.py, runs --warm for real.)"""
    pairs = {"backend": ["torch", "jax"], "batch_size": [8, 16]}
    ddp = {"backend": "torch-native", "distributed": "torch-ddp", "workers": 2}
    document = sweep(
        repeats=2,
        groups=[{"name": "g1", "matrix": pairs},
                {"name": "g2", "settings": {"data_format": "channels_first"}, "matrix": pairs},
                {"name": "ddp", "settings": ddp, "matrix": {"batch_size": [8, 16]}}],
    )  # fmt: skip
    runs = parse_sweep(document, "f.yaml").runs
    groups = worker_groups(runs)
    assert sum(len(g) for g in groups) == len(runs)
    described = [
        {(r.group, r.config.backend, r.config.batch_size, r.config.repeat) for r in g}
        for g in groups
    ]
    for repeat in (0, 1):
        for backend in ("torch", "jax"):
            assert {("g1", backend, b, repeat) for b in (8, 16)} in described
            assert {("g2", backend, b, repeat) for b in (8, 16)} in described  # NCHW
        for b in (8, 16):
            assert {("ddp", "torch-native", b, repeat)} in described
    assert len(groups) == 2 * (4 + 2)
    # the repeats in turn: every group of repeat 0 before any of repeat 1
    assert [g[0].config.repeat for g in groups] == [0] * 6 + [1] * 6


def test_a_files_warm_shares_workers_for_its_fresh_runs_at_its_size():
    """warm: true (or reduced.warm) plans the fresh-process runs as --warm does: each
    round's runs of one backend in one worker; the other size keeps one process a run."""
    from kbench.studies.sweep_runs import sweep_plans

    document = sweep(repeats=2, matrix={"backend": ["torch", "jax"], "batch_size": [8, 16]},
                     reduced={"warm": True})  # fmt: skip
    for reduced, warm in ((False, False), (True, True)):
        parsed = parse_sweep(document, "f.yaml", reduced=reduced)
        assert parsed.warm is warm
        [(runs, plan)] = sweep_plans(parsed, parsed.runs)
        assert plan.schedule == ("warm" if warm else "fresh") and len(runs) == 8
    assert parse_sweep(dict(document, warm=True), "f.yaml").warm


def test_shipped_example_sweeps_load_at_both_sizes():
    files = sorted((ROOT / "sweeps").glob("*.yaml"))
    assert len(files) >= 4
    for path in files:
        for reduced in (False, True):
            loaded = load_sweep(path, reduced=reduced)
            assert loaded.runs, path
        yaml.safe_load(path.read_text())


def test_dry_run_lists_runs_and_writes_nothing(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep(matrix={"backend": ["torch", "jax"]})))
    done = kbench_here(["sweep", str(path), "--dry-run", "--store", str(tmp_path / "out")],
                      tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 runs, 0 already done, 2 to run" in done.stdout
    assert "torch" in done.stdout and "to run" in done.stdout
    assert not (tmp_path / "out").exists()


def test_a_bad_file_fails_before_anything_runs(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep(matrix={"backend": ["torch"], "batch_size": [-1]})))
    done = kbench_here(["sweep", str(path), "--store", str(tmp_path / "out")], tmp_path)
    assert done.returncode == 2
    assert "matrix.batch_size[0]: batch_size: expected a positive integer" in done.stderr
    assert not (tmp_path / "out").exists()


def _start_sweep(path: Path, out: Path, home: Path, *extra: str, **env_extra) -> subprocess.Popen:
    env = dict(os.environ, HOME=str(home), KBENCH_CACHE_DIR=str(home / "cache"), **env_extra)
    return subprocess.Popen(
        [sys.executable, "-m", "kbench", "sweep", str(path), "--store", str(out), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.own_processes("a sweep killed mid-run")
def test_killed_sweep_resumes_without_losing_or_repeating_a_run(tmp_path):
    require_backends("torch-native")
    path = tmp_path / "s.yaml"
    # Four runs; the last two cannot finish within their 0.5 s timeout (importing PyTorch
    # alone takes longer).
    path.write_text(yaml.safe_dump(sweep(
        settings=dict(TINY, backend="torch-native"),
        matrix={"batch_size": [8, 16]},
        groups=[{"name": "ok"}, {"name": "late", "settings": {"timeout_s": 0.5, "seed": 1}}],
    )))  # fmt: skip
    out = tmp_path / "out"
    first = _start_sweep(path, out, tmp_path)
    deadline = time.monotonic() + 300
    while not list(out.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(out.glob("*.json")), "no run finished within 300 s"
    children = psutil.Process(first.pid).children(recursive=True)
    first.send_signal(signal.SIGTERM)  # as `kill` does, mid-sweep
    output, _ = first.communicate(timeout=60)
    assert first.returncode != 0, output
    psutil.wait_procs(children, timeout=10)
    assert not [c for c in children if c.is_running()], "a worker outlived the killed sweep"
    finished = ResultStore(out).entries()
    assert 1 <= len(finished) < 4
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    second = run_kbench(["sweep", str(path), "--store", str(out)], tmp_path)
    assert f"{len(finished)} already done" in second.stdout, second.stdout
    entries = ResultStore(out).entries()
    assert len(entries) == 4 and len({e.run_key for e in entries}) == 4
    statuses = sorted(e.status for e in entries)
    assert statuses == ["ok", "ok", "timeout", "timeout"], second.stdout + second.stderr
    assert second.returncode == 1  # its own runs included the failures
    assert "Throughput, images/s" in second.stdout

    third = run_kbench(["sweep", str(path), "--store", str(out)], tmp_path)
    assert "4 already done, 0 to run" in third.stdout and third.returncode == 0
    assert len(ResultStore(out).entries()) == 4

    retried = run_kbench(["sweep", str(path), "--store", str(out), "--retry-failed",
                          "--filter", "batch_size=8"], tmp_path)  # fmt: skip
    assert "1 already done, 1 to run" in retried.stdout, retried.stdout
    store = ResultStore(out)
    assert len(store.entries()) == 5
    latest = store.results(latest_only=True)
    assert len(latest) == 4 and sum(r.status == "timeout" for r in latest) == 2
    assert all(r.sweep["name"] == "t" and r.sweep["run_key"] for r in latest)


@pytest.mark.slow
@pytest.mark.own_processes("a sweep killed mid-run")
def test_a_killed_warm_sweep_keeps_the_runs_its_worker_finished(tmp_path):
    """--warm: one worker runs the three runs; killed during the third, the sweep saves
    the two that had replied (the second marked warm), marks the third interrupted, and
    the same command again would run only the third."""
    require_backends("torch-native")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep(
        settings=dict(TINY, backend="torch-native", sample_interval_s=0),
        groups=[{"name": "quick", "matrix": {"batch_size": [8, 16]}},
                {"name": "long", "settings": {"steps": 100_000, "batch_size": 4}}],
    )))  # fmt: skip
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    running = _start_sweep(path, out, tmp_path, "--warm", TMPDIR=str(scratch))
    deadline = time.monotonic() + 300  # a warm worker's run is stored as it replies
    while len(list(out.glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(out.glob("*.json"))) == 2, "two runs did not reply"
    running.send_signal(signal.SIGTERM)
    output, _ = running.communicate(timeout=60)
    assert running.returncode != 0, output
    kept = sorted(ResultStore(out).results(), key=lambda r: r.started_at)
    assert [(r.status, r.config["batch_size"]) for r in kept] == [("ok", 8), ("ok", 16)], output
    assert [bool(r.metrics.get("warm_worker")) for r in kept] == [False, True]
    assert all(r.sweep["group"] == "quick" for r in kept)
    (interrupted,) = (out / "logs").glob("*.interrupted.json")
    assert '"steps": 100000' in interrupted.read_text()
    again = kbench_here(["sweep", str(path), "--store", str(out), "--dry-run"], tmp_path)
    assert "3 runs, 2 already done, 1 to run" in again.stdout, again.stdout


def _result(status):
    return RunResult(
        run_id=status,
        status=status,
        config={"backend": "tensorflow", "model": "lenet5"},
        started_at="2026-01-01T00:00:00+00:00",
        wall_time_s=1.0,
        environment={},
        data={},
        reason=None if status == "ok" else f"{status} because",
    )


def test_progress_and_exit_status_count_unsupported_runs_apart_from_failures():
    lines = []
    progress = Progress(total=4, write=lines.append)
    for status in ("ok", "unsupported", "timeout", "ok"):
        progress.finished(_result(status), 1.0)
    assert (progress.failures, progress.unsupported) == (1, 1)
    assert "1 failed, 1 unsupported here" in progress.line("x")
    assert [_result(s).failed for s in ("ok", "unsupported", "failed", "oom", "timeout")] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert tables.not_ok_lines([_result("ok"), _result("unsupported")]) == [
        "  tensorflow/lenet5: unsupported: unsupported because"
    ]
