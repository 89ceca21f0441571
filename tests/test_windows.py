"""Warm interleaved windows (kbench.run.windows): rounds of windows in warm workers, a
busy round dropped and said, a killed worker recorded while the others go on, and the
`kbench run` default that measures them until the ratio intervals are tight."""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, dump, require_backends, run_kbench, spinning_loops

from kbench.results.analysis import compare, widest_ratio_half_width
from kbench.results.comparison import comparison_metrics, window_record
from kbench.results.config import ConfigError, RunConfig
from kbench.results.readings import memory_peaks
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore
from kbench.run.engine import Worker
from kbench.run.protocol import (
    REPLY_FD_VARIABLE,
    ReplyWriter,
    open_reply_pipe,
    read_replies,
    reply_fd,
)
from kbench.run.runner import Runner
from kbench.run.windows import (
    WindowWorker,
    drop_reason,
    grow_on_demand,
    interleave,
    window_timeout,
)
from kbench.studies.rounds import Measure, how_to_measure, plan_comparison, plan_rounds

TINY = dict(dataset="synthetic", train_samples=256, test_samples=32, batch_size=16,
            warmup_steps=2, sample_interval_s=0.05)  # fmt: skip


def record(round_index, ips, flags=(), dropped=None, other_share=None):
    """One measured window as a comparison's document keeps it."""
    metrics = {"images_per_sec": ips, "measured_images": 64, "measured_steps": 2,
               "measured_time_s": 64 / ips, "step_times_s": [32 / ips, 32 / ips],
               "quality": {"flags": list(flags), "other_share": other_share}}  # fmt: skip
    found = window_record(round_index, round_index, 0, metrics, 0.0, 1.0)
    return dict(found, dropped=dropped)


def comparison(backend, records):
    """A warm comparison's document of ``backend`` holding ``records`` (the real builder)."""
    facts = {"steps": 2, "window_s": 1.0, "batch_size": 32, "worker_pid": 1}
    start = {"import_time_s": 1.0, "first_step_s": 0.5}
    return RunResult(
        run_id=backend, status="ok",
        config={"backend": backend, "model": "mlp", "dataset": "synthetic", "batch_size": 32,
                "repeat": 0, "mode": "train", "window_s": 1.0},
        started_at="t", wall_time_s=1.0, environment={}, data={"synthetic": True},
        metrics=comparison_metrics(records, start, facts, {}),
    )  # fmt: skip


def test_a_busy_or_shared_window_drops_its_round_and_nothing_else_does():
    calm = [record(0, 100), record(0, 200, ["slow clock: CPU at 50%"])]
    assert drop_reason(calm, ["a", "b"]) is None
    busy = [record(0, 100), record(0, 200, ["busy: 60% of the cores"])]
    assert drop_reason(busy, ["a", "b"]) == "b's window measured while busy: 60% of the cores"
    shared = [record(0, 100, ["shared GPU: 1 other process using 10 MiB"])]
    assert drop_reason(shared, ["a"]).startswith("a's window measured while shared GPU")


def test_dropped_windows_are_left_out_of_the_comparison():
    """A comparison's document per backend, its windows inside: the dropped round's are
    left out of the ratios and the figures (once a document per window)."""
    a = comparison("a", [record(0, 100), record(1, 100), record(2, 100, dropped="busy")])
    b = comparison("b", [record(0, 200), record(1, 200), record(2, 900, dropped="busy")])
    (group,) = compare([a, b])
    row = next(row for row in group.rows if row.backend == "b")
    assert (row.images_per_sec.n, row.ratio.median, row.ratio.high) == (2, 2.0, 2.0)
    assert b.metrics["images_per_sec"] == 200 and b.metrics["window"]["counted"] == 2
    assert b.metrics["window"]["dropped_windows"] == 1


def test_a_backend_whose_every_round_was_dropped_still_has_its_figure_flagged_busy():
    """A machine kept busy the whole time drops every round: the figures are then of every
    window, flagged with the share of the cores others used (before: no figure at all)."""
    busy = "a's window measured while busy: 50% of the cores used by other processes"
    a = comparison("a", [record(r, 100 + r, ["busy: 50%"], busy, 0.5) for r in range(3)])
    b = comparison("b", [record(r, 300 + r, [], busy, 0.0) for r in range(3)])
    assert a.metrics["images_per_sec"] == 101 and a.metrics["window"]["every_round_dropped"]
    (flag,) = a.metrics["quality"]["flags"]
    assert flag == (
        "busy: every round was dropped (50% of the cores used by other processes in its own "
        f"windows; the first as {busy}); the figures are of all 3 windows, measured while "
        "the machine was busy"
    ), flag
    # b's own windows were quiet: its flag says whose window dropped the rounds
    (flag,) = b.metrics["quality"]["flags"]
    assert flag.startswith(f"busy: every round was dropped (the first as {busy})"), flag
    (group,) = compare([a, b])
    row = next(row for row in group.rows if row.backend == "b")
    assert row.ratio.median == pytest.approx(301 / 101) and row.images_per_sec.n == 3
    assert any("every round was dropped" in f for f in group.rows[0].quality_flags)
    # the stop rule takes quiet rounds only: no precision is "reached" on busy ones
    many = [comparison(n, [record(r, 100.0 * (1 + i), ["busy: 50%"], busy, 0.5)
                           for r in range(8)]) for i, n in enumerate("ab")]  # fmt: skip
    assert widest_ratio_half_width(many) is None
    assert (
        widest_ratio_half_width([a, comparison("b", [record(r, 200.0) for r in range(8)])]) is None
    )


def test_a_comparison_reads_each_gpus_memory_apart():
    """A window's readings name their GPU (``device``): the comparison keeps the largest
    of each kind on each GPU, and the reader sees two GPUs (found in review: they were
    grouped by a key no reading has, and two GPUs read as one)."""

    def reading(device, value):
        return {"kind": "process_nvml", "device": device, "source": "nvml", "bytes": value}

    windows = [dict(record(r, 100.0), memory=[reading("gpu0", m0), reading("gpu1", m1)])
               for r, (m0, m1) in enumerate([(100, 200), (150, 120)])]  # fmt: skip
    doc = comparison("a", windows)
    peaks = {m["device"]: m["bytes"] for m in doc.metrics["memory"]}
    assert peaks == {"gpu0": 150, "gpu1": 200}
    peak = memory_peaks(doc)["process_nvml"]
    assert (peak.largest, peak.total) == (200, 350)


def test_window_settings_are_refused_where_they_cannot_apply():
    with pytest.raises(ConfigError, match="--repeats N"):
        RunConfig(backend="jax", model="mlp", mode="inference", window_s=1.0)
    with pytest.raises(ConfigError, match=re.escape("received it with one backend (jax)")):
        plan_rounds(["jax"], "mlp", window_s=1.0)
    with pytest.raises(ConfigError, match="received it with --repeats"):  # not both
        plan_rounds(["jax", "torch"], "mlp", 3, window_s=1.0)
    for fresh in ({"repeats": 1}, {"warm": True}):  # kbench.run() and kbench run alike
        with pytest.raises(ConfigError, match="expected --window only for warm windows"):
            plan_comparison(["jax", "torch"], "mlp", window_s=1.0, **fresh)
    assert window_timeout(0.5) == 60 and window_timeout(10) == 200


def test_one_rule_decides_fresh_processes_or_warm_windows():
    """how_to_measure, which kbench run, kbench.run(), the sweeps and reproduce all ask:
    windows unless a flag asks for fresh processes, one backend, or a setting windows
    cannot measure (RunConfig refuses window_s beside the same settings)."""
    pair = ["jax", "torch"]
    assert how_to_measure(pair, {}) == Measure(True, "", "warm interleaved windows")
    assert how_to_measure(pair, {}, fresh_flag="--repeats") == Measure(
        False, "--repeats", "--repeats asks for fresh processes"
    )
    assert how_to_measure(["jax", "jax"], {}).why == (
        "one backend (jax): windows compare several backends"
    )
    for settings, flag, key in (
        ({"mode": "inference"}, "--mode inference", "mode inference"),
        ({"distributed": "jax"}, "--distributed jax", "distributed jax"),
        ({"profile": True}, "--profile", "profile"),
        ({"target_precision": 0.05}, "--target-precision 0.05", "target_precision 0.05"),
        ({"time_budget_s": 9.0}, "--time-budget 9.0", "time_budget_s 9.0"),
    ):
        assert how_to_measure(pair, settings).reason == flag
        assert (
            how_to_measure(pair, settings, spell=str).why == f"{key} needs a fresh process per run"
        )
        config = {"mode": "train", **settings}
        with pytest.raises(ConfigError, match=re.escape(f"received {flag} too")):
            RunConfig(backend="jax", model="mlp", window_s=1.0, **config)
    assert how_to_measure(windows_flag="--windows").windows  # a study's flags alone
    with pytest.raises(ConfigError, match="expected --windows without --repeats"):
        how_to_measure(pair, {}, fresh_flag="--repeats", windows_flag="--windows")


def test_the_reply_channel_reads_lines_and_survives_garbage():
    read_end, write_end = os.pipe()
    replies: queue.Queue = queue.Queue()
    reader = threading.Thread(target=read_replies, args=(read_end, replies))
    reader.start()
    writer = ReplyWriter(write_end)
    writer.send("ready", steps=3)
    writer._file.write('{"no event": 1}\nnot json\n')
    writer._file.close()
    reader.join(timeout=5)
    got = [replies.get_nowait() for _ in range(4)]
    assert got[0] == {"event": "ready", "steps": 3}
    assert [g["event"] for g in got[1:3]] == ["garbled", "garbled"] and got[3] is None


def test_a_child_replies_on_the_pipe_it_inherited_and_sees_no_other_end():
    """The write end reaches a real child process the way a warm worker gets it
    (open_reply_pipe: pass_fds here; an inherited handle on Windows, not run here), the
    child writes through ReplyWriter.from_environment, and the read end stays the
    parent's (the child cannot read its own replies back, nor keep the pipe open)."""
    pipe = open_reply_pipe()
    child = (
        "import os, sys; sys.path.insert(0, sys.argv[1]);"
        "from kbench.run.protocol import ReplyWriter;"
        f"r = {pipe.read_fd};"
        "inherited = True\ntry: os.fstat(r)\nexcept OSError: inherited = False\n"
        "ReplyWriter.from_environment().send('ready', read_end_inherited=inherited)"
    )
    env = dict(os.environ, **{REPLY_FD_VARIABLE: pipe.value})
    replies: queue.Queue = queue.Queue()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", child, str(ROOT)], env=env, **pipe.popen_args
        )
    finally:
        pipe.close_write_end()
    reader = threading.Thread(target=read_replies, args=(pipe.read_fd, replies))
    reader.start()
    assert process.wait(timeout=60) == 0
    reader.join(timeout=10)
    assert replies.get_nowait() == {"event": "ready", "read_end_inherited": False}
    assert replies.get_nowait() is None  # the child's end closed with it: nothing holds it


def test_a_worker_started_by_hand_is_told_where_the_reply_pipe_comes_from():
    for value in ("", "handle:", "pipe", "handle:12"):  # a Windows handle, not on POSIX
        with pytest.raises(RuntimeError, match="started by kbench") as err:
            reply_fd(value)
        assert repr(value) in str(err.value)
    assert reply_fd("7") == 7


def test_every_live_worker_of_the_session_is_a_companion_of_the_others():
    """Before: on an H100, every window of `kbench tune` was dropped as "shared GPU: 7
    other processes": tune started its workers itself, and only `kbench run`'s told the
    sampler about their siblings. Now the session keeps every worker it launched, and a
    window's companions are the others still alive, whoever started them."""
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(4)]  # fmt: skip
    try:
        session: list = []
        idle = dict(runner=None, planned=None, context=None)
        workers = [WindowWorker(worker=Worker(f"w{i}", p, None, None), name=f"w{i}",
                                siblings=session, **idle)
                   for i, p in enumerate(sleepers)]  # fmt: skip
        session += workers
        assert workers[0].companions == [p.pid for p in sleepers[1:]]
        workers[1].worker.closed = True  # dropped by tune: its process is gone
        workers[2].worker.gone = object()  # crashed
        assert workers[0].companions == [sleepers[3].pid]
        assert workers[3].companions == [sleepers[0].pid]
    finally:
        for p in sleepers:
            p.kill()


def test_a_framework_that_takes_the_gpu_at_start_grows_on_demand_in_a_warm_worker():
    """Before: on an H100, `kbench tune -b jax` failed every setting after the first with
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8B": each warm worker's
    JAX took 75% of the GPU when it started. Now a warm worker of JAX or TensorFlow on a
    GPU grows on demand (said in each window), unless the user chose its memory. The
    variables that do it go into the worker's environment, not into the run's settings:
    a window whose settings said growth on would be compared apart from torch's and
    MXNet's windows (no ratio), and left undropped when its comparison is measured again."""
    expected = {"jax": ("XLA_PYTHON_CLIENT_PREALLOCATE", "false", "preallocates 75%"),
                "tensorflow": ("TF_FORCE_GPU_ALLOW_GROWTH", "true", "nearly all GPU")}  # fmt: skip
    for backend, (variable, value, default) in expected.items():
        config = RunConfig(backend=backend, model="mlp", device="gpu")
        variables, note = grow_on_demand(config)
        assert variables == {variable: value} and not config.gpu_memory_growth
        assert default in note and note.endswith("the warm workers share the GPU"), note
    for kept in (
        RunConfig(backend="torch", model="mlp", device="gpu"),  # grows on demand anyway
        RunConfig(backend="jax", model="mlp", device="cpu"),
        RunConfig(backend="jax", model="mlp", device="gpu", gpu_memory_fraction=0.3),
    ):
        assert grow_on_demand(kept) == ({}, None)


@pytest.mark.slow  # not serial: round 1's loops load every core, whatever runs beside
@pytest.mark.own_processes("a worker that crashes, raises or hangs")
def test_busy_round_dropped_and_killed_worker_recorded_while_the_others_go_on(tmp_path):
    """Round 1 beside busy loops on every core: dropped, with the reason. In round 3,
    mxnet-gluon's worker is killed mid-window: its window fails as a run killed does, and
    jax and mxnet measure round 4."""
    require_backends("jax", "mxnet", "mxnet-gluon")
    configs = [RunConfig(backend=b, model="mlp", window_s=0.3, **TINY)
               for b in ("jax", "mxnet", "mxnet-gluon")]  # fmt: skip
    loops = []

    def on_window(worker, round_index):
        if round_index == 0 and not loops:
            loops.extend(spinning_loops())
        if round_index == 1 and loops:
            for loop in loops:
                loop.kill()
                loop.wait()
            loops.clear()
        if round_index == 2 and worker.config.backend == "mxnet-gluon":
            os.kill(worker.process.pid, signal.SIGKILL)

    try:
        results, reason = interleave(
            Runner(output_dir=tmp_path),
            configs,
            max_rounds=4,
            on_window=on_window,
            check_parity=False,  # what this test checks is dropping and dying
        )
    finally:
        for loop in loops:
            loop.kill()
    assert reason == "4 rounds ran", reason
    # one document per backend, its windows inside, rewritten after each round
    assert len(results) == 3 and len(list(tmp_path.glob("*.json"))) == 3
    docs = {r.config["backend"]: r for r in results}
    by_round = {}
    for backend, doc in docs.items():
        for window in doc.metrics["windows"]["list"]:
            by_round.setdefault(window["round"], {})[backend] = window
    first = by_round[0]
    assert all("busy" in (w["dropped"] or "") for w in first.values()), first
    killed = docs["mxnet-gluon"]
    assert killed.status == "failed" and "SIGKILL" in killed.reason, killed.reason
    assert by_round[2]["mxnet-gluon"]["status"] == "failed"
    assert "SIGKILL" in by_round[2]["mxnet-gluon"]["reason"]
    assert sorted(by_round[3]) == ["jax", "mxnet"]
    assert all(w["status"] == "ok" and w["measured_steps"] > 0 for w in by_round[3].values())
    # the start's figures once per worker; one worker measured every window of a backend
    jax = docs["jax"]
    assert jax.metrics["first_step_s"] > 0 and jax.metrics["window"]["worker_pid"] > 0
    counts = jax.metrics["window"]  # round 1 dropped; another may be, beside another test
    assert counts["counted"] + counts["dropped_windows"] == 4 and counts["dropped_windows"] >= 1
    stored = {r.run_id: r for r in ResultStore(tmp_path).results()}
    assert stored[jax.run_id].metrics["windows"] == jax.metrics["windows"]


@pytest.mark.slow
@pytest.mark.own_processes("a worker timed beside busy processes")
def test_a_comparison_on_a_machine_kept_busy_ends_with_a_flagged_figure_per_backend(tmp_path):
    """Every round measured beside busy loops on every core is dropped; the comparison
    still ends with each backend's figure, flagged busy with the share of the cores other
    processes used (before: "0 windows" for every backend, no figure at all)."""
    require_backends("torch-native", "mxnet-gluon")
    configs = [RunConfig(backend=b, model="mlp", window_s=0.2, **TINY)
               for b in ("torch-native", "mxnet-gluon")]  # fmt: skip
    loops = spinning_loops()
    try:
        results, _ = interleave(Runner(output_dir=tmp_path), configs, max_rounds=3,
                                check_parity=False)  # fmt: skip
    finally:
        for loop in loops:
            loop.kill()
    assert len(results) == 2
    for doc in results:
        assert doc.ok and doc.metrics["window"]["every_round_dropped"], doc.metrics["window"]
        assert doc.metrics["images_per_sec"] > 0
        assert doc.metrics["quality"]["flags"][0].startswith("busy: every round was dropped")
    (group,) = compare(results)
    assert all(row.images_per_sec is not None for row in group.rows)
    assert any("every round was dropped" in f for f in group.rows[1].quality_flags)


# Not serial: beside another test its rounds reach +-50% all the same, but the other
# test's load would drop every round as busy (seen: 63 of 63), so the busy threshold is
# off here (test_busy_round_dropped_... checks dropping)
@pytest.mark.slow
def test_run_with_several_backends_measures_windows_and_says_how_it_stopped(home):
    require_backends("jax", "mxnet")
    done = run_kbench(
        ["run", "-b", "jax,mxnet", "-m", "mlp", "--dataset", "synthetic", "--train-samples",
         "256", "--test-samples", "32", "--batch-size", "16", "--warmup-steps", "2",
         "--window", "0.2", "--ratio-precision", "0.5", "--ratio-budget", "60",
         "--busy-threshold", "1"],
        home,
    )  # fmt: skip
    assert done.returncode == 0, dump(done)
    assert "measuring stopped: ratio precision reached" in done.stdout, done.stdout
    results = done.results()  # one document per backend, its windows inside
    assert sorted(r.config["backend"] for r in results) == ["jax", "mxnet"]
    assert {r.config["window_s"] for r in results} == {0.2}
    rounds = {w["round"] for r in results for w in r.metrics["windows"]["list"]
              if w["status"] == "ok" and not w["dropped"]}  # fmt: skip
    assert len(rounds) >= 6  # an interval at 95% needs 6
    assert "interval" in done.stdout and "windows" in done.stdout
    # progress: a line every few seconds, not one per round
    said = [line for line in done.stderr.splitlines() if line.startswith("round ")]
    assert 1 <= len(said) <= 20 and len(said) < len(rounds), said
    # parity at warm-up (tests/test_windows_parity.py): mxnet started from jax's weights,
    # its per-step losses compared with jax's running means turned into each step's
    for result in results:
        check = result.metrics["parity"]
        assert check["checked"] and check["same_computation"], check
        assert check["reference"] == "jax" and check["steps"] == 2 and check["rows"] == 16
    assert "  mxnet: same computation as jax (max |d output| " in done.stdout, done.stdout


V3_STORE = ROOT / "tests" / "stores" / "v3_windows"


def test_a_store_of_schema_3_window_documents_reads_as_one_comparison_per_worker(tmp_path):
    """tests/stores/v3_windows: a comparison of torch and torch-native written by kbench
    before comparisons were one document per backend (12 documents: 6 rounds of 2, round 3
    dropped busy). Read as 2 comparisons, with the figures the windows gave (kbench
    compare on that store printed torch 1,433 (243-3,484, n=5), torch-native x2.97
    (0.33-7.35, 94% interval, n=5))."""
    store = tmp_path / "store"
    shutil.copytree(V3_STORE, store)
    assert len(list(store.glob("*.json"))) == 12
    results = ResultStore(store).results()
    assert sorted(r.config["backend"] for r in results) == ["torch", "torch-native"]
    for doc in results:
        assert doc.schema_version == 4 and doc.ok and doc.config["repeat"] == 0
        windows = doc.metrics["windows"]["list"]
        assert [w["round"] for w in windows] == list(range(6))
        assert [bool(w["dropped"]) for w in windows] == [False, False, True, False, False, False]
        assert doc.metrics["window"]["counted"] == 5 and doc.metrics["window"]["steps"] == 4
    entries = ResultStore(store).entries()
    assert sorted(e.run_id for e in entries) == sorted(r.run_id for r in results)
    (group,) = compare(results, "torch")
    torch, native = group.rows
    assert (round(torch.images_per_sec.median), torch.images_per_sec.n) == (1433, 5)
    assert (round(torch.images_per_sec.low), round(torch.images_per_sec.high)) == (243, 3484)
    assert native.ratio_interval.n == 5 and round(native.ratio_interval.median, 2) == 2.97
    assert (
        round(native.ratio_interval.low, 2) == 0.33 and round(native.ratio_interval.high, 2) == 7.35
    )


def test_a_schema_3_store_is_filtered_and_listed_as_its_comparisons(tmp_path):
    """Found in review: the filters chose window files before they were read as one
    comparison (``run_id=`` of a listed run matched nothing, ``repeat=0`` gave one-window
    comparisons), the listing's throughput was the median of every window, dropped ones
    too, and a comparison superseded as a document came back beside its windows."""
    store = tmp_path / "store"
    shutil.copytree(V3_STORE, store)
    listed = {e.run_id: e for e in ResultStore(store).entries()}
    torch_id = next(i for i in listed if "-torch-mlp-" in i)
    (only,) = ResultStore(store).results([Filter.parse(f"run_id={torch_id}")])
    assert len(only.metrics["windows"]["list"]) == 6
    (first,) = ResultStore(store).results([Filter.parse("repeat=0"), Filter.parse(
        "backend=torch")])  # fmt: skip
    assert len(first.metrics["windows"]["list"]) == 6
    assert round(listed[torch_id].images_per_sec) == 1433  # compare's median (5 counted)
    # superseded whole (a sweep measures it again): one document, left out, no windows back
    window = dict(only.metrics["window"], superseded="superseded: measured again")
    ResultStore(store).add(dataclasses.replace(only, metrics=dict(only.metrics, window=window)))
    again = [r for r in ResultStore(store).results() if r.run_id == torch_id]
    assert len(again) == 1 and again[0].superseded == "superseded: measured again"
